//! One placement group on this OSD. Its decisions are a synchronous state machine,
//! [`Core`]: core.rs opens with its states and invariants; write.rs takes a client write
//! from its order to its answer, peering.rs a new map from the first query to the state
//! published, and recovery.rs a replica from its first copy to its join, each as events
//! in and actions out. This file is the thin part that async code shares: the lock that
//! holds the core, and what the PG serves, published for ops waiting on it and for the
//! beacon.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use map::cluster::Epoch;
use map::placement::PgId;
use messenger::message::PgState;
use tokio::sync::{watch, Mutex};

mod core;
pub mod peering;
pub mod recovery;
pub mod write;

pub use self::core::{undo_to_drop, Core, Verdict};

/// How long an op waits for its PG to serve before the client is told it is busy (the
/// client then asks again, so a PG that comes back is served without an error).
pub const SERVE_WAIT: Duration = Duration::from_secs(5);

pub struct Pg {
    pub id: PgId,
    /// Held for every write, and while peering: writes to a PG are applied one at a time,
    /// in version order, on every OSD that holds it.
    pub core: Mutex<Core>,
    /// What the PG serves now, for ops waiting on it and for the beacon.
    pub serving: watch::Sender<Serving>,
    /// The newest map epoch at which the map changed this PG's acting set (set with
    /// `serving`, under its lock): a state worked out for an older interval is not
    /// published over what that map announced.
    announced: AtomicU64,
    /// An erasure-coded PG's primary has a task that tells the holders what is complete once
    /// its writes pause (recovery.rs, `note_complete`): set by the write that starts it,
    /// cleared by the task under the PG's lock.
    pub noting: AtomicBool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Serving {
    /// This OSD is not the PG's primary (or has not peered it yet).
    NotPrimary,
    /// Primary in the interval that began at `epoch`, in `state`.
    Primary { epoch: Epoch, state: PgState },
}

impl Serving {
    pub fn is_active(&self) -> bool {
        matches!(self, Serving::Primary { state, .. } if state.is_active())
    }

    pub fn serves_reads(&self) -> bool {
        matches!(self, Serving::Primary { state, .. } if state.serves_reads())
    }
}

impl Pg {
    /// A PG whose recovery tokens start at `first_token` (`OsdState::first_token`).
    pub fn new(id: PgId, first_token: u64) -> Pg {
        Pg {
            id,
            core: Mutex::new(Core::new(id, first_token)),
            serving: watch::Sender::new(Serving::NotPrimary),
            announced: AtomicU64::new(0),
            noting: AtomicBool::new(false),
        }
    }

    /// What the map at `epoch` makes of this PG, until peering works out more: it outranks
    /// every state worked out for an older interval.
    pub fn announce(&self, epoch: Epoch, serving: Serving) {
        self.serving.send_modify(|now| {
            self.announced.fetch_max(epoch, Ordering::Relaxed);
            *now = serving;
        });
    }

    /// The newest map epoch at which the map changed this PG's acting set: a write's answer
    /// is decided with it (`Core::on_write`), since it may be newer than the interval peered.
    pub fn announced(&self) -> Epoch {
        self.announced.load(Ordering::Relaxed)
    }

    /// Publishes `state` for the interval that began at `epoch`, unless a newer map has
    /// changed the PG since (then its peering publishes).
    pub fn publish_state(&self, epoch: Epoch, state: PgState) {
        self.serving.send_if_modified(|now| {
            if !publishable(epoch, self.announced.load(Ordering::Relaxed)) {
                return false;
            }
            *now = Serving::Primary { epoch, state };
            true
        });
    }

    /// Waits (up to [`SERVE_WAIT`]) until the PG serves writes and reads; the reason it
    /// does not otherwise.
    pub async fn wait_active(&self) -> Result<(), String> {
        self.wait_serving(Serving::is_active).await
    }

    /// Waits (up to [`SERVE_WAIT`]) until the PG serves reads; the reason it does not
    /// otherwise.
    pub async fn wait_readable(&self) -> Result<(), String> {
        self.wait_serving(Serving::serves_reads).await
    }

    async fn wait_serving(&self, serves: fn(&Serving) -> bool) -> Result<(), String> {
        let mut watch = self.serving.subscribe();
        let waited = tokio::time::timeout(SERVE_WAIT, watch.wait_for(serves)).await;
        match waited {
            Ok(Ok(_)) => Ok(()),
            _ => Err(match &*self.serving.borrow() {
                Serving::NotPrimary => "this OSD is not (yet) the PG's primary".to_string(),
                Serving::Primary {
                    state: PgState::Inactive(why),
                    ..
                } => {
                    format!("pg {}.{} is inactive: {why}", self.id.pool, self.id.number)
                }
                Serving::Primary {
                    state: PgState::ReadOnly(why),
                    ..
                } => {
                    format!("pg {}.{} is read-only: {why}", self.id.pool, self.id.number)
                }
                Serving::Primary { state, .. } => {
                    format!("pg {}.{} is {}", self.id.pool, self.id.number, state.name())
                }
            }),
        }
    }
}

/// Whether a state worked out in the interval that began at `interval` may be published
/// when the newest map that changed the PG is `announced`.
pub fn publishable(interval: Epoch, announced: Epoch) -> bool {
    interval >= announced
}

#[cfg(test)]
mod tests {
    use super::core::tests::{primary, version, PG};
    use super::*;

    #[test]
    fn a_state_from_an_interval_a_newer_map_ended_is_not_published() {
        let pg = Pg::new(PG, 1);
        let mut core = primary(5, version(5, 1), 2);
        pg.publish_state(core.interval.epoch, core.state());
        assert!(pg.serving.borrow().is_active());
        // A write under the lock of the interval of epoch 5 ends after the map of epoch 6
        // changed the PG: what it publishes must not undo the map's announcement.
        let peering = Serving::Primary {
            epoch: 6,
            state: PgState::Peering,
        };
        pg.announce(6, peering.clone());
        pg.publish_state(core.interval.epoch, core.state());
        assert_eq!(*pg.serving.borrow(), peering);
        pg.publish_state(5, PgState::Inactive("late".into()));
        assert_eq!(*pg.serving.borrow(), peering);
        core.interval.epoch = 6;
        pg.publish_state(core.interval.epoch, core.state());
        assert_eq!(
            *pg.serving.borrow(),
            Serving::Primary {
                epoch: 6,
                state: PgState::Clean
            }
        );
        assert!(publishable(6, 6) && publishable(7, 6) && !publishable(5, 6));
    }
}
