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

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use map::cluster::Epoch;
use map::placement::OsdId;
use messenger::message::{Claim, LogEntry, PgInfo, PgState, Version};

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
    /// Publish this state for the interval that began at `interval`.
    Publish { interval: Epoch, state: PgState },
    /// Peer again after a pause.
    RetryLater,
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
                if self.interval.acting.len() < self.interval.min_size {
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
                    let peering = self.peering();
                    assert!(peering.waiting.remove(&osd), "osd.{} answers once", osd.0);
                    peering.answers.push((osd, answer));
                    if !peering.waiting.is_empty() {
                        return Vec::new();
                    }
                    self.all_answered()
                }
            },
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
        if self.interval.erasure.is_some() {
            if let Some(why) = self.shards_differ() {
                return self.stop_peering(why, true);
            }
        }
        let Some(best) = catch_up_source(self.info.last, self.unsettled, &heard) else {
            return self.finish_peering();
        };
        let peering = self.peering();
        let (from, answer) = &peering.answers[best];
        let (from, info, log) = (*from, answer.info, answer.log.iter().cloned().collect());
        peering.source = Some((from, info.last));
        vec![Action::CatchUp { from, info, log }]
    }

    /// Why an erasure-coded PG cannot serve yet: a member's log differs from this primary's
    /// (or a copy's catch-up was cut short). Its shards would be rebuilt from the others and
    /// the writes above what k holders applied rolled back (docs/design/erasure.md, §7 and
    /// §9), which comes with the rest of #33; until then the PG waits, serving nothing a
    /// stale shard could spoil.
    fn shards_differ(&mut self) -> Option<String> {
        let last = self.info.last;
        let own_unsettled = self.unsettled;
        let peering = self.peering();
        let differing: Vec<String> = peering
            .answers
            .iter()
            .filter(|(_, a)| !is_clean(last, a.info.last, a.unsettled))
            .map(|(osd, a)| {
                format!(
                    "osd.{} (log to {}.{})",
                    osd.0, a.info.last.epoch, a.info.last.seq
                )
            })
            .collect();
        if differing.is_empty() && !own_unsettled {
            return None;
        }
        let whose = if own_unsettled {
            "this primary's own catch-up was cut short".to_string()
        } else {
            format!(
                "{} differ from this primary's log to {}.{}",
                differing.join(", "),
                last.epoch,
                last.seq
            )
        };
        Some(format!(
            "erasure-coded shards disagree: {whose}; rebuilding shards is not built yet (#33)"
        ))
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
            if is_clean(self.info.last, answer.info.last, answer.unsettled) {
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
    use super::super::core::tests::{version, PG};
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

    #[test]
    fn an_erasure_coded_pg_serves_only_when_every_shard_holds_its_log() {
        let coded = |acting: &[u32]| Placement {
            size: 3,
            erasure: Some(ec::Profile::new(2, 1, 4096).expect("2+1")),
            positions: acting.iter().map(|a| Some(OsdId(*a))).collect(),
            ..placement(acting, 3)
        };
        let answered = |osd, last, unsettled| Event::Answered {
            osd: OsdId(osd),
            answer: Ok(answer(last, unsettled)),
        };
        // Alike: clean, with the positions kept for its reads and writes.
        let mut core = loaded(version(6, 4));
        core.on_peering(Event::Start(Some(coded(&[0, 1, 2]))));
        core.on_peering(Event::Loaded(Ok(())));
        core.on_peering(answered(1, version(6, 4), false));
        let actions = core.on_peering(answered(2, version(6, 4), false));
        assert_eq!(shapes(&actions), shapes(&[core.publish()]));
        assert_eq!(core.state(), PgState::Clean);
        assert_eq!(
            core.interval.shard_holders(OsdId(0)),
            [Some(OsdId(0)), Some(OsdId(1)), Some(OsdId(2))]
        );
        // A member behind, ahead, or cut short in a catch-up: no copy of the primary's
        // objects is made (they are shards), and the PG waits, saying why.
        for (last, unsettled) in [
            (version(6, 3), false),
            (version(6, 5), false),
            (version(6, 4), true),
        ] {
            let mut core = loaded(version(6, 4));
            core.on_peering(Event::Start(Some(coded(&[0, 1, 2]))));
            core.on_peering(Event::Loaded(Ok(())));
            core.on_peering(answered(1, version(6, 4), false));
            let actions = core.on_peering(answered(2, last, unsettled));
            let [Action::Publish {
                state: PgState::Inactive(ref why),
                ..
            }, Action::RetryLater] = actions[..]
            else {
                panic!("the PG waits: {actions:?}");
            };
            assert!(
                why.contains("erasure-coded shards disagree: osd.2") && why.contains("#33"),
                "{why}"
            );
            assert!(!core.is_peering() && core.interval.clean.is_empty());
        }
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

    #[test]
    fn too_few_osds_or_an_unreadable_log_leave_the_pg_inactive_without_queries() {
        let mut core = loaded(version(6, 2));
        core.on_peering(Event::Start(Some(placement(&[0], 2))));
        let actions = core.on_peering(Event::Loaded(Ok(())));
        assert!(
            matches!(
                &actions[..],
                [Action::Publish {
                    state: PgState::Inactive(_),
                    ..
                }]
            ),
            "{actions:?}"
        );
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
