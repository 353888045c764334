//! What the MDS keeps in the metadata pool, and how each change is journaled.
//!
//! Objects of file system N (all in its metadata pool, values postcard):
//!
//! ```text
//!   fsN.i.SHARD     omap: ino (8 bytes, big-endian) → Inode      inodes SHARD*512 .. +512
//!   fsN.d.INO       omap: name → Dentry                          directory INO's entries
//!   fsN.super       omap: "next_ino" → u64                        no inode number at or
//!                                                                above it was handed out
//!                         "incarnations" → Incarnations           the MDSs that served it
//!                                                                and where their journals
//!                                                                ended
//!                         "replay_key" → 32 bytes                 the key of tags' MACs
//!   fsN.purge       omap: ino → ()                                unlinked inodes to purge
//!   fsN.journal     omap: seq (8 bytes, big-endian) → Entry      changes, in order
//!                   attr "applied": seq                          entries at or below it are
//!                                                                in the objects above
//! ```
//!
//! Every change to the namespace is one [`Entry`]: a list of [`Put`]s, each the new value of
//! one key (or its removal). Entries are journaled before the change is acknowledged, then
//! applied to the objects in the background; applying an entry again gives the same state, so
//! replaying the journal after a crash is safe however much of it was applied.

use std::collections::BTreeMap;

use fs::proto::{Attr, Ino, Kind, Tag};
use serde::{Deserialize, Serialize};

/// Inodes per inode-table object.
pub const INODES_PER_SHARD: u64 = 512;

/// An inode as stored: its attributes and what only the MDS needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    pub attr: Attr,
    /// The directory it was created in (or last renamed into): the path from a grant's root
    /// is checked through these.
    pub parent: Ino,
    /// A symbolic link's target.
    pub target: Option<Vec<u8>>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// A directory entry as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dentry {
    pub ino: Ino,
    pub kind: Kind,
}

/// The new value of one key of the namespace (`None`: removed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Put {
    Inode {
        ino: Ino,
        inode: Option<Inode>,
    },
    Dentry {
        dir: Ino,
        name: Vec<u8>,
        dentry: Option<Dentry>,
    },
    /// A removed directory's entries object goes.
    DirGone {
        dir: Ino,
    },
    /// `ino` has no links left: its data and record go once no session holds it open.
    Purge {
        ino: Ino,
        queued: bool,
    },
    /// Inode numbers below this are reserved (some may be handed out).
    NextIno(Ino),
}

/// One journaled change, with the request that made it (so a resent request is answered,
/// not applied twice, even by the next MDS).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub seq: u64,
    pub session: u64,
    pub request: u64,
    /// The inode the request created or changed, to answer a resend with.
    pub ino: Option<Ino>,
    pub puts: Vec<Put>,
}

/// Where a [`Put`] lands: an object of the metadata pool and a key in its omap.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    Key { object: String, key: Vec<u8> },
    RemoveObject(String),
}

/// The objects and keys of file system `fs_id`.
#[derive(Clone, Copy, Debug)]
pub struct Names {
    pub fs_id: u32,
}

impl Names {
    pub fn shard(&self, ino: Ino) -> String {
        format!("fs{}.i.{:x}", self.fs_id, ino / INODES_PER_SHARD)
    }

    pub fn dir(&self, ino: Ino) -> String {
        format!("fs{}.d.{ino:x}", self.fs_id)
    }

    pub fn super_object(&self) -> String {
        format!("fs{}.super", self.fs_id)
    }

    pub fn purge(&self) -> String {
        format!("fs{}.purge", self.fs_id)
    }

    pub fn journal(&self) -> String {
        format!("fs{}.journal", self.fs_id)
    }

    /// Where `put` goes, and the value it leaves there (`None`: the key is removed).
    pub fn target(&self, put: &Put) -> (Target, Option<Vec<u8>>) {
        let key = |object: String, key: Vec<u8>| Target::Key { object, key };
        match put {
            Put::Inode { ino, inode } => (
                key(self.shard(*ino), ino.to_be_bytes().to_vec()),
                inode.as_ref().map(encode),
            ),
            Put::Dentry { dir, name, dentry } => (
                key(self.dir(*dir), name.clone()),
                dentry.as_ref().map(encode),
            ),
            Put::DirGone { dir } => (Target::RemoveObject(self.dir(*dir)), None),
            Put::Purge { ino, queued } => (
                key(self.purge(), ino.to_be_bytes().to_vec()),
                queued.then(Vec::new),
            ),
            Put::NextIno(next) => (
                key(self.super_object(), NEXT_INO_KEY.to_vec()),
                Some(next.to_be_bytes().to_vec()),
            ),
        }
    }
}

pub const NEXT_INO_KEY: &[u8] = b"next_ino";
pub const INCARNATIONS_KEY: &[u8] = b"incarnations";
/// The key of the MACs of tags (`fs::proto::Tag::proof`): 32 random bytes, made by the
/// first MDS.
pub const REPLAY_KEY: &[u8] = b"replay_key";
/// Earlier MDSs whose journal's end is remembered.
pub const INCARNATIONS_KEPT: usize = 8;

/// The MDSs that served a file system, each named by its client instance, with where the
/// journal ended when the next one took over. A change an MDS answered is in the journal if
/// and only if its entry is at or below that end, since the journal holds a prefix of the
/// entries an MDS numbered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incarnations {
    /// The MDS serving now; 0 before the first.
    pub current: u64,
    /// Earlier MDSs and the last entry of the journal when each was replaced, oldest first.
    pub ended: Vec<(u64, u64)>,
}

impl Incarnations {
    /// MDS `next` takes over from the current one, whose journal ends at entry `last`.
    pub fn succeed(mut self, next: u64, last: u64) -> Incarnations {
        if self.current != 0 && self.current != next {
            self.ended.push((self.current, last));
            if self.ended.len() > INCARNATIONS_KEPT {
                self.ended.remove(0);
            }
        }
        self.current = next;
        self
    }

    /// The MDS the serving one replaced: the only one whose lost changes it may apply
    /// again, in its window for replays, before any change of its own.
    pub fn predecessor(&self) -> Option<u64> {
        self.ended.last().map(|(incarnation, _)| *incarnation)
    }

    /// Whether the change `tag` names is in effect: answered by the MDS serving now (which
    /// journals it or stops), or within the journal an earlier one left. `None` if the MDS
    /// that answered it is none this remembers.
    pub fn kept(&self, tag: &Tag) -> Option<bool> {
        if tag.incarnation == self.current {
            return Some(true);
        }
        self.ended
            .iter()
            .find(|(incarnation, _)| *incarnation == tag.incarnation)
            .map(|(_, end)| tag.entry <= *end)
    }
}
/// The journal object's attribute holding the last applied entry.
pub const APPLIED_ATTR: &str = "applied";

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_allocvec(value).expect("encoding a serde value into a Vec cannot fail")
}

pub fn decode<'a, T: Deserialize<'a>>(what: &str, bytes: &'a [u8]) -> Result<T, String> {
    postcard::from_bytes(bytes).map_err(|e| format!("undecodable {what}: {e}"))
}

/// An 8-byte big-endian key or value.
pub fn be_u64(what: &str, bytes: &[u8]) -> Result<u64, String> {
    let array: [u8; 8] = bytes
        .try_into()
        .map_err(|_| format!("{what} is {} bytes, not 8", bytes.len()))?;
    Ok(u64::from_be_bytes(array))
}

/// The stable position of `name` in its directory's listing: its hash, above the two
/// positions `.` and `..` take.
pub fn cookie(name: &[u8]) -> u64 {
    (xxhash_rust::xxh3::xxh3_64(name) >> 1).max(3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(incarnation: u64, entry: u64) -> Tag {
        Tag {
            incarnation,
            entry,
            ino: None,
            proof: [0; 16],
        }
    }

    #[test]
    fn a_change_is_kept_if_its_entry_is_within_the_journal_its_mds_left() {
        let first = Incarnations::default().succeed(7, 0);
        assert!(first.ended.is_empty(), "the first MDS replaces none");
        let second = first.succeed(9, 100);
        assert_eq!(second.predecessor(), Some(7));
        assert_eq!(second.kept(&tag(7, 100)), Some(true));
        assert_eq!(
            second.kept(&tag(7, 101)),
            Some(false),
            "answered, then lost"
        );
        assert_eq!(
            second.kept(&tag(9, 5_000)),
            Some(true),
            "answered by this MDS"
        );
        assert_eq!(second.kept(&tag(3, 1)), None, "an MDS it never knew");
        // The numbers after 100 are handed out again by MDS 9: a change MDS 7 numbered 101
        // stays lost whatever MDS 9 journaled.
        let third = second.succeed(11, 400);
        assert_eq!(third.predecessor(), Some(9));
        assert_eq!(third.kept(&tag(7, 101)), Some(false));
        assert_eq!(third.kept(&tag(9, 400)), Some(true));
        assert_eq!(third.kept(&tag(9, 401)), Some(false));
    }

    #[test]
    fn a_restart_of_the_same_mds_ends_nothing_and_old_ones_are_forgotten() {
        let mut incarnations = Incarnations::default().succeed(1, 0).succeed(1, 50);
        assert!(incarnations.ended.is_empty());
        for next in 2..(INCARNATIONS_KEPT as u64 + 4) {
            incarnations = incarnations.succeed(next, next * 10);
        }
        assert_eq!(incarnations.ended.len(), INCARNATIONS_KEPT);
        assert_eq!(
            incarnations.kept(&tag(1, 1)),
            None,
            "the oldest is forgotten"
        );
    }
}
