//! Each pool's usage (`PoolUsage`: objects, their sizes, the blocks they hold), kept in the
//! `pool_usage` table by the group commit, in the same metadata commit as the records it
//! counts, so the figures never drift from the data, crash or not.
//!
//! A transaction computes what it changes (`Delta`, from each object's record and extent map
//! before and after); the group commit adds the deltas of the transactions that landed to the
//! stored rows. A row that fails to open is counted again from the records instead, within
//! the same commit. A store made before the table existed (format 1) is counted once when
//! opened (`count`).

use crate::metadata::{prefix_end, MetaSealer, ObjectId, Table, EXTENTS, OBJECTS, POOL_USAGE};
use crate::object::{decode_extent, ObjectRecord};
use crate::BLOCK_SIZE_BYTES;
use map::cluster::PoolUsage;
use map::PoolId;
use redb::{ReadableTable, WriteTransaction};
use std::collections::BTreeMap;

/// What one transaction changes in its pools' figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Delta {
    pub objects: i64,
    pub stored_bytes: i64,
    pub blocks: i64,
}

impl Delta {
    pub(crate) fn add(&mut self, other: Delta) {
        self.objects += other.objects;
        self.stored_bytes += other.stored_bytes;
        self.blocks += other.blocks;
    }

    /// `usage` with this change made. A result below zero means the row and the records
    /// disagree, which the commit that wrote them rules out.
    pub(crate) fn applied_to(self, usage: PoolUsage) -> PoolUsage {
        let apply = |value: u64, delta: i64| {
            let sum = i128::from(value) + i128::from(delta);
            debug_assert!(sum >= 0, "pool usage below zero: {usage:?} {self:?}");
            u64::try_from(sum.max(0)).unwrap_or(u64::MAX)
        };
        PoolUsage {
            objects: apply(usage.objects, self.objects),
            stored_bytes: apply(usage.stored_bytes, self.stored_bytes),
            allocated_bytes: apply(
                usage.allocated_bytes,
                self.blocks.saturating_mul(BLOCK_SIZE_BYTES as i64),
            ),
        }
    }
}

/// A record or extent of the store failed its integrity check while counting.
#[derive(Debug)]
pub(crate) enum CountError {
    Storage(redb::StorageError),
    Integrity(String),
}

impl From<redb::StorageError> for CountError {
    fn from(e: redb::StorageError) -> Self {
        CountError::Storage(e)
    }
}

pub(crate) fn row_key(pool: PoolId) -> [u8; 8] {
    pool.0.to_be_bytes()
}

pub(crate) fn decode_row(meta: &MetaSealer, key: &[u8], stored: &[u8]) -> Option<PoolUsage> {
    let plain = meta.open(Table::PoolUsage, key, stored).ok()?;
    postcard::from_bytes(&plain).ok()
}

pub(crate) fn encode_row(usage: &PoolUsage) -> Vec<u8> {
    postcard::to_allocvec(usage).expect("serialising usage to memory cannot fail")
}

/// Counts the usage of every pool whose objects are in `objects`, from the records.
/// `pool`: only that pool's.
pub(crate) fn count(
    objects: &impl ReadableTable<&'static [u8], &'static [u8]>,
    extents: &impl ReadableTable<&'static [u8], &'static [u8]>,
    meta: &MetaSealer,
    pool: Option<PoolId>,
) -> Result<BTreeMap<PoolId, PoolUsage>, CountError> {
    let mut counted: BTreeMap<PoolId, PoolUsage> = BTreeMap::new();
    let prefix = pool.map(row_key);
    let rows = match prefix
        .as_ref()
        .and_then(|p| prefix_end(p).map(|end| (p, end)))
    {
        Some((first, end)) => objects.range::<&[u8]>(&first[..]..&end[..])?,
        None => objects.range::<&[u8]>(..)?,
    };
    for row in rows {
        let (key, value) = row?;
        let key = key.value();
        let broken = || CountError::Integrity(format!("an object record ({} bytes)", key.len()));
        if key.len() != 28 {
            return Err(broken());
        }
        let record: ObjectRecord = meta
            .open(Table::Objects, key, value.value())
            .ok()
            .and_then(|plain| postcard::from_bytes(&plain).ok())
            .ok_or_else(broken)?;
        let pool = PoolId(u64::from_be_bytes(
            key[..8].try_into().map_err(|_| broken())?,
        ));
        let mut id: ObjectId = [0; 16];
        id.copy_from_slice(&key[12..]);
        let usage = counted.entry(pool).or_default();
        usage.objects += 1;
        usage.stored_bytes += record.size_bytes;
        let end = prefix_end(&id).ok_or_else(broken)?;
        for extent in extents.range::<&[u8]>(&id[..]..&end[..])? {
            let (key, value) = extent?;
            let extent = decode_extent(meta, key.value(), value.value())
                .ok_or_else(|| CountError::Integrity(format!("an extent of {}", record.name)))?;
            usage.allocated_bytes += extent.len_blocks * BLOCK_SIZE_BYTES;
        }
    }
    Ok(counted)
}

/// Adds `deltas` to the stored rows inside the group commit's transaction `txn`, after the
/// records they count were written there. `seal` seals a row's value, once per delta at
/// most, with a nonce taken before `txn` began (taking one may write to the database).
pub(crate) fn commit(
    txn: &WriteTransaction,
    meta: &MetaSealer,
    deltas: &BTreeMap<PoolId, Delta>,
    mut seal: impl FnMut(&[u8], Vec<u8>) -> Vec<u8>,
) -> Result<(), crate::ApplyError> {
    let mut rows = txn.open_table(POOL_USAGE)?;
    for (pool, delta) in deltas {
        let key = row_key(*pool);
        let stored = rows.get(&key[..])?.map(|v| v.value().to_vec());
        let usage = match stored.map(|s| decode_row(meta, &key, &s)) {
            None => delta.applied_to(PoolUsage::default()),
            Some(Some(usage)) => delta.applied_to(usage),
            Some(None) => {
                let objects = txn.open_table(OBJECTS)?;
                let extents = txn.open_table(EXTENTS)?;
                let counted =
                    count(&objects, &extents, meta, Some(*pool)).map_err(|e| match e {
                        CountError::Storage(e) => crate::ApplyError::from(e),
                        CountError::Integrity(what) => {
                            crate::ReadError::MetadataIntegrity { what }.into()
                        }
                    })?;
                counted.get(pool).copied().unwrap_or_default()
            }
        };
        if usage == PoolUsage::default() {
            rows.remove(&key[..])?;
        } else {
            rows.insert(&key[..], &seal(&key, encode_row(&usage))[..])?;
        }
    }
    Ok(())
}
