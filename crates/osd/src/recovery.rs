//! Peering and recovery, run by a PG's primary whenever its acting set changes.
//!
//! Peering: the primary asks every other OSD of the acting set what it holds of the PG (its
//! last version and log). If one holds newer writes than the primary, the primary first
//! makes itself a copy of that OSD's objects and takes its log. Replicas with the same last
//! version are clean and get every write from then on; the others are recovered in the
//! background: every object whose version differs is copied to them, objects they hold
//! that the primary does not are removed, then the objects written meanwhile, and they join.
//! The PG serves as soon as it has min_size clean copies.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use map::placement::{OsdId, PgId};
use map::{ObjectName, PoolId};
use messenger::message::{
    Claim, CopyAt, LogEntry, ObjectCopy, OmapAt, OsdReply, OsdRequest, PeerOp, PgInfo, Version,
    LIST_PAGE_MAX,
};
use store::Transaction;
use tokio::task::JoinSet;

use crate::objects::{self, PieceAt};
use crate::pg::peering::{self, Answer, Placement};
use crate::pg::recovery as recovering;
use crate::pg::{undo_to_drop, Core, Pg, Serving};
use crate::OsdState;

/// Pause before a failed peering or recovery tries again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Bytes of object data per recovery message.
const COPY_PIECE_BYTES: u64 = 8 << 20;
/// Names per page when listing a peer's PG.
const LIST_PAGE: u32 = 1000;

/// Where recovery reads or writes objects: this OSD's store, or another OSD (written to
/// only as a `Target`, under the claim of the recovery or repair writing: [`Claim`]).
#[derive(Clone, Copy)]
pub enum Side {
    Local,
    Remote(OsdId),
    Target(OsdId, Claim),
}

/// One piece of an object being copied (`copy: None` removes it).
struct Piece {
    copy: Option<ObjectCopy>,
    at: PieceAt,
    data: Bytes,
}

impl Piece {
    fn removal() -> Piece {
        Piece {
            copy: None,
            at: PieceAt {
                first: true,
                offset: 0,
                last: true,
            },
            data: Bytes::new(),
        }
    }
}

/// The most data a transaction applied on a network thread writes (`OsdState::apply_here`):
/// sealing and writing more would hold up the thread's other tasks for longer than a hand-off
/// to the blocking pool costs.
const APPLY_HERE_BYTES: u64 = 64 << 10;

impl OsdState {
    pub async fn peer_op(
        &self,
        osd: OsdId,
        pg: PgId,
        op: PeerOp,
        data: Bytes,
    ) -> Result<(OsdReply, Bytes), String> {
        let epoch = self.map.borrow().epoch;
        let request = OsdRequest::Peer { pg, epoch, op };
        match self.call_peer(osd, &request, data, None).await? {
            (
                OsdReply::Failed(why)
                | OsdReply::Denied(why)
                | OsdReply::Busy(why)
                | OsdReply::Integrity(why),
                _,
            ) => Err(format!("osd.{}: {why}", osd.0)),
            reply => Ok(reply),
        }
    }

    /// Runs `work`, a read of `object` that `objects::is_small_read` lets through, on this
    /// thread unless it `reads_data` and the store says that would wait
    /// (`Store::read_would_wait`: for a write holding the object, or to commit its changes
    /// first); on the blocking pool otherwise. At one read in flight the hand-off to a pool
    /// thread and back cost more than the read's own work (docs/benchmarks.md).
    pub async fn small_read<T: Send + 'static>(
        &self,
        object: &map::ObjectRef,
        reads_data: bool,
        work: impl FnOnce(&store::Store) -> T + Send + 'static,
    ) -> Result<T, String> {
        let waits = reads_data && self.store.read_would_wait(object);
        self.here_or_blocking(waits, work).await
    }

    /// Applies `txn` on this thread when it writes at most `APPLY_HERE_BYTES` and the store
    /// says it would not wait for anything but its own work and its group's write and sync
    /// (`Store::apply_would_wait`); on the blocking pool otherwise. At one write in flight
    /// that is every replica's apply, and the hand-off to a pool thread and back was a
    /// third of a replica's part (docs/benchmarks.md).
    pub async fn apply_here(&self, txn: Transaction) -> Result<(), String> {
        let waits = self.apply_waits(&txn);
        self.here_or_blocking(waits, move |store| store.apply(txn))
            .await?
            .map_err(|e| e.to_string())
    }

    /// [`OsdState::apply_here`] for a primary that has just started its replicas' calls:
    /// when it is to apply here and `sends_waiting` (some of those requests were left to
    /// their links' writer tasks, woken on this thread, behind the caller), it first yields,
    /// so that they go out before this thread is busy with the apply. A lone call's request
    /// was already written by the caller, and the yield would only cost a trip through the
    /// scheduler (5 % of a 4 KiB write at QD1; docs/benchmarks.md).
    pub async fn apply_after_sends(
        &self,
        txn: Transaction,
        sends_waiting: bool,
    ) -> Result<(), String> {
        let here = sends_waiting
            && self.store_calls == crate::StoreCalls::Blocking
            && !self.working_here.load(Ordering::Relaxed)
            && !self.apply_waits(&txn);
        if here {
            tokio::task::yield_now().await;
        }
        self.apply_here(txn).await
    }

    fn apply_waits(&self, txn: &Transaction) -> bool {
        txn.data_bytes() > APPLY_HERE_BYTES || self.store.apply_would_wait(txn)
    }

    /// Runs `work` on this thread unless `waits` (the store would make it wait) or another
    /// store call runs on one of this OSD's network threads; on the blocking pool
    /// otherwise. Work here holds up this thread's other tasks while it runs (a 4 KiB read
    /// or a small write's group commit of an SSD: tens of microseconds; of a disk,
    /// milliseconds), and tokio may leave the other network thread asleep meanwhile, so
    /// one at a time runs here.
    async fn here_or_blocking<T: Send + 'static>(
        &self,
        waits: bool,
        work: impl FnOnce(&store::Store) -> T + Send + 'static,
    ) -> Result<T, String> {
        let here = self.store_calls == crate::StoreCalls::Blocking
            && !waits
            && self
                .working_here
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok();
        if !here {
            return self.blocking(work).await;
        }
        let store = &self.store;
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(store)));
        self.working_here.store(false, Ordering::Release);
        done.map_err(|_| "store call panicked".to_string())
    }

    pub async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&store::Store) -> T + Send + 'static,
    ) -> Result<T, String> {
        if self.store_calls == crate::StoreCalls::Inline {
            return Ok(work(&self.store));
        }
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| format!("store task: {e}"))
    }

    pub async fn apply(&self, txn: Transaction) -> Result<(), String> {
        self.blocking(move |store| store.apply(txn))
            .await?
            .map_err(|e| e.to_string())
    }

    /// The attributes of `object` in this OSD's store; `None` if it holds none.
    pub async fn attrs_if_any(
        &self,
        object: map::ObjectRef,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, OsdReply> {
        self.blocking(move |store| match store.attrs(&object) {
            Ok(attrs) => Ok(Some(attrs)),
            Err(store::ReadError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        })
        .await
        .map_err(OsdReply::Failed)?
        .map_err(crate::service::read_failure)
    }

    /// Loads a PG's info and log from the store the first time it is needed.
    pub async fn load(&self, core: &mut Core, pg: PgId) -> Result<(), String> {
        if core.loaded {
            return Ok(());
        }
        let stored = self
            .blocking(move |store| objects::load_pg(store, pg))
            .await?
            .map_err(|e| e.to_string())?;
        core.set_log(stored.info, stored.log);
        core.unsettled = stored.notes.unsettled;
        core.position = stored.notes.position;
        core.undo_dropped = stored.notes.complete;
        core.writers = stored.writers;
        core.loaded = true;
        Ok(())
    }

    async fn list(&self, side: Side, pg: PgId) -> Result<BTreeMap<ObjectName, Version>, String> {
        if let Side::Local = side {
            let pg_num = self.pg_num(pg)?;
            let position = self.position_in_map(pg, self.id);
            return self
                .blocking(move |store| objects::list_pg(store, pg, pg_num, position))
                .await?
                .map_err(|e| e.to_string());
        }
        let mut all = BTreeMap::new();
        let mut after = None;
        loop {
            let (entries, more) = self.list_page(side, pg, after.clone(), LIST_PAGE).await?;
            after = entries.last().map(|(name, _)| name.clone());
            all.extend(entries);
            if !more || after.is_none() {
                return Ok(all);
            }
        }
    }

    /// A page of `side`'s objects of the PG after `after`, with their versions, and whether
    /// more follow.
    pub async fn list_page(
        &self,
        side: Side,
        pg: PgId,
        after: Option<ObjectName>,
        limit: u32,
    ) -> Result<(Vec<(ObjectName, Version)>, bool), String> {
        match side {
            Side::Local => {
                let position = self.position_in_map(pg, self.id);
                self.page(pg, after, limit, position).await
            }
            Side::Remote(osd) | Side::Target(osd, _) => {
                let position = self.position_in_map(pg, osd);
                let op = PeerOp::List {
                    after,
                    limit,
                    position,
                };
                match self.peer_op(osd, pg, op, Bytes::new()).await? {
                    (OsdReply::PeerListing { entries, more }, _) => Ok((entries, more)),
                    (other, _) => Err(format!("listing: unexpected {other:?}")),
                }
            }
        }
    }

    /// A page of this OSD's objects of the PG in (hash, name) order after `after`, and
    /// whether more follow; shards not of `position` listed at the default version.
    pub async fn page(
        &self,
        pg: PgId,
        after: Option<ObjectName>,
        limit: u32,
        position: Option<u8>,
    ) -> Result<(Vec<(ObjectName, Version)>, bool), String> {
        let pg_num = self.pg_num(pg)?;
        let limit = limit.clamp(1, LIST_PAGE_MAX) as usize;
        self.blocking(move |store| {
            objects::list_pg_page(store, pg, pg_num, after.as_ref(), limit, position)
        })
        .await?
        .map_err(|e| e.to_string())
    }

    /// Whether `pool` is sealed at the edge (its objects are copied as sealed chunks).
    pub fn pool_is_edge(&self, pool: PoolId) -> bool {
        self.map
            .borrow()
            .pools
            .get(&pool)
            .is_some_and(|p| matches!(p.seal, map::cluster::Seal::Edge { .. }))
    }

    /// In an erasure-coded PG, `osd`'s position in this OSD's map (`u8::MAX` when it holds
    /// none, so that every shard it has lists as another position's).
    pub fn position_in_map(&self, pg: PgId, osd: OsdId) -> Option<u8> {
        let map = self.map.borrow();
        let pool = map.pools.get(&pg.pool)?;
        pool.erasure?;
        let position = map.shards(pool, pg).iter().position(|h| *h == Some(osd));
        Some(position.map_or(u8::MAX, |p| p as u8))
    }

    /// The code of `pool`, if it is erasure-coded.
    pub fn pool_erasure(&self, pool: PoolId) -> Option<ec::Profile> {
        self.map
            .borrow()
            .pools
            .get(&pool)
            .and_then(|p| p.erasure.map(|e| e.profile()))
    }

    pub fn pg_num(&self, pg: PgId) -> Result<u32, String> {
        self.map
            .borrow()
            .pools
            .get(&pg.pool)
            .map(|pool| pool.pg_num)
            .ok_or_else(|| format!("pool {} no longer exists", pg.pool))
    }

    async fn read_piece(
        &self,
        side: Side,
        pg: PgId,
        name: &ObjectName,
        at: &CopyAt,
    ) -> Result<Option<(ObjectCopy, Bytes)>, String> {
        match side {
            Side::Local => {
                let object = objects::object_ref(pg, name);
                let edge = self.pool_is_edge(pg.pool);
                let at = at.clone();
                self.blocking(move |store| {
                    objects::read_copy(store, &object, &at, COPY_PIECE_BYTES, edge)
                })
                .await?
                .map_err(|e| e.to_string())
            }
            Side::Remote(osd) | Side::Target(osd, _) => {
                let op = PeerOp::Pull {
                    object: name.clone(),
                    at: at.clone(),
                    len: COPY_PIECE_BYTES,
                };
                match self.peer_op(osd, pg, op, Bytes::new()).await? {
                    (OsdReply::Copy(copy), data) => Ok(copy.map(|c| (c, data))),
                    (other, _) => Err(format!("pull: unexpected {other:?}")),
                }
            }
        }
    }

    async fn write_piece(
        &self,
        side: Side,
        pg: PgId,
        name: &ObjectName,
        piece: Piece,
    ) -> Result<(), String> {
        match side {
            Side::Local => {
                let mut txn = Transaction::new();
                let object = objects::object_ref(pg, name);
                let at = (piece.at, &piece.data);
                objects::write_copy(&mut txn, &object, piece.copy.as_ref(), at);
                self.apply(txn).await
            }
            Side::Remote(osd) => Err(format!(
                "osd.{}: copies are written to another OSD only under a claim",
                osd.0
            )),
            Side::Target(osd, claim) => {
                let op = PeerOp::Push {
                    claim,
                    object: name.clone(),
                    copy: piece.copy,
                    offset: piece.at.offset,
                    first: piece.at.first,
                    last: piece.at.last,
                };
                self.peer_op(osd, pg, op, piece.data).await.map(|_| ())
            }
        }
    }

    /// Makes `to`'s copy of `name` equal to `from`'s (removed if `from` has none); returns
    /// the bytes of data copied.
    pub async fn copy_object(
        &self,
        pg: PgId,
        name: &ObjectName,
        from: Side,
        to: Side,
    ) -> Result<u64, String> {
        if let Some(profile) = self.pool_erasure(pg.pool) {
            // A copy of `from`'s object would be its shard, not `to`'s.
            return self
                .rebuild_shard(pg, name, profile, from, to, &BTreeSet::new())
                .await;
        }
        let mut at = CopyAt::FIRST;
        let mut copied = 0;
        loop {
            let Some((copy, data)) = self.read_piece(from, pg, name, &at).await? else {
                self.write_piece(to, pg, name, Piece::removal()).await?;
                return Ok(copied);
            };
            copied += data.len() as u64;
            let next = objects::next_piece(&at, &copy, data.len() as u64);
            let piece = Piece {
                copy: Some(copy),
                at: PieceAt {
                    first: at.first,
                    offset: at.offset,
                    last: next.is_none(),
                },
                data,
            };
            self.write_piece(to, pg, name, piece).await?;
            match next {
                Some(next) => at = next,
                None => return Ok(copied),
            }
        }
    }

    /// Makes `to`'s shard of `name` in `pg` (an erasure-coded PG) the one `from`'s shard
    /// says it should be: its bytes at `from`'s version, read from the holder of `to`'s
    /// position if it has them, else decoded from k other shards (a holder at another
    /// version is passed over); or removed if `from` has none. The shards of the positions
    /// in `distrusted` (found bad by scrub) are neither read nor decoded from. The bytes
    /// written.
    pub(crate) async fn rebuild_shard(
        &self,
        pg: PgId,
        name: &ObjectName,
        profile: ec::Profile,
        from: Side,
        to: Side,
        distrusted: &BTreeSet<usize>,
    ) -> Result<u64, String> {
        let osd = match to {
            Side::Local => self.id,
            Side::Target(osd, _) => osd,
            Side::Remote(osd) => {
                return Err(format!(
                    "osd.{}: shards are written to another OSD only under a claim",
                    osd.0
                ))
            }
        };
        let mut holders = {
            let map = self.map.borrow();
            let pool = map
                .pools
                .get(&pg.pool)
                .ok_or_else(|| format!("pool {} no longer exists", pg.pool))?;
            map.shards(pool, pg)
        };
        let position = holders
            .iter()
            .position(|h| *h == Some(osd))
            .ok_or_else(|| {
                format!(
                    "osd.{} holds no shard of pg {}.{}",
                    osd.0, pg.pool, pg.number
                )
            })?;
        for position in distrusted {
            holders[*position] = None;
        }
        let shards = crate::erasure::Shards::new(self, pg, profile, holders);
        let unreadable = |refusal: OsdReply| format!("{refusal:?}");
        let source = match from {
            Side::Local => shards.own_head(name).await.map_err(unreadable)?,
            Side::Remote(osd) | Side::Target(osd, _) => {
                let op = PeerOp::Pull {
                    object: name.clone(),
                    at: CopyAt {
                        omap: OmapAt::Done,
                        ..CopyAt::FIRST
                    },
                    len: 0,
                };
                match self.peer_op(osd, pg, op, Bytes::new()).await? {
                    (OsdReply::Copy(None), _) => None,
                    (OsdReply::Copy(Some(copy)), _) => {
                        let head = objects::shard_head(&copy.attrs).ok_or_else(|| {
                            format!("osd.{}: {name}'s shard lacks its shard attributes", osd.0)
                        })?;
                        Some((head, copy.attrs))
                    }
                    (other, _) => return Err(format!("pull: unexpected {other:?}")),
                }
            }
        };
        let Some((head, mut attrs)) = source else {
            self.write_piece(to, pg, name, Piece::removal()).await?;
            return Ok(0);
        };
        if shards
            .rebuild_loses_a_shard(name, head.version, position)
            .await
        {
            return Err(format!(
                "osd.{} keeps the only shard of another position of {name} at version {}.{}, \
                 which k shards need: it is rebuilt once that position's holder has its shard",
                osd.0, head.version.epoch, head.version.seq
            ));
        }
        let len = profile.shard_bytes(head.size);
        attrs.insert(objects::SHARD_ATTR.into(), vec![position as u8]);
        let copy = ObjectCopy {
            version: head.version,
            size: len,
            attrs,
            omap: Vec::new(),
            omap_more: false,
            chunks: None,
        };
        let mut offset = 0;
        loop {
            let wanted = ec::Piece {
                shard: position,
                offset,
                len: COPY_PIECE_BYTES.min(len - offset),
            };
            let (bytes, words) = shards
                .read_sealed(name, head.version, &[wanted])
                .await
                .map_err(unreadable)?
                .remove(0);
            let end = offset + wanted.len;
            // In a pool sealed at the edge, each block goes with its record (a parity
            // shard's, the parity of the data shards' records); a zero word is a hole.
            let chunks = self
                .pool_is_edge(pg.pool)
                .then(|| words.iter().map(crate::erasure::seal_of_word).collect());
            let piece = Piece {
                copy: Some(ObjectCopy {
                    chunks,
                    ..copy.clone()
                }),
                at: PieceAt {
                    first: offset == 0,
                    offset,
                    last: end >= len,
                },
                data: Bytes::from(bytes),
            };
            self.write_piece(to, pg, name, piece).await?;
            if end >= len {
                return Ok(len);
            }
            offset = end;
        }
    }

    /// Makes `to` hold exactly `from`'s objects of the PG. With a `claim` (a recovery task's
    /// target and token), stops as soon as the task no longer owns that recovery.
    async fn sync(
        &self,
        pg: PgId,
        from: Side,
        to: Side,
        claim: Option<(OsdId, u64)>,
    ) -> Result<usize, String> {
        let source = self.list(from, pg).await?;
        let target = self.list(to, pg).await?;
        // An erasure-coded shard listed at the default version is another position's:
        // rebuilt wherever it is, on the target from the others.
        let stale: Vec<&ObjectName> = source
            .iter()
            .filter(|(name, version)| {
                **version == Version::default() || target.get(*name) != Some(*version)
            })
            .map(|(name, _)| name)
            .collect();
        let extra: Vec<&ObjectName> = target
            .keys()
            .filter(|name| !source.contains_key(*name))
            .collect();
        let mut pending =
            crate::metrics::Pending::new(&self.recovery_pending, stale.len() + extra.len());
        for name in &stale {
            self.check_claim(pg, claim).await?;
            let bytes = self.copy_object(pg, name, from, to).await?;
            pending.copied(bytes);
        }
        for name in &extra {
            self.check_claim(pg, claim).await?;
            self.write_piece(to, pg, name, Piece::removal()).await?;
            pending.copied(0);
        }
        Ok(stale.len() + extra.len())
    }

    /// Fails once a recovery task's claim is superseded, so it stops writing to its target.
    async fn check_claim(&self, pg: PgId, claim: Option<(OsdId, u64)>) -> Result<(), String> {
        let Some((target, token)) = claim else {
            return Ok(());
        };
        if self.pg(pg).core.lock().await.recovers(target, token) {
            Ok(())
        } else {
            Err(format!("recovery of osd.{} was superseded", target.0))
        }
    }

    /// What `osd` holds of the PG, asked under `claim`.
    async fn query(&self, osd: OsdId, pg: PgId, claim: Claim) -> Result<Answer, String> {
        let op = PeerOp::Query { claim };
        match self.peer_op(osd, pg, op, Bytes::new()).await? {
            (
                OsdReply::Info {
                    info,
                    log,
                    unsettled,
                    position,
                    held,
                    writers,
                    complete,
                },
                _,
            ) => Ok(Answer {
                info,
                log,
                unsettled,
                position,
                held,
                writers,
                complete,
            }),
            (other, _) => Err(format!("query: unexpected {other:?}")),
        }
    }
}

/// Peers `id` against the current map: takes primacy (or gives it up), gathers the other
/// OSDs' states, catches this OSD up if it is behind, and starts recovering the others.
/// The PG's core decides (pg/peering.rs); this carries out its actions under the PG's lock.
pub async fn peer(inner: Arc<OsdState>, id: PgId) {
    let pg = inner.pg(id);
    let mut core = pg.core.lock().await;
    let map = inner.map.borrow().clone();
    let placement = map.pools.get(&id.pool).and_then(|pool| {
        let acting = map.acting(pool, id);
        (acting.first() == Some(&inner.id)).then(|| Placement {
            epoch: map.epoch,
            acting,
            size: usize::from(pool.size),
            min_size: usize::from(pool.min_size),
            erasure: pool.erasure.map(|e| e.profile()),
            positions: match pool.erasure {
                Some(_) => map.shards(pool, id),
                None => Vec::new(),
            },
        })
    });
    let mut actions = VecDeque::from(core.on_peering(peering::Event::Start(placement)));
    // The queries run at once; dropped (and so aborted) with the peering.
    let mut queries = JoinSet::new();
    let mut asked = BTreeMap::new();
    loop {
        let Some(action) = actions.pop_front() else {
            if !core.is_peering() {
                return;
            }
            let joined = queries
                .join_next_with_id()
                .await
                .expect("a peering in progress waits for its queries");
            let (task, answer) = match joined {
                Ok((task, answer)) => (task, answer),
                Err(e) => (e.id(), Err(format!("its query ended: {e}"))),
            };
            let event = peering::Event::Answered {
                osd: asked[&task],
                answer,
            };
            actions.extend(core.on_peering(event));
            continue;
        };
        let event = match action {
            peering::Action::NotPrimary => {
                pg.serving.send_replace(Serving::NotPrimary);
                continue;
            }
            peering::Action::Load => peering::Event::Loaded(inner.load(&mut core, id).await),
            peering::Action::Query { to, claim } => {
                let inner = inner.clone();
                let task = queries.spawn(async move { inner.query(to, id, claim).await });
                asked.insert(task.id(), to);
                continue;
            }
            peering::Action::CatchUp { from, info, log } => {
                tracing::info!(pg = %format!("{}.{}", id.pool, id.number), from = from.0, "catching up");
                let caught_up = match catch_up(&inner, &mut core, id, from).await {
                    Ok(()) => adopt_log(&inner, &mut core, id, info, log).await,
                    Err(e) => Err(e),
                };
                peering::Event::CaughtUp(caught_up)
            }
            peering::Action::Recover { target, token } => {
                spawn_recovery(&inner, id, target, token);
                continue;
            }
            peering::Action::Publish { interval, state } => {
                if let Some(why) = state.not_writable() {
                    tracing::warn!(pg = %format!("{}.{}", id.pool, id.number), %why, "peering");
                }
                if state.is_active() {
                    became_active(&inner, &pg, &mut core).await;
                }
                pg.publish_state(interval, state);
                continue;
            }
            peering::Action::RollBack { holders, claim } => {
                let mut rolled = Ok(());
                for (osd, to) in holders {
                    let result = if osd == inner.id {
                        roll_back(&inner, &mut core, id, to).await
                    } else {
                        let op = PeerOp::Rollback { claim, to };
                        inner.peer_op(osd, id, op, Bytes::new()).await.map(|_| ())
                    };
                    if let Err(why) = result {
                        rolled = Err(format!("osd.{}: {why}", osd.0));
                        break;
                    }
                }
                peering::Event::RolledBack(rolled)
            }
            peering::Action::RetryLater => {
                retry_later(inner.clone(), id);
                continue;
            }
        };
        actions.extend(core.on_peering(event));
    }
}

/// Once an erasure-coded PG is active (a peering or a recovery's join made it so), min_size
/// holders, this one among them, hold every write of its log: its own undo records of them
/// go, and its holders are told they are complete.
async fn became_active(inner: &Arc<OsdState>, pg: &Arc<Pg>, core: &mut Core) {
    drop_complete_undo(inner, core, pg.id).await;
    note_complete(inner, pg, core);
}

/// Drops this primary's undo records of an erasure-coded PG's writes up to its last, once
/// the PG is active: min_size holders, this one among them, hold every write of its log, so
/// no peering rolls one back (docs/design/erasure.md, §6). A primary that caught up took
/// its log without dropping any; a failure is left to the next write's drops.
async fn drop_complete_undo(inner: &OsdState, core: &mut Core, pg: PgId) {
    let complete = core.info.last;
    if inner.pool_erasure(pg.pool).is_none() || complete <= core.undo_dropped {
        return;
    }
    let drops = undo_to_drop(&core.log, core.undo_dropped, complete);
    let mut txn = Transaction::new();
    objects::drop_undo(&mut txn, pg.pool, &drops);
    objects::set_complete(&mut txn, pg, complete);
    match inner.apply(txn).await {
        Ok(()) => core.undo_dropped = complete,
        Err(why) => tracing::warn!(
            pg = %format!("{}.{}", pg.pool, pg.number),
            %why,
            "dropping the undo records of complete writes"
        ),
    }
}

/// How long an erasure-coded PG's writes pause before its primary tells the holders that
/// they are complete ([`note_complete`]).
const NOTE_AFTER: Duration = Duration::from_millis(100);

/// Once the writes of the erasure-coded PG `id` pause for [`NOTE_AFTER`] after a write was
/// acknowledged or the PG became active (`core` under the PG's lock), tells its clean
/// holders that every write of its log is on min_size holders (`PeerOp::Complete`), so
/// that a peering without this primary knows them complete and a read-only PG reads their
/// objects (docs/design/erasure.md, §7). Writes that go on say it themselves
/// (`PeerOp::Shard::complete_to`). One such task per PG at a time (`Pg::noting`); a note
/// lost only leaves a lower bound lower.
pub fn note_complete(inner: &Arc<OsdState>, pg: &Arc<Pg>, core: &Core) {
    if core.interval.erasure.is_some() && !pg.noting.swap(true, Ordering::Relaxed) {
        let last = core.info.last;
        inner.spawn(note_once_paused(inner.clone(), pg.clone(), last));
    }
}

async fn note_once_paused(inner: Arc<OsdState>, pg: Arc<Pg>, mut seen: Version) {
    let id = pg.id;
    let (to, holders) = loop {
        tokio::time::sleep(NOTE_AFTER).await;
        let mut core = pg.core.lock().await;
        if core.info.last != seen {
            seen = core.info.last;
            continue;
        }
        pg.noting.store(false, Ordering::Relaxed);
        // Active, and no write in flight under the lock: this primary and its clean
        // members, min_size of them, hold every write of its log.
        let active = core.ack_ok() && pg.serving.borrow().is_active();
        if !active || core.known_complete >= seen {
            return;
        }
        core.known_complete = seen;
        break (seen, core.interval.clean.clone());
    };
    let notes = holders.into_iter().map(|osd| {
        let inner = inner.clone();
        async move {
            let op = PeerOp::Complete { to };
            (osd, inner.peer_op(osd, id, op, Bytes::new()).await)
        }
    });
    for (osd, noted) in futures::future::join_all(notes).await {
        if let Err(why) = noted {
            let label = format!("{}.{}", id.pool, id.number);
            tracing::debug!(pg = %label, osd = osd.0, %why, "noting complete writes");
        }
    }
}

/// Starts the task that recovers `target` under `token` (`pg::Core::begin_recovery`).
pub fn spawn_recovery(inner: &Arc<OsdState>, id: PgId, target: OsdId, token: u64) {
    inner.spawn(recover(inner.clone(), id, target, token));
}

async fn adopt_log(
    inner: &OsdState,
    core: &mut Core,
    pg: PgId,
    info: PgInfo,
    log: VecDeque<LogEntry>,
) -> Result<(), String> {
    let mut txn = Transaction::new();
    let notes = objects::PgNotes {
        unsettled: false,
        position: core.position_of(inner.id).or(core.position),
        complete: core.undo_dropped,
    };
    let writers = objects::replace_log(&mut txn, pg, info, &log, notes, &core.writers);
    inner.apply(txn).await?;
    core.set_log(info, log);
    core.unsettled = false;
    core.position = notes.position;
    core.writers = writers;
    Ok(())
}

/// Makes this OSD's objects of `id` those of `from`, marked unsettled in the store until
/// [`adopt_log`] takes `from`'s log: a catch-up cut short stays known, across a restart too.
async fn catch_up(inner: &OsdState, core: &mut Core, id: PgId, from: OsdId) -> Result<(), String> {
    if !core.unsettled {
        let mut txn = Transaction::new();
        objects::mark_unsettled(&mut txn, id);
        inner.apply(txn).await?;
        core.unsettled = true;
    }
    inner
        .sync(id, Side::Remote(from), Side::Local, None)
        .await
        .map(|_| ())
}

/// Takes back this OSD's writes to the erasure-coded PG `pg` above `to` from their undo
/// records, newest first, and ends its log below them, in one transaction. An object whose
/// undo record is gone (its shard came from a recovery) is left as it is: its version then
/// differs from the primary's, reads decode around it, and a recovery of this holder
/// rebuilds it (docs/design/erasure.md, §7, known gaps).
pub async fn roll_back(
    inner: &OsdState,
    core: &mut Core,
    pg: PgId,
    to: Version,
) -> Result<(), String> {
    let above: Vec<LogEntry> = core
        .log
        .iter()
        .filter(|e| e.version > to)
        .cloned()
        .collect();
    if above.is_empty() {
        return Ok(());
    }
    let kept: VecDeque<LogEntry> = core
        .log
        .iter()
        .filter(|e| e.version <= to)
        .cloned()
        .collect();
    let info = PgInfo {
        last: kept.back().map_or(Version::default(), |e| e.version),
    };
    let log = kept.clone();
    let notes = objects::PgNotes {
        unsettled: core.unsettled,
        position: core.position,
        complete: core.undo_dropped,
    };
    let writers = core.writers.clone();
    let (left, writers) = inner
        .blocking(move |store| {
            let mut records: BTreeMap<ObjectName, Vec<u64>> = BTreeMap::new();
            let mut txn = Transaction::new();
            let mut left = Vec::new();
            for entry in above.iter().rev() {
                let object = objects::object_ref(pg, &entry.object);
                if !records.contains_key(&entry.object) {
                    let versions = store.undo_versions(&object).map_err(|e| e.to_string())?;
                    records.insert(entry.object.clone(), versions);
                }
                let versions = records.get_mut(&entry.object).expect("just read");
                if versions.last() == Some(&entry.version.seq) {
                    versions.pop();
                    txn.rollback(&object, entry.version.seq);
                } else {
                    // Older records of it cannot be reached past this one.
                    versions.clear();
                    left.push(entry.object.clone());
                }
            }
            let writers = objects::replace_log(&mut txn, pg, info, &log, notes, &writers);
            store.apply(txn).map_err(|e| e.to_string())?;
            Ok::<_, String>((left, writers))
        })
        .await??;
    if !left.is_empty() {
        tracing::warn!(
            pg = %format!("{}.{}", pg.pool, pg.number),
            objects = ?left,
            "rolling back: no undo record of these objects' writes; recovery rebuilds them"
        );
    }
    core.set_log(info, kept);
    core.writers = writers;
    Ok(())
}

fn retry_later(inner: Arc<OsdState>, id: PgId) {
    inner.clone().spawn(async move {
        tokio::time::sleep(RETRY_PAUSE).await;
        peer(inner, id).await;
    });
}

/// Recovers `target` until it joins the clean replicas, or until another task or a new
/// interval takes over its recovery (`token` no longer current). The PG's core decides
/// (pg/recovery.rs); this carries out its actions, without the PG's lock but for the join.
async fn recover(inner: Arc<OsdState>, id: PgId, target: OsdId, token: u64) {
    let pg = inner.pg(id);
    let label = format!("{}.{}", id.pool, id.number);
    let mut token = token;
    let mut event = recovering::Event::Begin;
    loop {
        let mut core = pg.core.lock().await;
        let mut actions = VecDeque::from(core.on_recovery(target, token, event));
        event = loop {
            let action = actions
                .pop_front()
                .expect("a recovery event is answered with IO or an end");
            match action {
                recovering::Action::Query { claim } => {
                    token = claim.token;
                    drop(core);
                    let answer = inner.query(target, id, claim).await;
                    break recovering::Event::TargetAnswered(answer.map(|answer| answer.info));
                }
                recovering::Action::Sync { claim } => {
                    drop(core);
                    let guard = Some((target, claim.token));
                    let synced = inner.sync(id, Side::Local, Side::Target(target, claim), guard);
                    break recovering::Event::Synced(synced.await.map(|_| ()));
                }
                recovering::Action::Copy { claim, names } => {
                    drop(core);
                    let copied = copy_names(&inner, id, target, claim, &names, false).await;
                    break recovering::Event::Copied(copied);
                }
                recovering::Action::Join {
                    claim,
                    names,
                    info,
                    log,
                } => {
                    // Writes wait while the last objects are copied and the target joins.
                    let activate = PeerOp::Activate {
                        claim,
                        info,
                        log,
                        complete_to: core.join_complete_to(),
                        position: core.position_of(target),
                        writers: core.writers.clone(),
                    };
                    let joined = join(&inner, id, target, claim, &names, activate).await;
                    actions.extend(core.on_recovery(
                        target,
                        token,
                        recovering::Event::Joined(joined),
                    ));
                }
                recovering::Action::Publish { interval, state } => {
                    if state.is_active() {
                        became_active(&inner, &pg, &mut core).await;
                    }
                    pg.publish_state(interval, state)
                }
                recovering::Action::Done => {
                    crate::metrics::recovery_ended(true);
                    tracing::info!(pg = %label, osd = target.0, "recovered");
                    return;
                }
                recovering::Action::RetryLater { why } => {
                    drop(core);
                    crate::metrics::recovery_ended(false);
                    tracing::warn!(pg = %label, osd = target.0, error = %why, "recovery");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    break recovering::Event::Begin;
                }
                recovering::Action::Repeer => {
                    drop(core);
                    inner.spawn(peer(inner.clone(), id));
                    return;
                }
                recovering::Action::Stop => return,
            }
        };
    }
}

/// Copies `names` to `target` under `claim`. Without the PG's lock (`locked` false), each
/// copy first checks that the claim is still current.
async fn copy_names(
    inner: &OsdState,
    id: PgId,
    target: OsdId,
    claim: Claim,
    names: &[ObjectName],
    locked: bool,
) -> Result<(), String> {
    let mut pending = crate::metrics::Pending::new(&inner.recovery_pending, names.len());
    for name in names {
        if !locked {
            inner.check_claim(id, Some((target, claim.token))).await?;
        }
        let bytes = inner
            .copy_object(id, name, Side::Local, Side::Target(target, claim))
            .await?;
        pending.copied(bytes);
    }
    Ok(())
}

/// Under the PG's lock (the caller's): copies `names` to `target`, then activates it
/// (`activate`, with this OSD's log).
async fn join(
    inner: &OsdState,
    id: PgId,
    target: OsdId,
    claim: Claim,
    names: &[ObjectName],
    activate: PeerOp,
) -> Result<(), String> {
    copy_names(inner, id, target, claim, names, true).await?;
    inner.peer_op(target, id, activate, Bytes::new()).await?;
    Ok(())
}
