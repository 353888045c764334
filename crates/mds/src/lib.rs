//! `mds`: the metadata daemon of Coffer's file systems. It serves every file system in the
//! cluster map: their namespaces (directories, inodes, attributes, links), kept in each
//! file system's metadata pool and changed through a journal there, so the OSDs' replication,
//! recovery and at-rest encryption protect them, and any MDS can take over by replaying the
//! journal. File contents never pass through it (docs/design/fs.md).
//!
//! Reading order: `record` (what is stored), `ops` (the decisions, pure), `namespace` (the
//! cache), `journal`, `sessions`, `server` (one file system), then this file (the daemon).
//!
//! Must never depend on: `osd`, `store`, `mon` (checked by scripts/check-deps.py).

#![deny(clippy::unwrap_used)]

mod journal;
pub mod metrics;
mod namespace;
mod ops;
mod record;
mod server;
mod sessions;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use client::{Cluster, Conf};
use fs::proto::{Reply, Request};
use map::auth::Caps;
use messenger::message::{AuthTable, Command, MonReply, MonRequest};
use messenger::{
    CertificateDer, Endpoint, EntityName, Handler, Identity, Limits, MonClient, Peer, Server,
};
use tokio::net::TcpListener;
use tokio::sync::{watch, RwLock};

pub use server::{FsServer, RECLAIM_GRACE};

/// How often the daemon looks for file systems to take up or let go.
const MAP_POLL: Duration = Duration::from_secs(1);
/// How long the active MDS of a file system has to answer before another takes it over.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a request for a file system waits for it to open (its journal replayed).
const OPEN_WAIT: Duration = Duration::from_secs(60);

/// What the MDS's tasks share: its cluster handle, address, auth table and file systems.
struct MdsState {
    cluster: Cluster,
    addr: SocketAddr,
    entity: String,
    auth: watch::Receiver<Arc<AuthTable>>,
    filesystems: RwLock<HashMap<String, Arc<FsServer>>>,
    fatal: watch::Sender<Option<String>>,
}

/// A running metadata daemon.
pub struct Mds {
    inner: Arc<MdsState>,
    server: Server,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Mds {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Mds {
    /// Connects as `identity` (an `mds.*` entity) and serves on `listener`.
    pub async fn start(
        conf: &Conf,
        identity: &Identity,
        listener: TcpListener,
    ) -> Result<Mds, String> {
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let cluster = Cluster::connect(conf, identity)
            .await
            .map_err(|e| format!("connecting to the cluster: {e}"))?;
        let endpoint = Endpoint::new(identity, Limits::default()).map_err(|e| e.to_string())?;
        let monc = MonClient::new(
            endpoint.clone(),
            conf.mon_addrs().map_err(|e| e.to_string())?,
            conf.mon_modes().map_err(|e| e.to_string())?,
        );
        let table = match monc
            .call(&MonRequest::GetAuth { newer_than: None })
            .await
            .map_err(|e| format!("reading the auth table: {e}"))?
        {
            MonReply::Auth(table) => table,
            other => return Err(format!("reading the auth table: {other:?}")),
        };
        let (auth_tx, auth) = watch::channel(Arc::new(table));
        let inner = Arc::new(MdsState {
            cluster,
            addr,
            entity: identity.entity().to_string(),
            auth,
            filesystems: RwLock::new(HashMap::new()),
            fatal: watch::Sender::new(None),
        });
        let modes = conf.client_modes().map_err(|e| e.to_string())?;
        let server = endpoint
            .serve(
                listener,
                modes,
                Arc::new(Service {
                    inner: inner.clone(),
                }),
            )
            .map_err(|e| e.to_string())?;
        let tasks = vec![
            tokio::spawn(follow_auth(monc, auth_tx)),
            tokio::spawn(follow_map(inner.clone())),
        ];
        tracing::info!(entity = %inner.entity, %addr, "serving");
        Ok(Mds {
            inner,
            server,
            tasks,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Waits until a file system's journal fails (the daemon must then restart and replay).
    pub async fn failed(&self) -> String {
        let mut fatal = self.inner.fatal.subscribe();
        loop {
            if let Some(why) = fatal.borrow_and_update().clone() {
                return why;
            }
            if fatal.changed().await.is_err() {
                return "stopped".into();
            }
        }
    }

    pub async fn shutdown(self) {
        self.inner.filesystems.write().await.clear();
    }
}

async fn follow_auth(monc: MonClient, auth: watch::Sender<Arc<AuthTable>>) {
    loop {
        let version = auth.borrow().version;
        match monc
            .call(&MonRequest::GetAuth {
                newer_than: Some(version),
            })
            .await
        {
            Ok(MonReply::Auth(table)) if table.version > version => {
                auth.send_replace(Arc::new(table));
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "auth subscription");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Takes up every file system in the map (booting as its MDS, which fences the previous
/// one, then replaying its journal), and lets go of those removed or taken over.
async fn follow_map(inner: Arc<MdsState>) {
    loop {
        let map = inner.cluster.map();
        let instance = inner.cluster.instance();
        for (name, info) in &map.filesystems {
            let served = inner.filesystems.read().await.contains_key(name);
            let ours = info.mds.as_ref().is_some_and(|m| m.instance == instance);
            if served && !ours {
                tracing::warn!(fs = %name, "another MDS took this file system over; letting go");
                inner.filesystems.write().await.remove(name);
                continue;
            }
            if served {
                continue;
            }
            if let Some(active) = info.mds.as_ref().filter(|m| m.instance != instance) {
                if answers(&inner.cluster, name, active).await {
                    // Another MDS serves it: stand by until it stops answering.
                    continue;
                }
                tracing::warn!(fs = %name, mds = %active.name, addr = %active.addr, "the active MDS does not answer; taking over");
            }
            match take_up(&inner, name).await {
                Ok(server) => {
                    let mut failure = server.failure();
                    let fatal = inner.fatal.clone();
                    let (cluster, fs) = (inner.cluster.clone(), name.clone());
                    tokio::spawn(async move {
                        while failure.changed().await.is_ok() {
                            if let Some(why) = failure.borrow().clone() {
                                // A file system removed meanwhile fails harmlessly.
                                if cluster.map().filesystems.contains_key(&fs) {
                                    fatal.send_replace(Some(why));
                                }
                                return;
                            }
                        }
                    });
                    inner.filesystems.write().await.insert(name.clone(), server);
                }
                Err(e) => tracing::warn!(fs = %name, error = %e, "taking up the file system"),
            }
        }
        inner
            .filesystems
            .write()
            .await
            .retain(|name, _| map.filesystems.contains_key(name));
        tokio::time::sleep(MAP_POLL).await;
    }
}

/// Whether `mds`, the active MDS of file system `fs`, answers a request (any answer will
/// do: it is alive and serving).
async fn answers(cluster: &Cluster, fs: &str, mds: &map::filesystem::MdsInfo) -> bool {
    let probe = Request {
        fs: fs.into(),
        session: cluster.instance(),
        seq: 0,
        cred: fs::proto::Cred::default(),
        op: fs::proto::Op::GetAttr {
            ino: fs::proto::ROOT_INO,
        },
    };
    let call = cluster.call_daemon::<Request, Reply>(&mds.name, &mds.addr, &probe, Bytes::new());
    matches!(tokio::time::timeout(PROBE_TIMEOUT, call).await, Ok(Ok(_)))
}

async fn take_up(inner: &MdsState, name: &str) -> Result<Arc<FsServer>, String> {
    let command = Command::MdsBoot {
        fs: name.into(),
        addr: inner.addr.to_string(),
        instance: inner.cluster.instance(),
    };
    inner
        .cluster
        .command(command)
        .await
        .map_err(|e| format!("booting as its MDS: {e}"))?;
    let info = inner
        .cluster
        .map()
        .filesystems
        .get(name)
        .cloned()
        .ok_or("removed while booting")?;
    FsServer::open(&inner.cluster, info).await
}

/// What an accepted peer presented; its capabilities are read from the current auth table
/// at every request, so a removed entity is stopped at its next request.
pub struct Presented {
    cert_der: Vec<u8>,
}

struct Service {
    inner: Arc<MdsState>,
}

impl Service {
    fn caps(&self, entity: &EntityName, cert: &[u8]) -> Result<Caps, String> {
        self.inner.auth.borrow().caps_of(entity.as_str(), cert)
    }

    async fn server(&self, fs: &str) -> Result<Arc<FsServer>, Reply> {
        let deadline = tokio::time::Instant::now() + OPEN_WAIT;
        loop {
            if let Some(server) = self.inner.filesystems.read().await.get(fs) {
                return Ok(server.clone());
            }
            let known = self.inner.cluster.map().filesystems.contains_key(fs);
            if !known || tokio::time::Instant::now() > deadline {
                return Err(Reply::NotHere(format!(
                    "{} serves no file system {fs:?}",
                    self.inner.entity
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Handler for Service {
    type Grant = Presented;

    fn authorize(
        &self,
        entity: &EntityName,
        cert: &CertificateDer<'_>,
    ) -> Result<Presented, String> {
        self.caps(entity, cert)?;
        Ok(Presented {
            cert_der: cert.to_vec(),
        })
    }

    async fn handle(
        &self,
        peer: Arc<Peer<Presented>>,
        request: messenger::Request,
    ) -> messenger::Reply {
        let reply = match request.decode::<Request>() {
            Err(e) => Reply::Failed {
                errno: libc::EINVAL,
                why: format!("undecodable request: {e}"),
            },
            Ok(request) => match self.caps(&peer.entity, &peer.grant.cert_der) {
                Err(why) => Reply::Failed {
                    errno: libc::EACCES,
                    why,
                },
                Ok(caps) => match self.server(&request.fs).await {
                    Ok(server) => server.handle(peer.entity.as_str(), &caps, request).await,
                    Err(refusal) => refusal,
                },
            },
        };
        messenger::Reply::new(&reply, Bytes::new())
    }
}
