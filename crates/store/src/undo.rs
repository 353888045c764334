//! Undo records: the way back from a transaction whose effect may have to be taken back.
//!
//! An erasure-coded write reaches its k + m shards one store at a time. When its primary
//! dies after fewer than k stores applied it, neither the old nor the new stripe can be
//! decoded unless the stores that applied it go back (docs/design/erasure.md, §6). A
//! transaction that calls `Transaction::keep_undo(object, version)` therefore keeps, in the
//! `undo` table under (pool, name hash, object id, version), what it replaced of that
//! object: its record before (size, attributes; none if it did not exist) and its extents
//! over the block range the transaction loaded (the blocks its operations name, widened to
//! a partial last block and to whole extents). Nothing is copied: the store writes every change out of place,
//! so the replaced extents still point at their blocks, and those blocks (`kept`) are not
//! freed while the record lasts. A `gcm` block still opens when its extent comes back,
//! because its additional data is the object id and logical block, which do not change.
//!
//! The rules, kept where the transaction is applied (apply.rs):
//! - Versions of one object's records rise: `keep_undo` of a version at or below the
//!   object's newest record (as the transaction's earlier operations left them) is refused.
//! - `rollback(object, version)` takes back the newest record only, so the object's state
//!   is exactly what that transaction left; it restores the record and the range's extents
//!   and frees the blocks the transaction had written. It comes before any other change to
//!   the object in its transaction (drops and rollbacks of newer records may precede it).
//! - `drop_undo(object, version)` drops every record of the object at or below `version`
//!   (the writes every holder has applied) and frees what they kept.
//! - A transaction that changes the object without keeping a record of its own (any other
//!   change, a remove included) drops all of its records: they no longer lead back from
//!   the object's state.
//!
//! Every device block is referenced by one committed extent or by one record's `kept`, never
//! both: `open` rebuilds free space from the two (store.rs).
//!
//! Undo records cover data, size and attributes, not omap; `keep_undo` with omap operations
//! on the object in the same transaction is refused, and so is one with a remove of an
//! object that has omap entries. Keys start as the `objects` table's do, so the records of a
//! pool's hash range are one range of rows, and each record names its object.

use crate::allocator::Run;
use crate::metadata::{object_key, MetaSealer, ObjectId, Table};
use crate::object::{Extent, ObjectRecord};
use map::ObjectRef;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UndoRecord {
    /// The object's name (its record may be absent).
    pub name: String,
    /// The object's record before the transaction; None if it did not exist.
    pub record: Option<ObjectRecord>,
    /// The logical blocks `[first_block, end_block)` whose extents `extents` were.
    pub first_block: u64,
    pub end_block: u64,
    pub extents: Vec<(u64, Extent)>,
    /// The device blocks of `extents` that only this record references.
    pub kept: Vec<Run>,
}

/// `undo` table key: the object's `objects` key (pool 8 · name hash 4 · id 16) · version (8).
pub(crate) fn undo_key(object: &ObjectRef, id: &ObjectId, version: u64) -> [u8; 36] {
    let mut key = [0u8; 36];
    key[..28].copy_from_slice(&object_key(object.pool, object.name.hash(), id));
    key[28..].copy_from_slice(&version.to_be_bytes());
    key
}

pub(crate) fn undo_key_version(key: &[u8]) -> u64 {
    let mut version = [0u8; 8];
    version.copy_from_slice(&key[28..36]);
    u64::from_be_bytes(version)
}

/// Opens and decodes a stored record; None if it fails to open or makes no sense (its
/// extents outside its range, or kept blocks that are not its extents').
pub(crate) fn decode(sealer: &MetaSealer, key: &[u8], stored: &[u8]) -> Option<UndoRecord> {
    let plain = sealer.open(Table::Undo, key, stored).ok()?;
    let record: UndoRecord = postcard::from_bytes(&plain).ok()?;
    let inside = record.extents.iter().all(|(start, e)| {
        record.first_block <= *start
            && start
                .checked_add(e.len_blocks)
                .is_some_and(|end| end <= record.end_block)
    });
    let runs: Vec<Run> = record.extents.iter().map(|(_, e)| e.run()).collect();
    let kept_is_theirs = subtract(&record.kept, &runs).is_empty();
    (inside && kept_is_theirs).then_some(record)
}

/// The blocks of `runs` not in any run of `minus`, as runs in block order.
pub(crate) fn subtract(runs: &[Run], minus: &[Run]) -> Vec<Run> {
    // The cuts, sorted and merged: their ends rise with their starts.
    let mut cuts: Vec<(u64, u64)> = minus
        .iter()
        .filter(|r| r.len > 0)
        .map(|r| (r.start, r.start + r.len))
        .collect();
    cuts.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(cuts.len());
    for (start, end) in cuts {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let mut sorted: Vec<Run> = runs.iter().copied().filter(|r| r.len > 0).collect();
    sorted.sort_unstable_by_key(|r| r.start);
    let mut out = Vec::new();
    for run in sorted {
        let end = run.start + run.len;
        let mut at = run.start;
        let first = merged.partition_point(|(_, cut_end)| *cut_end <= at);
        for &(cut_start, cut_end) in merged[first..].iter().take_while(|(s, _)| *s < end) {
            if cut_start > at {
                out.push(Run {
                    start: at,
                    len: cut_start - at,
                });
            }
            at = cut_end;
        }
        if at < end {
            out.push(Run {
                start: at,
                len: end - at,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(start: u64, len: u64) -> Run {
        Run { start, len }
    }

    #[test]
    fn subtract_keeps_what_no_cut_covers() {
        assert_eq!(
            subtract(&[run(10, 10)], &[run(12, 2), run(15, 1)]),
            vec![run(10, 2), run(14, 1), run(16, 4)]
        );
        assert_eq!(subtract(&[run(10, 10)], &[run(5, 30)]), vec![]);
        assert_eq!(
            subtract(&[run(30, 2), run(10, 2)], &[run(0, 5)]),
            vec![run(10, 2), run(30, 2)]
        );
        assert_eq!(
            subtract(&[run(0, 4)], &[run(3, 9), run(0, 1)]),
            vec![run(1, 2)]
        );
    }

    /// Against a block-by-block reference, for every small pair of run lists.
    #[test]
    fn subtract_matches_sets_of_blocks() {
        let lists: Vec<Vec<Run>> = vec![
            vec![],
            vec![run(0, 3)],
            vec![run(2, 2), run(6, 1)],
            vec![run(1, 6)],
            vec![run(5, 3), run(0, 1)],
        ];
        for a in &lists {
            for b in &lists {
                let blocks = |runs: &[Run]| -> std::collections::BTreeSet<u64> {
                    runs.iter().flat_map(|r| r.start..r.start + r.len).collect()
                };
                let want: Vec<u64> = blocks(a).difference(&blocks(b)).copied().collect();
                let got = subtract(a, b);
                assert_eq!(blocks(&got).into_iter().collect::<Vec<_>>(), want);
                assert!(got.windows(2).all(|w| w[0].start + w[0].len <= w[1].start));
            }
        }
    }
}
