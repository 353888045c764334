//! Listing objects by pool and hash range, in (hash, object id) order, in pages, and in
//! (hash, name) order after a name (the order every store agrees on: object ids are keyed
//! per store). Recovery and scrub walk a placement group this way, with a filter on the
//! hash: a PG is the objects whose hash has given low bits, which are not one range of
//! this order, so the filter passes over the other PGs' rows by their keys, without opening
//! their records.

use crate::error::ReadError;
use crate::metadata::{object_key, Table, OBJECTS};
use crate::object::ObjectRecord;
use crate::store::Store;
use map::{ObjectHash, ObjectName, PoolId};
use redb::ReadableDatabase;
use std::collections::BTreeMap;
use std::ops::RangeInclusive;

/// Most entries in one page.
pub const LIST_PAGE_ENTRIES_MAX: usize = 1000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListEntry {
    pub name: ObjectName,
    pub hash: ObjectHash,
    /// The object's attributes, read with its name.
    pub attrs: BTreeMap<String, Vec<u8>>,
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
        self.list_where(pool, hashes, |_| true, cursor, limit)
    }

    /// As [`Store::list`], of the objects whose hash `keep` accepts; the others are passed
    /// over by their keys, their records left closed.
    pub fn list_where(
        &self,
        pool: PoolId,
        hashes: RangeInclusive<u32>,
        keep: impl Fn(ObjectHash) -> bool,
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
        self.settle(None)?;
        let txn = self.shared.db.begin_read()?;
        let objects = txn.open_table(OBJECTS)?;
        let mut entries = Vec::new();
        let mut last_key = None;
        for row in objects.range::<&[u8]>(&start[..]..=&high[..])? {
            let (key, value) = row?;
            let hash = key_hash(key.value());
            if cursor.is_some_and(|c| c.0 == key.value()) || !keep(hash) {
                continue;
            }
            if entries.len() == limit {
                return Ok(ListPage {
                    entries,
                    next: last_key.map(ListCursor),
                });
            }
            entries.push(self.entry(key.value(), value.value(), hash)?);
            last_key = Some(key.value().to_vec());
        }
        Ok(ListPage {
            entries,
            next: None,
        })
    }

    /// At most `limit` (capped at `LIST_PAGE_ENTRIES_MAX`) objects of `pool` whose hash
    /// `keep` accepts, in (hash, name) order, after `after` in that order; and whether more
    /// follow. A page reads from `after`'s hash on, so walking a whole pool this way reads
    /// each row about once.
    pub fn list_after(
        &self,
        pool: PoolId,
        keep: impl Fn(ObjectHash) -> bool,
        after: Option<&ObjectName>,
        limit: usize,
    ) -> Result<(Vec<ListEntry>, bool), ReadError> {
        let limit = limit.clamp(1, LIST_PAGE_ENTRIES_MAX);
        let after = after.map(|name| (name.hash(), name));
        let low = object_key(pool, after.map_or(ObjectHash(0), |a| a.0), &[0u8; 16]);
        let high = object_key(pool, ObjectHash(u32::MAX), &[0xffu8; 16]);
        self.settle(None)?;
        let txn = self.shared.db.begin_read()?;
        let objects = txn.open_table(OBJECTS)?;
        let mut entries: Vec<ListEntry> = Vec::new();
        let mut more = false;
        for row in objects.range::<&[u8]>(&low[..]..=&high[..])? {
            let (key, value) = row?;
            let hash = key_hash(key.value());
            if !keep(hash) {
                continue;
            }
            // Ids order the rows of one hash, names the page: a full page ends only where
            // the hash changes.
            if entries.len() >= limit && entries.last().is_some_and(|last| last.hash < hash) {
                more = true;
                break;
            }
            let entry = self.entry(key.value(), value.value(), hash)?;
            if after.is_none_or(|a| (entry.hash, &entry.name) > a) {
                entries.push(entry);
            }
        }
        entries.sort_by(|a, b| (a.hash, &a.name).cmp(&(b.hash, &b.name)));
        if entries.len() > limit {
            entries.truncate(limit);
            more = true;
        }
        Ok((entries, more))
    }

    fn entry(&self, key: &[u8], value: &[u8], hash: ObjectHash) -> Result<ListEntry, ReadError> {
        let record: ObjectRecord = self
            .shared
            .meta
            .open(Table::Objects, key, value)
            .ok()
            .and_then(|plain| postcard::from_bytes(&plain).ok())
            .ok_or_else(|| ReadError::MetadataIntegrity {
                what: "an object record in a listing".into(),
            })?;
        let name = ObjectName::new(record.name).map_err(|_| ReadError::MetadataIntegrity {
            what: "an object name in a listing".into(),
        })?;
        Ok(ListEntry {
            name,
            hash,
            attrs: record.attrs,
        })
    }
}

/// The hash in an object's key (pool, hash, id).
fn key_hash(key: &[u8]) -> ObjectHash {
    let mut hash = [0u8; 4];
    hash.copy_from_slice(&key[8..12]);
    ObjectHash(u32::from_be_bytes(hash))
}
