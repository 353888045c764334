//! What was corrupted must be detected: flipped, swapped or moved bytes in the data file
//! and altered or moved metadata rows fail with errors that name what broke, never with
//! altered data. And the contrast: in `none` the same flip goes unnoticed, which proves the
//! test really reaches the bytes it corrupts.

mod common;

use coffer_store::{Mode, OpenError, ReadError, Store, Transaction, Via};
use common::{kek, mkfs, obj, pattern};
use map::PoolId;
use rand::{Rng, SeedableRng};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;

const TABLES: [&str; 4] = ["objects", "extents", "omap", "omap_paged"];

/// The indexes of data-file blocks that hold anything (unused space stays zero).
fn used_blocks(dir: &Path) -> Vec<usize> {
    let data = std::fs::read(dir.join("data")).expect("read data file");
    data.chunks(4096)
        .enumerate()
        .filter(|(_, b)| b.iter().any(|x| *x != 0))
        .map(|(i, _)| i)
        .collect()
}

fn edit_data(dir: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
    let path = dir.join("data");
    let mut data = std::fs::read(&path).expect("read data file");
    edit(&mut data);
    std::fs::write(&path, data).expect("write data file");
}

/// One object of three blocks (and nothing else) in a fresh store.
fn one_object_store(dir: &Path, mode: Mode) -> Vec<u8> {
    let store = mkfs(dir, mode, 1 << 20);
    let bytes = pattern(1, 3 * 4096);
    let mut txn = Transaction::new();
    txn.write(&obj(1, "victim"), 0, &bytes)
        .omap_set(&obj(1, "victim"), b"k", b"v")
        .set_attr(&obj(1, "victim"), "a", b"1")
        .omap_set(&pg_log(), b"k", b"v");
    store.apply(txn).expect("write");
    bytes
}

/// An object of an OSD's PG metadata pool, whose omap keeps its keys in its own table.
fn pg_log() -> map::ObjectRef {
    obj(PoolId::PG_META_BIT | 1, "pg.0")
}

#[test]
fn gcm_flipped_data_byte_fails_the_read_naming_object_and_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = one_object_store(dir.path(), Mode::Gcm);
    let blocks = used_blocks(dir.path());
    assert_eq!(blocks.len(), 3, "the object's three sealed blocks");
    edit_data(dir.path(), |d| d[blocks[1] * 4096 + 100] ^= 0x01);
    let store = Store::open(dir.path(), &kek(7)).expect("open");
    match store.read(&obj(1, "victim"), 0, 3 * 4096) {
        Err(ReadError::Integrity {
            object,
            offset_bytes,
        }) => {
            assert_eq!(object, "1/victim");
            assert_eq!(offset_bytes, 4096, "the second chunk was flipped");
        }
        other => panic!("expected an integrity error, got {other:?}"),
    }
    let first = store
        .read(&obj(1, "victim"), 0, 4096)
        .expect("an untouched chunk still reads");
    assert_eq!(&first[..], &bytes[..4096]);
}

/// A block an undo record keeps is checked when its extent comes back: flipped on disk while
/// only the record referred to it, it is not read while the object holds newer bytes, and
/// once the write is rolled back the read fails naming the chunk. A rollback reads nothing,
/// so it cannot tell; the next read does.
#[test]
fn gcm_a_kept_block_flipped_on_disk_is_detected_once_rolled_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = one_object_store(dir.path(), Mode::Gcm);
    let old = used_blocks(dir.path());
    assert_eq!(old.len(), 3, "the object's three sealed blocks");
    let victim = obj(1, "victim");
    let newer = pattern(2, 4096);
    {
        let store = Store::open(dir.path(), &kek(7)).expect("open");
        let mut txn = Transaction::new();
        txn.write(&victim, 4096, &newer).keep_undo(&victim, 1);
        store.apply(txn).expect("a write keeping undo");
    }
    assert_eq!(
        used_blocks(dir.path()).len(),
        4,
        "the replaced block stays beside the new"
    );
    edit_data(dir.path(), |d| d[old[1] * 4096 + 100] ^= 0x01);
    let store = Store::open(dir.path(), &kek(7)).expect("open");
    let read = store
        .read(&victim, 0, 3 * 4096)
        .expect("the newer bytes read");
    assert_eq!(&read[4096..8192], &newer[..]);
    let mut txn = Transaction::new();
    txn.rollback(&victim, 1);
    store.apply(txn).expect("rollback");
    match store.read(&victim, 0, 3 * 4096) {
        Err(ReadError::Integrity {
            object,
            offset_bytes,
        }) => assert_eq!((object.as_str(), offset_bytes), ("1/victim", 4096)),
        other => panic!("expected an integrity error, got {other:?}"),
    }
    let first = store.read(&victim, 0, 4096).expect("an untouched chunk");
    assert_eq!(&first[..], &bytes[..4096]);
}

/// A read through the cache serves the blocks as they were read; a read of the device only
/// (scrub's) sees what the disk holds now, keeps nothing, and a failed check is not kept.
#[test]
fn the_cache_serves_blocks_as_read_and_device_reads_see_the_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = one_object_store(dir.path(), Mode::Gcm);
    let blocks = used_blocks(dir.path());
    let store = Store::open(dir.path(), &kek(7)).expect("open");
    let victim = obj(1, "victim");
    let first = store.read(&victim, 0, 3 * 4096).expect("read");
    assert_eq!(&first[..], &bytes[..]);
    edit_data(dir.path(), |d| d[blocks[1] * 4096 + 100] ^= 0x01);
    let before = store.cache_stats();
    let cached = store
        .read(&victim, 0, 3 * 4096)
        .expect("served by the cache");
    assert_eq!(&cached[..], &bytes[..]);
    assert_eq!(store.cache_stats().hit_bytes - before.hit_bytes, 3 * 4096);
    match store.read_via(&victim, 0, 3 * 4096, Via::Device) {
        Err(ReadError::Integrity { offset_bytes, .. }) => assert_eq!(offset_bytes, 4096),
        other => panic!("a read of the device must find the flip, got {other:?}"),
    }
    let after = store.cache_stats();
    assert_eq!(
        (after.hit_bytes, after.miss_bytes),
        (before.hit_bytes + 3 * 4096, before.miss_bytes),
        "a device read neither uses nor counts the cache"
    );
    drop(store);
    let mut store = Store::open(dir.path(), &kek(7)).expect("reopen");
    store.set_cache_limit(1 << 20);
    for _ in 0..2 {
        assert!(
            matches!(
                store.read(&victim, 4096, 4096),
                Err(ReadError::Integrity { .. })
            ),
            "the flip is found"
        );
        let stats = store.cache_stats();
        assert_eq!(
            (stats.hit_bytes, stats.held_bytes),
            (0, 0),
            "a block that failed its check is not kept"
        );
    }
}

#[test]
fn gcm_chunks_swapped_on_disk_are_detected() {
    let dir = tempfile::tempdir().expect("tempdir");
    one_object_store(dir.path(), Mode::Gcm);
    let blocks = used_blocks(dir.path());
    edit_data(dir.path(), |d| {
        let (a, b) = (blocks[0] * 4096, blocks[2] * 4096);
        let first: Vec<u8> = d[a..a + 4096].to_vec();
        d.copy_within(b..b + 4096, a);
        d[b..b + 4096].copy_from_slice(&first);
    });
    let store = Store::open(dir.path(), &kek(7)).expect("open");
    assert!(matches!(
        store.read(&obj(1, "victim"), 0, 4096),
        Err(ReadError::Integrity {
            offset_bytes: 0,
            ..
        })
    ));
    assert!(matches!(
        store.read(&obj(1, "victim"), 8192, 4096),
        Err(ReadError::Integrity {
            offset_bytes: 8192,
            ..
        })
    ));
}

#[test]
fn without_integrity_modes_a_flip_goes_unnoticed_which_shows_the_test_reaches_the_disk() {
    for mode in [Mode::None, Mode::Xts4096] {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes = one_object_store(dir.path(), mode);
        let blocks = used_blocks(dir.path());
        edit_data(dir.path(), |d| d[blocks[0] * 4096 + 5] ^= 0x01);
        let store = Store::open(dir.path(), &kek(7)).expect("open");
        let read = store
            .read(&obj(1, "victim"), 0, 4096)
            .expect("no integrity check in this mode");
        assert_ne!(
            &read[..],
            &bytes[..4096],
            "{mode}: the flip changed what was read"
        );
    }
}

fn table_rows(dir: &Path, table: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let db = redb::Database::open(dir.join("meta.redb")).expect("open metadata");
    let def: TableDefinition<&[u8], &[u8]> = TableDefinition::new(table);
    let txn = db.begin_read().expect("read txn");
    let t = txn.open_table(def).expect("table");
    t.iter()
        .expect("iter")
        .map(|r| {
            r.map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
                .expect("row")
        })
        .collect()
}

/// Changes the value of the `nth` row of `table`.
fn edit_row(dir: &Path, table: &str, nth: usize, edit: impl FnOnce(&mut Vec<u8>)) {
    let (key, mut value) = table_rows(dir, table).swap_remove(nth);
    let db = redb::Database::open(dir.join("meta.redb")).expect("open metadata");
    let def: TableDefinition<&[u8], &[u8]> = TableDefinition::new(table);
    let txn = db.begin_write().expect("write txn");
    edit(&mut value);
    txn.open_table(def)
        .expect("table")
        .insert(&key[..], &value[..])
        .expect("write row");
    txn.commit().expect("commit");
}

#[test]
fn altered_metadata_values_are_detected_in_every_encrypting_mode() {
    for mode in [Mode::Gcm, Mode::Xts512, Mode::Xts4096] {
        for table in TABLES {
            let rows = {
                let dir = tempfile::tempdir().expect("tempdir");
                one_object_store(dir.path(), mode);
                table_rows(dir.path(), table).len()
            };
            assert!(rows > 0, "{table} has rows to alter");
            for nth in 0..rows {
                let dir = tempfile::tempdir().expect("tempdir");
                one_object_store(dir.path(), mode);
                edit_row(dir.path(), table, nth, |v| {
                    let at = v.len() / 2;
                    v[at] ^= 0x80;
                });
                let victim = obj(1, "victim");
                let outcome = Store::open(dir.path(), &kek(7)).map(|store| {
                    [
                        store.read(&victim, 0, 4096).map(|_| ()),
                        store.omap_get(&victim, b"k").map(|_| ()),
                        store.omap_list(&victim, None, 10).map(|_| ()),
                        store.omap_get(&pg_log(), b"k").map(|_| ()),
                    ]
                });
                let detected = match &outcome {
                    Err(OpenError::Corrupt { .. }) => true,
                    Err(_) => false,
                    Ok(reads) => reads
                        .iter()
                        .any(|r| matches!(r, Err(ReadError::MetadataIntegrity { .. }))),
                };
                assert!(
                    detected,
                    "{mode}: an altered {table} value (row {nth}) was not detected: {outcome:?}"
                );
            }
        }
    }
}

#[test]
fn metadata_rows_swapped_between_objects_are_detected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 1 << 20);
    let mut txn = Transaction::new();
    txn.write(&obj(1, "a"), 0, b"first object")
        .write(&obj(1, "b"), 0, b"second object");
    store.apply(txn).expect("write");
    drop(store);
    let db = redb::Database::open(dir.path().join("meta.redb")).expect("open metadata");
    let def: TableDefinition<&[u8], &[u8]> = TableDefinition::new("objects");
    let txn = db.begin_write().expect("write txn");
    {
        let mut t = txn.open_table(def).expect("table");
        let rows: Vec<(Vec<u8>, Vec<u8>)> = t
            .iter()
            .expect("iter")
            .map(|r| {
                r.map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
                    .expect("row")
            })
            .collect();
        assert_eq!(rows.len(), 2);
        t.insert(&rows[0].0[..], &rows[1].1[..]).expect("swap");
        t.insert(&rows[1].0[..], &rows[0].1[..]).expect("swap");
    }
    txn.commit().expect("commit");
    drop(db);
    let store = Store::open(dir.path(), &kek(7)).expect("open");
    for name in ["a", "b"] {
        assert!(
            matches!(
                store.stat(&obj(1, name)),
                Err(ReadError::MetadataIntegrity { .. })
            ),
            "{name}"
        );
    }
    // Listings open the records they return, and so refuse the swapped ones.
    let altered =
        |result: Result<(), ReadError>| matches!(result, Err(ReadError::MetadataIntegrity { .. }));
    assert!(altered(
        store.list(PoolId(1), 0..=u32::MAX, None, 10).map(|_| ())
    ));
    assert!(altered(
        store.list_after(PoolId(1), |_| true, None, 10).map(|_| ())
    ));
    // Rows a filter passes over are not opened: a listing of none of them succeeds.
    let none = store
        .list_where(PoolId(1), 0..=u32::MAX, |_| false, None, 10)
        .expect("a listing that opens no record");
    assert!(none.entries.is_empty() && none.next.is_none());
    let (page, more) = store
        .list_after(PoolId(1), |_| false, None, 10)
        .expect("a listing that opens no record");
    assert!(page.is_empty() && !more);
}

/// With `gcm`, a flipped bit anywhere in the metadata file either stops the open or the
/// read, or changes nothing that is read. In `none` (nothing authenticated) a flip may
/// change what is read, but it must never crash the store.
#[test]
fn random_flips_in_the_metadata_file_never_yield_altered_data_or_a_crash() {
    for mode in [Mode::Gcm, Mode::None] {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes = one_object_store(dir.path(), mode);
        let meta = std::fs::read(dir.path().join("meta.redb")).expect("read metadata");
        let data = std::fs::read(dir.path().join("data")).expect("read data");
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for _ in 0..150 {
            let copy = tempfile::tempdir().expect("tempdir");
            let mut flipped = meta.clone();
            let at = rng.random_range(0..flipped.len());
            flipped[at] ^= 1 << rng.random_range(0..8);
            std::fs::write(copy.path().join("meta.redb"), &flipped).expect("write copy");
            std::fs::write(copy.path().join("data"), &data).expect("write copy");
            let outcome = std::panic::catch_unwind(|| match Store::open(copy.path(), &kek(7)) {
                Err(_) => None,
                Ok(store) => Some(
                    store
                        .read(&obj(1, "victim"), 0, 3 * 4096)
                        .map(|b| b.to_vec()),
                ),
            });
            match outcome {
                Ok(Some(Ok(read))) if mode == Mode::Gcm => {
                    assert_eq!(read, bytes, "seed {seed}: a flip at byte {at} of the metadata file altered the data read");
                }
                Ok(_) => {}
                Err(_) => panic!("seed {seed} {mode}: a flip at byte {at} of the metadata file crashed the store"),
            }
        }
    }
}

#[test]
fn a_wrong_key_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    one_object_store(dir.path(), Mode::Gcm);
    let before = (
        std::fs::read(dir.path().join("meta.redb")).expect("meta"),
        std::fs::read(dir.path().join("data")).expect("data"),
    );
    let err = Store::open(dir.path(), &kek(8)).expect_err("the wrong key must not open the store");
    assert!(matches!(err, OpenError::WrongKey), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("key-encryption key") && !message.contains("0808"),
        "{message}"
    );
    let after = (
        std::fs::read(dir.path().join("meta.redb")).expect("meta"),
        std::fs::read(dir.path().join("data")).expect("data"),
    );
    assert!(before == after, "a refused open changed the store's files");
    Store::open(dir.path(), &kek(7)).expect("the right key still opens it");
}

#[test]
fn the_superblock_mode_cannot_be_changed_behind_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    one_object_store(dir.path(), Mode::Gcm);
    let db = redb::Database::open(dir.path().join("meta.redb")).expect("open metadata");
    let txn = db.begin_write().expect("write txn");
    {
        let def: TableDefinition<&str, &[u8]> = TableDefinition::new("superblock");
        txn.open_table(def)
            .expect("superblock")
            .insert("mode", &b"none"[..])
            .expect("write");
    }
    txn.commit().expect("commit");
    drop(db);
    assert!(
        matches!(Store::open(dir.path(), &kek(7)), Err(OpenError::WrongKey)),
        "a downgraded mode must not open"
    );
}

const LOG_CHILD: &str = "COFFER_LOG_CHILD";
const LOG_ROUND: &str = "COFFER_LOG_ROUND";
const LOG_WRITES: u64 = 4;

/// Applies `LOG_WRITES` small writes one after the other to the store in `dir`, one log
/// record each, to objects `{prefix}0`, `{prefix}1`, ... (write `i` is `pattern(seed + i)`),
/// and exits without closing the store: the log keeps them, as after a crash.
fn write_and_vanish(dir: &Path, prefix: &str, seed: u64) -> ! {
    let store = Store::open(dir, &kek(7)).expect("child open");
    for i in 0..LOG_WRITES {
        let mut txn = Transaction::new();
        txn.write(
            &obj(1, &format!("{prefix}{i}")),
            0,
            &pattern(seed + i, 4096),
        );
        store.apply(txn).expect("child write");
    }
    std::process::exit(0)
}

/// Runs test `name` of this binary as a child with `LOG_CHILD` set to `dir` and `round`
/// in `LOG_ROUND`, and checks that it exited well.
fn run_log_child(name: &str, dir: &Path, round: &str) {
    let status = std::process::Command::new(std::env::current_exe().expect("own path"))
        .args(["--exact", name])
        .env(LOG_CHILD, dir)
        .env(LOG_ROUND, round)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run the writer");
    assert!(status.success(), "the writer ({round}) failed: {status}");
}

/// Reads back the `LOG_WRITES` writes `write_and_vanish(_, prefix, seed)` made.
fn assert_log_writes(store: &Store, prefix: &str, seed: u64, mode: Mode) {
    for i in 0..LOG_WRITES {
        let got = store
            .read(&obj(1, &format!("{prefix}{i}")), 0, 4096)
            .unwrap_or_else(|e| panic!("{mode}: write {prefix}{i} lost: {e}"));
        assert_eq!(
            &got[..],
            &pattern(seed + i, 4096)[..],
            "{mode}: write {prefix}{i}"
        );
    }
}

/// A log record damaged on the disk while records after it hold acknowledged writes is not
/// taken for the log's end (which would drop those writes): the open fails naming the log,
/// in every mode, and changes nothing, so with the byte restored every write is there.
#[test]
fn a_damaged_log_record_before_later_ones_refuses_the_open() {
    const NAME: &str = "a_damaged_log_record_before_later_ones_refuses_the_open";
    if let Some(dir) = std::env::var_os(LOG_CHILD) {
        write_and_vanish(Path::new(&dir), "o", 0);
    }
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(mkfs(dir.path(), mode, 4 << 20));
        run_log_child(NAME, dir.path(), "writes");
        let wal = dir.path().join("wal");
        let log = std::fs::read(&wal).expect("read the log");
        let mut damaged = log.clone();
        damaged[40] ^= 0x01;
        std::fs::write(&wal, &damaged).expect("damage the log");
        match Store::open(dir.path(), &kek(7)) {
            Err(OpenError::Corrupt { what }) => assert!(
                what.contains("log record") && what.contains("altered or damaged"),
                "{mode}: {what}"
            ),
            Err(other) => panic!("{mode}: expected the log named as corrupt, got {other}"),
            Ok(_) => panic!("{mode}: a store whose log lost a record in its middle opened"),
        }
        assert!(
            std::fs::read(&wal).expect("read the log") == damaged,
            "{mode}: a refused open changed the log"
        );
        std::fs::write(&wal, &log).expect("restore the log");
        let store = Store::open(dir.path(), &kek(7)).expect("open with the log restored");
        assert_log_writes(&store, "o", 0, mode);
    }
}

/// A database that holds log records the log no longer has (a commit of it survived while
/// the log lost its end, which the scan takes for a torn end) opens, and the records logged
/// after that are numbered past the database's: a later replay applies them instead of
/// taking them for records it holds and dropping acknowledged writes.
#[test]
fn records_logged_after_the_database_are_numbered_past_it() {
    const NAME: &str = "records_logged_after_the_database_are_numbered_past_it";
    if let Some(dir) = std::env::var_os(LOG_CHILD) {
        let round = std::env::var(LOG_ROUND).expect("round");
        let seed = if round == "first" { 100 } else { 200 };
        write_and_vanish(Path::new(&dir), &round, seed);
    }
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(mkfs(dir.path(), mode, 4 << 20));
        run_log_child(NAME, dir.path(), "first");
        drop(Store::open(dir.path(), &kek(7)).expect("replay the first writes"));
        let db = redb::Database::open(dir.path().join("meta.redb")).expect("open metadata");
        let txn = db.begin_write().expect("write txn");
        {
            let def: TableDefinition<&str, &[u8]> = TableDefinition::new("superblock");
            let mut superblock = txn.open_table(def).expect("superblock");
            let start = u64::from_be_bytes(
                superblock
                    .get("wal_start")
                    .expect("read")
                    .expect("wal_start")
                    .value()
                    .try_into()
                    .expect("a u64"),
            );
            let applied = start + 2 * LOG_WRITES;
            superblock
                .insert("wal_applied", &applied.to_be_bytes()[..])
                .expect("write");
        }
        txn.commit().expect("commit");
        drop(db);
        drop(Store::open(dir.path(), &kek(7)).expect("open past the log's end"));
        run_log_child(NAME, dir.path(), "second");
        let store = Store::open(dir.path(), &kek(7)).expect("replay the second writes");
        assert_log_writes(&store, "first", 100, mode);
        assert_log_writes(&store, "second", 200, mode);
    }
}
