//! Each pool's usage: kept per pool, counted once for a store made before it was kept, and
//! counted again when its row is damaged. (The property and crash tests compare it with the
//! model and with a count after every transaction and every crash.)

mod common;

use coffer_store::{Mode, ReadError, Store, Transaction, FORMAT_VERSION};
use common::{kek, mkfs, obj, pattern};
use map::cluster::PoolUsage;
use map::PoolId;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;

const USAGE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("pool_usage");
const SUPERBLOCK: TableDefinition<&str, &[u8]> = TableDefinition::new("superblock");

/// Two pools: three objects in pool 1 (one empty, one of a block and a half, one with a
/// hole), one in pool 2.
fn two_pools(store: &Store) {
    let mut txn = Transaction::new();
    txn.touch(&obj(1, "empty"))
        .write(&obj(1, "half"), 0, &pattern(1, 6144))
        .write(&obj(1, "holed"), 8 * 4096, &pattern(2, 4096))
        .write(&obj(2, "other"), 0, &pattern(3, 3 * 4096));
    store.apply(txn).expect("apply");
}

fn expected() -> Vec<(PoolId, PoolUsage)> {
    vec![
        (
            PoolId(1),
            PoolUsage {
                objects: 3,
                stored_bytes: 6144 + 9 * 4096,
                allocated_bytes: 3 * 4096,
            },
        ),
        (
            PoolId(2),
            PoolUsage {
                objects: 1,
                stored_bytes: 3 * 4096,
                allocated_bytes: 3 * 4096,
            },
        ),
    ]
}

fn edit_meta(dir: &Path, edit: impl FnOnce(&redb::WriteTransaction)) {
    let db = redb::Database::open(dir.join("meta.redb")).expect("open metadata");
    let txn = db.begin_write().expect("write txn");
    edit(&txn);
    txn.commit().expect("commit");
}

#[test]
fn usage_is_kept_per_pool_and_falls_as_objects_shrink_and_go() {
    for mode in [Mode::None, Mode::Gcm, Mode::Xts4096] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = mkfs(dir.path(), mode, 1 << 20);
        two_pools(&store);
        assert_eq!(store.pool_usage().expect("usage"), expected(), "{mode}");
        let mut txn = Transaction::new();
        txn.truncate(&obj(1, "half"), 100)
            .remove(&obj(1, "holed"))
            .remove(&obj(2, "other"));
        store.apply(txn).expect("apply");
        let left = PoolUsage {
            objects: 2,
            stored_bytes: 100,
            allocated_bytes: 4096,
        };
        assert_eq!(
            store.pool_usage().expect("usage"),
            vec![(PoolId(1), left)],
            "{mode}: a pool with nothing left has no row"
        );
    }
}

#[test]
fn a_store_made_before_usage_was_kept_is_counted_when_opened() {
    let dir = tempfile::tempdir().expect("tempdir");
    two_pools(&mkfs(dir.path(), Mode::Gcm, 1 << 20));
    edit_meta(dir.path(), |txn| {
        txn.delete_table(USAGE).expect("drop usage");
        txn.open_table(SUPERBLOCK)
            .expect("superblock")
            .insert("format", &1u32.to_be_bytes()[..])
            .expect("format 1");
    });
    let store = Store::open(dir.path(), &kek(7)).expect("open a format 1 store");
    assert_eq!(store.pool_usage().expect("usage"), expected());
    drop(store);
    let db = redb::Database::open(dir.path().join("meta.redb")).expect("open metadata");
    let format = db
        .begin_read()
        .expect("read")
        .open_table(SUPERBLOCK)
        .expect("superblock")
        .get("format")
        .expect("get")
        .map(|v| v.value().to_vec());
    assert_eq!(format, Some(FORMAT_VERSION.to_be_bytes().to_vec()));
}

#[test]
fn a_damaged_usage_row_is_reported_and_counted_again_by_the_next_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    two_pools(&mkfs(dir.path(), Mode::Gcm, 1 << 20));
    edit_meta(dir.path(), |txn| {
        let mut rows = txn.open_table(USAGE).expect("usage");
        let key = PoolId(1).0.to_be_bytes();
        let mut value = rows
            .get(&key[..])
            .expect("get")
            .expect("pool 1's row")
            .value()
            .to_vec();
        let at = value.len() / 2;
        value[at] ^= 0x01;
        rows.insert(&key[..], &value[..]).expect("write");
    });
    let store = Store::open(dir.path(), &kek(7)).expect("open");
    assert!(
        matches!(store.pool_usage(), Err(ReadError::MetadataIntegrity { .. })),
        "an altered usage row must be detected"
    );
    let read = store
        .read(&obj(1, "half"), 0, 6144)
        .expect("the data is whole");
    assert!(read[..] == pattern(1, 6144)[..], "the data is whole");
    let mut txn = Transaction::new();
    txn.write(&obj(1, "new"), 0, &pattern(4, 4096));
    store.apply(txn).expect("a write to the pool still commits");
    let mut want = expected();
    want[0].1.objects += 1;
    want[0].1.stored_bytes += 4096;
    want[0].1.allocated_bytes += 4096;
    assert_eq!(store.pool_usage().expect("counted again"), want);
}

/// The first commit after an open takes a fresh nonce reservation, a database write of its
/// own. A commit whose only sealed value is a usage row (a removal from a pool that keeps
/// other objects) must take it before its own write transaction begins, not wait on itself.
#[test]
fn a_removal_as_the_first_commit_after_opening_does_not_wait_on_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    two_pools(&mkfs(dir.path(), Mode::Gcm, 1 << 20));
    let store = Store::open(dir.path(), &kek(7)).expect("open");
    let (done, applied) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut txn = Transaction::new();
        txn.remove(&obj(1, "holed"));
        let result = store.apply(txn).map(|()| store.pool_usage());
        let _ = done.send(result);
    });
    let usage = applied
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the removal committed within 30 s")
        .expect("apply")
        .expect("usage");
    let mut want = expected();
    want[0].1 = PoolUsage {
        objects: 2,
        stored_bytes: 6144,
        allocated_bytes: 2 * 4096,
    };
    assert_eq!(usage, want);
}
