//! Reading: object data (opened in place in the IO buffer), client-sealed chunks as they
//! are, stat, attributes and omap. A read holds its object's lock shared, so no transaction
//! can free (and another reuse) the blocks it is reading.

use crate::allocator::Run;
use crate::apply::{slot_of, WRITE_BYTES_MAX};
use crate::cache::Block;
use crate::device::{AlignedBuf, IoPiece, BLOCK_SIZE_BYTES, IO_PIECE_BLOCKS_MAX};
use crate::error::ReadError;
use crate::metadata::{
    object_key, omap_key, omap_table, open_omap, ObjectId, Table, EXTENTS, OBJECTS, OMAP, UNDO,
};
use crate::object::{
    load_extents, pieces, Extent, ExtentMap, LoadError, ObjectRecord, OBJECT_BLOCKS_MAX,
};
use crate::omap::{self, Row};
use crate::pending::{View, Waiting};
use crate::seal::{ChunkRecord, DataSealer, ExtentSeal};
use crate::store::{log_in_snapshot, Store};
use crate::undo::{undo_key, undo_key_version};
use bytes::Bytes;
use map::{ObjectHash, ObjectRef};
use redb::{ReadTransaction, ReadableDatabase, ReadableTable};
use std::collections::BTreeMap;
use std::ops::Deref;

const BLOCK: u64 = BLOCK_SIZE_BYTES;
/// Largest single read, in bytes.
pub const READ_BYTES_MAX: u64 = WRITE_BYTES_MAX;
/// One omap entry: key and value.
pub type OmapEntry = (Vec<u8>, Vec<u8>);

/// Most omap entries returned by one `omap_list` call.
pub const OMAP_PAGE_ENTRIES_MAX: usize = 1000;

/// What a read does with the extents it reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadAs {
    /// Opens each in place (`read`); chunks a client sealed are refused: no key here.
    Plaintext,
    /// Returns them as stored (`read_sealed`); chunks the store sealed are refused: their
    /// plaintext is only for `read`.
    ClientSealed,
}

/// Where a read may find its blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The read cache where it holds them (and they are kept there once read): every
    /// read that serves data.
    Cache,
    /// The data device only, without keeping what was read: scrub, which checks what the
    /// device holds, and whose sweep over every object would only push out what is used.
    Device,
}

/// Data returned by `read`: a window into the aligned buffer the device read into, so the
/// plaintext is never copied after it was opened.
pub struct ReadBuf {
    buffer: AlignedBuf,
    start: usize,
    len: usize,
}

impl Deref for ReadBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buffer[self.start..self.start + self.len]
    }
}

/// The window handed on as `Bytes` without a copy: a slice of its buffer's.
impl From<ReadBuf> for bytes::Bytes {
    fn from(read: ReadBuf) -> bytes::Bytes {
        bytes::Bytes::from(read.buffer).slice(read.start..read.start + read.len)
    }
}

impl std::fmt::Debug for ReadBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReadBuf({} bytes)", self.len)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectStat {
    pub size_bytes: u64,
    /// Grows by one with every transaction that changes the object.
    pub version: u64,
    pub mtime_ns: u64,
    pub hash: ObjectHash,
}

/// Chunks read by `read_sealed`: `data` holds every requested chunk (zeros for holes);
/// `chunks[i]` is chunk i's seal record, or None for a hole.
#[derive(Debug)]
pub struct SealedRead {
    /// In pieces, in order: the cache's blocks as they are, slices of what was read from the
    /// device, zeros.
    pub data: Vec<Bytes>,
    pub chunks: Vec<Option<ChunkRecord>>,
    /// The object's size in the same snapshot as the chunks: a client merging a partial
    /// chunk zeroes what lies past it, so the two must agree.
    pub size_bytes: u64,
}

/// What [`Store::read_ranges_via`] read: the object's attributes and size, and the bytes of
/// each range asked for, all of one state of the object.
pub struct RangesRead {
    pub attrs: BTreeMap<String, Vec<u8>>,
    pub size_bytes: u64,
    /// The ranges' bytes one after another, each as long as asked: zeros past the
    /// object's end (and where it has holes).
    pub data: Vec<u8>,
    /// Read `sealed`: the record of each chunk read, in order (`None`: a hole); else empty.
    pub chunks: Vec<Option<ChunkRecord>>,
}

impl Store {
    /// The object's attributes and `ranges` (offset, length in bytes) of it, from one
    /// snapshot under the object's lock, so no transaction on it lands between them.
    /// `sealed`: the ranges are whole chunks, returned as a client sealed them with their
    /// records ([`Store::read_sealed`]); else plaintext ([`Store::read`]).
    pub fn read_ranges_via(
        &self,
        object: &ObjectRef,
        ranges: &[(u64, u64)],
        sealed: bool,
        via: Via,
    ) -> Result<RangesRead, ReadError> {
        let wanted = ranges
            .iter()
            .try_fold(0u64, |sum, (_, len)| sum.checked_add(*len))
            .filter(|bytes| *bytes <= READ_BYTES_MAX)
            .ok_or_else(|| ReadError::Invalid {
                reason: format!(
                    "a read of {} ranges over {READ_BYTES_MAX} bytes in all",
                    ranges.len()
                ),
            })?;
        if sealed
            && ranges
                .iter()
                .any(|(at, len)| at % BLOCK != 0 || len % BLOCK != 0)
        {
            return Err(ReadError::Invalid {
                reason: format!("{object}: a read of sealed chunks takes whole chunks"),
            });
        }
        let id = self
            .shared
            .meta
            .object_id(object.pool, object.name.as_str());
        let _lock = self.slots[slot_of(&id)]
            .read()
            .expect("object lock poisoned");
        let (txn, record) = self.snapshot(object, &id)?;
        let table = txn.open_table(EXTENTS)?;
        // Each range's blocks [first, end), the bytes of it they hold from its offset, and
        // their extents, planned in the snapshot. A plaintext range stops at the object's
        // end (bytes past it in its last block are not the object's); sealed chunks past
        // it are holes.
        let mut planned = Vec::with_capacity(ranges.len());
        for &(offset, len) in ranges {
            let (first, end, held) = if sealed {
                let (first, end) = (offset / BLOCK, offset.saturating_add(len) / BLOCK);
                let end = end.min(OBJECT_BLOCKS_MAX).max(first);
                (first, end, (end - first) * BLOCK)
            } else {
                let end_bytes = offset.saturating_add(len).min(record.size_bytes);
                match end_bytes.checked_sub(offset) {
                    Some(held) if held > 0 => (offset / BLOCK, end_bytes.div_ceil(BLOCK), held),
                    _ => (0, 0, 0),
                }
            };
            let pieces = if end > first {
                pieces(
                    &self.load_extent_map(&View::committed(&table), object, &id, first, end)?,
                    first,
                    end,
                )
            } else {
                Vec::new()
            };
            planned.push((first, end, held, pieces));
        }
        drop(table);
        drop(txn);
        let read_as = if sealed {
            ReadAs::ClientSealed
        } else {
            ReadAs::Plaintext
        };
        let mut data = Vec::with_capacity(wanted as usize);
        let mut chunks = Vec::new();
        for (&(offset, len), (first, end, held, pieces)) in ranges.iter().zip(&planned) {
            if end > first {
                let mut buffer = AlignedBuf::for_overwrite((end - first) as usize);
                self.read_pieces(object, &id, pieces, *first, &mut buffer, read_as, via)?;
                let from = (offset - first * BLOCK) as usize;
                data.extend_from_slice(&buffer[from..from + *held as usize]);
            }
            data.resize(data.len() + (len - held) as usize, 0);
            if sealed {
                let at = chunks.len();
                chunks.resize(at + (len / BLOCK) as usize, None);
                for (block, extent) in pieces {
                    if let ExtentSeal::Edge { chunks: records } = &extent.seal {
                        for (i, record) in records.iter().enumerate() {
                            chunks[at + (block - first) as usize + i] = Some(*record);
                        }
                    }
                }
            }
        }
        Ok(RangesRead {
            attrs: record.attrs,
            size_bytes: record.size_bytes,
            data,
            chunks,
        })
    }

    pub(crate) fn load_record<T: ReadableTable<&'static [u8], &'static [u8]>>(
        &self,
        objects: &View<'_, T>,
        object: &ObjectRef,
        id: &ObjectId,
    ) -> Result<Option<ObjectRecord>, ReadError> {
        let key = object_key(object.pool, object.name.hash(), id);
        let Some(stored) = objects.get(&key[..])? else {
            return Ok(None);
        };
        let record: Option<ObjectRecord> = self
            .shared
            .meta
            .open(Table::Objects, &key, &stored)
            .ok()
            .and_then(|plain| postcard::from_bytes(&plain).ok());
        match record {
            Some(record) if record.name == object.name.as_str() => Ok(Some(record)),
            _ => Err(ReadError::MetadataIntegrity {
                what: format!("object {object}"),
            }),
        }
    }

    pub(crate) fn load_extent_map<T: ReadableTable<&'static [u8], &'static [u8]>>(
        &self,
        extents: &View<'_, T>,
        object: &ObjectRef,
        id: &ObjectId,
        first: u64,
        end: u64,
    ) -> Result<ExtentMap, ReadError> {
        load_extents(extents, &self.shared.meta, id, first, end).map_err(|e| match e {
            LoadError::Storage(e) => ReadError::from(e),
            LoadError::Integrity { logical_block } => ReadError::MetadataIntegrity {
                what: format!(
                    "object {object}, extent at offset {}",
                    logical_block * BLOCK
                ),
            },
        })
    }

    /// Reads each extent piece into `buffer` (which starts at logical block `first_block`)
    /// and, for a plaintext read, opens it in place; the blocks between pieces (holes) are
    /// zeroed. Extents are read in parts of at most `IO_PIECE_BLOCKS_MAX` blocks. Via the
    /// cache, a part it holds whole is copied from it; the others are all submitted at
    /// once, kept in the cache as they arrive, and opened on this thread while the others
    /// are in flight.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read_pieces(
        &self,
        object: &ObjectRef,
        id: &ObjectId,
        pieces: &[(u64, Extent)],
        first_block: u64,
        buffer: &mut [u8],
        read_as: ReadAs,
        via: Via,
    ) -> Result<(), ReadError> {
        let parts = parts(object, pieces, read_as)?;
        // Opens part `index`, read into `bytes`; a part that fails its check is not kept.
        let open = |index: usize, bytes: &mut [u8]| -> Result<(), ReadError> {
            let (block, extent) = &parts[index];
            if read_as == ReadAs::ClientSealed {
                return Ok(());
            }
            self.data
                .open(bytes, id, *block, extent.physical_block, &extent.seal)
                .map_err(|e| {
                    crate::metrics::integrity_failed();
                    self.cache.forget(Run {
                        start: extent.physical_block,
                        len: extent.len_blocks,
                    });
                    ReadError::Integrity {
                        object: object.to_string(),
                        offset_bytes: (block + e.chunk as u64) * BLOCK,
                    }
                })
        };
        let cached = via == Via::Cache;
        let mut io = Vec::with_capacity(parts.len());
        let mut from_device = Vec::with_capacity(parts.len());
        let mut rest: &mut [u8] = buffer;
        let mut at_block = first_block;
        for (index, (block, extent)) in parts.iter().enumerate() {
            let (hole, tail) =
                std::mem::take(&mut rest).split_at_mut(((block - at_block) * BLOCK) as usize);
            hole.fill(0);
            let (mine, tail) = tail.split_at_mut((extent.len_blocks * BLOCK) as usize);
            rest = tail;
            at_block = block + extent.len_blocks;
            if cached && self.cache.get(extent.physical_block, mine) {
                open(index, mine)?;
                continue;
            }
            io.push(IoPiece {
                offset_bytes: extent.physical_block * BLOCK,
                buffer: mine,
            });
            from_device.push(index);
        }
        rest.fill(0);
        let mut failure = None;
        self.device.read_each(&mut io, &mut |at, bytes| {
            let index = from_device[at];
            if cached {
                self.cache.put(parts[index].1.physical_block, bytes);
            }
            open(index, bytes).map_err(|e| failure = Some(e)).is_ok()
        })?;
        failure.map_or(Ok(()), Err)
    }

    /// Reads up to `len_bytes` from `offset_bytes`; shorter at the end of the object.
    pub fn read(
        &self,
        object: &ObjectRef,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<ReadBuf, ReadError> {
        self.read_via(object, offset_bytes, len_bytes, Via::Cache)
    }

    /// `read`, finding the blocks `via` the cache or the device only.
    pub fn read_via(
        &self,
        object: &ObjectRef,
        offset_bytes: u64,
        len_bytes: u64,
        via: Via,
    ) -> Result<ReadBuf, ReadError> {
        let empty = ReadBuf {
            buffer: AlignedBuf::zeroed(0),
            start: 0,
            len: 0,
        };
        self.read_planned(
            object,
            offset_bytes,
            len_bytes,
            empty,
            |id, pieces, window| {
                let mut buffer = AlignedBuf::for_overwrite(window.blocks() as usize);
                self.read_pieces(
                    object,
                    id,
                    pieces,
                    window.first_block,
                    &mut buffer,
                    ReadAs::Plaintext,
                    via,
                )?;
                Ok(ReadBuf {
                    buffer,
                    start: window.start,
                    len: window.len,
                })
            },
        )
    }

    /// `read` for a reply, in pieces. A `none` store opens nothing, so there a part the
    /// cache holds whole is its blocks as they are, the rest slices of one buffer read from
    /// the device (as `read_sealed` gives them); every other mode opens the bytes in one
    /// buffer, which is the one piece.
    pub fn read_in_pieces(
        &self,
        object: &ObjectRef,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<Vec<Bytes>, ReadError> {
        if !matches!(self.data, DataSealer::None) {
            let read = self.read(object, offset_bytes, len_bytes)?;
            return Ok(if read.is_empty() {
                Vec::new()
            } else {
                vec![read.into()]
            });
        }
        self.read_planned(
            object,
            offset_bytes,
            len_bytes,
            Vec::new(),
            |_, pieces, window| {
                let stored = self.read_as_stored(
                    &parts(object, pieces, ReadAs::Plaintext)?,
                    window.first_block,
                    window.blocks(),
                    Via::Cache,
                )?;
                Ok(window.of(stored))
            },
        )
    }

    /// Plans a read of `len_bytes` from `offset_bytes` (shorter at the end of the object)
    /// under the object's lock, held while `read` reads the extent pieces it is given:
    /// `empty` if nothing lies there.
    fn read_planned<T>(
        &self,
        object: &ObjectRef,
        offset_bytes: u64,
        len_bytes: u64,
        empty: T,
        read: impl FnOnce(&ObjectId, &[(u64, Extent)], ReadWindow) -> Result<T, ReadError>,
    ) -> Result<T, ReadError> {
        if len_bytes > READ_BYTES_MAX {
            return Err(ReadError::Invalid {
                reason: format!("read of {len_bytes} bytes; the limit is {READ_BYTES_MAX}"),
            });
        }
        let id = self
            .shared
            .meta
            .object_id(object.pool, object.name.as_str());
        let _lock = self.slots[slot_of(&id)]
            .read()
            .expect("object lock poisoned");
        let (txn, record) = self.snapshot(object, &id)?;
        let end_bytes = offset_bytes
            .saturating_add(len_bytes)
            .min(record.size_bytes);
        if offset_bytes >= end_bytes {
            return Ok(empty);
        }
        let (first, end) = (offset_bytes / BLOCK, end_bytes.div_ceil(BLOCK));
        let table = txn.open_table(EXTENTS)?;
        let extents = self.load_extent_map(&View::committed(&table), object, &id, first, end)?;
        drop(txn);
        let window = ReadWindow {
            first_block: first,
            end_block: end,
            start: (offset_bytes - first * BLOCK) as usize,
            len: (end_bytes - offset_bytes) as usize,
        };
        read(&id, &pieces(&extents, first, end), window)
    }

    /// Returns chunks `[first_chunk, first_chunk + count)` exactly as a client sealed them.
    /// A chunk the store sealed itself is refused: its plaintext is only for `read`.
    pub fn read_sealed(
        &self,
        object: &ObjectRef,
        first_chunk: u64,
        count: u64,
    ) -> Result<SealedRead, ReadError> {
        self.read_sealed_via(object, first_chunk, count, Via::Cache)
    }

    /// `read_sealed`, finding the chunks `via` the cache or the device only.
    pub fn read_sealed_via(
        &self,
        object: &ObjectRef,
        first_chunk: u64,
        count: u64,
        via: Via,
    ) -> Result<SealedRead, ReadError> {
        if count
            .checked_mul(BLOCK)
            .is_none_or(|bytes| bytes > READ_BYTES_MAX)
        {
            return Err(ReadError::Invalid {
                reason: format!(
                    "read of {count} chunks; the limit is {}",
                    READ_BYTES_MAX / BLOCK
                ),
            });
        }
        let id = self
            .shared
            .meta
            .object_id(object.pool, object.name.as_str());
        let _lock = self.slots[slot_of(&id)]
            .read()
            .expect("object lock poisoned");
        let (txn, record) = self.snapshot(object, &id)?;
        let end = first_chunk.saturating_add(count).min(OBJECT_BLOCKS_MAX);
        let extents = self.load_extent_map(
            &View::committed(&txn.open_table(EXTENTS)?),
            object,
            &id,
            first_chunk.min(end),
            end,
        )?;
        drop(txn);
        let pieces = pieces(&extents, first_chunk, end);
        let data = self.read_as_stored(
            &parts(object, &pieces, ReadAs::ClientSealed)?,
            first_chunk,
            count,
            via,
        )?;
        let mut chunks = vec![None; count as usize];
        for (block, extent) in &pieces {
            if let ExtentSeal::Edge { chunks: records } = &extent.seal {
                for (i, record) in records.iter().enumerate() {
                    chunks[(block - first_chunk) as usize + i] = Some(*record);
                }
            }
        }
        Ok(SealedRead {
            data,
            chunks,
            size_bytes: record.size_bytes,
        })
    }

    /// `count` blocks from `first_block` on as the device holds them (chunks a client
    /// sealed, or a `none` store's plaintext), in pieces, for a reply: a part the cache holds
    /// whole is its blocks as they are (not copied); the others are read from the device
    /// into one buffer, all submitted at once, kept in the cache, and handed on as slices of
    /// it, one per run of them with no hole or hit between; holes and what lies past the
    /// object are zeros.
    fn read_as_stored(
        &self,
        parts: &[(u64, Extent)],
        first_block: u64,
        count: u64,
        via: Via,
    ) -> Result<Vec<Bytes>, ReadError> {
        let cached: Vec<Option<Vec<Block>>> = parts
            .iter()
            .map(|(_, extent)| match via {
                Via::Cache => self.cache.blocks(extent.physical_block, extent.len_blocks),
                Via::Device => None,
            })
            .collect();
        let missed = parts
            .iter()
            .zip(&cached)
            .filter(|(_, hit)| hit.is_none())
            .map(|((_, extent), _)| extent.len_blocks)
            .sum::<u64>();
        let mut buffer = AlignedBuf::for_overwrite(missed as usize);
        let mut io = Vec::new();
        let mut from_device = Vec::new();
        let mut rest: &mut [u8] = &mut buffer;
        for (index, (_, extent)) in parts.iter().enumerate() {
            if cached[index].is_none() {
                let (mine, tail) =
                    std::mem::take(&mut rest).split_at_mut((extent.len_blocks * BLOCK) as usize);
                rest = tail;
                io.push(IoPiece {
                    offset_bytes: extent.physical_block * BLOCK,
                    buffer: mine,
                });
                from_device.push(index);
            }
        }
        self.device.read_each(&mut io, &mut |at, bytes| {
            if via == Via::Cache {
                self.cache
                    .put(parts[from_device[at]].1.physical_block, bytes);
            }
            true
        })?;
        drop(io);
        let read = Bytes::from(buffer);
        let mut out = Vec::with_capacity(parts.len() + 1);
        // Blocks from `first_block` placed so far, and the bytes of `read` not yet handed on
        // (missed parts lie in `read` in the order they lie in the object).
        let (mut placed, mut run) = (0, 0..0);
        let hand_on = |out: &mut Vec<Bytes>, run: &mut std::ops::Range<usize>| {
            if run.end > run.start {
                out.push(read.slice(run.clone()));
            }
            *run = run.end..run.end;
        };
        for ((block, extent), hit) in parts.iter().zip(cached) {
            let at = block - first_block;
            if at > placed {
                hand_on(&mut out, &mut run);
                out.push(zeros(at - placed));
            }
            placed = at + extent.len_blocks;
            match hit {
                Some(blocks) => {
                    hand_on(&mut out, &mut run);
                    out.extend(blocks.into_iter().map(Bytes::from_owner));
                }
                None => run.end += (extent.len_blocks * BLOCK) as usize,
            }
        }
        hand_on(&mut out, &mut run);
        if count > placed {
            out.push(zeros(count - placed));
        }
        Ok(out)
    }

    /// Whether a read of `object`'s data or omap listing would wait: for a transaction
    /// holding the object's lock (through its group commit), or to commit the changes
    /// waiting for it (pending.rs). Its record (`stat`, `attrs`) and its omap entries
    /// (`omap_entries`) are read without waiting. A caller that should not wait (a network
    /// thread) hands such a read to another thread. The answer holds as of the call: a
    /// write that begins just after makes the read wait for its group commit, as it would
    /// anywhere.
    pub fn read_would_wait(&self, object: &ObjectRef) -> bool {
        let id = self
            .shared
            .meta
            .object_id(object.pool, object.name.as_str());
        if self.slots[slot_of(&id)].try_read().is_err() {
            return true;
        }
        self.shared.waiting().touches(&id)
    }

    pub fn stat(&self, object: &ObjectRef) -> Result<ObjectStat, ReadError> {
        let record = self.record(object)?;
        Ok(ObjectStat {
            size_bytes: record.size_bytes,
            version: record.version,
            mtime_ns: record.mtime_ns,
            hash: object.name.hash(),
        })
    }

    pub fn attrs(&self, object: &ObjectRef) -> Result<BTreeMap<String, Vec<u8>>, ReadError> {
        Ok(self.record(object)?.attrs)
    }

    /// A read snapshot and the object's record (NotFound if the object does not exist).
    fn snapshot(
        &self,
        object: &ObjectRef,
        id: &ObjectId,
    ) -> Result<(ReadTransaction, ObjectRecord), ReadError> {
        self.settle(Some(id))?;
        let txn = self.shared.db.begin_read()?;
        // redb panics on some damaged files instead of failing: a damaged metadata file is
        // an integrity failure of the read, not a crash of the store.
        let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.load_record(&View::committed(&txn.open_table(OBJECTS)?), object, id)
        }))
        .map_err(|_| ReadError::MetadataIntegrity {
            what: format!("{object} (the metadata database is damaged)"),
        })?;
        let record = loaded?.ok_or_else(|| ReadError::NotFound {
            object: object.to_string(),
        })?;
        Ok((txn, record))
    }

    /// The object's record, with its changes not yet committed (pending.rs): a write path
    /// that asks for an object's size (the OSD's, on every write of client-sealed chunks)
    /// does not wait for a commit.
    fn record(&self, object: &ObjectRef) -> Result<ObjectRecord, ReadError> {
        let id = self
            .shared
            .meta
            .object_id(object.pool, object.name.as_str());
        let pending = self.shared.waiting();
        let txn = self.shared.db.begin_read()?;
        self.record_as_waiting(&pending, &txn, object, &id)
    }

    /// The object's record as the changes waiting for their commit leave it, from `txn`
    /// begun while `pending` was looked at.
    fn record_as_waiting(
        &self,
        pending: &Waiting,
        txn: &ReadTransaction,
        object: &ObjectRef,
        id: &ObjectId,
    ) -> Result<ObjectRecord, ReadError> {
        let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let objects = txn.open_table(OBJECTS)?;
            let objects =
                pending.view_of_snapshot(Table::Objects, &objects, || log_in_snapshot(txn))?;
            self.load_record(&objects, object, id)
        }))
        .map_err(|_| ReadError::MetadataIntegrity {
            what: format!("{object} (the metadata database is damaged)"),
        })?;
        loaded?.ok_or_else(|| ReadError::NotFound {
            object: object.to_string(),
        })
    }

    /// The versions of the object's undo records (undo.rs), oldest first.
    pub fn undo_versions(&self, object: &ObjectRef) -> Result<Vec<u64>, ReadError> {
        let id = self
            .shared
            .meta
            .object_id(object.pool, object.name.as_str());
        let (low, high) = (undo_key(object, &id, 0), undo_key(object, &id, u64::MAX));
        self.settle(Some(&id))?;
        let txn = self.shared.db.begin_read()?;
        let rows = txn.open_table(UNDO)?;
        let versions = rows
            .range::<&[u8]>(&low[..]..=&high[..])?
            .map(|row| Ok(undo_key_version(row?.0.value())))
            .collect::<Result<Vec<u64>, redb::StorageError>>()?;
        Ok(versions)
    }

    pub fn exists(&self, object: &ObjectRef) -> Result<bool, ReadError> {
        match self.record(object) {
            Ok(_) => Ok(true),
            Err(ReadError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One omap entry, as [`Store::omap_entries`] reads it.
    pub fn omap_get(&self, object: &ObjectRef, key: &[u8]) -> Result<Option<Vec<u8>>, ReadError> {
        let mut found = self.omap_entries(object, [key])?;
        assert_eq!(found.len(), 1, "one key asked, one answer");
        Ok(found.remove(0))
    }

    /// The values of omap entries `keys`, in their order, as the changes waiting for their
    /// commit leave them, from one look at those changes and one snapshot: the read does
    /// not commit them (an S3 PUT reads its key's entry and head from the bucket's index,
    /// which the PUT before it just changed).
    pub fn omap_entries<'k>(
        &self,
        object: &ObjectRef,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<Vec<Option<Vec<u8>>>, ReadError> {
        let id = self
            .shared
            .meta
            .object_id(object.pool, object.name.as_str());
        let table = omap_table(object.pool);
        let pending = self.shared.waiting();
        let txn = self.shared.db.begin_read()?;
        self.record_as_waiting(&pending, &txn, object, &id)?;
        let rows = open_omap(&txn, table)?;
        let rows = pending.view_of_snapshot(table, &rows, || log_in_snapshot(&txn))?;
        keys.into_iter()
            .map(|key| self.omap_entry(&rows, table, object, &id, key))
            .collect()
    }

    /// The value of omap entry `key` of `object`, from `rows` of `table`.
    fn omap_entry<T: ReadableTable<&'static [u8], &'static [u8]>>(
        &self,
        rows: &View<'_, T>,
        table: Table,
        object: &ObjectRef,
        id: &ObjectId,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, ReadError> {
        if matches!(table, Table::Omap) {
            return self.omap_row(rows, table, object, &omap_key(id, key));
        }
        let row = omap::entry_key(id, &self.shared.meta.omap_slot(id, key));
        match self.omap_row(rows, table, object, &row)? {
            Some(entry) => omap::entry_value(entry, key)
                .map(Some)
                .map_err(|damaged| self.damaged_omap(object, damaged)),
            None => Ok(None),
        }
    }

    /// The opened value of a row of `table` (`Omap` or `OmapPaged`), read through `rows`.
    fn omap_row<T: ReadableTable<&'static [u8], &'static [u8]>>(
        &self,
        rows: &View<'_, T>,
        table: Table,
        object: &ObjectRef,
        row: &[u8],
    ) -> Result<Option<Vec<u8>>, ReadError> {
        let Some(stored) = rows.get(row)? else {
            return Ok(None);
        };
        self.shared
            .meta
            .open(table, row, &stored)
            .map(Some)
            .map_err(|_| ReadError::MetadataIntegrity {
                what: format!("object {object}, an omap row"),
            })
    }

    fn damaged_omap(&self, object: &ObjectRef, damaged: omap::Damaged) -> ReadError {
        ReadError::MetadataIntegrity {
            what: format!("object {object}, {}", damaged.0),
        }
    }

    /// Omap entries in key order, starting after `after`, at most `limit`
    /// (`OMAP_PAGE_ENTRIES_MAX` at the most).
    pub fn omap_list(
        &self,
        object: &ObjectRef,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<OmapEntry>, ReadError> {
        let id = self
            .shared
            .meta
            .object_id(object.pool, object.name.as_str());
        let (txn, _) = self.snapshot(object, &id)?;
        let limit = limit.min(OMAP_PAGE_ENTRIES_MAX);
        if !object.pool.is_pg_meta() {
            let rows = open_omap(&txn, Table::OmapPaged)?;
            let rows = View::committed(&rows);
            let load = |row: Row| self.omap_row(&rows, Table::OmapPaged, object, &row.key(&id));
            let keys = omap::list(after, limit, load)?;
            return keys
                .into_iter()
                .map(|key| {
                    let row = omap::entry_key(&id, &self.shared.meta.omap_slot(&id, &key));
                    let entry = self
                        .omap_row(&rows, Table::OmapPaged, object, &row)?
                        .ok_or(omap::Damaged("an omap entry its page names"))
                        .and_then(|entry| omap::entry_value(entry, &key))
                        .map_err(|damaged| self.damaged_omap(object, damaged))?;
                    Ok((key, entry))
                })
                .collect();
        }
        let omap = txn.open_table(OMAP)?;
        let start = omap_key(&id, after.unwrap_or(&[]));
        let end = crate::metadata::prefix_end(&id);
        let range = match &end {
            Some(end) => omap.range::<&[u8]>(&start[..]..&end[..])?,
            None => omap.range::<&[u8]>(&start[..]..)?,
        };
        let mut out = Vec::new();
        for row in range {
            let (key, value) = row?;
            let omap_key_bytes = &key.value()[16..];
            if after.is_some_and(|a| a == omap_key_bytes) {
                continue;
            }
            if out.len() >= limit {
                break;
            }
            let plain = self
                .shared
                .meta
                .open(Table::Omap, key.value(), value.value())
                .map_err(|_| ReadError::MetadataIntegrity {
                    what: format!("object {object}, an omap value"),
                })?;
            out.push((omap_key_bytes.to_vec(), plain));
        }
        Ok(out)
    }
}

/// `pieces` (logical block, extent) cut into parts of at most `IO_PIECE_BLOCKS_MAX` blocks,
/// each checked to be sealed as `read_as` reads it.
fn parts(
    object: &ObjectRef,
    pieces: &[(u64, Extent)],
    read_as: ReadAs,
) -> Result<Vec<(u64, Extent)>, ReadError> {
    let mut parts: Vec<(u64, Extent)> = Vec::with_capacity(pieces.len());
    for (block, extent) in pieces {
        let client_sealed = matches!(extent.seal, ExtentSeal::Edge { .. });
        if read_as == ReadAs::Plaintext && client_sealed {
            return Err(ReadError::EdgeSealed {
                object: object.to_string(),
                offset_bytes: block * BLOCK,
            });
        }
        if read_as == ReadAs::ClientSealed && !client_sealed {
            return Err(ReadError::Invalid {
                reason: format!(
                    "object {object} chunk {block} was sealed by the store, not by a client"
                ),
            });
        }
        let mut skip = 0;
        while skip < extent.len_blocks {
            let len = (extent.len_blocks - skip).min(IO_PIECE_BLOCKS_MAX);
            parts.push((block + skip, extent.slice(skip, len)));
            skip += len;
        }
    }
    Ok(parts)
}

/// The blocks a read covers, and where its bytes lie in them.
#[derive(Clone, Copy)]
struct ReadWindow {
    first_block: u64,
    end_block: u64,
    /// The read's first byte, from the first block's start.
    start: usize,
    len: usize,
}

impl ReadWindow {
    fn blocks(&self) -> u64 {
        self.end_block - self.first_block
    }

    /// The read's bytes of `pieces` (the window's blocks in order), as pieces.
    fn of(&self, pieces: Vec<Bytes>) -> Vec<Bytes> {
        let (start, end) = (self.start, self.start + self.len);
        let mut out = Vec::with_capacity(pieces.len());
        let mut at = 0;
        for piece in pieces {
            let (from, to) = (start.max(at), end.min(at + piece.len()));
            if from < to {
                out.push(piece.slice(from - at..to - at));
            }
            at += piece.len();
        }
        out
    }
}

/// `blocks` zero blocks (a hole, or chunks past the object's end).
fn zeros(blocks: u64) -> Bytes {
    Bytes::from(vec![0u8; (blocks * BLOCK) as usize])
}
