//! Peering a PG against a new map, as events in and actions out: the shell
//! (`recovery::peer`) holds the PG's lock, feeds [`Event`]s to [`Core::on_peering`] and
//! carries out the [`Action`]s it returns, in order, until the peering is over
//! ([`Core::is_peering`]). Every action the core waits on (Load, Query, CatchUp) is answered
//! by exactly one event, but once a peering is over the answers still on their way are
//! dropped: the queries, the one kind of IO that runs concurrently, answer in any order.
//!
//! ```text
//! Start ── this OSD does not lead the PG ──► NotPrimary
//!   ▼ it leads: a new interval, nothing clean
//! Publish(peering), Load
//!   ▼ Loaded ── the store failed ─────────► Publish(inactive)
//!   ├── fewer OSDs acting than min_size ──► Publish(inactive)
//!   │   (than k in an erasure-coded PG, which with k to min_size - 1 complete shards
//!   │   publishes read-only at the end: reads served, writes wait)
//!   ▼
//! Query every member at once, under a new claim
//!   ▼ Answered ── a member did not ───────► Publish(inactive), RetryLater (the rest dropped)
//!   ▼ all answered
//! a member holds a newer log (or this copy's own catch-up was cut short)?
//!   ├── yes: CatchUp from it ── failed ───► Publish(inactive), RetryLater
//!   ▼ no, or CaughtUp
//! each member with this log, settled, is clean; Recover the others
//! Publish(the PG's state)
//! ```
//!
//! Every member must answer: one that does not may hold the newest writes, so the PG waits
//! (retrying) until the monitors mark it down and the acting set changes.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use map::cluster::Epoch;
use map::placement::OsdId;
use map::ObjectName;
use messenger::message::{Claim, LogEntry, PgInfo, PgState, ReqId, Version, Writers};

use super::core::{catch_up_source, is_clean, Core, Interval};

/// Where the map places a PG this OSD leads.
#[derive(Clone, Debug)]
pub struct Placement {
    pub epoch: Epoch,
    /// This OSD first.
    pub acting: Vec<OsdId>,
    pub size: usize,
    pub min_size: usize,
    /// An erasure-coded pool's code, and its shards' holders by position.
    pub erasure: Option<ec::Profile>,
    pub positions: Vec<Option<OsdId>>,
}

/// What a member of the acting set holds of the PG.
#[derive(Clone, Debug)]
pub struct Answer {
    pub info: PgInfo,
    pub log: Vec<LogEntry>,
    /// A catch-up of its copy was cut short: its objects may be newer than its log.
    pub unsettled: bool,
    /// In an erasure-coded PG, the position whose shards it holds.
    pub position: Option<u8>,
    /// In an erasure-coded PG whose copy is catching up (unsettled, or of mixed positions):
    /// the shards it holds of writes above those it knows complete, by object, version and
    /// position.
    pub held: Vec<(ObjectName, Version, u8)>,
    /// In an erasure-coded PG, the OSDs the writes of each epoch it applied writes in were
    /// sent to.
    pub writers: Writers,
    /// In an erasure-coded PG, the newest version it knows to be on min_size holders.
    pub complete: Version,
}

/// What happened, as the shell tells the core.
#[derive(Debug)]
pub enum Event {
    /// Peering starts against the current map: `None` when this OSD does not lead the PG
    /// (or its pool is gone).
    Start(Option<Placement>),
    /// The PG's log is in memory, read from the store; or the store failed.
    Loaded(Result<(), String>),
    /// A member answered the query, or did not.
    Answered {
        osd: OsdId,
        answer: Result<Answer, String>,
    },
    /// This OSD's objects are the source's and its log is the source's; or the catch-up
    /// failed (the copy stays marked unsettled).
    CaughtUp(Result<(), String>),
    /// The holders asked rolled their writes back, or one failed.
    RolledBack(Result<(), String>),
}

/// What the core asks of the shell, in order.
#[derive(Debug)]
pub enum Action {
    /// Another OSD leads the PG: publish that.
    NotPrimary,
    /// Read the PG's log from the store, unless it is in memory; answer `Loaded`.
    Load,
    /// Ask this member what it holds, under this claim, while the other members are asked
    /// too; answer `Answered`.
    Query { to: OsdId, claim: Claim },
    /// Make this OSD's objects those of `from` (marking the copy unsettled first), then take
    /// its log; answer `CaughtUp`.
    CatchUp {
        from: OsdId,
        info: PgInfo,
        log: VecDeque<LogEntry>,
    },
    /// Recover this member under this token.
    Recover { target: OsdId, token: u64 },
    /// An erasure-coded PG: have each of `holders` (this OSD among them, maybe) take back
    /// every write above its version from its undo records, newest first, and end its log
    /// there; answer `RolledBack`.
    RollBack {
        holders: Vec<(OsdId, Version)>,
        claim: Claim,
    },
    /// Publish this state for the interval that began at `interval`.
    Publish { interval: Epoch, state: PgState },
    /// Peer again after a pause.
    RetryLater,
}

/// What becomes of the newest writes of an erasure-coded PG (docs/design/erasure.md, §7).
#[derive(Debug, PartialEq, Eq)]
pub enum Tail {
    /// At least k holders applied every write any holder did: each object decodes at the
    /// newest version, and holders behind are rebuilt from the others.
    Decodable,
    /// Each of these holders' writes above its version reached fewer than k holders, and
    /// even with every silent position they could not have reached min_size, so none was
    /// acknowledged: the holder takes them back.
    RollBack(Vec<(OsdId, Version)>),
    /// Writes that fewer than k holders applied may have been acknowledged by holders that
    /// are down: wait for them.
    Wait(String),
}

/// What one holder that answered peering says of an erasure-coded PG ([`erasure_tail`]).
pub struct TailHolder<'a> {
    pub osd: OsdId,
    /// The position whose shards it holds: `None` before its first, or if it holds several.
    pub position: Option<u8>,
    pub log: &'a VecDeque<LogEntry>,
    /// A holder catching up: the shards it holds of writes above those it knows complete, by
    /// object, version and position, whatever its log says (`Answer::held`).
    pub held: &'a [(ObjectName, Version, u8)],
    /// The OSDs the writes of each epoch it knows of were sent to (`Answer::writers`).
    pub writers: &'a Writers,
}

/// The tail of an erasure-coded PG's history, from the log of each holder that answered
/// peering (the primary's among them), with the position whose shards it holds. A write
/// whose shards k distinct positions hold decodes; one with fewer cannot be rebuilt on the
/// others, so it is rolled back if those holders and every position with no OSD up could
/// not make min_size, and waited on otherwise. A holder's log is one history: every holder
/// of a write applied the writes before it in that history, so the writes it rolls back are
/// those above the newest it holds that decodes. A log's entries end where it was trimmed:
/// a holder whose log begins after a write applied it. A holder catching up (unsettled, or
/// holding shards of several positions) also holds the shards it says it `held`, whatever
/// its log and its noted position say. Where a holder knows the OSDs a write's epoch sent
/// its writes to, those that did not answer are the ones that may hold it besides those
/// that do (a position's holder may have changed since); else every position with no OSD
/// answering. A write min_size of those OSDs answer with is kept, whatever positions they
/// now note.
pub fn erasure_tail(profile: ec::Profile, min_size: usize, holders: &[TailHolder<'_>]) -> Tail {
    let k = profile.k();
    let silent = profile.shards().saturating_sub(holders.len());
    let mut writers = Writers::new();
    for holder in holders {
        for (epoch, sent) in holder.writers {
            writers.entry(*epoch).or_insert_with(|| sent.clone());
        }
    }
    let shard_of = |position: Option<u8>| position.filter(|p| usize::from(*p) < profile.shards());
    // The positions whose shards hold each write: by the logs, and by what holders catching
    // up hold.
    let mut holding: HashMap<(Version, ReqId), BTreeSet<u8>> = HashMap::new();
    let mut held: HashMap<(Version, &ObjectName), BTreeSet<u8>> = HashMap::new();
    for holder in holders {
        for entry in holder.log.iter() {
            let positions = holding.entry((entry.version, entry.reqid)).or_default();
            positions.extend(shard_of(holder.position));
        }
        for (object, version, shard) in holder.held {
            let positions = held.entry((*version, object)).or_default();
            positions.extend(shard_of(Some(*shard)));
        }
    }
    let applied = |entry: &LogEntry| {
        let mut positions = holding[&(entry.version, entry.reqid)].clone();
        if let Some(more) = held.get(&(entry.version, &entry.object)) {
            positions.extend(more);
        }
        for holder in holders {
            if holder
                .log
                .front()
                .is_some_and(|first| first.version > entry.version)
            {
                positions.extend(shard_of(holder.position));
            }
        }
        positions.len()
    };
    let has = |holder: &TailHolder<'_>, entry: &LogEntry| {
        holder
            .log
            .front()
            .is_some_and(|first| first.version > entry.version)
            || holder
                .log
                .iter()
                .any(|e| e.version == entry.version && e.reqid == entry.reqid)
            || holder
                .held
                .iter()
                .any(|(object, version, _)| *version == entry.version && *object == entry.object)
    };
    // How many of the OSDs a write was sent to may hold it, and those that did not answer.
    let reached = |entry: &LogEntry| {
        let sent = writers.get(&entry.version.epoch)?;
        let mut may = 0;
        let mut absent = Vec::new();
        for osd in sent.iter().flatten() {
            match holders.iter().find(|h| h.osd == *osd) {
                None => {
                    may += 1;
                    absent.push(format!("osd.{}", osd.0));
                }
                Some(holder) if has(holder, entry) => may += 1,
                Some(_) => {}
            }
        }
        Some((may, absent))
    };
    let mut rollbacks = Vec::new();
    let mut waits = Vec::new();
    // Every OSD it was sent to answered, and min_size of them hold it: acknowledged or not,
    // it is complete, whatever positions its holders now note.
    let complete = |entry: &LogEntry| {
        reached(entry).is_some_and(|(may, absent)| absent.is_empty() && may >= min_size)
    };
    for TailHolder { osd, log, .. } in holders {
        let decodable = log
            .iter()
            .rposition(|entry| applied(entry) >= k || complete(entry));
        let above = decodable.map_or(0, |at| at + 1);
        let Some(first) = log.get(above) else {
            continue;
        };
        let to = decodable.map_or(Version::default(), |at| log[at].version);
        let most = applied(first);
        let (may, whom) = match reached(first) {
            Some((may, absent)) => (
                may,
                format!("it was sent to {}, which did not answer", absent.join(", ")),
            ),
            None => (
                most + silent,
                format!("{silent} shard positions are down and may hold them"),
            ),
        };
        if may < min_size {
            rollbacks.push((*osd, to));
        } else {
            waits.push(format!(
                "osd.{} holds writes above {}.{} whose shards {most} positions hold, of the \
                 k = {k} needed to decode them; {whom}",
                osd.0, to.epoch, to.seq
            ));
        }
    }
    if !waits.is_empty() {
        return Tail::Wait(format!("{}: waiting for them", waits.join("; ")));
    }
    if rollbacks.is_empty() {
        Tail::Decodable
    } else {
        Tail::RollBack(rollbacks)
    }
}

/// A peering in progress.
#[derive(Debug)]
pub(super) struct Peering {
    claim: Claim,
    /// Members asked that have not answered.
    waiting: BTreeSet<OsdId>,
    /// Members that answered, in the order they did.
    answers: Vec<(OsdId, Answer)>,
    /// The member caught up from, and the last version of its log.
    source: Option<(OsdId, Version)>,
}

impl Core {
    /// Takes one event of a peering (or the one that starts it); returns what the shell
    /// does next.
    pub fn on_peering(&mut self, event: Event) -> Vec<Action> {
        match event {
            Event::Start(placement) => self.start_peering(placement),
            Event::Loaded(Err(why)) => self.stop_peering(format!("reading its log: {why}"), false),
            Event::Loaded(Ok(())) => {
                assert!(self.loaded, "a PG's log is in memory once loaded");
                if self.interval.acting.len() < self.fewest_to_peer() {
                    self.peering = None;
                    return vec![self.publish()];
                }
                let members: Vec<OsdId> = self.interval.acting[1..].to_vec();
                let peering = self.peering();
                peering.waiting = members.iter().copied().collect();
                if members.is_empty() {
                    return self.all_answered();
                }
                let claim = peering.claim;
                members
                    .into_iter()
                    .map(|to| Action::Query { to, claim })
                    .collect()
            }
            Event::Answered { osd, answer } => match answer {
                Err(why) => {
                    self.stop_peering(format!("waiting for osd.{} to answer: {why}", osd.0), true)
                }
                Ok(answer) => {
                    // A write min_size holders applied stays in every later history.
                    self.known_complete = self.known_complete.max(answer.complete);
                    let peering = self.peering();
                    assert!(peering.waiting.remove(&osd), "osd.{} answers once", osd.0);
                    peering.answers.push((osd, answer));
                    if !peering.waiting.is_empty() {
                        return Vec::new();
                    }
                    self.all_answered()
                }
            },
            Event::RolledBack(result) => {
                // The next peering finds every log at or below what k holders applied.
                let why = match result {
                    Ok(()) => "writes fewer than k shard holders applied were rolled back; \
                               peering again"
                        .to_string(),
                    Err(why) => {
                        format!("rolling back writes fewer than k shard holders applied: {why}")
                    }
                };
                self.stop_peering(why, true)
            }
            Event::CaughtUp(Err(why)) => {
                let (from, _) = self.peering().source.expect("caught up from a source");
                self.stop_peering(format!("copying from osd.{}: {why}", from.0), true)
            }
            Event::CaughtUp(Ok(())) => {
                let (from, last) = self.peering().source.expect("caught up from a source");
                assert!(
                    self.info.last == last && !self.unsettled,
                    "a caught-up primary holds the log of osd.{}, settled",
                    from.0
                );
                self.finish_peering()
            }
        }
    }

    fn start_peering(&mut self, placement: Option<Placement>) -> Vec<Action> {
        assert!(
            self.write.is_none(),
            "peering holds the PG's lock: no write is in flight"
        );
        let Some(placement) = placement else {
            self.interval = Interval::default();
            self.peering = None;
            return vec![Action::NotPrimary];
        };
        self.interval = Interval {
            epoch: placement.epoch,
            acting: placement.acting,
            size: placement.size,
            min_size: placement.min_size,
            clean: Vec::new(),
            recovering: BTreeMap::new(),
            erasure: placement.erasure,
            positions: placement.positions,
        };
        // The queries carry a claim newer than every recovery this OSD ran before: once a
        // member answered, no slow piece of those lands on it.
        let claim = Claim {
            interval: placement.epoch,
            token: self.draw_token(),
        };
        self.peering = Some(Peering {
            claim,
            waiting: BTreeSet::new(),
            answers: Vec::new(),
            source: None,
        });
        vec![
            Action::Publish {
                interval: placement.epoch,
                state: PgState::Peering,
            },
            Action::Load,
        ]
    }

    fn peering(&mut self) -> &mut Peering {
        self.peering
            .as_mut()
            .expect("an event of a peering comes while it is in progress")
    }

    /// Whether a peering is in progress: its shell waits for answers only then.
    pub fn is_peering(&self) -> bool {
        self.peering.is_some()
    }

    /// Every member answered: the catch-up, or the outcome. Answers are taken in acting
    /// order, whatever the order they came in, so the same answers pick the same source.
    fn all_answered(&mut self) -> Vec<Action> {
        let acting = self.interval.acting.clone();
        let peering = self.peering();
        peering
            .answers
            .sort_by_key(|(osd, _)| acting.iter().position(|a| a == osd));
        let heard: Vec<(Version, bool)> = peering
            .answers
            .iter()
            .map(|(_, answer)| (answer.info.last, answer.unsettled))
            .collect();
        if let Some(profile) = self.interval.erasure {
            let peering = self.peering.as_ref().expect("a peering in progress");
            let logs: Vec<VecDeque<LogEntry>> = peering
                .answers
                .iter()
                .map(|(_, a)| a.log.iter().cloned().collect())
                .collect();
            let mut holders = vec![TailHolder {
                osd: self.interval.acting[0],
                position: self.position,
                log: &self.log,
                held: &[],
                writers: &self.writers,
            }];
            holders.extend(
                peering
                    .answers
                    .iter()
                    .zip(&logs)
                    .map(|((osd, a), log)| TailHolder {
                        osd: *osd,
                        position: a.position,
                        log,
                        held: &a.held,
                        writers: &a.writers,
                    }),
            );
            match erasure_tail(profile, self.interval.min_size, &holders) {
                Tail::Decodable => {}
                Tail::RollBack(holders) => {
                    let claim = peering.claim;
                    return vec![Action::RollBack { holders, claim }];
                }
                Tail::Wait(why) => return self.stop_peering(why, true),
            }
            // What the members know of the writers goes on with this primary's log (kept
            // with it when it catches up, and passed on with each activation).
            let known: Vec<(Epoch, Vec<Option<OsdId>>)> = peering
                .answers
                .iter()
                .flat_map(|(_, a)| a.writers.iter().map(|(e, h)| (*e, h.clone())))
                .collect();
            for (epoch, sent) in known {
                self.writers.entry(epoch).or_insert(sent);
            }
        }
        // A primary that moved holds another position's shards: its own are rebuilt as a
        // cut-short catch-up's are, from a member as new as itself.
        let me = self.interval.acting[0];
        let moved = !self.holds_position(me, self.position, self.info.last);
        let Some(best) = catch_up_source(self.info.last, self.unsettled || moved, &heard) else {
            if moved {
                return self.stop_peering(
                    format!(
                        "this primary holds the shards of position {:?}, not its own, and no \
                         other holder is as new to rebuild them from",
                        self.position
                    ),
                    true,
                );
            }
            return self.finish_peering();
        };
        let peering = self.peering();
        let (from, answer) = &peering.answers[best];
        let (from, info, log) = (*from, answer.info, answer.log.iter().cloned().collect());
        peering.source = Some((from, info.last));
        vec![Action::CatchUp { from, info, log }]
    }

    /// Ends a peering that could not finish: the PG is inactive for `why`, and peers again
    /// later when `retry`.
    fn stop_peering(&mut self, why: String, retry: bool) -> Vec<Action> {
        self.peering = None;
        let mut actions = vec![Action::Publish {
            interval: self.interval.epoch,
            state: PgState::Inactive(why),
        }];
        if retry {
            actions.push(Action::RetryLater);
        }
        actions
    }

    /// Every member answered and this OSD holds the newest log: the members with the same
    /// log, settled, are clean; the others are recovered.
    fn finish_peering(&mut self) -> Vec<Action> {
        let peering = self.peering.take().expect("a peering in progress");
        let newest = peering.answers.iter().map(|(_, a)| a.info.last).max();
        assert!(
            newest.is_none_or(|newest| newest <= self.info.last),
            "peering leaves the primary with the newest log"
        );
        let mut actions = Vec::new();
        for (osd, answer) in peering.answers {
            if is_clean(self.info.last, answer.info.last, answer.unsettled)
                && self.holds_position(osd, answer.position, answer.info.last)
            {
                self.interval.clean.push(osd);
            } else {
                let token = self.begin_recovery(osd);
                actions.push(Action::Recover { target: osd, token });
            }
        }
        actions.push(self.publish());
        actions
    }

    fn publish(&self) -> Action {
        Action::Publish {
            interval: self.interval.epoch,
            state: self.state(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::core::tests::{name, reqid, version, PG};
    use super::*;

    fn placement(acting: &[u32], min_size: usize) -> Placement {
        Placement {
            epoch: 7,
            acting: acting.iter().copied().map(OsdId).collect(),
            size: 3,
            min_size,
            erasure: None,
            positions: Vec::new(),
        }
    }

    fn answer(last: Version, unsettled: bool) -> Answer {
        Answer {
            info: PgInfo { last },
            log: Vec::new(),
            unsettled,
            position: None,
            held: Vec::new(),
            writers: Writers::new(),
            complete: Version::default(),
        }
    }

    /// A primary whose log ends at `last`, loaded.
    fn loaded(last: Version) -> Core {
        let mut core = Core::new(PG, 50);
        core.set_log(PgInfo { last }, VecDeque::new());
        core.loaded = true;
        core
    }

    fn shapes(actions: &[Action]) -> String {
        format!("{actions:?}")
    }

    #[test]
    fn a_primary_asks_every_member_at_once_and_recovers_those_behind() {
        let mut core = loaded(version(6, 4));
        let actions = core.on_peering(Event::Start(Some(placement(&[0, 1, 2], 2))));
        assert!(shapes(&actions).contains("Peering") && matches!(actions[1], Action::Load));
        let actions = core.on_peering(Event::Loaded(Ok(())));
        let [Action::Query {
            to: OsdId(1),
            claim,
        }, Action::Query {
            to: OsdId(2),
            claim: same,
        }] = actions[..]
        else {
            panic!("every member is asked: {actions:?}");
        };
        assert_eq!((claim.interval, claim), (7, same));
        assert!(core.is_peering());
        let answered = |osd, last| Event::Answered {
            osd: OsdId(osd),
            answer: Ok(answer(last, false)),
        };
        assert!(core.on_peering(answered(1, version(6, 4))).is_empty());
        let actions = core.on_peering(answered(2, version(6, 2)));
        let [Action::Recover { target, token }, Action::Publish {
            interval: 7,
            ref state,
        }] = actions[..]
        else {
            panic!("the member behind is recovered: {actions:?}");
        };
        assert_eq!((target, state), (OsdId(2), &PgState::Recovering));
        assert!(
            token > claim.token,
            "a recovery's claim is newer than the queries'"
        );
        assert_eq!(core.interval.clean, [OsdId(1)]);
        assert!(!core.is_peering());
    }

    /// An erasure-coded PG peers as a replicated one does (its shell copies by rebuilding
    /// shards), keeps its positions, and counts clean only a holder of its own position's
    /// shards: its reads and writes use those alone.
    #[test]
    fn an_erasure_coded_pg_counts_clean_only_holders_of_their_own_positions_shards() {
        let coded = || Placement {
            erasure: Some(ec::Profile::new(2, 1, 4096).expect("2+1")),
            positions: vec![Some(OsdId(0)), None, Some(OsdId(2)), Some(OsdId(3))],
            ..placement(&[0, 2, 3], 2)
        };
        let answered = |osd, last, position| Event::Answered {
            osd: OsdId(osd),
            answer: Ok(Answer {
                position,
                ..answer(last, false)
            }),
        };
        let mut core = loaded(version(6, 4));
        core.position = Some(0);
        core.on_peering(Event::Start(Some(coded())));
        core.on_peering(Event::Loaded(Ok(())));
        // osd.2 holds position 2's shards; osd.3 is behind; both are as they should be
        // but for osd.3's log.
        core.on_peering(answered(2, version(6, 4), Some(2)));
        let actions = core.on_peering(answered(3, version(6, 3), Some(3)));
        assert!(
            matches!(
                actions[0],
                Action::Recover {
                    target: OsdId(3),
                    ..
                }
            ),
            "{actions:?}"
        );
        assert_eq!(
            core.interval.shard_holders(OsdId(0)),
            [Some(OsdId(0)), None, Some(OsdId(2)), None]
        );
        // osd.2 moved from position 1: its shards are rebuilt, though its log is whole.
        let mut core = loaded(version(6, 4));
        core.position = Some(0);
        core.on_peering(Event::Start(Some(coded())));
        core.on_peering(Event::Loaded(Ok(())));
        core.on_peering(answered(2, version(6, 4), Some(1)));
        let actions = core.on_peering(answered(3, version(6, 4), Some(3)));
        assert!(
            matches!(
                actions[0],
                Action::Recover {
                    target: OsdId(2),
                    ..
                }
            ),
            "{actions:?}"
        );
        // This primary moved: it rebuilds its own shards from a member as new as itself.
        let mut core = loaded(version(6, 4));
        core.position = Some(2);
        core.on_peering(Event::Start(Some(coded())));
        core.on_peering(Event::Loaded(Ok(())));
        core.on_peering(answered(2, version(6, 4), Some(2)));
        let actions = core.on_peering(answered(3, version(6, 4), Some(3)));
        assert!(
            matches!(actions[..], [Action::CatchUp { .. }]),
            "{actions:?}"
        );
    }

    #[test]
    fn an_erasure_coded_pg_with_k_shards_but_not_min_size_serves_reads_only() {
        let coded = |acting: &[u32], positions| Placement {
            erasure: Some(ec::Profile::new(2, 1, 4096).expect("2+1")),
            positions,
            ..placement(acting, 3)
        };
        let log = vec![
            LogEntry {
                version: version(6, 2),
                object: name("a"),
                reqid: reqid(2),
            },
            LogEntry {
                version: version(6, 4),
                object: name("b"),
                reqid: reqid(4),
            },
        ];
        let mut core = loaded(version(6, 4));
        core.set_log(
            PgInfo {
                last: version(6, 4),
            },
            log.clone().into(),
        );
        core.position = Some(0);
        let positions = vec![Some(OsdId(0)), Some(OsdId(1)), None];
        core.on_peering(Event::Start(Some(coded(&[0, 1], positions))));
        let actions = core.on_peering(Event::Loaded(Ok(())));
        assert!(
            matches!(actions[..], [Action::Query { to: OsdId(1), .. }]),
            "k members are peered, though fewer than min_size: {actions:?}"
        );
        let actions = core.on_peering(Event::Answered {
            osd: OsdId(1),
            answer: Ok(Answer {
                position: Some(1),
                complete: version(6, 3),
                log,
                ..answer(version(6, 4), false)
            }),
        });
        let [Action::Publish { ref state, .. }] = actions[..] else {
            panic!("{actions:?}");
        };
        assert_eq!(
            *state,
            PgState::ReadOnly("2 of its OSDs up, min_size 3; reads are served, writes wait".into())
        );
        assert!(state.serves_reads() && !state.is_active());
        assert!(!core.ack_ok(), "no write is acknowledged below min_size");
        // The member knew writes up to 6.3 complete: their objects are read, not one
        // written last at 6.4, which a later peering with other holders may roll back.
        assert_eq!(core.readable_to(), version(6, 3));
        assert_eq!(core.not_known_complete(&name("a")), None);
        assert_eq!(core.not_known_complete(&name("b")), Some(version(6, 4)));
        assert_eq!(
            core.unknown_complete_tail(),
            Some(version(6, 4)),
            "nothing is listed while a write may be rolled back"
        );

        // Fewer than k: nothing to decode from, so not even peered.
        let mut core = loaded(version(6, 4));
        core.position = Some(0);
        core.on_peering(Event::Start(Some(coded(
            &[0],
            vec![Some(OsdId(0)), None, None],
        ))));
        let actions = core.on_peering(Event::Loaded(Ok(())));
        let [Action::Publish { ref state, .. }] = actions[..] else {
            panic!("{actions:?}");
        };
        assert_eq!(
            *state,
            PgState::Inactive("1 of its OSDs up, min_size 3".into())
        );
        assert!(!core.is_peering());

        // 2+3 with min_size 3: two members are k, but the three that acknowledged the last
        // write may be the others; three share at least one with them.
        let wide = |acting: &[u32]| Placement {
            erasure: Some(ec::Profile::new(2, 3, 4096).expect("2+3")),
            positions: (0..5)
                .map(|p| acting.contains(&p).then_some(OsdId(p)))
                .collect(),
            ..placement(acting, 3)
        };
        let mut core = loaded(version(6, 4));
        core.position = Some(3);
        core.on_peering(Event::Start(Some(wide(&[3, 4]))));
        let actions = core.on_peering(Event::Loaded(Ok(())));
        assert!(publishes_inactive(&actions), "{actions:?}");
        // 1+2 with min_size 2: a lone primary is k, but may be a holder that missed every
        // write the two others acknowledged; it asks no one, so it serves nothing.
        let mut core = loaded(version(6, 4));
        core.position = Some(0);
        core.on_peering(Event::Start(Some(Placement {
            erasure: Some(ec::Profile::new(1, 2, 4096).expect("1+2")),
            positions: vec![Some(OsdId(0)), None, None],
            ..placement(&[0], 2)
        })));
        let actions = core.on_peering(Event::Loaded(Ok(())));
        assert!(publishes_inactive(&actions), "{actions:?}");
        let mut core = loaded(version(6, 4));
        core.position = Some(2);
        core.on_peering(Event::Start(Some(wide(&[2, 3, 4]))));
        let actions = core.on_peering(Event::Loaded(Ok(())));
        assert!(
            matches!(actions[..], [Action::Query { .. }, Action::Query { .. }]),
            "{actions:?}"
        );
    }

    static NO_WRITERS: Writers = Writers::new();

    /// Holder i of `logs` notes `positions[i]` and holds nothing else.
    fn holders<'a>(
        logs: &'a [VecDeque<LogEntry>],
        positions: &[Option<u8>],
    ) -> Vec<TailHolder<'a>> {
        logs.iter()
            .zip(positions)
            .enumerate()
            .map(|(i, (log, position))| TailHolder {
                osd: OsdId(i as u32),
                position: *position,
                log,
                held: &[],
                writers: &NO_WRITERS,
            })
            .collect()
    }

    #[test]
    fn the_tail_of_an_erasure_coded_pg_decodes_rolls_back_or_waits() {
        let entry = |epoch, seq| LogEntry {
            version: version(epoch, seq),
            object: name("x"),
            reqid: ReqId { client: epoch, seq },
        };
        // Each holder's log: a history of (epoch, seq) from 1.
        let logs = |histories: &[&[(u64, u64)]]| -> Vec<VecDeque<LogEntry>> {
            histories
                .iter()
                .map(|h| h.iter().map(|(e, s)| entry(*e, *s)).collect())
                .collect()
        };
        // Holder i holds position i's shards.
        let tail = |profile, min_size, logs: &[VecDeque<LogEntry>]| {
            let positions: Vec<Option<u8>> = (0..logs.len()).map(|i| Some(i as u8)).collect();
            erasure_tail(profile, min_size, &holders(logs, &positions))
        };
        let p42 = ec::Profile::new(4, 2, 4096).expect("4+2");
        let a: &[(u64, u64)] = &[(3, 1), (3, 2)];
        let b: &[(u64, u64)] = &[(3, 1), (3, 2), (3, 3)];
        assert_eq!(tail(p42, 5, &logs(&[a, a, a, a, a, a])), Tail::Decodable);
        // One holder of 3.3: rolled back to 3.2.
        assert_eq!(
            tail(p42, 5, &logs(&[b, a, a, a, a, a])),
            Tail::RollBack(vec![(OsdId(0), version(3, 2))])
        );
        // Three holders of 3.3, three of 3.2: neither decodes alone; every position
        // answered, so 3.3 never had min_size holders.
        assert_eq!(
            tail(p42, 5, &logs(&[b, b, b, a, a, a])),
            Tail::RollBack(vec![
                (OsdId(0), version(3, 2)),
                (OsdId(1), version(3, 2)),
                (OsdId(2), version(3, 2))
            ])
        );
        // Three of 3.3 and one silent position: four at most, below min_size.
        assert!(matches!(
            tail(p42, 5, &logs(&[b, b, b, a, a])),
            Tail::RollBack(_)
        ));
        // Another history: osd.0 holds 4.3 where the others went on to 5.3 (decodable).
        let c: &[(u64, u64)] = &[(3, 1), (3, 2), (5, 3)];
        let d: &[(u64, u64)] = &[(3, 1), (3, 2), (4, 3)];
        assert_eq!(
            tail(p42, 5, &logs(&[d, c, c, c, c, c])),
            Tail::RollBack(vec![(OsdId(0), version(3, 2))])
        );
        // Two holders of one position's shards count once: osd.4 moved from position 3.
        let moved = logs(&[b, b, b, b, a, a]);
        let positions = [0, 1, 2, 2, 4, 5];
        let positions = positions.map(Some);
        assert_eq!(
            erasure_tail(p42, 5, &holders(&moved, &positions)),
            Tail::RollBack(vec![
                (OsdId(0), version(3, 2)),
                (OsdId(1), version(3, 2)),
                (OsdId(2), version(3, 2)),
                (OsdId(3), version(3, 2))
            ])
        );
        // Holders whose shards moved (mixed positions) count by the shards they say they
        // hold: without those, each write is on two positions; with them, 3.3 is on five.
        let mixed = logs(&[b, b, b, b, b, b]);
        let positions = [Some(0), None, None, None, None, Some(5)];
        let mut named = holders(&mixed, &positions);
        assert!(matches!(erasure_tail(p42, 5, &named), Tail::RollBack(_)));
        let x = name("x");
        let held: Vec<Vec<(ObjectName, Version, u8)>> = (1..4)
            .map(|shard| vec![(x.clone(), version(3, 3), shard)])
            .collect();
        for (holder, held) in named[1..4].iter_mut().zip(&held) {
            holder.held = held;
        }
        assert_eq!(erasure_tail(p42, 5, &named), Tail::Decodable);
        // A holder whose log was trimmed past 3.1 counts as holding it.
        let trimmed: &[(u64, u64)] = &[(3, 2)];
        assert_eq!(
            tail(p42, 5, &logs(&[a, a, a, trimmed, trimmed, trimmed])),
            Tail::Decodable
        );
        // 8+3, min_size 9: seven holders of 3.3 and two silent positions could make nine.
        let p83 = ec::Profile::new(8, 3, 4096).expect("8+3");
        let wait = tail(p83, 9, &logs(&[b, b, b, b, b, b, b, a, a]));
        assert!(
            matches!(&wait, Tail::Wait(why) if why.contains("osd.6 holds writes above 3.2 whose shards 7 positions hold") && why.contains("2 shard positions are down")),
            "{wait:?}"
        );
    }

    /// A write acknowledged by the OSDs of its epoch, two of which then left the acting
    /// set: their positions' new holders answer without it, yet it is waited for, not rolled
    /// back, since the writers that did not answer may hold it; once they answer without
    /// it, it is rolled back.
    #[test]
    fn the_tail_counts_the_osds_a_write_was_sent_to_not_the_positions_now() {
        let entry = |seq| LogEntry {
            version: version(3, seq),
            object: name("x"),
            reqid: ReqId { client: 3, seq },
        };
        let a: VecDeque<LogEntry> = [entry(1), entry(2)].into();
        let b: VecDeque<LogEntry> = [entry(1), entry(2), entry(3)].into();
        let p42 = ec::Profile::new(4, 2, 4096).expect("4+2");
        let sent: Writers = [(3, (0..6).map(|i| Some(OsdId(i))).collect())].into();
        let holder = |osd, position, log| TailHolder {
            osd: OsdId(osd),
            position: Some(position),
            log,
            held: &[],
            writers: &sent,
        };
        // osd.3 and osd.4 applied 3.3 and are gone; osd.6 and osd.7 hold their positions.
        let mut holders = vec![
            holder(0, 0, &b),
            holder(1, 1, &b),
            holder(2, 2, &b),
            holder(6, 3, &a),
            holder(7, 4, &a),
            holder(5, 5, &a),
        ];
        let wait = erasure_tail(p42, 5, &holders);
        assert!(
            matches!(&wait, Tail::Wait(why) if why.contains("it was sent to osd.3, osd.4, which did not answer")),
            "{wait:?}"
        );
        holders[3] = holder(3, 3, &a);
        holders[4] = holder(4, 4, &a);
        assert_eq!(
            erasure_tail(p42, 5, &holders),
            Tail::RollBack(vec![
                (OsdId(0), version(3, 2)),
                (OsdId(1), version(3, 2)),
                (OsdId(2), version(3, 2))
            ])
        );
        // Had they answered with it, from positions they no longer note, min_size of its
        // writers hold it: it is kept.
        holders[3] = TailHolder {
            position: None,
            ..holder(3, 3, &b)
        };
        holders[4] = TailHolder {
            position: None,
            ..holder(4, 4, &b)
        };
        assert_eq!(erasure_tail(p42, 5, &holders), Tail::Decodable);
    }

    #[test]
    fn the_source_of_a_catch_up_does_not_depend_on_the_order_of_answers() {
        for first in [1, 2] {
            let mut core = loaded(version(6, 2));
            core.on_peering(Event::Start(Some(placement(&[0, 1, 2], 2))));
            core.on_peering(Event::Loaded(Ok(())));
            core.on_peering(Event::Answered {
                osd: OsdId(first),
                answer: Ok(answer(version(6, 5), false)),
            });
            let actions = core.on_peering(Event::Answered {
                osd: OsdId(3 - first),
                answer: Ok(answer(version(6, 5), false)),
            });
            assert!(
                matches!(actions[..], [Action::CatchUp { from: OsdId(2), .. }]),
                "among equals, the last in acting order: {actions:?}"
            );
        }
    }

    #[test]
    fn a_primary_behind_a_member_catches_up_from_it_first() {
        let mut core = loaded(version(6, 2));
        core.on_peering(Event::Start(Some(placement(&[0, 1, 2], 2))));
        core.on_peering(Event::Loaded(Ok(())));
        core.on_peering(Event::Answered {
            osd: OsdId(1),
            answer: Ok(answer(version(6, 5), false)),
        });
        let actions = core.on_peering(Event::Answered {
            osd: OsdId(2),
            answer: Ok(answer(version(6, 5), true)),
        });
        let [Action::CatchUp { from, info, .. }] = &actions[..] else {
            panic!("a catch-up from the settled newest member: {actions:?}");
        };
        assert_eq!((*from, info.last), (OsdId(1), version(6, 5)));
        // The shell copied the objects and took the log.
        core.set_log(*info, VecDeque::new());
        let actions = core.on_peering(Event::CaughtUp(Ok(())));
        // osd.2 has the same log but its own catch-up was cut short: recovered, not clean.
        assert!(matches!(
            actions[..],
            [
                Action::Recover {
                    target: OsdId(2),
                    ..
                },
                Action::Publish { .. }
            ]
        ));
        assert_eq!(core.interval.clean, [OsdId(1)]);
    }

    #[test]
    fn a_silent_member_or_a_failed_catch_up_leaves_the_pg_inactive_and_retrying() {
        let mut core = loaded(version(6, 2));
        core.on_peering(Event::Start(Some(placement(&[0, 1, 2], 2))));
        core.on_peering(Event::Loaded(Ok(())));
        let actions = core.on_peering(Event::Answered {
            osd: OsdId(1),
            answer: Err("timed out".into()),
        });
        assert!(shapes(&actions).contains("waiting for osd.1 to answer: timed out"));
        assert!(matches!(
            actions[..],
            [Action::Publish { .. }, Action::RetryLater]
        ));
        assert!(!core.is_peering());

        core.on_peering(Event::Start(Some(placement(&[0, 1], 2))));
        core.on_peering(Event::Loaded(Ok(())));
        core.on_peering(Event::Answered {
            osd: OsdId(1),
            answer: Ok(answer(version(6, 5), false)),
        });
        let actions = core.on_peering(Event::CaughtUp(Err("osd.1 went away".into())));
        assert!(shapes(&actions).contains("copying from osd.1: osd.1 went away"));
        assert!(matches!(
            actions[..],
            [Action::Publish { .. }, Action::RetryLater]
        ));
    }

    /// Whether `actions` publish the PG inactive and do nothing else.
    fn publishes_inactive(actions: &[Action]) -> bool {
        matches!(
            actions,
            [Action::Publish {
                state: PgState::Inactive(_),
                ..
            }]
        )
    }

    #[test]
    fn too_few_osds_or_an_unreadable_log_leave_the_pg_inactive_without_queries() {
        let mut core = loaded(version(6, 2));
        core.on_peering(Event::Start(Some(placement(&[0], 2))));
        let actions = core.on_peering(Event::Loaded(Ok(())));
        assert!(publishes_inactive(&actions), "{actions:?}");
        let mut core = Core::new(PG, 50);
        core.on_peering(Event::Start(Some(placement(&[0, 1], 1))));
        let actions = core.on_peering(Event::Loaded(Err("a bad page".into())));
        assert!(shapes(&actions).contains("reading its log: a bad page"));
        assert_eq!(actions.len(), 1, "the next map change peers again");
    }

    #[test]
    fn an_osd_that_does_not_lead_forgets_its_interval() {
        let mut core = loaded(version(6, 2));
        core.on_peering(Event::Start(Some(placement(&[0, 1], 1))));
        core.on_peering(Event::Loaded(Ok(())));
        core.on_peering(Event::Answered {
            osd: OsdId(1),
            answer: Ok(answer(version(6, 2), false)),
        });
        assert_eq!(core.interval.clean, [OsdId(1)]);
        let actions = core.on_peering(Event::Start(None));
        assert!(matches!(actions[..], [Action::NotPrimary]));
        assert!(core.interval.acting.is_empty() && core.interval.clean.is_empty());
    }
}
