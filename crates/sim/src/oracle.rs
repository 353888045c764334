//! What the clients were told, and what the cluster must hold afterwards. Pure: the world
//! records each acknowledgement here and asks it to judge what it reads back.
//!
//! Each object has one writer, which sends its next write only once the cluster has
//! acknowledged the last (it resends a write, with the same request id, until then). So
//! after the run every object must read back as its last write, and the versions one
//! object's writes were acknowledged at must grow.

use std::collections::BTreeMap;

use messenger::message::Version;

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

    #[test]
    fn an_acknowledgement_at_a_version_not_above_the_last_is_refused() -> Result<(), String> {
        let mut oracle = Oracle::default();
        oracle.acked("o", b"a".to_vec(), version(5))?;
        assert!(oracle.acked("o", b"b".to_vec(), version(5)).is_err());
        assert!(oracle.acked("o", b"b".to_vec(), version(4)).is_err());
        Ok(())
    }
}
