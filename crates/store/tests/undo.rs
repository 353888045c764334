//! Undo records (the store's undo.rs) against a model, in every at-rest mode: transactions
//! that keep a record, rollbacks of the newest, drops of the oldest, and changes that keep
//! none, in random order on a few objects. After every step each object reads as the model
//! says and lists the records the model holds; reopening the store (which rebuilds free
//! space from extents and records) finds the same blocks taken; and at the end, with every
//! object removed, no block is left taken.

mod common;

use coffer_store::{ApplyError, Mode, Store, Transaction};
use common::model::{add_to, apply_model, check, Model, ModelObject, ModelOp};
use common::{kek, mkfs, obj};
use proptest::prelude::*;
use std::collections::BTreeMap;

const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];
const SPAN_BYTES: u64 = 5 * 4096 + 123;

#[derive(Clone, Debug)]
enum Step {
    /// Changes to one object in a transaction that keeps an undo record of them.
    Kept(usize, Vec<ModelOp>),
    /// Changes to one object without a record: its records are dropped.
    Plain(usize, Vec<ModelOp>),
    Rollback(usize),
    /// Drops the object's records up to its n-th oldest (modulo how many it has).
    Drop(usize, usize),
    Reopen,
}

/// Changes to object 0, retargeted by `on`.
fn change() -> impl Strategy<Value = ModelOp> {
    prop_oneof![
        1 => Just(ModelOp::Touch(0)),
        5 => (0..SPAN_BYTES, 0u32..9000, any::<u64>()).prop_map(|(off, len, seed)| ModelOp::Write(0, off, len, seed)),
        1 => (0..SPAN_BYTES, 0..3 * 4096u64).prop_map(|(off, len)| ModelOp::Zero(0, off, len)),
        1 => (0..SPAN_BYTES).prop_map(|size| ModelOp::Truncate(0, size)),
        1 => Just(ModelOp::Remove(0)),
        1 => (0u8..4, any::<u8>()).prop_map(|(k, v)| ModelOp::SetAttr(0, k, v)),
        1 => (0u8..4).prop_map(|k| ModelOp::RemoveAttr(0, k)),
    ]
}

fn on(o: usize, op: &ModelOp) -> ModelOp {
    match *op {
        ModelOp::Touch(_) => ModelOp::Touch(o),
        ModelOp::Write(_, off, len, seed) => ModelOp::Write(o, off, len, seed),
        ModelOp::Zero(_, off, len) => ModelOp::Zero(o, off, len),
        ModelOp::Truncate(_, size) => ModelOp::Truncate(o, size),
        ModelOp::Remove(_) => ModelOp::Remove(o),
        ModelOp::SetAttr(_, k, v) => ModelOp::SetAttr(o, k, v),
        ModelOp::RemoveAttr(_, k) => ModelOp::RemoveAttr(o, k),
        ref other => unreachable!("no omap in undo steps: {other:?}"),
    }
}

fn step() -> impl Strategy<Value = Step> {
    let o = 0..NAMES.len();
    let changes = || prop::collection::vec(change(), 1..4);
    prop_oneof![
        6 => (o.clone(), changes()).prop_map(|(o, ops)| Step::Kept(o, ops.iter().map(|op| on(o, op)).collect())),
        1 => (o.clone(), changes()).prop_map(|(o, ops)| Step::Plain(o, ops.iter().map(|op| on(o, op)).collect())),
        3 => o.clone().prop_map(Step::Rollback),
        2 => (o, 0usize..4).prop_map(|(o, n)| Step::Drop(o, n)),
        1 => Just(Step::Reopen),
    ]
}

/// Each object's records: version and the object as it was before that transaction.
type Records = BTreeMap<usize, Vec<(u64, Option<ModelObject>)>>;

fn run(mode: Mode, steps: &[Step]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = mkfs(dir.path(), mode, 8 << 20);
    let names: Vec<String> = NAMES.iter().map(|n| n.to_string()).collect();
    let mut model = Model::new();
    let mut records = Records::new();
    let mut next_version = 1u64;
    for step in steps {
        match step {
            Step::Kept(o, ops) | Step::Plain(o, ops) => {
                let mut txn = Transaction::new();
                ops.iter().for_each(|op| add_to(&mut txn, op, &names));
                let before = model.get(o).cloned();
                let kept = matches!(step, Step::Kept(..));
                if kept {
                    txn.keep_undo(&obj(1, &names[*o]), next_version);
                }
                store.apply(txn).expect("apply");
                ops.iter().for_each(|op| apply_model(&mut model, op));
                let list = records.entry(*o).or_default();
                match kept {
                    true => list.push((next_version, before)),
                    false => list.clear(),
                }
                next_version += 1;
            }
            Step::Rollback(o) => {
                let mut txn = Transaction::new();
                match records.entry(*o).or_default().pop() {
                    Some((version, before)) => {
                        txn.rollback(&obj(1, &names[*o]), version);
                        store.apply(txn).expect("rollback");
                        match before {
                            Some(before) => model.insert(*o, before),
                            None => model.remove(o),
                        };
                    }
                    None => {
                        txn.rollback(&obj(1, &names[*o]), next_version);
                        let refused = store.apply(txn);
                        assert!(
                            matches!(refused, Err(ApplyError::Invalid { .. })),
                            "{mode}: a rollback without a record: {refused:?}"
                        );
                    }
                }
            }
            Step::Drop(o, n) => {
                let list = records.entry(*o).or_default();
                let upto = match list.is_empty() {
                    true => next_version,
                    false => list[n % list.len()].0,
                };
                let mut txn = Transaction::new();
                txn.drop_undo(&obj(1, &names[*o]), upto);
                store.apply(txn).expect("drop");
                list.retain(|(version, _)| *version > upto);
            }
            Step::Reopen => {
                let taken = store.statfs().allocated_bytes;
                drop(store);
                store = Store::open(dir.path(), &kek(7)).expect("reopen");
                assert_eq!(
                    store.statfs().allocated_bytes,
                    taken,
                    "{mode}: the blocks taken after reopening (extents and undo records)"
                );
            }
        }
        let none_kept = records.values().all(Vec::is_empty);
        check(&store, &model, mode, &names, none_kept);
        for (o, name) in names.iter().enumerate() {
            let want: Vec<u64> = records
                .get(&o)
                .map_or(Vec::new(), |l| l.iter().map(|(v, _)| *v).collect());
            let got = store.undo_versions(&obj(1, name)).expect("undo versions");
            assert_eq!(got, want, "{mode}: undo records of {name}");
        }
    }
    let mut txn = Transaction::new();
    NAMES.iter().for_each(|name| {
        txn.remove(&obj(1, name));
    });
    store.apply(txn).expect("remove all");
    assert_eq!(store.statfs().allocated_bytes, 0, "{mode}: blocks leaked");
    drop(store);
    let store = Store::open(dir.path(), &kek(7)).expect("reopen");
    assert_eq!(store.statfs().allocated_bytes, 0, "{mode}: blocks leaked");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn undo_records_take_objects_back_in_every_mode(steps in prop::collection::vec(step(), 1..30)) {
        for mode in Mode::ALL {
            run(mode, &steps);
        }
    }
}

/// A rollback restores an object's bytes and record as they were, blocks written and
/// blocks kept change places, and dropping the record frees what it kept.
#[test]
fn a_rollback_gives_back_the_object_and_a_drop_frees_what_it_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 8 << 20);
    let shard = obj(1, "shard");
    let old = common::pattern(1, 64 << 10);
    let mut txn = Transaction::new();
    txn.write(&shard, 0, &old).set_attr(&shard, "v", b"1");
    store.apply(txn).expect("write");
    let stat = store.stat(&shard).expect("stat");
    let taken = store.statfs().allocated_bytes;

    let mut txn = Transaction::new();
    txn.write(&shard, 8192, &common::pattern(2, 4096))
        .write(&shard, 64 << 10, &common::pattern(3, 100))
        .set_attr(&shard, "v", b"2")
        .keep_undo(&shard, 2);
    store.apply(txn).expect("write keeping undo");
    assert_eq!(
        store.statfs().allocated_bytes,
        taken + 2 * 4096,
        "the replaced block stays taken beside the two written"
    );

    let mut txn = Transaction::new();
    txn.rollback(&shard, 2);
    store.apply(txn).expect("rollback");
    assert_eq!(store.read(&shard, 0, 1 << 20).expect("read")[..], old[..]);
    assert_eq!(store.attrs(&shard).expect("attrs")["v"], b"1");
    let back = store.stat(&shard).expect("stat");
    assert_eq!(
        (back.size_bytes, back.version, back.mtime_ns),
        (stat.size_bytes, stat.version, stat.mtime_ns)
    );
    assert_eq!(store.statfs().allocated_bytes, taken);
    assert!(store.undo_versions(&shard).expect("versions").is_empty());

    let mut txn = Transaction::new();
    txn.write(&shard, 0, &common::pattern(4, 64 << 10))
        .keep_undo(&shard, 3);
    store.apply(txn).expect("a whole rewrite keeping undo");
    assert_eq!(store.statfs().allocated_bytes, 2 * taken);
    let mut txn = Transaction::new();
    txn.drop_undo(&shard, 3);
    store.apply(txn).expect("drop");
    assert_eq!(store.statfs().allocated_bytes, taken);
    assert_eq!(
        store.read(&shard, 0, 1 << 20).expect("read")[..],
        common::pattern(4, 64 << 10)[..]
    );
}

/// A write of one object in several transactions (a recovery's pieces) is taken back as
/// one: the first keeps a record over the whole object, the others continue it.
#[test]
fn a_continued_record_takes_back_every_transaction_that_continued_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 8 << 20);
    let shard = obj(1, "shard");
    let old = common::pattern(1, 3 * 4096 + 10);
    let mut txn = Transaction::new();
    txn.write(&shard, 0, &old).set_attr(&shard, "v", b"1");
    store.apply(txn).expect("write");
    let taken = store.statfs().allocated_bytes;

    let mut txn = Transaction::new();
    txn.remove(&shard)
        .touch(&shard)
        .write(&shard, 0, &common::pattern(2, 8192))
        .keep_undo(&shard, 4);
    store.apply(txn).expect("the first piece, keeping a record");
    let mut txn = Transaction::new();
    txn.write(&shard, 8192, &common::pattern(3, 8192))
        .set_attr(&shard, "v", b"2")
        .continue_undo(&shard, 4);
    store.apply(txn).expect("the second, continuing it");
    assert_eq!(store.undo_versions(&shard).expect("versions"), vec![4]);
    assert_eq!(store.stat(&shard).expect("stat").size_bytes, 16384);

    let mut txn = Transaction::new();
    txn.rollback(&shard, 4);
    store.apply(txn).expect("rollback");
    assert_eq!(store.read(&shard, 0, 1 << 20).expect("read")[..], old[..]);
    assert_eq!(store.attrs(&shard).expect("attrs")["v"], b"1");
    assert_eq!(store.statfs().allocated_bytes, taken);
}

/// The rules a caller can break are refused with a reason, and change nothing.
#[test]
fn undo_records_refuse_what_they_cannot_take_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 8 << 20);
    let shard = obj(1, "shard");
    let mut txn = Transaction::new();
    txn.write(&shard, 0, b"first").keep_undo(&shard, 5);
    store.apply(txn).expect("write keeping undo");
    let mut txn = Transaction::new();
    txn.write(&shard, 0, b"second").keep_undo(&shard, 7);
    store.apply(txn).expect("a second");

    let refused = |txn: Transaction, why: &str| {
        match store.apply(txn) {
            Err(ApplyError::Invalid { reason }) => assert!(reason.contains(why), "{reason}"),
            other => panic!("expected a refusal mentioning {why:?}, got {other:?}"),
        }
        assert_eq!(store.read(&shard, 0, 100).expect("read")[..], b"second"[..]);
        assert_eq!(store.undo_versions(&shard).expect("versions"), vec![5, 7]);
    };
    let mut txn = Transaction::new();
    txn.write(&shard, 0, b"third").keep_undo(&shard, 6);
    refused(txn, "must be above it");
    let mut txn = Transaction::new();
    txn.rollback(&shard, 5);
    refused(txn, "roll back the newest first");
    let mut txn = Transaction::new();
    txn.rollback(&shard, 9);
    refused(txn, "no undo record of version 9");
    let mut txn = Transaction::new();
    txn.omap_set(&shard, b"k", b"v").keep_undo(&shard, 8);
    refused(txn, "does not cover omap");
    let mut txn = Transaction::new();
    txn.write(&shard, 0, b"x").rollback(&shard, 7);
    refused(txn, "before any other change");
    let mut txn = Transaction::new();
    txn.write(&shard, 0, b"x").continue_undo(&shard, 5);
    refused(txn, "no newest undo record of version 5");
    let mut txn = Transaction::new();
    txn.write(&shard, 3 * 4096, b"far").continue_undo(&shard, 7);
    refused(txn, "only a record kept with the object's remove");
    let mut txn = Transaction::new();
    txn.continue_undo(&shard, 7)
        .drop_undo(&shard, 7)
        .write(&shard, 0, b"x");
    refused(txn, "went in the transaction that continues it");
    let mut txn = Transaction::new();
    txn.write(&shard, 0, b"x")
        .keep_undo(&shard, 8)
        .continue_undo(&shard, 7);
    refused(txn, "not both");
    let indexed = obj(1, "indexed");
    let mut txn = Transaction::new();
    txn.omap_set(&indexed, b"k", b"v");
    store.apply(txn).expect("an object with omap");
    let mut txn = Transaction::new();
    txn.remove(&indexed).keep_undo(&indexed, 1);
    refused(txn, "does not cover omap");
    assert_eq!(
        store.omap_get(&indexed, b"k").expect("omap"),
        Some(b"v".to_vec())
    );
    let mut txn = Transaction::new();
    txn.remove(&indexed);
    store.apply(txn).expect("remove");

    let mut txn = Transaction::new();
    txn.rollback(&shard, 7).rollback(&shard, 5);
    store.apply(txn).expect("two rollbacks, newest first");
    assert!(
        !store.exists(&shard).expect("exists"),
        "created by version 5"
    );
    assert_eq!(store.statfs().allocated_bytes, 0);
}
