//! File contents as a mount holds them: the objects of the data pool (read and written
//! directly, sealed at the edge in an edge pool), the dirty bytes written but not yet sent
//! (write-back), and the segments fetched ahead of readers.
//!
//! A read sees, in order of precedence: the dirty bytes, the bytes being flushed, and what
//! the objects (or a fetched segment) hold; holes and bytes past an object's end read as
//! zeros. A write drops the fetched segments it overlaps, so a segment never hides a later
//! write once it is flushed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use client::stripe;
use client::Pool;
use futures::future::{BoxFuture, FutureExt, Shared};
use futures::{StreamExt, TryStreamExt};

use crate::proto::{objects, Ino};
use crate::Errno;

/// Dirty bytes of one file past which a background flush starts.
pub const FILE_DIRTY_FLUSH_BYTES: u64 = 8 << 20;
/// Dirty bytes of all files of a mount past which writers wait for flushes.
pub const DIRTY_BYTES_MAX: u64 = 256 << 20;
/// Dirty bytes older than this are flushed even if nobody asks.
pub const WRITEBACK_DELAY: Duration = Duration::from_secs(5);
/// Bytes of fetched-ahead segments one mount holds.
pub const CACHE_BYTES_MAX: u64 = 256 << 20;
/// Object requests in flight at once for one read or flush.
const OBJECTS_IN_FLIGHT_MAX: usize = 16;

/// The data objects of one file system.
#[derive(Clone)]
pub struct Objects {
    pub pool: Pool,
    pub fs_id: u32,
    pub object_bytes: u64,
}

fn io_errno(e: client::Error) -> Errno {
    match e {
        client::Error::Denied(why) => {
            tracing::warn!(%why, "the data pool refused");
            Errno(libc::EACCES)
        }
        client::Error::NoSpace(why) => {
            tracing::warn!(%why, "the data pool is full");
            Errno(libc::ENOSPC)
        }
        other => {
            tracing::warn!(error = %other, "data pool");
            Errno(libc::EIO)
        }
    }
}

impl Objects {
    /// Exactly `len` bytes of file `ino` from `offset` (zeros where nothing was written).
    pub async fn read(&self, ino: Ino, offset: u64, len: u64) -> Result<BytesMut, Errno> {
        let pieces: Vec<stripe::Piece> = stripe::pieces(offset, len, self.object_bytes).collect();
        let parts: Vec<Bytes> =
            futures::stream::iter(pieces.clone().into_iter().map(|piece| async move {
                let object = objects::data(self.fs_id, ino, piece.index);
                match self.pool.read(&object, piece.offset, piece.len).await {
                    Ok(bytes) => Ok(bytes),
                    Err(client::Error::NotFound) => Ok(Bytes::new()),
                    Err(e) => Err(io_errno(e)),
                }
            }))
            .buffered(OBJECTS_IN_FLIGHT_MAX)
            .try_collect()
            .await?;
        let mut out = BytesMut::zeroed(len as usize);
        for (piece, bytes) in pieces.iter().zip(parts) {
            let at = piece.range_offset as usize;
            let n = bytes.len().min(piece.len as usize);
            out[at..at + n].copy_from_slice(&bytes[..n]);
        }
        Ok(out)
    }

    /// Writes each `(offset, bytes)` of file `ino`, cut at object bounds, many at once.
    pub async fn write_ranges(&self, ino: Ino, ranges: Vec<(u64, Bytes)>) -> Result<(), Errno> {
        let pieces: Vec<(stripe::Piece, Bytes)> = ranges
            .into_iter()
            .flat_map(|(offset, data)| {
                stripe::pieces(offset, data.len() as u64, self.object_bytes).map(move |piece| {
                    let at = piece.range_offset as usize;
                    (piece, data.slice(at..at + piece.len as usize))
                })
            })
            .collect();
        futures::stream::iter(pieces.into_iter().map(|(piece, bytes)| async move {
            let object = objects::data(self.fs_id, ino, piece.index);
            self.pool
                .write(&object, piece.offset, bytes)
                .await
                .map_err(io_errno)
        }))
        .buffer_unordered(OBJECTS_IN_FLIGHT_MAX)
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
    }

    /// Cuts file `ino` from `old_size` (or less) to `new_size`: the objects wholly past the
    /// new end go, the one it falls in is cut (zeroing what a later growth would show).
    pub async fn truncate(&self, ino: Ino, old_size: u64, new_size: u64) -> Result<(), Errno> {
        let keep = new_size.div_ceil(self.object_bytes);
        let had = old_size.div_ceil(self.object_bytes);
        for index in keep..had.max(keep) {
            let object = objects::data(self.fs_id, ino, index);
            match self.pool.remove(&object).await {
                Ok(()) | Err(client::Error::NotFound) => {}
                Err(e) => return Err(io_errno(e)),
            }
        }
        let within = new_size % self.object_bytes;
        if within != 0 {
            let object = objects::data(self.fs_id, ino, new_size / self.object_bytes);
            match self.pool.stat(&object).await {
                Ok(stat) if stat.size > within => self
                    .pool
                    .truncate(&object, within)
                    .await
                    .map_err(io_errno)?,
                Ok(_) | Err(client::Error::NotFound) => {}
                Err(e) => return Err(io_errno(e)),
            }
        }
        Ok(())
    }
}

/// Non-overlapping byte ranges of a file, each held whole.
#[derive(Default, Debug)]
pub struct Extents {
    map: BTreeMap<u64, Vec<u8>>,
    bytes: u64,
}

impl Extents {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Puts `data` at `offset`, over whatever was there; touching ranges merge.
    pub fn insert(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        // The extent that starts at or before `offset` and reaches it, if any, grows.
        let (start, mut buffer) = match self.map.range(..=offset).next_back() {
            Some((start, held)) if start + held.len() as u64 >= offset => {
                let start = *start;
                let held = self.map.remove(&start).expect("found just above");
                self.bytes -= held.len() as u64;
                (start, held)
            }
            _ => (offset, Vec::with_capacity(data.len())),
        };
        let at = (offset - start) as usize;
        if buffer.len() < at + data.len() {
            buffer.resize(at + data.len(), 0);
        }
        buffer[at..at + data.len()].copy_from_slice(data);
        // Extents starting inside (or right at the end of) the new range join it.
        let later: Vec<u64> = self.map.range(offset..=end).map(|(s, _)| *s).collect();
        for next in later {
            let held = self.map.remove(&next).expect("listed just above");
            self.bytes -= held.len() as u64;
            let held_end = next + held.len() as u64;
            let buffer_end = start + buffer.len() as u64;
            if held_end > buffer_end {
                let skip = (buffer_end - next) as usize;
                buffer.extend_from_slice(&held[skip..]);
            }
        }
        self.bytes += buffer.len() as u64;
        self.map.insert(start, buffer);
    }

    /// Copies what these extents hold of `[offset, offset + out.len())` into `out`.
    pub fn overlay(&self, offset: u64, out: &mut [u8]) {
        let end = offset + out.len() as u64;
        let first = self
            .map
            .range(..=offset)
            .next_back()
            .map_or(offset, |(start, _)| *start);
        for (start, held) in self.map.range(first..end) {
            overlay_one(*start, held, offset, out);
        }
    }

    /// The end of the last extent.
    pub fn end(&self) -> u64 {
        self.map
            .iter()
            .next_back()
            .map_or(0, |(start, held)| start + held.len() as u64)
    }

    /// Drops everything at or past `size`.
    pub fn cut(&mut self, size: u64) {
        let starts: Vec<u64> = self.map.keys().copied().collect();
        for start in starts {
            let held = self.map.get_mut(&start).expect("listed just above");
            if start >= size {
                self.bytes -= held.len() as u64;
                self.map.remove(&start);
            } else if start + held.len() as u64 > size {
                let keep = (size - start) as usize;
                self.bytes -= (held.len() - keep) as u64;
                held.truncate(keep);
            }
        }
    }

    fn into_ranges(self) -> Vec<(u64, Bytes)> {
        self.map
            .into_iter()
            .map(|(start, held)| (start, Bytes::from(held)))
            .collect()
    }
}

type Fetch = Shared<BoxFuture<'static, Result<Bytes, Errno>>>;

/// A fetched (or being fetched) range of a file.
struct Segment {
    len: u64,
    data: Fetch,
}

/// The bytes dirty across a mount, and the writers waiting for them to drop.
#[derive(Default)]
pub struct Budget {
    dirty: AtomicU64,
    cached: AtomicU64,
    drained: tokio::sync::Notify,
}

impl Budget {
    pub fn dirty(&self) -> u64 {
        self.dirty.load(Ordering::Relaxed)
    }

    fn add_dirty(&self, bytes: u64) {
        self.dirty.fetch_add(bytes, Ordering::Relaxed);
    }

    fn drop_dirty(&self, bytes: u64) {
        self.dirty.fetch_sub(bytes, Ordering::Relaxed);
        self.drained.notify_waiters();
    }

    /// Waits until the mount's dirty bytes are under [`DIRTY_BYTES_MAX`] (or a while passed).
    pub async fn wait_room(&self) {
        while self.dirty() > DIRTY_BYTES_MAX {
            let _ = tokio::time::timeout(Duration::from_millis(100), self.drained.notified()).await;
        }
    }
}

#[derive(Default)]
struct State {
    /// Attributes' size as the MDS last said.
    size: u64,
    dirty: Extents,
    /// When the oldest dirty byte was written.
    dirty_since: Option<Instant>,
    /// Flushes under way, oldest first: each one's number and the ranges it sends. Reads see
    /// them, older under newer, all under the dirty bytes.
    flushing: Vec<(u64, Vec<(u64, Bytes)>)>,
    next_flush: u64,
    /// The end and time of this mount's writes that the MDS has not recorded.
    written_end: u64,
    written_mtime_ns: i64,
    unrecorded: bool,
    /// Counts writes, so a flush knows whether its report covers the newest.
    generation: u64,
    segments: BTreeMap<u64, Segment>,
    /// A flush failed: the next fsync or close says so (as the kernel's write-back does).
    error: Option<Errno>,
}

/// What a flush sent: the MDS should now record the size and time.
pub struct Flushed {
    pub end: u64,
    pub mtime_ns: i64,
    pub generation: u64,
}

/// One file's contents in this mount.
pub struct FileData {
    pub ino: Ino,
    objects: Objects,
    budget: Arc<Budget>,
    state: Mutex<State>,
    /// Woken whenever a flush lands.
    landed: tokio::sync::Notify,
}

impl FileData {
    pub fn new(ino: Ino, objects: Objects, budget: Arc<Budget>, size: u64) -> FileData {
        FileData {
            ino,
            objects,
            budget,
            state: Mutex::new(State {
                size,
                ..State::default()
            }),
            landed: tokio::sync::Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The size the mount sees: the MDS's, or further if this mount wrote past it.
    pub fn size(&self) -> u64 {
        let state = self.state();
        if state.unrecorded || !state.dirty.is_empty() || !state.flushing.is_empty() {
            state.size.max(state.written_end)
        } else {
            state.size
        }
    }

    /// The modification time of this mount's unrecorded writes, if any.
    pub fn local_mtime(&self) -> Option<i64> {
        let state = self.state();
        state.unrecorded.then_some(state.written_mtime_ns)
    }

    /// The MDS said the size is `size`.
    pub fn set_size(&self, size: u64) {
        self.state().size = size;
    }

    pub fn has_unflushed(&self) -> bool {
        let state = self.state();
        !state.dirty.is_empty() || state.unrecorded
    }

    /// Dirty bytes older than [`WRITEBACK_DELAY`].
    pub fn is_stale(&self, now: Instant) -> bool {
        self.state()
            .dirty_since
            .is_some_and(|since| now.duration_since(since) >= WRITEBACK_DELAY)
    }

    /// Takes `data` at `offset` as dirty bytes; returns whether the file should be flushed.
    pub fn write(&self, offset: u64, data: &[u8], now_ns: i64) -> bool {
        let end = offset + data.len() as u64;
        let mut state = self.state();
        let before = state.dirty.bytes();
        state.dirty.insert(offset, data);
        let added = state.dirty.bytes() - before;
        state.dirty_since.get_or_insert_with(Instant::now);
        self.drop_segments(&mut state, offset, end);
        state.written_end = state.written_end.max(end);
        state.written_mtime_ns = now_ns;
        state.unrecorded = true;
        state.generation += 1;
        let flush = state.dirty.bytes() >= FILE_DIRTY_FLUSH_BYTES;
        drop(state);
        self.budget.add_dirty(added);
        flush
    }

    fn drop_segments(&self, state: &mut State, start: u64, end: u64) {
        for stale in overlapping(&state.segments, start, end) {
            if let Some(gone) = state.segments.remove(&stale) {
                self.budget.cached.fetch_sub(gone.len, Ordering::Relaxed);
            }
        }
    }

    /// Sends the dirty bytes to the objects, all ranges at once, and returns once they and
    /// every flush started before landed. Flushes of disjoint ranges (a sequential writer's)
    /// overlap; one waits for an older flush of the same bytes, which would otherwise land
    /// over it. Returns what the MDS should record (if there are writes it has not); a
    /// failure is also kept for [`FileData::take_error`], so that a flush nobody waited for
    /// is reported by the next `fsync` or `close`.
    pub async fn flush(&self) -> Result<Option<Flushed>, Errno> {
        let (id, ranges, bytes) = {
            let mut state = self.state();
            let dirty = std::mem::take(&mut state.dirty);
            state.dirty_since = None;
            let bytes = dirty.bytes();
            let ranges = dirty.into_ranges();
            let id = state.next_flush;
            state.next_flush += 1;
            state.flushing.push((id, ranges.clone()));
            (id, ranges, bytes)
        };
        let bounds: Vec<(u64, u64)> = ranges
            .iter()
            .map(|(offset, data)| (*offset, offset + data.len() as u64))
            .collect();
        self.wait_landed(|state| {
            state.flushing.iter().any(|(other, sent)| {
                *other < id
                    && sent.iter().any(|(offset, data)| {
                        let end = offset + data.len() as u64;
                        bounds.iter().any(|(a, b)| *offset < *b && *a < end)
                    })
            })
        })
        .await;
        let result = if ranges.is_empty() {
            Ok(())
        } else {
            self.objects.write_ranges(self.ino, ranges).await
        };
        {
            let mut state = self.state();
            state.flushing.retain(|(other, _)| *other != id);
            // A segment fetched while these bytes were on their way may hold the old ones.
            for (start, end) in &bounds {
                self.drop_segments(&mut state, *start, *end);
            }
            if let Err(e) = result {
                state.error = Some(e);
            }
        }
        self.budget.drop_dirty(bytes);
        self.landed.notify_waiters();
        self.wait_landed(|state| state.flushing.iter().any(|(other, _)| *other < id))
            .await;
        result?;
        let state = self.state();
        Ok(state.unrecorded.then_some(Flushed {
            end: state.written_end,
            mtime_ns: state.written_mtime_ns,
            generation: state.generation,
        }))
    }

    /// Waits while `busy` holds of the state, checking again whenever a flush lands.
    async fn wait_landed(&self, busy: impl Fn(&State) -> bool) {
        loop {
            let landed = self.landed.notified();
            tokio::pin!(landed);
            landed.as_mut().enable();
            if !busy(&self.state()) {
                return;
            }
            landed.await;
        }
    }

    /// The error a flush hit since the last call, once.
    pub fn take_error(&self) -> Option<Errno> {
        self.state().error.take()
    }

    /// The MDS recorded what `flushed` reported.
    pub fn recorded(&self, flushed: &Flushed) {
        let mut state = self.state();
        state.size = state.size.max(flushed.end);
        if state.generation == flushed.generation {
            state.unrecorded = false;
        }
    }

    /// The file's size changed under this mount (truncated here, or changed by another
    /// mount): what it held of the old contents goes.
    pub fn reset(&self, size: u64) {
        let mut state = self.state();
        state.size = size;
        state.dirty.cut(size);
        state.written_end = state.written_end.min(size);
        let cached: u64 = state.segments.values().map(|s| s.len).sum();
        state.segments.clear();
        self.budget.cached.fetch_sub(cached, Ordering::Relaxed);
    }

    /// Starts fetching `[start, end)` into a segment, unless the mount holds enough.
    pub fn fetch_ahead(self: &Arc<Self>, start: u64, end: u64) {
        if start >= end
            || self.budget.cached.load(Ordering::Relaxed) + (end - start) > CACHE_BYTES_MAX
        {
            return;
        }
        let objects = self.objects.clone();
        let ino = self.ino;
        let fetch: Fetch = async move {
            objects
                .read(ino, start, end - start)
                .await
                .map(BytesMut::freeze)
        }
        .boxed()
        .shared();
        // Start it now, not when someone first waits for it.
        tokio::spawn(fetch.clone());
        let mut state = self.state();
        if !overlapping(&state.segments, start, end).is_empty() {
            return;
        }
        state.segments.insert(
            start,
            Segment {
                len: end - start,
                data: fetch,
            },
        );
        self.budget.cached.fetch_add(end - start, Ordering::Relaxed);
    }

    /// Exactly `len` bytes from `offset` (the caller keeps within the size), and caches what
    /// `fetch` asks beyond them.
    pub async fn read(
        self: &Arc<Self>,
        offset: u64,
        len: u64,
        fetch_end: u64,
    ) -> Result<Bytes, Errno> {
        let end = offset + len;
        let mut out = match self.segments_covering(offset, end) {
            Some(pending) => {
                let mut out = BytesMut::zeroed(len as usize);
                for (start, fetch) in pending {
                    let bytes = fetch.await?;
                    let from = offset.max(start);
                    let to = end.min(start + bytes.len() as u64);
                    if from < to {
                        out[(from - offset) as usize..(to - offset) as usize].copy_from_slice(
                            &bytes[(from - start) as usize..(to - start) as usize],
                        );
                    }
                }
                out
            }
            None if fetch_end > end => {
                let bytes = self
                    .objects
                    .read(self.ino, offset, fetch_end - offset)
                    .await?
                    .freeze();
                let out = BytesMut::from(&bytes[..len as usize]);
                let rest = bytes.slice(len as usize..);
                let ready: Fetch = async move { Ok(rest) }.boxed().shared();
                let mut state = self.state();
                if overlapping(&state.segments, end, fetch_end).is_empty() && state.dirty.is_empty()
                {
                    state.segments.insert(
                        end,
                        Segment {
                            len: fetch_end - end,
                            data: ready,
                        },
                    );
                    self.budget
                        .cached
                        .fetch_add(fetch_end - end, Ordering::Relaxed);
                }
                out
            }
            None => self.objects.read(self.ino, offset, len).await?,
        };
        let mut state = self.state();
        for (_, ranges) in &state.flushing {
            for (start, data) in ranges {
                overlay_one(*start, data, offset, &mut out);
            }
        }
        state.dirty.overlay(offset, &mut out);
        // Segments wholly behind this read are done with (readers move forward).
        let behind: Vec<u64> = state
            .segments
            .range(..offset)
            .filter(|(start, s)| *start + s.len <= offset)
            .map(|(start, _)| *start)
            .collect();
        for start in behind {
            if let Some(gone) = state.segments.remove(&start) {
                self.budget.cached.fetch_sub(gone.len, Ordering::Relaxed);
            }
        }
        Ok(out.freeze())
    }

    /// The segments covering `[offset, end)` without a gap, if they do.
    fn segments_covering(&self, offset: u64, end: u64) -> Option<Vec<(u64, Fetch)>> {
        let state = self.state();
        let mut at = offset;
        let mut out = Vec::new();
        let first = state
            .segments
            .range(..=offset)
            .next_back()
            .map_or(offset, |(start, _)| *start);
        for (start, segment) in state.segments.range(first..end) {
            if *start > at {
                return None;
            }
            if start + segment.len > at {
                out.push((*start, segment.data.clone()));
                at = start + segment.len;
            }
            if at >= end {
                return Some(out);
            }
        }
        None
    }
}

/// Copies what `data` (at `start`) holds of `[offset, offset + out.len())` into `out`.
fn overlay_one(start: u64, data: &[u8], offset: u64, out: &mut [u8]) {
    let from = offset.max(start);
    let to = (offset + out.len() as u64).min(start + data.len() as u64);
    if from < to {
        out[(from - offset) as usize..(to - offset) as usize]
            .copy_from_slice(&data[(from - start) as usize..(to - start) as usize]);
    }
}

/// The starts of segments overlapping `[start, end)`.
fn overlapping(segments: &BTreeMap<u64, Segment>, start: u64, end: u64) -> Vec<u64> {
    let first = segments
        .range(..=start)
        .next_back()
        .map_or(start, |(s, _)| *s);
    segments
        .range(first..end)
        .filter(|(s, seg)| **s + seg.len > start)
        .map(|(s, _)| *s)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Overlapping and touching writes merge into the bytes a plain file would hold.
    #[test]
    fn extents_hold_the_last_write_of_every_byte() {
        let mut model = vec![0u8; 64];
        let mut extents = Extents::default();
        let writes: [(u64, usize, u8); 8] = [
            (10, 5, 1),
            (20, 5, 2),
            (15, 5, 3),
            (0, 4, 4),
            (12, 12, 5),
            (30, 2, 6),
            (3, 30, 7),
            (40, 10, 8),
        ];
        for (offset, len, byte) in writes {
            extents.insert(offset, &vec![byte; len]);
            model[offset as usize..offset as usize + len].fill(byte);
            let mut out = vec![0u8; 64];
            extents.overlay(0, &mut out);
            assert_eq!(out, model, "after writing {len} bytes at {offset}");
        }
        assert_eq!(extents.bytes(), 33 + 10, "[0, 33) and [40, 50)");
        assert_eq!(extents.end(), 50);
        extents.cut(45);
        let mut out = vec![0u8; 64];
        extents.overlay(0, &mut out);
        model[45..].fill(0);
        assert_eq!(out, model);
        assert_eq!(extents.bytes(), 33 + 5);
        let mut window = vec![9u8; 8];
        extents.overlay(30, &mut window);
        assert_eq!(window, [7, 7, 7, 9, 9, 9, 9, 9], "gaps keep what was there");
    }

    /// Appending in small writes extends one extent in place.
    #[test]
    fn appends_grow_one_extent() {
        let mut extents = Extents::default();
        for i in 0..1000u64 {
            extents.insert(i * 4096, &[i as u8; 4096]);
        }
        assert_eq!(extents.map.len(), 1);
        assert_eq!(extents.bytes(), 1000 * 4096);
    }
}
