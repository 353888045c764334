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

/// Takes the next group off `queue`: from its front, every write whose request no write
/// before it in the queue has, and whose object none has either unless each write to it
/// before it is [`independent`] of it (and it of each one left); up to
/// [`GROUP_WRITES_MAX`] writes, [`GROUP_BYTES_MAX`] data bytes, [`GROUP_META_BYTES_MAX`]
/// bytes of ops and [`GROUP_STORE_OPS_MAX`] store operations (the first write always);
/// with `alone`, the first write only. A write left keeps its place, so the writes to one
/// object go in the order they came wherever their order matters.
fn take_group(queue: &mut VecDeque<Queued>, alone: bool) -> Vec<Queued> {
    let mut group: Vec<Queued> = Vec::new();
    let mut held: HashSet<ObjectName> = HashSet::new();
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
        // A request is noted either way: a later write of it stays behind. So is an object
        // once a write to it is left: a later one passes those left only where the order
        // of the two cannot matter.
        let new_request = reqids.insert(write.reqid);
        let same_object = |other: &&Queued| other.object == write.object;
        let joins = new_request
            && group
                .iter()
                .filter(same_object)
                .all(|earlier| independent(&earlier.ops, &write.ops))
            && (!held.contains(&write.object)
                || left.iter().filter(same_object).all(|behind| {
                    independent(&behind.ops, &write.ops) && independent(&write.ops, &behind.ops)
                }));
        if joins {
            bytes += write.data.len();
            meta_bytes = meta_bytes.saturating_add(write.meta_bytes);
            store_ops = store_ops.saturating_add(write.store_ops);
            group.push(write);
        } else {
            held.insert(write.object.clone());
            left.push_back(write);
        }
    }
    left.append(queue);
    *queue = left;
    group
}

/// Whether a write of `later` may go in one group after a write of `earlier` to the same
/// object: both only judge and change its omap by keys (an index, such as a bucket's that
/// every S3 PUT commits to), and `later` judges and changes no key that `earlier` changes,
/// nor asserts that the object exists unless `earlier` does too (an omap write makes its
/// object). Then `later`'s conditions, checked before the group is applied, judge what they
/// would after `earlier`, and the group's transaction applies both in their order. Any
/// other second write to an object waits for the next group.
fn independent(earlier: &[ObjectOp], later: &[ObjectOp]) -> bool {
    let by_keys = |ops: &[ObjectOp]| {
        ops.iter().all(|op| {
            matches!(
                op,
                ObjectOp::AssertExists
                    | ObjectOp::AssertAttr { .. }
                    | ObjectOp::AssertOmap { .. }
                    | ObjectOp::OmapSet { .. }
                    | ObjectOp::OmapRemove { .. }
            )
        })
    };
    if !by_keys(earlier) || !by_keys(later) {
        return false;
    }
    let changed: HashSet<&[u8]> = earlier.iter().flat_map(changed_keys).collect();
    let mut touched = later.iter().flat_map(|op| match op {
        ObjectOp::AssertOmap { key, .. } => vec![key.as_slice()],
        op => changed_keys(op),
    });
    let asserts_existence = |ops: &[ObjectOp]| ops.contains(&ObjectOp::AssertExists);
    !touched.any(|key| changed.contains(key))
        && (!asserts_existence(later) || asserts_existence(earlier))
}

/// The omap keys `op` sets or removes.
fn changed_keys(op: &ObjectOp) -> Vec<&[u8]> {
    match op {
        ObjectOp::OmapSet { entries } => entries.iter().map(|(key, _)| key.as_slice()).collect(),
        ObjectOp::OmapRemove { keys } => keys.iter().map(Vec::as_slice).collect(),
        _ => Vec::new(),
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

    /// A queued write of `len` data bytes to `object` from request `seq`.
    fn queued(seq: u64, object: &str, len: usize) -> Queued {
        Queued {
            ops: vec![ObjectOp::WriteFull { len: len as u64 }],
            data: Bytes::from(vec![0; len]),
            ..omap_write(seq, object, Vec::new())
        }
    }

    /// A queued write of `ops`, with no data, to `object` from request `seq`.
    fn omap_write(seq: u64, object: &str, ops: Vec<ObjectOp>) -> Queued {
        Queued {
            reqid: super::core::tests::reqid(seq),
            object: super::core::tests::name(object),
            ops,
            meta_bytes: 100,
            store_ops: 4,
            data: Bytes::new(),
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
    fn writes_to_one_object_share_a_group_only_where_none_judges_what_another_changes() {
        let key = |k: &str| k.as_bytes().to_vec();
        let set = |k: &str| ObjectOp::OmapSet {
            entries: vec![(key(k), b"v".to_vec())],
        };
        let absent = |k: &str| ObjectOp::AssertOmap {
            key: key(k),
            value: None,
        };
        // A commit as the gateway makes it: the index exists, the key is as read, then set.
        let commit = |seq, k: &str| {
            omap_write(
                seq,
                "index",
                vec![ObjectOp::AssertExists, absent(k), set(k)],
            )
        };
        let mut queue: VecDeque<Queued> = [
            commit(1, "a"),
            commit(2, "b"),
            // Judges "a", which 1 sets: the next group.
            commit(3, "a"),
            // Independent of 1, 2 and 3 either way: it passes 3.
            commit(4, "c"),
            Queued {
                object: super::core::tests::name("other"),
                ..commit(5, "d")
            },
        ]
        .into();
        assert_eq!(seqs(&take_group(&mut queue, false)), [1, 2, 4, 5]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [3]);
        // Removing a key another judges, or writing data beside the omap, keeps them apart.
        let remove = omap_write(
            6,
            "index",
            vec![ObjectOp::OmapRemove {
                keys: vec![key("e")],
            }],
        );
        queue.extend([remove, commit(7, "e"), commit(8, "f")]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [6]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [7, 8]);
        queue.extend([commit(9, "g"), queued(10, "index", 1)]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [9]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [10]);
        // A write that may make the object goes before one that asserts it exists.
        queue.extend([omap_write(11, "index", vec![set("h")]), commit(12, "i")]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [11]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [12]);
        queue.extend([commit(13, "j"), omap_write(14, "index", vec![set("k")])]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [13, 14]);
        // A write passes one left behind only where neither judges what the other changes.
        let judges_p_sets_r = omap_write(
            16,
            "index",
            vec![ObjectOp::AssertExists, absent("p"), set("r")],
        );
        queue.extend([
            commit(15, "p"),
            judges_p_sets_r,
            commit(17, "r"),
            commit(18, "s"),
        ]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [15, 18]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [16]);
        assert_eq!(seqs(&take_group(&mut queue, false)), [17]);
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
