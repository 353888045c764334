//! Scrub of erasure-coded PGs (docs/design/erasure.md, §10): shards differ by design, so
//! they are not compared with each other but with what the code gives. For each object the
//! primary asks every position's holder for its shard head (version, size, position), takes
//! the head most positions agree on, then reads the shards in windows and encodes them
//! again. A shard is bad when it is missing, unreadable (its store's integrity check
//! failed), at another version or position, or the one whose exclusion makes the others
//! agree. With repair, each bad shard is rebuilt on its holder from the others, never from
//! a shard found bad. What cannot be decided (m = 1, or two shards altered in one window)
//! is reported and left, as two differing replicas are.

use std::collections::{BTreeMap, BTreeSet};

use ec::{Coder, Profile};
use map::placement::OsdId;
use map::ObjectName;
use messenger::message::{Claim, ScrubFinding, ShardHead};

use crate::erasure::{Shards, Word};
use crate::recovery::Side;
use crate::OsdState;

/// Bytes of each shard read and encoded at once.
const WINDOW_BYTES: u64 = 256 << 10;

/// How a window of an object's shards relates to its code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Agreement {
    /// The shards compared are what the code gives (trivially, when only k are present).
    Agree,
    /// They are once this position is left out: its shard is bad.
    Except(usize),
    /// They are not, and no one shard's exclusion makes the rest agree; or fewer than k
    /// are present.
    Undecided(String),
}

/// Compares the present shards of one window (`None`: not compared) with what the code
/// gives, and names the one bad shard when leaving it out makes the others agree. In a
/// pool sealed at the edge, `words` holds each present shard's block records, each block's
/// words one code word of their own; empty otherwise.
pub fn agreement(
    coder: &mut Coder,
    shards: &[Option<&[u8]>],
    words: &[Option<&[Word]>],
) -> Agreement {
    let k = coder.profile().k();
    let present: Vec<usize> = (0..shards.len()).filter(|p| shards[*p].is_some()).collect();
    if present.len() < k {
        return Agreement::Undecided(format!(
            "{} shards could be compared, {k} are needed to decode the object",
            present.len()
        ));
    }
    if agree(coder, shards, words, &present) {
        return Agreement::Agree;
    }
    let suspects: Vec<usize> = present
        .iter()
        .copied()
        .filter(|left_out| {
            let rest: Vec<usize> = present.iter().copied().filter(|p| p != left_out).collect();
            rest.len() > k && agree(coder, shards, words, &rest)
        })
        .collect();
    match suspects.as_slice() {
        [bad] => Agreement::Except(*bad),
        _ if present.len() == k + 1 => Agreement::Undecided(format!(
            "the {} shards compared disagree with their code: one is wrong, and telling \
             which needs one more",
            k + 1
        )),
        _ => Agreement::Undecided(
            "the shards disagree with their code, and leaving out no single one makes the \
             others agree"
                .into(),
        ),
    }
}

/// Whether the shards at `positions` are one codeword: the shards decoded from the first k
/// of them are the others; and so are their words, block by block.
fn agree(
    coder: &mut Coder,
    shards: &[Option<&[u8]>],
    words: &[Option<&[Word]>],
    positions: &[usize],
) -> bool {
    let k = coder.profile().k();
    if positions.len() <= k {
        return true;
    }
    let mut decoded: Vec<Option<Vec<u8>>> = vec![None; shards.len()];
    for p in &positions[..k] {
        decoded[*p] = shards[*p].map(<[u8]>::to_vec);
    }
    if coder.reconstruct(&mut decoded).is_err() {
        return false;
    }
    let bytes_agree = positions[k..]
        .iter()
        .all(|p| decoded[*p].as_deref() == shards[*p]);
    let blocks = words.iter().flatten().map(|w| w.len()).next().unwrap_or(0);
    bytes_agree
        && (0..blocks).all(|block| {
            let mut row: Vec<Option<Word>> = vec![None; shards.len()];
            for p in &positions[..k] {
                row[*p] = words[*p].map(|w| w[block]);
            }
            coder.reconstruct_words(&mut row).is_ok()
                && positions[k..]
                    .iter()
                    .all(|p| row[*p] == words[*p].map(|w| w[block]))
        })
}

/// The object's head: the primary's (at position `primary`), which its reads go by, if it
/// holds its own position's shard; else the head most positions agree on. With each
/// position's head that differs from it, in words. `None` when no position holds a shard
/// (the object is gone everywhere).
pub fn common_head(
    heads: &[Result<Option<ShardHead>, String>],
    primary: Option<usize>,
) -> Option<(ShardHead, BTreeMap<usize, String>)> {
    let own = primary.and_then(|p| match heads.get(p) {
        Some(Ok(Some(h))) if usize::from(h.shard) == p => Some(*h),
        _ => None,
    });
    let mut counts: BTreeMap<(u64, u64, u64), usize> = BTreeMap::new();
    for (position, head) in heads.iter().enumerate() {
        if let Ok(Some(h)) = head {
            if usize::from(h.shard) == position {
                *counts
                    .entry((h.version.epoch, h.version.seq, h.size))
                    .or_default() += 1;
            }
        }
    }
    let (epoch, seq, size) = match own {
        Some(h) => (h.version.epoch, h.version.seq, h.size),
        None => *counts.iter().max_by_key(|(key, count)| (**count, **key))?.0,
    };
    let common = heads
        .iter()
        .enumerate()
        .find_map(|(position, head)| match head {
            Ok(Some(h))
                if usize::from(h.shard) == position
                    && (h.version.epoch, h.version.seq, h.size) == (epoch, seq, size) =>
            {
                Some(*h)
            }
            _ => None,
        })
        .expect("a counted head");
    let mut bad = BTreeMap::new();
    for (position, head) in heads.iter().enumerate() {
        let why = match head {
            Err(why) if why.is_empty() => continue,
            Err(why) => format!("unreadable ({why})"),
            Ok(None) => "missing".into(),
            Ok(Some(h)) if usize::from(h.shard) != position => {
                format!("holds shard {} in place of {position}", h.shard)
            }
            Ok(Some(h)) if h.version != common.version => format!(
                "version {}.{} (others {}.{})",
                h.version.epoch, h.version.seq, common.version.epoch, common.version.seq
            ),
            Ok(Some(h)) if h.size != common.size => {
                format!("size {} (others {})", h.size, common.size)
            }
            Ok(Some(_)) => continue,
        };
        bad.insert(position, why);
    }
    Some((common, bad))
}

/// Whether any position holds a newer version than `common`: scrub does not roll a write
/// back.
fn newer_than(heads: &[Result<Option<ShardHead>, String>], common: &ShardHead) -> bool {
    heads
        .iter()
        .any(|h| matches!(h, Ok(Some(h)) if h.version > common.version))
}

/// What scrub found wrong with one object's shards.
pub struct Found {
    pub finding: ScrubFinding,
    /// The positions whose shards are bad.
    bad: BTreeSet<usize>,
    /// The good positions (at least k when repairable).
    good: Vec<usize>,
}

/// Scrubs `name` in the PG `shards` reads: what is wrong with its shards, if anything, and
/// the bytes read.
pub async fn object(shards: &Shards<'_>, name: &ObjectName) -> (Option<Found>, u64) {
    let profile = shards.profile;
    let positions = 0..profile.shards();
    // Positions with no holder are not compared: the empty reason says so.
    let heads: Vec<Result<Option<ShardHead>, String>> =
        futures::future::join_all(positions.clone().map(|p| async move {
            if shards.holders[p].is_none() {
                return Err(String::new());
            }
            shards
                .head_at(name, p)
                .await
                .map_err(|why| match why.is_empty() {
                    true => "no reason given".into(),
                    false => why,
                })
        }))
        .await;
    let primary = shards
        .holders
        .iter()
        .position(|h| *h == Some(shards.inner.id));
    let Some((common, mut bad)) = common_head(&heads, primary) else {
        return (None, 0);
    };
    let mut undecided = None;
    if newer_than(&heads, &common) {
        undecided = Some("a shard holds a newer version than the others".to_string());
    }
    let mut read = 0;
    if undecided.is_none() {
        let (found, why, bytes) = windows(shards, name, &common, &bad).await;
        read = bytes;
        bad.extend(found);
        undecided = why;
    }
    if bad.is_empty() && undecided.is_none() {
        return (None, read);
    }
    let holder = |p: usize| shards.holders[p].expect("a compared position has a holder");
    let mut what: Vec<String> = bad
        .iter()
        .map(|(p, why)| format!("osd.{}: shard {p} {why}", holder(*p).0))
        .collect();
    let good: Vec<usize> = positions
        .filter(|p| shards.holders[*p].is_some() && !bad.contains_key(p))
        .collect();
    if let Some(why) = &undecided {
        what.push(format!("{why}: not repairable by scrub"));
    } else if good.len() < profile.k() {
        what.push(format!(
            "{} good shards, {} are needed to rebuild the others: not repairable by scrub",
            good.len(),
            profile.k()
        ));
    }
    // Undecided: any compared shard may be the bad one.
    let named: Vec<OsdId> = match undecided {
        Some(_) => good.iter().chain(bad.keys()).map(|p| holder(*p)).collect(),
        None => bad.keys().map(|p| holder(*p)).collect(),
    };
    let finding = ScrubFinding {
        object: name.clone(),
        osds: named,
        what: what.join("; "),
        repairable: undecided.is_none() && good.len() >= profile.k(),
        repaired: false,
    };
    let bad = bad.into_keys().collect();
    (Some(Found { finding, bad, good }), read)
}

/// Rebuilds each bad shard of `found` on its holder from the good ones, under `claim`.
pub async fn repair(inner: &OsdState, shards: &Shards<'_>, found: &mut Found, claim: Claim) {
    if !found.finding.repairable {
        return;
    }
    let holder = |p: usize| shards.holders[p].expect("a compared position has a holder");
    // The local shard's head first, when it is good: no pull over the network.
    let source = found
        .good
        .iter()
        .map(|p| holder(*p))
        .find(|osd| *osd == inner.id)
        .unwrap_or_else(|| holder(found.good[0]));
    let object = &found.finding.object;
    for p in &found.bad {
        let to = match inner.side(holder(*p)) {
            Side::Remote(osd) => Side::Target(osd, claim),
            local => local,
        };
        let from = inner.side(source);
        let rebuilt = inner
            .rebuild_shard(shards.pg, object, shards.profile, from, to, &found.bad)
            .await;
        if let Err(e) = rebuilt {
            let osd = holder(*p).0;
            let failed = format!("; rebuilding shard {p} on osd.{osd} failed: {e}");
            found.finding.what.push_str(&failed);
            return;
        }
    }
    found.finding.repaired = true;
}

/// Reads the shards of `name` at `head` not yet found bad (`bad`), window by window, and
/// encodes them again: the further positions found bad, with why; why the rest cannot be
/// decided, if a window cannot; and the bytes read.
async fn windows(
    shards: &Shards<'_>,
    name: &ObjectName,
    head: &ShardHead,
    bad: &BTreeMap<usize, String>,
) -> (BTreeMap<usize, String>, Option<String>, u64) {
    let profile: Profile = shards.profile;
    let mut coder = Coder::new(profile);
    let len = profile.shard_bytes(head.size);
    let window = WINDOW_BYTES.div_ceil(profile.unit_bytes()) * profile.unit_bytes();
    let mut found = BTreeMap::new();
    let mut read = 0;
    let mut offset = 0;
    while offset < len {
        let range = [(offset, window.min(len - offset))];
        let compared = (0..profile.shards()).filter(|p| {
            shards.holders[*p].is_some() && !bad.contains_key(p) && !found.contains_key(p)
        });
        let compared: Vec<usize> = compared.collect();
        let reads = compared
            .iter()
            .map(|p| async move { (*p, shards.read_at(name, head.version, *p, &range).await) });
        let mut window_shards: Vec<Option<Vec<u8>>> = vec![None; profile.shards()];
        let mut window_words: Vec<Option<Vec<Word>>> = vec![None; profile.shards()];
        for (p, got) in futures::future::join_all(reads).await {
            match got {
                Ok((_, bytes, words)) => {
                    read += bytes.len() as u64;
                    window_shards[p] = Some(bytes);
                    window_words[p] = Some(words);
                }
                Err(why) => {
                    found.insert(p, format!("unreadable ({why})"));
                }
            }
        }
        let views: Vec<Option<&[u8]>> = window_shards.iter().map(|s| s.as_deref()).collect();
        let words: Vec<Option<&[Word]>> = window_words.iter().map(|w| w.as_deref()).collect();
        match agreement(&mut coder, &views, &words) {
            Agreement::Agree => {}
            Agreement::Except(p) => {
                found.insert(
                    p,
                    format!(
                        "differs from what the others encode to (at byte {offset} of the shard)"
                    ),
                );
            }
            Agreement::Undecided(why) => return (found, Some(why), read),
        }
        offset += range[0].1;
    }
    (found, None, read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use messenger::message::Version;

    fn profile() -> Profile {
        Profile::new(4, 2, 4096).expect("profile")
    }

    fn codeword() -> Vec<Vec<u8>> {
        let data: Vec<u8> = (0..4 * 4096u32).map(|i| (i * 7 % 251) as u8).collect();
        Coder::new(profile()).encode_object(&data).expect("encode")
    }

    fn judge(shards: &[Vec<u8>], absent: &[usize]) -> Agreement {
        let views: Vec<Option<&[u8]>> = shards
            .iter()
            .enumerate()
            .map(|(p, s)| (!absent.contains(&p)).then_some(s.as_slice()))
            .collect();
        agreement(&mut Coder::new(profile()), &views, &[])
    }

    #[test]
    fn a_codeword_agrees_and_one_altered_shard_is_named() {
        let shards = codeword();
        assert_eq!(judge(&shards, &[]), Agreement::Agree);
        assert_eq!(judge(&shards, &[1, 4]), Agreement::Agree);
        for bad in [0, 3, 5] {
            let mut altered = shards.clone();
            altered[bad][100] ^= 0x20;
            assert_eq!(judge(&altered, &[]), Agreement::Except(bad), "shard {bad}");
        }
    }

    #[test]
    fn what_cannot_be_told_apart_is_undecided() {
        let mut shards = codeword();
        shards[1][0] ^= 1;
        shards[4][0] ^= 1;
        assert!(
            matches!(judge(&shards, &[]), Agreement::Undecided(_)),
            "two altered"
        );
        let mut shards = codeword();
        shards[1][0] ^= 1;
        assert!(
            matches!(judge(&shards, &[5]), Agreement::Undecided(_)),
            "five shards of 4+2 tell that one is wrong, not which"
        );
        assert_eq!(
            judge(&shards, &[4, 5]),
            Agreement::Agree,
            "k shards: nothing to compare them against"
        );
        assert!(matches!(
            judge(&shards, &[3, 4, 5]),
            Agreement::Undecided(_)
        ));
    }

    fn head(shard: u8, seq: u64, size: u64) -> Result<Option<ShardHead>, String> {
        Ok(Some(ShardHead {
            version: Version { epoch: 2, seq },
            shard,
            size,
        }))
    }

    #[test]
    fn the_head_most_positions_hold_is_the_object_and_the_others_are_named() {
        let heads = vec![
            head(0, 7, 100),
            head(1, 6, 90),
            Ok(None),
            head(2, 7, 100),
            Err("integrity".into()),
            Err(String::new()),
        ];
        let (common, bad) = common_head(&heads, None).expect("a head");
        assert_eq!((common.version.seq, common.size), (7, 100));
        assert_eq!(bad[&1], "version 2.6 (others 2.7)");
        assert_eq!(bad[&2], "missing");
        assert_eq!(bad[&3], "holds shard 2 in place of 3");
        assert_eq!(bad[&4], "unreadable (integrity)");
        assert!(
            !bad.contains_key(&5),
            "a position with no holder is not compared"
        );
        assert!(!newer_than(&heads, &common));
        assert!(newer_than(&[head(0, 8, 100)], &common));
        assert_eq!(common_head(&[Ok(None), Err(String::new())], None), None);
        // The primary's own head is the object's, as its reads go by it, even against a
        // majority (a rollback its holders did not all apply).
        let split = [
            head(0, 7, 100),
            head(1, 8, 100),
            head(2, 8, 100),
            head(3, 7, 100),
        ];
        let (common, bad) = common_head(&split, Some(0)).expect("a head");
        assert_eq!(common.version.seq, 7);
        assert_eq!(bad.keys().copied().collect::<Vec<_>>(), [1, 2]);
    }
}
