//! An in-memory model of the store's object operations, shared by the property test and
//! the crash test: the same operations go to the store and to the model, and the two are
//! compared object by object.

use super::{obj, pattern};
use coffer_store::{Mode, Store, Transaction};
use map::PoolId;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
pub enum ModelOp {
    Touch(usize),
    Write(usize, u64, u32, u64),
    Zero(usize, u64, u64),
    Truncate(usize, u64),
    Remove(usize),
    SetAttr(usize, u8, u8),
    RemoveAttr(usize, u8),
    OmapSet(usize, u8, u8),
    OmapRemove(usize, u8),
    OmapClear(usize),
    /// The transaction keeps an undo record of the object under this version.
    KeepUndo(usize, u64),
    /// Drops the object's undo records up to this version.
    DropUndo(usize, u64),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelObject {
    pub data: Vec<u8>,
    pub attrs: BTreeMap<String, Vec<u8>>,
    pub omap: BTreeMap<Vec<u8>, Vec<u8>>,
}

pub type Model = BTreeMap<usize, ModelObject>;

pub fn apply_model(model: &mut Model, op: &ModelOp) {
    match *op {
        ModelOp::Touch(o) => {
            model.entry(o).or_default();
        }
        ModelOp::Write(o, off, len, seed) => {
            let data = pattern(seed, len as usize);
            let m = model.entry(o).or_default();
            let end = off as usize + data.len();
            if m.data.len() < end {
                m.data.resize(end, 0);
            }
            m.data[off as usize..end].copy_from_slice(&data);
        }
        ModelOp::Zero(o, off, len) => {
            let m = model.entry(o).or_default();
            let end = (off + len) as usize;
            if m.data.len() < end {
                m.data.resize(end, 0);
            }
            m.data[off as usize..end].fill(0);
        }
        ModelOp::Truncate(o, size) => model.entry(o).or_default().data.resize(size as usize, 0),
        ModelOp::Remove(o) => {
            model.remove(&o);
        }
        ModelOp::SetAttr(o, k, v) => {
            model
                .entry(o)
                .or_default()
                .attrs
                .insert(format!("a{k}"), vec![v; k as usize + 1]);
        }
        ModelOp::RemoveAttr(o, k) => {
            if let Some(m) = model.get_mut(&o) {
                m.attrs.remove(&format!("a{k}"));
            }
        }
        ModelOp::OmapSet(o, k, v) => {
            model
                .entry(o)
                .or_default()
                .omap
                .insert(vec![b'k', k], vec![v; 3]);
        }
        ModelOp::OmapRemove(o, k) => {
            if let Some(m) = model.get_mut(&o) {
                m.omap.remove(&vec![b'k', k]);
            }
        }
        ModelOp::OmapClear(o) => {
            if let Some(m) = model.get_mut(&o) {
                m.omap.clear();
            }
        }
        ModelOp::KeepUndo(..) | ModelOp::DropUndo(..) => {}
    }
}

/// Each object's undo record versions, oldest first.
pub type UndoModel = BTreeMap<usize, Vec<u64>>;

/// The undo records after one transaction of `ops`: records kept and dropped as asked, and
/// every record of an object it changes without keeping one dropped.
pub fn apply_undo_model(undo: &mut UndoModel, ops: &[ModelOp]) {
    let keeps = |o: usize| {
        ops.iter()
            .any(|op| matches!(op, ModelOp::KeepUndo(k, _) if *k == o))
    };
    for op in ops {
        match *op {
            ModelOp::KeepUndo(..) => {}
            ModelOp::DropUndo(o, version) => undo.entry(o).or_default().retain(|v| *v > version),
            ref change => {
                let o = changed_object(change);
                if !keeps(o) {
                    undo.entry(o).or_default().clear();
                }
            }
        }
    }
    for op in ops {
        if let ModelOp::KeepUndo(o, version) = *op {
            undo.entry(o).or_default().push(version);
        }
    }
}

/// The object an operation names.
pub fn changed_object(op: &ModelOp) -> usize {
    match *op {
        ModelOp::Touch(o)
        | ModelOp::Write(o, ..)
        | ModelOp::Zero(o, ..)
        | ModelOp::Truncate(o, _)
        | ModelOp::Remove(o)
        | ModelOp::SetAttr(o, ..)
        | ModelOp::RemoveAttr(o, _)
        | ModelOp::OmapSet(o, ..)
        | ModelOp::OmapRemove(o, _)
        | ModelOp::OmapClear(o)
        | ModelOp::KeepUndo(o, _)
        | ModelOp::DropUndo(o, _) => o,
    }
}

/// Compares every named object's undo records with the model.
pub fn check_undo(store: &Store, undo: &UndoModel, mode: Mode, names: &[String]) {
    for (o, name) in names.iter().enumerate() {
        let want = undo.get(&o).cloned().unwrap_or_default();
        let got = store.undo_versions(&obj(1, name)).expect("undo versions");
        assert_eq!(got, want, "{mode}: undo records of {name}");
    }
}

pub fn add_to(txn: &mut Transaction, op: &ModelOp, names: &[String]) {
    let r = |o: usize| obj(1, &names[o]);
    match *op {
        ModelOp::Touch(o) => txn.touch(&r(o)),
        ModelOp::Write(o, off, len, seed) => txn.write(&r(o), off, &pattern(seed, len as usize)),
        ModelOp::Zero(o, off, len) => txn.zero(&r(o), off, len),
        ModelOp::Truncate(o, size) => txn.truncate(&r(o), size),
        ModelOp::Remove(o) => txn.remove(&r(o)),
        ModelOp::SetAttr(o, k, v) => {
            txn.set_attr(&r(o), &format!("a{k}"), &vec![v; k as usize + 1])
        }
        ModelOp::RemoveAttr(o, k) => txn.remove_attr(&r(o), &format!("a{k}")),
        ModelOp::OmapSet(o, k, v) => txn.omap_set(&r(o), &[b'k', k], &[v; 3]),
        ModelOp::OmapRemove(o, k) => txn.omap_remove(&r(o), &[b'k', k]),
        ModelOp::OmapClear(o) => txn.omap_clear(&r(o)),
        ModelOp::KeepUndo(o, version) => txn.keep_undo(&r(o), version),
        ModelOp::DropUndo(o, version) => txn.drop_undo(&r(o), version),
    };
}

/// Compares every named object with the model; with `whole_pool`, also the pool listing.
pub fn check(store: &Store, model: &Model, mode: Mode, names: &[String], whole_pool: bool) {
    for (o, name) in names.iter().enumerate() {
        let r = obj(1, name);
        match model.get(&o) {
            None => assert!(
                !store.exists(&r).expect("exists"),
                "{mode}: {name} should not exist"
            ),
            Some(m) => {
                let stat = store.stat(&r).expect("stat");
                assert_eq!(
                    stat.size_bytes,
                    m.data.len() as u64,
                    "{mode}: size of {name}"
                );
                let data = store.read(&r, 0, stat.size_bytes).expect("read");
                assert!(data[..] == m.data[..], "{mode}: bytes of {name} differ");
                let mid = m.data.len() as u64 / 3;
                let part = store.read(&r, mid, 5000).expect("read part");
                let want = &m.data[mid as usize..(mid as usize + 5000).min(m.data.len())];
                assert!(part[..] == *want, "{mode}: bytes of {name} from {mid}");
                assert_eq!(
                    store.attrs(&r).expect("attrs"),
                    m.attrs,
                    "{mode}: attrs of {name}"
                );
                let omap: BTreeMap<_, _> = store
                    .omap_list(&r, None, 1000)
                    .expect("omap")
                    .into_iter()
                    .collect();
                assert_eq!(omap, m.omap, "{mode}: omap of {name}");
            }
        }
    }
    if !whole_pool {
        return;
    }
    let listed: BTreeSet<String> = store
        .list(PoolId(1), 0..=u32::MAX, None, 1000)
        .expect("list")
        .entries
        .into_iter()
        .map(|e| e.name.to_string())
        .collect();
    let expected: BTreeSet<String> = model.keys().map(|o| names[*o].clone()).collect();
    assert_eq!(listed, expected, "{mode}: listing");
    check_usage(store, mode);
    let usage = store.pool_usage().expect("pool usage");
    let objects = model.len() as u64;
    let stored_bytes: u64 = model.values().map(|m| m.data.len() as u64).sum();
    let kept = usage
        .iter()
        .find(|(pool, _)| *pool == PoolId(1))
        .map(|(_, u)| *u);
    assert_eq!(
        kept.map(|u| (u.objects, u.stored_bytes)),
        (objects > 0).then_some((objects, stored_bytes)),
        "{mode}: pool usage against the model"
    );
    assert_eq!(
        kept.map_or(0, |u| u.allocated_bytes),
        store.statfs().allocated_bytes,
        "{mode}: the pool's blocks are the store's"
    );
}

/// The usage the store keeps equals a count from its records.
pub fn check_usage(store: &Store, mode: Mode) {
    assert_eq!(
        store.pool_usage().expect("pool usage"),
        store.count_pool_usage().expect("count"),
        "{mode}: pool usage kept against counted"
    );
}
