//! Failures of space, of the device, and of input: each gets a clear error, nothing
//! committed is lost, and a failed transaction leaves nothing behind. Runs in every mode.

mod common;

use coffer_store::{
    ApplyError, Device, FileDevice, Mode, ReadError, Store, Transaction, OMAP_KEY_BYTES_MAX,
    TRANSACTION_OPS_MAX, WRITE_BYTES_MAX,
};
use common::{kek, mkfs, obj, pattern};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[test]
fn a_full_store_refuses_writes_whole_and_keeps_everything_committed() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = mkfs(dir.path(), mode, 64 * 4096);
        let mut written = Vec::new();
        let err = loop {
            let name = format!("o{}", written.len());
            let mut txn = Transaction::new();
            txn.write(&obj(1, &name), 0, &pattern(written.len() as u64, 16 << 10));
            match store.apply(txn) {
                Ok(()) => written.push(name),
                Err(e) => break e,
            }
        };
        assert!(matches!(err, ApplyError::NoSpace { .. }), "{mode}: {err:?}");
        assert!(err.to_string().contains("store is full"), "{err}");
        assert!(
            !store
                .exists(&obj(1, &format!("o{}", written.len())))
                .expect("exists"),
            "{mode}: the refused write is invisible"
        );
        // A transaction whose first op fits but whose second does not applies neither.
        let mut txn = Transaction::new();
        txn.set_attr(&obj(1, "o0"), "marker", b"x")
            .write(&obj(1, "big"), 0, &vec![1u8; 1 << 20]);
        assert!(matches!(store.apply(txn), Err(ApplyError::NoSpace { .. })));
        assert!(
            store.attrs(&obj(1, "o0")).expect("attrs").is_empty(),
            "{mode}: half a transaction applied"
        );
        for (i, name) in written.iter().enumerate() {
            let read = store.read(&obj(1, name), 0, 16 << 10).expect("read");
            assert!(
                read[..] == pattern(i as u64, 16 << 10)[..],
                "{mode}: {name} changed"
            );
        }
        let mut txn = Transaction::new();
        txn.remove(&obj(1, &written[0]));
        store.apply(txn).expect("remove");
        let mut txn = Transaction::new();
        txn.write(&obj(1, "after"), 0, &pattern(99, 16 << 10));
        store
            .apply(txn)
            .expect("space freed by a remove is usable again");
    }
}

/// A real device that fails writes or syncs on demand.
struct FaultyDevice {
    inner: FileDevice,
    fail_writes: Arc<AtomicBool>,
    fail_sync: Arc<AtomicBool>,
}

impl Device for FaultyDevice {
    fn read_at(&self, offset_bytes: u64, buffer: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset_bytes, buffer)
    }
    fn write_at(&self, offset_bytes: u64, buffer: &[u8]) -> io::Result<()> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.write_at(offset_bytes, buffer)
    }
    fn sync(&self) -> io::Result<()> {
        if self.fail_sync.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.sync()
    }
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }
}

/// A store of `mode` in `dir` on a device whose writes fail while the flag is set.
fn store_failing_writes(dir: &std::path::Path, mode: Mode) -> (Store, Arc<AtomicBool>) {
    drop(mkfs(dir, mode, 1 << 20));
    let fail_writes = Arc::new(AtomicBool::new(false));
    let device = FaultyDevice {
        inner: FileDevice::open(&dir.join("data")).expect("device"),
        fail_writes: fail_writes.clone(),
        fail_sync: Arc::new(AtomicBool::new(false)),
    };
    let store = Store::open_with_device(dir, &kek(7), Box::new(device)).expect("open");
    (store, fail_writes)
}

/// Applies `txn` while the device refuses writes: an IO error, and every block the
/// transaction took is free again.
fn apply_refused(store: &Store, fail_writes: &AtomicBool, txn: Transaction, mode: Mode) {
    let free_before = store.statfs().free_bytes;
    fail_writes.store(true, Ordering::SeqCst);
    let err = store.apply(txn).expect_err("the device refuses writes");
    fail_writes.store(false, Ordering::SeqCst);
    assert!(matches!(err, ApplyError::Io(_)), "{mode}: {err:?}");
    assert_eq!(
        store.statfs().free_bytes,
        free_before,
        "{mode}: blocks of the failed write were returned"
    );
}

#[test]
fn device_write_errors_fail_the_transaction_and_change_nothing() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, fail_writes) = store_failing_writes(dir.path(), mode);
        let mut txn = Transaction::new();
        txn.write(&obj(1, "kept"), 0, &pattern(1, 10_000));
        store.apply(txn).expect("write");
        let mut txn = Transaction::new();
        txn.write(&obj(1, "kept"), 0, &pattern(2, 10_000))
            .omap_set(&obj(1, "kept"), b"k", b"v");
        apply_refused(&store, &fail_writes, txn, mode);
        assert!(
            store.read(&obj(1, "kept"), 0, 10_000).expect("read")[..] == pattern(1, 10_000)[..]
        );
        assert_eq!(store.omap_get(&obj(1, "kept"), b"k").expect("omap"), None);
        let mut txn = Transaction::new();
        txn.write(&obj(1, "kept"), 0, &pattern(3, 10_000));
        store
            .apply(txn)
            .expect("the store works again once the device does");
    }
}

/// Aligned bytes handed over (written from where they are where nothing seals them): one
/// piece left for the group commit and several written at once both fail whole.
#[test]
fn device_write_errors_on_handed_over_bytes_fail_the_transaction_and_change_nothing() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, fail_writes) = store_failing_writes(dir.path(), mode);
        let (small, large) = (pattern(5, 4096), pattern(6, 300 << 10));
        let mut txn = Transaction::new();
        txn.write_bytes(&obj(1, "small"), 0, common::aligned(&small))
            .write_bytes(&obj(1, "large"), 0, common::aligned(&large));
        apply_refused(&store, &fail_writes, txn, mode);
        assert!(
            matches!(
                store.stat(&obj(1, "large")),
                Err(ReadError::NotFound { .. })
            ),
            "{mode}"
        );
        let mut txn = Transaction::new();
        txn.write_bytes(&obj(1, "large"), 0, common::aligned(&large));
        store
            .apply(txn)
            .expect("the store works again once the device does");
        assert!(
            store
                .read(&obj(1, "large"), 0, large.len() as u64)
                .expect("read")[..]
                == large[..]
        );
    }
}

#[test]
fn a_failed_sync_poisons_the_store_and_reopening_recovers_the_committed_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(mkfs(dir.path(), Mode::Gcm, 1 << 20));
    let fail_sync = Arc::new(AtomicBool::new(false));
    let device = FaultyDevice {
        inner: FileDevice::open(&dir.path().join("data")).expect("device"),
        fail_writes: Arc::new(AtomicBool::new(false)),
        fail_sync: fail_sync.clone(),
    };
    let store = Store::open_with_device(dir.path(), &kek(7), Box::new(device)).expect("open");
    let mut txn = Transaction::new();
    txn.write(&obj(1, "kept"), 0, &pattern(1, 5000));
    store.apply(txn).expect("write");
    fail_sync.store(true, Ordering::SeqCst);
    // Small writes are made durable by the write-ahead log's sync; a write of several IO
    // pieces is not copied there, so its group syncs the data device.
    let mut txn = Transaction::new();
    txn.write(&obj(1, "lost"), 0, &pattern(2, 320 << 10));
    assert!(matches!(store.apply(txn), Err(ApplyError::Io(_))));
    fail_sync.store(false, Ordering::SeqCst);
    let mut txn = Transaction::new();
    txn.write(&obj(1, "later"), 0, b"after the failure");
    let err = store
        .apply(txn)
        .expect_err("a poisoned store refuses writes");
    assert!(
        matches!(err, ApplyError::Poisoned { .. }) && err.to_string().contains("reopen"),
        "{err}"
    );
    drop(store);
    let store = Store::open(dir.path(), &kek(7)).expect("reopen");
    assert!(store.read(&obj(1, "kept"), 0, 5000).expect("read")[..] == pattern(1, 5000)[..]);
    assert!(!store.exists(&obj(1, "lost")).expect("exists"));
}

#[test]
fn invalid_operations_are_refused_whole_with_a_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 1 << 20);
    let o = obj(1, "o");
    type Build = Box<dyn Fn(&mut Transaction)>;
    let cases: Vec<(&str, Build)> = vec![
        (
            "empty attribute name",
            Box::new(|t: &mut Transaction| {
                t.set_attr(&obj(1, "o"), "", b"v");
            }),
        ),
        (
            "huge omap value",
            Box::new(|t: &mut Transaction| {
                t.omap_set(&obj(1, "o"), b"k", &vec![0u8; (1 << 20) + 1]);
            }),
        ),
        (
            "huge omap key",
            Box::new(|t: &mut Transaction| {
                t.omap_set(&obj(1, "o"), &[b'k'; OMAP_KEY_BYTES_MAX + 1], b"v");
            }),
        ),
        (
            "more operations than a transaction takes",
            Box::new(|t: &mut Transaction| {
                for _ in 0..TRANSACTION_OPS_MAX {
                    t.touch(&obj(1, "o"));
                }
            }),
        ),
        (
            "write past the size limit",
            Box::new(|t: &mut Transaction| {
                t.write(&obj(1, "o"), (1 << 40) - 1, b"xy");
            }),
        ),
        (
            "write over the write limit",
            Box::new(|t: &mut Transaction| {
                t.write(&obj(1, "o"), 0, &vec![0u8; WRITE_BYTES_MAX as usize + 1]);
            }),
        ),
        (
            "sealed write without records",
            Box::new(|t: &mut Transaction| {
                t.write_sealed(&obj(1, "o"), 0, bytes::Bytes::from(vec![0u8; 4096]), vec![]);
            }),
        ),
    ];
    for (what, build) in cases {
        let mut txn = Transaction::new();
        txn.touch(&o);
        build(&mut txn);
        let checked = txn.check().expect_err(what);
        assert!(
            matches!(checked, ApplyError::Invalid { .. }),
            "{what}: {checked:?}"
        );
        let err = store.apply(txn).expect_err(what);
        assert!(matches!(err, ApplyError::Invalid { .. }), "{what}: {err:?}");
        assert!(
            err.to_string().contains("nothing was applied"),
            "{what}: {err}"
        );
        assert!(
            !store.exists(&o).expect("exists"),
            "{what}: part of the transaction applied"
        );
    }
    assert!(matches!(
        store.read(&o, 0, 1),
        Err(ReadError::NotFound { .. })
    ));
    let mut txn = Transaction::new();
    txn.touch(&o);
    txn.check().expect("a touch is within every limit");
    store.apply(txn).expect("touch");
    // The attributes' total depends on what the object holds: `check` passes it, the store
    // refuses it when applied.
    let mut txn = Transaction::new();
    txn.set_attr(&o, "a", &vec![0u8; 200 << 10]);
    txn.set_attr(&o, "b", &vec![0u8; 100 << 10]);
    txn.check().expect("each attribute within the limits");
    let err = store.apply(txn).expect_err("attributes over their total");
    assert!(matches!(err, ApplyError::Invalid { .. }), "{err:?}");
    assert!(matches!(
        store.read(&o, 0, WRITE_BYTES_MAX + 1),
        Err(ReadError::Invalid { .. })
    ));
    // A chunk count whose byte size overflows must be refused, not wrap to a tiny read.
    assert!(matches!(
        store.read_sealed(&o, 0, 1 << 52),
        Err(ReadError::Invalid { .. })
    ));
}

#[test]
fn mkfs_refuses_a_used_directory_and_a_tiny_size_and_open_refuses_a_non_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("something"), b"x").expect("write");
    let options = coffer_store::MkfsOptions {
        mode: Mode::Gcm,
        size_bytes: 1 << 20,
        device: None,
    };
    assert!(matches!(
        Store::mkfs(dir.path(), &options, &kek(1)),
        Err(coffer_store::MkfsError::NotEmpty { .. })
    ));
    let empty = tempfile::tempdir().expect("tempdir");
    let tiny = coffer_store::MkfsOptions {
        size_bytes: 4096,
        ..options
    };
    assert!(matches!(
        Store::mkfs(empty.path(), &tiny, &kek(1)),
        Err(coffer_store::MkfsError::TooSmall { .. })
    ));
    assert!(matches!(
        Store::open(empty.path(), &kek(1)),
        Err(coffer_store::OpenError::NotAStore { .. })
    ));
}

#[test]
fn a_second_open_of_the_same_store_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _store = mkfs(dir.path(), Mode::Gcm, 1 << 20);
    assert!(matches!(
        Store::open(dir.path(), &kek(7)),
        Err(coffer_store::OpenError::InUse { .. })
    ));
}

#[test]
fn mkfs_on_an_existing_device_uses_all_of_it_and_open_finds_it_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let device = dir.path().join("disk.img");
    std::fs::File::create(&device)
        .expect("create")
        .set_len(2 << 20)
        .expect("size the device");
    let store_dir = dir.path().join("store");
    let options = coffer_store::MkfsOptions {
        mode: Mode::Gcm,
        size_bytes: 0,
        device: Some(device.clone()),
    };
    Store::mkfs(&store_dir, &options, &kek(7)).expect("mkfs on a device");
    assert!(!store_dir.join("data").exists(), "no data file of its own");
    let store = Store::open(&store_dir, &kek(7)).expect("open");
    assert_eq!(store.statfs().total_bytes, 2 << 20, "the whole device");
    let mut txn = Transaction::new();
    txn.write(&obj(1, "o"), 0, &pattern(4, 10_000));
    store.apply(txn).expect("write");
    drop(store);
    let store = Store::open(&store_dir, &kek(7)).expect("reopen finds the device");
    assert!(store.read(&obj(1, "o"), 0, 10_000).expect("read")[..] == pattern(4, 10_000)[..]);
    let on_device = std::fs::read(&device).expect("read device");
    assert!(
        common::find(&on_device, &pattern(4, 10_000)[..64]).is_none(),
        "sealed on the device"
    );
}
