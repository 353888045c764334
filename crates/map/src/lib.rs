//! `map`: the cluster's vocabulary: pool ids, object names, and the stable hash that places
//! an object.
//!
//! Pure and synchronous: no IO, no clock, no randomness. It must never depend on tokio, on
//! any IO crate, or on `keys`. `placement` maps objects to placement groups and placement
//! groups to OSDs; `cluster` is the cluster map and its changes; `filesystem` the file
//! systems in it; `auth` the capabilities of entities.

pub mod auth;
pub mod cluster;
pub mod filesystem;
pub mod placement;

use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest object name accepted anywhere in Coffer (S3 allows 1,024 bytes; RADOS 2,048).
pub const OBJECT_NAME_BYTES_MAX: usize = 2048;

/// A pool's number, unique in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PoolId(pub u64);

impl PoolId {
    /// Pool numbers with this bit set hold an OSD's PG metadata objects (PG logs and
    /// infos); the monitors' pool numbers never reach it.
    pub const PG_META_BIT: u64 = 1 << 63;

    /// Whether this is where an OSD keeps PG metadata, not a pool's data.
    pub fn is_pg_meta(self) -> bool {
        self.0 & Self::PG_META_BIT != 0
    }
}

impl fmt::Display for PoolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An object's name within its pool: non-empty UTF-8, at most `OBJECT_NAME_BYTES_MAX` bytes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectName(String);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectNameError {
    Empty,
    TooLong { len_bytes: usize },
}

impl fmt::Display for ObjectNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectNameError::Empty => write!(f, "object name is empty"),
            ObjectNameError::TooLong { len_bytes } => write!(
                f,
                "object name is {len_bytes} bytes; the limit is {OBJECT_NAME_BYTES_MAX}"
            ),
        }
    }
}

impl std::error::Error for ObjectNameError {}

impl ObjectName {
    pub fn new(name: impl Into<String>) -> Result<ObjectName, ObjectNameError> {
        let name = name.into();
        if name.is_empty() {
            return Err(ObjectNameError::Empty);
        }
        if name.len() > OBJECT_NAME_BYTES_MAX {
            return Err(ObjectNameError::TooLong {
                len_bytes: name.len(),
            });
        }
        Ok(ObjectName(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The placement hash: XXH3-64 of the name bytes, folded to 32 bits. Stable across
    /// versions and machines (XXH3 is a specified algorithm); changing it moves every object.
    pub fn hash(&self) -> ObjectHash {
        let h = xxhash_rust::xxh3::xxh3_64(self.0.as_bytes());
        ObjectHash((h >> 32) as u32 ^ h as u32)
    }
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The 32-bit placement hash of an object name. Objects are listed in hash order so that
/// recovery can walk a placement group's hash range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectHash(pub u32);

/// An object's full address: its pool and its name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    pub pool: PoolId,
    pub name: ObjectName,
}

impl ObjectRef {
    pub fn new(pool: PoolId, name: ObjectName) -> ObjectRef {
        ObjectRef { pool, name }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.pool, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_across_builds() {
        // A changed hash would move every stored object to another placement group.
        let name = ObjectName::new("rbd_data.1.0000000000000000").expect("valid name");
        assert_eq!(
            name.hash(),
            ObjectName::new("rbd_data.1.0000000000000000")
                .expect("valid")
                .hash()
        );
        assert_eq!(ObjectName::new("a").expect("valid").hash().0, {
            let h = xxhash_rust::xxh3::xxh3_64(b"a");
            (h >> 32) as u32 ^ h as u32
        });
    }

    #[test]
    fn names_are_bounded() {
        assert_eq!(ObjectName::new(""), Err(ObjectNameError::Empty));
        assert!(ObjectName::new("x".repeat(OBJECT_NAME_BYTES_MAX)).is_ok());
        assert_eq!(
            ObjectName::new("x".repeat(OBJECT_NAME_BYTES_MAX + 1)),
            Err(ObjectNameError::TooLong {
                len_bytes: OBJECT_NAME_BYTES_MAX + 1
            })
        );
    }
}
