//! The read cache: blocks of the data device as it holds them (sealed in every mode but
//! `none`; an edge pool's chunks as its clients sealed them), kept in memory so a read
//! served from it skips the device. Plaintext is never kept: a hit is opened in the read's
//! own buffer, as a block read from the device is; a read of client-sealed chunks, which
//! opens nothing, hands on the held blocks themselves (`ReadCache::blocks`).
//!
//! Blocks are grouped in pages of `PAGE_BLOCKS` aligned blocks, each block held or not, so
//! a 4 MiB read costs 64 lookups rather than 1024 and a 4 KiB read one; memory is taken and
//! counted by the block, so sparse pages (random 4 KiB reads) waste none of the limit. A
//! read part is served only if every one of its blocks is held; otherwise it is read from
//! the device and its blocks are kept. Pages are evicted whole by a clock (a page read
//! since the hand last passed survives one more turn), per shard, once the shard holds its
//! share of the limit. Shards are chosen by a hash of the page number, so objects laid out
//! one after the other spread over all of them.
//!
//! Memory for blocks comes first from blocks let go (a full cache takes as much as it
//! evicts), then from a stock that a thread of the cache's own takes from the system and
//! touches ahead of need, and only when both are empty from the allocator on the read's
//! own path. A first fill would otherwise fault in every page it keeps on the path of the
//! read that misses: on a virtual machine whose host backs memory lazily that is 0.7 to
//! 1.6 GB/s, so a 4 MiB miss spent longer keeping its blocks than reading them. The thread
//! runs at the lowest priority (SCHED_IDLE: what a core has left over), and a fill never
//! waits for it: one that finds the stock's lock taken allocates as if the stock were
//! empty. The stock holds at most the room the cache has left (so the two stay within the
//! limit, give or take the batch being taken), and none until the first fill.
//!
//! Why a kept block is always what the device holds: new data only goes to newly allocated
//! blocks (copy on write), so a block's bytes change only after the block was freed and
//! allocated again. Freed blocks are forgotten here before they return to the allocator,
//! and a read keeps a block only while it holds its object's lock, which the transaction
//! that frees the block takes exclusively. Reads that check the device itself (scrub) do
//! not use or fill the cache; one that finds a block damaged forgets it, as any read does.

use crate::allocator::Run;
use crate::device::BLOCK_SIZE_BYTES;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once, PoisonError};

const BLOCK: usize = BLOCK_SIZE_BYTES as usize;
/// Blocks per page: a 4 KiB read costs one page lookup, a 4 MiB read 64.
pub(crate) const PAGE_BLOCKS: u64 = 16;
/// Shards, each with its own lock and clock.
const SHARDS: usize = 16;
/// Blocks' memory a shard keeps aside, once let go, for the next blocks it takes (at most
/// this, and a sixteenth of its limit): a cache that is full takes as much as it lets go,
/// and the allocator would otherwise hand the memory back to the system and fault it in
/// again.
const SPARE_BLOCKS_MAX: usize = 256;

/// Blocks the stock holds when full (64 MiB): a 4 MiB read takes 1,024, and the stock is
/// topped up once it falls under three quarters.
const STOCK_BLOCKS: usize = 16384;
/// Blocks the stocking thread takes from the system between looks at whether to stop.
const STOCK_BATCH_BLOCKS: usize = 256;

/// A block's bytes. Shared, so a hit copies them after the shard's lock is let go, or
/// hands them on as they are (`ReadCache::blocks`).
pub(crate) type Block = Arc<[u8]>;
/// The default limit: this share of the memory this process may use...
const DEFAULT_MEMORY_SHARE: u64 = 16;
/// ...within these bounds.
pub const CACHE_BYTES_DEFAULT_MIN: u64 = 64 << 20;
pub const CACHE_BYTES_DEFAULT_MAX: u64 = 2 << 30;

/// The default limit for `memory_bytes` of memory: a sixteenth, at least 64 MiB and at
/// most 2 GiB (several OSDs share a machine, as with Ceph's osd_memory_target).
pub fn default_cache_bytes(memory_bytes: u64) -> u64 {
    (memory_bytes / DEFAULT_MEMORY_SHARE).clamp(CACHE_BYTES_DEFAULT_MIN, CACHE_BYTES_DEFAULT_MAX)
}

/// The memory this process may use, in bytes: the machine's, or its control group's limit
/// where that is lower (an OSD in a container); 0 if neither can be found.
pub fn memory_bytes() -> u64 {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page_size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let machine = u64::try_from(pages)
        .unwrap_or(0)
        .saturating_mul(u64::try_from(page_size).unwrap_or(0));
    let group = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    group.map_or(machine, |limit| limit.min(machine))
}

/// What the cache holds and has served, for metrics and status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// The most it may hold.
    pub limit_bytes: u64,
    /// The bytes of the blocks it holds now.
    pub held_bytes: u64,
    /// Bytes of reads served from it, and read from the device instead, since open.
    pub hit_bytes: u64,
    pub miss_bytes: u64,
}

pub(crate) struct ReadCache {
    shards: Box<[Mutex<Shard>]>,
    limit_bytes: u64,
    held_blocks: AtomicU64,
    hit_bytes: AtomicU64,
    miss_bytes: AtomicU64,
    stock: Arc<Stock>,
    /// Starts the stocking thread at the first block taken. The thread holds only the
    /// stock: stopped with the cache, it ends after the batch it is taking, unjoined.
    stocker: Once,
}

/// Blocks taken from the system and touched, ready to be filled.
#[derive(Default)]
struct Stock {
    state: Mutex<StockState>,
    wake: Condvar,
}

#[derive(Default)]
struct StockState {
    blocks: Vec<Block>,
    /// The blocks the stock should hold, set when a fill takes from it.
    wanted: usize,
    stop: bool,
}

impl Stock {
    fn state(&self) -> MutexGuard<'_, StockState> {
        // Only plain values and whole blocks are changed under this lock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state if no one holds it: a fill does not wait for the stocking thread, which
    /// a busier thread may have preempted while it held the lock.
    fn state_now(&self) -> Option<MutexGuard<'_, StockState>> {
        match self.state.try_lock() {
            Ok(state) => Some(state),
            Err(std::sync::TryLockError::Poisoned(state)) => Some(state.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Moves up to `count` blocks into `into`, unless the stock is busy; asks for the
    /// stock to be topped up to `room` blocks at most (the cache's free room) once it is
    /// under three quarters full.
    fn take(&self, count: usize, into: &mut Vec<Block>, room: usize) {
        let Some(mut state) = self.state_now() else {
            return;
        };
        let from = state.blocks.len().saturating_sub(count);
        into.extend(state.blocks.drain(from..));
        let wanted = STOCK_BLOCKS.min(room);
        if state.blocks.len() < wanted / 4 * 3 && state.wanted < wanted {
            state.wanted = wanted;
            self.wake.notify_one();
        }
    }

    /// Keeps at most `room` blocks (the cache's free room), unless the stock is busy (the
    /// next fill cuts it).
    fn fit(&self, room: usize) {
        let Some(mut state) = self.state_now() else {
            return;
        };
        let keep = room.min(state.blocks.len());
        let let_go = state.blocks.split_off(keep);
        state.wanted = state.wanted.min(room);
        drop(state);
        drop(let_go);
    }

    /// The stocking thread: tops the stock up to what is wanted, a batch at a time, the
    /// memory taken and touched outside the lock.
    fn run(&self) {
        loop {
            let missing = {
                let mut state = self.state();
                while !state.stop && state.blocks.len() >= state.wanted {
                    state.wanted = 0;
                    state = self
                        .wake
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if state.stop {
                    return;
                }
                (state.wanted - state.blocks.len()).min(STOCK_BATCH_BLOCKS)
            };
            static ZEROS: [u8; BLOCK] = [0; BLOCK];
            let mut batch: Vec<Block> = (0..missing).map(|_| Block::from(&ZEROS[..])).collect();
            let mut state = self.state();
            // The cache's room may have shrunk while the batch was taken (`fit`).
            let keep = state.wanted.saturating_sub(state.blocks.len());
            let let_go = batch.split_off(keep.min(batch.len()));
            state.blocks.append(&mut batch);
            drop(state);
            drop(let_go);
        }
    }

    fn stop(&self) {
        self.state().stop = true;
        self.wake.notify_one();
    }
}

#[derive(Default)]
struct Page {
    /// Block i of the page, if held.
    blocks: [Option<Block>; PAGE_BLOCKS as usize],
    /// Read since the clock's hand last passed.
    used: bool,
}

impl Page {
    fn held(&self) -> usize {
        self.blocks.iter().filter(|b| b.is_some()).count()
    }
}

struct Shard {
    pages: HashMap<u64, Page>,
    /// Page numbers in the order the hand visits them; may name pages since let go.
    clock: VecDeque<u64>,
    held_blocks: usize,
    limit_blocks: usize,
    /// Memory of blocks let go, for the next ones (`SPARE_BLOCKS_MAX`).
    spare: Vec<Block>,
}

/// The pages blocks `[first, first + len_blocks)` touch: (page number, first block in the
/// page, blocks) per page.
fn pages_of(first: u64, len_blocks: u64) -> impl Iterator<Item = (u64, usize, usize)> {
    let end = first + len_blocks;
    let mut at = first;
    std::iter::from_fn(move || {
        (at < end).then(|| {
            let page = at / PAGE_BLOCKS;
            let from = at % PAGE_BLOCKS;
            let count = (end - at).min(PAGE_BLOCKS - from);
            at += count;
            (page, from as usize, count as usize)
        })
    })
}

impl ReadCache {
    /// A cache holding at most `limit_bytes` of blocks (under a page per shard: none).
    pub(crate) fn new(limit_bytes: u64) -> ReadCache {
        let per_shard = limit_bytes / BLOCK as u64 / SHARDS as u64;
        let limit_blocks = if per_shard < PAGE_BLOCKS {
            0
        } else {
            usize::try_from(per_shard).unwrap_or(usize::MAX)
        };
        let cache = ReadCache {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        pages: HashMap::new(),
                        clock: VecDeque::new(),
                        held_blocks: 0,
                        limit_blocks,
                        spare: Vec::new(),
                    })
                })
                .collect(),
            limit_bytes: (limit_blocks as u64).saturating_mul((BLOCK * SHARDS) as u64),
            held_blocks: AtomicU64::new(0),
            hit_bytes: AtomicU64::new(0),
            miss_bytes: AtomicU64::new(0),
            stock: Arc::default(),
            stocker: Once::new(),
        };
        crate::metrics::cache_limit(byte_count(cache.limit_bytes));
        cache
    }

    fn shard(&self, page: u64) -> std::sync::MutexGuard<'_, Shard> {
        let spread = page.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60;
        self.shards[spread as usize % SHARDS]
            .lock()
            .expect("cache lock poisoned")
    }

    /// Fills `out` with the blocks from device block `first` on, if every one is held:
    /// true if it did (a hit), false if the caller must read them (a miss). The blocks are
    /// found under the shards' locks and copied after.
    pub(crate) fn get(&self, first: u64, out: &mut [u8]) -> bool {
        debug_assert!(out.len().is_multiple_of(BLOCK));
        let Some(found) = self.blocks(first, (out.len() / BLOCK) as u64) else {
            return false;
        };
        for (block, into) in found.iter().zip(out.chunks_exact_mut(BLOCK)) {
            into.copy_from_slice(block);
        }
        true
    }

    /// The `len_blocks` blocks from device block `first` on, if every one is held (a hit);
    /// None if the caller must read them (a miss). They are shared, not copied: a kept
    /// block's bytes never change, and the memory of one let go while a read still holds
    /// it is not reused (`keep_spare`).
    pub(crate) fn blocks(&self, first: u64, len_blocks: u64) -> Option<Vec<Block>> {
        if self.limit_bytes == 0 {
            return None;
        }
        let len_bytes = len_blocks * BLOCK as u64;
        let mut found: Vec<Block> = Vec::with_capacity(len_blocks as usize);
        for (page, from, count) in pages_of(first, len_blocks) {
            let mut shard = self.shard(page);
            let whole = shard
                .pages
                .get_mut(&page)
                .filter(|held| held.blocks[from..from + count].iter().all(|b| b.is_some()));
            let Some(held) = whole else {
                self.miss_bytes.fetch_add(len_bytes, Ordering::Relaxed);
                crate::metrics::cache_read(false, len_bytes);
                return None;
            };
            held.used = true;
            found.extend(held.blocks[from..from + count].iter().flatten().cloned());
        }
        self.hit_bytes.fetch_add(len_bytes, Ordering::Relaxed);
        crate::metrics::cache_read(true, len_bytes);
        Some(found)
    }

    /// Keeps `bytes`, the blocks from device block `first` on as the device holds them.
    pub(crate) fn put(&self, first: u64, bytes: &[u8]) {
        debug_assert!(bytes.len().is_multiple_of(BLOCK));
        if self.limit_bytes == 0 {
            return;
        }
        let mut rest = bytes;
        let mut stocked = Vec::new();
        for (page, from, count) in pages_of(first, (bytes.len() / BLOCK) as u64) {
            let (mine, tail) = rest.split_at(count * BLOCK);
            rest = tail;
            let mut guard = self.shard(page);
            let shard = &mut *guard;
            let before = shard.held_blocks;
            shard.make_room(page, count);
            if !shard.pages.contains_key(&page) {
                shard.clock.push_back(page);
            }
            let held = shard.pages.entry(page).or_default();
            let empty = held.blocks[from..from + count]
                .iter()
                .filter(|b| b.is_none())
                .count();
            if empty > shard.spare.len() {
                self.stock_up();
                let short = empty - shard.spare.len();
                self.stock.take(short, &mut stocked, self.room_blocks());
            }
            let mut added = 0;
            // A block held already holds these same bytes: the device's.
            for (slot, bytes) in held.blocks[from..from + count]
                .iter_mut()
                .zip(mine.chunks_exact(BLOCK))
                .filter(|(slot, _)| slot.is_none())
            {
                *slot = Some(take_block(&mut shard.spare, &mut stocked, bytes));
                added += 1;
            }
            shard.held_blocks += added;
            let after = shard.held_blocks;
            drop(guard);
            self.held(after as i64 - before as i64);
        }
        debug_assert!(stocked.is_empty(), "a fill takes only the blocks it keeps");
        let room = self.room_blocks();
        if room < STOCK_BLOCKS {
            self.stock.fit(room);
        }
    }

    /// Blocks the cache may take before it reaches its limit.
    fn room_blocks(&self) -> usize {
        let limit = self.limit_bytes / BLOCK as u64;
        let held = self.held_blocks.load(Ordering::Relaxed);
        usize::try_from(limit.saturating_sub(held)).unwrap_or(usize::MAX)
    }

    /// Starts the stocking thread if it has not started. Without it (the system refused
    /// a thread) blocks are taken on the read's path, as they would be from an empty stock.
    fn stock_up(&self) {
        self.stocker.call_once(|| {
            let stock = Arc::clone(&self.stock);
            let _ = std::thread::Builder::new()
                .name("store-cache".into())
                .spawn(move || {
                    let param = libc::sched_param { sched_priority: 0 };
                    // SAFETY: sets the calling thread's own policy from a valid parameter;
                    // if refused, the thread runs at the usual priority.
                    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
                    stock.run()
                });
        });
    }

    /// Forgets the blocks of `run`, freed: their bytes may change once they are allocated
    /// again.
    pub(crate) fn forget(&self, run: Run) {
        if self.limit_bytes == 0 || run.len == 0 {
            return;
        }
        for (page, from, count) in pages_of(run.start, run.len) {
            let mut shard = self.shard(page);
            let Some(held) = shard.pages.get_mut(&page) else {
                continue;
            };
            let let_go: Vec<Block> = held.blocks[from..from + count]
                .iter_mut()
                .filter_map(Option::take)
                .collect();
            if held.held() == 0 {
                shard.pages.remove(&page);
            }
            let dropped = let_go.len();
            shard.held_blocks -= dropped;
            shard.keep_spare(let_go);
            drop(shard);
            self.held(-(dropped as i64));
        }
    }

    /// Counts blocks taken (positive) or let go (negative).
    fn held(&self, blocks: i64) {
        if blocks >= 0 {
            self.held_blocks.fetch_add(blocks as u64, Ordering::Relaxed);
        } else {
            self.held_blocks
                .fetch_sub(blocks.unsigned_abs(), Ordering::Relaxed);
        }
        crate::metrics::cache_held(blocks * BLOCK as i64);
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            limit_bytes: self.limit_bytes,
            held_bytes: self.held_blocks.load(Ordering::Relaxed) * BLOCK as u64,
            hit_bytes: self.hit_bytes.load(Ordering::Relaxed),
            miss_bytes: self.miss_bytes.load(Ordering::Relaxed),
        }
    }
}

impl Drop for ReadCache {
    fn drop(&mut self) {
        self.stock.stop();
        crate::metrics::cache_limit(-byte_count(self.limit_bytes));
        crate::metrics::cache_held(-byte_count(self.stats().held_bytes));
    }
}

fn byte_count(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// A block holding `bytes`, in memory kept aside if there is some, else from the stock's.
fn take_block(spare: &mut Vec<Block>, stocked: &mut Vec<Block>, bytes: &[u8]) -> Block {
    match spare.pop().or_else(|| stocked.pop()) {
        Some(mut block) => {
            Arc::get_mut(&mut block)
                .expect("spare and stocked blocks are held nowhere else")
                .copy_from_slice(bytes);
            block
        }
        None => Arc::from(bytes),
    }
}

impl Shard {
    /// Keeps aside the memory of blocks let go that no read or reply still holds, up to
    /// `SPARE_BLOCKS_MAX`.
    fn keep_spare(&mut self, blocks: impl IntoIterator<Item = Block>) {
        for mut block in blocks {
            if self.spare.len() >= SPARE_BLOCKS_MAX.min(self.limit_blocks / 16) {
                return;
            }
            if Arc::get_mut(&mut block).is_some() {
                self.spare.push(block);
            }
        }
    }

    /// Evicts whole pages until `blocks` more fit: each the first the hand finds unused
    /// since it last passed. `page`, about to take them, is passed over while others are
    /// held.
    fn make_room(&mut self, page: u64, blocks: usize) {
        while self.held_blocks + blocks > self.limit_blocks {
            let Some(at) = self.clock.pop_front() else {
                unreachable!("every held page is on the clock");
            };
            let others = self.pages.len() > 1;
            match self.pages.get_mut(&at) {
                Some(held) if held.used || (at == page && others) => {
                    held.used = false;
                    self.clock.push_back(at);
                }
                Some(_) => {
                    if let Some(evicted) = self.pages.remove(&at) {
                        self.held_blocks -= evicted.held();
                        self.keep_spare(evicted.blocks.into_iter().flatten());
                    }
                }
                None => {}
            }
        }
        // Pages let go stay on the clock until the hand passes; keep it near the pages.
        if self.clock.len() > 2 * self.pages.len() + 64 {
            let pages = &self.pages;
            let mut seen = HashSet::new();
            self.clock
                .retain(|at| pages.contains_key(at) && seen.insert(*at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(seed: u8, n: usize) -> Vec<u8> {
        (0..n * BLOCK)
            .map(|i| seed.wrapping_add((i / BLOCK) as u8))
            .collect()
    }

    #[test]
    fn pages_cover_runs_across_their_edges() {
        let pages: Vec<_> = pages_of(14, 20).collect();
        assert_eq!(pages, vec![(0, 14, 2), (1, 0, 16), (2, 0, 2)]);
        assert_eq!(pages_of(32, 1).collect::<Vec<_>>(), vec![(2, 0, 1)]);
    }

    #[test]
    fn a_kept_run_is_served_whole_and_a_partly_kept_one_is_not() {
        let cache = ReadCache::new(64 << 20);
        let bytes = blocks(1, 20);
        cache.put(14, &bytes);
        let mut out = vec![0u8; 20 * BLOCK];
        assert!(cache.get(14, &mut out));
        assert_eq!(out, bytes);
        let mut inner = vec![0u8; 3 * BLOCK];
        assert!(cache.get(20, &mut inner), "a part inside a kept run");
        assert_eq!(inner, bytes[6 * BLOCK..9 * BLOCK]);
        let mut wider = vec![0u8; 21 * BLOCK];
        assert!(!cache.get(13, &mut wider), "block 13 was never kept");
        let stats = cache.stats();
        assert_eq!(stats.hit_bytes, 23 * BLOCK as u64);
        assert_eq!(stats.miss_bytes, 21 * BLOCK as u64);
        assert_eq!(stats.held_bytes, 20 * BLOCK as u64, "held by the block");
    }

    #[test]
    fn forgotten_blocks_are_read_again_and_written_ones_kept_anew() {
        let cache = ReadCache::new(64 << 20);
        cache.put(0, &blocks(1, 32));
        cache.forget(Run { start: 5, len: 1 });
        let mut out = vec![0u8; 32 * BLOCK];
        assert!(
            !cache.get(0, &mut out),
            "a freed block must come from the device"
        );
        let mut before = vec![0u8; 5 * BLOCK];
        assert!(cache.get(0, &mut before));
        assert_eq!(cache.stats().held_bytes, 31 * BLOCK as u64);
        cache.forget(Run { start: 0, len: 32 });
        assert_eq!(cache.stats().held_bytes, 0);
        cache.put(5, &blocks(9, 1));
        let mut one = vec![0u8; BLOCK];
        assert!(cache.get(5, &mut one));
        assert_eq!(
            one,
            blocks(9, 1),
            "the bytes kept after the block was written again"
        );
    }

    /// Waits until the stocking thread has taken what was asked of it.
    fn settled_stock(cache: &ReadCache) -> Vec<usize> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let state = cache.stock.state();
            if state.wanted == 0 {
                return state.blocks.iter().map(|b| b.as_ptr() as usize).collect();
            }
            drop(state);
            assert!(
                std::time::Instant::now() < deadline,
                "the stock was never filled"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// After the first fill, the blocks a fill keeps are the stock's, taken and touched
    /// ahead by the cache's thread; what it keeps is still the bytes it was given.
    #[test]
    fn fills_keep_their_blocks_in_the_stocked_memory() {
        let limit_blocks = PAGE_BLOCKS as usize * SHARDS * 8;
        let cache = ReadCache::new((limit_blocks * BLOCK) as u64);
        cache.put(0, &blocks(1, 1));
        let stocked: HashSet<usize> = settled_stock(&cache).into_iter().collect();
        assert_eq!(
            stocked.len(),
            limit_blocks - 1,
            "the first fill asked for stock up to the cache's room"
        );
        let bytes = blocks(7, 64);
        cache.put(PAGE_BLOCKS, &bytes);
        for page in 1..5 {
            let shard = cache.shard(page);
            let held = &shard.pages[&page];
            assert!(held
                .blocks
                .iter()
                .flatten()
                .all(|b| stocked.contains(&(b.as_ptr() as usize))));
        }
        let mut out = vec![0u8; 64 * BLOCK];
        assert!(cache.get(PAGE_BLOCKS, &mut out));
        assert_eq!(out, bytes);
    }

    /// The stock is memory the cache will hold: with what the cache holds it stays within
    /// the limit (give or take a fill), however full the cache gets.
    #[test]
    fn the_stock_and_the_cache_stay_within_the_limit() {
        let limit_blocks = PAGE_BLOCKS as usize * SHARDS * 4;
        let cache = ReadCache::new((limit_blocks * BLOCK) as u64);
        for page in 0..2000u64 {
            cache.put(
                page * PAGE_BLOCKS,
                &blocks(page as u8, 1 + page as usize % 4),
            );
            if page % 100 == 0 {
                let stocked = settled_stock(&cache).len();
                let held = (cache.stats().held_bytes / BLOCK as u64) as usize;
                // A fill that finds the stock busy leaves the cut to the next: the stock
                // may hold one fill's blocks over the room.
                assert!(
                    held + stocked <= limit_blocks + PAGE_BLOCKS as usize,
                    "page {page}: {held} held and {stocked} stocked of {limit_blocks}"
                );
            }
        }
    }

    /// The limit holds whatever the pattern: whole pages, or one block per page (random
    /// 4 KiB reads), which fill it with blocks rather than with mostly empty pages; a page
    /// read between inserts survives them.
    #[test]
    fn it_holds_no_more_than_its_limit_and_keeps_what_is_read() {
        let limit_blocks = PAGE_BLOCKS as usize * SHARDS * 4;
        let limit = (limit_blocks * BLOCK) as u64;
        for per_page in [1, PAGE_BLOCKS as usize] {
            let cache = ReadCache::new(limit);
            let hot = blocks(3, 1);
            cache.put(0, &hot);
            for page in 1..2000u64 {
                cache.put(page * PAGE_BLOCKS, &blocks(page as u8, per_page));
                assert!(
                    cache.get(0, &mut vec![0u8; BLOCK]),
                    "a page read between inserts stays"
                );
                assert!(cache.stats().held_bytes <= limit);
            }
            let held = cache.stats().held_bytes;
            assert!(
                held >= limit * 3 / 4,
                "{per_page} blocks a page: {held} of {limit} held"
            );
        }
        let none = ReadCache::new(PAGE_BLOCKS * BLOCK as u64 * SHARDS as u64 - 1);
        none.put(0, &blocks(3, 1));
        assert!(!none.get(0, &mut vec![0u8; BLOCK]));
        assert_eq!(none.stats().held_bytes, 0);
        assert_eq!(
            none.stats().limit_bytes,
            0,
            "under a page per shard: no cache"
        );
    }
}
