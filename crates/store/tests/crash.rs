//! Crash consistency: every transaction reported as committed survives SIGKILL, and no
//! torn or uncommitted one is visible.
//!
//! The parent makes a store per at-rest mode and, round after round, starts this same
//! binary as a child (`COFFER_CRASH_CHILD` set). The child runs `THREADS` threads, each
//! applying a deterministic sequence of transactions (from the seed, thread and index) to
//! its own objects and printing "thread index" after each `apply` returns. The parent kills
//! the child with SIGKILL at a random moment, reopens the store, and checks each thread's
//! objects against the model after exactly the reported transactions, or after one more
//! (the transaction in flight may have committed before it could be reported). Anything
//! else, a torn write, a lost commit, a half-applied transaction, fails the test, printing
//! the seed. Concurrent threads exercise group commit. At the end every object is removed
//! and no block may remain allocated: crashes leak no space. After every crash, each pool's
//! usage as the store kept it equals a count from its records.
//!
//! In every other round the child's data device loses, when killed, every write it was not
//! asked to sync (`Volatile`), as a disk's cache does when the power goes: small writes are
//! made durable by the write-ahead log's copy alone, so those rounds prove its replay. In
//! every fourth round the parent first opens the store on a device that refuses writes, so
//! the replay fails; the open after it must still find every reported commit.
//!
//! `COFFER_CRASH_SEED` replays a run; `COFFER_CRASH_ROUNDS` sets rounds per mode.

mod common;

use coffer_store::{Device, FileDevice, Mode, Store, Transaction, BLOCK_SIZE_BYTES};
use common::model::{
    add_to, apply_model, apply_undo_model, changed_object, check, check_undo, check_usage, Model,
    ModelOp, UndoModel,
};
use common::{kek, mkfs, obj};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const THREADS: usize = 3;
const OBJECTS_PER_THREAD: usize = 3;
const CHILD_ENV: &str = "COFFER_CRASH_CHILD";
const VOLATILE_ENV: &str = "COFFER_CRASH_VOLATILE";

/// A data device whose writes stay in this process's memory until a sync, so a SIGKILL
/// loses every write not synced, as a power cut loses a disk's write cache.
struct Volatile {
    inner: FileDevice,
    unsynced: std::sync::Mutex<std::collections::HashMap<u64, Vec<u8>>>,
}

/// A data device that refuses every write: an open on it fails as soon as its replay has a
/// block to write again.
struct Refusing(FileDevice);

impl Device for Refusing {
    fn read_at(&self, offset_bytes: u64, buffer: &mut [u8]) -> std::io::Result<()> {
        self.0.read_at(offset_bytes, buffer)
    }

    fn write_at(&self, _: u64, _: &[u8]) -> std::io::Result<()> {
        Err(std::io::Error::other("refused by the test"))
    }

    fn sync(&self) -> std::io::Result<()> {
        self.0.sync()
    }

    fn len_bytes(&self) -> u64 {
        self.0.len_bytes()
    }
}

impl Device for Volatile {
    fn read_at(&self, offset_bytes: u64, buffer: &mut [u8]) -> std::io::Result<()> {
        // Locked before reading the file, so a sync cannot move a block from memory to the
        // file between the two.
        let unsynced = self.unsynced.lock().expect("lock");
        self.inner.read_at(offset_bytes, buffer)?;
        for (index, block) in buffer.chunks_mut(BLOCK_SIZE_BYTES as usize).enumerate() {
            if let Some(bytes) = unsynced.get(&(offset_bytes + index as u64 * BLOCK_SIZE_BYTES)) {
                block.copy_from_slice(bytes);
            }
        }
        Ok(())
    }

    fn write_at(&self, offset_bytes: u64, buffer: &[u8]) -> std::io::Result<()> {
        let mut unsynced = self.unsynced.lock().expect("lock");
        for (index, block) in buffer.chunks(BLOCK_SIZE_BYTES as usize).enumerate() {
            unsynced.insert(
                offset_bytes + index as u64 * BLOCK_SIZE_BYTES,
                block.to_vec(),
            );
        }
        Ok(())
    }

    fn sync(&self) -> std::io::Result<()> {
        let mut unsynced = self.unsynced.lock().expect("lock");
        let mut block = coffer_store::AlignedBuf::zeroed(1);
        for (offset_bytes, bytes) in unsynced.drain() {
            block.copy_from_slice(&bytes);
            self.inner.write_at(offset_bytes, &block)?;
        }
        self.inner.sync()
    }

    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }
}

fn names(thread: usize) -> Vec<String> {
    (0..OBJECTS_PER_THREAD)
        .map(|o| format!("t{thread}-o{o}"))
        .collect()
}

/// Transaction `index` of `thread`: a deterministic function of the seed.
fn transaction(seed: u64, thread: usize, index: u64) -> Vec<ModelOp> {
    let mut rng =
        StdRng::seed_from_u64(seed ^ ((thread as u64) << 48) ^ index.wrapping_mul(0x9e37_79b9));
    let ops = rng.random_range(1..=4);
    let mut ops: Vec<ModelOp> = (0..ops)
        .map(|_| {
            let o = rng.random_range(0..OBJECTS_PER_THREAD);
            match rng.random_range(0..100) {
                0..=44 => {
                    let len = if rng.random_ratio(1, 20) {
                        1 << 20
                    } else {
                        rng.random_range(0..20_000u64)
                    };
                    ModelOp::Write(o, rng.random_range(0..(64 << 10)), len as u32, rng.random())
                }
                45..=52 => ModelOp::Zero(
                    o,
                    rng.random_range(0..(64 << 10)),
                    rng.random_range(0..(16 << 10)),
                ),
                53..=60 => ModelOp::Truncate(o, rng.random_range(0..(80 << 10))),
                61..=65 => ModelOp::Remove(o),
                66..=75 => ModelOp::SetAttr(o, rng.random_range(0..4), rng.random()),
                76..=90 => ModelOp::OmapSet(o, rng.random_range(0..8), rng.random()),
                91..=96 => ModelOp::OmapRemove(o, rng.random_range(0..8)),
                _ => ModelOp::Touch(o),
            }
        })
        .collect();
    // Undo records, kept by half the changes that allow one (no omap change) and
    // dropped now and then: they must survive crashes with their blocks, and leak none.
    for o in 0..OBJECTS_PER_THREAD {
        let changed = ops.iter().any(|op| changed_object(op) == o);
        // A record does not cover omap: none with omap changes, or a remove (which clears it).
        let omap = ops.iter().any(|op| {
            matches!(op, ModelOp::OmapSet(k, ..) | ModelOp::OmapRemove(k, _) | ModelOp::OmapClear(k) | ModelOp::Remove(k) if *k == o)
        });
        if changed && !omap && rng.random_ratio(1, 2) {
            ops.push(ModelOp::KeepUndo(o, index + 1));
        }
    }
    if rng.random_ratio(1, 8) {
        let o = rng.random_range(0..OBJECTS_PER_THREAD);
        ops.push(ModelOp::DropUndo(
            o,
            index.saturating_sub(rng.random_range(0..3)),
        ));
    }
    ops
}

fn child(dir: &str, mode: Mode) {
    let seed: u64 = std::env::var("COFFER_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("seed");
    let starts: Vec<u64> = std::env::var("COFFER_CRASH_START")
        .expect("start indices")
        .split(',')
        .map(|s| s.parse().expect("index"))
        .collect();
    let dir = std::path::Path::new(dir);
    let store = if std::env::var_os(VOLATILE_ENV).is_some() {
        let device = Volatile {
            inner: FileDevice::open(&dir.join("data")).expect("data device"),
            unsynced: Default::default(),
        };
        Store::open_with_device(dir, &kek(7), Box::new(device)).expect("child open")
    } else {
        Store::open(dir, &kek(7)).expect("child open")
    };
    assert_eq!(store.mode(), mode);
    std::thread::scope(|scope| {
        for (thread, start) in starts.into_iter().enumerate() {
            let store = &store;
            scope.spawn(move || {
                let names = names(thread);
                for index in start.. {
                    let mut txn = Transaction::new();
                    transaction(seed, thread, index)
                        .iter()
                        .for_each(|op| add_to(&mut txn, op, &names));
                    store.apply(txn).expect("child apply");
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "{thread} {index}").expect("report");
                    out.flush().expect("flush report");
                }
            });
        }
    });
}

/// One thread's view in the parent: its model after `committed` transactions.
struct Tracked {
    committed: u64,
    model: Model,
    undo: UndoModel,
}

impl Tracked {
    fn advance(&mut self, seed: u64, thread: usize, to: u64) {
        while self.committed < to {
            let ops = transaction(seed, thread, self.committed);
            ops.iter().for_each(|op| apply_model(&mut self.model, op));
            apply_undo_model(&mut self.undo, &ops);
            self.committed += 1;
        }
    }
}

/// Whether the store's objects equal `model`. The model check asserts; a mismatch here is
/// an expected outcome (the transaction in flight may or may not have committed), so its
/// panic message is silenced and the caller decides.
fn matches(store: &Store, tracked: &Tracked, mode: Mode, names: &[String]) -> bool {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check(store, &tracked.model, mode, names, false);
        check_undo(store, &tracked.undo, mode, names);
    }))
    .is_ok();
    std::panic::set_hook(hook);
    ok
}

fn run_mode(mode: Mode, seed: u64, rounds: usize, rng: &mut StdRng) -> u64 {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(mkfs(dir.path(), mode, 64 << 20));
    let mut tracked: Vec<Tracked> = (0..THREADS)
        .map(|_| Tracked {
            committed: 0,
            model: Model::new(),
            undo: UndoModel::new(),
        })
        .collect();
    for round in 0..rounds {
        let starts: Vec<String> = tracked.iter().map(|t| t.committed.to_string()).collect();
        let mut child = Command::new(std::env::current_exe().expect("own path"));
        child
            .env(CHILD_ENV, dir.path())
            .env("COFFER_CRASH_MODE", mode.as_str())
            .env("COFFER_CRASH_SEED", seed.to_string())
            .env("COFFER_CRASH_START", starts.join(","));
        if round % 2 == 1 {
            child.env(VOLATILE_ENV, "1");
        }
        let mut child = child.stdout(Stdio::piped()).spawn().expect("spawn child");
        let stdout = child.stdout.take().expect("piped stdout");
        let reader = std::thread::spawn(move || {
            let mut last = vec![None; THREADS];
            for line in BufReader::new(stdout).lines() {
                let line = line.expect("child output");
                let mut parts = line.split(' ').map(|p| p.parse::<u64>().expect("number"));
                let (thread, index) = (
                    parts.next().expect("thread") as usize,
                    parts.next().expect("index"),
                );
                last[thread] = Some(index);
            }
            last
        });
        std::thread::sleep(Duration::from_millis(rng.random_range(30..400)));
        child.kill().expect("SIGKILL the child");
        let status = child.wait().expect("reap child");
        let last = reader.join().expect("reader thread");
        assert!(
            status.code().is_none(),
            "seed {seed}: child exited by itself ({status}) instead of being killed"
        );

        if round % 4 == 2 {
            let refusing = Refusing(FileDevice::open(&dir.path().join("data")).expect("device"));
            // Whether it opens (nothing to write again) or not, the next open must find
            // every reported commit.
            drop(Store::open_with_device(
                dir.path(),
                &kek(7),
                Box::new(refusing),
            ));
        }
        let store = Store::open(dir.path(), &kek(7))
            .unwrap_or_else(|e| panic!("seed {seed} {mode} round {round}: reopen: {e}"));
        check_usage(&store, mode);
        for (thread, t) in tracked.iter_mut().enumerate() {
            let reported = last[thread].map_or(t.committed, |i| i + 1);
            assert!(reported >= t.committed, "reports go forward");
            t.advance(seed, thread, reported);
            let names = names(thread);
            if !matches(&store, t, mode, &names) {
                t.advance(seed, thread, reported + 1);
                assert!(
                    matches(&store, t, mode, &names),
                    "seed {seed} {mode} round {round} thread {thread}: the store matches neither the {reported} reported \
                     commits nor one more: a commit was lost or a transaction was torn"
                );
            }
        }
    }
    let store = Store::open(dir.path(), &kek(7)).expect("final open");
    let mut txn = Transaction::new();
    for thread in 0..THREADS {
        for name in names(thread) {
            txn.remove(&obj(1, &name));
        }
    }
    store.apply(txn).expect("remove all");
    assert_eq!(
        store.statfs().allocated_bytes,
        0,
        "seed {seed} {mode}: crashes leaked blocks"
    );
    assert_eq!(
        store.pool_usage().expect("pool usage"),
        vec![],
        "seed {seed} {mode}: usage left with every object removed"
    );
    tracked.iter().map(|t| t.committed).sum()
}

fn main() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let mode: Mode = std::env::var("COFFER_CRASH_MODE")
            .expect("mode")
            .parse()
            .expect("known mode");
        child(&dir, mode);
        return;
    }
    let seed: u64 = std::env::var("COFFER_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let rounds: usize = std::env::var("COFFER_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    println!(
        "crash test: seed {seed} (replay with COFFER_CRASH_SEED={seed}), {rounds} rounds per mode"
    );
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut passed = 0;
    for mode in Mode::ALL {
        let commits = run_mode(mode, seed, rounds, &mut rng);
        println!(
            "test crash_{} ... ok ({commits} commits survived {rounds} SIGKILLs)",
            mode.as_str().replace('-', "_")
        );
        passed += 1;
    }
    println!(
        "crash test finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    println!("{passed} passed, 0 failed");
}
