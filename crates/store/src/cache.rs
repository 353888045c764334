//! The read cache: blocks of the data device as it holds them (sealed in every mode but
//! `none`; an edge pool's chunks as its clients sealed them), kept in memory so a read
//! served from it skips the device. Plaintext is never kept: a hit is opened in the read's
//! own buffer, as a block read from the device is.
//!
//! Blocks are grouped in pages of `PAGE_BLOCKS` aligned blocks, each with a bit per block
//! present. A read part is served only if every one of its blocks is here; otherwise it is
//! read from the device and its blocks are kept. Pages are evicted by a clock (a page used
//! since the hand last passed survives one more turn), per shard, once the shard holds its
//! share of the limit.
//!
//! Why a kept block is always what the device holds: new data only goes to newly allocated
//! blocks (copy on write), so a block's bytes change only after the block was freed and
//! allocated again. Freed blocks are forgotten here before they return to the allocator,
//! and a read keeps a block only while it holds its object's lock, which the transaction
//! that frees the block takes exclusively. Reads that check the device itself (scrub) skip
//! the cache in both directions.

use crate::allocator::Run;
use crate::device::BLOCK_SIZE_BYTES;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

const BLOCK: usize = BLOCK_SIZE_BYTES as usize;
/// Blocks per page: a 4 KiB read costs one page lookup, a 4 MiB read 64.
pub(crate) const PAGE_BLOCKS: u64 = 16;
const PAGE_BYTES: usize = PAGE_BLOCKS as usize * BLOCK;
/// Shards, each with its own lock and clock, by page number.
const SHARDS: usize = 16;
/// The default limit: this share of the machine's memory...
const DEFAULT_MEMORY_SHARE: u64 = 16;
/// ...within these bounds.
pub const CACHE_BYTES_DEFAULT_MIN: u64 = 64 << 20;
pub const CACHE_BYTES_DEFAULT_MAX: u64 = 2 << 30;

/// The default limit for a machine with `memory_bytes` of memory: a sixteenth, at least
/// 64 MiB and at most 2 GiB (several OSDs share a machine, as with Ceph's
/// osd_memory_target).
pub fn default_cache_bytes(memory_bytes: u64) -> u64 {
    (memory_bytes / DEFAULT_MEMORY_SHARE).clamp(CACHE_BYTES_DEFAULT_MIN, CACHE_BYTES_DEFAULT_MAX)
}

/// This machine's memory, in bytes (0 if it cannot be found).
pub fn memory_bytes() -> u64 {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page_size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    u64::try_from(pages)
        .unwrap_or(0)
        .saturating_mul(u64::try_from(page_size).unwrap_or(0))
}

/// What the cache holds and has served, for metrics and status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// The most it may hold.
    pub limit_bytes: u64,
    /// What its pages take now.
    pub held_bytes: u64,
    /// Bytes of reads served from it, and read from the device instead, since open.
    pub hit_bytes: u64,
    pub miss_bytes: u64,
}

pub(crate) struct ReadCache {
    shards: Box<[Mutex<Shard>]>,
    limit_bytes: u64,
    held_pages: AtomicU64,
    hit_bytes: AtomicU64,
    miss_bytes: AtomicU64,
}

struct Page {
    blocks: Box<[u8]>,
    /// Bit i: block i of the page is held.
    present: u16,
    /// Read since the clock's hand last passed.
    used: bool,
}

struct Shard {
    pages: HashMap<u64, Page>,
    /// Page numbers in the order the hand visits them; may name pages since forgotten.
    clock: VecDeque<u64>,
    limit_pages: usize,
}

/// The pages `[first, end)` blocks touch: (page number, first bit, bits) per page.
fn pages_of(first: u64, len_blocks: u64) -> impl Iterator<Item = (u64, u32, u32)> {
    let end = first + len_blocks;
    let mut at = first;
    std::iter::from_fn(move || {
        (at < end).then(|| {
            let page = at / PAGE_BLOCKS;
            let bit = (at % PAGE_BLOCKS) as u32;
            let bits = (end - at).min(PAGE_BLOCKS - u64::from(bit)) as u32;
            at += u64::from(bits);
            (page, bit, bits)
        })
    })
}

fn mask(bit: u32, bits: u32) -> u16 {
    debug_assert!(bits >= 1 && bit + bits <= PAGE_BLOCKS as u32);
    (((1u32 << bits) - 1) << bit) as u16
}

impl ReadCache {
    /// A cache holding at most `limit_bytes` (0: nothing is kept).
    pub(crate) fn new(limit_bytes: u64) -> ReadCache {
        let limit_pages =
            usize::try_from(limit_bytes / PAGE_BYTES as u64 / SHARDS as u64).unwrap_or(usize::MAX);
        let cache = ReadCache {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        pages: HashMap::new(),
                        clock: VecDeque::new(),
                        limit_pages,
                    })
                })
                .collect(),
            limit_bytes: limit_pages as u64 * (PAGE_BYTES * SHARDS) as u64,
            held_pages: AtomicU64::new(0),
            hit_bytes: AtomicU64::new(0),
            miss_bytes: AtomicU64::new(0),
        };
        crate::metrics::cache_limit(byte_count(cache.limit_bytes));
        cache
    }

    fn shard(&self, page: u64) -> std::sync::MutexGuard<'_, Shard> {
        self.shards[(page % SHARDS as u64) as usize]
            .lock()
            .expect("cache lock poisoned")
    }

    /// Fills `out` with the blocks from device block `first` on, if every one is held:
    /// true if it did (a hit), false if the caller must read them (a miss; `out` may hold
    /// part of them).
    pub(crate) fn get(&self, first: u64, out: &mut [u8]) -> bool {
        debug_assert!(out.len().is_multiple_of(BLOCK));
        if self.limit_bytes == 0 {
            return false;
        }
        let len_bytes = out.len() as u64;
        let mut rest = &mut out[..];
        for (page, bit, bits) in pages_of(first, len_bytes / BLOCK as u64) {
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(bits as usize * BLOCK);
            let mut shard = self.shard(page);
            match shard.pages.get_mut(&page) {
                Some(held) if held.present & mask(bit, bits) == mask(bit, bits) => {
                    held.used = true;
                    let at = bit as usize * BLOCK;
                    mine.copy_from_slice(&held.blocks[at..at + mine.len()]);
                }
                _ => {
                    self.miss_bytes.fetch_add(len_bytes, Ordering::Relaxed);
                    crate::metrics::cache_read(false, len_bytes);
                    return false;
                }
            }
            rest = tail;
        }
        self.hit_bytes.fetch_add(len_bytes, Ordering::Relaxed);
        crate::metrics::cache_read(true, len_bytes);
        true
    }

    /// Counts pages made (positive) or let go (negative).
    fn held(&self, pages: i64) {
        if pages >= 0 {
            self.held_pages.fetch_add(pages as u64, Ordering::Relaxed);
        } else {
            self.held_pages
                .fetch_sub(pages.unsigned_abs(), Ordering::Relaxed);
        }
        crate::metrics::cache_held(pages * PAGE_BYTES as i64);
    }

    /// Keeps `bytes`, the blocks from device block `first` on as the device holds them.
    pub(crate) fn put(&self, first: u64, bytes: &[u8]) {
        debug_assert!(bytes.len().is_multiple_of(BLOCK));
        if self.limit_bytes == 0 {
            return;
        }
        let mut rest = bytes;
        for (page, bit, bits) in pages_of(first, (bytes.len() / BLOCK) as u64) {
            let (mine, tail) = rest.split_at(bits as usize * BLOCK);
            rest = tail;
            let mut shard = self.shard(page);
            if !shard.pages.contains_key(&page) {
                let evicted = shard.make_room();
                shard.clock.push_back(page);
                self.held(1 - evicted as i64);
            }
            let held = shard.pages.entry(page).or_insert_with(|| Page {
                blocks: vec![0u8; PAGE_BYTES].into_boxed_slice(),
                present: 0,
                used: false,
            });
            let at = bit as usize * BLOCK;
            held.blocks[at..at + mine.len()].copy_from_slice(mine);
            held.present |= mask(bit, bits);
        }
    }

    /// Forgets the blocks of `run`, freed: their bytes may change once they are allocated
    /// again.
    pub(crate) fn forget(&self, run: Run) {
        if self.limit_bytes == 0 || run.len == 0 {
            return;
        }
        for (page, bit, bits) in pages_of(run.start, run.len) {
            let mut shard = self.shard(page);
            if let Some(held) = shard.pages.get_mut(&page) {
                held.present &= !mask(bit, bits);
                if held.present == 0 {
                    shard.pages.remove(&page);
                    self.held(-1);
                }
            }
        }
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            limit_bytes: self.limit_bytes,
            held_bytes: self.held_pages.load(Ordering::Relaxed) * PAGE_BYTES as u64,
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

impl Shard {
    /// Evicts pages until one more fits: the first the hand finds unused since it last
    /// passed. Returns how many it evicted.
    fn make_room(&mut self) -> usize {
        let mut evicted = 0;
        while self.pages.len() >= self.limit_pages {
            let Some(page) = self.clock.pop_front() else {
                unreachable!("every held page is on the clock");
            };
            match self.pages.get_mut(&page) {
                Some(held) if held.used => {
                    held.used = false;
                    self.clock.push_back(page);
                }
                Some(_) => {
                    self.pages.remove(&page);
                    evicted += 1;
                }
                None => {}
            }
        }
        // Forgotten pages stay on the clock until the hand passes; keep it near the pages.
        if self.clock.len() > 2 * self.limit_pages + 64 {
            let pages = &self.pages;
            let mut seen = std::collections::HashSet::new();
            self.clock
                .retain(|page| pages.contains_key(page) && seen.insert(*page));
        }
        evicted
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
        assert_eq!(mask(14, 2), 0xc000);
        assert_eq!(mask(0, 16), 0xffff);
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
        assert_eq!(stats.held_bytes, 3 * PAGE_BYTES as u64);
    }

    #[test]
    fn forgotten_blocks_are_read_again_and_empty_pages_are_let_go() {
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

    #[test]
    fn it_holds_no_more_than_its_limit_and_keeps_what_is_read() {
        let limit = (PAGE_BYTES * SHARDS * 4) as u64;
        let cache = ReadCache::new(limit);
        let hot = blocks(3, 1);
        cache.put(0, &hot);
        for page in 1..1000u64 {
            cache.put(page * PAGE_BLOCKS, &blocks(page as u8, 1));
            let mut out = vec![0u8; BLOCK];
            assert!(cache.get(0, &mut out), "a page read between inserts stays");
            assert!(cache.stats().held_bytes <= limit);
        }
        assert_eq!(cache.stats().held_bytes, limit);
        let none = ReadCache::new(0);
        none.put(0, &hot);
        assert!(!none.get(0, &mut vec![0u8; BLOCK]));
        assert_eq!(none.stats().held_bytes, 0);
    }
}
