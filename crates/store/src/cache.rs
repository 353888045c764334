//! The read cache: blocks of the data device as it holds them (sealed in every mode but
//! `none`; an edge pool's chunks as its clients sealed them), kept in memory so a read
//! served from it skips the device. Plaintext is never kept: a hit is opened in the read's
//! own buffer, as a block read from the device is.
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
use std::sync::{Arc, Mutex};

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

/// A block's bytes. Shared, so a hit copies them after the shard's lock is let go.
type Block = Arc<[u8]>;
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
        if self.limit_bytes == 0 {
            return false;
        }
        let len_bytes = out.len() as u64;
        let mut found: Vec<Block> = Vec::with_capacity(out.len() / BLOCK);
        for (page, from, count) in pages_of(first, len_bytes / BLOCK as u64) {
            let mut shard = self.shard(page);
            let whole = shard
                .pages
                .get_mut(&page)
                .filter(|held| held.blocks[from..from + count].iter().all(|b| b.is_some()));
            let Some(held) = whole else {
                self.miss_bytes.fetch_add(len_bytes, Ordering::Relaxed);
                crate::metrics::cache_read(false, len_bytes);
                return false;
            };
            held.used = true;
            found.extend(held.blocks[from..from + count].iter().flatten().cloned());
        }
        for (block, into) in found.iter().zip(out.chunks_exact_mut(BLOCK)) {
            into.copy_from_slice(block);
        }
        self.hit_bytes.fetch_add(len_bytes, Ordering::Relaxed);
        crate::metrics::cache_read(true, len_bytes);
        true
    }

    /// Keeps `bytes`, the blocks from device block `first` on as the device holds them.
    pub(crate) fn put(&self, first: u64, bytes: &[u8]) {
        debug_assert!(bytes.len().is_multiple_of(BLOCK));
        if self.limit_bytes == 0 {
            return;
        }
        let mut rest = bytes;
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
            let mut added = 0;
            // A block held already holds these same bytes: the device's.
            for (slot, bytes) in held.blocks[from..from + count]
                .iter_mut()
                .zip(mine.chunks_exact(BLOCK))
                .filter(|(slot, _)| slot.is_none())
            {
                *slot = Some(take_block(&mut shard.spare, bytes));
                added += 1;
            }
            shard.held_blocks += added;
            let after = shard.held_blocks;
            drop(guard);
            self.held(after as i64 - before as i64);
        }
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
        crate::metrics::cache_limit(-byte_count(self.limit_bytes));
        crate::metrics::cache_held(-byte_count(self.stats().held_bytes));
    }
}

fn byte_count(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// A block holding `bytes`, in memory kept aside if there is some.
fn take_block(spare: &mut Vec<Block>, bytes: &[u8]) -> Block {
    match spare.pop() {
        Some(mut block) => {
            Arc::get_mut(&mut block)
                .expect("spare blocks are held nowhere else")
                .copy_from_slice(bytes);
            block
        }
        None => Arc::from(bytes),
    }
}

impl Shard {
    /// Keeps aside the memory of blocks let go that no read is still copying, up to
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
