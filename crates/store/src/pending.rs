//! Metadata changes that are logged but not yet in the database.
//!
//! A group's log record, synced, is its commit point (wal.rs); putting its metadata into
//! the database is a redb commit of its own, which a synchronous writer pays whole: at one
//! write in flight it was about a third of an OSD's CPU per write. So a logged group's
//! changes wait here and several groups go into the database in one commit, made by the
//! store's own thread when `Pending::due` says so (behind.rs), before a checkpoint, or
//! before a read that needs them.
//!
//! Who sees what:
//! - The write path, a record's reader and `omap_entries` read through a [`View`]: the changes
//!   here over the database, each key as its last change left it. A commit takes the
//!   changes out of `Waiting::newer` into `Waiting::committing`, commits them without a
//!   lock on them, and only then drops them (`Shared::commit_with_waiting`); a reader
//!   looks here under a read lock and begins its database snapshot while holding it, so a
//!   change is seen in one place or the other (or both, alike), never neither, and no
//!   reader waits for a commit. Not alike where a commit also made a group's own changes
//!   (one committed at once) over those it took: a reader without the object's lock leaves
//!   those out once its snapshot holds the commit (`Waiting::view_of_snapshot`).
//! - Every other reader first has the changes of its object (or all of them, for listings)
//!   committed (`Store::settle`), then reads the database as before.
//!
//! A crash loses only this memory: the records are in the log above `wal_applied`, and
//! replay applies them in order, as it did for the one record a crash could leave before.
//! Changes that remove a key range (`MetaOp::RemovePrefix`, the omap rows of an object
//! removed or cleared; an object without rows has none) are not kept here: their group is
//! committed at once, after what is here.

use crate::metadata::{MetaOp, ObjectId, Table};
use crate::usage::Delta;
use map::PoolId;
use redb::{ReadableTable, StorageError};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

/// Groups kept before they are committed. A commit of this many groups costs a few times
/// one of a single group (their rows share pages), and a reader that needs them waits for
/// it; the memory is bounded by `PENDING_BYTES_MAX` too.
pub(crate) const PENDING_GROUPS_MAX: usize = 32;

/// Bytes of keys and values kept before they are committed.
pub(crate) const PENDING_BYTES_MAX: usize = 1 << 20;

/// How many times what is due may wait while the store's thread commits (behind.rs)
/// before a writer commits it itself: the bound on this memory when writes come faster
/// than the thread commits them.
pub(crate) const OVERDUE_FACTOR: usize = 4;

/// The metadata a group of small writes is taken to add here at most when telling whether
/// it would make the changes overdue (`Pending::overdue_after_one_more`).
const GROUP_META_BYTES: usize = 64 << 10;

/// The tables a transaction writes, in the order of `table_slot`.
const TABLES: usize = 5;

/// One table's changes: a key's last value, or `None` where its last change removed it.
pub(crate) type Changes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

#[derive(Default)]
pub(crate) struct Pending {
    tables: [Changes; TABLES],
    usage: BTreeMap<PoolId, Delta>,
    ids: HashSet<ObjectId>,
    /// The last log record whose changes are here.
    seq: Option<u64>,
    groups: usize,
    bytes: usize,
}

/// Where `table` is among the tables a transaction writes.
pub(crate) fn table_slot(table: Table) -> usize {
    match table {
        Table::Objects => 0,
        Table::Extents => 1,
        Table::Omap => 2,
        Table::OmapPaged => 3,
        Table::Undo => 4,
        Table::Superblock | Table::PoolUsage | Table::Wal => {
            unreachable!("transactions never write the superblock, usage rows or the log")
        }
    }
}

const SLOT_TABLES: [Table; TABLES] = [
    Table::Objects,
    Table::Extents,
    Table::Omap,
    Table::OmapPaged,
    Table::Undo,
];

/// Whether a group's changes can wait here: all of them name single keys.
pub(crate) fn deferrable(ops: &[MetaOp]) -> bool {
    !ops.iter()
        .any(|op| matches!(op, MetaOp::RemovePrefix { .. }))
}

impl Pending {
    pub(crate) fn is_empty(&self) -> bool {
        self.seq.is_none()
    }

    /// Whether a change of object `id` waits here.
    pub(crate) fn touches(&self, id: &ObjectId) -> bool {
        self.ids.contains(id)
    }

    /// The last log record whose changes are here.
    pub(crate) fn seq(&self) -> Option<u64> {
        self.seq
    }

    /// Keeps the changes of log record `seq` (`ops` of objects `ids`, usage `deltas`).
    pub(crate) fn add(
        &mut self,
        ops: Vec<MetaOp>,
        deltas: &BTreeMap<PoolId, Delta>,
        seq: u64,
        ids: impl IntoIterator<Item = ObjectId>,
    ) {
        assert!(
            self.seq.is_none_or(|last| last < seq),
            "log record {seq} kept after record {:?}",
            self.seq
        );
        for op in ops {
            let (table, key, value) = match op {
                MetaOp::Put { table, key, value } => (table, key, Some(value)),
                MetaOp::Remove { table, key } => (table, key, None),
                MetaOp::RemovePrefix { .. } => {
                    unreachable!("a group that removes a key range is committed at once")
                }
            };
            self.bytes += key.len() + value.as_ref().map_or(0, Vec::len);
            self.tables[table_slot(table)].insert(key, value);
        }
        for (pool, delta) in deltas {
            self.usage.entry(*pool).or_default().add(*delta);
        }
        self.ids.extend(ids);
        self.seq = Some(seq);
        self.groups += 1;
    }

    /// Whether enough waits here to commit it.
    pub(crate) fn due(&self) -> bool {
        self.groups >= PENDING_GROUPS_MAX || self.bytes >= PENDING_BYTES_MAX
    }

    /// Whether so much waits here that a writer should not wait for the store's thread to
    /// commit it.
    pub(crate) fn overdue(&self) -> bool {
        self.groups >= PENDING_GROUPS_MAX * OVERDUE_FACTOR
            || self.bytes >= PENDING_BYTES_MAX * OVERDUE_FACTOR
    }

    /// Whether one more group (its metadata taken as at most `GROUP_META_BYTES`) would make
    /// the changes here overdue: that group's leader would commit them itself.
    pub(crate) fn overdue_after_one_more(&self) -> bool {
        self.groups + 1 >= PENDING_GROUPS_MAX * OVERDUE_FACTOR
            || self.bytes + GROUP_META_BYTES >= PENDING_BYTES_MAX * OVERDUE_FACTOR
    }

    /// Each table's changes, in key order.
    pub(crate) fn tables(&self) -> impl Iterator<Item = (Table, &Changes)> {
        SLOT_TABLES.into_iter().zip(&self.tables)
    }

    /// The usage deltas kept here plus `more`.
    pub(crate) fn usage_with(&self, more: &BTreeMap<PoolId, Delta>) -> BTreeMap<PoolId, Delta> {
        let mut sum = self.usage.clone();
        for (pool, delta) in more {
            sum.entry(*pool).or_default().add(*delta);
        }
        sum.retain(|_, delta| *delta != Delta::default());
        sum
    }
}

/// The changes waiting: those a commit under way is putting into the database, and those
/// logged since (or all of them, with no commit under way).
#[derive(Default)]
pub(crate) struct Waiting {
    newer: Pending,
    committing: Option<Arc<Pending>>,
}

impl Waiting {
    pub(crate) fn is_empty(&self) -> bool {
        self.newer.is_empty() && self.committing.is_none()
    }

    /// Whether a change of object `id` waits (or is being committed).
    pub(crate) fn touches(&self, id: &ObjectId) -> bool {
        self.newer.touches(id) || self.committing.as_ref().is_some_and(|c| c.touches(id))
    }

    /// Whether the next group would make the changes logged since the last commit began
    /// overdue (`Pending::overdue_after_one_more`).
    pub(crate) fn overdue_after_one_more(&self) -> bool {
        self.newer.overdue_after_one_more()
    }

    /// The changes logged since the commit under way began (all of them, with none under
    /// way): where a group's changes are kept (`Pending::add`).
    pub(crate) fn newer(&mut self) -> &mut Pending {
        &mut self.newer
    }

    /// Takes the newer changes to be committed; `None` if the last commit of changes
    /// failed (its changes stay in view: they are logged, and acknowledged).
    pub(crate) fn begin_commit(&mut self) -> Option<Arc<Pending>> {
        if self.committing.is_some() {
            return None;
        }
        let changes = Arc::new(std::mem::take(&mut self.newer));
        self.committing = Some(Arc::clone(&changes));
        Some(changes)
    }

    /// The changes taken by `begin_commit` are in the database.
    pub(crate) fn end_commit(&mut self) {
        assert!(self.committing.take().is_some(), "no commit under way");
    }

    /// The usage deltas of every change waiting and not in the database snapshot that holds
    /// every log record up to `in_snapshot` (those being committed may already be in it:
    /// their commit is dropped from here only after it is made).
    pub(crate) fn usage(&self, in_snapshot: u64) -> BTreeMap<PoolId, Delta> {
        let committing = self
            .committing_after(in_snapshot)
            .map(|c| c.usage_with(&BTreeMap::new()));
        self.newer.usage_with(&committing.unwrap_or_default())
    }

    /// The changes being committed, unless the database snapshot that holds every log
    /// record up to `in_snapshot` holds their commit.
    fn committing_after(&self, in_snapshot: u64) -> Option<&Pending> {
        self.committing
            .as_deref()
            .filter(|c| c.seq().is_some_and(|seq| seq > in_snapshot))
    }

    /// A view of `table` as the database snapshot `base` holds it with the changes waiting
    /// and not in it over it, for a reader that does not hold the object's lock. While a
    /// commit is under way, `in_snapshot` tells the last log record whose changes the
    /// snapshot holds: once that is the commit's, the changes it took are left out, since
    /// it may also have made a group's own changes over them (a group committed at once),
    /// which the snapshot holds and those changes would hide.
    pub(crate) fn view_of_snapshot<'a, T, E>(
        &'a self,
        table: Table,
        base: &'a T,
        in_snapshot: impl FnOnce() -> Result<u64, E>,
    ) -> Result<View<'a, T>, E> {
        let committing = match self.committing.as_deref() {
            Some(taken) if !taken.is_empty() => self.committing_after(in_snapshot()?),
            _ => None,
        };
        Ok(self.view_over(table, base, committing))
    }

    /// A view of `table` as the database `base` holds it with the changes waiting over it,
    /// for the write path, which holds the locks of the objects it reads: a commit's own
    /// changes are of objects their group holds locked, so none is under those waiting.
    pub(crate) fn view<'a, T>(&'a self, table: Table, base: &'a T) -> View<'a, T> {
        self.view_over(table, base, self.committing.as_deref())
    }

    /// A view of `table` as `base` holds it with `committing`, then the newer changes, over
    /// it.
    fn view_over<'a, T>(
        &'a self,
        table: Table,
        base: &'a T,
        committing: Option<&'a Pending>,
    ) -> View<'a, T> {
        let slot = table_slot(table);
        View {
            newer: Some(&self.newer.tables[slot]),
            committing: committing.map(|c| &c.tables[slot]),
            base,
        }
    }
}

/// A table as read by the store: a database table, with changes not yet in it over it
/// (`newer` over `committing`).
pub(crate) struct View<'a, T> {
    newer: Option<&'a Changes>,
    committing: Option<&'a Changes>,
    base: &'a T,
}

type Row = (Vec<u8>, Vec<u8>);

impl<'a, T: ReadableTable<&'static [u8], &'static [u8]>> View<'a, T> {
    /// The database table alone.
    pub(crate) fn committed(base: &'a T) -> View<'a, T> {
        View {
            newer: None,
            committing: None,
            base,
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        let change = [self.newer, self.committing]
            .into_iter()
            .flatten()
            .find_map(|c| c.get(key));
        if let Some(change) = change {
            return Ok(change.clone());
        }
        Ok(self.base.get(key)?.map(|v| v.value().to_vec()))
    }

    /// At most `limit` rows between `low` and `high`, from the low end, or from the high
    /// end if `rev`.
    pub(crate) fn rows(
        &self,
        low: Bound<&[u8]>,
        high: Bound<&[u8]>,
        rev: bool,
        limit: usize,
    ) -> Result<Vec<Row>, StorageError> {
        let base = self
            .base
            .range::<&[u8]>((low, high))?
            .map(|row| row.map(|(k, v)| (k.value().to_vec(), v.value().to_vec())));
        if let (Some(only), None) | (None, Some(only)) = (self.newer, self.committing) {
            let changes = changes_in(only, low, high);
            return match rev {
                false => merge(base, changes, false, limit),
                true => merge(base.rev(), changes.rev(), true, limit),
            };
        }
        // The newer change of a key over the one being committed.
        let mut over: BTreeMap<&[u8], Option<&[u8]>> = BTreeMap::new();
        for changes in [self.committing, self.newer].into_iter().flatten() {
            over.extend(changes_in(changes, low, high));
        }
        let changes = over.into_iter();
        match rev {
            false => merge(base, changes, false, limit),
            true => merge(base.rev(), changes.rev(), true, limit),
        }
    }

    /// Every row between `low` and `high`, in order.
    pub(crate) fn all_rows(
        &self,
        low: Bound<&[u8]>,
        high: Bound<&[u8]>,
    ) -> Result<Vec<Row>, StorageError> {
        self.rows(low, high, false, usize::MAX)
    }
}

/// The changes of keys between `low` and `high`, in order.
fn changes_in<'c>(
    changes: &'c Changes,
    low: Bound<&[u8]>,
    high: Bound<&[u8]>,
) -> impl DoubleEndedIterator<Item = (&'c [u8], Option<&'c [u8]>)> + use<'c> {
    changes
        .range::<[u8], _>((low, high))
        .map(|(k, v)| (&k[..], v.as_deref()))
}

/// Up to `limit` rows of `base` with `changes` over it, both in the same direction (keys
/// rising, or falling if `rev`): a changed key takes its change's value, or is left out if
/// the change removed it.
fn merge<'c, E>(
    mut base: impl Iterator<Item = Result<Row, E>>,
    mut changes: impl Iterator<Item = (&'c [u8], Option<&'c [u8]>)>,
    rev: bool,
    limit: usize,
) -> Result<Vec<Row>, E> {
    let mut out = Vec::new();
    let mut row = base.next().transpose()?;
    let mut change = changes.next();
    while out.len() < limit {
        let order = match (&row, &change) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((b, _)), Some((c, _))) if rev => c.cmp(&b.as_slice()),
            (Some((b, _)), Some((c, _))) => b.as_slice().cmp(c),
        };
        match change.take() {
            Some((key, value)) if order.is_ge() => {
                if order.is_eq() {
                    row = base.next().transpose()?;
                }
                if let Some(value) = value {
                    out.push((key.to_vec(), value.to_vec()));
                }
                change = changes.next();
            }
            kept => {
                change = kept;
                out.extend(row.take());
                row = base.next().transpose()?;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Keys from a small alphabet, so that changes and rows meet often.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(0u8..4, 0..3)
    }

    fn value() -> impl Strategy<Value = Option<Vec<u8>>> {
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..3))
    }

    fn bound(b: Option<(Vec<u8>, bool)>) -> Bound<Vec<u8>> {
        match b {
            None => Bound::Unbounded,
            Some((k, true)) => Bound::Included(k),
            Some((k, false)) => Bound::Excluded(k),
        }
    }

    fn borrowed(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
        match b {
            Bound::Included(k) => Bound::Included(&k[..]),
            Bound::Excluded(k) => Bound::Excluded(&k[..]),
            Bound::Unbounded => Bound::Unbounded,
        }
    }

    proptest! {
        /// The merged rows are the rows of the table with the changes applied, in the same
        /// range, direction and limit.
        #[test]
        fn merged_rows_are_the_table_with_its_changes_applied(
            rows in proptest::collection::btree_map(key(), proptest::collection::vec(any::<u8>(), 0..3), 0..12),
            changes in proptest::collection::btree_map(key(), value(), 0..12),
            low in proptest::option::of((key(), any::<bool>())),
            high in proptest::option::of((key(), any::<bool>())),
            rev in any::<bool>(),
            limit in 0usize..16,
        ) {
            let (low, high) = (bound(low), bound(high));
            let ordered = match (&low, &high) {
                (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) => {
                    l < h || (l == h && matches!((&low, &high), (Bound::Included(_), Bound::Included(_))))
                }
                _ => true,
            };
            prop_assume!(ordered);
            let range = (borrowed(&low), borrowed(&high));
            let mut applied = rows.clone();
            for (k, v) in &changes {
                match v {
                    Some(v) => applied.insert(k.clone(), v.clone()),
                    None => applied.remove(k),
                };
            }
            let expected: Vec<Row> = match rev {
                false => applied.range::<[u8], _>(range).take(limit).map(|(k, v)| (k.clone(), v.clone())).collect(),
                true => applied.range::<[u8], _>(range).rev().take(limit).map(|(k, v)| (k.clone(), v.clone())).collect(),
            };
            let base = rows.range::<[u8], _>(range).map(|(k, v)| Ok::<_, ()>((k.clone(), v.clone())));
            let over = changes.range::<[u8], _>(range).map(|(k, v)| (&k[..], v.as_deref()));
            let merged = match rev {
                false => merge(base, over, false, limit),
                true => merge(base.rev(), over.rev(), true, limit),
            };
            prop_assert_eq!(merged, Ok(expected));
        }
    }

    #[test]
    fn a_change_to_a_key_keeps_only_its_last_value_and_sums_usage() {
        let mut pending = Pending::default();
        let put = |v: &[u8]| MetaOp::Put {
            table: Table::Objects,
            key: b"k".to_vec(),
            value: v.to_vec(),
        };
        let one = Delta {
            objects: 1,
            stored_bytes: 10,
            blocks: 1,
        };
        let deltas = BTreeMap::from([(PoolId(3), one)]);
        pending.add(vec![put(b"a"), put(b"b")], &deltas, 7, [[1u8; 16]]);
        pending.add(
            vec![MetaOp::Remove {
                table: Table::Extents,
                key: b"e".to_vec(),
            }],
            &deltas,
            8,
            [[2u8; 16]],
        );
        let (table, objects) = pending.tables().next().expect("objects");
        assert_eq!(table, Table::Objects);
        assert_eq!(objects.get(&b"k"[..]), Some(&Some(b"b".to_vec())));
        assert_eq!(pending.seq(), Some(8));
        assert!(pending.touches(&[1u8; 16]) && pending.touches(&[2u8; 16]));
        assert!(!pending.touches(&[3u8; 16]));
        let minus_two = BTreeMap::from([(
            PoolId(3),
            Delta {
                objects: -2,
                stored_bytes: -20,
                blocks: -2,
            },
        )]);
        assert!(pending.usage_with(&minus_two).is_empty());
        assert!(!pending.due());
    }

    #[test]
    fn changes_being_committed_stay_in_view_under_newer_ones_until_they_are_in() {
        use redb::{ReadableDatabase, TableDefinition};
        const ROWS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("rows");
        let db = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .expect("database");
        let txn = db.begin_write().expect("write");
        {
            let mut rows = txn.open_table(ROWS).expect("table");
            rows.insert(&b"a"[..], &b"0"[..]).expect("insert");
            rows.insert(&b"d"[..], &b"0"[..]).expect("insert");
        }
        txn.commit().expect("commit");
        let put = |key: &[u8], value: &[u8]| MetaOp::Put {
            table: Table::Objects,
            key: key.to_vec(),
            value: value.to_vec(),
        };
        let remove = |key: &[u8]| MetaOp::Remove {
            table: Table::Objects,
            key: key.to_vec(),
        };
        let mut waiting = Waiting::default();
        let one = vec![put(b"a", b"1"), put(b"b", b"1")];
        waiting.newer().add(one, &BTreeMap::new(), 1, [[1u8; 16]]);
        let committing = waiting.begin_commit().expect("nothing under way");
        assert_eq!(committing.seq(), Some(1));
        let two = vec![put(b"b", b"2"), put(b"c", b"2"), remove(b"d")];
        waiting.newer().add(two, &BTreeMap::new(), 2, [[2u8; 16]]);
        assert!(waiting.touches(&[1u8; 16]) && waiting.touches(&[2u8; 16]));
        assert!(waiting.begin_commit().is_none(), "one commit at a time");

        let read = db.begin_read().expect("read");
        let rows = read.open_table(ROWS).expect("table");
        let view = waiting.view(Table::Objects, &rows);
        let get = |k: &[u8]| view.get(k).expect("get");
        assert_eq!(
            get(b"a"),
            Some(b"1".to_vec()),
            "being committed, over the table"
        );
        assert_eq!(
            get(b"b"),
            Some(b"2".to_vec()),
            "newer, over being committed"
        );
        assert_eq!(get(b"d"), None, "removed by a newer change");
        let row = |k: &[u8], v: &[u8]| (k.to_vec(), v.to_vec());
        let all = view
            .all_rows(Bound::Unbounded, Bound::Unbounded)
            .expect("rows");
        assert_eq!(all, [row(b"a", b"1"), row(b"b", b"2"), row(b"c", b"2")]);
        let last = view
            .rows(Bound::Unbounded, Bound::Included(&b"d"[..]), true, 1)
            .expect("rows");
        assert_eq!(last, [row(b"c", b"2")]);
        let before_the_commit = waiting
            .view_of_snapshot(Table::Objects, &rows, || Ok::<_, ()>(0))
            .expect("view");
        assert_eq!(
            before_the_commit.get(b"a").expect("get"),
            Some(b"1".to_vec())
        );

        // The commit lands with a change of its own to "a" (a group committed at once): a
        // snapshot that holds it reads that, not what the commit took.
        let txn = db.begin_write().expect("write");
        {
            let mut rows = txn.open_table(ROWS).expect("table");
            rows.insert(&b"a"[..], &b"own"[..]).expect("insert");
            rows.insert(&b"b"[..], &b"1"[..]).expect("insert");
        }
        txn.commit().expect("commit");
        let later = db.begin_read().expect("read");
        let later_rows = later.open_table(ROWS).expect("table");
        let holding = waiting
            .view_of_snapshot(Table::Objects, &later_rows, || Ok::<_, ()>(1))
            .expect("view");
        let all = holding
            .all_rows(Bound::Unbounded, Bound::Unbounded)
            .expect("rows");
        assert_eq!(
            all,
            [row(b"a", b"own"), row(b"b", b"2"), row(b"c", b"2")],
            "the commit's own change, under newer ones"
        );

        waiting.end_commit();
        assert!(!waiting.touches(&[1u8; 16]) && waiting.touches(&[2u8; 16]));
        let next = waiting.begin_commit().expect("the first is in");
        assert_eq!(next.seq(), Some(2));
        waiting.end_commit();
        assert!(waiting.is_empty());
    }

    #[test]
    #[should_panic(expected = "kept after record")]
    fn records_are_kept_in_log_order() {
        let mut pending = Pending::default();
        pending.add(Vec::new(), &BTreeMap::new(), 5, []);
        pending.add(Vec::new(), &BTreeMap::new(), 5, []);
    }
}
