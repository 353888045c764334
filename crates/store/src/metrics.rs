//! The store's figures: how long transactions take to become durable, how long the group
//! commits that carry them take, checkpoints of the write-ahead log, the read cache, and
//! chunks that failed their integrity check on read.
//! Registered by the OSD that runs it.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

struct Metrics {
    apply: Histogram,
    commit: Histogram,
    failed: Counter,
    integrity: Counter,
    checkpoints: Counter,
    cache_hit: Counter,
    cache_miss: Counter,
    cache_held: Gauge,
    cache_limit: Gauge,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    apply: metrics::latency_histogram(),
    commit: metrics::latency_histogram(),
    failed: Counter::default(),
    integrity: Counter::default(),
    checkpoints: Counter::default(),
    cache_hit: Counter::default(),
    cache_miss: Counter::default(),
    cache_held: Gauge::default(),
    cache_limit: Gauge::default(),
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

/// A read of `bytes` was served by the read cache (`hit`) or had to go to the device.
pub(crate) fn cache_read(hit: bool, bytes: u64) {
    let counter = if hit {
        &METRICS.cache_hit
    } else {
        &METRICS.cache_miss
    };
    counter.inc_by(bytes);
}

/// The read cache took (positive) or let go (negative) this many bytes of memory.
pub(crate) fn cache_held(bytes: i64) {
    METRICS.cache_held.inc_by(bytes);
}

/// A read cache of at most `bytes` was made (positive) or dropped (negative).
pub(crate) fn cache_limit(bytes: i64) {
    METRICS.cache_limit.inc_by(bytes);
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
    store.register_with_unit(
        "cache_hit",
        "Bytes of reads served from the read cache (sealed blocks in memory)",
        Unit::Bytes,
        METRICS.cache_hit.clone(),
    );
    store.register_with_unit(
        "cache_miss",
        "Bytes of reads the read cache did not hold, read from the data device",
        Unit::Bytes,
        METRICS.cache_miss.clone(),
    );
    store.register_with_unit(
        "cache",
        "Memory the read cache holds",
        Unit::Bytes,
        METRICS.cache_held.clone(),
    );
    store.register_with_unit(
        "cache_limit",
        "The most memory the read cache may hold",
        Unit::Bytes,
        METRICS.cache_limit.clone(),
    );
    store.register(
        "integrity_errors",
        "Chunks that failed their integrity check on read (a flipped bit, or tampering)",
        METRICS.integrity.clone(),
    );
}
