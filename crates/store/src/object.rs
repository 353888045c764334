//! Per-object metadata: the object record (size, version, mtime, attributes) and the extent
//! map from logical blocks to device blocks.
//!
//! Invariants of an extent map: extents never overlap; each is at most `EXTENT_BLOCKS_MAX`
//! blocks long; logical blocks without an extent are holes and read as zeros; bytes of a
//! block past the object's size are zero (writes and truncates keep it so), except inside
//! chunks sealed by a client, which the store cannot open.

use crate::allocator::Run;
use crate::metadata::{extent_key, extent_key_block, MetaSealer, ObjectId, Table};
use crate::pending::View;
use crate::seal::ExtentSeal;
use redb::ReadableTable;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Bound;

/// Longest extent, in blocks (4 MiB): bounds the work of splitting one.
pub const EXTENT_BLOCKS_MAX: u64 = 1024;
/// Longest extent whose record carries a seal record per chunk (`gcm`, client-sealed):
/// 64 blocks, so one record holds at most 1 KiB of tags and a 4 KiB overwrite that splits
/// an extent rewrites at most about that much metadata, not 16 KiB. Measured
/// (docs/benchmarks.md): 1,024 blocks cost `gcm` 4 KiB writes 25 % against `none`; 16
/// blocks gained nothing measurable there and cost 4 MiB operations 10 to 15 %.
pub const SEALED_EXTENT_BLOCKS_MAX: u64 = 64;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ObjectRecord {
    pub name: String,
    pub size_bytes: u64,
    pub version: u64,
    pub mtime_ns: u64,
    pub attrs: BTreeMap<String, Vec<u8>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Extent {
    pub physical_block: u64,
    pub len_blocks: u64,
    pub seal: ExtentSeal,
}

impl Extent {
    pub(crate) fn slice(&self, skip: u64, len: u64) -> Extent {
        assert!(
            skip + len <= self.len_blocks,
            "slice [{skip}, +{len}) of {self:?}"
        );
        Extent {
            physical_block: self.physical_block + skip,
            len_blocks: len,
            seal: self.seal.slice(skip as usize, len as usize),
        }
    }

    pub(crate) fn run(&self) -> Run {
        Run {
            start: self.physical_block,
            len: self.len_blocks,
        }
    }
}

pub(crate) type ExtentMap = BTreeMap<u64, Extent>;

/// Removes logical blocks `[first, end)` from `map`, trimming extents that straddle the
/// bounds. Returns the device runs no longer referenced.
pub(crate) fn punch(map: &mut ExtentMap, first: u64, end: u64) -> Vec<Run> {
    let hit: Vec<u64> = map
        .range(..end)
        .rev()
        .take_while(|(start, e)| *start + e.len_blocks > first)
        .map(|(s, _)| *s)
        .collect();
    let mut freed = Vec::with_capacity(hit.len());
    for start in hit {
        let extent = map.remove(&start).expect("key was just listed");
        let extent_end = start + extent.len_blocks;
        if start < first {
            map.insert(start, extent.slice(0, first - start));
        }
        if extent_end > end {
            map.insert(end, extent.slice(end - start, extent_end - end));
        }
        let cut_first = start.max(first);
        let cut_end = extent_end.min(end);
        freed.push(Run {
            start: extent.physical_block + (cut_first - start),
            len: cut_end - cut_first,
        });
    }
    freed
}

/// The extents of `map` overlapping `[first, end)`, clipped to it, in logical order.
pub(crate) fn pieces(map: &ExtentMap, first: u64, end: u64) -> Vec<(u64, Extent)> {
    let mut out: Vec<(u64, Extent)> = map
        .range(..end)
        .rev()
        .take_while(|(start, e)| *start + e.len_blocks > first)
        .map(|(start, e)| {
            let from = (*start).max(first);
            let to = (*start + e.len_blocks).min(end);
            (from, e.slice(from - start, to - from))
        })
        .collect();
    out.reverse();
    out
}

/// Largest object, in bytes (1 TiB); logical block numbers stay below `OBJECT_BLOCKS_MAX`.
pub const OBJECT_SIZE_BYTES_MAX: u64 = 1 << 40;
pub(crate) const OBJECT_BLOCKS_MAX: u64 = OBJECT_SIZE_BYTES_MAX / crate::device::BLOCK_SIZE_BYTES;

#[derive(Debug)]
pub(crate) enum LoadError {
    Storage(redb::StorageError),
    /// The extent record at this logical block failed to open or decode.
    Integrity {
        logical_block: u64,
    },
}

impl From<redb::StorageError> for LoadError {
    fn from(e: redb::StorageError) -> LoadError {
        LoadError::Storage(e)
    }
}

/// Reads from the `extents` table every extent of `id` that overlaps `[first, end)`.
/// Extents are at most `EXTENT_BLOCKS_MAX` long and never overlap, so only the one that
/// starts at or before `first` can reach in from below.
pub(crate) fn load_extents<T: ReadableTable<&'static [u8], &'static [u8]>>(
    table: &View<'_, T>,
    sealer: &MetaSealer,
    id: &ObjectId,
    first: u64,
    end: u64,
) -> Result<ExtentMap, LoadError> {
    assert!(
        first <= end && end <= OBJECT_BLOCKS_MAX,
        "extent range [{first}, {end})"
    );
    let mut map = ExtentMap::new();
    let low = extent_key(id, 0);
    let at_first = extent_key(id, first);
    let before = table.rows(
        Bound::Included(&low[..]),
        Bound::Included(&at_first[..]),
        true,
        1,
    )?;
    let from = extent_key(id, first + 1);
    let to = extent_key(id, end.max(first + 1));
    let after = table.all_rows(Bound::Included(&from[..]), Bound::Excluded(&to[..]))?;
    for (key, value) in before.into_iter().chain(after) {
        let logical_block = extent_key_block(&key);
        let extent =
            decode_extent(sealer, &key, &value).ok_or(LoadError::Integrity { logical_block })?;
        if logical_block + extent.len_blocks > first && logical_block < end {
            map.insert(logical_block, extent);
        }
    }
    Ok(map)
}

pub(crate) fn decode_extent(sealer: &MetaSealer, key: &[u8], stored: &[u8]) -> Option<Extent> {
    let plain = sealer.open(Table::Extents, key, stored).ok()?;
    let extent: Extent = postcard::from_bytes(&plain).ok()?;
    let records_fit = match &extent.seal {
        ExtentSeal::Bare => true,
        ExtentSeal::Store { tags, .. } => tags.len() as u64 == extent.len_blocks,
        ExtentSeal::Edge { chunks } => chunks.len() as u64 == extent.len_blocks,
    };
    // Device blocks, and the byte offsets reads and writes compute from them, stay
    // within u64: a damaged record must not wrap round to another place on the device.
    let in_range = extent
        .physical_block
        .checked_add(extent.len_blocks)
        .and_then(|end| end.checked_mul(crate::device::BLOCK_SIZE_BYTES))
        .is_some();
    (extent.len_blocks > 0 && extent.len_blocks <= EXTENT_BLOCKS_MAX && records_fit && in_range)
        .then_some(extent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bare(physical_block: u64, len_blocks: u64) -> Extent {
        Extent {
            physical_block,
            len_blocks,
            seal: ExtentSeal::Bare,
        }
    }

    #[test]
    fn punch_trims_both_ends_and_frees_the_middle() {
        let mut map = ExtentMap::new();
        map.insert(10, bare(100, 10));
        let freed = punch(&mut map, 12, 15);
        assert_eq!(freed, vec![Run { start: 102, len: 3 }]);
        assert_eq!(map.get(&10), Some(&bare(100, 2)));
        assert_eq!(map.get(&15), Some(&bare(105, 5)));
    }

    #[test]
    fn pieces_clip_to_the_range() {
        let mut map = ExtentMap::new();
        map.insert(0, bare(50, 4));
        map.insert(8, bare(60, 4));
        let p = pieces(&map, 2, 10);
        assert_eq!(p, vec![(2, bare(52, 2)), (8, bare(60, 2))]);
    }
}
