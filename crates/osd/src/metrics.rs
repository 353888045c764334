//! The OSD's figures: client operations by pool and kind with their latency and outcome,
//! writes served as a replica, recovery and scrub progress, the PGs it leads by state, and
//! its store's space. Latencies are the OSD's own (request in to reply out); the NBD server,
//! the gateway and the file system measure theirs from their clients' side.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use map::PoolId;
use messenger::message::{OsdReply, PgState, ScrubPage};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PoolKind {
    pool: u64,
    kind: &'static str,
}

type Labels = [(&'static str, &'static str); 1];

struct Metrics {
    ops: Family<PoolKind, Counter>,
    op_bytes: Family<PoolKind, Counter>,
    op_duration: Family<Labels, Histogram>,
    /// `op_duration`'s reads and writes, resolved once.
    read_duration: Histogram,
    write_duration: Histogram,
    op_errors: Family<Labels, Counter>,
    write_groups: Counter,
    write_group_writes: Counter,
    replica_ops: Counter,
    replica_bytes: Counter,
    /// As primary: a replicated group from its send to a replica until that replica's
    /// answer.
    replication_duration: Histogram,
    /// As replica: a replicated group (or a shard) from its handling to the reply.
    replica_duration: Histogram,
    replica_misses: Counter,
    read_repairs: Counter,
    shard_reads_again: Counter,
    recovered_objects: Counter,
    recovered_bytes: Counter,
    recovery_pending: Gauge,
    recoveries: Family<Labels, Counter>,
    scrubbed_objects: Counter,
    scrubbed_bytes: Counter,
    scrub_inconsistent: Counter,
    scrub_repaired: Counter,
    pgs: Family<Labels, Gauge>,
    store_used: Gauge,
    store_size: Gauge,
    host_free: Gauge,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let op_duration = Family::<Labels, Histogram>::new_with_constructor(metrics::latency_histogram);
    Metrics {
        read_duration: op_duration.get_or_create_owned(&[("kind", "read")]),
        write_duration: op_duration.get_or_create_owned(&[("kind", "write")]),
        op_duration,
        ops: Family::default(),
        op_bytes: Family::default(),
        op_errors: Family::default(),
        write_groups: Counter::default(),
        write_group_writes: Counter::default(),
        replica_ops: Counter::default(),
        replica_bytes: Counter::default(),
        replication_duration: metrics::latency_histogram(),
        replica_duration: metrics::latency_histogram(),
        replica_misses: Counter::default(),
        read_repairs: Counter::default(),
        shard_reads_again: Counter::default(),
        recovered_objects: Counter::default(),
        recovered_bytes: Counter::default(),
        recovery_pending: Gauge::default(),
        recoveries: Family::default(),
        scrubbed_objects: Counter::default(),
        scrubbed_bytes: Counter::default(),
        scrub_inconsistent: Counter::default(),
        scrub_repaired: Counter::default(),
        pgs: Family::default(),
        store_used: Gauge::default(),
        store_size: Gauge::default(),
        host_free: Gauge::default(),
    }
});

/// The label of a refusal or failure, `None` for an answer that is not one.
fn refusal(reply: &OsdReply) -> Option<&'static str> {
    Some(match reply {
        OsdReply::Retry { .. } => "retry",
        OsdReply::Busy(_) => "busy",
        OsdReply::Full(_) => "full",
        OsdReply::NotFound => "not_found",
        OsdReply::Exists => "exists",
        OsdReply::Mismatch(_) => "mismatch",
        OsdReply::Denied(_) => "denied",
        OsdReply::Failed(_) => "failed",
        OsdReply::Integrity(_) => "integrity",
        _ => return None,
    })
}

/// A client operation on `pool` finished after `took`: a write (or a read) of `bytes`, or
/// refused with `refused`.
pub(crate) fn client_op(
    pool: PoolId,
    write: bool,
    bytes: usize,
    took: Duration,
    refused: Option<&OsdReply>,
) {
    let (kind, duration) = if write {
        ("write", &METRICS.write_duration)
    } else {
        ("read", &METRICS.read_duration)
    };
    duration.observe(took.as_secs_f64());
    if let Some(reason) = refused.and_then(refusal) {
        METRICS.op_errors.get_or_create(&[("reason", reason)]).inc();
        return;
    }
    let labels = PoolKind { pool: pool.0, kind };
    METRICS.ops.get_or_create(&labels).inc();
    METRICS.op_bytes.get_or_create(&labels).inc_by(bytes as u64);
}

/// A group of `writes` client writes closed here as their primary, to be applied in one
/// transaction.
pub(crate) fn write_group(writes: usize) {
    METRICS.write_groups.inc();
    METRICS.write_group_writes.inc_by(writes as u64);
}

/// `writes` writes of `bytes` in all applied here as a replica, `took` from the group's
/// handling to its application.
pub(crate) fn replicated(writes: usize, bytes: usize, took: Duration) {
    METRICS.replica_ops.inc_by(writes as u64);
    METRICS.replica_bytes.inc_by(bytes as u64);
    METRICS.replica_duration.observe(took.as_secs_f64());
}

/// A replica answered that it applied a group `took` after this OSD, its primary, sent it.
pub(crate) fn replica_answered(took: Duration) {
    METRICS.replication_duration.observe(took.as_secs_f64());
}

/// A replica did not take a write; it is recovered.
pub(crate) fn replica_missed() {
    METRICS.replica_misses.inc();
}

/// A damaged copy was replaced on read.
pub(crate) fn read_repaired() {
    METRICS.read_repairs.inc();
}

/// A read of an erasure-coded object, made beside its PG's writes, found a shard a write
/// had changed and was read again under the PG's lock.
pub(crate) fn shard_read_again() {
    METRICS.shard_reads_again.inc();
}

/// Objects that recovery is to copy, in the metric and in the OSD's own count (its beacon
/// reports it): counted down as they are copied, and by what is left when the pass ends
/// early.
pub(crate) struct Pending<'a> {
    left: u64,
    osd: &'a AtomicU64,
}

impl<'a> Pending<'a> {
    pub(crate) fn new(osd: &'a AtomicU64, objects: usize) -> Pending<'a> {
        let left = objects as u64;
        METRICS.recovery_pending.inc_by(left as i64);
        osd.fetch_add(left, Ordering::Relaxed);
        Pending { left, osd }
    }

    /// One object copied (or removed), with `bytes` of data.
    pub(crate) fn copied(&mut self, bytes: u64) {
        debug_assert!(self.left > 0, "more objects copied than were pending");
        self.left = self.left.saturating_sub(1);
        self.osd.fetch_sub(1, Ordering::Relaxed);
        METRICS.recovery_pending.dec();
        METRICS.recovered_objects.inc();
        METRICS.recovered_bytes.inc_by(bytes);
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.osd.fetch_sub(self.left, Ordering::Relaxed);
        METRICS.recovery_pending.dec_by(self.left as i64);
    }
}

/// A recovery pass ended: `done` when its target joined, else it is tried again.
pub(crate) fn recovery_ended(done: bool) {
    let result = if done { "done" } else { "retried" };
    METRICS
        .recoveries
        .get_or_create(&[("result", result)])
        .inc();
}

/// A scrub page was served.
pub(crate) fn scrubbed(page: &ScrubPage) {
    METRICS.scrubbed_objects.inc_by(page.objects);
    METRICS.scrubbed_bytes.inc_by(page.bytes);
    METRICS
        .scrub_inconsistent
        .inc_by(page.findings.len() as u64);
    let repaired = page.findings.iter().filter(|f| f.repaired).count();
    METRICS.scrub_repaired.inc_by(repaired as u64);
}

/// What the OSD reports in each beacon: the states of the PGs it leads, its store's space.
pub(crate) fn beacon(pgs: &[(map::placement::PgId, PgState)], usage: &map::cluster::Usage) {
    for state in PgState::NAMES {
        let count = pgs.iter().filter(|(_, s)| s.name() == state).count();
        METRICS
            .pgs
            .get_or_create(&[("state", state)])
            .set(count as i64);
    }
    let gauge = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
    METRICS.store_used.set(gauge(usage.used_bytes));
    METRICS.store_size.set(gauge(usage.total_bytes));
    if usage.host_free_bytes != u64::MAX {
        METRICS.host_free.set(gauge(usage.host_free_bytes));
    }
}

/// Registers the OSD's metrics (`coffer_osd_*`).
pub fn register(registry: &mut Registry) {
    let osd = registry.sub_registry_with_prefix("osd");
    osd.register(
        "ops",
        "Client operations served as primary, by pool id and kind",
        METRICS.ops.clone(),
    );
    osd.register_with_unit(
        "op",
        "Bytes written or read by client operations, by pool id and kind",
        Unit::Bytes,
        METRICS.op_bytes.clone(),
    );
    osd.register_with_unit(
        "op_duration",
        "Time from a client operation's arrival to its reply, by kind",
        Unit::Seconds,
        METRICS.op_duration.clone(),
    );
    osd.register(
        "op_errors",
        "Client operations refused or failed, by reason",
        METRICS.op_errors.clone(),
    );
    osd.register(
        "write_groups",
        "Groups of client writes this OSD took as primary, each in one transaction",
        METRICS.write_groups.clone(),
    );
    osd.register(
        "write_group_writes",
        "Client writes in those groups (this over write_groups: writes per group)",
        METRICS.write_group_writes.clone(),
    );
    osd.register(
        "replica_ops",
        "Writes applied as a replica",
        METRICS.replica_ops.clone(),
    );
    osd.register_with_unit(
        "replica",
        "Bytes of writes applied as a replica",
        Unit::Bytes,
        METRICS.replica_bytes.clone(),
    );
    osd.register_with_unit(
        "replica_duration",
        "Time from a replicated group's handling on a replica to its reply (the replica's part)",
        Unit::Seconds,
        METRICS.replica_duration.clone(),
    );
    osd.register_with_unit(
        "replication_duration",
        "Time from a primary's send of a replicated group to one replica until its answer",
        Unit::Seconds,
        METRICS.replication_duration.clone(),
    );
    osd.register(
        "replica_misses",
        "Writes a replica did not take, which recovery then copied to it",
        METRICS.replica_misses.clone(),
    );
    osd.register(
        "read_repairs",
        "Damaged copies replaced when a read found them",
        METRICS.read_repairs.clone(),
    );
    osd.register(
        "shard_reads_again",
        "Reads of erasure-coded objects that a write raced, read again under the PG's lock",
        METRICS.shard_reads_again.clone(),
    );
    osd.register(
        "recovered_objects",
        "Objects copied (or removed) by recovery to the OSDs that lacked them",
        METRICS.recovered_objects.clone(),
    );
    osd.register_with_unit(
        "recovered",
        "Bytes copied by recovery",
        Unit::Bytes,
        METRICS.recovered_bytes.clone(),
    );
    osd.register(
        "recovery_pending_objects",
        "Objects recovery has found to copy and not copied yet",
        METRICS.recovery_pending.clone(),
    );
    osd.register(
        "recoveries",
        "Recovery passes ended, by result (done: the replica joined)",
        METRICS.recoveries.clone(),
    );
    osd.register(
        "scrubbed_objects",
        "Objects whose copies scrub compared",
        METRICS.scrubbed_objects.clone(),
    );
    osd.register_with_unit(
        "scrubbed",
        "Bytes of objects whose copies scrub compared",
        Unit::Bytes,
        METRICS.scrubbed_bytes.clone(),
    );
    osd.register(
        "scrub_inconsistent_objects",
        "Objects whose copies scrub found to differ",
        METRICS.scrub_inconsistent.clone(),
    );
    osd.register(
        "scrub_repaired_objects",
        "Objects whose bad copies scrub replaced",
        METRICS.scrub_repaired.clone(),
    );
    osd.register(
        "pgs",
        "Placement groups this OSD leads, by state",
        METRICS.pgs.clone(),
    );
    osd.register_with_unit(
        "store_used",
        "Bytes of the store's data file in use",
        Unit::Bytes,
        METRICS.store_used.clone(),
    );
    osd.register_with_unit(
        "store_size",
        "Bytes of the store's data file",
        Unit::Bytes,
        METRICS.store_size.clone(),
    );
    osd.register_with_unit(
        "host_free",
        "Bytes free on the file system under the store (full below 64 MiB)",
        Unit::Bytes,
        METRICS.host_free.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_objects_are_counted_down_as_copied_and_when_a_pass_ends_early() {
        let osd = AtomicU64::new(0);
        {
            let mut pending = Pending::new(&osd, 5);
            assert_eq!(osd.load(Ordering::Relaxed), 5);
            pending.copied(4096);
            pending.copied(0);
            assert_eq!(osd.load(Ordering::Relaxed), 3);
            let other = Pending::new(&osd, 2);
            assert_eq!(osd.load(Ordering::Relaxed), 5);
            drop(other);
        }
        assert_eq!(
            osd.load(Ordering::Relaxed),
            0,
            "nothing left once the passes end"
        );
    }
}
