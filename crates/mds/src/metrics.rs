//! The metadata daemon's figures: requests by operation with their latency and failures,
//! and the sessions (mounts) it holds.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

type Labels = [(&'static str, &'static str); 1];

struct Metrics {
    requests: Family<Labels, Counter>,
    duration: Family<Labels, Histogram>,
    errors: Family<Labels, Counter>,
    sessions: Family<[(&'static str, String); 1], Gauge>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    requests: Family::default(),
    duration: Family::new_with_constructor(metrics::latency_histogram),
    errors: Family::default(),
    sessions: Family::default(),
});

/// Request `op` was answered after `took`; `failed` when with an error.
pub(crate) fn request(op: &'static str, took: Duration, failed: bool) {
    let labels = [("op", op)];
    METRICS.requests.get_or_create(&labels).inc();
    METRICS
        .duration
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
    if failed {
        METRICS.errors.get_or_create(&labels).inc();
    }
}

/// File system `fs` holds `count` sessions.
pub(crate) fn sessions(fs: &str, count: usize) {
    METRICS
        .sessions
        .get_or_create(&[("fs", fs.to_owned())])
        .set(i64::try_from(count).unwrap_or(i64::MAX));
}

/// Registers the metadata daemon's metrics (`coffer_mds_*`).
pub fn register(registry: &mut Registry) {
    let mds = registry.sub_registry_with_prefix("mds");
    mds.register(
        "requests",
        "Requests answered, by operation",
        METRICS.requests.clone(),
    );
    mds.register_with_unit(
        "request_duration",
        "Time from a request's arrival to its answer, by operation (changes are answered \
         once decided and queued for the journal)",
        Unit::Seconds,
        METRICS.duration.clone(),
    );
    mds.register(
        "errors",
        "Requests answered with an error (an errno), by operation",
        METRICS.errors.clone(),
    );
    mds.register(
        "sessions",
        "Mounts holding a session, by file system",
        METRICS.sessions.clone(),
    );
}
