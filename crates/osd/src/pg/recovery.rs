//! Recovering one replica, as events in and actions out. The shell (`recovery::recover`,
//! one task per target) feeds each [`Event`] to [`Core::on_recovery`] under the PG's lock
//! and carries out the [`Action`]s it returns: most without the lock, so writes go on
//! while objects are copied; the last copies and the join under it. Every action the core
//! waits on (Query, Sync, Copy, Join) is answered by exactly one event.
//!
//! ```text
//! Begin a pass: a new token ────────────────────────────► Query the target under its claim
//!   ▼ TargetAnswered ── the target is newer ───────────► Repeer (peering takes its writes)
//!   ▼ its log is not newer: forget what was dirty
//! Sync (every object of this OSD onto the target, and no other)
//!   ▼ Synced
//! objects written meanwhile: more than JOIN_DIRTY_MAX ──► Copy them, lock released; Copied
//!   ▼ at most JOIN_DIRTY_MAX                                 ▲ and look again ──┘
//! Join: copy them and activate the target with this log, writes waiting
//!   ▼ Joined: the target is clean; Publish
//! ```
//!
//! A pass that fails (the target silent, a copy refused) ends in `RetryLater`: after a
//! pause the task begins a new pass, under a new token. An event for a token that is no
//! longer the target's (a new interval, or another task took over) is answered `Stop`.
//! Each pass's claim is newer than the last: the target refuses a slow piece of an earlier
//! pass that arrives after this one copied the object again.

use map::cluster::Epoch;
use map::placement::OsdId;
use map::ObjectName;
use messenger::message::{Claim, LogEntry, PgInfo, PgState};

use super::core::Core;

/// A recovering replica joins once at most this many objects written during its recovery
/// remain; they are copied while writes to the PG wait.
pub const JOIN_DIRTY_MAX: usize = 64;

/// What happened, as a recovery task tells the core.
#[derive(Debug)]
pub enum Event {
    /// A pass begins: the task's first, or the next after a failed one's pause.
    Begin,
    /// The target answered the pass's query with what it holds, or did not.
    TargetAnswered(Result<PgInfo, String>),
    /// Every object of this OSD's copy is now the target's, or copying failed.
    Synced(Result<(), String>),
    /// The objects written meanwhile were copied, or not.
    Copied(Result<(), String>),
    /// The last objects were copied and the target took this OSD's log, or not.
    Joined(Result<(), String>),
}

/// What the core asks of the recovery task, in order.
#[derive(Debug)]
pub enum Action {
    /// Ask the target what it holds, under this claim; answer `TargetAnswered`.
    Query { claim: Claim },
    /// Make the target's objects this OSD's, checking the claim before each; answer
    /// `Synced`.
    Sync { claim: Claim },
    /// Copy these objects to the target without the PG's lock, checking the claim before
    /// each; answer `Copied`.
    Copy {
        claim: Claim,
        names: Vec<ObjectName>,
    },
    /// Under the PG's lock: copy these objects, then activate the target with this log;
    /// answer `Joined`.
    Join {
        claim: Claim,
        names: Vec<ObjectName>,
        info: PgInfo,
        log: Vec<LogEntry>,
    },
    /// Publish this state for the interval that began at `interval`.
    Publish { interval: Epoch, state: PgState },
    /// The target is clean: the task ends.
    Done,
    /// This pass failed for `why`: pause, then `Begin` again.
    RetryLater { why: String },
    /// The target holds writes this primary lacks: peer again; the task ends.
    Repeer,
    /// The task's claim is superseded: it ends.
    Stop,
}

impl Core {
    /// Whether the recovery task holding `token` still recovers `target`.
    pub fn recovers(&self, target: OsdId, token: u64) -> bool {
        self.interval
            .recovering
            .get(&target)
            .is_some_and(|r| r.token == token)
    }

    /// Takes one event of the recovery of `target` by the task holding `token`; returns
    /// what the task does next (on `Begin`, a `Query` whose claim carries the task's new
    /// token).
    pub fn on_recovery(&mut self, target: OsdId, token: u64, event: Event) -> Vec<Action> {
        if !self.recovers(target, token) {
            return vec![Action::Stop];
        }
        let claim = Claim {
            interval: self.interval.epoch,
            token,
        };
        match event {
            Event::Begin => {
                let token = self.draw_token();
                self.recovery(target).token = token;
                vec![Action::Query {
                    claim: Claim { token, ..claim },
                }]
            }
            Event::TargetAnswered(Ok(info)) if info.last > self.info.last => {
                self.interval.recovering.remove(&target);
                vec![Action::Repeer]
            }
            Event::TargetAnswered(Ok(_)) => {
                // The sync copies every object as it is now: what was dirty before is in it.
                self.recovery(target).dirty.clear();
                vec![Action::Sync { claim }]
            }
            Event::Synced(Ok(())) | Event::Copied(Ok(())) => {
                let names: Vec<ObjectName> = std::mem::take(&mut self.recovery(target).dirty)
                    .into_iter()
                    .collect();
                if names.len() > JOIN_DIRTY_MAX {
                    return vec![Action::Copy { claim, names }];
                }
                vec![Action::Join {
                    claim,
                    names,
                    info: self.info,
                    log: self.log.iter().cloned().collect(),
                }]
            }
            Event::Joined(Ok(())) => {
                assert!(
                    self.recovery(target).dirty.is_empty(),
                    "no write lands between the last copies and the join: the lock is held"
                );
                self.interval.recovering.remove(&target);
                assert!(
                    !self.interval.clean.contains(&target),
                    "a replica joins the clean set once"
                );
                self.interval.clean.push(target);
                vec![
                    Action::Publish {
                        interval: self.interval.epoch,
                        state: self.state(),
                    },
                    Action::Done,
                ]
            }
            Event::TargetAnswered(Err(why))
            | Event::Synced(Err(why))
            | Event::Copied(Err(why))
            | Event::Joined(Err(why)) => vec![Action::RetryLater { why }],
        }
    }

    fn recovery(&mut self, target: OsdId) -> &mut super::core::Recovery {
        self.interval
            .recovering
            .get_mut(&target)
            .expect("the target is recovering")
    }
}

#[cfg(test)]
mod tests {
    use super::super::core::tests::{name, primary, version};
    use super::*;

    /// A primary of epoch 5 recovering osd.2 (osd.1 clean), and the recovery's token.
    fn recovering() -> (Core, u64) {
        let mut core = primary(5, version(5, 9), 2);
        let token = core.begin_recovery(OsdId(2));
        (core, token)
    }

    /// Begins a pass; returns its claim.
    fn begin(core: &mut Core, token: u64) -> Claim {
        match &core.on_recovery(OsdId(2), token, Event::Begin)[..] {
            [Action::Query { claim }] => *claim,
            other => panic!("a pass begins with a query: {other:?}"),
        }
    }

    #[test]
    fn a_replica_is_synced_then_joins_with_the_objects_written_meanwhile() {
        let (mut core, first) = recovering();
        let claim = begin(&mut core, first);
        assert!(claim.token > first && claim.interval == 5);
        assert!(
            !core.recovers(OsdId(2), first),
            "each pass has a token of its own"
        );
        let token = claim.token;
        core.recovery(OsdId(2)).dirty.insert(name("before"));
        let actions = core.on_recovery(
            OsdId(2),
            token,
            Event::TargetAnswered(Ok(PgInfo::default())),
        );
        assert!(matches!(actions[..], [Action::Sync { claim: c }] if c == claim));
        core.recovery(OsdId(2)).dirty.insert(name("during"));
        let actions = core.on_recovery(OsdId(2), token, Event::Synced(Ok(())));
        let [Action::Join { names, info, .. }] = &actions[..] else {
            panic!("few objects written meanwhile: the target joins: {actions:?}");
        };
        assert_eq!(
            (names.clone(), info.last),
            (vec![name("during")], version(5, 9))
        );
        let actions = core.on_recovery(OsdId(2), token, Event::Joined(Ok(())));
        assert!(matches!(
            actions[..],
            [
                Action::Publish {
                    state: PgState::Clean,
                    ..
                },
                Action::Done
            ]
        ));
        assert_eq!(core.interval.clean, [OsdId(1), OsdId(2)]);
        assert!(core.interval.recovering.is_empty());
    }

    #[test]
    fn many_objects_written_meanwhile_are_copied_without_the_lock_first() {
        let (mut core, token) = recovering();
        let token = begin(&mut core, token).token;
        core.on_recovery(
            OsdId(2),
            token,
            Event::TargetAnswered(Ok(PgInfo::default())),
        );
        for i in 0..=JOIN_DIRTY_MAX {
            core.recovery(OsdId(2)).dirty.insert(name(&format!("o{i}")));
        }
        let actions = core.on_recovery(OsdId(2), token, Event::Synced(Ok(())));
        assert!(
            matches!(&actions[..], [Action::Copy { names, .. }] if names.len() == JOIN_DIRTY_MAX + 1)
        );
        let actions = core.on_recovery(OsdId(2), token, Event::Copied(Ok(())));
        assert!(matches!(&actions[..], [Action::Join { names, .. }] if names.is_empty()));
    }

    #[test]
    fn a_target_newer_than_the_primary_sends_the_pg_back_to_peering() {
        let (mut core, token) = recovering();
        let token = begin(&mut core, token).token;
        let newer = PgInfo {
            last: version(5, 10),
        };
        let actions = core.on_recovery(OsdId(2), token, Event::TargetAnswered(Ok(newer)));
        assert!(matches!(actions[..], [Action::Repeer]));
        assert!(!core.recovers(OsdId(2), token));
    }

    #[test]
    fn a_failed_pass_retries_and_a_superseded_task_stops() {
        let (mut core, token) = recovering();
        let token = begin(&mut core, token).token;
        let actions = core.on_recovery(OsdId(2), token, Event::Synced(Err("cut off".into())));
        assert!(matches!(&actions[..], [Action::RetryLater { why }] if why == "cut off"));
        assert!(
            core.recovers(OsdId(2), token),
            "a retry keeps the claim until it begins"
        );
        // Another task took the target over (a replica that missed a write is recovered anew).
        let newer = core.begin_recovery(OsdId(2));
        assert!(matches!(
            core.on_recovery(OsdId(2), token, Event::Begin)[..],
            [Action::Stop]
        ));
        assert!(matches!(begin(&mut core, newer), Claim { interval: 5, .. }));
    }
}
