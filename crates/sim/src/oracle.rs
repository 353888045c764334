//! What the clients were told, and what the cluster must hold afterwards. Pure: the world
//! records each acknowledgement here and asks it to judge what it reads back.
//!
//! Each object has one writer, which sends its next write only once the cluster has
//! acknowledged the last (it resends a write, with the same request id, until then). So
//! after the run every object must read back as its last write, and the versions one
//! object's writes were acknowledged at must grow.

use std::collections::BTreeMap;

use map::placement::OsdId;
use messenger::message::{LogEntry, PgInfo, ReqId, Version};

#[derive(Default)]
pub struct Oracle {
    /// Each object's acknowledged writes, in order: the version and the content.
    objects: BTreeMap<String, Vec<(Version, Vec<u8>)>>,
}

impl Oracle {
    /// Notes that the cluster acknowledged `content` as `object`'s next write, at `version`.
    pub fn acked(
        &mut self,
        object: &str,
        content: Vec<u8>,
        version: Version,
    ) -> Result<(), String> {
        let writes = self.objects.entry(object.to_owned()).or_default();
        if let Some((before, _)) = writes.last() {
            if *before >= version {
                return Err(format!(
                    "{object}: write {} acknowledged at {version:?}, not after write {} at \
                     {before:?}: versions must grow",
                    writes.len() + 1,
                    writes.len()
                ));
            }
        }
        writes.push((version, content));
        Ok(())
    }

    pub fn objects(&self) -> impl Iterator<Item = &str> {
        self.objects.keys().map(String::as_str)
    }

    pub fn writes(&self) -> usize {
        self.objects.values().map(Vec::len).sum()
    }

    /// Judges what a read of `object` returned (`None`: no such object): its last write.
    pub fn check(&self, object: &str, read: Option<&[u8]>) -> Result<(), String> {
        let writes = self
            .objects
            .get(object)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let Some((version, last)) = writes.last() else {
            return match read {
                None => Ok(()),
                Some(bytes) => Err(format!("{object}: {} bytes no client wrote", bytes.len())),
            };
        };
        if read == Some(last.as_slice()) {
            return Ok(());
        }
        let what = match read {
            None => "nothing".to_owned(),
            Some(bytes) => match writes.iter().position(|(_, w)| w == bytes) {
                Some(i) => format!("write {} of {}", i + 1, writes.len()),
                None => format!("{} bytes no client wrote", bytes.len()),
            },
        };
        Err(format!(
            "{object}: read back {what}, not its last write ({} of {}, acknowledged at \
             {version:?})",
            writes.len(),
            writes.len()
        ))
    }
}

/// Where the logs of one PG's copies (the primary's first) disagree, once every fault has
/// healed: a copy whose log ends elsewhere than the primary's, or that holds another write
/// at a version, over the entries every copy still keeps (each trims its own tail).
pub fn diverged(logs: &[(OsdId, (PgInfo, Vec<LogEntry>))]) -> Option<String> {
    let (primary, (info, _)) = logs.first()?;
    if let Some((osd, (other, _))) = logs.iter().find(|(_, (i, _))| i.last != info.last) {
        return Some(format!(
            "osd.{}'s log ends at {:?}, the primary osd.{}'s at {:?}",
            osd.0, other.last, primary.0, info.last
        ));
    }
    let from = logs
        .iter()
        .filter_map(|(_, (_, log))| log.first().map(|e| e.version))
        .max()?;
    let kept = |log: &[LogEntry]| -> Vec<(Version, ReqId)> {
        log.iter()
            .filter(|e| e.version >= from)
            .map(|e| (e.version, e.reqid))
            .collect()
    };
    let theirs = kept(&logs[0].1 .1);
    logs.iter().skip(1).find_map(|(osd, (_, log))| {
        let mine = kept(log);
        (mine != theirs).then(|| {
            let at = mine.iter().zip(&theirs).position(|(a, b)| a != b);
            let at = at.unwrap_or(mine.len().min(theirs.len()));
            format!(
                "osd.{} holds {:?} where the primary osd.{} holds {:?} (entry {at} from {from:?})",
                osd.0,
                mine.get(at),
                primary.0,
                theirs.get(at)
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(seq: u64) -> Version {
        Version { epoch: 1, seq }
    }

    #[test]
    fn only_the_last_acknowledged_write_may_be_read_back() -> Result<(), String> {
        let mut oracle = Oracle::default();
        oracle.acked("o", b"a".to_vec(), version(1))?;
        oracle.acked("o", b"b".to_vec(), version(2))?;
        assert!(oracle.check("o", Some(b"b")).is_ok());
        assert!(
            oracle.check("o", Some(b"a")).is_err(),
            "an overwritten write came back"
        );
        assert!(
            oracle.check("o", None).is_err(),
            "an acknowledged write was lost"
        );
        assert!(oracle.check("o", Some(b"x")).is_err());
        assert!(oracle.check("never-written", None).is_ok());
        assert!(oracle.check("never-written", Some(b"a")).is_err());
        Ok(())
    }

    fn log(osd: u32, versions: &[(u64, u64)]) -> (OsdId, (PgInfo, Vec<LogEntry>)) {
        let log: Vec<LogEntry> = versions
            .iter()
            .map(|&(seq, request)| LogEntry {
                version: version(seq),
                object: map::ObjectName::new("o").expect("a name"),
                reqid: ReqId {
                    client: 1,
                    seq: request,
                },
            })
            .collect();
        let last = log.last().map(|e| e.version).unwrap_or_default();
        (OsdId(osd), (PgInfo { last }, log))
    }

    #[test]
    fn copies_agree_over_what_they_all_keep_and_a_diverged_one_is_named() {
        let primary = log(0, &[(3, 3), (4, 4), (5, 5)]);
        // A replica that trimmed more of its tail agrees.
        assert_eq!(
            diverged(&[primary.clone(), log(1, &[(4, 4), (5, 5)])]),
            None
        );
        let behind = diverged(&[primary.clone(), log(2, &[(3, 3), (4, 4)])]);
        assert!(behind.is_some_and(|d| d.contains("osd.2's log ends at")));
        let other = diverged(&[primary.clone(), log(1, &[(4, 4), (5, 9)])]);
        assert!(other.is_some_and(|d| d.starts_with("osd.1 holds")));
        assert_eq!(diverged(&[log(0, &[]), log(1, &[])]), None);
    }

    #[test]
    fn an_acknowledgement_at_a_version_not_above_the_last_is_refused() -> Result<(), String> {
        let mut oracle = Oracle::default();
        oracle.acked("o", b"a".to_vec(), version(5))?;
        assert!(oracle.acked("o", b"b".to_vec(), version(5)).is_err());
        assert!(oracle.acked("o", b"b".to_vec(), version(4)).is_err());
        Ok(())
    }
}
