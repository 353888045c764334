//! Random transaction sequences against an in-memory model, in every at-rest mode: after
//! every transaction, every object's existence, size, bytes, attributes and omap match the
//! model; the store is closed and reopened midway; and removing everything at the end gives
//! back every allocated block (no leak).

mod common;

use coffer_store::{Mode, Store, Transaction};
use common::model::{add_to, apply_model, check, Model, ModelOp};
use common::{kek, mkfs, obj};
use map::{ObjectRef, PoolId};
use proptest::prelude::*;
use std::collections::BTreeMap;

const NAMES: [&str; 4] = ["alpha", "beta", "gamma", "delta"];
const SPAN_BYTES: u64 = 5 * 4096 + 123;

fn op_strategy() -> impl Strategy<Value = ModelOp> {
    let o = 0..NAMES.len();
    prop_oneof![
        1 => o.clone().prop_map(ModelOp::Touch),
        4 => (o.clone(), 0..SPAN_BYTES, 0u32..9000, any::<u64>()).prop_map(|(o, off, len, seed)| ModelOp::Write(o, off, len, seed)),
        1 => (o.clone(), 0..SPAN_BYTES, 0..3 * 4096u64).prop_map(|(o, off, len)| ModelOp::Zero(o, off, len)),
        1 => (o.clone(), 0..SPAN_BYTES).prop_map(|(o, size)| ModelOp::Truncate(o, size)),
        1 => o.clone().prop_map(ModelOp::Remove),
        1 => (o.clone(), 0u8..4, any::<u8>()).prop_map(|(o, k, v)| ModelOp::SetAttr(o, k, v)),
        1 => (o.clone(), 0u8..4).prop_map(|(o, k)| ModelOp::RemoveAttr(o, k)),
        2 => (o.clone(), 0u8..8, any::<u8>()).prop_map(|(o, k, v)| ModelOp::OmapSet(o, k, v)),
        1 => (o.clone(), 0u8..8).prop_map(|(o, k)| ModelOp::OmapRemove(o, k)),
        1 => o.prop_map(ModelOp::OmapClear),
    ]
}

/// Applies `txns` in order and checks the store against the model after every `every`-th
/// transaction (after the last, and around a reopen halfway, always): between checks, a
/// transaction reads what earlier ones left waiting to be committed (pending.rs).
fn run_sequence(mode: Mode, txns: &[Vec<ModelOp>], every: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = mkfs(dir.path(), mode, 8 << 20);
    let names: Vec<String> = NAMES.iter().map(|n| n.to_string()).collect();
    let mut model = Model::new();
    for (i, ops) in txns.iter().enumerate() {
        let mut txn = Transaction::new();
        ops.iter().for_each(|op| add_to(&mut txn, op, &names));
        store.apply(txn).expect("apply");
        ops.iter().for_each(|op| apply_model(&mut model, op));
        if (i + 1) % every == 0 || i + 1 == txns.len() {
            check(&store, &model, mode, &names, true);
        }
        if i == txns.len() / 2 {
            drop(store);
            store = Store::open(dir.path(), &kek(7)).expect("reopen");
            check(&store, &model, mode, &names, true);
        }
    }
    let mut txn = Transaction::new();
    NAMES.iter().for_each(|name| {
        txn.remove(&obj(1, name));
    });
    store.apply(txn).expect("remove all");
    assert_eq!(store.statfs().allocated_bytes, 0, "{mode}: blocks leaked");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_transactions_match_the_model_in_every_mode(
        txns in prop::collection::vec(prop::collection::vec(op_strategy(), 1..4), 1..30)
    ) {
        for mode in Mode::ALL {
            for every in [1, 7, usize::MAX] {
                run_sequence(mode, &txns, every);
            }
        }
    }
}

#[test]
fn objects_in_other_pools_and_hash_ranges_are_listed_apart_and_paged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 4 << 20);
    let mut txn = Transaction::new();
    let names: Vec<String> = (0..250).map(|i| format!("object-{i}")).collect();
    for name in &names {
        txn.touch(&obj(3, name));
    }
    txn.touch(&obj(4, "elsewhere"));
    store.apply(txn).expect("apply");

    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list(PoolId(3), 0..=u32::MAX, cursor.as_ref(), 100)
            .expect("list");
        assert!(page.entries.len() <= 100);
        seen.extend(page.entries);
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), 250, "every object once, none from pool 4");
    assert!(
        seen.windows(2).all(|w| w[0].hash <= w[1].hash),
        "hash order"
    );
    let low_half: Vec<ObjectRef> = names
        .iter()
        .map(|n| obj(3, n))
        .filter(|r| r.name.hash().0 <= u32::MAX / 2)
        .collect();
    let listed = store
        .list(PoolId(3), 0..=u32::MAX / 2, None, 1000)
        .expect("list half");
    assert_eq!(
        listed.entries.len(),
        low_half.len(),
        "a hash range lists exactly its objects"
    );
}

/// A filtered listing (a placement group's objects: a hash's low bits) pages through the
/// objects it keeps, passing over the others between and after them, with each object's
/// attributes.
#[test]
fn a_filtered_listing_pages_through_the_objects_it_keeps_with_their_attributes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 4 << 20);
    let mut txn = Transaction::new();
    for i in 0..300 {
        let o = obj(3, &format!("object-{i}"));
        txn.touch(&o).set_attr(&o, "n", format!("{i}").as_bytes());
    }
    store.apply(txn).expect("apply");
    let kept = |hash: map::ObjectHash| hash.0 % 8 == 5;
    let expected: BTreeMap<String, Vec<u8>> = (0..300)
        .map(|i| (format!("object-{i}"), format!("{i}").into_bytes()))
        .filter(|(name, _)| kept(obj(3, name).name.hash()))
        .collect();
    assert!(expected.len() > 20, "enough objects in the filter to page");

    let mut seen = BTreeMap::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = store
            .list_where(PoolId(3), 0..=u32::MAX, kept, cursor.as_ref(), 7)
            .expect("list");
        assert!(page.entries.len() <= 7);
        pages += 1;
        for entry in page.entries {
            assert!(kept(entry.hash), "{} is outside the filter", entry.name);
            let value = entry.attrs.get("n").cloned().expect("attribute listed");
            assert!(seen
                .insert(entry.name.as_str().to_string(), value)
                .is_none());
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, expected, "every kept object once, with its attribute");
    assert_eq!(
        pages,
        expected.len().div_ceil(7),
        "full pages until the last"
    );
}

/// Pages in (hash, name) order after a name: every kept object once, in that order, whatever
/// the page size, also where two names share a hash (their rows are in id order, which
/// differs from store to store) and a page ends between them.
#[test]
fn pages_after_a_name_walk_the_kept_objects_in_hash_then_name_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 4 << 20);
    let mut seen_hashes = std::collections::HashMap::new();
    let twins = (0u32..)
        .map(|i| format!("twin-{i}"))
        .find_map(|name| {
            let hash = obj(3, &name).name.hash();
            seen_hashes
                .insert(hash, name.clone())
                .map(|earlier| (earlier, name))
        })
        .expect("two names with one 32-bit hash");
    let shared = obj(3, &twins.0).name.hash().0;
    let kept = move |hash: map::ObjectHash| hash.0 % 4 == shared % 4;
    let mut txn = Transaction::new();
    let mut names: Vec<String> = (0..200).map(|i| format!("object-{i}")).collect();
    names.extend([twins.0.clone(), twins.1.clone()]);
    for name in &names {
        let o = obj(3, name);
        txn.touch(&o).set_attr(&o, "n", name.as_bytes());
    }
    txn.touch(&obj(4, &twins.0));
    store.apply(txn).expect("apply");
    let mut expected: Vec<(map::ObjectHash, String)> = names
        .iter()
        .map(|name| (obj(3, name).name.hash(), name.clone()))
        .filter(|(hash, _)| kept(*hash))
        .collect();
    expected.sort();

    for limit in [1, 2, 7, 1000] {
        let mut listed = Vec::new();
        let mut after: Option<map::ObjectName> = None;
        loop {
            let (page, more) = store
                .list_after(PoolId(3), kept, after.as_ref(), limit)
                .expect("list");
            assert!(page.len() <= limit && (!more || !page.is_empty()));
            for entry in &page {
                assert_eq!(
                    entry.attrs.get("n").map(Vec::as_slice),
                    Some(entry.name.as_str().as_bytes())
                );
                listed.push((entry.hash, entry.name.as_str().to_string()));
            }
            after = page.last().map(|entry| entry.name.clone());
            if !more {
                break;
            }
        }
        assert_eq!(listed, expected, "pages of {limit}");
    }
}

/// A transaction that writes a block and then changes part of it reads its own first write
/// back (the store leaves small writes to the group commit, so the first is not yet on the
/// device when the second merges into it).
#[test]
fn a_transaction_reads_back_its_own_writes_to_merge_into_them() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = mkfs(dir.path(), mode, 1 << 20);
        let o = obj(1, "merged");
        let mut expected = common::pattern(1, 4096);
        let mut txn = Transaction::new();
        txn.write(&o, 0, &expected)
            .write(&o, 100, &common::pattern(2, 10))
            .zero(&o, 4000, 50)
            .write(&o, 5000, &common::pattern(3, 20))
            .truncate(&o, 5010);
        store.apply(txn).expect("apply");
        expected[100..110].copy_from_slice(&common::pattern(2, 10));
        expected[4000..4050].fill(0);
        expected.resize(5000, 0);
        expected.extend_from_slice(&common::pattern(3, 10));
        assert!(
            store.read(&o, 0, 8192).expect("read")[..] == expected[..],
            "{mode}: the merged block differs"
        );
    }
}
