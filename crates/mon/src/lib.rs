//! Coffer's monitor: the cluster map, the entities and their capabilities, and the OSDs'
//! store keys, agreed on by the monitors through raft (openraft), and served to daemons and
//! clients over the messenger. Design: docs/design/monitors.md.
//!
//! Must never depend on: `store` (the raft log lives in its own redb database), `osd`
//! (checked by scripts/check-deps.py).

mod health;
mod kms;
mod metrics;
mod network;
mod raft;
mod service;
mod state;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use messenger::message::{AuthEntry, MonMember};
use messenger::{Endpoint, Identity, Limits, Mode, Server};
use openraft::Raft;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

pub use health::Timeouts;
pub use service::COMMIT_TIMEOUT;
pub use state::{osd_caps, MonState, Outcome, Proposal};

/// A monitor as raft knows it: its entity name and address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonNode {
    pub name: String,
    pub addr: String,
}

openraft::declare_raft_types!(
    pub TypeConfig:
        D = Proposal,
        R = Outcome,
        NodeId = u64,
        Node = MonNode,
        SnapshotData = Cursor<Vec<u8>>,
);

/// Raft heartbeats; elections start after 4 to 8 missed ones.
const HEARTBEAT_MS: u64 = 250;
/// Committed entries kept in the log after a snapshot, for monitors that lag a little.
const LOG_KEPT_AFTER_SNAPSHOT: u64 = 500;

pub struct MonConfig {
    /// This monitor's index in `monitors` (its raft node id).
    pub rank: u64,
    pub data_dir: PathBuf,
    /// Every monitor of the cluster, in rank order.
    pub monitors: Vec<MonMember>,
    /// Link modes accepted from peers, in order of preference, and offered to other monitors.
    pub modes: Vec<Mode>,
    /// When silent OSDs are marked down, and down ones out.
    pub timeouts: Timeouts,
}

/// The cluster's initial state, proposed once by the monitor that bootstraps the cluster.
pub struct Seed {
    pub fsid: String,
    pub ca_key_pem: String,
    pub ca_cert_pem: String,
    pub entities: Vec<(String, AuthEntry)>,
}

#[derive(Debug, thiserror::Error)]
pub enum MonError {
    #[error("monitor database: {0}")]
    Database(String),
    #[error("raft: {0}")]
    Raft(String),
    #[error("messenger: {0}")]
    Messenger(String),
    #[error("bootstrap: {0}")]
    Bootstrap(String),
}

pub struct Monitor {
    raft: Raft<TypeConfig>,
    server: Server,
    detector: tokio::task::JoinHandle<()>,
    shared: Arc<raft::Shared>,
    liveness: Arc<health::Liveness>,
    config: MonConfig,
    db_path: PathBuf,
}

/// How long `shutdown` waits for openraft's tasks to release the database.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);
/// How long the bootstrapping monitor tries to lead a new cluster before it gives up (its
/// supervisor starts it again).
const BOOTSTRAP_LEAD_WAIT: Duration = Duration::from_secs(30);
/// How long it waits for an election's outcome before it calls another.
const BOOTSTRAP_ELECTION_WAIT: Duration = Duration::from_secs(3);

impl Monitor {
    /// Opens (or creates) the monitor's database in `config.data_dir`, joins raft, and serves
    /// on `listener`.
    pub async fn start(
        identity: &Identity,
        config: MonConfig,
        listener: TcpListener,
    ) -> Result<Self, MonError> {
        let rank = usize::try_from(config.rank).unwrap_or(usize::MAX);
        let Some(me) = config.monitors.get(rank) else {
            return Err(MonError::Bootstrap(format!(
                "rank {} is not among the monitors",
                config.rank
            )));
        };
        if me.name != identity.entity().as_str() {
            return Err(MonError::Bootstrap(format!(
                "rank {} is {}, but the keyring is for {}",
                config.rank,
                me.name,
                identity.entity()
            )));
        }
        std::fs::create_dir_all(&config.data_dir).map_err(|e| MonError::Database(e.to_string()))?;
        let db_path = config.data_dir.join("mon.redb");
        let db = redb::Database::create(&db_path).map_err(|e| MonError::Database(e.to_string()))?;
        let db = Arc::new(db);
        let log = raft::LogStore::new(db.clone());
        let machine =
            raft::StateMachine::open(db).map_err(|e| MonError::Database(e.to_string()))?;
        let shared = machine.shared.clone();
        let endpoint = Endpoint::new(identity, Limits::default())
            .map_err(|e| MonError::Messenger(e.to_string()))?;
        let raft_config = openraft::Config {
            cluster_name: "coffer-mon".into(),
            heartbeat_interval: HEARTBEAT_MS,
            election_timeout_min: 4 * HEARTBEAT_MS,
            election_timeout_max: 8 * HEARTBEAT_MS,
            max_in_snapshot_log_to_keep: LOG_KEPT_AFTER_SNAPSHOT,
            ..Default::default()
        }
        .validate()
        .map_err(|e| MonError::Raft(e.to_string()))?;
        let network = network::Network {
            endpoint: endpoint.clone(),
            modes: config.modes.clone(),
        };
        let raft = Raft::new(config.rank, Arc::new(raft_config), network, log, machine)
            .await
            .map_err(|e| MonError::Raft(e.to_string()))?;
        let liveness = Arc::new(health::Liveness::default());
        let service = service::MonService {
            name: identity.entity().clone(),
            raft: raft.clone(),
            shared: shared.clone(),
            members: config.monitors.clone(),
            liveness: liveness.clone(),
        };
        let detector = tokio::spawn(detect_failures(
            raft.clone(),
            shared.clone(),
            liveness.clone(),
            config.rank,
            config.timeouts,
        ));
        let server = endpoint
            .serve(listener, config.modes.clone(), Arc::new(service))
            .map_err(|e| MonError::Messenger(e.to_string()))?;
        Ok(Monitor {
            raft,
            server,
            detector,
            shared,
            liveness,
            config,
            db_path,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Registers the monitor's metrics (docs/metrics.md) in `registry`.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        let cluster = metrics::Cluster {
            shared: self.shared.clone(),
            liveness: self.liveness.clone(),
            raft: self.raft.metrics(),
            rank: self.config.rank,
        };
        metrics::register(registry, cluster);
    }

    /// The map as this monitor has applied it.
    pub fn epoch(&self) -> map::cluster::Epoch {
        self.shared.map.borrow().epoch
    }

    /// Creates the cluster: the raft membership of all monitors, then the seed. Call it on one
    /// monitor of a new cluster; on a bootstrapped one it changes nothing.
    pub async fn bootstrap(&self, seed: Seed) -> Result<(), MonError> {
        if self.shared.read(|s| !s.fsid.is_empty()) {
            return Ok(());
        }
        let initialized = self
            .raft
            .is_initialized()
            .await
            .map_err(|e| MonError::Raft(e.to_string()))?;
        if !initialized {
            let members: BTreeMap<u64, MonNode> = self
                .config
                .monitors
                .iter()
                .enumerate()
                .map(|(rank, m)| (rank as u64, service::node_of(m)))
                .collect();
            self.raft
                .initialize(members)
                .await
                .map_err(|e| MonError::Raft(e.to_string()))?;
        }
        // Only this monitor holds the seed, so it must lead. A new cluster's monitors hold
        // the same log (its membership), so an election it calls, it wins once a majority
        // answers; another monitor may have won the first.
        let me = self.config.rank;
        let deadline = tokio::time::Instant::now() + BOOTSTRAP_LEAD_WAIT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let led = self
                .raft
                .wait(Some(left.min(BOOTSTRAP_ELECTION_WAIT)))
                .metrics(|m| m.current_leader == Some(me), "leading")
                .await;
            if led.is_ok() {
                break;
            }
            if left.is_zero() {
                return Err(MonError::Bootstrap(format!(
                    "not the leader after {BOOTSTRAP_LEAD_WAIT:?}: fewer than a majority of \
                     the monitors answer"
                )));
            }
            if self.raft.current_leader().await.is_some() {
                self.raft
                    .trigger()
                    .elect()
                    .await
                    .map_err(|e| MonError::Raft(e.to_string()))?;
            }
        }
        let proposal = Proposal::Bootstrap {
            fsid: seed.fsid,
            ca_key_pem: seed.ca_key_pem,
            ca_cert_pem: seed.ca_cert_pem,
            entities: seed.entities,
        };
        match self.raft.client_write(proposal).await {
            Ok(written) => match written.data {
                Outcome::Applied { .. } => Ok(()),
                Outcome::Refused(why) => Err(MonError::Bootstrap(why)),
            },
            Err(e) => Err(MonError::Bootstrap(e.to_string())),
        }
    }

    /// Stops raft and closes every link; returns once the database is closed, so the same
    /// data directory can be opened again.
    pub async fn shutdown(self) {
        self.detector.abort();
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft did not stop cleanly");
        }
        self.server.shutdown().await;
        // openraft's tasks release the database as they wind down, a little after shutdown
        // returns; wait until it can be opened again.
        let deadline = tokio::time::Instant::now() + SHUTDOWN_WAIT;
        loop {
            match redb::Database::create(&self.db_path) {
                Err(redb::DatabaseError::DatabaseAlreadyOpen)
                    if tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the monitor database did not close cleanly");
                    return;
                }
                Ok(_) => return,
            }
        }
    }
}

/// On the leader: marks OSDs down that stopped sending beacons, and out those down too long.
async fn detect_failures(
    raft: Raft<TypeConfig>,
    shared: Arc<raft::Shared>,
    liveness: Arc<health::Liveness>,
    rank: u64,
    timeouts: Timeouts,
) {
    let mut tick = tokio::time::interval(health::CHECK_INTERVAL);
    loop {
        tick.tick().await;
        if raft.current_leader().await != Some(rank) {
            liveness.follow();
            continue;
        }
        let map = shared.map.borrow().clone();
        for change in liveness.due(&map, timeouts, std::time::Instant::now()) {
            tracing::info!(?change, "failure detector");
            let proposal = Proposal::Change(change);
            match tokio::time::timeout(COMMIT_TIMEOUT, raft.client_write(proposal)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "failure detector change not committed"),
                Err(_) => tracing::warn!("failure detector change: no quorum"),
            }
        }
    }
}
