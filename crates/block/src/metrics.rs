//! The NBD server's figures: requests by command with their bytes, latency (from the
//! request's arrival to its reply being queued) and failures, and clients connected.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::nbd::wire::{
    CMD_BLOCK_STATUS, CMD_CACHE, CMD_FLUSH, CMD_READ, CMD_TRIM, CMD_WRITE, CMD_WRITE_ZEROES,
};

type Labels = [(&'static str, &'static str); 1];

struct Metrics {
    requests: Family<Labels, Counter>,
    bytes: Family<Labels, Counter>,
    duration: Family<Labels, Histogram>,
    errors: Family<Labels, Counter>,
    clients: Gauge,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    requests: Family::default(),
    bytes: Family::default(),
    duration: Family::new_with_constructor(metrics::latency_histogram),
    errors: Family::default(),
    clients: Gauge::default(),
});

/// The name of NBD command `kind`, as the protocol document spells it (lower case).
fn command(kind: u16) -> &'static str {
    match kind {
        CMD_READ => "read",
        CMD_WRITE => "write",
        CMD_FLUSH => "flush",
        CMD_TRIM => "trim",
        CMD_CACHE => "cache",
        CMD_WRITE_ZEROES => "write_zeroes",
        CMD_BLOCK_STATUS => "block_status",
        _ => "other",
    }
}

/// A request of command `kind` for `len` bytes was answered after `took`.
pub(crate) fn request(kind: u16, len: u32, took: Duration) {
    let labels = [("kind", command(kind))];
    METRICS.requests.get_or_create(&labels).inc();
    if matches!(kind, CMD_READ | CMD_WRITE) {
        METRICS.bytes.get_or_create(&labels).inc_by(u64::from(len));
    }
    METRICS
        .duration
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
}

/// A request of command `kind` was answered with an error.
pub(crate) fn failed(kind: u16) {
    METRICS
        .errors
        .get_or_create(&[("kind", command(kind))])
        .inc();
}

/// A client is connected until this is dropped.
pub(crate) struct Client(());

impl Client {
    pub(crate) fn connected() -> Client {
        METRICS.clients.inc();
        Client(())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        METRICS.clients.dec();
    }
}

/// Registers the NBD server's metrics (`coffer_nbd_*`).
pub fn register(registry: &mut Registry) {
    let nbd = registry.sub_registry_with_prefix("nbd");
    nbd.register(
        "requests",
        "NBD requests answered, by command",
        METRICS.requests.clone(),
    );
    nbd.register_with_unit(
        "request",
        "Bytes read and written by NBD requests, by command",
        Unit::Bytes,
        METRICS.bytes.clone(),
    );
    nbd.register_with_unit(
        "request_duration",
        "Time from an NBD request's arrival to its reply, by command",
        Unit::Seconds,
        METRICS.duration.clone(),
    );
    nbd.register(
        "errors",
        "NBD requests answered with an error, by command",
        METRICS.errors.clone(),
    );
    nbd.register(
        "clients",
        "Clients in transmission (negotiated and connected)",
        METRICS.clients.clone(),
    );
}
