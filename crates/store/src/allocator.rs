//! The free-space allocator: which device blocks are free.
//!
//! It lives in memory only. `open` rebuilds it from the extent records (every block that no
//! committed extent references is free), so it needs no persisted free list and a crash can
//! never leak or double-book space. Blocks freed by a transaction return here only after
//! that transaction's metadata commit is durable, so no committed extent ever points at a
//! block that a later write could reuse.
//!
//! Allocation is best-fit: the smallest free run that holds the request, else the largest
//! runs until it is covered (the write then spans several extents).

use std::collections::{BTreeMap, BTreeSet};

/// A run of device blocks: `[start, start + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Run {
    pub start: u64,
    pub len: u64,
}

#[derive(Debug)]
pub(crate) struct Allocator {
    by_start: BTreeMap<u64, u64>,
    by_len: BTreeSet<(u64, u64)>,
    free_blocks: u64,
    total_blocks: u64,
}

/// Two extents claim the same block: the metadata is corrupt.
#[derive(Debug)]
pub(crate) struct Overlap {
    pub block: u64,
}

impl Allocator {
    /// Builds the free map of a device of `total_blocks`, given the runs in use.
    pub(crate) fn from_used(total_blocks: u64, mut used: Vec<Run>) -> Result<Allocator, Overlap> {
        used.sort_by_key(|r| r.start);
        let mut alloc = Allocator {
            by_start: BTreeMap::new(),
            by_len: BTreeSet::new(),
            free_blocks: 0,
            total_blocks,
        };
        let mut cursor = 0;
        for run in used {
            if run.start < cursor || run.start + run.len > total_blocks {
                return Err(Overlap {
                    block: run.start.max(cursor.min(total_blocks)),
                });
            }
            if run.start > cursor {
                alloc.insert(cursor, run.start - cursor);
            }
            cursor = run.start + run.len;
        }
        if cursor < total_blocks {
            alloc.insert(cursor, total_blocks - cursor);
        }
        Ok(alloc)
    }

    fn insert(&mut self, start: u64, len: u64) {
        self.by_start.insert(start, len);
        self.by_len.insert((len, start));
        self.free_blocks += len;
    }

    fn take(&mut self, start: u64, len: u64) {
        self.by_start.remove(&start);
        self.by_len.remove(&(len, start));
        self.free_blocks -= len;
    }

    pub(crate) fn free_blocks(&self) -> u64 {
        self.free_blocks
    }

    pub(crate) fn total_blocks(&self) -> u64 {
        self.total_blocks
    }

    /// Allocates `blocks` blocks as one or more runs, or None (changing nothing) if fewer
    /// are free.
    pub(crate) fn allocate(&mut self, blocks: u64) -> Option<Vec<Run>> {
        if blocks > self.free_blocks {
            return None;
        }
        let mut runs = Vec::new();
        let mut wanted = blocks;
        while wanted > 0 {
            let fit = self.by_len.range((wanted, 0)..).next().copied();
            let (len, start) = match fit {
                Some(fit) => fit,
                None => *self
                    .by_len
                    .iter()
                    .next_back()
                    .expect("free_blocks > 0 means a free run exists"),
            };
            let used = len.min(wanted);
            self.take(start, len);
            if len > used {
                self.insert(start + used, len - used);
            }
            runs.push(Run { start, len: used });
            wanted -= used;
        }
        Some(runs)
    }

    /// Returns a run to the free map, merging it with free neighbours.
    pub(crate) fn release(&mut self, run: Run) {
        assert!(
            run.len > 0 && run.start + run.len <= self.total_blocks,
            "release of {run:?} outside the device"
        );
        let mut start = run.start;
        let mut len = run.len;
        if let Some((&prev_start, &prev_len)) = self.by_start.range(..start).next_back() {
            assert!(
                prev_start + prev_len <= start,
                "double free: {run:?} overlaps free run at {prev_start}"
            );
            if prev_start + prev_len == start {
                self.take(prev_start, prev_len);
                start = prev_start;
                len += prev_len;
            }
        }
        if let Some((&next_start, &next_len)) = self.by_start.range(run.start..).next() {
            assert!(
                next_start >= run.start + run.len,
                "double free: {run:?} overlaps free run at {next_start}"
            );
            if next_start == run.start + run.len {
                self.take(next_start, next_len);
                len += next_len;
            }
        }
        self.insert(start, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_then_release_restores_one_free_run() {
        let mut a = Allocator::from_used(100, vec![]).expect("no overlap");
        let x = a.allocate(10).expect("space");
        let y = a.allocate(30).expect("space");
        assert_eq!(a.free_blocks(), 60);
        for r in x.into_iter().chain(y) {
            a.release(r);
        }
        assert_eq!(a.free_blocks(), 100);
        assert_eq!(a.by_start.len(), 1);
    }

    #[test]
    fn fragmented_space_is_still_usable_and_full_is_refused() {
        let used: Vec<Run> = (0..50)
            .map(|i| Run {
                start: i * 2,
                len: 1,
            })
            .collect();
        let mut a = Allocator::from_used(100, used).expect("no overlap");
        assert_eq!(a.free_blocks(), 50);
        let runs = a.allocate(5).expect("fragments suffice");
        assert_eq!(runs.iter().map(|r| r.len).sum::<u64>(), 5);
        assert!(a.allocate(46).is_none(), "45 free blocks cannot hold 46");
        assert_eq!(a.free_blocks(), 45, "a refused allocation changes nothing");
    }

    #[test]
    fn overlapping_extents_are_reported() {
        let used = vec![Run { start: 0, len: 10 }, Run { start: 5, len: 2 }];
        assert!(Allocator::from_used(100, used).is_err());
    }
}
