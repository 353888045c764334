//! The store's committing thread: it puts the changes waiting (pending.rs) into the
//! database once enough wait, so that the write that makes them due is answered without
//! waiting for their commit. At one write in flight that write is every write's leader,
//! and the commit of 32 groups on its path put half a millisecond on every 32nd write.
//!
//! A group's leader asks (`Behind::ask`) and goes on; the thread commits everything waiting
//! when it wakes, in one database commit (`Shared::commit_with_waiting`, one commit at a
//! time, so a reader's or a checkpoint's commit and the thread's take turns). Asks made
//! while it commits are answered by one more round. If writers log changes faster than
//! the thread commits them, the leader that finds them overdue (`Pending::overdue`)
//! commits them itself, after the thread's commit: what waits in memory stays bounded.
//! A failed commit poisons the store, as one made by a writer does. The store stops and
//! joins its thread before its closing checkpoint.

use crate::store::Shared;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

pub(crate) struct Behind {
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Signal {
    asked: Mutex<Ask>,
    wake: Condvar,
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Ask {
    #[default]
    Nothing,
    Commit,
    Stop,
}

impl Signal {
    fn asked(&self) -> MutexGuard<'_, Ask> {
        // Only plain values are written under this lock: a panic cannot leave it half-set.
        self.asked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, ask: Ask) {
        let mut asked = self.asked();
        if *asked != Ask::Stop {
            *asked = ask;
        }
        self.wake.notify_one();
    }

    /// Waits for the next ask; `false` once the store stops the thread.
    fn next(&self) -> bool {
        let mut asked = self.asked();
        while *asked == Ask::Nothing {
            asked = self
                .wake
                .wait(asked)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let go = *asked == Ask::Commit;
        if go {
            *asked = Ask::Nothing;
        }
        go
    }
}

impl Behind {
    /// No thread yet: while a store opens (and replays its log, committing on its own
    /// thread), nothing is asked.
    pub(crate) fn not_started() -> Behind {
        Behind {
            signal: Arc::default(),
            thread: None,
        }
    }

    /// Starts the thread for the store whose database is `shared`.
    pub(crate) fn start(shared: Arc<Shared>) -> std::io::Result<Behind> {
        let signal = Arc::new(Signal::default());
        let asked = Arc::clone(&signal);
        let thread = std::thread::Builder::new()
            .name("store-commit".into())
            .spawn(move || {
                while asked.next() {
                    // A failed commit poisons the store; the writers find out from it.
                    let _ = shared.commit_waiting("committing logged changes");
                }
            })?;
        Ok(Behind {
            signal,
            thread: Some(thread),
        })
    }

    /// Asks the thread to commit what waits, and returns at once. Once a store is open
    /// its thread runs: until then, what is due waits until it is overdue.
    pub(crate) fn ask(&self) {
        self.signal.set(Ask::Commit);
    }

    /// Stops the thread once its commit under way, if any, is made (the store's closing
    /// checkpoint commits what is left).
    pub(crate) fn stop(&mut self) {
        self.signal.set(Ask::Stop);
        if let Some(thread) = self.thread.take() {
            // Its commits catch their panics (`Shared::commit_waiting`).
            let _ = thread.join();
        }
    }
}

/// A thread left running would hold the database open (and its keys in memory).
impl Drop for Behind {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use crate::pending::PENDING_GROUPS_MAX;
    use crate::seal::Mode;
    use crate::store::{MkfsOptions, Store};
    use crate::transaction::Transaction;
    use keys::KeyEncryptionKey;
    use map::{ObjectName, ObjectRef, PoolId};
    use std::time::{Duration, Instant};

    fn kek() -> KeyEncryptionKey {
        KeyEncryptionKey::from_bytes([6; 32])
    }

    /// A store whose log holds several hundred small groups, so none of these tests
    /// checkpoints (a checkpoint commits on the writer's thread).
    fn store(dir: &std::path::Path) -> Store {
        let options = MkfsOptions {
            mode: Mode::Gcm,
            size_bytes: 32 << 20,
            device: None,
        };
        Store::mkfs(dir, &options, &kek()).expect("mkfs");
        Store::open(dir, &kek()).expect("open")
    }

    /// One small write to its own object: one logged group whose changes wait.
    fn write(store: &Store, n: usize) {
        let name = ObjectName::new(format!("object-{n}")).expect("a valid name");
        let mut txn = Transaction::new();
        txn.write(&ObjectRef::new(PoolId(1), name), 0, &[n as u8; 512]);
        store.apply(txn).expect("write");
    }

    fn wait_until_committed(store: &Store) {
        let started = Instant::now();
        while !store.shared.waiting().is_empty() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the changes waiting were not committed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Runs `writes` on a thread of its own while the commit lock is held (so no commit can
    /// be made), and says whether they returned within `wait`; the lock is let go before
    /// anything is asserted, so a write that waits for a commit cannot hang the test.
    fn return_with_commits_held(
        store: &Store,
        wait: Duration,
        writes: std::ops::Range<usize>,
    ) -> bool {
        run_with_commits_held(store, wait, || writes.for_each(|n| write(store, n)))
    }

    /// Runs `work` on a thread of its own while the commit lock is held, and says whether
    /// it returned within `wait` (the lock is let go before anything is asserted).
    fn run_with_commits_held(store: &Store, wait: Duration, work: impl FnOnce() + Send) -> bool {
        let held = store.shared.commits.lock().expect("commit lock");
        std::thread::scope(|s| {
            let (done, finished) = std::sync::mpsc::channel();
            s.spawn(move || {
                work();
                // The test may have stopped waiting.
                let _ = done.send(());
            });
            let returned = finished.recv_timeout(wait).is_ok();
            drop(held);
            returned
        })
    }

    /// Writes up to and including the one that makes the changes due return without a
    /// commit being made (none can be, meanwhile); the store's thread then commits them
    /// with no reader asking, and they are there after the store is closed and opened again.
    #[test]
    fn the_stores_thread_commits_the_changes_once_they_are_due() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store(dir.path());
        let due = PENDING_GROUPS_MAX;
        assert!(
            return_with_commits_held(&store, Duration::from_secs(20), 0..due),
            "the write that made the changes due waited for their commit"
        );
        wait_until_committed(&store);
        drop(store);
        let store = Store::open(dir.path(), &kek()).expect("open again");
        let name = ObjectName::new(format!("object-{}", due - 1)).expect("a valid name");
        let read = store.read(&ObjectRef::new(PoolId(1), name), 0, 512);
        assert_eq!(read.expect("read")[..], [(due - 1) as u8; 512][..]);
    }

    /// Removing an object without omap rows changes no key range, so its group waits for
    /// its commit like a write's; removing one with rows is committed at once (pending.rs)
    /// and takes them. An object whose omap is set and removed in one transaction leaves
    /// no rows and waits too.
    #[test]
    fn only_a_remove_of_omap_rows_is_committed_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store(dir.path());
        let object =
            |name: &str| ObjectRef::new(PoolId(1), ObjectName::new(name).expect("a valid name"));
        let (plain, mapped, brief) = (object("plain"), object("mapped"), object("brief"));
        let apply = |txn: &mut Transaction| store.apply(std::mem::take(txn)).expect("apply");
        apply(Transaction::new().write(&plain, 0, &[1; 512]));
        apply(
            Transaction::new()
                .write(&mapped, 0, &[2; 512])
                .omap_set(&mapped, b"k", b"v"),
        );
        store
            .shared
            .commit_waiting("the test's commit")
            .expect("commit");

        assert!(
            run_with_commits_held(&store, Duration::from_secs(20), || {
                apply(Transaction::new().remove(&plain));
                apply(
                    Transaction::new()
                        .write(&brief, 0, &[3; 512])
                        .omap_set(&brief, b"k", b"v")
                        .remove(&brief),
                );
            }),
            "a remove of an object without omap rows waited for a commit"
        );
        assert!(
            !run_with_commits_held(&store, Duration::from_secs(1), || {
                apply(Transaction::new().remove(&mapped));
            }),
            "a remove of omap rows returned with no commit made"
        );
        assert!(
            store.shared.waiting().is_empty(),
            "a remove of omap rows was committed without what waited before it"
        );
        drop(store);

        let store = Store::open(dir.path(), &kek()).expect("open again");
        for gone in [&plain, &mapped, &brief] {
            assert!(
                !store.exists(gone).expect("exists"),
                "{gone} is still there"
            );
            let mut again = Transaction::new();
            again.touch(gone);
            store.apply(again).expect("made again");
            let rows = store.omap_get(gone, b"k").expect("omap");
            assert_eq!(
                rows, None,
                "{gone} made again has the omap of the one removed"
            );
        }
    }

    /// An omap entry is read as the changes waiting for their commit leave it, set or
    /// removed, without committing them.
    #[test]
    fn an_omap_entry_is_read_without_committing_what_waits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store(dir.path());
        let index = ObjectRef::new(PoolId(1), ObjectName::new("index").expect("a valid name"));
        let mut txn = Transaction::new();
        txn.omap_set(&index, b"old", b"1")
            .omap_set(&index, b"gone", b"2");
        store.apply(txn).expect("apply");
        store
            .shared
            .commit_waiting("the test's commit")
            .expect("commit");
        let mut txn = Transaction::new();
        txn.omap_set(&index, b"new", b"3")
            .omap_remove(&index, b"gone");
        store.apply(txn).expect("apply");
        assert!(
            !store.shared.waiting().is_empty(),
            "the change was committed at once"
        );

        let keys = [&b"old"[..], b"gone", b"new"];
        let (read, found) = std::sync::mpsc::channel();
        assert!(
            run_with_commits_held(&store, Duration::from_secs(20), || {
                let one_by_one = keys.map(|key| store.omap_get(&index, key).expect("omap_get"));
                read.send(one_by_one.to_vec()).expect("send");
                let together = store.omap_entries(&index, keys).expect("omap_entries");
                read.send(together).expect("send");
            }),
            "a read of omap entries waited for a commit"
        );
        let expected = vec![Some(b"1".to_vec()), None, Some(b"3".to_vec())];
        let found: Vec<_> = found.try_iter().collect();
        assert_eq!(found, [expected.clone(), expected]);
        assert!(
            !store.shared.waiting().is_empty(),
            "the read committed what waits"
        );
    }

    /// Between a commit's landing in the database and its changes' leaving those waiting, a
    /// reader without the object's lock reads what the database holds: the commit may have
    /// made a group's own changes over those it took, as a removal of an object's omap rows
    /// does.
    #[test]
    fn a_reader_reads_a_landed_commit_over_the_changes_it_took() {
        use crate::apply::Commit;
        use crate::metadata::{omap_table, MetaOp};
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store(dir.path());
        let index = ObjectRef::new(PoolId(1), ObjectName::new("index").expect("a valid name"));
        let mut txn = Transaction::new();
        txn.omap_set(&index, b"k", b"1");
        store.apply(txn).expect("apply");
        let shared = &store.shared;
        shared.commit_waiting("the test's commit").expect("commit");
        let mut txn = Transaction::new();
        txn.omap_set(&index, b"k", b"2");
        store.apply(txn).expect("apply");

        let _one_at_a_time = shared.commits.lock().expect("commit lock");
        let changes = shared.waiting_mut().begin_commit().expect("none under way");
        let seq = changes.seq().expect("the change waits");
        let read = || store.omap_get(&index, b"k").expect("omap_get");
        assert_eq!(
            read(),
            Some(b"2".to_vec()),
            "taken, not yet in the database"
        );
        let id = shared.meta.object_id(index.pool, index.name.as_str());
        let own = vec![MetaOp::RemovePrefix {
            table: omap_table(index.pool),
            prefix: id.to_vec(),
        }];
        shared
            .commit_metadata(&changes, own, &Default::default(), Commit::Logged { seq })
            .expect("commit");
        assert_eq!(read(), None, "landed, under the change it took");
        shared.waiting_mut().end_commit();
        assert_eq!(read(), None, "landed and dropped");
    }

    /// While the thread's commit cannot run, writes go on until the changes are overdue;
    /// the write that finds them so commits them itself, once the commit under way is done.
    #[test]
    fn a_writer_commits_the_changes_itself_when_the_thread_falls_behind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store(dir.path());
        let overdue = PENDING_GROUPS_MAX * crate::pending::OVERDUE_FACTOR;
        assert!(
            !return_with_commits_held(&store, Duration::from_secs(1), 0..overdue),
            "writes went on with the changes overdue and no commit made"
        );
        wait_until_committed(&store);
        let name = ObjectName::new(format!("object-{}", overdue - 1)).expect("a valid name");
        let read = store.read(&ObjectRef::new(PoolId(1), name), 0, 512);
        assert_eq!(read.expect("read")[..], [(overdue - 1) as u8; 512][..]);
    }
}
