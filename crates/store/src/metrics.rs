//! The store's figures: how long transactions take to become durable, how long the group
//! commits that carry them take, checkpoints of the write-ahead log, and chunks that failed
//! their integrity check on read.
//! Registered by the OSD that runs it.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

struct Metrics {
    apply: Histogram,
    commit: Histogram,
    failed: Counter,
    integrity: Counter,
    checkpoints: Counter,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    apply: metrics::latency_histogram(),
    commit: metrics::latency_histogram(),
    failed: Counter::default(),
    integrity: Counter::default(),
    checkpoints: Counter::default(),
});

/// A transaction `Store::apply` took `took` to make durable (or to refuse, when not `ok`).
pub(crate) fn applied(took: Duration, ok: bool) {
    METRICS.apply.observe(took.as_secs_f64());
    if !ok {
        METRICS.failed.inc();
    }
}

/// A group commit (its writes, its log record and its metadata commit) took `took`.
pub(crate) fn committed(took: Duration) {
    METRICS.commit.observe(took.as_secs_f64());
}

/// A checkpoint synced the data device and committed the metadata durably.
pub(crate) fn checkpointed() {
    METRICS.checkpoints.inc();
}

/// A read found a chunk that failed its integrity check.
pub(crate) fn integrity_failed() {
    METRICS.integrity.inc();
}

/// Registers the store's metrics (`coffer_store_*`).
pub fn register(registry: &mut Registry) {
    let store = registry.sub_registry_with_prefix("store");
    store.register_with_unit(
        "apply_duration",
        "Time for a transaction to become durable, from apply to its commit (its count: \
         transactions applied or refused)",
        Unit::Seconds,
        METRICS.apply.clone(),
    );
    store.register_with_unit(
        "commit_duration",
        "Time of one group commit: its small writes, its write-ahead log record and the \
         metadata commit (its count over apply's: the mean group)",
        Unit::Seconds,
        METRICS.commit.clone(),
    );
    store.register(
        "transactions_failed",
        "Transactions refused or failed, none of whose changes took effect",
        METRICS.failed.clone(),
    );
    store.register(
        "checkpoints",
        "Checkpoints: the data file synced and the metadata committed durably, after which \
         the write-ahead log starts again",
        METRICS.checkpoints.clone(),
    );
    store.register(
        "integrity_errors",
        "Chunks that failed their integrity check on read (a flipped bit, or tampering)",
        METRICS.integrity.clone(),
    );
}
