//! Listing objects by pool and hash range, in (hash, object id) order, in pages. Recovery
//! walks a placement group by its hash range this way.

use crate::error::ReadError;
use crate::metadata::{object_key, Table, OBJECTS};
use crate::object::ObjectRecord;
use crate::store::Store;
use map::{ObjectHash, ObjectName, PoolId};
use redb::ReadableDatabase;
use std::ops::RangeInclusive;

/// Most entries in one page.
pub const LIST_PAGE_ENTRIES_MAX: usize = 1000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListEntry {
    pub name: ObjectName,
    pub hash: ObjectHash,
}

/// Where the next page starts (opaque).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListCursor(Vec<u8>);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPage {
    pub entries: Vec<ListEntry>,
    /// Some when more entries may follow.
    pub next: Option<ListCursor>,
}

impl Store {
    /// Lists objects of `pool` whose hash lies in `hashes`, after `cursor`, at most `limit`
    /// (capped at `LIST_PAGE_ENTRIES_MAX`).
    pub fn list(
        &self,
        pool: PoolId,
        hashes: RangeInclusive<u32>,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, ReadError> {
        let limit = limit.clamp(1, LIST_PAGE_ENTRIES_MAX);
        let low = object_key(pool, ObjectHash(*hashes.start()), &[0u8; 16]).to_vec();
        let high = object_key(pool, ObjectHash(*hashes.end()), &[0xffu8; 16]).to_vec();
        let start = match cursor {
            Some(ListCursor(key)) if *key > low => key.clone(),
            _ => low,
        };
        let txn = self.db.begin_read()?;
        let objects = txn.open_table(OBJECTS)?;
        let mut entries = Vec::new();
        let mut last_key = None;
        for row in objects.range::<&[u8]>(&start[..]..=&high[..])? {
            let (key, value) = row?;
            if cursor.is_some_and(|c| c.0 == key.value()) {
                continue;
            }
            if entries.len() == limit {
                return Ok(ListPage {
                    entries,
                    next: last_key.map(ListCursor),
                });
            }
            let record: ObjectRecord = self
                .meta
                .open(Table::Objects, key.value(), value.value())
                .ok()
                .and_then(|plain| postcard::from_bytes(&plain).ok())
                .ok_or_else(|| ReadError::MetadataIntegrity {
                    what: "an object record in a listing".into(),
                })?;
            let name = ObjectName::new(record.name).map_err(|_| ReadError::MetadataIntegrity {
                what: "an object name in a listing".into(),
            })?;
            let mut hash = [0u8; 4];
            hash.copy_from_slice(&key.value()[8..12]);
            entries.push(ListEntry {
                name,
                hash: ObjectHash(u32::from_be_bytes(hash)),
            });
            last_key = Some(key.value().to_vec());
        }
        Ok(ListPage {
            entries,
            next: None,
        })
    }
}
