//! Coffer's client library, used by every front end: connect with a keyring, follow the
//! cluster map, and read and write objects in pools. Requests go to each object's primary
//! OSD; on a map change, a lost link or a busy PG they are sent again with the same request
//! id, so a write takes effect once however often it is retried.
//!
//! Must never depend on: `osd`, `store` (checked by scripts/check-deps.py).

pub mod conf;
mod daemon;
mod edge;
pub mod stripe;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use map::cluster::{Change, ClusterMap, Epoch, Seal};
use map::placement::{OsdId, PgId};
use map::{ObjectName, PoolId};
use messenger::message::{
    Command, MonReply, MonRequest, MonStatus, OsdReply, OsdRequest, ReqId, Version, LIST_PAGE_MAX,
};
use messenger::{Connection, DataSegment, Endpoint, EntityName, Identity, Limits, Mode, MonClient};
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

pub use conf::Conf;
/// The operations of [`Pool::operate`], and their results.
pub use messenger::message::{
    ChunkSeal, KmsKeyListing, ObjectOp, OpResult, ScrubFinding, CHUNK_BYTES, OWN_KEY_ID,
};

/// How long an operation keeps trying (map changes, recovering PGs, OSDs restarting) before
/// it fails with the last reason it was given.
pub const OP_TIMEOUT: Duration = Duration::from_secs(120);
/// Bytes of object data per request when an object is read or written in pieces.
pub const REQUEST_DATA_BYTES: u64 = 16 << 20;

/// What a scrub of one PG found (`Pool::scrub_pg`).
#[derive(Clone, Debug, Default)]
pub struct PgScrub {
    /// The OSDs whose copies were compared (the primary first).
    pub osds: Vec<OsdId>,
    pub objects: u64,
    /// Data bytes the primary read.
    pub bytes: u64,
    /// The objects whose copies disagree.
    pub findings: Vec<ScrubFinding>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Conf(String),
    #[error("keyring: {0}")]
    Keyring(String),
    #[error("monitors: {0}")]
    Mon(#[from] messenger::MonError),
    #[error("pool {0:?} does not exist")]
    NoSuchPool(String),
    #[error("no such object")]
    NotFound,
    #[error("the object exists")]
    Exists,
    /// A condition of a write (`ObjectOp::AssertAttr`, `AssertOmap`) did not hold; nothing was applied.
    #[error("condition failed: {0}")]
    Mismatch(String),
    #[error("permission denied: {0}")]
    Denied(String),
    #[error("{0}")]
    Failed(String),
    /// A store that would take the write is full; nothing was written. Deletes still work.
    #[error("no space: {0}")]
    NoSpace(String),
    /// What was read fails its integrity check (on an OSD, or here when the client opens
    /// chunks it sealed), and no good copy replaced it.
    #[error("integrity: {0}")]
    Integrity(String),
    #[error("gave up after {after:?}: {why}")]
    Timeout { after: Duration, why: String },
    #[error("invalid: {0}")]
    Invalid(String),
    /// A daemon could not be reached, or its link broke before it answered
    /// ([`Cluster::call_daemon`]).
    #[error("unreachable: {0}")]
    Unreachable(String),
}

/// What a `Cluster` handle and its clones share: the links, the map, the monitor client.
struct ClusterState {
    endpoint: Endpoint,
    monc: MonClient,
    map: watch::Sender<Arc<ClusterMap>>,
    conns: Mutex<HashMap<OsdId, (String, Connection)>>,
    modes: Vec<Mode>,
    instance: u64,
    next_seq: AtomicU64,
    op_timeout: Duration,
    follower: std::sync::Mutex<Option<JoinHandle<()>>>,
    daemons: Mutex<daemon::DaemonLinks>,
}

impl Drop for ClusterState {
    fn drop(&mut self) {
        if let Some(task) = self
            .follower
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

/// A data key from the monitors' KMS: the key in the clear (zeroised on drop), and as
/// wrapped by `version` of KMS key `key`.
pub struct DataKey {
    pub key: String,
    pub version: u32,
    pub plaintext: keys::SecretKey<32>,
    pub wrapped: Vec<u8>,
}

/// A connection to a cluster. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<ClusterState>,
}

/// Reads the keyring file of `entity` (its key, certificate and the cluster's authority).
pub fn load_identity(path: &std::path::Path, entity: &EntityName) -> Result<Identity, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Keyring(format!("{}: {e}", path.display())))?;
    Identity::from_pem(entity.clone(), &text)
        .map_err(|e| Error::Keyring(format!("{}: {e}", path.display())))
}

impl Cluster {
    /// Connects as `identity` to the cluster that `conf` describes and fetches its map.
    pub async fn connect(conf: &Conf, identity: &Identity) -> Result<Cluster, Error> {
        Cluster::connect_with(conf, identity, OP_TIMEOUT).await
    }

    pub async fn connect_with(
        conf: &Conf,
        identity: &Identity,
        op_timeout: Duration,
    ) -> Result<Cluster, Error> {
        let endpoint = Endpoint::new(identity, Limits::default())
            .map_err(|e| Error::Keyring(e.to_string()))?;
        let monc = MonClient::new(endpoint.clone(), conf.mon_addrs()?, conf.mon_modes()?);
        let map = monc.map().await?;
        let inner = Arc::new(ClusterState {
            endpoint,
            monc,
            map: watch::Sender::new(Arc::new(map)),
            conns: Mutex::new(HashMap::new()),
            modes: conf.client_modes()?,
            instance: rand::random(),
            next_seq: AtomicU64::new(1),
            op_timeout,
            follower: std::sync::Mutex::new(None),
            daemons: Mutex::default(),
        });
        let follower = tokio::spawn(follow_map(Arc::downgrade(&inner)));
        *inner.follower.lock().unwrap_or_else(|p| p.into_inner()) = Some(follower);
        Ok(Cluster { inner })
    }

    /// Who this connection authenticated as (`client.admin`).
    pub fn entity(&self) -> String {
        self.inner.endpoint.entity().to_string()
    }

    /// This connection's instance: the `client` half of its request ids, which the OSDs
    /// refuse once it is blocklisted.
    pub fn instance(&self) -> u64 {
        self.inner.instance
    }

    /// The newest map this client has.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.inner.map.borrow().clone()
    }

    /// Waits until the client's map is at least `epoch` (fetching it if need be).
    pub async fn wait_for_epoch(&self, epoch: Epoch) -> Result<Arc<ClusterMap>, Error> {
        if self.map().epoch < epoch {
            self.inner.refresh().await?;
        }
        Ok(self.map())
    }

    /// A command to the monitors (pools, OSDs, entities).
    pub async fn command(&self, command: Command) -> Result<MonReply, Error> {
        let reply = self.inner.monc.command(command).await?;
        match reply {
            MonReply::Denied(why) => Err(Error::Denied(why)),
            MonReply::Failed(why) => Err(Error::Failed(why)),
            MonReply::Done { epoch } => {
                self.wait_for_epoch(epoch).await?;
                Ok(MonReply::Done { epoch })
            }
            other => Ok(other),
        }
    }

    /// Makes every OSD refuse writes from client instance `instance` (see
    /// [`Cluster::instance`]): fencing for a writer whose lock was broken. Returns once this
    /// client's map includes it, so this client's later requests reach OSDs that refuse the
    /// fenced writer's.
    pub async fn blocklist(&self, instance: u64) -> Result<(), Error> {
        let change = Change::Blocklist { client: instance };
        self.command(Command::Change(change)).await.map(|_| ())
    }

    pub async fn status(&self) -> Result<MonStatus, Error> {
        match self.inner.monc.call(&MonRequest::Status).await? {
            MonReply::Status(status) => Ok(*status),
            MonReply::Denied(why) => Err(Error::Denied(why)),
            other => Err(Error::Failed(format!("unexpected reply {other:?}"))),
        }
    }

    /// The keys of the monitors' KMS.
    pub async fn kms_keys(&self) -> Result<Vec<KmsKeyListing>, Error> {
        match self.command(Command::KmsKeyList).await? {
            MonReply::KmsKeys(keys) => Ok(keys),
            other => Err(Error::Failed(format!("unexpected reply {other:?}"))),
        }
    }

    /// Creates KMS key `name`.
    pub async fn kms_key_create(&self, name: &str) -> Result<(), Error> {
        let command = Command::KmsKeyCreate { name: name.into() };
        self.command(command).await.map(|_| ())
    }

    /// Adds a version to KMS key `name`: new data keys are wrapped by it.
    pub async fn kms_key_rotate(&self, name: &str) -> Result<(), Error> {
        let command = Command::KmsKeyRotate { name: name.into() };
        self.command(command).await.map(|_| ())
    }

    /// Removes KMS key `name`: every data key it wrapped can no longer be opened.
    pub async fn kms_key_remove(&self, name: &str) -> Result<(), Error> {
        let command = Command::KmsKeyRemove { name: name.into() };
        self.command(command).await.map(|_| ())
    }

    /// A fresh data key of KMS key `key`: in the clear, and wrapped by the key's newest
    /// version.
    pub async fn kms_generate(&self, key: &str) -> Result<DataKey, Error> {
        self.data_key(MonRequest::KmsGenerate { key: key.into() })
            .await
    }

    /// The data key `wrapped` by version `version` of KMS key `key`.
    pub async fn kms_decrypt(
        &self,
        key: &str,
        version: u32,
        wrapped: &[u8],
    ) -> Result<DataKey, Error> {
        let request = MonRequest::KmsDecrypt {
            key: key.into(),
            version,
            wrapped: wrapped.to_vec(),
        };
        self.data_key(request).await
    }

    /// The data key `wrapped` by version `version` of KMS key `key`, wrapped again by the
    /// key's newest version: that version and the new wrap.
    pub async fn kms_rewrap(
        &self,
        key: &str,
        version: u32,
        wrapped: &[u8],
    ) -> Result<(u32, Vec<u8>), Error> {
        let request = MonRequest::KmsRewrap {
            key: key.into(),
            version,
            wrapped: wrapped.to_vec(),
        };
        match self.inner.monc.call(&request).await? {
            MonReply::Rewrapped { version, wrapped } => Ok((version, wrapped)),
            MonReply::Denied(why) => Err(Error::Denied(why)),
            MonReply::Failed(why) => Err(Error::Failed(why)),
            other => Err(Error::Failed(format!("unexpected reply {other:?}"))),
        }
    }

    async fn data_key(&self, request: MonRequest) -> Result<DataKey, Error> {
        match self.inner.monc.call(&request).await? {
            MonReply::DataKey {
                key,
                version,
                mut plaintext,
                wrapped,
            } => {
                let bytes: Result<[u8; 32], _> = plaintext.as_slice().try_into();
                zeroize::Zeroize::zeroize(&mut plaintext);
                let bytes = bytes.map_err(|_| Error::Failed("a data key is 32 bytes".into()))?;
                Ok(DataKey {
                    key,
                    version,
                    plaintext: keys::SecretKey::from_bytes(bytes),
                    wrapped,
                })
            }
            MonReply::Denied(why) => Err(Error::Denied(why)),
            MonReply::Failed(why) => Err(Error::Failed(why)),
            other => Err(Error::Failed(format!("unexpected reply {other:?}"))),
        }
    }

    /// The pool called `name`.
    pub async fn pool(&self, name: &str) -> Result<Pool, Error> {
        let mut found = self.map().pool_by_name(name).map(|p| p.id);
        if found.is_none() {
            self.inner.refresh().await?;
            found = self.map().pool_by_name(name).map(|p| p.id);
        }
        let id = found.ok_or_else(|| Error::NoSuchPool(name.into()))?;
        Ok(Pool {
            cluster: self.clone(),
            id,
            name: name.into(),
            edge: Arc::default(),
        })
    }

    /// The data keys of pool `pool`, sealed at the edge, from the monitors.
    async fn pool_keys(&self, pool: PoolId) -> Result<edge::EdgeKeys, Error> {
        match self.inner.monc.call(&MonRequest::PoolKeys { pool }).await? {
            MonReply::PoolKeys { keys } => edge::EdgeKeys::new(pool, keys),
            MonReply::Denied(why) => Err(Error::Denied(why)),
            MonReply::Failed(why) => Err(Error::Failed(why)),
            other => Err(Error::Failed(format!("unexpected reply {other:?}"))),
        }
    }
}

impl ClusterState {
    async fn refresh(&self) -> Result<(), Error> {
        let map = self.monc.map().await?;
        self.map.send_if_modified(|current| {
            if map.epoch > current.epoch {
                *current = Arc::new(map);
                true
            } else {
                false
            }
        });
        Ok(())
    }

    async fn connection(&self, osd: OsdId, addr: &str) -> Result<Connection, String> {
        if let Some((known, conn)) = self.conns.lock().await.get(&osd) {
            if known == addr && !conn.is_closed() {
                return Ok(conn.clone());
            }
        }
        // Connect without holding the table: one unreachable OSD must not stall the others.
        let socket: SocketAddr = addr
            .parse()
            .map_err(|e| format!("osd.{} address {addr:?}: {e}", osd.0))?;
        let conn = self
            .endpoint
            .connect(socket, &EntityName::osd(osd.0), &self.modes)
            .await
            .map_err(|e| format!("connecting to osd.{}: {e}", osd.0))?;
        self.conns
            .lock()
            .await
            .insert(osd, (addr.to_string(), conn.clone()));
        Ok(conn)
    }

    /// Sends the request `make` builds (for the PG and epoch of the current map) to the PG's
    /// primary until it is answered, following map changes and waiting out busy PGs.
    async fn submit(
        &self,
        pool: PoolId,
        locate: &Locate<'_>,
        make: impl Fn(PgId, Epoch) -> OsdRequest,
        data: Bytes,
    ) -> Result<(OsdReply, Bytes), Error> {
        let started = tokio::time::Instant::now();
        let deadline = started + self.op_timeout;
        let mut pause = Duration::from_millis(50);
        let mut told = false;
        loop {
            let map = self.map.borrow().clone();
            let pool_info = map
                .pools
                .get(&pool)
                .ok_or_else(|| Error::NoSuchPool(pool.to_string()))?;
            let pg = match locate {
                Locate::Object(name) => map.pg_of(pool_info, name),
                Locate::Pg(number) => PgId {
                    pool,
                    number: *number,
                },
            };
            let primary = map
                .acting(pool_info, pg)
                .first()
                .and_then(|osd| map.osds.get(osd))
                .and_then(|osd| osd.addr.clone().map(|addr| (osd.id, addr)));
            let why = match primary {
                None => format!("no OSD of pg {}.{} is up", pg.pool, pg.number),
                Some((osd, addr)) => {
                    let request = make(pg, map.epoch);
                    let sent = match self.connection(osd, &addr).await {
                        Ok(conn) => conn
                            .request_with::<_, OsdReply>(
                                &request,
                                data.clone(),
                                if request.data_is_sealed() {
                                    DataSegment::Sealed
                                } else {
                                    DataSegment::Plain
                                },
                            )
                            .await
                            .map_err(|e| format!("osd.{}: {e}", osd.0)),
                        Err(e) => Err(e),
                    };
                    match sent {
                        Ok((OsdReply::Retry { why, .. }, _)) => why,
                        Ok((OsdReply::Busy(why), _)) => why,
                        Ok((OsdReply::Full(why), _)) => return Err(Error::NoSpace(why)),
                        Ok((OsdReply::Denied(why), _)) => return Err(Error::Denied(why)),
                        Ok((OsdReply::Failed(why), _)) => return Err(Error::Failed(why)),
                        Ok((OsdReply::Integrity(why), _)) => return Err(Error::Integrity(why)),
                        Ok((OsdReply::NotFound, _)) => return Err(Error::NotFound),
                        Ok((OsdReply::Exists, _)) => return Err(Error::Exists),
                        Ok((OsdReply::Mismatch(why), _)) => return Err(Error::Mismatch(why)),
                        Ok(answer) => return Ok(answer),
                        Err(why) => why,
                    }
                }
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Timeout {
                    after: self.op_timeout,
                    why,
                });
            }
            // Said once, as soon as the wait is one a person notices (a primary holds a
            // request for an inactive PG a few seconds before it answers why).
            if !told && started.elapsed() >= Duration::from_secs(1) {
                tracing::warn!(
                    "waiting: {why} (trying again for up to {} s; `coffer status` says more)",
                    deadline
                        .saturating_duration_since(tokio::time::Instant::now())
                        .as_secs()
                );
                told = true;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "refreshing the map");
            }
        }
    }
}

enum Locate<'a> {
    Object(&'a ObjectName),
    Pg(u32),
}

async fn follow_map(inner: std::sync::Weak<ClusterState>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let epoch = strong.map.borrow().epoch;
        let monc_result = strong.monc.map_after(epoch).await;
        match monc_result {
            Ok(map) => {
                strong.map.send_if_modified(|current| {
                    if map.epoch > current.epoch {
                        *current = Arc::new(map);
                        true
                    } else {
                        false
                    }
                });
            }
            Err(e) => {
                tracing::debug!(error = %e, "map subscription");
                drop(strong);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// An object's size, modification time and version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub size: u64,
    pub mtime_ns: u64,
    pub version: Version,
}

/// Objects of one pool.
#[derive(Clone)]
pub struct Pool {
    cluster: Cluster,
    id: PoolId,
    name: String,
    /// The pool's data keys once fetched, if it is sealed at the edge.
    edge: Arc<std::sync::Mutex<Option<Arc<edge::EdgeKeys>>>>,
}

/// Attempts of a partial-chunk write before it gives up on writers that keep changing the
/// same chunk.
const EDGE_ATTEMPTS: usize = 16;
/// Before attempt `attempt` of a conditional chunk write: nothing the first time, then a
/// random pause that doubles (up to 64 ms), so writers that keep colliding on one chunk
/// fall out of step.
async fn contention_pause(attempt: usize) {
    if attempt > 0 {
        let cap_us = 1000u64 << attempt.min(6);
        let pause = rand::random::<u64>() % cap_us;
        tokio::time::sleep(Duration::from_micros(pause)).await;
    }
}

/// The bytes of an edge write: the caller's, copied as they are sealed, or a buffer the
/// caller handed over, sealed where it is.
enum Plain<'a> {
    Borrowed(&'a [u8]),
    Owned(BytesMut),
}

impl Plain<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Plain::Borrowed(bytes) => bytes,
            Plain::Owned(owned) => owned,
        }
    }

    fn len(&self) -> usize {
        self.bytes().len()
    }
}

/// An edge write before its attempts: sealed once (seals and the sealed segment), or to be
/// merged with the chunks it shares, in every attempt.
enum Prepared<'a> {
    Sealed((Vec<ChunkSeal>, Bytes)),
    Merge(Plain<'a>),
}

/// Times the client asks the monitors again for a key version the map already names.
const KEY_FETCH_ATTEMPTS: usize = 20;

fn object_name(name: &str) -> Result<ObjectName, Error> {
    ObjectName::new(name).map_err(|e| Error::Invalid(e.to_string()))
}

impl Pool {
    pub fn id(&self) -> PoolId {
        self.id
    }

    /// The cluster connection this pool handle uses.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pool's number of placement groups, in the current map.
    pub fn pg_num(&self) -> Result<u32, Error> {
        self.cluster
            .map()
            .pools
            .get(&self.id)
            .map(|p| p.pg_num)
            .ok_or_else(|| Error::NoSuchPool(self.name.clone()))
    }

    /// Runs `ops` on object `name` as one request: all writes (applied atomically, once) or
    /// all reads. Returns the read results and the bytes read.
    pub async fn operate(
        &self,
        name: &str,
        ops: Vec<ObjectOp>,
        data: Bytes,
    ) -> Result<(Vec<OpResult>, Bytes), Error> {
        let object = object_name(name)?;
        let inner = &self.cluster.inner;
        let reqid = ReqId {
            client: inner.instance,
            seq: inner.next_seq.fetch_add(1, Ordering::Relaxed),
        };
        let make = |pg, epoch| OsdRequest::Op {
            pg,
            epoch,
            object: object.clone(),
            reqid,
            ops: ops.clone(),
        };
        match inner
            .submit(self.id, &Locate::Object(&object), make, data)
            .await?
        {
            (OsdReply::Written { .. }, _) => Ok((Vec::new(), Bytes::new())),
            (OsdReply::Results(results), bytes) => Ok((results, bytes)),
            (other, _) => Err(Error::Failed(format!("unexpected reply {other:?}"))),
        }
    }

    async fn write_ops(&self, name: &str, ops: Vec<ObjectOp>, data: Bytes) -> Result<(), Error> {
        self.operate(name, ops, data).await.map(|_| ())
    }

    /// Whether the pool is sealed at the edge: then this client seals what it writes and
    /// opens what it reads (docs/design/edge-sealing.md).
    pub fn is_edge_sealed(&self) -> bool {
        self.edge_version().is_some()
    }

    fn edge_version(&self) -> Option<u16> {
        match self.cluster.map().pools.get(&self.id)?.seal {
            Seal::Edge { key } => Some(key),
            Seal::Osd => None,
        }
    }

    /// The pool's keys, holding at least the map's current version and `need` (a version a
    /// chunk names); `None` in a pool sealed by the OSDs.
    async fn edge_keys(&self, need: Option<u16>) -> Result<Option<Arc<edge::EdgeKeys>>, Error> {
        let Some(current) = self.edge_version() else {
            return Ok(None);
        };
        let want = need.unwrap_or(current).max(current);
        for _ in 0..KEY_FETCH_ATTEMPTS {
            let held = self.edge.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(keys) = held.filter(|k| k.current >= current && k.holds(want)) {
                return Ok(Some(keys));
            }
            let fetched = Arc::new(self.cluster.pool_keys(self.id).await?);
            if fetched.current >= current && fetched.holds(want) {
                *self.edge.lock().unwrap_or_else(|p| p.into_inner()) = Some(fetched.clone());
                return Ok(Some(fetched));
            }
            if need.is_some_and(|v| v > current) {
                // A chunk names a key the cluster's map does not: a newer map, or a forgery.
                self.cluster.inner.refresh().await?;
            }
            // A monitor behind the map's epoch: ask again.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(Error::Failed(format!(
            "pool {}: the monitors do not release data key {want}",
            self.name
        )))
    }

    /// Chunks `[first, first + count)` of `name`, opened, with the object's size and the
    /// chunks' records (`None` for holes, which read as zeros). A chunk that fails its tag
    /// has the primary repair the object from a good copy, and is read once more.
    async fn read_chunks(
        &self,
        keys: &Arc<edge::EdgeKeys>,
        name: &str,
        first: u64,
        count: u64,
    ) -> Result<(u64, Vec<Option<ChunkSeal>>, bytes::BytesMut), Error> {
        match self.read_chunks_once(keys, name, first, count).await {
            Err(Error::Integrity(why)) => {
                self.read_repair(name, &why).await?;
                self.read_chunks_once(keys, name, first, count).await
            }
            read => read,
        }
    }

    /// Read repair: asks the primary of `name` to replace its copy, which this client could
    /// not open (`why`), with a good one; fails (`Error::Integrity`, with `why`) when no
    /// copy was replaced. For callers that open chunks under keys of their own.
    pub async fn read_repair(&self, name: &str, why: &str) -> Result<(), Error> {
        let object = object_name(name)?;
        tracing::warn!(pool = %self.name, object = name, error = why, "read repair");
        let make = |pg, epoch| OsdRequest::Repair {
            pg,
            epoch,
            object: object.clone(),
        };
        let inner = &self.cluster.inner;
        match inner
            .submit(self.id, &Locate::Object(&object), make, Bytes::new())
            .await?
        {
            (OsdReply::Repaired(Some(found)), _) if found.repaired => Ok(()),
            (OsdReply::Repaired(Some(found)), _) => {
                Err(Error::Integrity(format!("{why}; {}", found.what)))
            }
            (OsdReply::Repaired(None), _) => Err(Error::Integrity(format!(
                "{why}; every copy holds the same bytes, so none is good"
            ))),
            (other, _) => Err(Error::Failed(format!("unexpected reply {other:?}"))),
        }
    }

    async fn read_chunks_once(
        &self,
        keys: &Arc<edge::EdgeKeys>,
        name: &str,
        first: u64,
        count: u64,
    ) -> Result<(u64, Vec<Option<ChunkSeal>>, bytes::BytesMut), Error> {
        let count_u32 =
            u32::try_from(count).map_err(|_| Error::Invalid("read too large".into()))?;
        let ops = vec![ObjectOp::ReadChunks {
            first,
            count: count_u32,
        }];
        let (results, data) = self.operate(name, ops, Bytes::new()).await?;
        let (size, seals) = match results.as_slice() {
            [OpResult::Chunks { size, seals }] => (*size, seals.clone()),
            other => return Err(Error::Failed(format!("unexpected results {other:?}"))),
        };
        let mut data = data
            .try_into_mut()
            .unwrap_or_else(|shared| bytes::BytesMut::from(&shared[..]));
        if let Some(at) = seals
            .iter()
            .position(|s| s.is_some_and(|s| s.key_id == OWN_KEY_ID))
        {
            return Err(Error::Failed(format!(
                "chunk {} of {name} is sealed under a key of its own (an S3 object's data \
                 key), not the pool's: read it through the S3 gateway",
                first + at as u64
            )));
        }
        let newest = seals
            .iter()
            .flatten()
            .map(|s| (s.key_id >> 48) as u16)
            .max();
        let keys = match newest {
            Some(version) if !keys.holds(version) => self
                .edge_keys(Some(version))
                .await?
                .ok_or_else(|| Error::Failed("the pool is no longer sealed at the edge".into()))?,
            _ => keys.clone(),
        };
        keys.open(name, first, &mut data, &seals)?;
        Ok((size, seals, data))
    }

    /// One chunk, opened, with bytes at or past the object's size zeroed; for merging.
    async fn chunk_for_merge(
        &self,
        keys: &Arc<edge::EdgeKeys>,
        name: &str,
        index: u64,
    ) -> Result<(u64, Option<ChunkSeal>, bytes::BytesMut), Error> {
        match self.read_chunks(keys, name, index, 1).await {
            Ok((size, seals, mut data)) => {
                let keep = size.saturating_sub(index * CHUNK_BYTES).min(CHUNK_BYTES) as usize;
                data[keep..].fill(0);
                Ok((size, seals[0], data))
            }
            Err(Error::NotFound) => Ok((0, None, bytes::BytesMut::zeroed(CHUNK_BYTES as usize))),
            Err(e) => Err(e),
        }
    }

    /// Writes `data` at `offset` of an edge-sealed object: whole chunks are sealed and sent;
    /// a chunk written in part is read, merged and resealed under the condition that it did
    /// not change meanwhile (retried if it did). Growing past a partial last chunk rewrites
    /// it too, zeroed past the old size, in the same request.
    async fn write_edge(
        &self,
        keys: &Arc<edge::EdgeKeys>,
        name: &str,
        offset: u64,
        data: Plain<'_>,
        replace: bool,
    ) -> Result<(), Error> {
        let end = offset + data.len() as u64;
        let first = offset / CHUNK_BYTES;
        let last = end.div_ceil(CHUNK_BYTES);
        let chunk = CHUNK_BYTES as usize;
        let mut merge = Vec::new();
        if !replace && !offset.is_multiple_of(CHUNK_BYTES) {
            merge.push(first);
        }
        if !replace && !end.is_multiple_of(CHUNK_BYTES) && !merge.contains(&(last - 1)) {
            merge.push(last - 1);
        }
        // A write starting on a chunk with nothing merged is sealed once, whatever the
        // attempts: in the caller's buffer if it was handed over, else copied and sealed
        // chunk by chunk into a recycled buffer (zeros past a replacing write's end).
        let prepared = if merge.is_empty() && offset == first * CHUNK_BYTES {
            let padded = ((last - first) * CHUNK_BYTES) as usize;
            Prepared::Sealed(match data {
                Plain::Owned(mut owned) => {
                    owned.resize(padded, 0);
                    let seals = keys.seal(name, first, &mut owned);
                    (seals, owned.freeze())
                }
                Plain::Borrowed(bytes) => {
                    let mut buf = keys.buffers.take();
                    let seals = keys.seal_copy(name, first, bytes, &mut buf);
                    (seals, keys.buffers.send(buf))
                }
            })
        } else {
            Prepared::Merge(data)
        };
        let mut fix_tail = false;
        for attempt in 0..EDGE_ATTEMPTS {
            contention_pause(attempt).await;
            let mut ops = Vec::new();
            let mut size = None;
            // Otherwise the write's bytes and the merged chunks are put together first.
            let mut merged = Vec::new();
            if let Prepared::Merge(data) = &prepared {
                merged = keys.buffers.take();
                merged.resize(((last - first) * CHUNK_BYTES) as usize, 0);
                for &index in &merge {
                    let (found, seal, plain) = self.chunk_for_merge(keys, name, index).await?;
                    size = Some(found);
                    let at = ((index - first) * CHUNK_BYTES) as usize;
                    merged[at..at + chunk].copy_from_slice(&plain);
                    ops.push(ObjectOp::AssertChunk { index, seal });
                }
                let at = (offset - first * CHUNK_BYTES) as usize;
                merged[at..at + data.len()].copy_from_slice(data.bytes());
            }
            let mut segment = Vec::new();
            if replace {
                ops.push(ObjectOp::Truncate { size: 0 });
            } else if fix_tail {
                let size = match size {
                    Some(size) => size,
                    None => self.chunk_for_merge(keys, name, first).await?.0,
                };
                let tail = size / CHUNK_BYTES;
                if !size.is_multiple_of(CHUNK_BYTES) && end > size && !(first..last).contains(&tail)
                {
                    let (_, seal, mut plain) = self.chunk_for_merge(keys, name, tail).await?;
                    if seal.is_some() {
                        let seals = keys.seal(name, tail, &mut plain);
                        ops.push(ObjectOp::AssertChunk { index: tail, seal });
                        // Whole afterwards (zeros past the old size, which the write
                        // passes anyway), so the write below may grow the object.
                        ops.push(ObjectOp::WriteChunks {
                            first: tail,
                            seals,
                            end: (tail + 1) * CHUNK_BYTES,
                        });
                        segment.extend_from_slice(&plain);
                    }
                }
            }
            let (seals, sealed) = match &prepared {
                Prepared::Sealed((seals, sealed)) => (seals.clone(), sealed.clone()),
                Prepared::Merge(_) => {
                    let seals = keys.seal(name, first, &mut merged);
                    (seals, keys.buffers.send(std::mem::take(&mut merged)))
                }
            };
            // Replacing with nothing: the truncate alone leaves the object empty.
            if !seals.is_empty() {
                ops.push(ObjectOp::WriteChunks { first, seals, end });
            }
            // The data segment is the sealed buffer itself, unless a tail chunk goes first.
            let segment = if segment.is_empty() {
                sealed
            } else {
                segment.extend_from_slice(&sealed);
                Bytes::from(segment)
            };
            match self.operate(name, ops, segment).await {
                Ok(_) => return Ok(()),
                Err(Error::Mismatch(_)) if !replace => fix_tail = true,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Failed(format!(
            "{name}: other writers kept changing the chunks this write shares with them \
             ({EDGE_ATTEMPTS} attempts)"
        )))
    }

    /// Replaces object `name` with `data` (in one atomic write up to [`REQUEST_DATA_BYTES`], in
    /// pieces beyond).
    pub async fn put(&self, name: &str, data: Bytes) -> Result<(), Error> {
        if let Some(keys) = self.edge_keys(None).await? {
            let first = data.len().min(REQUEST_DATA_BYTES as usize);
            self.write_edge(&keys, name, 0, Plain::Borrowed(&data[..first]), true)
                .await?;
            let mut offset = first as u64;
            while offset < data.len() as u64 {
                let end = (offset + REQUEST_DATA_BYTES).min(data.len() as u64);
                let piece = Plain::Borrowed(&data[offset as usize..end as usize]);
                self.write_edge(&keys, name, offset, piece, false).await?;
                offset = end;
            }
            return Ok(());
        }
        let first = data.slice(..data.len().min(REQUEST_DATA_BYTES as usize));
        let len = first.len() as u64;
        self.write_ops(name, vec![ObjectOp::WriteFull { len }], first)
            .await?;
        let mut offset = len;
        while offset < data.len() as u64 {
            let end = (offset + REQUEST_DATA_BYTES).min(data.len() as u64);
            self.write(name, offset, data.slice(offset as usize..end as usize))
                .await?;
            offset = end;
        }
        Ok(())
    }

    /// Writes `data` at `offset`, creating the object if need be.
    pub async fn write(&self, name: &str, offset: u64, data: Bytes) -> Result<(), Error> {
        if let Some(keys) = self.edge_keys(None).await? {
            if data.is_empty() {
                return self.create(name, false).await;
            }
            // One piece from a chunk boundary, in a buffer nobody else holds (an NBD write's
            // payload): sealed where it is, not copied.
            if offset.is_multiple_of(CHUNK_BYTES) && data.len() as u64 <= REQUEST_DATA_BYTES {
                return match data.try_into_mut() {
                    Ok(owned) => {
                        let plain = Plain::Owned(owned);
                        self.write_edge(&keys, name, offset, plain, false).await
                    }
                    Err(shared) => {
                        let plain = Plain::Borrowed(&shared);
                        self.write_edge(&keys, name, offset, plain, false).await
                    }
                };
            }
            let mut at = 0u64;
            while at < data.len() as u64 {
                // Pieces end on chunk boundaries, so only the write's own ends are partial.
                let piece_end = ((offset + at + REQUEST_DATA_BYTES) / CHUNK_BYTES * CHUNK_BYTES)
                    .max(offset + at + 1)
                    .min(offset + data.len() as u64);
                let bytes = Plain::Borrowed(&data[at as usize..(piece_end - offset) as usize]);
                self.write_edge(&keys, name, offset + at, bytes, false)
                    .await?;
                at = piece_end - offset;
            }
            return Ok(());
        }
        let len = data.len() as u64;
        self.write_ops(name, vec![ObjectOp::Write { offset, len }], data)
            .await
    }

    /// Zeros `[offset, offset + len)` of an existing object (`NotFound` if there is none: it
    /// reads as zeros already), freeing the space it can. In an edge-sealed pool the OSDs
    /// can drop only whole chunks, so the parts of chunks at either end of the range are
    /// written as zeros (read, merged and sealed again here).
    pub async fn zero(&self, name: &str, offset: u64, len: u64) -> Result<(), Error> {
        let end = offset.saturating_add(len);
        let (whole_from, whole_to) = if self.is_edge_sealed() {
            (
                offset.next_multiple_of(CHUNK_BYTES),
                end / CHUNK_BYTES * CHUNK_BYTES,
            )
        } else {
            (offset, end)
        };
        let parts = if whole_from < whole_to {
            let ops = vec![
                ObjectOp::AssertExists,
                ObjectOp::Zero {
                    offset: whole_from,
                    len: whole_to - whole_from,
                },
            ];
            self.write_ops(name, ops, Bytes::new()).await?;
            [(offset, whole_from), (whole_to, end)]
        } else {
            self.stat(name).await?;
            [(offset, end), (end, end)]
        };
        for (from, to) in parts.into_iter().filter(|(from, to)| from < to) {
            let zeros = Bytes::from(vec![0u8; (to - from) as usize]);
            self.write(name, from, zeros).await?;
        }
        Ok(())
    }

    /// Creates an empty object; with `exclusive`, fails with `Exists` if there is one.
    pub async fn create(&self, name: &str, exclusive: bool) -> Result<(), Error> {
        self.write_ops(name, vec![ObjectOp::Create { exclusive }], Bytes::new())
            .await
    }

    /// Sets the object's size. In an edge-sealed pool, a cut inside a chunk first rewrites
    /// that chunk zeroed past the cut (in the same request), so growing the object later
    /// reads zeros there, not the old bytes.
    pub async fn truncate(&self, name: &str, size: u64) -> Result<(), Error> {
        let Some(keys) = self.edge_keys(None).await? else {
            return self
                .write_ops(name, vec![ObjectOp::Truncate { size }], Bytes::new())
                .await;
        };
        for attempt in 0..EDGE_ATTEMPTS {
            contention_pause(attempt).await;
            let (old, index) = {
                let probe = self
                    .chunk_for_merge(&keys, name, size / CHUNK_BYTES)
                    .await?;
                (probe.0, size / CHUNK_BYTES)
            };
            let mut ops = Vec::new();
            let mut segment = Vec::new();
            // The chunk that will be partial after the cut (shrinking), or the old partial
            // tail (growing): rewritten, zeroed past the smaller of the two sizes.
            let (cut, at) = if size < old {
                (size, index)
            } else {
                (old, old / CHUNK_BYTES)
            };
            if !cut.is_multiple_of(CHUNK_BYTES) {
                let (_, seal, mut plain) = self.chunk_for_merge(&keys, name, at).await?;
                if seal.is_some() {
                    let keep = (cut - at * CHUNK_BYTES) as usize;
                    plain[keep..].fill(0);
                    let seals = keys.seal(name, at, &mut plain);
                    ops.push(ObjectOp::AssertChunk { index: at, seal });
                    // Growing: the chunk is whole afterwards (zeros past the old size), so
                    // the object grows past it freely.
                    let end = if size < old {
                        cut
                    } else {
                        size.min((at + 1) * CHUNK_BYTES)
                    };
                    ops.push(ObjectOp::WriteChunks {
                        first: at,
                        seals,
                        end,
                    });
                    segment.extend_from_slice(&plain);
                }
            }
            ops.push(ObjectOp::Truncate { size });
            match self.operate(name, ops, Bytes::from(segment)).await {
                Ok(_) => return Ok(()),
                Err(Error::Mismatch(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Failed(format!(
            "{name}: other writers kept changing its last chunk ({EDGE_ATTEMPTS} attempts)"
        )))
    }

    pub async fn remove(&self, name: &str) -> Result<(), Error> {
        self.write_ops(name, vec![ObjectOp::Remove], Bytes::new())
            .await
    }

    pub async fn stat(&self, name: &str) -> Result<Stat, Error> {
        let (results, _) = self
            .operate(name, vec![ObjectOp::Stat], Bytes::new())
            .await?;
        match results.as_slice() {
            [OpResult::Stat {
                size,
                mtime_ns,
                version,
            }] => Ok(Stat {
                size: *size,
                mtime_ns: *mtime_ns,
                version: *version,
            }),
            other => Err(Error::Failed(format!("unexpected results {other:?}"))),
        }
    }

    /// Up to `len` bytes from `offset` (shorter at the end of the object).
    pub async fn read(&self, name: &str, offset: u64, len: u64) -> Result<Bytes, Error> {
        if let Some(keys) = self.edge_keys(None).await? {
            return self.read_edge(&keys, name, offset, len).await;
        }
        let mut out = Vec::new();
        let mut at = offset;
        let end = offset.saturating_add(len);
        while at < end {
            let piece = (end - at).min(REQUEST_DATA_BYTES);
            let ops = vec![ObjectOp::Read {
                offset: at,
                len: piece,
            }];
            let (_, bytes) = self.operate(name, ops, Bytes::new()).await?;
            if piece == len {
                return Ok(bytes);
            }
            let got = bytes.len() as u64;
            out.extend_from_slice(&bytes);
            if got < piece {
                break;
            }
            at += got;
        }
        Ok(Bytes::from(out))
    }

    async fn read_edge(
        &self,
        keys: &Arc<edge::EdgeKeys>,
        name: &str,
        offset: u64,
        len: u64,
    ) -> Result<Bytes, Error> {
        let end = offset.saturating_add(len);
        let mut out = bytes::BytesMut::new();
        let mut at = offset;
        while at < end {
            let first = at / CHUNK_BYTES;
            let last = end
                .div_ceil(CHUNK_BYTES)
                .min(first + REQUEST_DATA_BYTES / CHUNK_BYTES);
            let (size, _, data) = self.read_chunks(keys, name, first, last - first).await?;
            let stop = (last * CHUNK_BYTES).min(end).min(size);
            if stop <= at {
                break;
            }
            let piece = data
                .freeze()
                .slice((at - first * CHUNK_BYTES) as usize..(stop - first * CHUNK_BYTES) as usize);
            if out.is_empty() && stop == end.min(size) {
                return Ok(piece);
            }
            out.extend_from_slice(&piece);
            at = stop;
        }
        Ok(out.freeze())
    }

    /// The whole object.
    pub async fn get(&self, name: &str) -> Result<Bytes, Error> {
        let size = self.stat(name).await?.size;
        self.read(name, 0, size).await
    }

    pub async fn set_attr(&self, name: &str, attr: &str, value: &[u8]) -> Result<(), Error> {
        let op = ObjectOp::SetAttr {
            name: attr.into(),
            value: value.to_vec(),
        };
        self.write_ops(name, vec![op], Bytes::new()).await
    }

    pub async fn remove_attr(&self, name: &str, attr: &str) -> Result<(), Error> {
        let op = ObjectOp::RemoveAttr { name: attr.into() };
        self.write_ops(name, vec![op], Bytes::new()).await
    }

    pub async fn attrs(&self, name: &str) -> Result<BTreeMap<String, Vec<u8>>, Error> {
        match self
            .operate(name, vec![ObjectOp::GetAttrs], Bytes::new())
            .await?
            .0
            .pop()
        {
            Some(OpResult::Attrs(attrs)) => Ok(attrs),
            other => Err(Error::Failed(format!("unexpected result {other:?}"))),
        }
    }

    pub async fn omap_set(
        &self,
        name: &str,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), Error> {
        self.write_ops(name, vec![ObjectOp::OmapSet { entries }], Bytes::new())
            .await
    }

    pub async fn omap_remove(&self, name: &str, keys: Vec<Vec<u8>>) -> Result<(), Error> {
        self.write_ops(name, vec![ObjectOp::OmapRemove { keys }], Bytes::new())
            .await
    }

    pub async fn omap_get(
        &self,
        name: &str,
        keys: Vec<Vec<u8>>,
    ) -> Result<Vec<(Vec<u8>, Option<Vec<u8>>)>, Error> {
        match self
            .operate(name, vec![ObjectOp::OmapGet { keys }], Bytes::new())
            .await?
            .0
            .pop()
        {
            Some(OpResult::Omap(found)) => Ok(found),
            other => Err(Error::Failed(format!("unexpected result {other:?}"))),
        }
    }

    /// Omap entries in key order after `after`: `limit` at most (1 to 1,000), fewer where
    /// they would not fit one reply; and whether more follow (list on after the last).
    pub async fn omap_list(
        &self,
        name: &str,
        after: Option<Vec<u8>>,
        limit: u32,
    ) -> Result<(Vec<(Vec<u8>, Vec<u8>)>, bool), Error> {
        match self
            .operate(
                name,
                vec![ObjectOp::OmapList { after, limit }],
                Bytes::new(),
            )
            .await?
            .0
            .pop()
        {
            Some(OpResult::OmapList { entries, more }) => Ok((entries, more)),
            other => Err(Error::Failed(format!("unexpected result {other:?}"))),
        }
    }

    /// Scrubs PG `number` of this pool: its primary compares every copy of every object,
    /// a page at a time, and with `repair` replaces the copies that differ from the
    /// majority. Needs `mon=rw` (and `osd=rw` to repair).
    pub async fn scrub_pg(&self, number: u32, repair: bool) -> Result<PgScrub, Error> {
        let mut total = PgScrub::default();
        let mut after: Option<ObjectName> = None;
        loop {
            let make = |pg, epoch| OsdRequest::Scrub {
                pg,
                epoch,
                after: after.clone(),
                repair,
            };
            let inner = &self.cluster.inner;
            let page = match inner
                .submit(self.id, &Locate::Pg(number), make, Bytes::new())
                .await?
            {
                (OsdReply::Scrubbed(page), _) => page,
                (other, _) => return Err(Error::Failed(format!("unexpected reply {other:?}"))),
            };
            total.osds = page.osds;
            total.objects += page.objects;
            total.bytes += page.bytes;
            total.findings.extend(page.findings);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(total),
            }
        }
    }

    /// Every object's name, PG by PG (names are sorted within a PG, not across PGs).
    pub async fn list(&self) -> Result<Vec<ObjectName>, Error> {
        let pg_num = self.pg_num()?;
        let mut names = Vec::new();
        for number in 0..pg_num {
            let mut after: Option<ObjectName> = None;
            loop {
                let make = |pg, epoch| OsdRequest::List {
                    pg,
                    epoch,
                    after: after.clone(),
                    limit: LIST_PAGE_MAX,
                };
                let inner = &self.cluster.inner;
                match inner
                    .submit(self.id, &Locate::Pg(number), make, Bytes::new())
                    .await?
                {
                    (OsdReply::Listing { names: page, more }, _) => {
                        after = page.last().cloned();
                        names.extend(page);
                        if !more || after.is_none() {
                            break;
                        }
                    }
                    (other, _) => return Err(Error::Failed(format!("unexpected reply {other:?}"))),
                }
            }
        }
        Ok(names)
    }
}
