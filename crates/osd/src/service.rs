//! What an OSD serves: clients' object operations (as a PG's primary) and its peers'
//! replication and recovery requests.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::future::{AbortHandle, Abortable, Aborted, BoxFuture, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};
use map::auth::Caps;
use map::cluster::{ClusterMap, Epoch, PoolInfo, Seal, Space};
use map::placement::{OsdId, PgId};
use map::{ObjectName, ObjectRef};
use messenger::message::{
    ChunkSeal, Claim, LogEntry, ObjectOp, OpResult, OsdReply, OsdRequest, PeerOp, Replicated,
    ReqId, Version, Writers, CHUNK_BYTES,
};
use messenger::{
    CertificateDer, Data, EntityKind, EntityName, Handler, Peer, Reply, Request, SegmentCheck,
};
use std::panic::AssertUnwindSafe;
use std::task::{Context, Poll, Waker};
use store::{ReadError, Transaction, Via};
use tokio::sync::{oneshot, watch, MutexGuard};

use crate::pg::write::{Action, Event};
use crate::pg::{undo_to_drop, Core, Pg, Queued, Verdict, GROUP_STORE_OPS_MAX};
use crate::OsdState;
use crate::{erasure, objects};

#[derive(Clone)]
pub struct OsdService {
    pub inner: Arc<OsdState>,
}

fn reply(message: OsdReply) -> Reply {
    Reply::new(&message, Bytes::new())
}

/// A reply with data: open on a secure link when it is chunks sealed at the edge.
fn reply_with(message: OsdReply, data: impl Into<Data>) -> Reply {
    let segment = message.data_segment();
    Reply::with(&message, data, segment)
}

/// The reply for a read of this OSD's store that failed: the store's damage stays an
/// integrity failure on the wire, so clients and front ends can tell it from other errors.
pub(crate) fn read_failure(e: ReadError) -> OsdReply {
    match e {
        ReadError::NotFound { .. } => OsdReply::NotFound,
        e @ (ReadError::Integrity { .. } | ReadError::MetadataIntegrity { .. }) => {
            OsdReply::Integrity(e.to_string())
        }
        other => OsdReply::Failed(other.to_string()),
    }
}

/// What an accepted peer proved: the certificate it presented. Its capabilities are read from
/// the current auth table at each request ([`OsdService::caps`]), so an entity removed, or
/// given a new key, loses its access at its next request, not at its next connection.
pub struct Presented {
    cert_der: Vec<u8>,
}

impl OsdService {
    fn current_caps(&self, entity: &EntityName, cert: &[u8]) -> Result<Caps, String> {
        self.inner.auth.borrow().caps_of(entity.as_str(), cert)
    }
}

/// Who sent a request, and the capabilities it holds as the request arrives.
pub struct Caller {
    pub entity: EntityName,
    caps: Result<Caps, String>,
}

impl Caller {
    pub fn new(entity: EntityName, caps: Result<Caps, String>) -> Caller {
        Caller { entity, caps }
    }

    fn caps(&self) -> Result<Caps, OsdReply> {
        self.caps.clone().map_err(OsdReply::Denied)
    }
}

impl Handler for OsdService {
    type Grant = Presented;

    fn authorize(
        &self,
        entity: &EntityName,
        cert: &CertificateDer<'_>,
    ) -> Result<Presented, String> {
        self.current_caps(entity, cert)?;
        Ok(Presented {
            cert_der: cert.to_vec(),
        })
    }

    async fn handle(&self, peer: Arc<Peer<Presented>>, request: Request) -> Reply {
        let message = match request.decode::<OsdRequest>() {
            Ok(message) => message,
            Err(e) => return reply(OsdReply::Failed(format!("undecodable request: {e}"))),
        };
        let caps = self.current_caps(&peer.entity, &peer.grant.cert_der);
        let caller = Caller::new(peer.entity.clone(), caps);
        self.serve(&caller, message, request.data, request.check)
            .await
    }
}

impl OsdService {
    /// Serves one decoded request from `caller`.
    pub async fn serve(
        &self,
        caller: &Caller,
        message: OsdRequest,
        data: Bytes,
        check: Option<SegmentCheck>,
    ) -> Reply {
        match message {
            OsdRequest::Op {
                pg,
                epoch,
                object,
                reqid,
                ops,
            } => {
                let started = std::time::Instant::now();
                let write = ops.iter().any(ObjectOp::is_write);
                let written = data.len();
                let op = ClientOp {
                    pg,
                    object,
                    reqid,
                    ops,
                };
                let answer = self.client_op(caller, epoch, op, data, check).await;
                let took = started.elapsed();
                match answer {
                    Ok(answer) => {
                        let bytes = if write { written } else { answer.data.len() };
                        crate::metrics::client_op(pg.pool, write, bytes, took, None);
                        answer
                    }
                    Err(refusal) => {
                        crate::metrics::client_op(pg.pool, write, 0, took, Some(&refusal));
                        reply(refusal)
                    }
                }
            }
            OsdRequest::List {
                pg,
                epoch,
                after,
                limit,
            } => reply(self.client_list(caller, pg, epoch, after, limit).await),
            OsdRequest::Scrub {
                pg,
                epoch,
                after,
                repair,
            } => reply(self.scrub(caller, pg, epoch, after, repair).await),
            OsdRequest::Repair { pg, epoch, object } => {
                reply(self.read_repair(caller, pg, epoch, object).await)
            }
            OsdRequest::Peer { pg, epoch, op } => {
                let Some(from) = osd_of(&caller.entity) else {
                    return reply(OsdReply::Denied("only OSDs send peer requests".into()));
                };
                match self.peer_op(from, pg, epoch, op, data).await {
                    Ok(answer) => answer,
                    Err(why) => reply(OsdReply::Failed(why)),
                }
            }
        }
    }
}

fn osd_of(entity: &EntityName) -> Option<OsdId> {
    match entity.kind() {
        EntityKind::Osd => entity.id().parse().ok().map(OsdId),
        _ => None,
    }
}

/// A write checked and built: this OSD's transaction (its log entry is added once its
/// group closes); for an erasure-coded PG each other holder's shard write, the version up
/// to which the holders drop their undo records, and this OSD's writers once the write is
/// applied, if they change.
struct Prepared {
    txn: Transaction,
    shards: BTreeMap<OsdId, (PeerOp, Bytes)>,
    complete_to: Option<Version>,
    writers: Option<Writers>,
}

struct ClientOp {
    pg: PgId,
    object: ObjectName,
    reqid: ReqId,
    ops: Vec<ObjectOp>,
}

/// The refusal of a read, in a read-only PG, of an object whose newest write (at
/// `version`) is not known to be on min_size shards: the client asks again.
fn not_yet_complete(op: &ClientOp, version: Version) -> OsdReply {
    OsdReply::Busy(format!(
        "pg {}.{} is read-only, and {}'s last write ({}.{}) is not known to be on min_size \
         shards: it is read once the PG takes writes again",
        op.pg.pool, op.pg.number, op.object, version.epoch, version.seq
    ))
}

/// In a pool sealed at the edge, data moves only as sealed chunks: plaintext data ops are
/// refused, so a client that does not seal cannot hand a daemon plaintext by mistake. In
/// other pools, chunk ops are refused.
fn check_seal(pool: &PoolInfo, ops: &[ObjectOp]) -> Result<(), OsdReply> {
    let edge = matches!(pool.seal, Seal::Edge { .. });
    for op in ops {
        if matches!(op, ObjectOp::WriteChunks { seals, .. } if seals.is_empty()) {
            return Err(OsdReply::Failed(
                "a chunk write (WriteChunks) carries at least one chunk".into(),
            ));
        }
        // An erasure-coded pool codes a hole's record as zeros (docs/design/erasure.md §11);
        // no client seals a chunk so.
        let zero = ChunkSeal::from_bytes(&[0; messenger::message::CHUNK_SEAL_BYTES]);
        if matches!(op, ObjectOp::WriteChunks { seals, .. } if seals.contains(&zero)) {
            return Err(OsdReply::Failed(
                "a chunk write carries a seal record of zeros, which stands for a hole".into(),
            ));
        }
        let refused = match op {
            ObjectOp::Write { .. } | ObjectOp::WriteFull { .. } | ObjectOp::Read { .. } => edge,
            ObjectOp::Zero { offset, len } => {
                edge && !(offset.is_multiple_of(CHUNK_BYTES) && len.is_multiple_of(CHUNK_BYTES))
            }
            ObjectOp::WriteChunks { .. }
            | ObjectOp::ReadChunks { .. }
            | ObjectOp::AssertChunk { .. } => !edge,
            _ => false,
        };
        if refused && edge {
            return Err(OsdReply::Failed(format!(
                "pool {} is sealed at the edge: its data is written and read only as chunks \
                 the client seals (whole 4 KiB chunks), not as plaintext ({op:?} refused)",
                pool.name
            )));
        }
        if refused {
            return Err(OsdReply::Failed(format!(
                "pool {} is not sealed at the edge; chunk ops are for edge-sealed pools",
                pool.name
            )));
        }
    }
    Ok(())
}

impl OsdService {
    /// Checks that this OSD leads `pg` in a map at least as new as the client's, and that the
    /// client may touch its pool; the map on success.
    async fn check_primary(
        &self,
        caller: &Caller,
        pg: PgId,
        epoch: Epoch,
        write: bool,
    ) -> Result<Arc<ClusterMap>, OsdReply> {
        let map = self.inner.map_at_least(epoch).await;
        let Some(pool) = map.pools.get(&pg.pool) else {
            return Err(OsdReply::Retry {
                epoch: map.epoch,
                why: format!("pool {} does not exist", pg.pool),
            });
        };
        if !caller.caps()?.osd_allows(&pool.name, write) {
            let access = if write { "write" } else { "read" };
            return Err(OsdReply::Denied(format!(
                "{} may not {access} pool {}",
                caller.entity, pool.name
            )));
        }
        if pg.number >= pool.pg_num {
            return Err(OsdReply::Retry {
                epoch: map.epoch,
                why: format!("pool {} has {} PGs", pool.name, pool.pg_num),
            });
        }
        let primary = map.acting(pool, pg).first().copied();
        if primary != Some(self.inner.id) {
            return Err(OsdReply::Retry {
                epoch: map.epoch,
                why: format!(
                    "osd.{} is not the primary of pg {}.{} at epoch {}",
                    self.inner.id.0, pg.pool, pg.number, map.epoch
                ),
            });
        }
        Ok(map)
    }

    async fn client_op(
        &self,
        caller: &Caller,
        epoch: Epoch,
        op: ClientOp,
        data: Bytes,
        check: Option<SegmentCheck>,
    ) -> Result<Reply, OsdReply> {
        if op.ops.is_empty() {
            return Err(OsdReply::Failed("a request needs at least one op".into()));
        }
        let write = op.ops.iter().any(ObjectOp::is_write);
        if write && op.ops.iter().any(|o| !o.is_write()) {
            return Err(OsdReply::Failed(
                "reads and writes cannot share one request".into(),
            ));
        }
        if op.ops.iter().all(ObjectOp::is_condition) {
            return Err(OsdReply::Failed(
                "a request of conditions alone changes nothing".into(),
            ));
        }
        let map = self.check_primary(caller, op.pg, epoch, write).await?;
        let pool = map
            .pools
            .get(&op.pg.pool)
            .ok_or_else(|| OsdReply::Failed("pool vanished".into()))?;
        check_seal(pool, &op.ops)?;
        if map.pg_of(pool, &op.object) != op.pg {
            return Err(OsdReply::Failed(format!(
                "object {} is not in pg {}.{}",
                op.object, op.pg.pool, op.pg.number
            )));
        }
        let pg = self.inner.pg(op.pg);
        if write {
            pg.wait_active().await.map_err(OsdReply::Busy)?;
            return self.write(op, data, check).await.map(reply);
        }
        pg.wait_readable().await.map_err(OsdReply::Busy)?;
        if pool.erasure.is_some() {
            let (results, bytes) = self.read_shards(&op).await?;
            return Ok(reply_with(OsdReply::Results(results), Bytes::from(bytes)));
        }
        let (results, bytes) = match self.read(&op).await? {
            Err(e @ (ReadError::Integrity { .. } | ReadError::MetadataIntegrity { .. })) => {
                // This copy is damaged: replace it from a good one and read again.
                let why = e.to_string();
                tracing::warn!(object = %op.object, error = %why, "read repair");
                match crate::scrub::repair_object(&self.inner, op.pg, op.object.clone(), false)
                    .await?
                {
                    Some(finding) if finding.repaired => self.read(&op).await?,
                    Some(finding) => {
                        return Err(OsdReply::Integrity(format!("{why}; {}", finding.what)))
                    }
                    None => Err(e),
                }
            }
            read => read,
        }
        .map_err(read_failure)?;
        Ok(reply_with(OsdReply::Results(results), bytes))
    }

    /// The read ops of `op` on this OSD's copy: their results and the bytes read.
    async fn read(
        &self,
        op: &ClientOp,
    ) -> Result<Result<(Vec<OpResult>, Data), ReadError>, OsdReply> {
        let object = objects::object_ref(op.pg, &op.object);
        let at = object.clone();
        let ops = op.ops.clone();
        let read = move |store: &store::Store| objects::read_ops(store, &object, &ops);
        let read = match objects::is_small_read(&op.ops) {
            true => {
                let reads_data = objects::reads_data(&op.ops);
                self.inner.small_read(&at, reads_data, read).await
            }
            false => self.inner.blocking(read).await,
        };
        read.map_err(OsdReply::Failed)
    }

    /// The read ops of `op` on an erasure-coded object, gathered from its shards. A write in
    /// flight changes the shards one holder at a time, so the PG's lock is taken first:
    /// with no write in flight, an active PG's holders and newest version are noted and the
    /// lock let go, so reads run beside each other and beside the next write. A read that
    /// finds a shard or the object's head moved past the noted version (a write began
    /// since) is read again under the lock, as are one that found a damaged shard (to
    /// repair it), one that found no shard here (a remove may be in flight) and every read
    /// of a PG that is not active.
    async fn read_shards(&self, op: &ClientOp) -> Result<(Vec<OpResult>, Vec<u8>), OsdReply> {
        let pg = self.inner.pg(op.pg);
        let mut core = pg.core.lock().await;
        if pg.serving.borrow().is_active() {
            let shards = self.shards(&core, op.pg)?.beside_writes();
            let newest = core.info.last;
            drop(core);
            let read = shards.read_ops(&op.object, &op.ops, Some(newest)).await;
            let raced = shards.raced() || matches!(read, Ok(Err(_written_since)));
            if raced {
                crate::metrics::shard_read_again();
            } else if !shards.found_damage() {
                match read {
                    Ok(Ok(read)) => return Ok(read),
                    // No shard here: the object may be a remove in flight.
                    Err(OsdReply::NotFound) | Ok(Err(_)) => {}
                    Err(refusal) => return Err(refusal),
                }
            }
            core = pg.core.lock().await;
        }
        if !pg.serving.borrow().serves_reads() {
            return Err(OsdReply::Busy(format!(
                "pg {}.{} stopped serving; ask again",
                op.pg.pool, op.pg.number
            )));
        }
        let shards = self.shards(&core, op.pg)?;
        // Read-only: writes above what min_size holders are known to have applied may be
        // rolled back by the next peering, so their objects are not read until then.
        let complete = if pg.serving.borrow().is_active() {
            None
        } else {
            if let Some(version) = core.not_known_complete(&op.object) {
                return Err(not_yet_complete(op, version));
            }
            Some(core.readable_to())
        };
        let read = match shards.read_ops(&op.object, &op.ops, complete).await? {
            Ok(read) => read,
            Err(version) => return Err(not_yet_complete(op, version)),
        };
        if !shards.found_damage() {
            return Ok(read);
        }
        // A damaged shard was decoded around: rebuild it on its holder from the others.
        let claim = Claim {
            interval: core.interval.epoch,
            token: core.draw_token(),
        };
        let pg = format!("{}.{}", op.pg.pool, op.pg.number);
        for (holder, repaired) in shards.repair(&op.object, claim).await {
            let (object, osd) = (&op.object, holder.0);
            match repaired {
                Ok(()) => {
                    self.inner.read_repairs.fetch_add(1, Ordering::Relaxed);
                    crate::metrics::read_repaired();
                    tracing::info!(%pg, %object, osd, "read repair: shard rebuilt from the others");
                }
                Err(why) => {
                    tracing::warn!(%pg, %object, osd, %why, "read repair: shard not rebuilt");
                }
            }
        }
        Ok(read)
    }

    /// Where the shards of an erasure-coded PG this OSD leads are, as it peered them.
    fn shards(&self, core: &Core, pg: PgId) -> Result<erasure::Shards<'_>, OsdReply> {
        let profile = core.interval.erasure.ok_or_else(|| {
            OsdReply::Busy(format!(
                "pg {}.{} was peered before its pool's code was known; ask again",
                pg.pool, pg.number
            ))
        })?;
        let holders = core.interval.shard_holders(self.inner.id);
        Ok(erasure::Shards::new(&self.inner, pg, profile, holders))
    }

    /// Read repair asked by a client that could not open the primary's copy of `object`.
    async fn read_repair(
        &self,
        caller: &Caller,
        pg: PgId,
        epoch: Epoch,
        object: ObjectName,
    ) -> OsdReply {
        let map = match self.check_primary(caller, pg, epoch, false).await {
            Ok(map) => map,
            Err(refusal) => return refusal,
        };
        if map.pools.get(&pg.pool).map(|pool| map.pg_of(pool, &object)) != Some(pg) {
            return OsdReply::Failed(format!(
                "object {object} is not in pg {}.{}",
                pg.pool, pg.number
            ));
        }
        if let Some(refusal) = self.no_read_repair(pg) {
            return refusal;
        }
        tracing::warn!(%object, "read repair: a client could not open this OSD's copy");
        crate::scrub::repair_object(&self.inner, pg, object, true)
            .await
            .map_or_else(|refusal| refusal, OsdReply::Repaired)
    }

    /// Queues a write in its PG and waits for its answer. The writer that takes the PG's
    /// lock next leads: it takes the writes queued as one group ([`Pg::next_group`]) and
    /// carries it through ([`OsdService::write_group`]); one whose own write is still
    /// queued after that leads again.
    async fn write(
        &self,
        op: ClientOp,
        data: Bytes,
        check: Option<SegmentCheck>,
    ) -> Result<OsdReply, OsdReply> {
        let pg = self.inner.pg(op.pg);
        let (answer, mut answered) = oneshot::channel();
        let meta_bytes = postcard::ser_flavors::Size::default();
        let meta_bytes = postcard::serialize_with_flavor(&op.ops, meta_bytes).unwrap_or(usize::MAX);
        pg.queue_write(Queued {
            reqid: op.reqid,
            object: op.object,
            store_ops: objects::store_ops(&op.ops),
            ops: op.ops,
            meta_bytes,
            data,
            check,
            answer,
        });
        loop {
            let core = tokio::select! {
                biased;
                answer = &mut answered => {
                    return answer.unwrap_or_else(|_| {
                        Err(OsdReply::Busy(format!(
                            "pg {}.{}: the write's group ended without its answer; ask again",
                            op.pg.pool, op.pg.number
                        )))
                    });
                }
                core = pg.core.lock() => core,
            };
            // A coded PG's write goes alone: its holders take one shard write at a time.
            let group = pg.next_group(core.interval.erasure.is_some());
            self.write_group(&pg, core, group).await;
        }
    }

    /// Orders the writes of `group` in their PG, applies them here and on every clean
    /// replica in one transaction each, and answers each once all of them (and at least
    /// min_size copies) have it: the PG's core decides (pg/write.rs), this carries out its
    /// actions under the PG's lock. A write alone goes to the replicas with the `check` its
    /// chunks sealed at the edge arrived with.
    async fn write_group(&self, pg: &Arc<Pg>, mut core: MutexGuard<'_, Core>, group: Vec<Queued>) {
        let inner = &self.inner;
        let mut group = group.into_iter();
        let mut answers = HashMap::new();
        // The write being ordered, and those prepared, in version order.
        let mut current = None;
        let mut prepared: Vec<(ClientOp, Bytes, Option<SegmentCheck>)> = Vec::new();
        let mut entries = Vec::new();
        let mut txn = Transaction::new();
        let mut shards = BTreeMap::new();
        let mut complete_to = None;
        let mut writers = None;
        // Whether this shell has started a group in the core: its first write starts one
        // (and so finds a group a panicked shell left), the others join it.
        let mut started = false;
        let mut closed = false;
        let mut sent = None;
        let mut replicas = Replicas::new(inner);
        let mut actions = VecDeque::new();
        loop {
            let Some(action) = actions.pop_front() else {
                let event = if closed {
                    if !core.writing() {
                        return;
                    }
                    let (osd, answer) = replicas
                        .next()
                        .await
                        .expect("the core answers once every replica has");
                    match answer {
                        Ok(()) => Event::ReplicaDone(osd),
                        Err(why) => {
                            crate::metrics::replica_missed();
                            tracing::warn!(osd = osd.0, %why, "replica missed a write; recovering it");
                            Event::ReplicaMissed(osd)
                        }
                    }
                } else if let Some(write) = group.next() {
                    if !pg.serving.borrow().is_active() {
                        let _ = write.answer.send(Err(OsdReply::Busy(format!(
                            "pg {}.{} stopped serving; ask again",
                            pg.id.pool, pg.id.number
                        ))));
                        continue;
                    }
                    let (reqid, object) = (write.reqid, write.object.clone());
                    let blocklisted = inner.map.borrow().blocklist.contains(&reqid.client);
                    answers.insert(reqid, write.answer);
                    let op = ClientOp {
                        pg: pg.id,
                        object: write.object,
                        reqid,
                        ops: write.ops,
                    };
                    current = Some((op, write.data, write.check));
                    if std::mem::replace(&mut started, true) && core.writing() {
                        Event::Join {
                            reqid,
                            object,
                            blocklisted,
                        }
                    } else {
                        Event::Write {
                            reqid,
                            object,
                            blocklisted,
                        }
                    }
                } else {
                    closed = true;
                    if !started || !core.writing() {
                        return;
                    }
                    let trim = match entries.is_empty() {
                        true => 0,
                        false => {
                            crate::metrics::write_group(entries.len());
                            objects::log_append(
                                &mut txn,
                                pg.id,
                                &entries,
                                (&core.log, core.log_bytes),
                            )
                        }
                    };
                    sent = Some(replica_data(&prepared));
                    Event::Close { trim }
                };
                actions.extend(core.on_write(pg.announced(), event));
                continue;
            };
            let event = match action {
                Action::Prepare(entry) => {
                    let (op, data, check) = current.take().expect("the write ordered last");
                    let made = if core.interval.erasure.is_some() {
                        self.prepare_shards(&op, &data, &entry, &core).await
                    } else {
                        self.prepare(&op, &data, &entry).await
                    };
                    let made = made.and_then(within_store_limits);
                    Event::Prepared(made.map(|made| {
                        txn.append(made.txn);
                        shards = made.shards;
                        complete_to = made.complete_to;
                        writers = made.writers;
                        entries.push(entry);
                        prepared.push((op, data, check));
                    }))
                }
                Action::Replicate { to, entries } => {
                    let (peer_op, data, check) = match shards.remove(&to) {
                        Some((shard_op, shard_data)) => (shard_op, shard_data, None),
                        // A clean holder with no position: it is sent nothing a copy of
                        // the object would make a wrong shard of.
                        None if core.interval.erasure.is_some() => {
                            actions.extend(core.on_write(pg.announced(), Event::ReplicaMissed(to)));
                            continue;
                        }
                        None => {
                            let writes = entries
                                .into_iter()
                                .zip(&prepared)
                                .map(|(entry, (op, data, _))| {
                                    assert_eq!(
                                        entry.reqid, op.reqid,
                                        "the writes prepared, in order"
                                    );
                                    Replicated {
                                        entry,
                                        ops: op.ops.clone(),
                                        len: data.len() as u64,
                                    }
                                })
                                .collect();
                            let (data, check) = sent.clone().expect("sent once closed");
                            (PeerOp::Replicate { writes }, data, check)
                        }
                    };
                    let request = OsdRequest::Peer {
                        pg: pg.id,
                        epoch: inner.map.borrow().epoch,
                        op: peer_op,
                    };
                    replicas.send(to, request, data, check);
                    continue;
                }
                Action::Apply => {
                    let sends_waiting = replicas.sends_waiting();
                    let applied = inner
                        .apply_after_sends(std::mem::take(&mut txn), sends_waiting)
                        .await;
                    if let (Ok(()), Some(complete_to)) = (&applied, complete_to) {
                        core.undo_dropped = core.undo_dropped.max(complete_to);
                        core.position = core.position_of(inner.id);
                        if let Some(writers) = writers.take() {
                            core.writers = writers;
                        }
                    }
                    Event::Applied(applied)
                }
                Action::Recover { target, token } => {
                    crate::recovery::spawn_recovery(inner, pg.id, target, token);
                    continue;
                }
                Action::Repeer => {
                    inner.spawn(crate::recovery::peer(inner.clone(), pg.id));
                    continue;
                }
                Action::Publish { interval, state } => {
                    pg.publish_state(interval, state);
                    continue;
                }
                Action::Reply { reqid, reply } => {
                    if matches!(reply, Ok(OsdReply::Written { .. })) {
                        crate::recovery::note_complete(inner, pg, &core);
                    }
                    if let Some(answer) = answers.remove(&reqid) {
                        let _ = answer.send(reply);
                    }
                    continue;
                }
            };
            actions.extend(core.on_write(pg.announced(), event));
        }
    }

    /// Checks a write ordered as `entry` (space, conditions, the tail of sealed chunks) and
    /// builds its transaction; `write_group` then checks it against the store's limits
    /// ([`within_store_limits`]).
    async fn prepare(
        &self,
        op: &ClientOp,
        data: &Bytes,
        entry: &LogEntry,
    ) -> Result<Prepared, OsdReply> {
        let object = self.check_write(op.pg, &op.object, &op.ops).await?;
        if self.inner.pool_is_edge(op.pg.pool) {
            self.check_sealed_tail(&object, &op.ops).await?;
        }
        let mut txn = Transaction::new();
        objects::build_write(&mut txn, &object, &op.ops, data, entry.version)
            .map_err(OsdReply::Failed)?;
        Ok(Prepared {
            txn,
            shards: BTreeMap::new(),
            complete_to: None,
            writers: None,
        })
    }

    /// Checks the room and conditions of a write of `ops` to `object` in `pg`; the object
    /// it writes.
    async fn check_write(
        &self,
        pg: PgId,
        object: &ObjectName,
        ops: &[ObjectOp],
    ) -> Result<ObjectRef, OsdReply> {
        if ops.iter().any(ObjectOp::writes_data) {
            self.check_space(pg)?;
        } else if ops.iter().any(ObjectOp::adds_metadata) {
            self.check_room(pg)?;
        }
        let object = objects::object_ref(pg, object);
        self.check_conditions(&object, ops).await?;
        Ok(object)
    }

    /// [`OsdService::prepare`] for an erasure-coded PG: plans the write (`ec::plan`), reads
    /// the old shard bytes it needs, encodes, and builds this OSD's shard transaction and
    /// each other holder's shard write (docs/design/erasure.md, §6).
    async fn prepare_shards(
        &self,
        op: &ClientOp,
        data: &Bytes,
        entry: &LogEntry,
        core: &Core,
    ) -> Result<Prepared, OsdReply> {
        let pool = self
            .inner
            .map
            .borrow()
            .pools
            .get(&op.pg.pool)
            .map(|p| p.name.clone())
            .unwrap_or_default();
        let edge = self.inner.pool_is_edge(op.pg.pool);
        let steps = if edge {
            erasure::check_edge_ops(&pool, &op.ops)?;
            erasure::edge_steps(&op.ops)
        } else {
            None
        };
        // A request that changes chunks is planned by rows (`EdgePlan`, below); any other,
        // by its one change.
        let change = match steps {
            Some(_) => erasure::DataChange::None,
            None => erasure::data_change(&pool, &op.ops)?,
        };
        // A chunk's record is on its data shard's holder, not necessarily here.
        let local: Vec<ObjectOp> = op
            .ops
            .iter()
            .filter(|o| !matches!(o, ObjectOp::AssertChunk { .. }))
            .cloned()
            .collect();
        self.check_write(op.pg, &op.object, &local).await?;
        let shards = self.shards(core, op.pg)?;
        let profile = shards.profile;
        let head = shards.own_head(&op.object).await?.map(|(head, _)| head);
        let old_size = head.map_or(0, |h| h.size);
        let attrs: Vec<ObjectOp> = op
            .ops
            .iter()
            .filter(|o| {
                matches!(
                    o,
                    ObjectOp::Create { .. }
                        | ObjectOp::SetAttr { .. }
                        | ObjectOp::RemoveAttr { .. }
                )
            })
            .cloned()
            .collect();
        if edge {
            let plan = match &steps {
                Some(steps) => Some(erasure::EdgePlan::new(profile, old_size, steps)?),
                None => None,
            };
            let tails = plan.as_ref().map_or(&[][..], |plan| plan.tails());
            shards
                .check_chunks(&op.object, head, &op.ops, tails)
                .await?;
            if let Some(plan) = plan {
                return self
                    .prepare_edge(op, data, entry, core, &shards, head, plan, &attrs)
                    .await;
            }
        }
        let (written, size) = match change {
            erasure::DataChange::None => (Vec::new(), old_size),
            erasure::DataChange::Remove => (Vec::new(), 0),
            erasure::DataChange::Full { len } if len != data.len() as u64 => {
                return Err(OsdReply::Failed(format!(
                    "{} data bytes sent, the ops use {len}",
                    data.len()
                )))
            }
            erasure::DataChange::Full { len } => (erasure::encode_whole(profile, data)?, len),
            range => {
                let written = match range.written(profile, old_size) {
                    None => Vec::new(),
                    Some((offset, len)) => {
                        let plan = ec::plan(profile, old_size, offset, len)
                            .map_err(|e| OsdReply::Failed(e.to_string()))?;
                        let pieces = plan.reads();
                        let reads = match head {
                            Some(head) if !pieces.is_empty() => {
                                shards.read(&op.object, head.version, &pieces).await?
                            }
                            _ => Vec::new(),
                        };
                        let zeros;
                        let bytes = match range {
                            erasure::DataChange::Range { .. } => &data[..],
                            _ => {
                                zeros = vec![0u8; len as usize];
                                &zeros[..]
                            }
                        };
                        let changed = plan
                            .apply(&mut ec::Coder::new(profile), bytes, &reads)
                            .map_err(|e| OsdReply::Failed(e.to_string()))?;
                        plan.writes().into_iter().zip(changed).collect()
                    }
                };
                (written, range.new_size(old_size))
            }
        };
        let writes = erasure::shard_writes(profile, change, &attrs, written);
        self.prepare_shard_writes(op, entry, core, &shards, writes, size)
            .await
    }

    /// [`OsdService::prepare_shards`] for a pool sealed at the edge, once `plan` is made and
    /// the chunk conditions hold: reads the old chunks its rows need, with their records,
    /// and builds each shard's part (docs/design/erasure.md, §11).
    #[allow(clippy::too_many_arguments)]
    async fn prepare_edge(
        &self,
        op: &ClientOp,
        data: &Bytes,
        entry: &LogEntry,
        core: &Core,
        shards: &erasure::Shards<'_>,
        head: Option<messenger::message::ShardHead>,
        plan: erasure::EdgePlan,
        attrs: &[ObjectOp],
    ) -> Result<Prepared, OsdReply> {
        let pieces = plan.reads();
        let old = match head {
            Some(head) if !pieces.is_empty() => {
                shards
                    .read_sealed(&op.object, head.version, &pieces)
                    .await?
            }
            _ => Vec::new(),
        };
        let writes = plan.shard_writes(attrs, data, old)?;
        self.prepare_shard_writes(op, entry, core, shards, writes, plan.size())
            .await
    }

    /// This OSD's shard transaction of a write ordered as `entry`, which leaves the object
    /// `size` bytes, and each other holder's shard write, from each shard's part `writes`.
    async fn prepare_shard_writes(
        &self,
        op: &ClientOp,
        entry: &LogEntry,
        core: &Core,
        shards: &erasure::Shards<'_>,
        writes: Vec<erasure::ShardWrite>,
        size: u64,
    ) -> Result<Prepared, OsdReply> {
        let object = objects::object_ref(op.pg, &op.object);
        let complete_to = core.info.last;
        let drops = undo_to_drop(&core.log, core.undo_dropped, complete_to);
        let mut txn = Transaction::new();
        if complete_to > core.undo_dropped {
            objects::set_complete(&mut txn, op.pg, complete_to);
        }
        let writers = core.writers_with(entry.version.epoch, &shards.holders);
        if let Some(writers) = &writers {
            objects::set_writers(&mut txn, op.pg, writers);
        }
        let mut peers = BTreeMap::new();
        for (position, (holder, write)) in shards.holders.iter().zip(writes).enumerate() {
            let Some(holder) = *holder else { continue };
            let shard = u8::try_from(position).expect("at most 32 shards");
            if holder == self.inner.id {
                objects::build_shard(
                    &mut txn,
                    op.pg,
                    &object,
                    &write.ops,
                    &Bytes::from(write.data),
                    entry.version,
                    shard,
                    size,
                    &drops,
                )
                .map_err(OsdReply::Failed)?;
            } else {
                let peer_op = PeerOp::Shard {
                    entry: entry.clone(),
                    shard,
                    size,
                    complete_to,
                    holders: shards.holders.clone(),
                    ops: write.ops,
                };
                peers.insert(holder, (peer_op, Bytes::from(write.data)));
            }
        }
        Ok(Prepared {
            txn,
            shards: peers,
            complete_to: Some(complete_to),
            writers,
        })
    }

    /// Refuses a write that may take space when an OSD of the PG is marked full in the map,
    /// or when this OSD is full by its own look (its store past the full ratio, or the file
    /// system under it short of room: the mark follows its beacon).
    fn check_space(&self, id: PgId) -> Result<(), OsdReply> {
        let map = self.inner.map.borrow().clone();
        let Some(pool) = map.pools.get(&id.pool) else {
            return Ok(());
        };
        if let Some(why) = map.full_refusal(pool, id) {
            return Err(OsdReply::Full(why));
        }
        let usage = usage(&self.inner.store.statfs());
        if map.space_ratios.judge(&usage) == Space::Full {
            return Err(OsdReply::Full(format!(
                "pool {} is full: osd.{}, the primary of pg {}.{}, has {}; free space, and \
                 writes resume by themselves",
                pool.name,
                self.inner.id.0,
                id.pool,
                id.number,
                map.space_ratios.explain(&usage)
            )));
        }
        Ok(())
    }

    /// Refuses a write of metadata while the file system under this OSD's store is short of
    /// room: the metadata database grows there, and a commit that meets a full file system
    /// stops the OSD. (A store whose data area is full still takes metadata writes.)
    fn check_room(&self, id: PgId) -> Result<(), OsdReply> {
        let usage = usage(&self.inner.store.statfs());
        if !usage.host_full() {
            return Ok(());
        }
        let map = self.inner.map.borrow().clone();
        let pool = map.pools.get(&id.pool).map_or("?", |p| p.name.as_str());
        Err(OsdReply::Full(format!(
            "pool {pool} is full: osd.{}, the primary of pg {}.{}, has {}; only removals go \
             through until there is room",
            self.inner.id.0,
            id.pool,
            id.number,
            map.space_ratios.explain(&usage)
        )))
    }

    /// Refuses a write whose conditions do not hold in the store, an exclusive create of an
    /// object that exists and a removal of one that does not. Runs under the PG's lock, so
    /// nothing changes the object between the check and the write.
    async fn check_conditions(&self, object: &ObjectRef, ops: &[ObjectOp]) -> Result<(), OsdReply> {
        let first = ops.iter().find(|o| !o.is_condition());
        let needs_state = ops.iter().any(ObjectOp::is_condition)
            || matches!(
                first,
                Some(ObjectOp::Remove | ObjectOp::Create { exclusive: true })
            );
        if !needs_state {
            return Ok(());
        }
        let attrs = self.inner.attrs_if_any(object.clone()).await?;
        for op in ops {
            match op {
                ObjectOp::AssertExists if attrs.is_none() => return Err(OsdReply::NotFound),
                ObjectOp::AssertAttr { name, value } => {
                    objects::check_attr_name(name).map_err(OsdReply::Failed)?;
                    let found = attrs.as_ref().and_then(|attrs| attrs.get(name));
                    if found != value.as_ref() {
                        return Err(OsdReply::Mismatch(format!(
                            "attribute {name:?} of {} is not as the request expects",
                            object.name
                        )));
                    }
                }
                ObjectOp::AssertChunk { index, seal } => {
                    let probe = object.clone();
                    let index = *index;
                    let found = self
                        .inner
                        .blocking(move |store| match store.read_sealed(&probe, index, 1) {
                            Ok(read) => Ok(read.chunks[0].map(objects::seal_of)),
                            Err(ReadError::NotFound { .. }) => Ok(None),
                            Err(e) => Err(e),
                        })
                        .await
                        .map_err(OsdReply::Failed)?
                        .map_err(read_failure)?;
                    if found != *seal {
                        return Err(OsdReply::Mismatch(format!(
                            "chunk {index} of {} changed since it was read",
                            object.name
                        )));
                    }
                }
                ObjectOp::AssertOmap { key, value } => {
                    let probe = object.clone();
                    let key = key.clone();
                    let found = self
                        .inner
                        .blocking(move |store| match store.omap_get(&probe, &key) {
                            Err(ReadError::NotFound { .. }) => Ok(None),
                            found => found,
                        })
                        .await
                        .map_err(OsdReply::Failed)?
                        .map_err(read_failure)?;
                    if found != *value {
                        return Err(OsdReply::Mismatch(format!(
                            "an omap entry of {} is not as the request expects",
                            object.name
                        )));
                    }
                }
                _ => {}
            }
        }
        match first {
            Some(ObjectOp::Create { exclusive: true }) if attrs.is_some() => Err(OsdReply::Exists),
            Some(ObjectOp::Remove) if attrs.is_none() => Err(OsdReply::NotFound),
            _ => Ok(()),
        }
    }

    /// The store refuses to grow an object past a partial last chunk sealed at the edge
    /// unless the same write replaces that chunk (its bytes past the old size are the
    /// client's to zero). Checked here, under the PG's lock, so the client learns it
    /// (`Mismatch`) and rewrites the chunk, instead of the write failing once ordered.
    async fn check_sealed_tail(
        &self,
        object: &ObjectRef,
        ops: &[ObjectOp],
    ) -> Result<(), OsdReply> {
        if !ops
            .iter()
            .any(|op| op.writes_data() || matches!(op, ObjectOp::Zero { .. }))
        {
            return Ok(());
        }
        // The size is one record from redb's cache, read here: a blocking thread's
        // wake-up would cost more, on every edge write. Reading the tail chunk goes to the
        // device, so it does take one, and only when the object ends inside a chunk.
        let size = match self.inner.store.stat(object) {
            Ok(stat) => stat.size_bytes,
            Err(ReadError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(read_failure(e)),
        };
        let Some(tail) = objects::unreplaced_tail(ops, size) else {
            return Ok(());
        };
        let probe = object.clone();
        let sealed = self
            .inner
            .blocking(move |store| store.read_sealed(&probe, tail, 1))
            .await
            .map_err(OsdReply::Failed)?
            .map_err(read_failure)?
            .chunks[0]
            .is_some();
        if !sealed {
            return Ok(());
        }
        Err(objects::tail_not_replaced(&object.name, tail))
    }

    async fn client_list(
        &self,
        caller: &Caller,
        pg: PgId,
        epoch: Epoch,
        after: Option<ObjectName>,
        limit: u32,
    ) -> OsdReply {
        if let Err(refusal) = self.check_primary(caller, pg, epoch, false).await {
            return refusal;
        }
        let held = self.inner.pg(pg);
        if let Err(why) = held.wait_readable().await {
            return OsdReply::Busy(why);
        }
        if !held.serving.borrow().is_active() {
            if let Some(last) = held.core.lock().await.unknown_complete_tail() {
                return OsdReply::Busy(format!(
                    "pg {}.{} is read-only, and its writes up to {}.{} are not known to be on \
                     min_size shards: it is listed once the PG takes writes again",
                    pg.pool, pg.number, last.epoch, last.seq
                ));
            }
        }
        match self.inner.page(pg, after, limit, None).await {
            Ok((entries, more)) => OsdReply::Listing {
                names: entries.into_iter().map(|(name, _)| name).collect(),
                more,
            },
            Err(why) => OsdReply::Failed(why),
        }
    }

    /// The refusal of a client's read repair in an erasure-coded PG sealed by its OSDs: its
    /// primary's reads check and repair the shards themselves (docs/design/erasure.md, §8).
    /// In one sealed at the edge only a client can tell that a chunk was altered: its read
    /// repair has the primary encode the object's shards again, as scrub does, and rebuild
    /// the one found bad (§11).
    fn no_read_repair(&self, pg: PgId) -> Option<OsdReply> {
        let sealed_here = !self.inner.pool_is_edge(pg.pool);
        (self.inner.pool_erasure(pg.pool).is_some() && sealed_here).then(|| {
            OsdReply::Failed(format!(
                "pg {}.{} is erasure-coded: its reads repair the shards they find damaged",
                pg.pool, pg.number
            ))
        })
    }

    /// One page of an operator's scrub of `pg`: needs `mon=rw` (it is an operator's
    /// command, and it makes every OSD of the PG read its copies), and `osd=rw` to repair.
    async fn scrub(
        &self,
        caller: &Caller,
        pg: PgId,
        epoch: Epoch,
        after: Option<ObjectName>,
        repair: bool,
    ) -> OsdReply {
        let caps = match caller.caps() {
            Ok(caps) => caps,
            Err(refusal) => return refusal,
        };
        if !caps.mon_allows(true) {
            return OsdReply::Denied(format!(
                "{} may not scrub: scrub is an operator's command (mon=rw)",
                caller.entity
            ));
        }
        if let Err(refusal) = self.check_primary(caller, pg, epoch, repair).await {
            return refusal;
        }
        match crate::scrub::page(&self.inner, pg, after, repair).await {
            Ok(page) => {
                crate::metrics::scrubbed(&page);
                OsdReply::Scrubbed(page)
            }
            Err(refusal) => refusal,
        }
    }

    /// Requests from the primary of `pg`; `epoch` is the primary's map.
    async fn peer_op(
        &self,
        from: OsdId,
        id: PgId,
        epoch: Epoch,
        op: PeerOp,
        data: Bytes,
    ) -> Result<Reply, String> {
        let inner = &self.inner;
        sender_is_primary(&*inner.map_at_least(epoch).await, from, id)?;
        let pg = inner.pg(id);
        match op {
            PeerOp::Query { claim } => {
                let mut core = pg.core.lock().await;
                inner.load(&mut core, id).await?;
                core.admit(claim)?;
                let catching_up = core.unsettled || core.position == Some(objects::MIXED_POSITIONS);
                let held = match inner.pool_erasure(id.pool) {
                    Some(_) if catching_up => {
                        let (pg_num, above) = (inner.pg_num(id)?, core.undo_dropped);
                        inner
                            .blocking(move |store| objects::shards_above(store, id, pg_num, above))
                            .await?
                            .map_err(|e| e.to_string())?
                    }
                    _ => Vec::new(),
                };
                Ok(reply(OsdReply::Info {
                    info: core.info,
                    log: core.log.iter().cloned().collect(),
                    unsettled: core.unsettled,
                    position: core.position,
                    held,
                    writers: core.writers.clone(),
                    complete: core.readable_to(),
                }))
            }
            PeerOp::Replicate { writes } => {
                let handled = std::time::Instant::now();
                let writes = split_group(writes, &data)?;
                let entries: Vec<LogEntry> =
                    writes.iter().map(|(entry, ..)| entry.clone()).collect();
                let Some(mut core) = self.replica_core(&pg, from, &entries).await? else {
                    return Ok(reply(OsdReply::Done));
                };
                let mut txn = Transaction::new();
                for (entry, ops, data) in &writes {
                    let object = objects::object_ref(id, &entry.object);
                    objects::build_write(&mut txn, &object, ops, data, entry.version)?;
                }
                let mut trim =
                    objects::log_append(&mut txn, id, &entries, (&core.log, core.log_bytes));
                inner.apply_here(txn).await?;
                crate::metrics::replicated(entries.len(), data.len(), handled.elapsed());
                for entry in entries {
                    core.note_logged(entry, trim);
                    trim = 0;
                }
                Ok(reply(OsdReply::Done))
            }
            PeerOp::Shard {
                entry,
                shard,
                size,
                complete_to,
                holders,
                ops,
            } => {
                let handled = std::time::Instant::now();
                let Some(mut core) = self
                    .replica_core(&pg, from, std::slice::from_ref(&entry))
                    .await?
                else {
                    return Ok(reply(OsdReply::Done));
                };
                let object = objects::object_ref(id, &entry.object);
                let drops = undo_to_drop(&core.log, core.undo_dropped, complete_to);
                let mut txn = Transaction::new();
                if complete_to > core.undo_dropped {
                    objects::set_complete(&mut txn, id, complete_to);
                }
                let writers = core.writers_with(entry.version.epoch, &holders);
                if let Some(writers) = &writers {
                    objects::set_writers(&mut txn, id, writers);
                }
                objects::build_shard(
                    &mut txn,
                    id,
                    &object,
                    &ops,
                    &data,
                    entry.version,
                    shard,
                    size,
                    &drops,
                )?;
                let logged = (&core.log, core.log_bytes);
                let trim = objects::log_append(&mut txn, id, std::slice::from_ref(&entry), logged);
                inner.apply_here(txn).await?;
                crate::metrics::replicated(1, data.len(), handled.elapsed());
                core.note_logged(entry, trim);
                core.undo_dropped = core.undo_dropped.max(complete_to);
                core.position = Some(shard);
                if let Some(writers) = writers {
                    core.writers = writers;
                }
                Ok(reply(OsdReply::Done))
            }
            PeerOp::Rollback { claim, to } => {
                let mut core = pg.core.lock().await;
                sender_is_primary(&inner.map.borrow(), from, id)?;
                core.admit(claim)?;
                inner.load(&mut core, id).await?;
                crate::recovery::roll_back(inner, &mut core, id, to).await?;
                Ok(reply(OsdReply::Done))
            }
            PeerOp::ReadShard {
                object,
                pieces,
                device,
            } => {
                let object = objects::object_ref(id, &object);
                let via = if device { Via::Device } else { Via::Cache };
                let edge = inner.pool_is_edge(id.pool);
                let read = inner
                    .blocking(move |store| objects::read_shard(store, &object, &pieces, via, edge))
                    .await?;
                Ok(match read {
                    Ok(Some((head, data, seals))) => {
                        reply_with(OsdReply::ShardPieces(Some(head), seals), Bytes::from(data))
                    }
                    Ok(None) => reply(OsdReply::ShardPieces(None, Vec::new())),
                    Err(e) => reply(read_failure(e)),
                })
            }
            PeerOp::List {
                after,
                limit,
                position,
            } => {
                let (entries, more) = self.inner.page(id, after, limit, position).await?;
                Ok(reply(OsdReply::PeerListing { entries, more }))
            }
            PeerOp::Pull { object, at, len } => {
                let object = objects::object_ref(id, &object);
                let len = len.min(store::READ_BYTES_MAX);
                let edge = inner.pool_is_edge(id.pool);
                let piece = inner
                    .blocking(move |store| objects::read_copy(store, &object, &at, len, edge))
                    .await?
                    .map_err(|e| e.to_string())?;
                Ok(match piece {
                    Some((copy, data)) => reply_with(OsdReply::Copy(Some(copy)), data),
                    None => reply(OsdReply::Copy(None)),
                })
            }
            PeerOp::Push {
                claim,
                object,
                copy,
                offset,
                first,
                last,
            } => {
                // Under the PG's lock, so a newer recovery's query (which raises the fence)
                // is either before this check or after this piece is applied.
                let mut core = pg.core.lock().await;
                sender_is_primary(&inner.map.borrow(), from, id)?;
                inner.load(&mut core, id).await?;
                core.admit(claim)?;
                let object = objects::object_ref(id, &object);
                // A shard pushed makes this copy unsettled (its objects may be newer than its
                // log, were the recovery cut short and the write it carries rolled back) and,
                // of another position than the one noted, its shards mixed, until the
                // recovery's activation.
                let erasure = inner.pool_erasure(id.pool).is_some();
                let shard = copy.as_ref().and_then(objects::shard_of);
                let mixed = shard.is_some() && shard != core.position;
                let unsettle = erasure && !core.unsettled;
                let undoable = copy
                    .as_ref()
                    .is_some_and(|copy| copy.version > core.undo_dropped);
                let records = if erasure {
                    let object = object.clone();
                    inner
                        .blocking(move |store| store.undo_versions(&object))
                        .await?
                        .map_err(|e| e.to_string())?
                } else {
                    Vec::new()
                };
                let at = objects::PieceAt {
                    first,
                    offset,
                    last,
                };
                let piece = (at, &data);
                let (mut before, txn) = if erasure {
                    objects::push_shard(&object, copy.as_ref(), piece, undoable, &records)
                } else {
                    let mut txn = Transaction::new();
                    objects::write_copy(&mut txn, &object, copy.as_ref(), piece);
                    (Transaction::new(), txn)
                };
                if mixed {
                    objects::set_position(&mut before, id, objects::MIXED_POSITIONS);
                }
                if unsettle {
                    objects::mark_unsettled(&mut before, id);
                }
                if !before.is_empty() {
                    inner.apply(before).await?;
                }
                if mixed {
                    core.position = Some(objects::MIXED_POSITIONS);
                }
                core.unsettled |= unsettle;
                inner.apply(txn).await?;
                if let Some(copy) = copy.filter(|_| erasure && undoable && first) {
                    core.pushed_undo.insert(object.name.clone(), copy.version);
                }
                Ok(reply(OsdReply::Done))
            }
            PeerOp::Digest { names } => {
                let (digests, _) = inner.digest_local(id, names).await?;
                Ok(reply(OsdReply::Digests(digests)))
            }
            PeerOp::Activate {
                claim,
                info,
                log,
                complete_to,
                position,
                writers,
            } => {
                let mut core = pg.core.lock().await;
                sender_is_primary(&inner.map.borrow(), from, id)?;
                core.admit(claim)?;
                inner.load(&mut core, id).await?;
                core.check_activation(info)?;
                let log = log.into_iter().collect();
                let mut txn = Transaction::new();
                let mut drops = undo_to_drop(&log, core.undo_dropped, complete_to);
                // The records kept with this recovery's pushes of writes now complete.
                let pushed = std::mem::take(&mut core.pushed_undo);
                drops.extend(
                    pushed
                        .into_iter()
                        .filter(|(_, version)| *version <= complete_to)
                        .map(|(name, version)| (name, version.seq)),
                );
                objects::drop_undo(&mut txn, id.pool, &drops);
                // The primary made every object this OSD holds its own before activating.
                let notes = objects::PgNotes {
                    unsettled: false,
                    position: position.or(core.position),
                    complete: core.undo_dropped.max(complete_to),
                };
                let mut known = core.writers.clone();
                for (epoch, sent) in writers {
                    known.entry(epoch).or_insert(sent);
                }
                let writers = objects::replace_log(&mut txn, id, info, &log, notes, &known);
                inner.apply(txn).await?;
                core.set_log(info, log);
                core.writers = writers;
                core.undo_dropped = notes.complete;
                core.position = notes.position;
                core.unsettled = false;
                core.loaded = true;
                Ok(reply(OsdReply::Done))
            }
            PeerOp::Complete { to } => {
                let mut core = pg.core.lock().await;
                core.known_complete = core.known_complete.max(to);
                Ok(reply(OsdReply::Done))
            }
        }
    }
}

/// A write's transaction, if the store would take it (`Transaction::check`) with room left
/// for its group's log entries (half the store's operations). A write the store would
/// refuse is refused alone here: in its group's transaction it would fail the commit, send
/// the PG back to peering and have every write of the group answered Busy.
fn within_store_limits(made: Prepared) -> Result<Prepared, OsdReply> {
    let refused = match made.txn.check() {
        Err(refused) => refused.to_string(),
        Ok(()) if made.txn.len() > GROUP_STORE_OPS_MAX => format!(
            "a write of {} store operations; one write makes at most {GROUP_STORE_OPS_MAX}",
            made.txn.len()
        ),
        Ok(()) => return Ok(made),
    };
    Err(OsdReply::Failed(refused))
}

/// The data a group's prepared writes send a replica, in order; a write alone keeps the
/// check its data arrived with.
fn replica_data(
    prepared: &[(ClientOp, Bytes, Option<SegmentCheck>)],
) -> (Bytes, Option<SegmentCheck>) {
    match prepared {
        [(_, data, check)] => (data.clone(), check.clone()),
        _ => {
            let mut all = BytesMut::with_capacity(prepared.iter().map(|(_, d, _)| d.len()).sum());
            for (_, data, _) in prepared {
                all.extend_from_slice(data);
            }
            (all.freeze(), None)
        }
    }
}

/// A write's requests to its replicas, answered one by one. Each is started where it is
/// sent, on the PG's writer's own task: a lone call's frame goes out from this thread
/// before the writer applies the group (others when it yields first,
/// [`crate::OsdState::apply_after_sends`]), and its answer wakes the writer directly (a
/// task per replica cost two wake-ups each way; docs/benchmarks.md). One that the map marks down
/// meanwhile is given up on at once, not after [`crate::PEER_TIMEOUT`]: the PG's lock is
/// held while the write waits, and a host cut off answers nothing.
struct Replicas {
    inner: Arc<OsdState>,
    calls: FuturesUnordered<BoxFuture<'static, (OsdId, Result<(), String>)>>,
    /// Answers that came as their requests were started.
    answered: VecDeque<(OsdId, Result<(), String>)>,
    aborts: Vec<(OsdId, AbortHandle)>,
    maps: watch::Receiver<Arc<ClusterMap>>,
}

impl Replicas {
    fn new(inner: &Arc<OsdState>) -> Replicas {
        Replicas {
            inner: inner.clone(),
            calls: FuturesUnordered::new(),
            answered: VecDeque::new(),
            aborts: Vec::new(),
            maps: inner.map.subscribe(),
        }
    }

    fn send(&mut self, osd: OsdId, request: OsdRequest, data: Bytes, check: Option<SegmentCheck>) {
        let inner = self.inner.clone();
        let (abort, registration) = AbortHandle::new_pair();
        let call = Abortable::new(
            async move {
                let sent = std::time::Instant::now();
                match inner.call_peer(osd, &request, data, check).await {
                    Ok((OsdReply::Done, _)) => {
                        crate::metrics::replica_answered(sent.elapsed());
                        Ok(())
                    }
                    Ok((other, _)) => Err(format!("{other:?}")),
                    Err(e) => Err(e),
                }
            },
            registration,
        );
        self.calls.push(Box::pin(async move {
            // A call that panicked did not apply the write (its replica is recovered).
            let answer = match AssertUnwindSafe(call).catch_unwind().await {
                Ok(Ok(answer)) => answer,
                Ok(Err(Aborted)) => Err("the map marks it down".into()),
                Err(_) => Err("its call panicked".into()),
            };
            (osd, answer)
        }));
        self.aborts.push((osd, abort));
        // Started here: polled with no waker, since the writer's task polls them again
        // (with its own) when it waits for their answers; what one does meanwhile is kept
        // by `calls` until then.
        let mut context = Context::from_waker(Waker::noop());
        while let Poll::Ready(Some(answer)) = self.calls.poll_next_unpin(&mut context) {
            self.answered.push_back(answer);
        }
        self.give_up_on_down();
    }

    fn give_up_on_down(&mut self) {
        let map = self.maps.borrow_and_update();
        for (osd, abort) in &self.aborts {
            if !map.osds.get(osd).is_some_and(|o| o.up) {
                abort.abort();
            }
        }
    }

    /// Whether a request started here still waits for its link's writer task to go out.
    fn sends_waiting(&self) -> bool {
        self.aborts
            .iter()
            .any(|(osd, _)| self.inner.net.sends_waiting(*osd))
    }

    /// The next replica to answer, and whether it applied the write; `None` once all have.
    async fn next(&mut self) -> Option<(OsdId, Result<(), String>)> {
        if let Some(answer) = self.answered.pop_front() {
            return Some(answer);
        }
        loop {
            tokio::select! {
                biased;
                answer = self.calls.next() => return answer,
                Ok(()) = self.maps.changed() => self.give_up_on_down(),
            }
        }
    }
}

impl OsdService {
    /// The PG's core, locked and loaded, for applying `entries` (a group, in version order)
    /// from its primary `from`; `None` for a resend of writes this OSD holds (answered
    /// done). Refused if `from` no longer leads the PG or the log has another write at one
    /// of their versions.
    async fn replica_core<'a>(
        &self,
        pg: &'a Pg,
        from: OsdId,
        entries: &[LogEntry],
    ) -> Result<Option<MutexGuard<'a, Core>>, String> {
        let mut core = pg.core.lock().await;
        self.inner.load(&mut core, pg.id).await?;
        sender_is_primary(&self.inner.map.borrow(), from, pg.id)?;
        Ok(replica_applies(&core, entries, pg.id)?.then_some(core))
    }
}

/// A replicated group's writes with their data (each the next `len` bytes of `data`),
/// refused unless it holds at least one write, at growing versions, with all of `data`.
fn split_group(
    writes: Vec<Replicated>,
    data: &Bytes,
) -> Result<Vec<(LogEntry, Vec<ObjectOp>, Bytes)>, String> {
    if writes.is_empty() {
        return Err("a replicated group holds at least one write".into());
    }
    if writes
        .windows(2)
        .any(|w| w[1].entry.version <= w[0].entry.version)
    {
        return Err("a replicated group's versions grow from one write to the next".into());
    }
    let mut offset = 0usize;
    let mut split = Vec::with_capacity(writes.len());
    for write in writes {
        let end = usize::try_from(write.len)
            .ok()
            .and_then(|len| offset.checked_add(len))
            .filter(|&end| end <= data.len())
            .ok_or_else(|| {
                format!(
                    "a replicated group's writes take more than its {} data bytes",
                    data.len()
                )
            })?;
        split.push((write.entry, write.ops, data.slice(offset..end)));
        offset = end;
    }
    if offset != data.len() {
        return Err(format!(
            "a replicated group's writes take {offset} of its {} data bytes",
            data.len()
        ));
    }
    Ok(split)
}

/// Whether a replica applies `entries` (a group, in version order) from its primary: not
/// a resend of writes it holds (answered done); refused if its log has another write at
/// one of their versions, or holds some of the group and not the rest (the primary then
/// recovers it).
fn replica_applies(core: &Core, entries: &[LogEntry], id: PgId) -> Result<bool, String> {
    let mut applies = None;
    for (i, entry) in entries.iter().enumerate() {
        let this = match core.on_replicate(entry) {
            Verdict::Duplicate => false,
            Verdict::Conflict => {
                return Err(format!(
                    "version {}.{} of pg {}.{} is already used by another write here",
                    entry.version.epoch, entry.version.seq, id.pool, id.number
                ))
            }
            Verdict::Apply { skipped } => {
                if i == 0 && skipped > 0 {
                    tracing::warn!(
                        pg = %format!("{}.{}", id.pool, id.number),
                        skipped,
                        "a replicated write skips versions; recovery brings them"
                    );
                }
                true
            }
        };
        if applies.replace(this).is_some_and(|before| before != this) {
            return Err(format!(
                "pg {}.{}: this copy's log holds part of a replicated group",
                id.pool, id.number
            ));
        }
    }
    Ok(applies == Some(true))
}

/// Refuses a peer's op on `id` unless `from` is its primary in `map` (this OSD's). Writes
/// and activations check again under the PG's lock, against the map as it is then: a new
/// primary's query, answered under the lock, then fences the old primary's writes out (a
/// write that passed the first check with an older map would otherwise land after the
/// query, and the new primary would never learn of it).
fn sender_is_primary(map: &ClusterMap, from: OsdId, id: PgId) -> Result<(), String> {
    let primary = map
        .pools
        .get(&id.pool)
        .and_then(|pool| map.acting(pool, id).first().copied());
    if primary != Some(from) {
        return Err(format!(
            "osd.{} is not the primary of pg {}.{} at epoch {} (this OSD's map)",
            from.0, id.pool, id.number, map.epoch
        ));
    }
    Ok(())
}

/// An OSD's space as its beacons report it.
pub fn usage(statfs: &store::Statfs) -> map::cluster::Usage {
    map::cluster::Usage {
        used_bytes: statfs.allocated_bytes,
        total_bytes: statfs.total_bytes,
        host_free_bytes: statfs.host_free_bytes,
    }
}
