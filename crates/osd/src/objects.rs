//! How placement groups live in the local store: client objects keep their name in their
//! pool, with their PG version in an internal attribute; each PG has a metadata object (in a
//! shadow pool no client can name) holding its info and its log. A write changes the object
//! and the PG's log in one store transaction, so they never disagree after a crash.
//!
//! Everything here is synchronous store work: callers run it on tokio's blocking threads.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use map::cluster::Epoch;
use map::placement::{pg_of, PgId};
use map::{ObjectName, ObjectRef, PoolId};
use messenger::message::{
    ChunkSeal, CopyAt, CopyDigest, LogEntry, ObjectCopy, ObjectDigest, ObjectOp, OmapAt, OpResult,
    OsdReply, PgInfo, ShardHead, Version, Writers, CHUNK_BYTES,
};
use messenger::{Data, DATA_BYTES_MAX, META_BYTES_MAX};
use store::{ChunkRecord, OmapEntry, ReadError, Store, Transaction, Via, OMAP_PAGE_ENTRIES_MAX};

/// The attribute holding an object's version. Names starting with `.` are Coffer's own.
pub const VERSION_ATTR: &str = ".v";
/// An erasure-coded object's logical size, on each of its shards (a shard's own length
/// is rounded to whole stripes).
pub const SIZE_ATTR: &str = ".size";
/// The position a shard was written for: one found under another position is not trusted.
pub const SHARD_ATTR: &str = ".shard";
/// On a PG's metadata object, in an erasure-coded PG: the position whose shards this OSD
/// holds, set with each shard write and each activation.
const POSITION_ATTR: &str = ".position";
/// On a PG's metadata object, in an erasure-coded PG: the newest write this OSD knows min_size
/// holders applied, up to which it dropped its undo records; no peering rolls it back.
const COMPLETE_ATTR: &str = ".complete";
/// On a PG's metadata object, in an erasure-coded PG: the OSDs the writes of each epoch were
/// sent to (`Core::writers`).
const WRITERS_ATTR: &str = ".writers";
/// The PG info attribute of a PG's metadata object.
const INFO_ATTR: &str = ".info";
/// Set on a PG's meta object while this OSD catches up from another (peering's sync, then
/// the log taken in one transaction, which clears it): until then its objects may be newer
/// than its log, so an interrupted catch-up is not mistaken for a clean copy (F4).
const UNSETTLED_ATTR: &str = ".unsettled";
/// Log entries kept per PG: retried requests are recognised within this window.
pub const LOG_ENTRIES_MAX: usize = 2000;
/// Entries trimmed at once when the log passes its limit.
const LOG_TRIM_BATCH: usize = 100;
/// The most bytes of entries a PG's log keeps on the wire (`LogEntry::wire_bytes_max`), so
/// that a peering's answer carries it, beside as many of the shards held, in one frame's
/// 1 MiB of metadata whatever the objects' names (2,000 entries of names up to 150 bytes).
pub const LOG_BYTES_MAX: usize = 384 << 10;
/// Bytes over [`LOG_BYTES_MAX`] that make the log trim (to its limit again).
const LOG_TRIM_BYTES: usize = 16 << 10;

pub fn is_internal_attr(name: &str) -> bool {
    name.starts_with('.')
}

pub fn object_ref(pg: PgId, name: &ObjectName) -> ObjectRef {
    ObjectRef::new(pg.pool, name.clone())
}

fn meta_ref(pg: PgId) -> ObjectRef {
    let name = ObjectName::new(format!("pg.{}", pg.number))
        .unwrap_or_else(|e| unreachable!("a PG metadata name is valid: {e}"));
    ObjectRef::new(PoolId(pg.pool.0 | PoolId::PG_META_BIT), name)
}

fn log_key(version: Version) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&version.epoch.to_be_bytes());
    key[8..].copy_from_slice(&version.seq.to_be_bytes());
    key
}

fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(value).unwrap_or_else(|e| unreachable!("encoding to memory: {e}"))
}

/// A PG's info and log as stored (empty for a PG this OSD never held).
/// What this OSD's store holds of a PG: its info, its log, and whether a catch-up of it
/// was interrupted ([`mark_unsettled`]).
pub struct StoredPg {
    pub info: PgInfo,
    pub log: VecDeque<LogEntry>,
    pub notes: PgNotes,
    pub writers: Writers,
}

/// What a PG's metadata object notes beside its log (written again whenever the log is
/// replaced).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PgNotes {
    /// A catch-up of this copy was cut short ([`mark_unsettled`]).
    pub unsettled: bool,
    /// In an erasure-coded PG, the position whose shards it holds ([`set_position`]).
    pub position: Option<u8>,
    /// In an erasure-coded PG, the newest write known complete ([`set_complete`]).
    pub complete: Version,
}

pub fn load_pg(store: &Store, pg: PgId) -> Result<StoredPg, ReadError> {
    let meta = meta_ref(pg);
    let (info, notes, writers) = match store.attrs(&meta) {
        Ok(attrs) => {
            let info = match attrs.get(INFO_ATTR) {
                Some(bytes) => postcard::from_bytes(bytes).map_err(|e| corrupt("PG info", e))?,
                None => PgInfo::default(),
            };
            let complete = match attrs.get(COMPLETE_ATTR) {
                Some(bytes) => postcard::from_bytes(bytes).map_err(|e| corrupt("PG note", e))?,
                None => Version::default(),
            };
            let notes = PgNotes {
                unsettled: attrs.contains_key(UNSETTLED_ATTR),
                position: attrs.get(POSITION_ATTR).and_then(|p| p.first().copied()),
                complete,
            };
            let writers = match attrs.get(WRITERS_ATTR) {
                Some(bytes) => postcard::from_bytes(bytes).map_err(|e| corrupt("PG note", e))?,
                None => Writers::new(),
            };
            (info, notes, writers)
        }
        Err(ReadError::NotFound { .. }) => {
            return Ok(StoredPg {
                info: PgInfo::default(),
                log: VecDeque::new(),
                notes: PgNotes::default(),
                writers: Writers::new(),
            })
        }
        Err(e) => return Err(e),
    };
    let mut log = VecDeque::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = store.omap_list(&meta, after.as_deref(), OMAP_PAGE_ENTRIES_MAX)?;
        let Some(last) = page.last() else { break };
        after = Some(last.0.clone());
        for entry in &page {
            log.push_back(postcard::from_bytes(&entry.1).map_err(|e| corrupt("PG log", e))?);
        }
    }
    Ok(StoredPg {
        info,
        log,
        notes,
        writers,
    })
}

/// The position noted while this OSD holds shards of more than one position (a recovery
/// that rebuilds them for a new one is under way): no position's.
pub const MIXED_POSITIONS: u8 = u8::MAX;

/// The shard a recovery copy is, in an erasure-coded PG.
pub fn shard_of(copy: &ObjectCopy) -> Option<u8> {
    copy.attrs.get(SHARD_ATTR)?.first().copied()
}

/// Notes, on `pg`'s metadata object, that this OSD holds the shards of `position`.
pub fn set_position(txn: &mut Transaction, pg: PgId, position: u8) {
    let meta = meta_ref(pg);
    txn.touch(&meta).set_attr(&meta, POSITION_ATTR, &[position]);
}

/// The version a listing gives an object: its own, or none (the default version) for a
/// shard written for another position than `position`, which must be rebuilt.
fn listed_version(attrs: &BTreeMap<String, Vec<u8>>, position: Option<u8>) -> Version {
    match position {
        Some(p) if attrs.get(SHARD_ATTR).map(Vec::as_slice) != Some(&[p]) => Version::default(),
        _ => version_of(attrs),
    }
}

/// Notes, on `pg`'s metadata object, the OSDs each epoch's writes were sent to.
pub fn set_writers(txn: &mut Transaction, pg: PgId, writers: &Writers) {
    let meta = meta_ref(pg);
    txn.touch(&meta)
        .set_attr(&meta, WRITERS_ATTR, &encode(writers));
}

/// Notes, on `pg`'s metadata object, that writes up to `complete` are complete.
pub fn set_complete(txn: &mut Transaction, pg: PgId, complete: Version) {
    let meta = meta_ref(pg);
    txn.touch(&meta)
        .set_attr(&meta, COMPLETE_ATTR, &encode(&complete));
}

/// Marks `pg` as catching up: its objects may get ahead of its log until [`replace_log`]
/// (which clears the mark) commits.
pub fn mark_unsettled(txn: &mut Transaction, pg: PgId) {
    let meta = meta_ref(pg);
    txn.touch(&meta).set_attr(&meta, UNSETTLED_ATTR, &[]);
}

fn corrupt(what: &str, e: postcard::Error) -> ReadError {
    ReadError::MetadataIntegrity {
        what: format!("{what} does not decode: {e}"),
    }
}

/// Adds to `txn` the new log entries (in version order, at least one) and the PG's new
/// info, and trims the oldest entries once the log (`log`, of `log_bytes` on the wire) is
/// past its limit of entries or of bytes. Returns how many entries the caller drops from
/// the front of `log` once the transaction is applied.
pub fn log_append(
    txn: &mut Transaction,
    pg: PgId,
    entries: &[LogEntry],
    (log, log_bytes): (&VecDeque<LogEntry>, usize),
) -> usize {
    let last = entries.last().expect("a log takes at least one entry");
    let meta = meta_ref(pg);
    for entry in entries {
        txn.omap_set(&meta, &log_key(entry.version), &encode(entry));
    }
    txn.set_attr(&meta, INFO_ATTR, &encode(&PgInfo { last: last.version }));
    let len = log.len() + entries.len();
    let bytes = log_bytes + entries.iter().map(LogEntry::wire_bytes_max).sum::<usize>();
    if len <= LOG_ENTRIES_MAX + LOG_TRIM_BATCH && bytes <= LOG_BYTES_MAX + LOG_TRIM_BYTES {
        return 0;
    }
    let (mut trim, mut trimmed) = (0, 0);
    for old in log {
        if len - trim <= LOG_ENTRIES_MAX && bytes - trimmed <= LOG_BYTES_MAX {
            break;
        }
        txn.omap_remove(&meta, &log_key(old.version));
        trim += 1;
        trimmed += old.wire_bytes_max();
    }
    trim
}

/// Replaces a PG's info, log and notes (a replica taking its primary's after recovery),
/// and the writers of the epochs `log` still has; those writers.
pub fn replace_log(
    txn: &mut Transaction,
    pg: PgId,
    info: PgInfo,
    log: &VecDeque<LogEntry>,
    notes: PgNotes,
    writers: &Writers,
) -> Writers {
    let meta = meta_ref(pg);
    txn.remove(&meta).touch(&meta);
    txn.set_attr(&meta, INFO_ATTR, &encode(&info));
    for entry in log {
        txn.omap_set(&meta, &log_key(entry.version), &encode(entry));
    }
    if notes.unsettled {
        mark_unsettled(txn, pg);
    }
    if let Some(position) = notes.position {
        set_position(txn, pg, position);
    }
    if notes.complete != Version::default() {
        set_complete(txn, pg, notes.complete);
    }
    let oldest = log.front().map_or(Epoch::MAX, |e| e.version.epoch);
    let kept: Writers = writers
        .range(oldest..)
        .map(|(epoch, holders)| (*epoch, holders.clone()))
        .collect();
    if !kept.is_empty() {
        set_writers(txn, pg, &kept);
    }
    kept
}

/// Adds a client's write ops on `object` to `txn`, taking write bytes from `data` in order,
/// and stamps the object with `version` (unless it is removed).
pub fn build_write(
    txn: &mut Transaction,
    object: &ObjectRef,
    ops: &[ObjectOp],
    data: &Bytes,
    version: Version,
) -> Result<(), String> {
    let mut at = 0usize;
    let mut take = |len: u64| -> Result<Bytes, String> {
        let len = usize::try_from(len).map_err(|_| "write length overflows".to_string())?;
        let end = at
            .checked_add(len)
            .filter(|end| *end <= data.len())
            .ok_or_else(|| format!("ops need more than the {} data bytes sent", data.len()))?;
        let piece = data.slice(at..end);
        at = end;
        Ok(piece)
    };
    let mut exists_after = true;
    for op in ops {
        if op.is_condition() {
            // Checked by the primary, under the PG's lock, before it ordered this write.
            continue;
        }
        exists_after = true;
        match op {
            ObjectOp::AssertExists
            | ObjectOp::AssertAttr { .. }
            | ObjectOp::AssertOmap { .. }
            | ObjectOp::AssertChunk { .. } => {}
            ObjectOp::WriteChunks { first, seals, end } => {
                let bytes = take(seals.len() as u64 * CHUNK_BYTES)?;
                let records = seals.iter().map(|s| record_of(*s)).collect();
                txn.write_sealed_ending(object, *first, bytes, records, *end);
            }
            ObjectOp::Create { .. } => {
                txn.touch(object);
            }
            ObjectOp::WriteFull { len } => {
                let bytes = take(*len)?;
                txn.touch(object)
                    .truncate(object, 0)
                    .write_bytes(object, 0, bytes);
            }
            ObjectOp::Write { offset, len } => {
                let bytes = take(*len)?;
                txn.write_bytes(object, *offset, bytes);
            }
            ObjectOp::Zero { offset, len } => {
                txn.touch(object).zero(object, *offset, *len);
            }
            ObjectOp::Truncate { size } => {
                txn.touch(object).truncate(object, *size);
            }
            ObjectOp::Remove => {
                txn.remove(object);
                exists_after = false;
            }
            ObjectOp::SetAttr { name, value } => {
                check_attr_name(name)?;
                txn.set_attr(object, name, value);
            }
            ObjectOp::RemoveAttr { name } => {
                check_attr_name(name)?;
                txn.remove_attr(object, name);
            }
            ObjectOp::OmapSet { entries } => {
                for (key, value) in entries {
                    txn.omap_set(object, key, value);
                }
            }
            ObjectOp::OmapRemove { keys } => {
                for key in keys {
                    txn.omap_remove(object, key);
                }
            }
            ObjectOp::OmapClear => {
                txn.omap_clear(object);
            }
            ObjectOp::Read { .. }
            | ObjectOp::Stat
            | ObjectOp::GetAttrs
            | ObjectOp::OmapGet { .. }
            | ObjectOp::OmapList { .. }
            | ObjectOp::ReadChunks { .. } => {
                return Err("reads and writes cannot share one request".into());
            }
        }
    }
    if at != data.len() {
        return Err(format!("{} data bytes sent, the ops use {at}", data.len()));
    }
    if exists_after {
        txn.set_attr(object, VERSION_ATTR, &encode(&version));
    }
    Ok(())
}

/// At most how many store operations [`build_write`] makes of `ops` (an omap op one per
/// key), with the version attribute: what a write counts against the store's limit on one
/// transaction when it goes in a group.
pub fn store_ops(ops: &[ObjectOp]) -> usize {
    let ops: usize = ops
        .iter()
        .map(|op| match op {
            ObjectOp::OmapSet { entries } => entries.len(),
            ObjectOp::OmapRemove { keys } => keys.len(),
            _ => 3,
        })
        .sum();
    ops + 1
}

/// Adds to `txn` the ops of one shard of an erasure-coded write ordered at `version`, whose
/// object is `size` bytes after it: first the undo records `drops` ends (object, version
/// sequence), then the ops, the shard's attributes, and an undo record of this write, kept
/// under the version's sequence (docs/design/erasure.md, §6); `pg` notes the position.
#[allow(clippy::too_many_arguments)]
pub fn build_shard(
    txn: &mut Transaction,
    pg: PgId,
    object: &ObjectRef,
    ops: &[ObjectOp],
    data: &Bytes,
    version: Version,
    shard: u8,
    size: u64,
    drops: &[(ObjectName, u64)],
) -> Result<(), String> {
    drop_undo(txn, object.pool, drops);
    build_write(txn, object, ops, data, version)?;
    if !ops.iter().any(|op| matches!(op, ObjectOp::Remove)) {
        txn.set_attr(object, SIZE_ATTR, &size.to_le_bytes());
        txn.set_attr(object, SHARD_ATTR, &[shard]);
    }
    txn.keep_undo(object, version.seq);
    set_position(txn, pg, shard);
    Ok(())
}

/// Adds to `txn` the end of the undo records `drops` (object, version sequence) of pool
/// `pool`.
pub fn drop_undo(txn: &mut Transaction, pool: PoolId, drops: &[(ObjectName, u64)]) {
    for (name, seq) in drops {
        txn.drop_undo(&ObjectRef::new(pool, name.clone()), *seq);
    }
}

/// A shard's head, the bytes of pieces of it, and in a pool sealed at the edge the record
/// beside each of their blocks (`None` for a hole).
pub type ShardRead = (ShardHead, Vec<u8>, Vec<Option<ChunkSeal>>);

/// This store's shard of `object`: what its attributes say of it, and `pieces` (offset,
/// length) of its bytes, each zero-padded to its length past the shard's end, all from one
/// snapshot of the object (recovery and reads beside writes go without the PG's lock: a
/// write landing between the head and the bytes would pass new bytes off as the head's
/// version). `None` when the object is absent. In a pool sealed at the edge (`edge`) every
/// block of a shard is kept sealed with a record, and pieces are whole blocks, read as
/// stored with the records.
pub fn read_shard(
    store: &Store,
    object: &ObjectRef,
    pieces: &[(u64, u64)],
    via: Via,
    edge: bool,
) -> Result<Option<ShardRead>, ReadError> {
    let wanted = pieces
        .iter()
        .fold(0u64, |sum, (_, len)| sum.saturating_add(*len));
    if wanted > DATA_BYTES_MAX as u64 {
        return Err(ReadError::Invalid {
            reason: format!(
                "a shard read of {wanted} bytes; a reply carries at most {DATA_BYTES_MAX}"
            ),
        });
    }
    let read = match store.read_ranges_via(object, pieces, edge, via) {
        Ok(read) => read,
        Err(ReadError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let head = shard_head(&read.attrs).ok_or_else(|| ReadError::MetadataIntegrity {
        what: format!("object {object}: its shard attributes are missing or do not decode"),
    })?;
    let seals = read.chunks.into_iter().map(|r| r.map(seal_of)).collect();
    Ok(Some((head, read.data, seals)))
}

/// The partial last chunk of an object of `size` bytes, sealed at the edge, that `ops`
/// grow the object past without replacing it, if any: its bytes past the old size are the
/// client's to zero, so such a write is refused unless that chunk is a hole. A truncate
/// makes its own tail (the client rewrites the chunk it cuts inside).
pub fn unreplaced_tail(ops: &[ObjectOp], size: u64) -> Option<u64> {
    if ops.iter().any(|op| matches!(op, ObjectOp::Truncate { .. })) {
        return None;
    }
    let grows_to = ops
        .iter()
        .filter_map(|op| match op {
            ObjectOp::WriteChunks { end, .. } => Some(*end),
            ObjectOp::Zero { offset, len } => Some(offset.saturating_add(*len)),
            _ => None,
        })
        .max()?;
    if size.is_multiple_of(CHUNK_BYTES) || grows_to <= size {
        return None;
    }
    let tail = size / CHUNK_BYTES;
    let replaced = ops.iter().any(|op| match op {
        ObjectOp::WriteChunks { first, seals, .. } => {
            (*first..first.saturating_add(seals.len() as u64)).contains(&tail)
        }
        _ => false,
    });
    (!replaced).then_some(tail)
}

/// The refusal of a write that grows `object` past its sealed partial last chunk `tail`.
pub fn tail_not_replaced(object: &ObjectName, tail: u64) -> OsdReply {
    OsdReply::Mismatch(format!(
        "{object} grows past its partial last chunk {tail}: rewrite that chunk in the same write"
    ))
}

/// The shard attributes among an object's attributes.
pub fn shard_head(attrs: &BTreeMap<String, Vec<u8>>) -> Option<ShardHead> {
    let size = attrs.get(SIZE_ATTR)?;
    let shard = attrs.get(SHARD_ATTR)?;
    Some(ShardHead {
        version: version_of(attrs),
        shard: *shard.first()?,
        size: u64::from_le_bytes(size.as_slice().try_into().ok()?),
    })
}

pub fn check_attr_name(name: &str) -> Result<(), String> {
    if is_internal_attr(name) {
        return Err(format!(
            "attribute {name:?}: names starting with '.' are reserved"
        ));
    }
    Ok(())
}

pub fn version_of(attrs: &BTreeMap<String, Vec<u8>>) -> Version {
    attrs
        .get(VERSION_ATTR)
        .and_then(|bytes| postcard::from_bytes(bytes).ok())
        .unwrap_or_default()
}

/// The most bytes a request may read to be served on a network thread
/// (`OsdState::small_read`).
const SMALL_READ_BYTES: u64 = 64 << 10;

/// The most lookups such a request may make: a data or record read costs one (and a read
/// of even one byte a device read), an `OmapGet` one per key besides the object's record.
const SMALL_READ_LOOKUPS: usize = 4;

/// Whether the read `ops` are small enough to be served on a network thread: at most
/// `SMALL_READ_LOOKUPS` data, record and omap entry reads, of at most `SMALL_READ_BYTES`
/// of data in all (an omap's listing may scan pages: never small). An S3 request's read
/// of its bucket's index (the bucket's record, its key's entry and head) is small.
pub fn is_small_read(ops: &[ObjectOp]) -> bool {
    let (mut lookups, mut bytes) = (0usize, 0u64);
    for op in ops {
        let (more, read) = match op {
            ObjectOp::Read { len, .. } => (1, *len),
            ObjectOp::ReadChunks { count, .. } => {
                (1, u64::from(*count).saturating_mul(CHUNK_BYTES))
            }
            ObjectOp::Stat | ObjectOp::GetAttrs => (1, 0),
            ObjectOp::OmapGet { keys } => (keys.len(), 0),
            _ => return false,
        };
        lookups = lookups.saturating_add(more);
        bytes = bytes.saturating_add(read);
    }
    lookups <= SMALL_READ_LOOKUPS && bytes <= SMALL_READ_BYTES
}

/// Whether `ops` read an object's data, which waits for a write holding the object and
/// for its changes' commit (`Store::read_would_wait`); its record and omap entries are
/// read through the changes waiting, without waiting.
pub fn reads_data(ops: &[ObjectOp]) -> bool {
    ops.iter()
        .any(|op| matches!(op, ObjectOp::Read { .. } | ObjectOp::ReadChunks { .. }))
}

/// Runs read ops: their results, and the bytes they read in order, in pieces: the store's
/// own buffers and the cache's blocks as they are, never copied into one.
pub fn read_ops(
    store: &Store,
    object: &ObjectRef,
    ops: &[ObjectOp],
) -> Result<(Vec<OpResult>, Data), ReadError> {
    let requested = ops.iter().fold(0u64, |sum, op| match op {
        ObjectOp::Read { len, .. } => sum.saturating_add(*len),
        ObjectOp::ReadChunks { count, .. } => {
            sum.saturating_add(u64::from(*count).saturating_mul(CHUNK_BYTES))
        }
        _ => sum,
    });
    if requested > DATA_BYTES_MAX as u64 {
        return Err(ReadError::Invalid {
            reason: format!(
                "the reads of one request ask for {requested} bytes; a reply carries at most \
                 {DATA_BYTES_MAX}"
            ),
        });
    }
    let mut results = Vec::with_capacity(ops.len());
    let mut pieces: Vec<Bytes> = Vec::new();
    for op in ops {
        let result = match op {
            ObjectOp::Read { offset, len } => {
                let read = store.read_in_pieces(object, *offset, *len)?;
                let len = read.iter().map(|piece| piece.len() as u64).sum();
                pieces.extend(read);
                OpResult::Read { len }
            }
            ObjectOp::ReadChunks { first, count } => {
                let read = store.read_sealed(object, *first, u64::from(*count))?;
                pieces.extend(read.data);
                OpResult::Chunks {
                    size: read.size_bytes,
                    seals: read.chunks.into_iter().map(|r| r.map(seal_of)).collect(),
                }
            }
            ObjectOp::Stat => {
                let stat = store.stat(object)?;
                OpResult::Stat {
                    size: stat.size_bytes,
                    mtime_ns: stat.mtime_ns,
                    version: version_of(&store.attrs(object)?),
                }
            }
            ObjectOp::GetAttrs => {
                let mut attrs = store.attrs(object)?;
                attrs.retain(|name, _| !is_internal_attr(name));
                OpResult::Attrs(attrs)
            }
            ObjectOp::OmapGet { keys } => {
                let mut found = Vec::with_capacity(keys.len());
                for some in keys.chunks(OMAP_GET_KEYS_PER_READ) {
                    let values = store.omap_entries(object, some.iter().map(Vec::as_slice))?;
                    found.extend(some.iter().cloned().zip(values));
                }
                OpResult::Omap(found)
            }
            ObjectOp::OmapList { after, limit } => {
                let limit = (*limit as usize).clamp(1, OMAP_PAGE_ENTRIES_MAX);
                let bounds = (limit, OMAP_LIST_BYTES_MAX);
                let (entries, more) = omap_page(store, object, after.as_deref(), bounds, true)?;
                OpResult::OmapList { entries, more }
            }
            write => {
                return Err(ReadError::Invalid {
                    reason: format!(
                        "{write:?} is a write; reads and writes cannot share a request"
                    ),
                })
            }
        };
        results.push(result);
    }
    Ok((results, pieces.into_iter().collect()))
}

/// Calls `each` with every object of `pg` (of `pg_num`) this store holds, with its
/// attributes.
fn each_in_pg(
    store: &Store,
    pg: PgId,
    pg_num: u32,
    mut each: impl FnMut(store::ListEntry),
) -> Result<(), ReadError> {
    let mut cursor = None;
    loop {
        let page = store.list_where(
            pg.pool,
            0..=u32::MAX,
            |hash| pg_of(hash.0, pg_num) == pg.number,
            cursor.as_ref(),
            store::LIST_PAGE_ENTRIES_MAX,
        )?;
        page.entries.into_iter().for_each(&mut each);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(()),
        }
    }
}

/// Every object of `pg` this store holds, with its version, in name order.
/// With `position` (an erasure-coded PG), a shard written for another position is listed
/// at the default version.
pub fn list_pg(
    store: &Store,
    pg: PgId,
    pg_num: u32,
    position: Option<u8>,
) -> Result<BTreeMap<ObjectName, Version>, ReadError> {
    let mut objects = BTreeMap::new();
    each_in_pg(store, pg, pg_num, |entry| {
        objects.insert(entry.name, listed_version(&entry.attrs, position));
    })?;
    Ok(objects)
}

/// The shards this store holds of `pg` (an erasure-coded PG of `pg_num`) written above
/// `above`, by object, version and position: the newest [`LOG_ENTRIES_MAX`], of
/// [`LOG_BYTES_MAX`] at most on the wire (as the log).
pub fn shards_above(
    store: &Store,
    pg: PgId,
    pg_num: u32,
    above: Version,
) -> Result<Vec<(ObjectName, Version, u8)>, ReadError> {
    let mut held = Vec::new();
    each_in_pg(store, pg, pg_num, |entry| {
        let version = version_of(&entry.attrs);
        let shard = entry.attrs.get(SHARD_ATTR).and_then(|s| s.first().copied());
        if let Some(shard) = shard.filter(|_| version > above) {
            held.push((entry.name, version, shard));
        }
    })?;
    held.sort_by_key(|(_, version, _)| std::cmp::Reverse(*version));
    let mut bytes = 0;
    let fit = held
        .iter()
        .take(LOG_ENTRIES_MAX)
        .take_while(|(name, ..)| {
            bytes += named_version_bytes_max(name) + 1;
            bytes <= LOG_BYTES_MAX
        })
        .count();
    held.truncate(fit);
    Ok(held)
}

/// The most bytes of names with their versions one page of a PG's listing carries, so
/// that its answer fits a frame's 1 MiB of metadata whatever the names (1,000 names of up
/// to about 500 bytes).
const LIST_PAGE_BYTES_MAX: usize = 512 << 10;

/// The most bytes an object's name and a version take on the wire: the name with its
/// length prefix, and the version's two numbers as varints.
fn named_version_bytes_max(name: &ObjectName) -> usize {
    name.as_str().len() + 2 + 2 * 10
}

/// A page of `pg`'s objects in (hash, name) order after `after`, with their versions, and
/// whether more follow: `limit` at most, and [`LIST_PAGE_BYTES_MAX`] on the wire.
pub fn list_pg_page(
    store: &Store,
    pg: PgId,
    pg_num: u32,
    after: Option<&ObjectName>,
    limit: usize,
    position: Option<u8>,
) -> Result<(Vec<(ObjectName, Version)>, bool), ReadError> {
    let (entries, mut more) = store.list_after(
        pg.pool,
        |hash| pg_of(hash.0, pg_num) == pg.number,
        after,
        limit,
    )?;
    let mut bytes = 0;
    let mut page = Vec::with_capacity(entries.len());
    for entry in entries {
        bytes += named_version_bytes_max(&entry.name);
        if bytes > LIST_PAGE_BYTES_MAX && !page.is_empty() {
            more = true;
            break;
        }
        let version = listed_version(&entry.attrs, position);
        page.push((entry.name, version));
    }
    Ok((page, more))
}

/// The wire form of a chunk's seal record, and back.
pub fn seal_of(record: ChunkRecord) -> ChunkSeal {
    ChunkSeal {
        key_id: record.key_id,
        nonce: record.nonce,
        tag: record.tag,
    }
}

fn record_of(seal: ChunkSeal) -> ChunkRecord {
    ChunkRecord {
        key_id: seal.key_id,
        nonce: seal.nonce,
        tag: seal.tag,
    }
}

/// The most bytes of metadata a piece of a copy holds besides its omap page (the object's
/// name, the claim, the version and the wire's framing), within a frame's limit.
const PIECE_HEAD_BYTES: usize = 16 << 10;
/// Bytes an omap entry adds to a piece beyond its key and value: their length prefixes.
const OMAP_ENTRY_PREFIX_BYTES: usize = 6;
/// The most keys of an `OmapGet` read in one look at the store's waiting changes: the look
/// holds a lock that their commits and the writes behind them wait for. An S3 request asks
/// for two (its key's entry and head).
const OMAP_GET_KEYS_PER_READ: usize = 16;
/// The most bytes of entries one page of a client's `OmapList` carries: half a frame's
/// metadata, so a page fits one reply whatever the sizes of its entries.
const OMAP_LIST_BYTES_MAX: usize = 512 << 10;

/// The piece of an object's copy that begins `at` (`None` if the object does not exist): up
/// to `len` bytes of its data, the attributes in the first piece, and as much of its omap
/// from `at.omap` as fits beside them in a frame's metadata. A piece that would carry
/// nothing else holds at least one entry, so every piece moves the copy on
/// ([`next_piece`]). In a pool sealed at the edge (`edge`), the data is whole chunks as
/// stored, with their records: recovery moves them without opening them. Read from the
/// device, never the store's read cache: scrub checks what the disk holds, and the sweeps
/// of scrub and recovery would only push out of the cache what clients read.
pub fn read_copy(
    store: &Store,
    object: &ObjectRef,
    at: &CopyAt,
    len: u64,
    edge: bool,
) -> Result<Option<(ObjectCopy, Bytes)>, ReadError> {
    let stat = match store.stat(object) {
        Ok(stat) => stat,
        Err(ReadError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut attrs = store.attrs(object)?;
    let version = version_of(&attrs);
    if !at.first {
        attrs.clear();
    }
    let offset = at.offset;
    let (data, chunks) = if edge {
        let first = offset / CHUNK_BYTES;
        let end = offset
            .saturating_add(len)
            .min(stat.size_bytes)
            .div_ceil(CHUNK_BYTES);
        let read = store.read_sealed_via(object, first, end.saturating_sub(first), Via::Device)?;
        let seals = read.chunks.into_iter().map(|r| r.map(seal_of)).collect();
        (Data::from_iter(read.data).joined(), Some(seals))
    } else if offset < stat.size_bytes {
        (
            store.read_via(object, offset, len, Via::Device)?.into(),
            None,
        )
    } else {
        (Bytes::new(), None)
    };
    let beside = PIECE_HEAD_BYTES + encode(&attrs).len() + encode(&chunks).len();
    let room = (META_BYTES_MAX as usize).saturating_sub(beside);
    let at_least_one = !at.first && data.is_empty();
    let after = match &at.omap {
        OmapAt::After(key) => Some(key.as_slice()),
        OmapAt::Start | OmapAt::Done => None,
    };
    let (omap, omap_more) = match at.omap {
        OmapAt::Done => (Vec::new(), false),
        _ => omap_page(store, object, after, (usize::MAX, room), at_least_one)?,
    };
    assert!(
        !at_least_one || !omap.is_empty() || !omap_more,
        "a piece after the first moves the copy on"
    );
    let copy = ObjectCopy {
        version,
        size: stat.size_bytes,
        attrs,
        omap,
        omap_more,
        chunks,
    };
    Ok(Some((copy, data)))
}

/// The entries of `object`'s omap after `after` (from the first without): `limit` at most,
/// of `room` bytes at most on the wire (but one at least with `at_least_one`), and whether
/// more follow.
fn omap_page(
    store: &Store,
    object: &ObjectRef,
    after: Option<&[u8]>,
    (limit, room): (usize, usize),
    at_least_one: bool,
) -> Result<(Vec<OmapEntry>, bool), ReadError> {
    let mut after = after.map(<[u8]>::to_vec);
    let mut page = Vec::new();
    let mut bytes = 0;
    loop {
        // One entry past the limit tells whether more follow.
        let wanted = (limit - page.len()).saturating_add(1);
        let entries = store.omap_list(object, after.as_deref(), wanted)?;
        let Some(last) = entries.last() else {
            return Ok((page, false));
        };
        after = Some(last.0.clone());
        for entry in entries {
            let size = entry.0.len() + entry.1.len() + OMAP_ENTRY_PREFIX_BYTES;
            let full = page.len() == limit || bytes + size > room;
            if full && !(page.is_empty() && at_least_one) {
                return Ok((page, true));
            }
            bytes += size;
            page.push(entry);
        }
    }
}

/// Where the piece after `copy` (which began `at` and read `read` bytes of data) begins,
/// or `None` when it was the last: the data and the omap are both copied.
pub fn next_piece(at: &CopyAt, copy: &ObjectCopy, read: u64) -> Option<CopyAt> {
    let end = at.offset + read;
    let offset = if read == 0 { copy.size.max(end) } else { end };
    let omap = match copy.omap.last() {
        _ if !copy.omap_more => OmapAt::Done,
        Some((key, _)) => OmapAt::After(key.clone()),
        None => at.omap.clone(),
    };
    let done = offset >= copy.size && omap == OmapAt::Done;
    (!done).then_some(CopyAt {
        first: false,
        offset,
        omap,
    })
}

/// Bytes read at once while digesting an object.
const DIGEST_PIECE_BYTES: u64 = 8 << 20;

/// What scrub compares of this store's copy of `object`, and the data bytes it read: the
/// same pieces recovery would copy, so a copy that digests alike would copy alike. In an
/// edge-sealed pool (`edge`) that is chunks and records as stored, never opened.
pub fn digest(store: &Store, object: &ObjectRef, edge: bool) -> (CopyDigest, u64) {
    let mut meta = xxhash_rust::xxh3::Xxh3::new();
    let mut data = xxhash_rust::xxh3::Xxh3::new();
    let mut at = CopyAt::FIRST;
    let mut read = 0;
    loop {
        let (copy, bytes) = match read_copy(store, object, &at, DIGEST_PIECE_BYTES, edge) {
            Ok(Some(piece)) => piece,
            // Removed between pieces cannot happen under the PG's lock; absent is absent.
            Ok(None) => return (CopyDigest::Absent, read),
            Err(e) => return (CopyDigest::Unreadable(e.to_string()), read),
        };
        if at.first {
            meta.update(&encode(&copy.attrs));
        }
        // Entry by entry, each part after its length, so the digest does not depend on
        // where the pages break.
        for (key, value) in &copy.omap {
            for part in [key, value] {
                meta.update(&(part.len() as u64).to_le_bytes());
                meta.update(part);
            }
        }
        for seal in copy.chunks.iter().flatten() {
            match seal {
                Some(seal) => {
                    data.update(&[1]);
                    data.update(&seal.key_id.to_le_bytes());
                    data.update(&seal.nonce);
                    data.update(&seal.tag);
                }
                None => data.update(&[0]),
            }
        }
        data.update(&bytes);
        read += bytes.len() as u64;
        match next_piece(&at, &copy, bytes.len() as u64) {
            Some(next) => at = next,
            None => {
                let digest = ObjectDigest {
                    version: copy.version,
                    size: copy.size,
                    meta: meta.digest128(),
                    data: data.digest128(),
                };
                return (CopyDigest::Present(digest), read);
            }
        }
    }
}

/// The transactions that apply one piece of a shard of an erasure-coded PG pushed by a
/// recovery, in order: `before`, then `txn`, which writes the piece as [`write_copy`] does.
/// With `undoable` (the write it carries is one a peering may still roll back), the first
/// piece keeps an undo record under that write's version, so that a rollback takes the
/// shard back to what this holder had (docs/design/erasure.md, §7), and `before` first takes
/// back the holder's own records at or above that version (`records`, its undo records of
/// the object), which the pushed shard replaces; each later piece continues that record, so
/// a rollback takes the whole shard back. Otherwise the store drops the object's records:
/// they no longer lead back from it.
pub fn push_shard(
    object: &ObjectRef,
    copy: Option<&ObjectCopy>,
    (at, data): (PieceAt, &Bytes),
    undoable: bool,
    records: &[u64],
) -> (Transaction, Transaction) {
    let (mut before, mut txn) = (Transaction::new(), Transaction::new());
    let seq = copy.filter(|_| undoable).map(|copy| copy.version.seq);
    if let Some(seq) = seq.filter(|_| at.first) {
        for record in records.iter().rev().take_while(|r| **r >= seq) {
            before.rollback(object, *record);
        }
    }
    write_copy(&mut txn, object, copy, (at, data));
    match seq {
        Some(seq) if at.first => {
            txn.keep_undo(object, seq);
        }
        // The first piece's record, unless the holder lost it (a restart between pieces).
        Some(seq) if records.last() == Some(&seq) => {
            txn.continue_undo(object, seq);
        }
        _ => {}
    }
    (before, txn)
}

/// Where a piece of a copy goes: the first replaces the object, the last sets its version;
/// its data at `offset`.
#[derive(Clone, Copy, Debug)]
pub struct PieceAt {
    pub first: bool,
    pub offset: u64,
    pub last: bool,
}

/// Adds to `txn` one piece of a recovered object: the first piece replaces the object with
/// its size and attributes (but the version); each piece adds its data and its page of the
/// omap; the last sets the version, so an interrupted copy never looks current.
pub fn write_copy(
    txn: &mut Transaction,
    object: &ObjectRef,
    copy: Option<&ObjectCopy>,
    (at, data): (PieceAt, &Bytes),
) {
    let Some(copy) = copy else {
        txn.remove(object);
        return;
    };
    let PieceAt {
        first,
        offset,
        last,
    } = at;
    if first {
        txn.remove(object).touch(object).truncate(object, copy.size);
        for (name, value) in &copy.attrs {
            if name != VERSION_ATTR {
                txn.set_attr(object, name, value);
            }
        }
    }
    for (key, value) in &copy.omap {
        txn.omap_set(object, key, value);
    }
    match &copy.chunks {
        None if !data.is_empty() => {
            txn.write_bytes(object, offset, data.clone());
        }
        None => {}
        Some(seals) => {
            // Runs of stored chunks, as they came; holes stay holes. The size is set last,
            // since whole chunks reach past a partial tail.
            let first = offset / CHUNK_BYTES;
            let mut at = 0;
            while at < seals.len() {
                let run = seals[at..].iter().take_while(|s| s.is_some()).count();
                if run == 0 {
                    at += 1;
                    continue;
                }
                let records = seals[at..at + run]
                    .iter()
                    .flatten()
                    .map(|s| record_of(*s))
                    .collect();
                let bytes =
                    data.slice(at * CHUNK_BYTES as usize..(at + run) * CHUNK_BYTES as usize);
                txn.write_sealed(object, first + at as u64, bytes, records);
                at += run;
            }
        }
    }
    if last {
        if copy.chunks.is_some() {
            txn.truncate(object, copy.size);
        }
        txn.set_attr(object, VERSION_ATTR, &encode(&copy.version));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first PG of pool 1.
    fn pool_one_pg() -> PgId {
        PgId {
            pool: PoolId(1),
            number: 0,
        }
    }

    fn scratch_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let kek = keys::KeyEncryptionKey::from_bytes([5; 32]);
        let options = store::MkfsOptions {
            mode: store::Mode::Gcm,
            size_bytes: 64 << 20,
            device: None,
        };
        Store::mkfs(dir.path(), &options, &kek).expect("mkfs");
        let store = Store::open(dir.path(), &kek).expect("open");
        (dir, store)
    }

    /// An object whose attributes, omap and data are each too large for one piece (an
    /// omap of 2.2 MiB, one entry of 900 KiB, 200 KiB of attributes) is copied in pieces
    /// whose metadata each fits a frame beside the request's own, and the copy digests
    /// alike; a copy that stops before its last piece is at no version.
    #[test]
    fn an_omap_larger_than_a_frame_is_copied_in_pages() {
        let (_dir, source) = scratch_store();
        let (_other, target) = scratch_store();
        let pg = pool_one_pg();
        let object = object_ref(pg, &ObjectName::new("index").expect("name"));
        let version = Version { epoch: 4, seq: 9 };
        let mut txn = Transaction::new();
        txn.touch(&object)
            .write_bytes(&object, 0, Bytes::from(vec![3; 12 << 20]))
            .set_attr(&object, VERSION_ATTR, &encode(&version))
            .set_attr(&object, "big", &vec![1; 200 << 10]);
        source.apply(txn).expect("written");
        for batch in 0..3 {
            let mut txn = Transaction::new();
            for n in 0..1000 {
                let key = format!("key-{batch}-{n:04}");
                txn.omap_set(&object, key.as_bytes(), &[batch as u8; 750]);
            }
            source.apply(txn).expect("omap written");
        }
        let mut txn = Transaction::new();
        txn.omap_set(&object, b"key-1-0500x", &vec![7; 900 << 10]);
        source.apply(txn).expect("large entry written");

        let mut at = CopyAt::FIRST;
        let mut pieces = 0;
        loop {
            let (copy, data) = read_copy(&source, &object, &at, 8 << 20, false)
                .expect("read")
                .expect("present");
            let meta = encode(&copy).len();
            assert!(
                meta + PIECE_HEAD_BYTES <= META_BYTES_MAX as usize,
                "piece {pieces}: {meta} bytes of metadata"
            );
            assert_eq!(copy.version, version);
            assert_eq!(copy.attrs.is_empty(), !at.first);
            let next = next_piece(&at, &copy, data.len() as u64);
            let piece = PieceAt {
                first: at.first,
                offset: at.offset,
                last: next.is_none(),
            };
            let mut txn = Transaction::new();
            write_copy(&mut txn, &object, Some(&copy), (piece, &data));
            target.apply(txn).expect("piece written");
            pieces += 1;
            let Some(next) = next else { break };
            if pieces == 1 {
                let attrs = target.attrs(&object).expect("attrs");
                assert_eq!(version_of(&attrs), Version::default());
            }
            at = next;
        }
        assert!(pieces >= 5, "{pieces} pieces");
        let (copied, _) = digest(&target, &object, false);
        let (original, read) = digest(&source, &object, false);
        assert_eq!(read, 12 << 20);
        assert!(matches!(original, CopyDigest::Present(_)));
        assert_eq!(copied, original);
        let mut differ = Transaction::new();
        differ.omap_set(&object, b"key-2-0999", b"other");
        target.apply(differ).expect("changed");
        assert_ne!(digest(&target, &object, false).0, original);
    }

    /// A page of omap entries for a client holds what it asked (1,000 at most), fewer where
    /// they would pass half a frame, one at least, and says whether more follow.
    #[test]
    fn omap_pages_for_clients_fit_a_frame_and_say_whether_more_follow() {
        let (_dir, store) = scratch_store();
        let object = ObjectRef::new(PoolId(1), ObjectName::new("index").expect("a name"));
        let mut txn = Transaction::new();
        for n in 0..6u8 {
            let size = if n == 3 { 1000 << 10 } else { 200 << 10 };
            txn.omap_set(&object, &[n], &vec![n; size]);
        }
        store.apply(txn).expect("written");
        let list = |after: Option<u8>, limit| {
            let op = ObjectOp::OmapList {
                after: after.map(|a| vec![a]),
                limit,
            };
            match read_ops(&store, &object, &[op])
                .expect("listed")
                .0
                .remove(0)
            {
                OpResult::OmapList { entries, more } => {
                    let keys: Vec<u8> = entries.iter().map(|(key, _)| key[0]).collect();
                    (keys, more)
                }
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(list(None, 1000), (vec![0, 1], true));
        assert_eq!(list(Some(1), 1000), (vec![2], true));
        assert_eq!(
            list(Some(2), 1000),
            (vec![3], true),
            "one entry past the bound"
        );
        assert_eq!(list(Some(3), 1000), (vec![4, 5], false));
        assert_eq!(list(None, 1), (vec![0], true));
        assert_eq!(list(Some(4), 1), (vec![5], false));
        assert_eq!(list(Some(5), 1000), (vec![], false));
    }

    /// The log keeps 2,000 entries, or fewer where their names would pass its bytes: each
    /// append past a bound trims the oldest back to it, in batches.
    #[test]
    fn the_log_is_trimmed_by_entries_and_by_bytes() {
        let pg = pool_one_pg();
        let entry = |seq: u64, name_bytes: usize| LogEntry {
            version: Version { epoch: 1, seq },
            object: ObjectName::new(format!("{seq:08}").repeat(name_bytes / 8)).expect("name"),
            reqid: messenger::message::ReqId { client: 1, seq },
        };
        let append = |log: &mut VecDeque<LogEntry>, bytes: &mut usize, new: LogEntry| {
            let logged = (&*log, *bytes);
            let trim = log_append(
                &mut Transaction::new(),
                pg,
                std::slice::from_ref(&new),
                logged,
            );
            for old in log.drain(..trim) {
                *bytes -= old.wire_bytes_max();
            }
            *bytes += new.wire_bytes_max();
            log.push_back(new);
        };
        let (mut log, mut bytes) = (VecDeque::new(), 0);
        for seq in 1..=2200 {
            append(&mut log, &mut bytes, entry(seq, 16));
            assert!(log.len() <= LOG_ENTRIES_MAX + LOG_TRIM_BATCH);
        }
        assert!(log.len() >= LOG_ENTRIES_MAX, "{}", log.len());
        for seq in 2201..=3000 {
            append(&mut log, &mut bytes, entry(seq, 2000));
            assert!(bytes <= LOG_BYTES_MAX + LOG_TRIM_BYTES, "{bytes}");
        }
        assert!(
            log.len() <= 200 && bytes > LOG_BYTES_MAX - 4096,
            "{}",
            log.len()
        );
        assert_eq!(log.back().map(|e| e.version.seq), Some(3000));
        let encoded = encode(&log.iter().collect::<Vec<_>>()).len();
        assert!(
            encoded <= bytes,
            "{encoded} bytes on the wire, {bytes} counted"
        );
    }

    /// A page of a PG's listing stops where its names would pass its bytes, and says so.
    #[test]
    fn listing_pages_fit_a_frame_whatever_the_names() {
        let (_dir, store) = scratch_store();
        let pg = pool_one_pg();
        let mut txn = Transaction::new();
        for n in 0..400 {
            let name = ObjectName::new(format!("{n:04}").repeat(500)).expect("name");
            txn.touch(&object_ref(pg, &name));
        }
        store.apply(txn).expect("written");
        let mut after = None;
        let mut pages = Vec::new();
        loop {
            let (page, more) =
                list_pg_page(&store, pg, 1, after.as_ref(), 1000, None).expect("listed");
            let bytes: usize = page
                .iter()
                .map(|(name, _)| named_version_bytes_max(name))
                .sum();
            assert!(bytes <= LIST_PAGE_BYTES_MAX, "{bytes}");
            after = page.last().map(|(name, _)| name.clone());
            pages.push(page.len());
            if !more {
                break;
            }
        }
        assert_eq!(pages.iter().sum::<usize>(), 400);
        assert!(pages.len() == 2, "{pages:?}");
    }

    /// Up to four data, record and omap entry reads of up to 64 KiB in all are served on a
    /// network thread; more lookups, a larger read, or an omap's listing (which may scan
    /// pages), go to the blocking pool.
    #[test]
    fn only_small_data_record_and_entry_reads_are_small() {
        let read = |len| ObjectOp::Read { offset: 0, len };
        let chunks = |count| ObjectOp::ReadChunks { first: 0, count };
        assert!(is_small_read(&[
            read(4096),
            ObjectOp::Stat,
            ObjectOp::GetAttrs
        ]));
        assert!(is_small_read(&[read(32 << 10), chunks(8)]));
        assert!(!is_small_read(&[read(32 << 10), chunks(9)]));
        assert!(!is_small_read(&[read(u64::MAX), read(u64::MAX)]));
        assert!(!is_small_read(&[
            read(1),
            read(1),
            read(1),
            read(1),
            read(1)
        ]));
        let get = |n| ObjectOp::OmapGet {
            keys: (0..n).map(|k: u8| vec![k]).collect(),
        };
        assert!(is_small_read(&[ObjectOp::GetAttrs, get(2)]));
        assert!(is_small_read(&[get(0)]));
        assert!(!is_small_read(&[ObjectOp::GetAttrs, get(4)]));
        let list = ObjectOp::OmapList {
            after: None,
            limit: 1,
        };
        assert!(!is_small_read(&[list]));
        assert!(reads_data(&[ObjectOp::Stat, chunks(1)]));
        assert!(!reads_data(&[ObjectOp::GetAttrs, get(2)]));
    }

    /// A written object's changes wait for their commit: a read of it would commit first,
    /// so it is not one for a network thread, until a read has had them committed.
    #[test]
    fn a_read_of_an_object_with_changes_waiting_would_wait() {
        let (_dir, store) = scratch_store();
        let object = ObjectRef::new(PoolId(1), ObjectName::new("waiting").expect("a name"));
        assert!(!store.read_would_wait(&object));
        let mut txn = Transaction::new();
        txn.write(&object, 0, &[7; 4096]);
        store.apply(txn).expect("write");
        assert!(store.read_would_wait(&object));
        assert_eq!(
            store.read(&object, 0, 4096).expect("read")[..],
            [7; 4096][..]
        );
        assert!(!store.read_would_wait(&object));
    }

    /// A reply carries what each read op read, in the order of the ops: one read alone is
    /// the store's buffer as it came back, several are pieces in order, and records take no
    /// bytes.
    #[test]
    fn read_ops_reply_with_every_read_in_order() {
        let (_dir, store) = scratch_store();
        let object = ObjectRef::new(PoolId(1), ObjectName::new("reads").expect("a name"));
        let data: Vec<u8> = (0..3 * 4096u32).map(|i| (i % 251) as u8).collect();
        let mut txn = Transaction::new();
        txn.write(&object, 0, &data);
        store.apply(txn).expect("write");
        let read = |offset, len| ObjectOp::Read { offset, len };

        let (results, bytes) = read_ops(&store, &object, &[read(100, 5000)]).expect("one read");
        assert_eq!(bytes.pieces().len(), 1);
        assert_eq!(bytes.joined()[..], data[100..5100]);
        assert!(matches!(results[..], [OpResult::Read { len: 5000 }]));

        let ops = [
            read(8192, 4096),
            ObjectOp::Stat,
            read(1, 10),
            read(12000, 1000),
        ];
        let (results, bytes) = read_ops(&store, &object, &ops).expect("several reads");
        let expected = [&data[8192..], &data[1..11], &data[12000..]].concat();
        assert_eq!(bytes.joined()[..], expected[..]);
        assert!(matches!(
            results[..],
            [
                OpResult::Read { len: 4096 },
                OpResult::Stat { size: 12288, .. },
                OpResult::Read { len: 10 },
                OpResult::Read { len: 288 }
            ]
        ));

        let (results, bytes) = read_ops(&store, &object, &[ObjectOp::Stat]).expect("a stat");
        assert!(bytes.is_empty());
        assert_eq!(results.len(), 1);
    }

    /// A group counts each write's store operations before building it: never fewer than
    /// `build_write` makes.
    #[test]
    fn store_ops_bound_what_a_write_builds() {
        let object = object_ref(
            PgId {
                pool: PoolId(1),
                number: 0,
            },
            &ObjectName::new("x").expect("name"),
        );
        let keys = |n: u8| (0..n).map(|i| vec![i]).collect::<Vec<_>>();
        let cases: Vec<(Vec<ObjectOp>, usize)> = vec![
            (vec![ObjectOp::WriteFull { len: 8 }], 8),
            (
                vec![
                    ObjectOp::Create { exclusive: false },
                    ObjectOp::Write { offset: 4, len: 4 },
                    ObjectOp::Zero { offset: 0, len: 2 },
                    ObjectOp::Truncate { size: 6 },
                    ObjectOp::SetAttr {
                        name: "a".into(),
                        value: vec![1],
                    },
                ],
                4,
            ),
            (
                vec![
                    ObjectOp::OmapSet {
                        entries: keys(40).into_iter().map(|k| (k, vec![0])).collect(),
                    },
                    ObjectOp::OmapRemove { keys: keys(30) },
                    ObjectOp::OmapClear,
                ],
                0,
            ),
            (vec![ObjectOp::Remove], 0),
        ];
        for (ops, len) in cases {
            let mut txn = Transaction::new();
            build_write(
                &mut txn,
                &object,
                &ops,
                &Bytes::from(vec![0; len]),
                Version::default(),
            )
            .expect("built");
            assert!(store_ops(&ops) >= txn.len(), "{ops:?}: {}", txn.len());
        }
    }

    /// A holder that moved gets another position's shard of a write it applied itself, in
    /// two pieces; if that write is rolled back, it gets back the shard it had before the
    /// write, not the write's own nor any piece of the pushed one.
    #[test]
    fn a_pushed_shard_is_taken_back_to_what_its_holder_had() {
        let (_dir, store) = scratch_store();
        let pg = pool_one_pg();
        let object = object_ref(pg, &ObjectName::new("x").expect("name"));
        let version = |seq| Version { epoch: 3, seq };
        let write = |seq, byte| {
            let mut txn = Transaction::new();
            let data = Bytes::from(vec![byte; 4096]);
            let ops = [ObjectOp::WriteFull { len: 4096 }];
            build_shard(
                &mut txn,
                pg,
                &object,
                &ops,
                &data,
                version(seq),
                1,
                8192,
                &[],
            )
            .expect("built");
            store.apply(txn).expect("applied");
        };
        let head = |store: &Store| {
            let (head, bytes, _) = read_shard(store, &object, &[(0, 4096)], Via::Cache, false)
                .expect("read")
                .expect("present");
            (head.version.seq, head.shard, bytes[0])
        };
        write(5, 0xa);
        write(7, 0xb);
        let mut attrs = store.attrs(&object).expect("attrs");
        attrs.insert(SHARD_ATTR.into(), vec![0]);
        let copy = ObjectCopy {
            version: version(7),
            size: 8192,
            attrs,
            omap: Vec::new(),
            omap_more: false,
            chunks: None,
        };
        let pushed = Bytes::from(vec![0xc; 4096]);
        let push = |undoable| {
            for (offset, last) in [(0, false), (4096, true)] {
                let records = store.undo_versions(&object).expect("records");
                let at = PieceAt {
                    first: offset == 0,
                    offset,
                    last,
                };
                let piece = (at, &pushed);
                let (before, txn) = push_shard(&object, Some(&copy), piece, undoable, &records);
                if !before.is_empty() {
                    store.apply(before).expect("taken back");
                }
                store.apply(txn).expect("pushed");
            }
        };
        push(true);
        assert_eq!(head(&store), (7, 0, 0xc));
        assert_eq!(store.undo_versions(&object).expect("records"), [5, 7]);
        let mut back = Transaction::new();
        back.rollback(&object, 7);
        store.apply(back).expect("rolled back");
        assert_eq!(head(&store), (5, 1, 0xa));
        assert_eq!(store.stat(&object).expect("stat").size_bytes, 4096);
        // A write no peering can roll back keeps no records under the pushed shard.
        push(false);
        assert_eq!(head(&store), (7, 0, 0xc));
        assert!(store.undo_versions(&object).expect("records").is_empty());
    }
}
