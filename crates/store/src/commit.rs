//! Group commit: the point at which a transaction becomes durable.
//!
//! Each applying thread has sealed its data blocks (and written those of large writes). It
//! queues its batch (metadata changes, and the small writes it left for the group) and
//! waits. One waiting thread at a time becomes the leader: it takes every queued batch and
//! commits them as one group (`Store::flush_group` in apply.rs: the small writes in one
//! submission, one write-ahead log record made durable with one sync, then the metadata
//! kept in memory until enough waits for one database commit: pending.rs, behind.rs).
//! Every batch in that group is then durable, and its thread may
//! acknowledge. A batch whose own writes failed is left out of the commit and its thread
//! gets the error; the others go on.
//!
//! If a sync or commit fails, the store is poisoned: the failed group and every later
//! transaction get `ApplyError::Poisoned`, because after a failed fsync the kernel may have
//! dropped the dirty pages and nothing written since can be trusted without reopening (and
//! replaying) the store.
//!
//! Bound: the queue holds at most one batch per applying thread, so its length is bounded
//! by the caller's concurrency.

use crate::error::ApplyError;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::thread::Thread;

pub(crate) struct Committer<B> {
    state: Mutex<State<B>>,
}

struct State<B> {
    queue: Vec<B>,
    next_ticket: u64,
    durable_through: u64,
    /// Batches of the last groups that failed on their own, by ticket, until their
    /// threads take the error.
    failed: HashMap<u64, ApplyError>,
    /// Threads asleep until their batch is durable, by ticket. A finished group wakes its
    /// own threads and one of the next (to lead it), not every waiting thread: each
    /// needless wake-up is a context switch.
    waiting: Vec<(u64, Thread)>,
    leader: bool,
    poisoned: Option<String>,
}

impl<B> State<B> {
    fn wake(&self) {
        let done = |ticket: u64| ticket <= self.durable_through || self.poisoned.is_some();
        for (_, thread) in self.waiting.iter().filter(|(t, _)| done(*t)) {
            thread.unpark();
        }
        let next = self
            .waiting
            .iter()
            .filter(|(t, _)| !done(*t))
            .min_by_key(|(t, _)| *t);
        if let Some((_, thread)) = next {
            thread.unpark();
        }
    }
}

/// Armed while a leader runs `flush` without the lock. If `flush` panics (and something up
/// the stack catches it), this poisons the store and wakes the followers, who would
/// otherwise wait for a leader that never returns.
struct LeaderUnwind<'a, B> {
    committer: &'a Committer<B>,
}

impl<B> Drop for LeaderUnwind<'_, B> {
    fn drop(&mut self) {
        let mut state = self
            .committer
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.leader = false;
        state
            .poisoned
            .get_or_insert_with(|| "a metadata commit panicked".to_string());
        state.wake();
    }
}

impl<B> Committer<B> {
    pub(crate) fn new() -> Committer<B> {
        Committer {
            state: Mutex::new(State {
                queue: Vec::new(),
                next_ticket: 1,
                durable_through: 0,
                failed: HashMap::new(),
                waiting: Vec::new(),
                leader: false,
                poisoned: None,
            }),
        }
    }

    /// Queues `batch` and returns once it is durable (or failed). `flush` commits a group:
    /// `Err` fails the whole group and poisons the store; otherwise it returns one outcome
    /// per batch, in order, and a batch's own error goes to its thread alone.
    pub(crate) fn commit(
        &self,
        batch: B,
        flush: impl Fn(Vec<B>) -> Result<Vec<Result<(), ApplyError>>, ApplyError>,
    ) -> Result<(), ApplyError> {
        let mut state = self.state.lock().expect("commit lock poisoned");
        if let Some(cause) = &state.poisoned {
            return Err(ApplyError::Poisoned {
                cause: cause.clone(),
            });
        }
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.queue.push(batch);
        loop {
            if state.durable_through >= ticket {
                return state.failed.remove(&ticket).map_or(Ok(()), Err);
            }
            // A leader under way may be committing this batch: the store may be poisoned
            // meanwhile from outside the group (`poison`), and the batch still be durable.
            if state.leader {
                state = self.sleep(state, ticket);
                continue;
            }
            if let Some(cause) = &state.poisoned {
                return Err(ApplyError::Poisoned {
                    cause: cause.clone(),
                });
            }
            state.leader = true;
            let group = std::mem::take(&mut state.queue);
            let last_ticket = state.next_ticket - 1;
            let first_ticket = last_ticket + 1 - group.len() as u64;
            drop(state);
            let unwinding = LeaderUnwind { committer: self };
            let result = flush(group);
            std::mem::forget(unwinding);
            state = self.state.lock().expect("commit lock poisoned");
            state.leader = false;
            let outcome = match result {
                Ok(outcomes) => {
                    state.durable_through = last_ticket;
                    for (at, outcome) in (first_ticket..).zip(outcomes) {
                        if let Err(e) = outcome {
                            state.failed.insert(at, e);
                        }
                    }
                    None
                }
                Err(e) => {
                    state.poisoned = Some(e.to_string());
                    Some(e)
                }
            };
            state.wake();
            if let Some(e) = outcome {
                return Err(e);
            }
        }
    }

    /// Sleeps until woken (or spuriously), listed under `ticket` meanwhile.
    fn sleep<'a>(
        &'a self,
        mut state: MutexGuard<'a, State<B>>,
        ticket: u64,
    ) -> MutexGuard<'a, State<B>> {
        state.waiting.push((ticket, std::thread::current()));
        drop(state);
        std::thread::park();
        let mut state = self.state.lock().expect("commit lock poisoned");
        state.waiting.retain(|(t, _)| *t != ticket);
        state
    }

    /// Stops the store taking transactions after a commit outside a group failed (the
    /// store's thread's, a reader's or an overdue writer's: pending.rs, behind.rs), as a
    /// failed group commit does.
    pub(crate) fn poison(&self, cause: String) {
        let mut state = self.state.lock().expect("commit lock poisoned");
        state.poisoned.get_or_insert(cause);
        state.wake();
    }

    pub(crate) fn poisoned(&self) -> Option<String> {
        self.state
            .lock()
            .expect("commit lock poisoned")
            .poisoned
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn concurrent_batches_share_commits_and_each_commits_once() {
        let committer = Committer::<()>::new();
        let committed = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..50 {
                        committer
                            .commit((), |group| {
                                committed.fetch_add(group.len(), Ordering::SeqCst);
                                Ok(group.iter().map(|()| Ok(())).collect())
                            })
                            .expect("commit");
                    }
                });
            }
        });
        assert_eq!(
            committed.load(Ordering::SeqCst),
            400,
            "every batch exactly once"
        );
    }

    /// Batches that fail on their own (their data writes failed) get their own error, in
    /// whatever group they landed; the others in the group commit, and nothing is poisoned.
    #[test]
    fn a_batch_failing_alone_fails_only_its_own_thread() {
        let committer = Committer::<(usize, usize)>::new();
        let flush = |group: Vec<(usize, usize)>| {
            Ok(group
                .into_iter()
                .map(|(thread, round)| match (thread + round) % 3 {
                    0 => Err(ApplyError::Invalid {
                        reason: format!("{thread} {round}"),
                    }),
                    _ => Ok(()),
                })
                .collect())
        };
        std::thread::scope(|scope| {
            for thread in 0..8 {
                let (committer, flush) = (&committer, &flush);
                scope.spawn(move || {
                    for round in 0..50 {
                        let outcome = committer.commit((thread, round), flush);
                        match outcome {
                            Err(ApplyError::Invalid { reason }) => {
                                assert_eq!(reason, format!("{thread} {round}"), "its own error");
                            }
                            Ok(()) => assert_ne!((thread + round) % 3, 0, "a failure was lost"),
                            Err(other) => panic!("{other:?}"),
                        }
                    }
                });
            }
        });
        assert!(committer.poisoned().is_none());
    }

    /// A reader's commit failed (pending.rs) while a group was being committed: the
    /// group's batches are durable and answered so, and only later ones are refused.
    #[test]
    fn a_store_poisoned_during_a_group_answers_that_group_by_its_outcome() {
        let committer = Committer::<u32>::new();
        let (leading, led) = std::sync::mpsc::channel::<Vec<u32>>();
        let (go, gone) = std::sync::mpsc::channel::<()>();
        let (leading, gone) = (Mutex::new(leading), Mutex::new(gone));
        let flush = |group: Vec<u32>| {
            let outcomes = group.iter().map(|_| Ok(())).collect();
            leading.lock().expect("lock").send(group).expect("send");
            gone.lock().expect("lock").recv().expect("recv");
            Ok(outcomes)
        };
        std::thread::scope(|scope| {
            let (committer, flush) = (&committer, &flush);
            let first = scope.spawn(move || committer.commit(0, flush));
            assert_eq!(led.recv().expect("first group"), [0]);
            let followers: Vec<_> = [1, 2]
                .map(|n| scope.spawn(move || committer.commit(n, flush)))
                .into();
            while committer.state.lock().expect("lock").waiting.len() < 2 {
                std::thread::yield_now();
            }
            go.send(()).expect("go");
            let outcome = first.join().expect("first");
            assert!(outcome.is_ok(), "{outcome:?}");
            let mut second = led.recv().expect("second group");
            second.sort_unstable();
            assert_eq!(second, [1, 2]);
            committer.poison("a reader's commit failed".into());
            go.send(()).expect("go");
            for follower in followers {
                let outcome = follower.join().expect("follower");
                assert!(outcome.is_ok(), "{outcome:?}");
            }
        });
        let after = committer.commit(3, |_| Ok(vec![Ok(())]));
        assert!(
            matches!(after, Err(ApplyError::Poisoned { .. })),
            "{after:?}"
        );
    }

    /// The story: a leader's flush panicked, something caught the panic, and every later
    /// commit waited forever for a leader that would never come back.
    #[test]
    fn a_panicking_leader_poisons_instead_of_hanging_the_followers() {
        let committer = Committer::<()>::new();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            committer.commit((), |_| panic!("flush failed inside the metadata database"))
        }));
        assert!(caught.is_err());
        let after = committer.commit((), |_| Ok(vec![Ok(())]));
        assert!(
            matches!(after, Err(ApplyError::Poisoned { .. })),
            "{after:?}"
        );
    }
}
