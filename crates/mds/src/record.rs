//! What the MDS keeps in the metadata pool, and how each change is journaled.
//!
//! Objects of file system N (all in its metadata pool, values postcard):
//!
//! ```text
//!   fsN.i.SHARD     omap: ino (8 bytes, big-endian) → Inode      inodes SHARD*512 .. +512
//!   fsN.d.INO       omap: name → Dentry                          directory INO's entries
//!   fsN.super       omap: "next_ino" → u64                        no inode number at or
//!                                                                above it was handed out
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

use fs::proto::{Attr, Ino, Kind};
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
