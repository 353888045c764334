//! The gateway's figures: S3 requests by verb (the operation's name, as AWS calls it) and
//! HTTP status, their latency, the bytes they carried, and how often a data key came from
//! the cache rather than the KMS.

use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use s3s::access::{S3Access, S3AccessContext};
use s3s::path::S3Path;
use s3s::S3Result;

use crate::s3::logging::Noted;

/// The verb of a request that never reached one: its signature or its route failed.
const NO_VERB: &str = "None";

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct VerbStatus {
    verb: String,
    status: u16,
}

type Verb = [(&'static str, String); 1];

struct Metrics {
    requests: Family<VerbStatus, Counter>,
    duration: Family<Verb, Histogram>,
    received: Counter,
    sent: Counter,
    key_cache: Family<[(&'static str, &'static str); 1], Counter>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    requests: Family::default(),
    duration: Family::new_with_constructor(metrics::latency_histogram),
    received: Counter::default(),
    sent: Counter::default(),
    key_cache: Family::default(),
});

/// Where a request's verb is written once s3s has routed it (a request extension).
#[derive(Clone, Default)]
pub(crate) struct VerbSlot(Arc<OnceLock<String>>);

impl VerbSlot {
    /// The verb s3s routed the request to (`None` before, or if it routed it nowhere).
    pub(crate) fn verb(&self) -> &str {
        self.0.get().map_or(NO_VERB, String::as_str)
    }

    /// Notes the request's verb, once.
    pub(crate) fn note(&self, verb: &str) {
        let _ = self.0.set(verb.to_owned());
    }
}

/// Notes each routed request's verb in its [`VerbSlot`], and its bucket and key in its
/// `Noted` for its access log line. Unsigned requests go on: each
/// verb decides whether an anonymous request may do what it asks (`crate::policy`).
pub(crate) struct NoteVerb;

#[async_trait::async_trait]
impl S3Access for NoteVerb {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let verb = cx.s3_op().name().to_owned();
        if let Some(slot) = cx.extensions_mut().get::<VerbSlot>() {
            slot.note(&verb);
        }
        let (bucket, key) = match cx.s3_path() {
            S3Path::Root => (None, None),
            S3Path::Bucket { bucket } => (Some(bucket.to_string()), None),
            S3Path::Object { bucket, key } => (Some(bucket.to_string()), Some(key.to_string())),
        };
        if let (Some(noted), Some(bucket)) = (cx.extensions_mut().get::<Noted>(), bucket) {
            noted.routed(&bucket, key.as_deref());
        }
        Ok(())
    }
}

/// A request answered with `status` after `took`, having brought `received` bytes of body
/// and answering with `sent` (as their Content-Length said).
pub(crate) fn request(slot: &VerbSlot, status: u16, took: Duration, received: u64, sent: u64) {
    let verb = slot.verb().to_owned();
    METRICS
        .duration
        .get_or_create(&[("verb", verb.clone())])
        .observe(took.as_secs_f64());
    METRICS
        .requests
        .get_or_create(&VerbStatus { verb, status })
        .inc();
    METRICS.received.inc_by(received);
    METRICS.sent.inc_by(sent);
}

/// A data key was looked up in the cache: `hit` when it was there.
pub(crate) fn key_cache(hit: bool) {
    let result = if hit { "hit" } else { "miss" };
    METRICS.key_cache.get_or_create(&[("result", result)]).inc();
}

/// Registers the gateway's metrics (`coffer_s3_*`).
pub fn register(registry: &mut Registry) {
    let s3 = registry.sub_registry_with_prefix("s3");
    s3.register(
        "requests",
        "S3 requests answered, by verb (None: not signed or not routed) and HTTP status",
        METRICS.requests.clone(),
    );
    s3.register_with_unit(
        "request_duration",
        "Time from a request's arrival to its response's headers, by verb",
        Unit::Seconds,
        METRICS.duration.clone(),
    );
    s3.register_with_unit(
        "received",
        "Bytes of request bodies, as their Content-Length said",
        Unit::Bytes,
        METRICS.received.clone(),
    );
    s3.register_with_unit(
        "sent",
        "Bytes of response bodies, as their Content-Length said",
        Unit::Bytes,
        METRICS.sent.clone(),
    );
    s3.register(
        "key_cache_requests",
        "Data keys of encrypted objects looked up in the cache, by result (miss: asked the KMS)",
        METRICS.key_cache.clone(),
    );
}
