//! Group commit: the point at which a transaction becomes durable.
//!
//! Each applying thread has already written its (sealed) data blocks. It queues its metadata
//! changes and waits. One waiting thread at a time becomes the leader: it takes every queued
//! batch, syncs the data device once (so every data block the batches reference is durable),
//! then applies all batches, in queue order, in one metadata transaction committed with
//! fsync. Every batch in that group is then durable, and its thread may acknowledge.
//!
//! Order matters: data sync before metadata commit, so committed metadata never points at
//! blocks that did not reach the disk. If a sync or commit fails, the store is poisoned: the
//! failed group and every later transaction get `ApplyError::Poisoned`, because after a
//! failed fsync the kernel may have dropped the dirty pages and nothing written since can be
//! trusted without reopening (and re-reading) the store.
//!
//! Bound: the queue holds at most one batch per applying thread, so its length is bounded
//! by the caller's concurrency.

use crate::error::ApplyError;
use crate::metadata::MetaOp;
use std::sync::{Condvar, Mutex};

pub(crate) struct Committer {
    state: Mutex<State>,
    wake: Condvar,
}

struct State {
    queue: Vec<Vec<MetaOp>>,
    next_ticket: u64,
    durable_through: u64,
    leader: bool,
    poisoned: Option<String>,
}

/// Armed while a leader runs `flush` without the lock. If `flush` panics (and something up
/// the stack catches it), this poisons the store and wakes the followers, who would
/// otherwise wait for a leader that never returns.
struct LeaderUnwind<'a> {
    committer: &'a Committer,
}

impl Drop for LeaderUnwind<'_> {
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
        self.committer.wake.notify_all();
    }
}

impl Committer {
    pub(crate) fn new() -> Committer {
        Committer {
            state: Mutex::new(State {
                queue: Vec::new(),
                next_ticket: 1,
                durable_through: 0,
                leader: false,
                poisoned: None,
            }),
            wake: Condvar::new(),
        }
    }

    /// Queues `batch` and returns once it is durable (or failed). `flush` commits a group.
    pub(crate) fn commit(
        &self,
        batch: Vec<MetaOp>,
        flush: impl Fn(Vec<Vec<MetaOp>>) -> Result<(), ApplyError>,
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
                return Ok(());
            }
            if let Some(cause) = &state.poisoned {
                return Err(ApplyError::Poisoned {
                    cause: cause.clone(),
                });
            }
            if state.leader {
                state = self.wake.wait(state).expect("commit lock poisoned");
                continue;
            }
            state.leader = true;
            let group = std::mem::take(&mut state.queue);
            let last_ticket = state.next_ticket - 1;
            drop(state);
            let unwinding = LeaderUnwind { committer: self };
            let result = flush(group);
            std::mem::forget(unwinding);
            state = self.state.lock().expect("commit lock poisoned");
            state.leader = false;
            let outcome = match result {
                Ok(()) => {
                    state.durable_through = last_ticket;
                    None
                }
                Err(e) => {
                    state.poisoned = Some(e.to_string());
                    Some(e)
                }
            };
            self.wake.notify_all();
            if let Some(e) = outcome {
                return Err(e);
            }
        }
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
        let committer = Committer::new();
        let committed = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..50 {
                        committer
                            .commit(Vec::new(), |group| {
                                committed.fetch_add(group.len(), Ordering::SeqCst);
                                Ok(())
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

    /// The story: a leader's flush panicked, something caught the panic, and every later
    /// commit waited forever for a leader that would never come back.
    #[test]
    fn a_panicking_leader_poisons_instead_of_hanging_the_followers() {
        let committer = Committer::new();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            committer.commit(Vec::new(), |_| {
                panic!("flush failed inside the metadata database")
            })
        }));
        assert!(caught.is_err());
        let after = committer.commit(Vec::new(), |_| Ok(()));
        assert!(
            matches!(after, Err(ApplyError::Poisoned { .. })),
            "{after:?}"
        );
    }
}
