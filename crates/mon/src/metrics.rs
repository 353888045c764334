//! The monitor's figures. Every monitor says whether it leads and which map it holds; the
//! leader alone, which receives the OSDs' beacons, also reports the cluster as
//! `coffer status` shows it (`coffer_cluster_*`), computed when scraped. KMS requests are
//! counted by every monitor that answers them.

use std::sync::{Arc, LazyLock};

use map::cluster::{Seal, Space};
use map::placement::OsdId;
use messenger::message::{Health, MonReply, PoolStats};
use openraft::RaftMetrics;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};
use tokio::sync::watch;

use crate::health::Liveness;
use crate::raft::Shared;
use crate::MonNode;

type KmsLabels = [(&'static str, &'static str); 2];

static KMS_REQUESTS: LazyLock<Family<KmsLabels, Counter>> = LazyLock::new(Family::default);

/// A KMS request (`op`: generate, decrypt, rewrap, pool_keys or store_key) was answered
/// with `reply`.
pub(crate) fn kms_request(op: &'static str, reply: &MonReply) {
    let result = match reply {
        MonReply::Denied(_) => "denied",
        MonReply::Failed(_) => "failed",
        MonReply::NotLeader { .. } => "redirected",
        _ => "ok",
    };
    KMS_REQUESTS
        .get_or_create(&[("op", op), ("result", result)])
        .inc();
}

/// What a monitor reports when scraped.
pub(crate) struct Cluster {
    pub shared: Arc<Shared>,
    pub liveness: Arc<Liveness>,
    pub raft: watch::Receiver<RaftMetrics<u64, MonNode>>,
    pub rank: u64,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("rank", &self.rank).finish()
    }
}

fn one(value: bool) -> i64 {
    i64::from(value)
}

fn bytes(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn osd_labels(osd: OsdId) -> metrics::Labels {
    vec![("osd", osd.0.to_string())]
}

impl Collector for Cluster {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let leads = self.raft.borrow().current_leader == Some(self.rank);
        let map = self.shared.map.borrow().clone();
        let gauges = &mut encoder;
        metrics::encode_gauges(
            gauges,
            "mon_leader",
            "1 on the monitor that leads (and reports coffer_cluster_*), else 0",
            None,
            [(vec![], one(leads))],
        )?;
        metrics::encode_gauges(
            gauges,
            "mon_map_epoch",
            "Epoch of the cluster map this monitor holds",
            None,
            [(vec![], bytes(map.epoch))],
        )?;
        if !leads {
            return Ok(());
        }
        let summary = self.liveness.summary(&map);
        let (status, warnings, errors) = match &summary.health {
            Health::Ok => (0, 0, 0),
            Health::Warn(reasons) => (1, reasons.len(), 0),
            Health::Err(reasons) => (2, 0, reasons.len()),
        };
        metrics::encode_gauges(
            gauges,
            "cluster_health_status",
            "The verdict of coffer status: 0 HEALTH_OK, 1 HEALTH_WARN, 2 HEALTH_ERR",
            None,
            [(vec![], status)],
        )?;
        metrics::encode_gauges(
            gauges,
            "cluster_health_reasons",
            "Reasons coffer status gives for its verdict, by severity",
            None,
            [
                (vec![("severity", "warn".to_string())], warnings as i64),
                (vec![("severity", "err".to_string())], errors as i64),
            ],
        )?;
        let osds = map.osds.values();
        metrics::encode_gauges(
            gauges,
            "cluster_osd_up",
            "1 for an OSD that is up (its beacons arrive), else 0",
            None,
            osds.clone().map(|o| (osd_labels(o.id), one(o.up))),
        )?;
        metrics::encode_gauges(
            gauges,
            "cluster_osd_in",
            "1 for an OSD that is in (holds placement groups), else 0",
            None,
            osds.clone().map(|o| (osd_labels(o.id), one(o.is_in))),
        )?;
        metrics::encode_gauges(
            gauges,
            "cluster_osd_space",
            "An OSD's space as the map marks it: 0 ok, 1 nearfull, 2 full (writes refused)",
            None,
            osds.map(|o| {
                let space = match o.space {
                    Space::Ok => 0,
                    Space::NearFull => 1,
                    Space::Full => 2,
                };
                (osd_labels(o.id), space)
            }),
        )?;
        let usage = &summary.usage;
        metrics::encode_gauges(
            gauges,
            "cluster_osd_used",
            "Bytes in use in each up OSD's store, from its last beacon",
            Some(&Unit::Bytes),
            usage
                .iter()
                .map(|(osd, u)| (osd_labels(*osd), bytes(u.used_bytes))),
        )?;
        metrics::encode_gauges(
            gauges,
            "cluster_osd_size",
            "Bytes of each up OSD's store, from its last beacon",
            Some(&Unit::Bytes),
            usage
                .iter()
                .map(|(osd, u)| (osd_labels(*osd), bytes(u.total_bytes))),
        )?;
        metrics::encode_gauges(
            gauges,
            "cluster_used",
            "Bytes in use in the stores of the up OSDs",
            Some(&Unit::Bytes),
            [(vec![], bytes(summary.used_bytes))],
        )?;
        metrics::encode_gauges(
            gauges,
            "cluster_size",
            "Bytes of the stores of the up OSDs",
            Some(&Unit::Bytes),
            [(vec![], bytes(summary.total_bytes))],
        )?;
        let pools = map.pools.values();
        metrics::encode_gauges(
            gauges,
            "cluster_pool_info",
            "1 for each pool, naming it and where it seals its data (join on pool to name ids)",
            None,
            pools.clone().map(|p| {
                let seal = match p.seal {
                    Seal::Edge { .. } => "edge",
                    Seal::Osd => "osd",
                };
                let labels = vec![
                    ("pool", p.id.0.to_string()),
                    ("name", p.name.clone()),
                    ("seal", seal.to_string()),
                ];
                (labels, 1)
            }),
        )?;
        metrics::encode_gauges(
            gauges,
            "cluster_pool_size",
            "Copies each pool keeps",
            None,
            pools.map(|p| (vec![("pool", p.id.0.to_string())], i64::from(p.size))),
        )?;
        let pool_figure = |figure: fn(&PoolStats) -> u64| {
            summary
                .pool_usage
                .iter()
                .map(move |(pool, u)| (vec![("pool", pool.0.to_string())], bytes(figure(u))))
        };
        metrics::encode_gauges(
            gauges,
            "cluster_pool_objects",
            "Objects in each pool, one copy each (the copies the up OSDs hold over its size)",
            None,
            pool_figure(|u| u.objects),
        )?;
        metrics::encode_gauges(
            gauges,
            "cluster_pool_stored",
            "Bytes of each pool's objects, one copy each",
            Some(&Unit::Bytes),
            pool_figure(|u| u.stored_bytes),
        )?;
        metrics::encode_gauges(
            gauges,
            "cluster_pool_used",
            "Store bytes all copies of each pool's objects take",
            Some(&Unit::Bytes),
            pool_figure(|u| u.used_bytes),
        )?;
        metrics::encode_gauges(
            gauges,
            "cluster_pool_max_avail",
            "Bytes each pool can still take, one copy each, before its first OSD is full",
            Some(&Unit::Bytes),
            pool_figure(|u| u.max_avail_bytes),
        )?;
        metrics::encode_gauges(
            gauges,
            "cluster_pgs",
            "Placement groups by pool and state, as their primaries report them",
            None,
            summary.pool_pgs.iter().map(|((pool, state), count)| {
                let labels = vec![("pool", pool.0.to_string()), ("state", state.to_string())];
                (labels, bytes(*count))
            }),
        )
    }
}

/// Registers the monitor's metrics (`coffer_mon_*`, and `coffer_cluster_*` on the leader).
pub(crate) fn register(registry: &mut Registry, cluster: Cluster) {
    registry.register(
        "mon_kms_requests",
        "KMS requests answered, by operation and result",
        KMS_REQUESTS.clone(),
    );
    registry.register_collector(Box::new(cluster));
}
