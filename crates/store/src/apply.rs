//! Applying a transaction.
//!
//! 1. Validate every operation against the named limits (nothing is touched on failure).
//! 2. Lock the objects it names (striped write locks, taken in slot order: no deadlock).
//! 3. Load each object's record, its undo records (undo.rs), and the extents in the range
//!    its operations touch.
//! 4. Execute the operations in order on that working copy. New data always goes to newly
//!    allocated blocks (copy on write): it is sealed in place in its aligned buffer, on this
//!    thread, and written with direct IO, here if it spans several IO pieces, else by the
//!    group commit together with the other small writes of its group. Nothing committed is
//!    overwritten, so a crash at any moment leaves the old state whole. Partial blocks are
//!    read, opened, merged and resealed.
//! 5. Hand the small writes and the metadata changes to group commit (commit.rs) and wait
//!    until durable.
//! 6. Return the blocks the transaction freed to the allocator (only now: until the commit,
//!    the old extents were still the committed truth), and unlock. Blocks an undo record
//!    keeps are not among them; they are freed when the record is dropped.
//!
//! On an error before step 5 the blocks allocated in step 4 go back to the allocator and
//! nothing is visible: the metadata was never written.

use crate::allocator::Run;
use crate::device::{
    AlignedBuf, Blocks, IoPiece, WritePiece, BLOCK_SIZE_BYTES, IO_PIECE_BLOCKS_MAX,
};
use crate::error::{ApplyError, ReadError};
use crate::metadata::{
    extent_key, object_key, omap_key, omap_table, open_omap, prefix_end, MetaOp, ObjectId, Table,
    EXTENTS, OBJECTS, OMAP, OMAP_PAGED, SUPERBLOCK, UNDO, WAL_APPLIED, WAL_START,
};
use crate::object::{
    pieces, punch, Extent, ExtentMap, ObjectRecord, EXTENT_BLOCKS_MAX, OBJECT_BLOCKS_MAX,
    OBJECT_SIZE_BYTES_MAX, SEALED_EXTENT_BLOCKS_MAX,
};
use crate::omap::{self, Damaged, Row};
use crate::pending::{self, Pending, View, Waiting};
use crate::read::{ReadAs, Via};
use crate::seal::{ChunkRecord, ExtentSeal};
use crate::store::{Shared, Store, LOCK_SLOTS};
use crate::transaction::{Op, Transaction};
use crate::undo::{self, subtract, undo_key, UndoRecord};
use crate::usage::{self, Delta};
use crate::wal;
use map::{ObjectRef, PoolId};
use redb::ReadableDatabase;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{PoisonError, RwLockReadGuard, RwLockWriteGuard};

/// Largest single write (or sealed write), in bytes.
pub const WRITE_BYTES_MAX: u64 = 64 << 20;
/// Most operations in one transaction.
pub const TRANSACTION_OPS_MAX: usize = 4096;
pub const ATTR_NAME_BYTES_MAX: usize = 256;
/// Bound on all attribute names and values of one object together (they live in its record).
pub const ATTRS_BYTES_MAX: usize = 256 << 10;
pub const OMAP_KEY_BYTES_MAX: usize = 4096;
pub const OMAP_VALUE_BYTES_MAX: usize = 1 << 20;

const BLOCK: u64 = BLOCK_SIZE_BYTES;

/// One object's working state inside a transaction.
struct Work {
    object: ObjectRef,
    id: ObjectId,
    first_block: u64,
    end_block: u64,
    original: Option<ObjectRecord>,
    record: Option<ObjectRecord>,
    loaded: ExtentMap,
    extents: ExtentMap,
    omap_ops: Vec<MetaOp>,
    /// The keys of its paged omap (omap.rs) as this transaction changes them.
    omap_keys: omap::Keys,
    /// Whether an operation changed it (a rollback does; keeping or dropping an undo
    /// record does not).
    touched: bool,
    /// Whether an operation changed its omap, or cleared it (a remove), which its undo
    /// records would not take back.
    omap_changed: bool,
    omap_cleared: bool,
    /// Its undo records (undo.rs) by version, as loaded and then as operations drop them.
    undo: BTreeMap<u64, UndoRecord>,
    /// The versions of records this transaction removes from the `undo` table.
    undo_dropped: Vec<u64>,
    /// The version this transaction keeps a record under, if it does.
    keep: Option<u64>,
    /// The version of the record (kept by an earlier transaction) this one continues.
    continues: Option<u64>,
    /// Whether its last change was a rollback: its record is then the one restored, as it
    /// was, and its remaining records still lead back from it.
    restored: bool,
    /// Whether the transaction rolled it back.
    rolled_back: bool,
}

impl Work {
    /// Removes every omap entry the object has (before the transaction's later changes):
    /// the changes to it queued so far go, and `metadata_batch` removes the rows the
    /// object had before the transaction, if it had any.
    fn clear_omap(&mut self) {
        self.omap_ops.clear();
        self.omap_keys.clear();
        self.omap_cleared = true;
    }

    /// The change that removes the object's omap rows as they were before the transaction.
    fn remove_omap_rows(&self) -> MetaOp {
        MetaOp::RemovePrefix {
            table: omap_table(self.object.pool),
            prefix: self.id.to_vec(),
        }
    }

    fn record_mut(&mut self) -> &mut ObjectRecord {
        let name = self.object.name.as_str();
        self.record.get_or_insert_with(|| ObjectRecord {
            name: name.to_string(),
            size_bytes: 0,
            version: 0,
            mtime_ns: 0,
            attrs: Default::default(),
        })
    }

    fn size_bytes(&self) -> u64 {
        self.record.as_ref().map_or(0, |r| r.size_bytes)
    }

    fn grow_to(&mut self, end_bytes: u64) {
        let record = self.record_mut();
        record.size_bytes = record.size_bytes.max(end_bytes);
    }

    /// What this object's changes do to its pool's usage. Extents outside the loaded range
    /// are untouched, so the loaded and final maps tell the change in blocks.
    fn usage_delta(&self) -> Delta {
        let blocks = |map: &ExtentMap| map.values().map(|e| e.len_blocks as i64).sum::<i64>();
        let size = |record: &Option<ObjectRecord>| record.as_ref().map(|r| r.size_bytes as i64);
        Delta {
            objects: i64::from(self.record.is_some()) - i64::from(self.original.is_some()),
            stored_bytes: size(&self.record).unwrap_or(0) - size(&self.original).unwrap_or(0),
            blocks: blocks(&self.extents) - blocks(&self.loaded),
        }
    }
}

/// Blocks taken and given up by one transaction, and its writes left for the group commit.
#[derive(Default)]
struct Space {
    allocated: Vec<Run>,
    freed: Vec<Run>,
    deferred: Vec<PendingWrite>,
    /// Whether it wrote data of its own, outside the group (a write of several IO pieces):
    /// the group must then sync the data device before its commit.
    wrote_alone: bool,
}

/// Sealed blocks for newly allocated space, written by the group commit's leader (unless
/// the transaction wrote them already, to read a block back).
pub(crate) struct PendingWrite {
    offset_bytes: u64,
    buffer: Blocks,
    written: bool,
}

/// What one transaction hands to group commit: its small writes, its metadata, what it
/// changes in its pools' usage, and the blocks it frees once committed.
pub(crate) struct Batch {
    writes: Vec<PendingWrite>,
    wrote_alone: bool,
    meta: Vec<MetaOp>,
    usage: Vec<(PoolId, Delta)>,
    freed: Vec<Run>,
    /// The objects `meta` changes.
    ids: Vec<ObjectId>,
}

/// How a metadata commit is made durable.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Commit {
    /// Its log record `seq` is durable: commit without a sync and note `wal_applied`.
    Logged { seq: u64 },
    /// Durably, as a checkpoint: every record before `next_seq` is in the database.
    Durable { next_seq: u64 },
}

/// Where sealing happens for a run of blocks.
enum Sealing<'a> {
    /// By this store's mode (none, xts, or gcm).
    Store,
    /// Already sealed by a client: stored as is, with these records.
    Edge(&'a [ChunkRecord]),
}

fn invalid(reason: impl Into<String>) -> ApplyError {
    ApplyError::Invalid {
        reason: reason.into(),
    }
}

/// Marks the transaction as keeping an undo record of `w` under `version`.
fn keep_undo(w: &mut Work, version: u64) -> Result<(), ApplyError> {
    let object = &w.object;
    if w.keep.is_some_and(|kept| kept != version) || w.rolled_back || w.continues.is_some() {
        return Err(invalid(format!(
            "object {object} keeps one undo record per transaction, and none with a rollback"
        )));
    }
    if let Some(newest) = w
        .undo
        .keys()
        .next_back()
        .filter(|newest| **newest >= version)
    {
        return Err(invalid(format!(
            "object {object} has an undo record of version {newest}; a new one must be above it"
        )));
    }
    w.keep = Some(version);
    Ok(())
}

/// Whether this transaction's changes to `w` may join its record `version`: the record is
/// still there, owns every block it would put back (none of them is a current extent's,
/// which a change here could free), covers every block the changes touch, and the changes
/// leave omap alone.
fn continues_cleanly(w: &Work, version: u64) -> Result<(), ApplyError> {
    let object = &w.object;
    let Some(record) = w.undo.get(&version) else {
        return Err(invalid(format!(
            "object {object}: its undo record of version {version} went in the transaction \
             that continues it"
        )));
    };
    let restored: Vec<Run> = record.extents.iter().map(|(_, e)| e.run()).collect();
    let owned = subtract(&restored, &record.kept).is_empty();
    let covered = w.first_block >= w.end_block
        || (record.first_block <= w.first_block && w.end_block <= record.end_block);
    if !owned || !covered || w.omap_changed || w.omap_cleared {
        return Err(invalid(format!(
            "object {object}: only a record kept with the object's remove can be continued, by \
             changes to its data and attributes (this one covers blocks [{}, {}), the changes \
             touch [{}, {}))",
            record.first_block, record.end_block, w.first_block, w.end_block
        )));
    }
    Ok(())
}

/// Marks the transaction as continuing `w`'s newest undo record, `version`.
fn continue_undo(w: &mut Work, version: u64) -> Result<(), ApplyError> {
    let object = &w.object;
    if w.keep.is_some() || w.rolled_back {
        return Err(invalid(format!(
            "object {object}: a transaction continues an undo record, or keeps or rolls back \
             one, not both"
        )));
    }
    let newest = w.undo.keys().next_back().copied();
    if newest != Some(version) {
        return Err(invalid(format!(
            "object {object} has no newest undo record of version {version} to continue"
        )));
    }
    w.continues = Some(version);
    Ok(())
}

/// Takes back the transaction that kept `w`'s newest undo record, `version`: its record and
/// the extents of its range come back, and the blocks written since are freed.
fn rollback(w: &mut Work, version: u64, space: &mut Space) -> Result<(), ApplyError> {
    let object = &w.object;
    if w.keep.is_some() || (w.touched && !w.restored) {
        return Err(invalid(format!(
            "object {object}: a rollback comes before any other change in its transaction"
        )));
    }
    let newest = w.undo.keys().next_back().copied();
    if newest != Some(version) {
        return Err(invalid(match newest {
            Some(newest) if newest > version => format!(
                "object {object} has an undo record of version {newest}, newer than \
                 {version}: roll back the newest first"
            ),
            _ => format!("object {object} has no undo record of version {version}"),
        }));
    }
    let record = w
        .undo
        .remove(&version)
        .expect("the newest record was just found");
    w.undo_dropped.push(version);
    let mut unreferenced = punch(&mut w.extents, record.first_block, record.end_block);
    if record.record.is_none() {
        unreferenced.extend(punch(&mut w.extents, 0, OBJECT_BLOCKS_MAX));
        if w.record.is_some() {
            w.clear_omap();
        }
    }
    let restored: Vec<Run> = record.extents.iter().map(|(_, e)| e.run()).collect();
    space.freed.extend(subtract(&unreferenced, &restored));
    w.extents.extend(record.extents);
    w.record = record.record;
    w.touched = true;
    w.restored = true;
    w.rolled_back = true;
    Ok(())
}

/// Drops `w`'s undo records of `versions`; the blocks they kept are freed.
fn drop_undo(w: &mut Work, versions: impl std::ops::RangeBounds<u64>, space: &mut Space) {
    let dropped: Vec<u64> = w.undo.range(versions).map(|(v, _)| *v).collect();
    for version in dropped {
        let record = w.undo.remove(&version).expect("listed just above");
        space.freed.extend(record.kept);
        w.undo_dropped.push(version);
    }
}

/// The undo record of the transaction's changes to `w`: its record and its extents over the
/// range the transaction loaded, before; the blocks among them it no longer references.
fn undo_record(w: &Work) -> UndoRecord {
    let (first_block, end_block) = match (w.loaded.first_key_value(), w.loaded.last_key_value()) {
        _ if w.first_block >= w.end_block => (0, 0),
        (Some((first, _)), Some((last, extent))) => (
            w.first_block.min(*first),
            w.end_block.max(last + extent.len_blocks),
        ),
        _ => (w.first_block, w.end_block),
    };
    let before: Vec<Run> = w.loaded.values().map(Extent::run).collect();
    let after: Vec<Run> = w.extents.values().map(Extent::run).collect();
    UndoRecord {
        name: w.object.name.as_str().to_string(),
        record: w.original.clone(),
        first_block,
        end_block,
        extents: w.loaded.iter().map(|(b, e)| (*b, e.clone())).collect(),
        kept: subtract(&before, &after),
    }
}

/// The blocks `[first, end)` an operation may touch, for loading extents.
fn block_range(op: &Op) -> Option<(u64, u64)> {
    match op {
        Op::Write {
            offset_bytes,
            len_bytes,
            ..
        }
        | Op::Zero {
            offset_bytes,
            len_bytes,
            ..
        } => Some((
            offset_bytes / BLOCK,
            (offset_bytes + len_bytes).div_ceil(BLOCK),
        )),
        Op::WriteSealed {
            first_chunk,
            chunks,
            ..
        } => Some((*first_chunk, first_chunk + chunks.len() as u64)),
        Op::Truncate { size_bytes, .. } => Some((size_bytes / BLOCK, OBJECT_BLOCKS_MAX)),
        Op::Remove { .. } | Op::Rollback { .. } => Some((0, OBJECT_BLOCKS_MAX)),
        _ => None,
    }
}

fn validate(op: &Op) -> Result<(), ApplyError> {
    let within = |end: Option<u64>| match end {
        Some(end) if end <= OBJECT_SIZE_BYTES_MAX => Ok(()),
        _ => Err(invalid(format!(
            "range ends past the object size limit of {OBJECT_SIZE_BYTES_MAX} bytes"
        ))),
    };
    match op {
        Op::Write { offset_bytes, len_bytes, .. } => {
            if *len_bytes > WRITE_BYTES_MAX {
                return Err(invalid(format!("write of {len_bytes} bytes; the limit is {WRITE_BYTES_MAX}")));
            }
            within(offset_bytes.checked_add(*len_bytes))
        }
        Op::WriteSealed { first_chunk, len_bytes, data, chunks, end_bytes, .. } => {
            let end_chunk = first_chunk.saturating_add(chunks.len() as u64);
            if end_bytes.div_ceil(BLOCK) != end_chunk {
                return Err(invalid(format!("sealed write ending at byte {end_bytes}, outside its last chunk")));
            }
            if len_bytes % BLOCK != 0 {
                return Err(invalid(format!("sealed write of {len_bytes} bytes is not whole {BLOCK}-byte chunks")));
            }
            if data.blocks() != chunks.len() || chunks.is_empty() {
                return Err(invalid(format!("sealed write of {} chunks with {} records", data.blocks(), chunks.len())));
            }
            if data.len() as u64 > WRITE_BYTES_MAX {
                return Err(invalid(format!("sealed write of {} bytes; the limit is {WRITE_BYTES_MAX}", data.len())));
            }
            within(first_chunk.checked_add(chunks.len() as u64).and_then(|c| c.checked_mul(BLOCK)))
        }
        Op::Zero { offset_bytes, len_bytes, .. } => within(offset_bytes.checked_add(*len_bytes)),
        Op::Truncate { size_bytes, .. } => within(Some(*size_bytes)),
        Op::SetAttr { name, .. } | Op::RemoveAttr { name, .. } if name.is_empty() || name.len() > ATTR_NAME_BYTES_MAX => {
            Err(invalid(format!("attribute names must be 1 to {ATTR_NAME_BYTES_MAX} bytes")))
        }
        Op::OmapSet { key, value, .. } if key.len() > OMAP_KEY_BYTES_MAX || value.len() > OMAP_VALUE_BYTES_MAX => Err(invalid(
            format!("omap keys are limited to {OMAP_KEY_BYTES_MAX} bytes and values to {OMAP_VALUE_BYTES_MAX}"),
        )),
        Op::OmapRemove { key, .. } if key.len() > OMAP_KEY_BYTES_MAX => {
            Err(invalid(format!("omap keys are limited to {OMAP_KEY_BYTES_MAX} bytes")))
        }
        _ => Ok(()),
    }
}

impl Transaction {
    /// Checks what [`Store::apply`] refuses before it reads anything: the count of
    /// operations and each one's own limits (ranges, key, value and name sizes). A caller
    /// that joins several requests' transactions into one commit checks each alone first,
    /// so that one bad request is refused without the others. Limits that depend on what
    /// the object holds (its attributes' total size) are checked only when it is applied.
    pub fn check(&self) -> Result<(), ApplyError> {
        if self.ops.len() > TRANSACTION_OPS_MAX {
            return Err(invalid(format!(
                "{} operations; the limit is {TRANSACTION_OPS_MAX}",
                self.ops.len()
            )));
        }
        self.ops.iter().try_for_each(validate)
    }
}

/// Counts a transaction as under way from `begin` until dropped, even if it panics.
struct Applying<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Applying<'a> {
    fn begin(count: &'a std::sync::atomic::AtomicUsize) -> Applying<'a> {
        count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Applying(count)
    }
}

impl Drop for Applying<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Store {
    /// Applies `txn` atomically. When this returns `Ok`, the transaction is durable: the
    /// caller may acknowledge it. On `Err`, nothing of it is visible, with one exception:
    /// when a commit fails once its group's log record was written (`Io`, `Metadata` or
    /// `Poisoned` from that commit, after which the store is poisoned), the transaction may
    /// or may not have reached the disk, and reopening the store tells which, as after a
    /// crash.
    pub fn apply(&self, txn: Transaction) -> Result<(), ApplyError> {
        let started = std::time::Instant::now();
        let _under_way = Applying::begin(&self.applying);
        let applied = self.transact(txn);
        crate::metrics::applied(started.elapsed(), applied.is_ok());
        applied
    }

    /// Whether `txn` applied now would wait beyond its own work and its group's write and
    /// sync: for another transaction under way (whose group it would join, or whose objects
    /// it may need), for a checkpoint its group would make first (the log nearly full, or
    /// the host short of room), to commit the changes waiting because the store's thread
    /// fell behind, or to commit its own group to the database at once (it removes a key
    /// range). A caller that should not wait long (a network thread) hands such a
    /// transaction to another thread. The answer holds as of the call. `applying` is
    /// looked at first: the log's tail is locked across a record's write and sync, and
    /// only a transaction under way appends.
    pub fn apply_would_wait(&self, txn: &Transaction) -> bool {
        self.applying.load(std::sync::atomic::Ordering::Acquire) > 0
            || txn.removes_ranges()
            || self.wal.checkpoint_near()
            || self.short_of_room()
            || self.shared.waiting().overdue_after_one_more()
    }

    fn transact(&self, txn: Transaction) -> Result<(), ApplyError> {
        if let Some(cause) = self.shared.committer.poisoned() {
            return Err(ApplyError::Poisoned { cause });
        }
        txn.check()?;

        let mut works: Vec<Work> = Vec::new();
        // By name: an object's id (an HMAC in encrypting modes) is computed once per
        // transaction, not once per operation on it.
        let mut index: HashMap<(PoolId, &str), usize> = HashMap::new();
        let mut op_work = Vec::with_capacity(txn.ops.len());
        for op in &txn.ops {
            let object = op.object();
            let i = *index
                .entry((object.pool, object.name.as_str()))
                .or_insert_with(|| {
                    let id = self
                        .shared
                        .meta
                        .object_id(object.pool, object.name.as_str());
                    works.push(Work {
                        object: object.clone(),
                        id,
                        first_block: u64::MAX,
                        end_block: 0,
                        original: None,
                        record: None,
                        loaded: ExtentMap::new(),
                        extents: ExtentMap::new(),
                        omap_ops: Vec::new(),
                        omap_keys: omap::Keys::default(),
                        touched: false,
                        omap_changed: false,
                        omap_cleared: false,
                        undo: BTreeMap::new(),
                        undo_dropped: Vec::new(),
                        keep: None,
                        continues: None,
                        restored: false,
                        rolled_back: false,
                    });
                    works.len() - 1
                });
            if let Some((first, end)) = block_range(op) {
                works[i].first_block = works[i].first_block.min(first);
                works[i].end_block = works[i].end_block.max(end);
            }
            op_work.push(i);
        }

        let mut slots: Vec<usize> = works.iter().map(|w| slot_of(&w.id)).collect();
        slots.sort_unstable();
        slots.dedup();
        let _locks: Vec<_> = slots
            .iter()
            .map(|s| self.slots[*s].write().expect("object lock poisoned"))
            .collect();

        self.load_works(&mut works)?;
        let mut space = Space::default();
        let prepared = txn
            .ops
            .into_iter()
            .zip(op_work)
            .try_for_each(|(op, i)| self.execute(&mut works[i], op, &mut space))
            .and_then(|()| self.metadata_batch(&mut works, &mut space));
        let batch = match prepared {
            Ok(batch) => batch,
            Err(e) => {
                self.release(&space.allocated);
                return Err(e);
            }
        };
        let batch = Batch {
            writes: std::mem::take(&mut space.deferred),
            wrote_alone: space.wrote_alone,
            freed: space.freed.clone(),
            meta: batch,
            usage: works
                .iter()
                .filter(|w| w.touched)
                .map(|w| (w.object.pool, w.usage_delta()))
                .collect(),
            ids: works.iter().map(|w| w.id).collect(),
        };
        if let Err(e) = self
            .shared
            .committer
            .commit(batch, |group| self.flush(group))
        {
            // Its own writes failed: nothing of it was committed, and its blocks go back.
            // After a failed group commit the store is poisoned, and the group's log record
            // may still be replayed when it is opened again: its blocks stay taken, so no
            // transaction still under way here writes over them.
            if self.shared.committer.poisoned().is_none() {
                self.release(&space.allocated);
            }
            return Err(e);
        }
        self.release(&space.freed);
        Ok(())
    }

    /// Returns `runs` to the allocator, forgotten by the read cache first: once allocated
    /// again their bytes change.
    fn release(&self, runs: &[Run]) {
        runs.iter().for_each(|r| self.cache.forget(*r));
        let mut alloc = self.allocator.lock().expect("allocator lock poisoned");
        runs.iter()
            .filter(|r| r.len > 0)
            .for_each(|r| alloc.release(*r));
    }

    fn load_works(&self, works: &mut [Work]) -> Result<(), ApplyError> {
        // The changes not yet committed first, then a snapshot begun while none of them can
        // move into the database (pending.rs).
        let pending = self.shared.waiting();
        let txn = self.shared.db.begin_read()?;
        let (objects, extents, undo_rows) = (
            txn.open_table(OBJECTS)?,
            txn.open_table(EXTENTS)?,
            txn.open_table(UNDO)?,
        );
        let objects = pending.view(Table::Objects, &objects);
        let extents = pending.view(Table::Extents, &extents);
        let undo_rows = pending.view(Table::Undo, &undo_rows);
        for w in works.iter_mut() {
            w.undo = self.load_undo(&undo_rows, &w.object, &w.id)?;
            w.original = self.load_record(&objects, &w.object, &w.id)?;
            w.record = w.original.clone();
            // Whether an operation names blocks, perhaps none (an empty write still grows the
            // object): a partial last block must then be in view, as growing past it is
            // checked against it.
            if w.first_block <= w.end_block {
                if let Some(record) = w.original.as_ref().filter(|r| r.size_bytes % BLOCK != 0) {
                    let tail = record.size_bytes / BLOCK;
                    w.first_block = w.first_block.min(tail);
                    w.end_block = w.end_block.max(tail + 1);
                }
            }
            if w.first_block < w.end_block {
                w.loaded =
                    self.load_extent_map(&extents, &w.object, &w.id, w.first_block, w.end_block)?;
                w.extents = w.loaded.clone();
            }
        }
        Ok(())
    }

    /// The object's undo records, by version.
    fn load_undo<T: redb::ReadableTable<&'static [u8], &'static [u8]>>(
        &self,
        rows: &View<'_, T>,
        object: &ObjectRef,
        id: &ObjectId,
    ) -> Result<BTreeMap<u64, UndoRecord>, ApplyError> {
        let (low, high) = (undo_key(object, id, 0), undo_key(object, id, u64::MAX));
        let mut records = BTreeMap::new();
        for (key, value) in rows.all_rows(Bound::Included(&low[..]), Bound::Included(&high[..]))? {
            let version = undo::undo_key_version(&key);
            let record = undo::decode(&self.shared.meta, &key, &value).ok_or_else(|| {
                ReadError::MetadataIntegrity {
                    what: format!("object {object}, undo record of version {version}"),
                }
            })?;
            records.insert(version, record);
        }
        Ok(records)
    }

    fn execute(&self, w: &mut Work, op: Op, space: &mut Space) -> Result<(), ApplyError> {
        match op {
            Op::KeepUndo { version, .. } => return keep_undo(w, version),
            Op::ContinueUndo { version, .. } => return continue_undo(w, version),
            Op::Rollback { version, .. } => return rollback(w, version, space),
            Op::DropUndo { version, .. } => {
                drop_undo(w, ..=version, space);
                return Ok(());
            }
            _ => {}
        }
        w.touched = true;
        w.restored = false;
        if matches!(
            op,
            Op::OmapSet { .. } | Op::OmapRemove { .. } | Op::OmapClear { .. }
        ) {
            w.omap_changed = true;
        }
        match op {
            Op::Touch { .. } => {
                w.record_mut();
            }
            Op::Write {
                offset_bytes,
                len_bytes,
                data,
                ..
            } => {
                let end_bytes = offset_bytes + len_bytes;
                let whole = (offset_bytes.div_ceil(BLOCK), end_bytes / BLOCK);
                self.refuse_growth_over_sealed_tail(w, end_bytes, whole)?;
                if len_bytes == 0 {
                    w.grow_to(offset_bytes);
                    return Ok(());
                }
                let first_block = offset_bytes / BLOCK;
                let head = (offset_bytes % BLOCK) as usize;
                let tail = ((offset_bytes + len_bytes) % BLOCK) as usize;
                let last = data.blocks().saturating_sub(1);
                let data = if head != 0 || tail != 0 {
                    let mut data = data.into_owned();
                    if head != 0 {
                        let old = self.read_block(w, first_block, space)?;
                        data[..head].copy_from_slice(&old[..head]);
                    }
                    if tail != 0 {
                        let old = self.read_block(w, first_block + last as u64, space)?;
                        let at = last * BLOCK as usize;
                        data[at + tail..].copy_from_slice(&old[tail..]);
                    }
                    Blocks::Owned(data)
                } else {
                    data
                };
                if data.blocks() > 0 {
                    self.write_blocks(w, first_block, data, Sealing::Store, space)?;
                }
                w.grow_to(offset_bytes + len_bytes);
            }
            Op::WriteSealed {
                first_chunk,
                data,
                chunks,
                end_bytes,
                ..
            } => {
                let end_chunk = first_chunk + chunks.len() as u64;
                self.refuse_growth_over_sealed_tail(w, end_bytes, (first_chunk, end_chunk))?;
                self.write_blocks(w, first_chunk, data, Sealing::Edge(&chunks), space)?;
                w.grow_to(end_bytes);
            }
            Op::Zero {
                offset_bytes,
                len_bytes,
                ..
            } => {
                let end_bytes = offset_bytes + len_bytes;
                let (full_first, full_end) = (offset_bytes.div_ceil(BLOCK), end_bytes / BLOCK);
                self.refuse_growth_over_sealed_tail(w, end_bytes, (full_first, full_end))?;
                if full_first < full_end {
                    space
                        .freed
                        .extend(punch(&mut w.extents, full_first, full_end));
                }
                let mut partial: Vec<u64> = Vec::new();
                if offset_bytes % BLOCK != 0 {
                    partial.push(offset_bytes / BLOCK);
                }
                if end_bytes % BLOCK != 0 && partial.last() != Some(&(end_bytes / BLOCK)) {
                    partial.push(end_bytes / BLOCK);
                }
                for block in partial.into_iter().filter(|_| len_bytes > 0) {
                    let from = offset_bytes.max(block * BLOCK) - block * BLOCK;
                    let to = end_bytes.min((block + 1) * BLOCK) - block * BLOCK;
                    self.zero_within_block(w, block, from as usize, to as usize, false, space)?;
                }
                w.grow_to(end_bytes);
            }
            Op::Truncate { size_bytes, .. } => {
                self.refuse_growth_over_sealed_tail(w, size_bytes, (0, 0))?;
                if size_bytes < w.size_bytes() {
                    space.freed.extend(punch(
                        &mut w.extents,
                        size_bytes.div_ceil(BLOCK),
                        OBJECT_BLOCKS_MAX,
                    ));
                    if size_bytes % BLOCK != 0 {
                        self.zero_within_block(
                            w,
                            size_bytes / BLOCK,
                            (size_bytes % BLOCK) as usize,
                            BLOCK as usize,
                            true,
                            space,
                        )?;
                    }
                }
                w.record_mut().size_bytes = size_bytes;
            }
            Op::Remove { .. } => {
                space
                    .freed
                    .extend(punch(&mut w.extents, 0, OBJECT_BLOCKS_MAX));
                if w.record.take().is_some() || w.original.is_some() {
                    w.clear_omap();
                }
            }
            Op::SetAttr { name, value, .. } => {
                let record = w.record_mut();
                record.attrs.insert(name, value);
                let bytes: usize = record.attrs.iter().map(|(k, v)| k.len() + v.len()).sum();
                if bytes > ATTRS_BYTES_MAX {
                    return Err(invalid(format!(
                        "attributes of one object are limited to {ATTRS_BYTES_MAX} bytes"
                    )));
                }
            }
            Op::RemoveAttr { name, .. } => {
                if let Some(record) = w.record.as_mut() {
                    record.attrs.remove(&name);
                }
            }
            Op::OmapSet { key, value, .. } => {
                w.record_mut();
                let (table, row, value) = if w.object.pool.is_pg_meta() {
                    (Table::Omap, omap_key(&w.id, &key), value)
                } else {
                    let id = w.id;
                    w.omap_keys
                        .insert(&key, &mut |row| self.load_omap_row(&id, row))?;
                    let slot = self.shared.meta.omap_slot(&id, &key);
                    let entry = omap::encode_entry(&key, &value);
                    (Table::OmapPaged, omap::entry_key(&id, &slot), entry)
                };
                let value = self.seal_meta(table, &row, value)?;
                w.omap_ops.push(MetaOp::Put {
                    table,
                    key: row,
                    value,
                });
            }
            Op::OmapRemove { key, .. } => {
                if w.record.is_some() {
                    let (table, row) = if w.object.pool.is_pg_meta() {
                        (Table::Omap, omap_key(&w.id, &key))
                    } else {
                        let id = w.id;
                        w.omap_keys
                            .remove(&key, &mut |row| self.load_omap_row(&id, row))?;
                        let slot = self.shared.meta.omap_slot(&id, &key);
                        (Table::OmapPaged, omap::entry_key(&id, &slot))
                    };
                    w.omap_ops.push(MetaOp::Remove { table, key: row });
                }
            }
            Op::OmapClear { .. } => {
                if w.record.is_some() {
                    w.clear_omap();
                }
            }
            Op::KeepUndo { .. }
            | Op::ContinueUndo { .. }
            | Op::Rollback { .. }
            | Op::DropUndo { .. } => {
                unreachable!("undo operations return above")
            }
        }
        Ok(())
    }

    /// Growing an object past a partial last block that a client sealed would expose that
    /// chunk's old bytes beyond the old size, which the store cannot zero (it has no key).
    /// Such growth is refused unless the operation replaces that chunk whole (it lies in
    /// `replaced`, a block range). The client rewrites its last chunk first.
    fn refuse_growth_over_sealed_tail(
        &self,
        w: &Work,
        new_size_bytes: u64,
        replaced: (u64, u64),
    ) -> Result<(), ApplyError> {
        let size_bytes = w.size_bytes();
        if new_size_bytes <= size_bytes || size_bytes.is_multiple_of(BLOCK) {
            return Ok(());
        }
        let tail = size_bytes / BLOCK;
        if replaced.0 <= tail && tail < replaced.1 {
            return Ok(());
        }
        if is_client_sealed(w, tail) {
            return Err(edge_sealed(w, tail));
        }
        Ok(())
    }

    /// The plaintext of one logical block as the transaction currently sees it. Its own
    /// writes left for the group commit are written out first, as the block may be one of
    /// theirs.
    fn read_block(
        &self,
        w: &Work,
        block: u64,
        space: &mut Space,
    ) -> Result<AlignedBuf, ApplyError> {
        if space.deferred.iter().any(|w| !w.written) {
            let unwritten = space.deferred.iter().filter(|w| !w.written);
            self.device.write_all(&write_pieces(unwritten))?;
            space.deferred.iter_mut().for_each(|w| w.written = true);
        }
        let mut buffer = AlignedBuf::for_overwrite(1);
        self.read_pieces(
            &w.object,
            &w.id,
            &pieces(&w.extents, block, block + 1),
            block,
            &mut buffer,
            ReadAs::Plaintext,
            Via::Cache,
        )
        .map_err(|e| match e {
            ReadError::EdgeSealed {
                object,
                offset_bytes,
            } => ApplyError::EdgeSealed {
                object,
                offset_bytes,
            },
            e => ApplyError::Read(e),
        })?;
        Ok(buffer)
    }

    /// Zeroes bytes `[from, to)` of a block by rewriting it; a hole stays a hole. A chunk
    /// sealed by a client cannot be opened here: zeroing part of it is refused, except past
    /// the new size on a truncate (`past_end`), where readers clip by size anyway.
    fn zero_within_block(
        &self,
        w: &mut Work,
        block: u64,
        from: usize,
        to: usize,
        past_end: bool,
        space: &mut Space,
    ) -> Result<(), ApplyError> {
        match pieces(&w.extents, block, block + 1).first() {
            None => Ok(()),
            Some(_) if is_client_sealed(w, block) => {
                if past_end {
                    Ok(())
                } else {
                    Err(edge_sealed(w, block))
                }
            }
            Some(_) => {
                let mut buffer = self.read_block(w, block, space)?;
                buffer[from..to].fill(0);
                self.write_blocks(w, block, Blocks::Owned(buffer), Sealing::Store, space)
            }
        }
    }

    /// Writes whole blocks to new device space as logical blocks `first_block..`, sealing
    /// them in place, and points the working extent map at them. A write that fits in one
    /// IO piece is sealed now and left for the group commit, which writes the small writes of
    /// a whole group in one submission; a larger one is written here, each piece sealed while
    /// the one before it is in flight. Shared bytes are written as they are when nothing is
    /// sealed in place (mode `none`, or chunks a client sealed), else copied to be sealed.
    fn write_blocks(
        &self,
        w: &mut Work,
        first_block: u64,
        data: Blocks,
        sealing: Sealing<'_>,
        space: &mut Space,
    ) -> Result<(), ApplyError> {
        let buffer = match data {
            Blocks::Shared(_) if matches!(sealing, Sealing::Store) && self.data.changes_bytes() => {
                Blocks::Owned(data.into_owned())
            }
            data => data,
        };
        let blocks = buffer.blocks() as u64;
        let runs = {
            let mut alloc = self.allocator.lock().expect("allocator lock poisoned");
            let free_bytes = alloc.free_blocks() * BLOCK;
            alloc.allocate(blocks).ok_or(ApplyError::NoSpace {
                needed_bytes: blocks * BLOCK,
                free_bytes,
            })?
        };
        space.allocated.extend_from_slice(&runs);
        let nonce_base = match sealing {
            Sealing::Store => self.shared.take_nonces(self.data.nonces_needed(blocks))?,
            Sealing::Edge(_) => 0,
        };
        let extent_blocks_max = match sealing {
            Sealing::Store if !self.data.keeps_chunk_records() => EXTENT_BLOCKS_MAX,
            Sealing::Store | Sealing::Edge(_) => SEALED_EXTENT_BLOCKS_MAX,
        };
        // IO parts of at most IO_PIECE_BLOCKS_MAX blocks: (logical block, physical block, len).
        let mut parts: Vec<(u64, u64, u64)> = Vec::new();
        let mut logical = first_block;
        for run in runs {
            let mut offset = 0;
            while offset < run.len {
                let len = (run.len - offset).min(IO_PIECE_BLOCKS_MAX);
                parts.push((logical, run.start + offset, len));
                logical += len;
                offset += len;
            }
        }
        let id = w.id;
        let incarnation = self.shared.nonces.incarnation();
        let mut seals: Vec<Option<ExtentSeal>> = vec![None; parts.len()];
        let mut seal = |index: usize, bytes: &mut [u8]| {
            let (logical, physical, len) = parts[index];
            let done = logical - first_block;
            seals[index] = Some(match sealing {
                Sealing::Store => self.data.seal(
                    bytes,
                    &id,
                    logical,
                    physical,
                    incarnation,
                    nonce_base + done,
                ),
                Sealing::Edge(chunks) => ExtentSeal::Edge {
                    chunks: chunks[done as usize..(done + len) as usize].to_vec(),
                },
            });
        };
        match buffer {
            Blocks::Owned(mut buffer) => {
                if let [(_, physical, _)] = parts[..] {
                    seal(0, &mut buffer);
                    space.deferred.push(PendingWrite {
                        offset_bytes: physical * BLOCK,
                        buffer: Blocks::Owned(buffer),
                        written: false,
                    });
                } else {
                    let mut io = Vec::with_capacity(parts.len());
                    let mut rest: &mut [u8] = &mut buffer;
                    for (_, physical, len) in &parts {
                        let (mine, tail) =
                            std::mem::take(&mut rest).split_at_mut((len * BLOCK) as usize);
                        io.push(IoPiece {
                            offset_bytes: physical * BLOCK,
                            buffer: mine,
                        });
                        rest = tail;
                    }
                    self.device.write_each(&mut io, &mut seal)?;
                    space.wrote_alone = true;
                }
            }
            Blocks::Shared(bytes) => {
                // Sealing leaves these bytes as they are (mode none, or a client's chunks): it
                // only makes their records, so it is given no bytes.
                let mut at = 0;
                let mut io = Vec::with_capacity(parts.len());
                for (index, (_, physical, len)) in parts.iter().enumerate() {
                    let end = at + (len * BLOCK) as usize;
                    seal(index, &mut []);
                    io.push((physical * BLOCK, bytes.slice(at..end)));
                    at = end;
                }
                if let [(offset_bytes, _)] = io[..] {
                    space.deferred.push(PendingWrite {
                        offset_bytes,
                        buffer: Blocks::Shared(bytes),
                        written: false,
                    });
                } else {
                    self.device.write_all(&pieces_at(&io))?;
                    space.wrote_alone = true;
                }
            }
        }
        // Extents: plain parts that are contiguous on the device join up to the mode's limit;
        // sealed parts are cut to it.
        let mut written: Vec<(u64, Extent)> = Vec::with_capacity(parts.len());
        for ((logical, physical, len), seal) in parts.into_iter().zip(seals) {
            let seal = seal.expect("every part is sealed before it is written");
            if let Some((start, last)) = written.last_mut() {
                let joins = seal == ExtentSeal::Bare
                    && last.seal == ExtentSeal::Bare
                    && last.physical_block + last.len_blocks == physical
                    && *start + last.len_blocks == logical
                    && last.len_blocks + len <= extent_blocks_max;
                if joins {
                    last.len_blocks += len;
                    continue;
                }
            }
            let part = Extent {
                physical_block: physical,
                len_blocks: len,
                seal,
            };
            let mut skip = 0;
            while skip < len {
                let cut = (len - skip).min(extent_blocks_max);
                written.push((logical + skip, part.slice(skip, cut)));
                skip += cut;
            }
        }
        space
            .freed
            .extend(punch(&mut w.extents, first_block, first_block + blocks));
        w.extents.extend(written);
        Ok(())
    }

    /// A row of an object's paged omap as the changes waiting leave it, opened (the object
    /// is locked, so no commit can change it meanwhile).
    fn load_omap_row(&self, id: &ObjectId, row: Row) -> Result<Option<Vec<u8>>, ApplyError> {
        let key = row.key(id);
        let pending = self.shared.waiting();
        let txn = self.shared.db.begin_read()?;
        let rows = txn.open_table(OMAP_PAGED)?;
        let Some(stored) = pending.view(Table::OmapPaged, &rows).get(&key)? else {
            return Ok(None);
        };
        self.shared
            .meta
            .open(Table::OmapPaged, &key, &stored)
            .map(Some)
            .map_err(|_| Damaged("an omap row that does not open").into())
    }

    fn seal_meta(&self, table: Table, key: &[u8], plain: Vec<u8>) -> Result<Vec<u8>, ApplyError> {
        let nonce = self
            .shared
            .take_nonces(self.shared.meta.nonces_per_value())?;
        Ok(self
            .shared
            .meta
            .seal(table, key, plain, self.shared.nonces.incarnation(), nonce))
    }

    /// The metadata changes of all touched objects: records, extent diffs, omap in order;
    /// then the undo records kept and dropped (with the blocks kept out of `space.freed`,
    /// or put into it).
    fn metadata_batch(
        &self,
        works: &mut [Work],
        space: &mut Space,
    ) -> Result<Vec<MetaOp>, ApplyError> {
        let mut batch = Vec::new();
        let now = now_ns();
        // A removed object without omap rows (most are) changes no key range: its group
        // then waits for its commit with the others (pending.rs) instead of being
        // committed at once.
        let mut clears_rows = Vec::with_capacity(works.len());
        for w in works.iter_mut() {
            let clears = w.omap_cleared && self.has_omap(w)?;
            self.undo_batch(w, clears, space, &mut batch)?;
            clears_rows.push(clears);
        }
        for (w, clears) in works.iter_mut().zip(clears_rows) {
            if !w.touched {
                continue;
            }
            let key = object_key(w.object.pool, w.object.name.hash(), &w.id).to_vec();
            match w.record.as_mut() {
                Some(record) => {
                    // A rolled-back object gets its record back as it was.
                    if !w.restored {
                        record.version = w.original.as_ref().map_or(0, |o| o.version) + 1;
                        record.mtime_ns = now;
                    }
                    let plain = postcard::to_allocvec(record)
                        .expect("serialising a record to memory cannot fail");
                    let value = self.seal_meta(Table::Objects, &key, plain)?;
                    batch.push(MetaOp::Put {
                        table: Table::Objects,
                        key,
                        value,
                    });
                }
                None if w.original.is_some() => batch.push(MetaOp::Remove {
                    table: Table::Objects,
                    key,
                }),
                None => {}
            }
            for block in w
                .loaded
                .keys()
                .filter(|block| !w.extents.contains_key(block))
            {
                batch.push(MetaOp::Remove {
                    table: Table::Extents,
                    key: extent_key(&w.id, *block).to_vec(),
                });
            }
            for (block, extent) in &w.extents {
                if w.loaded.get(block) != Some(extent) {
                    let key = extent_key(&w.id, *block).to_vec();
                    let plain = postcard::to_allocvec(extent)
                        .expect("serialising an extent to memory cannot fail");
                    let value = self.seal_meta(Table::Extents, &key, plain)?;
                    batch.push(MetaOp::Put {
                        table: Table::Extents,
                        key,
                        value,
                    });
                }
            }
            if clears {
                batch.push(w.remove_omap_rows());
            }
            batch.append(&mut w.omap_ops);
            for (row, plain) in std::mem::take(&mut w.omap_keys).changes() {
                let key = row.key(&w.id);
                batch.push(match plain {
                    Some(plain) => MetaOp::Put {
                        value: self.seal_meta(Table::OmapPaged, &key, plain)?,
                        table: Table::OmapPaged,
                        key,
                    },
                    None => MetaOp::Remove {
                        table: Table::OmapPaged,
                        key,
                    },
                });
            }
        }
        Ok(batch)
    }

    /// The undo records `w` keeps and drops (undo.rs), as metadata changes; the blocks a
    /// kept record holds are taken out of `space.freed`, those of dropped records put in.
    fn undo_batch(
        &self,
        w: &mut Work,
        clears_omap_rows: bool,
        space: &mut Space,
        batch: &mut Vec<MetaOp>,
    ) -> Result<(), ApplyError> {
        match w.keep {
            Some(_) if w.omap_changed || clears_omap_rows => {
                return Err(invalid(format!(
                    "object {} changes its omap and keeps an undo record, which does not \
                     cover omap",
                    w.object
                )))
            }
            None if w.touched && !w.restored => {
                match w.continues {
                    Some(version) => continues_cleanly(w, version)?,
                    // Its records no longer lead back from what this transaction leaves.
                    None => drop_undo(w, .., space),
                }
            }
            _ => {}
        }
        for version in std::mem::take(&mut w.undo_dropped) {
            batch.push(MetaOp::Remove {
                table: Table::Undo,
                key: undo_key(&w.object, &w.id, version).to_vec(),
            });
        }
        let Some(version) = w.keep else {
            return Ok(());
        };
        let record = undo_record(w);
        assert!(
            subtract(&record.kept, &space.freed).is_empty(),
            "an undo record of {} keeps blocks its transaction did not free",
            w.object
        );
        space.freed = subtract(&space.freed, &record.kept);
        let key = undo_key(&w.object, &w.id, version).to_vec();
        let plain =
            postcard::to_allocvec(&record).expect("serialising a record to memory cannot fail");
        batch.push(MetaOp::Put {
            value: self.seal_meta(Table::Undo, &key, plain)?,
            table: Table::Undo,
            key,
        });
        Ok(())
    }

    /// Whether `w` had omap rows before this transaction (the changes waiting for their
    /// commit over the database).
    fn has_omap(&self, w: &Work) -> Result<bool, ApplyError> {
        let pending = self.shared.waiting();
        let txn = self.shared.db.begin_read()?;
        let table = omap_table(w.object.pool);
        let rows = open_omap(&txn, table)?;
        let end = prefix_end(&w.id).expect("an object id is not all 0xff");
        let first = pending.view(table, &rows).rows(
            Bound::Included(&w.id[..]),
            Bound::Excluded(&end[..]),
            false,
            1,
        )?;
        Ok(first.first().is_some_and(|(key, _)| key.starts_with(&w.id)))
    }

    /// Commits one group (see commit.rs and wal.rs): the batches' small writes, then one log
    /// record of every batch whose writes landed, then their metadata.
    fn flush(&self, group: Vec<Batch>) -> Result<Vec<Result<(), ApplyError>>, ApplyError> {
        let started = std::time::Instant::now();
        let flushed = self.flush_group(group);
        crate::metrics::committed(started.elapsed());
        flushed
    }

    /// A group of small writes only (at most `INLINE_BYTES_MAX`, no batch wrote data of its
    /// own) takes the short path: the record copies the writes' sealed blocks, and the
    /// writes go to the data device while the record is written and synced, with no data
    /// sync. If the writes fail there, the record is erased and the group takes the other
    /// path: the writes batch by batch, a data sync, then a record of the batches whose
    /// writes landed, with no copies. A record too large for the log is not logged: the
    /// data device is synced and the metadata committed durably.
    fn flush_group(
        &self,
        mut group: Vec<Batch>,
    ) -> Result<Vec<Result<(), ApplyError>>, ApplyError> {
        let inline_bytes: u64 = group
            .iter()
            .flat_map(|b| &b.writes)
            .map(|w| w.buffer.len() as u64)
            .sum();
        let short = !group.iter().any(|b| b.wrote_alone) && inline_bytes <= wal::INLINE_BYTES_MAX;
        if short {
            let all = vec![true; group.len()];
            let (seq, record, deltas) = self.log_record(&group, &all, true)?;
            let len = record.len() as u64;
            if self.wal.holds(len) {
                if !self.wal.fits(len) {
                    self.checkpoint()?;
                }
                let pieces = write_pieces(group.iter().flat_map(unwritten));
                let mut appended = Ok(());
                let written = self
                    .device
                    .write_all_alongside(&pieces, &mut || appended = self.wal.append(&record));
                appended?;
                if written.is_ok() {
                    self.apply_logged(&mut group, &all, &deltas, seq)?;
                    self.checkpoint_if_short_of_room()?;
                    return Ok(group.iter().map(|_| Ok(())).collect());
                }
                self.wal.erase_last(len)?;
            }
        }
        let outcomes = self.write_deferred(&group);
        self.device.sync()?;
        let landed: Vec<bool> = outcomes.iter().map(Result::is_ok).collect();
        let (seq, record, deltas) = self.log_record(&group, &landed, false)?;
        let len = record.len() as u64;
        if !self.wal.holds(len) {
            let meta = take_meta(&mut group, &landed);
            let commit = Commit::Durable { next_seq: seq };
            self.shared
                .commit_with_waiting(meta, &deltas, Some(commit))?;
            self.wal.restart();
            return Ok(outcomes);
        }
        if !self.wal.fits(len) {
            self.checkpoint()?;
        }
        self.wal.append(&record)?;
        self.apply_logged(&mut group, &landed, &deltas, seq)?;
        self.checkpoint_if_short_of_room()?;
        Ok(outcomes)
    }

    /// A checkpoint after a logged commit when the file system under the store is short of
    /// room (`Store::short_of_room`).
    fn checkpoint_if_short_of_room(&self) -> Result<(), ApplyError> {
        match self.short_of_room() {
            true => self.checkpoint(),
            false => Ok(()),
        }
    }

    /// The log record of the batches of `group` that `landed`, numbered as the log's next,
    /// with copies of their small writes if `copies`; and their usage deltas summed.
    fn log_record(
        &self,
        group: &[Batch],
        landed: &[bool],
        copies: bool,
    ) -> Result<(u64, AlignedBuf, BTreeMap<PoolId, Delta>), ApplyError> {
        let landed = || {
            group
                .iter()
                .zip(landed)
                .filter(|(_, l)| **l)
                .map(|(b, _)| b)
        };
        let mut deltas: BTreeMap<PoolId, Delta> = BTreeMap::new();
        for (pool, delta) in landed().flat_map(|b| &b.usage) {
            deltas.entry(*pool).or_default().add(*delta);
        }
        deltas.retain(|_, delta| *delta != Delta::default());
        let usage: Vec<(PoolId, Delta)> = deltas.iter().map(|(p, d)| (*p, *d)).collect();
        let meta: Vec<&[MetaOp]> = landed().map(|b| &b.meta[..]).collect();
        let freed: Vec<Run> = landed().flat_map(|b| b.freed.iter().copied()).collect();
        let writes = match copies {
            true => write_pieces(landed().flat_map(|b| &b.writes)),
            false => Vec::new(),
        };
        let seq = self.wal.tail().next_seq;
        let entry = wal::Entry {
            meta: &meta,
            usage: &usage,
            freed: &freed,
            writes: &writes,
        };
        let nonce = self
            .shared
            .take_nonces(self.shared.meta.nonces_per_value())?;
        let record = wal::encode(seq, &entry, |head| {
            let incarnation = self.shared.nonces.incarnation();
            let key = wal::head_key(seq);
            self.shared
                .meta
                .seal(Table::Wal, &key, head, incarnation, nonce)
        });
        Ok((seq, record, deltas))
    }

    /// Makes everything so far durable without the log: syncs the data device, commits the
    /// database durably, and starts the log again.
    pub(crate) fn checkpoint(&self) -> Result<(), ApplyError> {
        // Only a group's leader (or a store being opened or closed) gets here: nothing is
        // logged meanwhile, so none of the changes waiting is left out when the log starts
        // again.
        self.device.sync()?;
        let next_seq = self.wal.tail().next_seq;
        let commit = Commit::Durable { next_seq };
        self.shared
            .commit_with_waiting(Vec::new(), &BTreeMap::new(), Some(commit))?;
        self.wal.restart();
        crate::metrics::checkpointed();
        Ok(())
    }

    /// Replays the log after a crash (see wal.rs), from record `start`; the database holds
    /// every record up to `applied`. Ends with a checkpoint.
    pub(crate) fn replay_log(&self, start: u64, applied: u64) -> Result<u64, ApplyError> {
        let log = self.wal.read_all()?;
        let open = |seq: u64, head: &[u8]| {
            self.shared
                .meta
                .open(Table::Wal, &wal::head_key(seq), head)
                .ok()
        };
        let scan = wal::scan(&log, start, &open);
        if let Some(seq) = scan.damaged {
            return Err(invalid(format!(
                "log record {seq} was written whole but does not read back: the log was \
                 altered or damaged on the disk, and the records after it hold acknowledged \
                 writes, so the store does not open past it"
            )));
        }
        let records = scan.records;
        let end_bytes = self.device.len_bytes();
        let mut copies = Vec::new();
        for (offset_bytes, bytes) in wal::rewrites(&records) {
            if offset_bytes
                .checked_add(BLOCK)
                .is_none_or(|end| end > end_bytes)
            {
                return Err(invalid(format!(
                    "a log record writes at byte {offset_bytes}, past the data device's end"
                )));
            }
            let mut buffer = AlignedBuf::for_overwrite(1);
            buffer.copy_from_slice(bytes);
            copies.push((offset_bytes, buffer));
        }
        self.device.write_all(&pieces_at(&copies))?;
        self.device.sync()?;
        let replayed = records.len() as u64;
        for record in records.into_iter().filter(|r| r.seq > applied) {
            let deltas = record.usage.into_iter().collect();
            self.shared.commit_metadata(
                &Pending::default(),
                record.meta,
                &deltas,
                Commit::Logged { seq: record.seq },
            )?;
        }
        // The database holds every record up to `applied`. The log holds fewer only if it
        // lost some at its end on the disk (the scan takes that for a torn end) after a
        // durable commit (a nonce reservation) put them in the database: the next record is
        // numbered past both, so no number is used twice and a later replay does not take a
        // new record for one the database holds.
        self.wal.restart_at((start + replayed).max(applied + 1));
        self.checkpoint()?;
        Ok(replayed)
    }

    /// Puts the metadata of the batches of `group` that `landed`, logged in record `seq`,
    /// into the database, or keeps it with the changes waiting (pending.rs) and asks the
    /// store's thread to commit them once enough wait (behind.rs).
    fn apply_logged(
        &self,
        group: &mut [Batch],
        landed: &[bool],
        deltas: &BTreeMap<PoolId, Delta>,
        seq: u64,
    ) -> Result<(), ApplyError> {
        let ids: Vec<ObjectId> = group
            .iter()
            .zip(landed)
            .filter(|(_, l)| **l)
            .flat_map(|(b, _)| b.ids.iter().copied())
            .collect();
        let meta = take_meta(group, landed);
        if !pending::deferrable(&meta) {
            return self
                .shared
                .commit_with_waiting(meta, deltas, Some(Commit::Logged { seq }));
        }
        let (due, overdue) = {
            let mut waiting = self.shared.waiting_mut();
            let newer = waiting.newer();
            newer.add(meta, deltas, seq, ids);
            (newer.due(), newer.overdue())
        };
        if overdue {
            // Writers outrun the store's thread: this one commits, after the thread's
            // commit. The group is logged and in view: durable, and answered so whatever
            // the commit does; a failed commit poisons the store, which takes nothing more
            // until it is opened again and replays the log.
            let _ = self.shared.commit_waiting("committing logged changes");
        } else if due {
            self.behind.ask();
        }
        Ok(())
    }

    /// Commits the changes waiting, those of object `id` or, with `None`, all of them: a
    /// reader that does not look at them (pending.rs) calls this before it begins a
    /// database snapshot. A failed commit poisons the store, and reads that need the
    /// changes are refused until it is opened again (and replays them from the log).
    pub(crate) fn settle(&self, id: Option<&ObjectId>) -> Result<(), ReadError> {
        let waiting = self.shared.waiting();
        if waiting.is_empty() || id.is_some_and(|id| !waiting.touches(id)) {
            return Ok(());
        }
        drop(waiting);
        if let Some(cause) = self.shared.committer.poisoned() {
            return Err(ReadError::Poisoned { cause });
        }
        self.shared
            .commit_waiting("committing logged changes for a read")
            .map_err(|cause| ReadError::Poisoned { cause })
    }

    /// Writes the small writes of every batch in `group` in one submission. If the device
    /// refuses any, each batch's writes are tried again on their own (they go to blocks no
    /// one else holds, so writing them twice is harmless), and only the batches whose writes
    /// fail get the error.
    fn write_deferred(&self, group: &[Batch]) -> Vec<Result<(), ApplyError>> {
        let all = write_pieces(group.iter().flat_map(unwritten));
        if all.is_empty() || self.device.write_all(&all).is_ok() {
            return group.iter().map(|_| Ok(())).collect();
        }
        group
            .iter()
            .map(|batch| {
                self.device
                    .write_all(&write_pieces(unwritten(batch)))
                    .map_err(ApplyError::Io)
            })
            .collect()
    }
}

impl Shared {
    /// Commits all the changes waiting. If that fails (redb panics on some damaged files:
    /// that is a failed commit too), poisons the store and returns why.
    pub(crate) fn commit_waiting(&self, what: &str) -> Result<(), String> {
        let committed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.commit_with_waiting(Vec::new(), &BTreeMap::new(), None)
        }));
        let cause = match committed {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => format!("{what}: {e}"),
            Err(_) => format!("{what} panicked"),
        };
        self.committer.poison(cause.clone());
        Err(cause)
    }

    /// Commits the changes waiting, then `ops`, and the usage deltas of both, in one
    /// database commit made durable as `commit` says; with `None`, as logged up to the last
    /// record whose changes wait (nothing, if none wait). One commit at a time, and readers
    /// go on meanwhile (pending.rs). If it fails, the changes stay in view and no later
    /// commit is made.
    fn commit_with_waiting(
        &self,
        ops: Vec<MetaOp>,
        deltas: &BTreeMap<PoolId, Delta>,
        commit: Option<Commit>,
    ) -> Result<(), ApplyError> {
        let _one_at_a_time = self.commits.lock().unwrap_or_else(PoisonError::into_inner);
        let changes = self
            .waiting_mut()
            .begin_commit()
            .ok_or_else(|| ApplyError::Poisoned {
                cause: "an earlier commit of logged changes failed".to_string(),
            })?;
        let commit = match (commit, changes.seq()) {
            (Some(Commit::Logged { seq }), Some(waiting)) => {
                assert!(waiting < seq, "log record {seq} committed after {waiting}");
                Commit::Logged { seq }
            }
            (Some(commit), _) => commit,
            (None, Some(seq)) => Commit::Logged { seq },
            (None, None) => {
                self.waiting_mut().end_commit();
                return Ok(());
            }
        };
        self.commit_metadata(&changes, ops, deltas, commit)?;
        self.waiting_mut().end_commit();
        Ok(())
    }

    /// The changes waiting (pending.rs), to read. They are dropped only once committed, so
    /// a panic during a commit leaves them whole, and a poisoned lock is taken as it is.
    pub(crate) fn waiting(&self) -> RwLockReadGuard<'_, Waiting> {
        self.pending.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn waiting_mut(&self) -> RwLockWriteGuard<'_, Waiting> {
        self.pending.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies the changes in `pending`, then `ops`, and the usage deltas of both in one
    /// database commit, made durable as `commit` says.
    pub(crate) fn commit_metadata(
        &self,
        pending: &Pending,
        ops: Vec<MetaOp>,
        deltas: &BTreeMap<PoolId, Delta>,
        commit: Commit,
    ) -> Result<(), ApplyError> {
        let deltas = &pending.usage_with(deltas);
        // The usage rows' nonces are taken before the commit's write transaction: taking
        // them may durably raise the reservation, a redb write of its own, which would wait
        // for the commit's forever.
        let per_row = self.meta.nonces_per_value();
        let mut nonce = self.take_nonces(deltas.len() as u64 * per_row)?;
        let mut txn = self.db.begin_write()?;
        if let Commit::Logged { .. } = commit {
            txn.set_durability(redb::Durability::None)
                .expect("a transaction that makes no savepoint takes any durability");
        }
        {
            // In the order of `pending::table_slot`.
            let mut tables = [
                txn.open_table(OBJECTS)?,
                txn.open_table(EXTENTS)?,
                txn.open_table(OMAP)?,
                txn.open_table(OMAP_PAGED)?,
                txn.open_table(UNDO)?,
            ];
            for (table, changes) in pending.tables() {
                let t = &mut tables[pending::table_slot(table)];
                for (key, change) in changes {
                    match change {
                        Some(value) => t.insert(&key[..], &value[..])?,
                        None => t.remove(&key[..])?,
                    };
                }
            }
            for op in ops {
                let table = match &op {
                    MetaOp::Put { table, .. }
                    | MetaOp::Remove { table, .. }
                    | MetaOp::RemovePrefix { table, .. } => *table,
                };
                let t = &mut tables[pending::table_slot(table)];
                match op {
                    MetaOp::Put { key, value, .. } => {
                        t.insert(&key[..], &value[..])?;
                    }
                    MetaOp::Remove { key, .. } => {
                        t.remove(&key[..])?;
                    }
                    MetaOp::RemovePrefix { prefix, .. } => match prefix_end(&prefix) {
                        Some(end) => {
                            t.retain_in::<&[u8], _>(&prefix[..]..&end[..], |_, _| false)?
                        }
                        None => t.retain_in::<&[u8], _>(&prefix[..].., |_, _| false)?,
                    },
                }
            }
            let mut superblock = txn.open_table(SUPERBLOCK)?;
            match commit {
                Commit::Logged { seq } => superblock.insert(WAL_APPLIED, &seq.to_be_bytes()[..])?,
                Commit::Durable { next_seq } => {
                    superblock.insert(WAL_START, &next_seq.to_be_bytes()[..])?
                }
            };
        }
        usage::commit(&txn, &self.meta, deltas, |key, plain| {
            let sealed = self.meta.seal(
                Table::PoolUsage,
                key,
                plain,
                self.nonces.incarnation(),
                nonce,
            );
            nonce += per_row;
            sealed
        })?;
        txn.commit()?;
        Ok(())
    }

    fn take_nonces(&self, count: u64) -> Result<u64, ApplyError> {
        if count == 0 {
            return Ok(0);
        }
        self.nonces
            .take(count, |mark| self.persist_nonce_reservation(mark))
            .map_err(ApplyError::Metadata)
    }
}

/// The metadata changes of the batches of `group` that `landed`, in order, taken out of them.
fn take_meta(group: &mut [Batch], landed: &[bool]) -> Vec<MetaOp> {
    group
        .iter_mut()
        .zip(landed)
        .filter(|(_, l)| **l)
        .flat_map(|(b, _)| std::mem::take(&mut b.meta))
        .collect()
}

/// Buffers to write, each at its device offset.
fn pieces_at<B: std::ops::Deref<Target = [u8]>>(writes: &[(u64, B)]) -> Vec<WritePiece<'_>> {
    writes
        .iter()
        .map(|(offset_bytes, buffer)| WritePiece {
            offset_bytes: *offset_bytes,
            buffer,
        })
        .collect()
}

/// The small writes of `batch` not written yet.
fn unwritten(batch: &Batch) -> impl Iterator<Item = &PendingWrite> {
    batch.writes.iter().filter(|w| !w.written)
}

fn write_pieces<'a>(writes: impl Iterator<Item = &'a PendingWrite>) -> Vec<WritePiece<'a>> {
    writes
        .map(|w| WritePiece {
            offset_bytes: w.offset_bytes,
            buffer: &w.buffer,
        })
        .collect()
}

/// Whether logical `block` of the working object holds a chunk sealed by a client.
fn is_client_sealed(w: &Work, block: u64) -> bool {
    matches!(
        pieces(&w.extents, block, block + 1).first(),
        Some((
            _,
            Extent {
                seal: ExtentSeal::Edge { .. },
                ..
            }
        ))
    )
}

fn edge_sealed(w: &Work, block: u64) -> ApplyError {
    ApplyError::EdgeSealed {
        object: w.object.to_string(),
        offset_bytes: block * BLOCK,
    }
}

pub(crate) fn slot_of(id: &ObjectId) -> usize {
    let mut prefix = [0u8; 8];
    prefix.copy_from_slice(&id[..8]);
    (u64::from_le_bytes(prefix) % LOCK_SLOTS as u64) as usize
}
