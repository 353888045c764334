//! Coffer's storage daemon (OSD): it keeps placement groups in its local store, serves
//! clients' object operations as primary, replicates writes to the other OSDs of each PG's
//! acting set, and recovers PGs when the map changes. Design: docs/design/replication.md.
//!
//! Replication is primary-copy with a per-PG log (Ceph's way): the primary orders every
//! write of a PG, applies it with its log entry in one store transaction, sends it to every
//! clean replica, and acknowledges once all of them (and at least min_size copies) have it.
//!
//! Must never depend on: `client`, `mon` (checked by scripts/check-deps.py).

mod erasure;
pub mod metrics;
mod net;
mod node;
mod objects;
mod pg;
mod recovery;
mod scrub;
mod service;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use map::cluster::{ClusterMap, Epoch};
use map::placement::{OsdId, PgId};
use messenger::message::{
    AuthTable, CacheFigures, Command, MonReply, MonRequest, OsdBeacon, OsdReply, OsdRequest,
    BEACON_INTERVAL_MS,
};
use messenger::{
    Endpoint, EntityName, Identity, Limits, Mode, ModePolicy, MonAddr, MonClient, SegmentCheck,
};
use store::{MkfsOptions, Store};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

pub use net::{Call, PeerNet};
pub use node::Node;
pub use objects::LOG_ENTRIES_MAX;
pub use pg::SERVE_WAIT;
pub use service::Caller;

/// How long a request to another OSD may take before it counts as failed.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an OSD waits for a map as new as the one a request was made with.
const MAP_CATCH_UP_WAIT: Duration = Duration::from_secs(5);

pub struct OsdConfig {
    pub id: OsdId,
    /// The store's directory.
    pub data_dir: PathBuf,
    pub mons: Vec<MonAddr>,
    /// Modes offered to the monitors.
    pub mon_modes: Vec<Mode>,
    /// Modes accepted from clients, and from other OSDs.
    pub serve_modes: ModePolicy,
    /// Modes offered to other OSDs.
    pub cluster_modes: Vec<Mode>,
    /// The store's read cache limit, if not its default (`store::default_cache_bytes`).
    pub cache_bytes: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum OsdError {
    #[error("monitors: {0}")]
    Mon(#[from] messenger::MonError),
    #[error("messenger: {0}")]
    Messenger(String),
    #[error("store: {0}")]
    Store(String),
    #[error("{0}")]
    Refused(String),
}

/// What an OSD's tasks share: its store, map, placement groups and peers.
pub(crate) struct OsdState {
    pub id: OsdId,
    pub store: Arc<Store>,
    /// How store work runs: on tokio's blocking pool in a daemon, inline under the
    /// simulator, whose single thread must decide every interleaving.
    store_calls: StoreCalls,
    pub map: watch::Sender<Arc<ClusterMap>>,
    pub auth: watch::Sender<Arc<AuthTable>>,
    pgs: std::sync::Mutex<HashMap<PgId, Arc<pg::Pg>>>,
    net: Arc<dyn net::PeerNet>,
    /// The epoch and each PG's acting set as last seen, to peer the PGs whose set changed
    /// (ordered, so PGs are peered in the same order every run).
    acting_seen: std::sync::Mutex<(Epoch, BTreeMap<PgId, Vec<OsdId>>)>,
    /// Peering, recovery and retry tasks, aborted when the OSD stops.
    tasks: std::sync::Mutex<Vec<AbortHandle>>,
    /// Where each PG's recovery tokens start (`pg::Core::draw_token`): counted from the
    /// clock when this OSD started, so a restarted primary's claims are newer.
    first_token: u64,
    /// Copies replaced by read repair since this OSD started (reported in its beacon).
    pub read_repairs: std::sync::atomic::AtomicU64,
    /// Objects recovery has found to copy from this OSD and not copied yet.
    pub recovery_pending: std::sync::atomic::AtomicU64,
    /// Set while a store call runs on a network thread (`OsdState::small_read`,
    /// `OsdState::apply_here`).
    working_here: std::sync::atomic::AtomicBool,
    addr: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum StoreCalls {
    Blocking,
    Inline,
}

/// What differs between one run of an OSD and the next, or between a daemon and a
/// simulated node: where store work runs, and the first recovery token it draws. Tokens
/// order the claims other OSDs fence by ([`messenger::message::Claim`]), so a restarted OSD
/// must draw above every token of its last run, even in the same map epoch: the daemon
/// starts from the wall clock, the simulator from its virtual one.
#[derive(Clone, Copy)]
struct Incarnation {
    store_calls: StoreCalls,
    first_token: u64,
}

/// Tokens a PG may draw per millisecond its OSD has been up before a restart could reuse
/// them (one per peering, recovery pass and scrub repair, far fewer in practice).
const TOKENS_PER_MS: u64 = 1000;

/// The first recovery token of an OSD started `since` after an epoch that only moves on.
fn first_token(since: Duration) -> u64 {
    u64::try_from(since.as_millis())
        .unwrap_or(u64::MAX / TOKENS_PER_MS)
        .saturating_mul(TOKENS_PER_MS)
}

pub struct Osd {
    inner: Arc<OsdState>,
    server: messenger::Server,
    tasks: Vec<JoinHandle<()>>,
}

async fn mon_client(
    identity: &Identity,
    mons: Vec<MonAddr>,
    modes: Vec<Mode>,
) -> Result<MonClient, OsdError> {
    let endpoint = Endpoint::new(identity, Limits::default())
        .map_err(|e| OsdError::Messenger(e.to_string()))?;
    Ok(MonClient::new(endpoint, mons, modes))
}

/// The key that unwraps this OSD's store, from the monitors over a secure link whatever the
/// configured mode (they release it on no other).
async fn store_kek(
    identity: &Identity,
    mons: Vec<MonAddr>,
) -> Result<keys::KeyEncryptionKey, OsdError> {
    let monc = mon_client(identity, mons, vec![Mode::Secure]).await?;
    match monc.call(&MonRequest::GetStoreKek).await? {
        MonReply::StoreKek(bytes) => {
            let bytes: [u8; 32] = bytes
                .try_into()
                .map_err(|_| OsdError::Refused("the store key is not 32 bytes".into()))?;
            Ok(keys::KeyEncryptionKey::from_bytes(bytes))
        }
        MonReply::Denied(why) | MonReply::Failed(why) => Err(OsdError::Refused(why)),
        other => Err(OsdError::Refused(format!("unexpected reply {other:?}"))),
    }
}

impl Osd {
    /// Creates this OSD's store in `dir`, wrapped under the key the monitors keep for it.
    pub async fn mkfs(
        identity: &Identity,
        mons: Vec<MonAddr>,
        dir: PathBuf,
        options: MkfsOptions,
    ) -> Result<(), OsdError> {
        let kek = store_kek(identity, mons).await?;
        tokio::task::spawn_blocking(move || Store::mkfs(&dir, &options, &kek))
            .await
            .map_err(|e| OsdError::Store(e.to_string()))?
            .map_err(|e| OsdError::Store(e.to_string()))
    }

    /// Fetches the store key from the monitors, opens the store, serves on `listener`, and
    /// reports to the monitors that this OSD is up.
    pub async fn start(
        identity: &Identity,
        config: OsdConfig,
        listener: TcpListener,
    ) -> Result<Osd, OsdError> {
        if identity.entity() != &EntityName::osd(config.id.0) {
            return Err(OsdError::Refused(format!(
                "the keyring is for {}, not osd.{}",
                identity.entity(),
                config.id.0
            )));
        }
        let monc = mon_client(identity, config.mons.clone(), config.mon_modes.clone()).await?;
        let kek = store_kek(identity, config.mons.clone()).await?;
        let dir = config.data_dir.clone();
        let cache_bytes = config.cache_bytes;
        let store = tokio::task::spawn_blocking(move || {
            let mut store = Store::open(&dir, &kek)?;
            if let Some(bytes) = cache_bytes {
                store.set_cache_limit(bytes);
            }
            Ok::<_, store::OpenError>(store)
        })
        .await
        .map_err(|e| OsdError::Store(e.to_string()))?
        .map_err(|e| OsdError::Store(format!("{}: {e}", config.data_dir.display())))?;
        let map = monc.map().await?;
        let auth = match monc.call(&MonRequest::GetAuth { newer_than: None }).await? {
            MonReply::Auth(table) => table,
            other => return Err(OsdError::Refused(format!("auth table: {other:?}"))),
        };
        let endpoint = Endpoint::new(identity, Limits::default())
            .map_err(|e| OsdError::Messenger(e.to_string()))?;
        let addr = listener
            .local_addr()
            .map_err(|e| OsdError::Messenger(e.to_string()))?
            .to_string();
        let map = watch::Sender::new(Arc::new(map));
        let net = Arc::new(net::MessengerNet {
            endpoint: endpoint.clone(),
            modes: config.cluster_modes,
            map: map.subscribe(),
            links: Default::default(),
        });
        let since_1970 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let incarnation = Incarnation {
            store_calls: StoreCalls::Blocking,
            first_token: first_token(since_1970),
        };
        let inner = Arc::new(OsdState::new(
            config.id,
            store,
            incarnation,
            map,
            auth,
            net,
            addr,
        ));
        let service = service::OsdService {
            inner: inner.clone(),
        };
        let server = endpoint
            .serve(listener, config.serve_modes, Arc::new(service))
            .map_err(|e| OsdError::Messenger(e.to_string()))?;
        let monc = Arc::new(monc);
        inner.boot(&monc).await?;
        let tasks = vec![
            tokio::spawn(follow_map(inner.clone(), monc.clone())),
            tokio::spawn(follow_auth(inner.clone(), monc.clone())),
            tokio::spawn(send_beacons(inner.clone(), monc)),
        ];
        tracing::info!(osd = inner.id.0, addr = %inner.addr, "up");
        Ok(Osd {
            inner,
            server,
            tasks,
        })
    }

    /// Resolves, with the cause, once the store refuses every transaction because a commit
    /// failed (a file system that filled, a disk error). Only opening the store again tells
    /// what that commit left, as after a crash, so the OSD must stop and be started again.
    pub async fn store_failed(&self) -> String {
        loop {
            if let Some(cause) = self.inner.store.failed() {
                return cause;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    pub fn epoch(&self) -> Epoch {
        self.inner.map.borrow().epoch
    }

    /// Stops serving and every background task; writes in progress finish or fail first.
    pub async fn shutdown(self) {
        for task in &self.tasks {
            task.abort();
        }
        self.inner.abort_tasks();
        self.server.shutdown().await;
    }
}

impl OsdState {
    fn new(
        id: OsdId,
        store: Store,
        incarnation: Incarnation,
        map: watch::Sender<Arc<ClusterMap>>,
        auth: AuthTable,
        net: Arc<dyn net::PeerNet>,
        addr: String,
    ) -> OsdState {
        OsdState {
            id,
            store: Arc::new(store),
            store_calls: incarnation.store_calls,
            map,
            auth: watch::Sender::new(Arc::new(auth)),
            pgs: Default::default(),
            net,
            acting_seen: Default::default(),
            tasks: Default::default(),
            first_token: incarnation.first_token,
            read_repairs: Default::default(),
            recovery_pending: Default::default(),
            working_here: Default::default(),
            addr,
        }
    }

    /// Runs `task` until it ends or the OSD stops.
    pub fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(task).abort_handle();
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }

    fn abort_tasks(&self) {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for task in tasks {
            task.abort();
        }
    }

    pub fn pg(&self, id: PgId) -> Arc<pg::Pg> {
        let mut pgs = self.pgs.lock().unwrap_or_else(|p| p.into_inner());
        pgs.entry(id)
            .or_insert_with(|| Arc::new(pg::Pg::new(id, self.first_token)))
            .clone()
    }

    async fn boot(&self, monc: &MonClient) -> Result<(), OsdError> {
        match monc
            .command(Command::OsdBoot {
                addr: self.addr.clone(),
            })
            .await?
        {
            MonReply::Done { .. } => Ok(()),
            MonReply::Denied(why) | MonReply::Failed(why) => Err(OsdError::Refused(why)),
            other => Err(OsdError::Refused(format!("boot: unexpected {other:?}"))),
        }
    }

    /// The state of every PG this OSD leads, by PG.
    fn led(&self) -> Vec<(PgId, messenger::message::PgState)> {
        let pgs = self.pgs.lock().unwrap_or_else(|p| p.into_inner());
        let mut led: Vec<_> = pgs
            .values()
            .filter_map(|pg| match &*pg.serving.borrow() {
                pg::Serving::Primary { state, .. } => Some((pg.id, state.clone())),
                pg::Serving::NotPrimary => None,
            })
            .collect();
        led.sort_by_key(|(id, _)| *id);
        led
    }

    /// Waits until this OSD's map is at least `epoch` (bounded); the map it has then.
    pub async fn map_at_least(&self, epoch: Epoch) -> Arc<ClusterMap> {
        let mut watch = self.map.subscribe();
        let _ = tokio::time::timeout(MAP_CATCH_UP_WAIT, watch.wait_for(|m| m.epoch >= epoch)).await;
        let map = watch.borrow().clone();
        map
    }

    /// Sends `request` to another OSD and returns its reply.
    pub async fn call_peer(
        &self,
        osd: OsdId,
        request: &OsdRequest,
        data: Bytes,
        check: Option<SegmentCheck>,
    ) -> Result<(OsdReply, Bytes), String> {
        self.net.call(osd, request, data, check).await
    }

    /// Peers every PG whose acting set changed in `map` (and drops the others' primacy).
    fn on_map(self: &Arc<Self>, map: &ClusterMap) {
        let mut guard = self.acting_seen.lock().unwrap_or_else(|p| p.into_inner());
        let (last_epoch, seen) = &mut *guard;
        // A map that skips epochs may hide an interval with another primary: peer everything.
        let skipped = map.epoch > *last_epoch + 1;
        *last_epoch = map.epoch;
        let mut live = std::collections::BTreeSet::new();
        for pool in map.pools.values() {
            for number in 0..pool.pg_num {
                let id = PgId {
                    pool: pool.id,
                    number,
                };
                let acting = map.acting(pool, id);
                live.insert(id);
                let involved = acting.contains(&self.id) || seen.contains_key(&id);
                if !involved || (!skipped && seen.get(&id) == Some(&acting)) {
                    continue;
                }
                // Until peering finishes, ops wait and the beacon says so.
                let serving = if acting.first() == Some(&self.id) {
                    pg::Serving::Primary {
                        epoch: map.epoch,
                        state: messenger::message::PgState::Peering,
                    }
                } else {
                    pg::Serving::NotPrimary
                };
                self.pg(id).announce(map.epoch, serving);
                seen.insert(id, acting);
                self.spawn(recovery::peer(self.clone(), id));
            }
        }
        seen.retain(|id, _| {
            if live.contains(id) {
                return true;
            }
            // The pool is gone: peering gives up primacy and ends its recoveries.
            self.pg(*id).announce(map.epoch, pg::Serving::NotPrimary);
            self.spawn(recovery::peer(self.clone(), *id));
            false
        });
    }
}

/// Follows the map by epoch, peering PGs as their acting sets change, and boots again if
/// the monitors marked this OSD down while it was alive.
async fn follow_map(inner: Arc<OsdState>, monc: Arc<MonClient>) {
    let first = inner.map.borrow().clone();
    inner.on_map(&first);
    loop {
        let epoch = inner.map.borrow().epoch;
        match monc.map_after(epoch).await {
            Ok(map) if map.epoch > epoch => {
                let map = Arc::new(map);
                inner.map.send_replace(map.clone());
                inner.on_map(&map);
                let marked_down = map.osds.get(&inner.id).is_some_and(|o| !o.up);
                if marked_down {
                    tracing::warn!("the monitors marked this OSD down; booting again");
                    if let Err(e) = inner.boot(&monc).await {
                        tracing::warn!(error = %e, "boot");
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "map subscription");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Keeps the auth table current, to authorise clients and peers as the monitors do.
async fn follow_auth(inner: Arc<OsdState>, monc: Arc<MonClient>) {
    loop {
        let version = inner.auth.borrow().version;
        let request = MonRequest::GetAuth {
            newer_than: Some(version),
        };
        match monc.call(&request).await {
            Ok(MonReply::Auth(table)) if table.version > version => {
                inner.auth.send_replace(Arc::new(table));
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "auth subscription");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

fn cache_figures(stats: store::CacheStats) -> CacheFigures {
    CacheFigures {
        limit_bytes: stats.limit_bytes,
        held_bytes: stats.held_bytes,
        hit_bytes: stats.hit_bytes,
        miss_bytes: stats.miss_bytes,
    }
}

/// Tells the monitors this OSD is alive, with the state of the PGs it leads.
async fn send_beacons(inner: Arc<OsdState>, monc: Arc<MonClient>) {
    let mut tick = tokio::time::interval(Duration::from_millis(BEACON_INTERVAL_MS));
    loop {
        tick.tick().await;
        let pgs = inner.led();
        let statfs = inner.store.statfs();
        let usage = crate::service::usage(&statfs);
        crate::metrics::beacon(&pgs, &usage);
        let pools = inner.store.pool_usage().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "pool usage");
            Vec::new()
        });
        let beacon = OsdBeacon {
            epoch: inner.map.borrow().epoch,
            pgs,
            usage,
            read_repairs: inner
                .read_repairs
                .load(std::sync::atomic::Ordering::Relaxed),
            pools: pools
                .into_iter()
                .filter(|(pool, _)| !pool.is_pg_meta())
                .collect(),
            recovery_pending: inner
                .recovery_pending
                .load(std::sync::atomic::Ordering::Relaxed),
            cache: cache_figures(inner.store.cache_stats()),
        };
        if let Err(e) = monc.call(&MonRequest::Beacon(beacon)).await {
            tracing::warn!(error = %e, "beacon");
        }
    }
}
