//! One placement group on this OSD. Its decisions are a synchronous state machine,
//! [`Core`]: core.rs opens with its states and invariants; write.rs takes a client write
//! from its order to its answer, peering.rs a new map from the first query to the state
//! published, and recovery.rs a replica from its first copy to its join, each as events
//! in and actions out. This file is the thin part that async code shares: the lock that
//! holds the core, and what the PG serves, published for ops waiting on it and for the
//! beacon.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use map::cluster::Epoch;
use map::placement::PgId;
use map::ObjectName;
use messenger::message::{ObjectOp, OsdReply, PgState, ReqId};
use messenger::SegmentCheck;
use tokio::sync::{oneshot, watch, Mutex};

mod core;
pub mod peering;
pub mod recovery;
pub mod write;

pub use self::core::{undo_to_drop, Core, Verdict};

/// How long an op waits for its PG to serve before the client is told it is busy (the
/// client then asks again, so a PG that comes back is served without an error).
pub const SERVE_WAIT: Duration = Duration::from_secs(5);

/// Most writes one group takes (write.rs): a PG that many clients wait on drains its queue
/// in a few rounds.
pub const GROUP_WRITES_MAX: usize = 64;
/// Most data bytes one group takes; a larger write goes alone. A group's transaction and
/// message stay a few MiB.
pub const GROUP_BYTES_MAX: usize = 4 << 20;
/// Most bytes of encoded ops (attributes, omap entries, chunk records) one group takes: a
/// quarter of a frame's metadata segment, which also carries each write's log entry.
pub const GROUP_META_BYTES_MAX: usize = 256 << 10;
/// Most store operations one group's writes make (`objects::store_ops`): half the store's
/// limit on one transaction, which also takes the group's log entries and trim.
pub const GROUP_STORE_OPS_MAX: usize = store::TRANSACTION_OPS_MAX / 2;

pub struct Pg {
    pub id: PgId,
    /// Held for every group of writes, and while peering: groups of writes to a PG are
    /// applied one at a time, in version order, on every OSD that holds it.
    pub core: Mutex<Core>,
    /// Client writes waiting for the next group, in the order they came.
    queue: std::sync::Mutex<VecDeque<Queued>>,
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
            queue: Default::default(),
            serving: watch::Sender::new(Serving::NotPrimary),
            announced: AtomicU64::new(0),
            noting: AtomicBool::new(false),
        }
    }

    /// Queues a client write for the next group.
    pub fn queue_write(&self, write: Queued) {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(write);
    }

    /// The next group of the writes queued ([`take_group`]).
    pub fn next_group(&self, alone: bool) -> Vec<Queued> {
        take_group(
            &mut self.queue.lock().unwrap_or_else(|p| p.into_inner()),
            alone,
        )
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

/// A client write queued in its PG, and where its answer goes.
pub struct Queued {
    pub reqid: ReqId,
    pub object: ObjectName,
    pub ops: Vec<ObjectOp>,
    /// The size of `ops` encoded, as they go to the replicas.
    pub meta_bytes: usize,
    /// At most how many store operations its ops make.
    pub store_ops: usize,
    pub data: Bytes,
    /// The check its data arrived with, if sealed at the edge.
    pub check: Option<SegmentCheck>,
    pub answer: oneshot::Sender<Result<OsdReply, OsdReply>>,
}

/// Takes the next group off `queue`: from its front, every write whose object and request
/// no write before it in the queue has, up to [`GROUP_WRITES_MAX`] writes,
/// [`GROUP_BYTES_MAX`] data bytes, [`GROUP_META_BYTES_MAX`] bytes of ops and
/// [`GROUP_STORE_OPS_MAX`] store operations (the first write always); with `alone`, the
/// first write only. A write left keeps its place, so
/// the writes to one object go in the order they came.
fn take_group(queue: &mut VecDeque<Queued>, alone: bool) -> Vec<Queued> {
    let mut group: Vec<Queued> = Vec::new();
    let mut objects: HashSet<ObjectName> = HashSet::new();
    let mut reqids: HashSet<ReqId> = HashSet::new();
    let (mut bytes, mut meta_bytes, mut store_ops) = (0usize, 0usize, 0usize);
    let mut left = VecDeque::new();
    while let Some(write) = queue.pop_front() {
        let full = !group.is_empty()
            && (alone
                || group.len() == GROUP_WRITES_MAX
                || bytes.saturating_add(write.data.len()) > GROUP_BYTES_MAX
                || meta_bytes.saturating_add(write.meta_bytes) > GROUP_META_BYTES_MAX
                || store_ops.saturating_add(write.store_ops) > GROUP_STORE_OPS_MAX);
        if full {
            queue.push_front(write);
            break;
        }
        // Both noted either way: a later write to an object, or of a request, left behind
        // stays behind it.
        let new_object = objects.insert(write.object.clone());
        let new_request = reqids.insert(write.reqid);
        if new_object && new_request {
            bytes += write.data.len();
            meta_bytes = meta_bytes.saturating_add(write.meta_bytes);
            store_ops = store_ops.saturating_add(write.store_ops);
            group.push(write);
        } else {
            left.push_back(write);
        }
    }
    left.append(queue);
    *queue = left;
    group
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

    /// A queued write of `len` data bytes to `object` from request `seq`.
    fn queued(seq: u64, object: &str, len: usize) -> Queued {
        Queued {
            reqid: super::core::tests::reqid(seq),
            object: super::core::tests::name(object),
            ops: Vec::new(),
            meta_bytes: 100,
            store_ops: 4,
            data: Bytes::from(vec![0; len]),
            check: None,
            answer: oneshot::channel().0,
        }
    }

    fn seqs(writes: &[Queued]) -> Vec<u64> {
        writes.iter().map(|w| w.reqid.seq).collect()
    }

    #[test]
    fn a_group_takes_distinct_objects_in_order_and_leaves_the_rest_in_place() {
        let mut queue: VecDeque<Queued> = [
            queued(1, "a", 10),
            queued(2, "b", 10),
            queued(3, "a", 10),
            queued(4, "c", 10),
            queued(5, "b", 10),
            queued(6, "d", 10),
        ]
        .into();
        assert_eq!(seqs(&take_group(&mut queue, false)), [1, 2, 4, 6]);
        assert_eq!(seqs(queue.make_contiguous()), [3, 5]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [3, 5]);
        assert!(take_group(&mut queue, false).is_empty());
        // A request queued twice goes once per group.
        queue.extend([queued(7, "e", 1), queued(7, "f", 1)]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [7]);
        assert_eq!(queue.len(), 1);
        queue.clear();
        // Alone: one write per group.
        queue.extend([queued(1, "a", 1), queued(2, "b", 1)]);
        assert_eq!(seqs(&take_group(&mut queue, true)), [1]);
        assert_eq!(seqs(queue.make_contiguous()), [2]);
        queue.clear();
        // Bounded by writes and by bytes; a large write goes alone, and first.
        queue.extend((0..GROUP_WRITES_MAX as u64 + 1).map(|i| queued(i, &format!("o{i}"), 1)));
        assert_eq!(take_group(&mut queue, false).len(), GROUP_WRITES_MAX);
        queue.clear();
        queue.extend([
            queued(1, "a", GROUP_BYTES_MAX + 1),
            queued(2, "b", 1),
            queued(3, "c", GROUP_BYTES_MAX),
        ]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [1]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [2]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [3]);
        // And by the bytes of their ops, which travel in a frame's metadata.
        let big = |seq, object| Queued {
            meta_bytes: GROUP_META_BYTES_MAX / 2 + 1,
            ..queued(seq, object, 1)
        };
        queue.extend([big(1, "a"), big(2, "b"), queued(3, "c", 1)]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [1]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [2, 3]);
        // And by the store operations they make (an omap op makes one per key).
        let keys = |seq, object| Queued {
            store_ops: GROUP_STORE_OPS_MAX / 2 + 1,
            ..queued(seq, object, 1)
        };
        queue.extend([keys(1, "a"), keys(2, "b"), queued(3, "c", 1)]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [1]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [2, 3]);
    }

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
