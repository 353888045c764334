//! What one PG on one OSD knows and decides: no IO, no clock, no tasks. The async shell
//! (service.rs, recovery.rs, scrub.rs) holds the core under the PG's lock, does the IO the
//! core asks for, and feeds back what came of it.
//!
//! # States
//!
//! A PG on an OSD is in one role, and a primary in one of the states it publishes:
//!
//! | role / state | what the core holds | entered | left |
//! |---|---|---|---|
//! | not loaded | `loaded == false` | created on first use; a write whose shell ended without its answer | a peering, query or replicated write loads the log from the store; an activation replaces it |
//! | replica or stray | `interval` empty | the map names another primary | a map that makes this OSD first in the acting set |
//! | primary, peering | `peering` in progress, nothing clean yet | a map that changed the acting set; a write that failed here; a recovery that found its target newer; a retry after an inactive peering | every member answered and this OSD holds the newest log |
//! | primary, inactive | fewer than min_size complete copies (k shards in an erasure-coded PG) | too few OSDs up, the log unreadable, a member silent, a catch-up failed, a write's replicas missed it | the next peering, or a recovery that completes a copy |
//! | primary, read-only | an erasure-coded PG with at least k complete shards but fewer than min_size: reads are served, writes wait | peering or a missed write left it so | the next peering, or a recovery that completes a shard |
//! | primary, recovering | min_size copies, and a replica in `recovering` | peering found a replica behind, or a replica missed a write | the replica joins `clean`, or a new interval |
//! | primary, undersized | min_size copies, fewer OSDs acting than the pool's size | the map | the map |
//! | primary, clean | every acting OSD clean | peering or the last recovery | a missed write, a map change |
//!
//! A primary also has at most one group of client writes in flight ([`Core::on_write`],
//! write.rs), from their order to their answers: the PG's lock is held for all of it, so
//! groups are applied one at a time, each in one transaction, in version order, on every
//! copy. Peering ([`Core::on_peering`], peering.rs)
//! holds the lock too, from the new interval to the state it publishes.
//!
//! # Invariants (asserted where they are decided)
//!
//! - **Versions only grow**: a write is ordered at `last.seq + 1` in an epoch no lower than
//!   the last one's ([`Core::order_write`]), a log only ever takes a newer entry
//!   ([`Core::note_logged`]), and a replica refuses an activation that would take its log
//!   back ([`Core::check_activation`]: the message comes from the network, so it is a
//!   refusal, not an assert).
//! - **Nothing is acknowledged below min_size**: a write is answered `Written` only once it
//!   is applied here and on at least `min_size - 1` replicas (write.rs, `finish`).
//! - **An acknowledged write is in the log of every clean replica**: a replica that did not
//!   apply it leaves `clean` before the answer, and is recovered (write.rs, `finish`).
//! - **A recovery's claim only grows**: every token drawn is newer than the last
//!   ([`Core::draw_token`]); a target refuses a claim older than the newest it saw
//!   ([`Core::admit`]), so a superseded recovery's late copy never lands on it.
//! - **Peering picks the log that holds every acknowledged write**: the newest log among
//!   all members, a settled one among equals ([`catch_up_source`]); once caught up, the
//!   primary's log is that one (peering.rs).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use map::cluster::Epoch;
use map::placement::{OsdId, PgId};
use map::ObjectName;
use messenger::message::{Claim, LogEntry, PgInfo, PgState, ReqId, Version, Writers};

use super::peering::Peering;
use super::write::Write;

pub struct Core {
    pub pg: PgId,
    pub loaded: bool,
    pub info: PgInfo,
    pub log: VecDeque<LogEntry>,
    /// The most bytes `log` takes on the wire (`LogEntry::wire_bytes_max`), which bounds
    /// it beside its length (`objects::log_append`).
    pub log_bytes: usize,
    /// Request ids in the log, for retried writes.
    pub reqids: HashMap<ReqId, Version>,
    pub interval: Interval,
    /// As a recovery's target: the newest claim seen ([`Core::admit`]). Kept in memory
    /// only: after a restart the map has changed, and the next recovery's query sets it.
    pub fence: Claim,
    /// A catch-up of this copy began and has not finished (kept in the store too,
    /// `objects::mark_unsettled`): its objects may be newer than its log.
    pub unsettled: bool,
    /// The next token this primary draws ([`Core::draw_token`]) for the claim of a peering's
    /// queries, a recovery pass or a scrub's repair.
    tokens: u64,
    /// The client write in flight, from its order to its answer (write.rs).
    pub(super) write: Option<Write>,
    /// The peering in progress, from its first query to the state published (peering.rs).
    pub(super) peering: Option<Peering>,
    /// An erasure-coded PG's shard here keeps undo records of its writes; those of the
    /// log's entries up to this version are dropped ([`undo_to_drop`]) (kept in the store
    /// too, `objects::set_complete`).
    pub undo_dropped: Version,
    /// In an erasure-coded PG, the position whose shards this OSD holds (kept in the store
    /// too, `objects::set_position`).
    pub position: Option<u8>,
    /// In an erasure-coded PG, the OSDs the writes of each epoch it applied writes in were
    /// sent to (kept in the store too, `objects::set_writers`).
    pub writers: Writers,
    /// As a recovery's target in an erasure-coded PG: the objects whose pushed shards kept an
    /// undo record since the last activation, and the version each carries, which the next
    /// activation drops once complete. In memory only: after a restart they stay until the
    /// objects are written again.
    pub pushed_undo: BTreeMap<ObjectName, Version>,
    /// In an erasure-coded PG, the newest version known to be on min_size holders, with
    /// every write before it: `undo_dropped`, or newer from a primary's note
    /// (`PeerOp::Complete`) or a member's answer in peering. In memory only, as a lower
    /// bound needs no sync. A read-only PG reads only objects written at or below it.
    pub known_complete: Version,
}

/// The acting set as this OSD last peered it (empty when not primary).
#[derive(Clone, Debug, Default)]
pub struct Interval {
    pub epoch: Epoch,
    pub acting: Vec<OsdId>,
    pub size: usize,
    pub min_size: usize,
    /// Replicas that hold everything and get every write.
    pub clean: Vec<OsdId>,
    /// Replicas being recovered, each by one task.
    pub recovering: BTreeMap<OsdId, Recovery>,
    /// An erasure-coded PG's code, and the OSD holding each shard by position (`None` where
    /// the OSD placed there is down): `acting` is the positions filled, in order.
    pub erasure: Option<ec::Profile>,
    pub positions: Vec<Option<OsdId>>,
}

impl Interval {
    /// The holders a write or a read of an erasure-coded PG uses, by position: this primary
    /// (`me`) and its clean members; `None` where the shard is not to be trusted (no OSD,
    /// or one being recovered).
    pub fn shard_holders(&self, me: OsdId) -> Vec<Option<OsdId>> {
        self.positions
            .iter()
            .map(|at| at.filter(|osd| *osd == me || self.clean.contains(osd)))
            .collect()
    }
}

/// One recovery task's claim on a target: a task whose token is no longer here stops.
#[derive(Clone, Debug, Default)]
pub struct Recovery {
    pub token: u64,
    /// Objects written since the recovery began, to copy again before the target joins.
    pub dirty: BTreeSet<ObjectName>,
}

/// The member of the acting set a new primary catches up from, given its own last version
/// and whether its own last catch-up was interrupted, and each member's (last, unsettled)
/// in `answers`: the member with the newest log, a settled one among equals. An unsettled
/// primary catches up from a member only as new as itself too, so that its objects are made
/// that member's again (F4).
pub fn catch_up_source(
    own: Version,
    own_unsettled: bool,
    answers: &[(Version, bool)],
) -> Option<usize> {
    let (best, (last, _)) = answers
        .iter()
        .enumerate()
        .max_by_key(|(_, (last, unsettled))| (*last, !*unsettled))?;
    (*last > own || (own_unsettled && *last == own)).then_some(best)
}

/// The undo records an erasure-coded shard's holder drops, as (object, version sequence):
/// those of `log`'s entries above `dropped` (the last version dropped) up to `complete_to`,
/// which min_size holders applied, so that no peering can take them back (an
/// acknowledgement needs as many: docs/design/erasure.md, §6 and §7); one per object, its
/// newest (a drop takes every record at or below it). Once the transaction is applied,
/// `Core::undo_dropped` becomes `complete_to`.
pub fn undo_to_drop(
    log: &VecDeque<LogEntry>,
    dropped: Version,
    complete_to: Version,
) -> Vec<(ObjectName, u64)> {
    let mut newest: BTreeMap<&ObjectName, u64> = BTreeMap::new();
    for entry in log
        .iter()
        .filter(|e| e.version > dropped && e.version <= complete_to)
    {
        let seq = newest.entry(&entry.object).or_default();
        *seq = (*seq).max(entry.version.seq);
    }
    newest
        .into_iter()
        .map(|(object, seq)| (object.clone(), seq))
        .collect()
}

/// Whether a member that answered peering joins the clean replicas at once: it holds the
/// primary's log up to the same version, and no interrupted catch-up of its own.
pub fn is_clean(own: Version, last: Version, unsettled: bool) -> bool {
    last == own && !unsettled
}

/// What a client write gets in its PG, decided under the PG's lock before any IO.
#[derive(Debug, PartialEq, Eq)]
pub enum Order {
    /// The same request was already applied, at this version: answer it again.
    Duplicate(Version),
    /// The client's instance is blocklisted: refuse.
    Blocklisted,
    /// Apply it as this log entry.
    Next(LogEntry),
}

/// What a replica does with a write its primary sends.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It already holds this write (a resend): answer done.
    Duplicate,
    /// Its log already has another write at this version: refuse, so the second never
    /// passes for the first.
    Conflict,
    /// Apply it and append it to the log; `skipped` versions lie between the last one here
    /// and it (the primary's recovery brings them).
    Apply { skipped: u64 },
}

impl Core {
    /// A PG not loaded yet, whose tokens start at `first_token`: counted from the clock
    /// when the OSD started, so a restarted primary's claims are newer than any it made
    /// before (`OsdState::first_token`).
    pub fn new(pg: PgId, first_token: u64) -> Core {
        Core {
            pg,
            loaded: false,
            info: PgInfo::default(),
            log: VecDeque::new(),
            log_bytes: 0,
            reqids: HashMap::new(),
            interval: Interval::default(),
            fence: Claim::default(),
            unsettled: false,
            tokens: first_token,
            write: None,
            peering: None,
            undo_dropped: Version::default(),
            position: None,
            writers: Writers::new(),
            pushed_undo: BTreeMap::new(),
            known_complete: Version::default(),
        }
    }

    /// The writers this OSD keeps once it applies a write of `epoch` sent to `holders`:
    /// `None` if it knows them already. Epochs older than its log's first entry go.
    pub fn writers_with(&self, epoch: Epoch, holders: &[Option<OsdId>]) -> Option<Writers> {
        if self.writers.contains_key(&epoch) {
            return None;
        }
        let oldest = self
            .log
            .front()
            .map_or(epoch, |e| e.version.epoch.min(epoch));
        let mut writers: Writers = self
            .writers
            .range(oldest..)
            .map(|(e, h)| (*e, h.clone()))
            .collect();
        writers.insert(epoch, holders.to_vec());
        Some(writers)
    }

    /// A new token, newer than every one drawn before in this PG.
    pub fn draw_token(&mut self) -> u64 {
        let token = self.tokens;
        self.tokens = token.checked_add(1).expect("recovery tokens never run out");
        token
    }

    /// Takes `target` out of the clean replicas to recover it, under a new token (replacing
    /// any recovery already on it); returns the token, for the shell's recovery task.
    pub fn begin_recovery(&mut self, target: OsdId) -> u64 {
        let token = self.draw_token();
        self.interval.clean.retain(|osd| *osd != target);
        self.interval.recovering.insert(
            target,
            Recovery {
                token,
                dirty: BTreeSet::new(),
            },
        );
        token
    }

    /// Orders a client write: a retried request gets its version back, a blocklisted
    /// client nothing, anything else the version after the last one ordered (in the group
    /// in flight, else in the log). The version's epoch never goes below the last one's,
    /// even when this OSD's map lags the log it took over.
    pub fn order_write(&self, reqid: ReqId, object: &ObjectName, blocklisted: bool) -> Order {
        if let Some(version) = self.reqids.get(&reqid) {
            return Order::Duplicate(*version);
        }
        if blocklisted {
            return Order::Blocklisted;
        }
        let last = self
            .write
            .as_ref()
            .and_then(Write::last_ordered)
            .unwrap_or(self.info.last);
        let version = Version {
            epoch: self.interval.epoch.max(last.epoch),
            seq: last.seq + 1,
        };
        assert!(version > last, "versions only grow");
        Order::Next(LogEntry {
            version,
            object: object.clone(),
            reqid,
        })
    }

    /// What a replica does with `entry` from its primary.
    pub fn on_replicate(&self, entry: &LogEntry) -> Verdict {
        if entry.version <= self.info.last {
            let known = self
                .log
                .iter()
                .any(|e| e.version == entry.version && e.reqid == entry.reqid);
            return if known {
                Verdict::Duplicate
            } else {
                Verdict::Conflict
            };
        }
        Verdict::Apply {
            skipped: entry.version.seq.saturating_sub(self.info.last.seq + 1),
        }
    }

    /// In an erasure-coded PG, the position `osd` holds in this interval.
    pub fn position_of(&self, osd: OsdId) -> Option<u8> {
        let position = self
            .interval
            .positions
            .iter()
            .position(|h| *h == Some(osd))?;
        Some(u8::try_from(position).expect("at most 32 shards"))
    }

    /// Whether a holder whose shards are those of `position`, with a log to `last`, holds
    /// `osd`'s position's shards in this erasure-coded PG (one that never held a shard
    /// holds any). Always true in a replicated PG.
    pub fn holds_position(&self, osd: OsdId, position: Option<u8>, last: Version) -> bool {
        if self.interval.erasure.is_none() {
            return true;
        }
        match position {
            Some(p) => Some(p) == self.position_of(osd),
            None => last == Version::default(),
        }
    }

    /// The version up to which a replica joining the clean set drops its undo records
    /// ([`undo_to_drop`]): in an erasure-coded PG, this primary's last once the join makes
    /// min_size holders of it, else what this primary dropped itself; none in a replicated
    /// PG, which keeps no undo records.
    pub fn join_complete_to(&self) -> Version {
        if self.interval.erasure.is_none() {
            Version::default()
        } else if self.copies() + 1 >= self.interval.min_size {
            self.info.last
        } else {
            self.undo_dropped
        }
    }

    /// The complete copies of the PG: this primary and its clean replicas.
    fn copies(&self) -> usize {
        1 + self.interval.clean.len()
    }

    /// Whether reads may be served without min_size copies: an erasure-coded PG peered
    /// with enough members ([`Core::fewest_to_peer`]; with k = 1 a lone primary would count
    /// k copies without having asked anyone), whose complete shards (this primary's and its
    /// clean holders') decode its objects.
    fn reads_ok(&self) -> bool {
        self.interval.erasure.is_some_and(|profile| {
            self.interval.acting.len() >= self.fewest_to_peer() && self.copies() >= profile.k()
        })
    }

    /// The fewest OSDs acting with which a peering may make the PG serve anything: min_size;
    /// in an erasure-coded PG, which serves reads with k complete shards, k, but no fewer
    /// than n - min_size + 1, so that at least one of them holds every write min_size
    /// holders acknowledged (with 2+3 and min_size 3, the two others than those three
    /// could hold none of it).
    pub fn fewest_to_peer(&self) -> usize {
        let min_size = self.interval.min_size;
        self.interval.erasure.map_or(min_size, |profile| {
            let overlap = (profile.shards() + 1).saturating_sub(min_size);
            profile.k().max(overlap).min(min_size)
        })
    }

    /// The newest version whose writes a read-only PG returns: the newest known to be on
    /// min_size holders. A write above it may be on fewer, and a later peering with other
    /// holders may roll it back (docs/design/erasure.md, §7).
    pub fn readable_to(&self) -> Version {
        self.known_complete.max(self.undo_dropped)
    }

    /// The version of `object`'s newest write in the log, if it is above
    /// [`Core::readable_to`]: a read-only PG does not read the object then.
    pub fn not_known_complete(&self, object: &ObjectName) -> Option<Version> {
        let newest = self.log.iter().rev().find(|e| e.object == *object)?;
        (newest.version > self.readable_to()).then_some(newest.version)
    }

    /// The last version of the log, if it is above [`Core::readable_to`]: a read-only PG
    /// then lists nothing, since the names those writes made or removed may be rolled
    /// back.
    pub fn unknown_complete_tail(&self) -> Option<Version> {
        (self.info.last > self.readable_to()).then_some(self.info.last)
    }

    /// Whether a write applied here and on every clean replica may be acknowledged: it
    /// has at least min_size copies.
    pub fn ack_ok(&self) -> bool {
        self.copies() >= self.interval.min_size
    }

    /// Whether a push, an activation or a recovery's query under `claim` may go on here:
    /// not if a newer claim has been seen, whose copies it could overwrite (F3). A claim
    /// admitted becomes the newest.
    pub fn admit(&mut self, claim: Claim) -> Result<(), String> {
        if claim < self.fence {
            return Err(format!(
                "a superseded recovery (interval {}, token {}) is refused: a newer one \
                 (interval {}, token {}) has begun here",
                claim.interval, claim.token, self.fence.interval, self.fence.token
            ));
        }
        self.fence = claim;
        Ok(())
    }

    /// Whether a recovery's activation may replace this copy's log with one that ends at
    /// `info.last`: not with an older one. The primary found this copy no newer than its
    /// own before it began (else it peers again), so an older log means a write here would
    /// be forgotten: refused, and the recovery tries again.
    pub fn check_activation(&self, info: PgInfo) -> Result<(), String> {
        if info.last < self.info.last {
            return Err(format!(
                "pg {}.{}: an activation would take this copy's log back from {}.{} to {}.{}",
                self.pg.pool,
                self.pg.number,
                self.info.last.epoch,
                self.info.last.seq,
                info.last.epoch,
                info.last.seq
            ));
        }
        Ok(())
    }

    pub fn set_log(&mut self, info: PgInfo, log: VecDeque<LogEntry>) {
        self.reqids = log.iter().map(|e| (e.reqid, e.version)).collect();
        self.info = info;
        self.log_bytes = log.iter().map(LogEntry::wire_bytes_max).sum();
        self.log = log;
    }

    /// After a write and its log entry were applied: the log, trimmed by `trim` entries.
    pub fn note_logged(&mut self, entry: LogEntry, trim: usize) {
        assert!(
            entry.version > self.info.last,
            "versions only grow: {:?} logged after {:?}",
            entry.version,
            self.info.last
        );
        self.info.last = entry.version;
        let trim = trim.min(self.log.len());
        let trimmed: usize = self.log.drain(..trim).map(|old| old.wire_bytes_max()).sum();
        self.log_bytes = self.log_bytes - trimmed + entry.wire_bytes_max();
        self.reqids.insert(entry.reqid, entry.version);
        self.log.push_back(entry);
        if self.reqids.len() > self.log.len() {
            let live: HashSet<ReqId> = self.log.iter().map(|e| e.reqid).collect();
            self.reqids.retain(|id, _| live.contains(id));
        }
    }

    /// The state to report: active with enough clean copies, else why not.
    pub fn state(&self) -> PgState {
        let copies = self.copies();
        if !self.ack_ok() {
            let why = if self.interval.acting.len() < self.interval.min_size {
                format!(
                    "{} of its OSDs up, min_size {}",
                    self.interval.acting.len(),
                    self.interval.min_size
                )
            } else {
                format!(
                    "{copies} complete copies, min_size {}; recovering the others",
                    self.interval.min_size
                )
            };
            if self.reads_ok() {
                PgState::ReadOnly(format!("{why}; reads are served, writes wait"))
            } else {
                PgState::Inactive(why)
            }
        } else if !self.interval.recovering.is_empty() {
            PgState::Recovering
        } else if self.interval.acting.len() < self.interval.size {
            PgState::Undersized
        } else {
            PgState::Clean
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::pg) const PG: PgId = PgId {
        pool: map::PoolId(1),
        number: 0,
    };

    pub(in crate::pg) fn name(text: &str) -> ObjectName {
        ObjectName::new(text).expect("a name")
    }

    pub(in crate::pg) fn reqid(seq: u64) -> ReqId {
        ReqId { client: 7, seq }
    }

    pub(in crate::pg) fn version(epoch: Epoch, seq: u64) -> Version {
        Version { epoch, seq }
    }

    /// A primary in the interval of `epoch` whose log holds one write at `last`, with
    /// `clean` replicas of a pool of size 3, min_size 2.
    pub(in crate::pg) fn primary(epoch: Epoch, last: Version, clean: usize) -> Core {
        let mut core = Core::new(PG, 100);
        core.interval = Interval {
            epoch,
            acting: vec![OsdId(0), OsdId(1), OsdId(2)],
            size: 3,
            min_size: 2,
            clean: (1..=clean as u32).map(OsdId).collect(),
            recovering: BTreeMap::new(),
            erasure: None,
            positions: Vec::new(),
        };
        let entry = LogEntry {
            version: last,
            object: name("a"),
            reqid: reqid(1),
        };
        core.set_log(PgInfo { last }, VecDeque::from([entry]));
        core
    }

    #[test]
    fn a_write_takes_the_next_version_and_a_retry_gets_its_own_back() {
        let mut core = primary(5, version(5, 9), 2);
        assert_eq!(
            core.order_write(reqid(1), &name("a"), false),
            Order::Duplicate(version(5, 9))
        );
        let Order::Next(entry) = core.order_write(reqid(2), &name("b"), false) else {
            panic!("a new request is ordered");
        };
        assert_eq!(entry.version, version(5, 10));
        assert_eq!((entry.object.clone(), entry.reqid), (name("b"), reqid(2)));
        core.note_logged(entry, 0);
        assert_eq!(
            core.order_write(reqid(2), &name("b"), false),
            Order::Duplicate(version(5, 10))
        );
        assert_eq!(
            core.order_write(reqid(3), &name("b"), true),
            Order::Blocklisted
        );
        // A retry of an applied write is answered even once its client is blocklisted.
        assert_eq!(
            core.order_write(reqid(2), &name("b"), true),
            Order::Duplicate(version(5, 10))
        );
    }

    #[test]
    fn a_map_lagging_the_log_never_lowers_the_epoch() {
        let core = primary(4, version(6, 3), 2);
        let Order::Next(entry) = core.order_write(reqid(2), &name("a"), false) else {
            panic!("ordered");
        };
        assert_eq!(entry.version, version(6, 4));
        let core = primary(8, version(6, 3), 2);
        let Order::Next(entry) = core.order_write(reqid(2), &name("a"), false) else {
            panic!("ordered");
        };
        assert_eq!(entry.version, version(8, 4));
    }

    #[test]
    fn a_write_is_acknowledged_only_with_min_size_copies() {
        assert!(primary(5, version(5, 1), 2).ack_ok());
        assert!(primary(5, version(5, 1), 1).ack_ok());
        let alone = primary(5, version(5, 1), 0);
        assert!(!alone.ack_ok());
        assert!(matches!(alone.state(), PgState::Inactive(_)));
    }

    #[test]
    fn a_replica_applies_new_writes_answers_resends_and_refuses_reused_versions() {
        let replica = primary(5, version(5, 9), 0);
        let entry = |v: Version, id: u64| LogEntry {
            version: v,
            object: name("a"),
            reqid: reqid(id),
        };
        assert_eq!(
            replica.on_replicate(&entry(version(5, 10), 2)),
            Verdict::Apply { skipped: 0 }
        );
        assert_eq!(
            replica.on_replicate(&entry(version(6, 12), 2)),
            Verdict::Apply { skipped: 2 }
        );
        assert_eq!(
            replica.on_replicate(&entry(version(5, 9), 1)),
            Verdict::Duplicate
        );
        assert_eq!(
            replica.on_replicate(&entry(version(5, 9), 2)),
            Verdict::Conflict
        );
        assert_eq!(
            replica.on_replicate(&entry(version(4, 20), 3)),
            Verdict::Conflict
        );
    }

    #[test]
    fn a_primary_catches_up_from_the_newest_settled_log() {
        let (v1, v2) = (version(1, 1), version(1, 2));
        assert_eq!(
            catch_up_source(v1, false, &[(v1, false), (v2, false)]),
            Some(1)
        );
        assert_eq!(
            catch_up_source(v2, false, &[(v1, false), (v2, false)]),
            None
        );
        assert_eq!(catch_up_source(v1, false, &[]), None);
        // Among equals, a member whose own catch-up was interrupted is the last choice.
        assert_eq!(
            catch_up_source(v1, false, &[(v2, false), (v2, true)]),
            Some(0)
        );
        assert_eq!(
            catch_up_source(v1, false, &[(v2, true), (v2, false)]),
            Some(1)
        );
        // An interrupted catch-up here is finished from a member as new as this one.
        assert_eq!(catch_up_source(v1, true, &[(v1, false)]), Some(0));
        assert_eq!(catch_up_source(v2, true, &[(v1, false)]), None);
    }

    #[test]
    fn only_a_settled_member_with_the_primarys_last_version_is_clean() {
        let (v1, v2) = (version(1, 1), version(1, 2));
        assert!(is_clean(v2, v2, false));
        assert!(!is_clean(v2, v2, true));
        assert!(!is_clean(v2, v1, false));
    }

    #[test]
    fn undo_records_are_dropped_once_per_object_up_to_what_min_size_holders_applied() {
        let entry = |seq, object: &str| LogEntry {
            version: version(5, seq),
            object: name(object),
            reqid: reqid(seq),
        };
        let log = VecDeque::from([entry(1, "a"), entry(2, "b"), entry(3, "a"), entry(4, "a")]);
        assert_eq!(
            undo_to_drop(&log, version(5, 1), version(5, 3)),
            [(name("a"), 3), (name("b"), 2)]
        );
        assert!(undo_to_drop(&log, version(5, 4), version(5, 4)).is_empty());
        // A replicated PG keeps none; an erasure-coded one drops up to its last once a
        // joining holder makes min_size, else what it dropped itself.
        let mut core = primary(5, version(5, 9), 1);
        assert_eq!(core.join_complete_to(), Version::default());
        core.interval.erasure = Some(ec::Profile::new(2, 1, 4096).expect("2+1"));
        core.interval.min_size = 3;
        core.undo_dropped = version(5, 7);
        assert_eq!(core.join_complete_to(), version(5, 9));
        core.interval.clean.clear();
        assert_eq!(core.join_complete_to(), version(5, 7));
    }

    #[test]
    fn an_activation_never_takes_a_log_back() {
        let core = primary(5, version(5, 9), 0);
        let info = |last| PgInfo { last };
        assert!(core.check_activation(info(version(5, 9))).is_ok());
        assert!(core.check_activation(info(version(6, 12))).is_ok());
        let refused = core.check_activation(info(version(5, 8)));
        assert!(refused.is_err_and(|why| why.contains("back from 5.9 to 5.8")));
    }

    #[test]
    fn a_target_refuses_a_claim_older_than_the_newest_it_saw() {
        let mut core = Core::new(PG, 1);
        let claim = |interval, token| Claim { interval, token };
        assert!(core.admit(claim(5, 10)).is_ok());
        assert!(
            core.admit(claim(5, 10)).is_ok(),
            "the same recovery goes on"
        );
        assert!(
            core.admit(claim(5, 9)).is_err(),
            "an older token of the same interval"
        );
        assert!(
            core.admit(claim(4, 99)).is_err(),
            "an older interval, whatever its token"
        );
        assert!(
            core.admit(claim(6, 1)).is_ok(),
            "a newer interval, tokens counted anew"
        );
        assert_eq!(core.fence, claim(6, 1));
        assert!(core.admit(claim(5, 11)).is_err());
    }

    #[test]
    fn writers_are_kept_per_epoch_for_the_epochs_the_log_still_has() {
        let mut core = primary(5, version(5, 9), 0);
        let holders = |first: u32| vec![Some(OsdId(first)), None, Some(OsdId(first + 1))];
        core.writers = core.writers_with(3, &holders(0)).expect("a new epoch");
        core.writers = core.writers_with(5, &holders(4)).expect("a new epoch");
        assert_eq!(core.writers_with(5, &holders(7)), None, "known already");
        // The log begins at epoch 5: epoch 3's writers went when epoch 5's came.
        let writers = core.writers_with(6, &holders(9)).expect("a new epoch");
        assert_eq!(writers.keys().copied().collect::<Vec<_>>(), [5, 6]);
        assert_eq!(writers[&6], holders(9));
    }
}
