//! `metrics`: what every Coffer daemon tells Prometheus (docs/metrics.md lists each name).
//!
//! A daemon builds one registry with [`registry`]: the process's own figures (`process_*`,
//! the names every Prometheus exporter uses), Coffer's version (`coffer_build_info`), the
//! crypto counters all crates share ([`crypto`]), and whatever the daemon's crates register
//! under the `coffer_` prefix. The daemon's binary serves it over HTTP at `/metrics`.
//!
//! On the data path a metric is an atomic resolved once: counters for a fixed set of labels
//! are looked up when their static is first used and kept, so an operation adds to an
//! integer and takes no lock. Labels not known in advance (a pool, an S3 verb) and paths
//! off the data path look their counter up in a family, under a read lock that writers of
//! new label sets alone contend.
//!
//! Must never depend on another Coffer crate, or on any IO runtime: every crate depends on
//! this one, the store among them.

pub mod crypto;
mod process;

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// The prefix of every metric Coffer's crates register.
pub const PREFIX: &str = "coffer";
/// Shortest latency bucket: 50 µs, about a loopback round trip.
const LATENCY_BUCKET_FIRST_SECONDS: f64 = 50e-6;
/// Latency buckets, each twice the one before: 50 µs to 13 s.
const LATENCY_BUCKETS: u16 = 19;

/// A histogram for latencies in seconds, with buckets from 50 µs to 13 s.
pub fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(
        LATENCY_BUCKET_FIRST_SECONDS,
        2.0,
        LATENCY_BUCKETS,
    ))
}

/// A daemon's registry: the process's figures and Coffer's version at the root, the crypto
/// counters, then what `register` adds to the `coffer_` registry (its crates' metrics).
pub fn registry(register: impl FnOnce(&mut Registry)) -> Registry {
    let mut root = Registry::default();
    root.register_collector(Box::new(process::Process));
    let coffer = root.sub_registry_with_prefix(PREFIX);
    coffer.register(
        "build",
        "The version of Coffer this daemon runs",
        Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
    );
    crypto::register(coffer);
    register(coffer);
    root
}

/// Labels of a figure computed at scrape time (a collector's), by name.
pub type Labels = Vec<(&'static str, String)>;

/// Writes gauge `name` with one sample per row, for a collector that computes its figures
/// when scraped (from a map, say) rather than keeping them.
pub fn encode_gauges(
    encoder: &mut prometheus_client::encoding::DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&prometheus_client::registry::Unit>,
    rows: impl IntoIterator<Item = (Labels, i64)>,
) -> std::fmt::Result {
    use prometheus_client::encoding::EncodeMetric;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    let family = Family::<Labels, Gauge>::default();
    for (labels, value) in rows {
        family.get_or_create(&labels).set(value);
    }
    let metric = encoder.encode_descriptor(
        name,
        help,
        unit,
        prometheus_client::metrics::MetricType::Gauge,
    )?;
    family.encode(metric)
}
