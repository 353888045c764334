//! Many threads writing the same objects at once: each transaction is applied whole and in
//! some order, none is lost, and reads running alongside never see a torn write or a block
//! that another transaction reused. Runs in every mode (gcm fails loudly on a torn block).

mod common;

use coffer_store::{Mode, Transaction};
use common::{mkfs, obj};

const THREADS: usize = 8;
const WRITES_PER_THREAD: usize = 60;

#[test]
fn concurrent_writers_on_shared_objects_lose_nothing() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = mkfs(dir.path(), mode, 16 << 20);
        let shared = obj(1, "shared");
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let (store, shared) = (&store, &shared);
                scope.spawn(move || {
                    for i in 0..WRITES_PER_THREAD {
                        // Each thread owns 4 KiB at t * 4 KiB and rewrites it whole, with a
                        // sequence number, and logs the write in the omap.
                        let block = vec![(t * WRITES_PER_THREAD + i) as u8; 4096];
                        let mut txn = Transaction::new();
                        txn.write(shared, (t * 4096) as u64, &block)
                            .omap_set(shared, format!("t{t}-{i:03}").as_bytes(), &[i as u8])
                            .write(
                                &obj(1, &format!("own-{t}")),
                                (i * 100) as u64,
                                &[i as u8; 100],
                            );
                        store.apply(txn).expect("apply");
                        let seen = store
                            .read(shared, (t * 4096) as u64, 4096)
                            .expect("concurrent read");
                        assert!(
                            seen.iter().all(|b| *b == block[0]),
                            "{mode}: thread {t} read a torn block"
                        );
                    }
                });
            }
        });
        let data = store
            .read(&shared, 0, (THREADS * 4096) as u64)
            .expect("read");
        for t in 0..THREADS {
            let last = (t * WRITES_PER_THREAD + WRITES_PER_THREAD - 1) as u8;
            assert!(
                data[t * 4096..(t + 1) * 4096].iter().all(|b| *b == last),
                "{mode}: thread {t}'s last write"
            );
            let own = store
                .read(&obj(1, &format!("own-{t}")), 0, 1 << 20)
                .expect("own");
            assert_eq!(own.len(), (WRITES_PER_THREAD - 1) * 100 + 100);
        }
        assert_eq!(
            store.omap_list(&shared, None, 1000).expect("omap").len(),
            THREADS * WRITES_PER_THREAD,
            "{mode}"
        );
    }
}

/// Records and pool usage are read through the changes that wait for their commit
/// (pending.rs) while writers keep logging more and commits move them into the database: a
/// record read after a write was acknowledged is never older than that write, and the usage
/// counts each acknowledged write once.
#[test]
fn records_and_usage_read_while_commits_run_count_each_acknowledged_write_once() {
    use coffer_store::ReadError;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const OBJECTS: usize = 4;
    const APPENDS: u64 = 150;
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = mkfs(dir.path(), mode, 16 << 20);
        let names: Vec<_> = (0..OBJECTS).map(|t| obj(1, &format!("grow-{t}"))).collect();
        let acknowledged: Vec<AtomicU64> = (0..OBJECTS).map(|_| AtomicU64::new(0)).collect();
        let started: Vec<AtomicU64> = (0..OBJECTS).map(|_| AtomicU64::new(0)).collect();
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let writers: Vec<_> = (0..OBJECTS)
                .map(|t| {
                    let (store, names, acknowledged, started) =
                        (&store, &names, &acknowledged, &started);
                    scope.spawn(move || {
                        for i in 0..APPENDS {
                            started[t].store((i + 1) * 512, Ordering::SeqCst);
                            let mut txn = Transaction::new();
                            txn.write(&names[t], i * 512, &[t as u8; 512]);
                            store.apply(txn).expect("apply");
                            acknowledged[t].store((i + 1) * 512, Ordering::SeqCst);
                        }
                    })
                })
                .collect();
            for _ in 0..2 {
                let (store, names, acknowledged, started, done) =
                    (&store, &names, &acknowledged, &started, &done);
                let sum = |counts: &[AtomicU64]| -> u64 {
                    counts.iter().map(|c| c.load(Ordering::SeqCst)).sum()
                };
                scope.spawn(move || {
                    while !done.load(Ordering::SeqCst) {
                        let floor = sum(acknowledged);
                        let usage = store.pool_usage().expect("usage");
                        let ceiling = sum(started);
                        let stored = usage.first().map_or(0, |(_, u)| u.stored_bytes);
                        assert!(
                            (floor..=ceiling).contains(&stored),
                            "{mode}: usage of {stored} bytes with {floor} to {ceiling} written"
                        );
                        for (name, acked) in names.iter().zip(acknowledged) {
                            let floor = acked.load(Ordering::SeqCst);
                            match store.stat(name) {
                                Ok(stat) => assert!(
                                    stat.size_bytes >= floor,
                                    "{mode}: {name} read at {} bytes after {floor} were acknowledged",
                                    stat.size_bytes
                                ),
                                Err(ReadError::NotFound { .. }) => assert_eq!(floor, 0, "{mode}"),
                                Err(e) => panic!("{mode}: {e}"),
                            }
                        }
                    }
                });
            }
            writers.into_iter().for_each(|w| w.join().expect("writer"));
            done.store(true, Ordering::SeqCst);
        });
        for name in &names {
            let stat = store.stat(name).expect("stat");
            assert_eq!(stat.size_bytes, APPENDS * 512, "{mode}");
        }
    }
}
