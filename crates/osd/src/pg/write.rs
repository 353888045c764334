//! Client writes in their PG, from their order to their answer, as events in and actions
//! out. The shell (`OsdService::write` in service.rs) holds the PG's lock, feeds [`Event`]s
//! to [`Core::on_write`] and carries out the [`Action`]s it returns, in order; with no
//! action left, it joins the next write queued, closes the group, or waits for the next
//! replica's answer, until the core has no group in flight. Every action the core waits on
//! (Prepare, Replicate, Apply) is answered by exactly one event.
//!
//! The writes that queued in a PG while the last group was in flight go as one group: each
//! is ordered at the next version and prepared in turn, then the group goes to the
//! replicas in one message and into one transaction here and on each of them, so a PG
//! that many writes wait on takes them all in one round instead of one round each. The
//! shell groups only distinct requests, and writes to one object only where none judges
//! what another changes (`take_group` in mod.rs), so no write of a group depends on
//! another.
//!
//! ```text
//! Write (starts a group) / Join ─ a retried request ───────► Reply(Written, its version)
//!   │                           ─ a blocklisted client ────► Reply(Denied)
//!   ▼ ordered at the next version
//! Prepare (space, conditions, sealed tail, store limits) ─ refused ─► Reply(the refusal)
//!   ▼ Prepared; more writes Join, or the shell closes the group (none prepared: over)
//! Close: Replicate to every clean replica, Apply here
//!   ▼ Applied, and ReplicaDone or ReplicaMissed from each replica, in any order
//! not applied here ───────────────────► Publish(peering), Repeer, Reply(Busy) to each
//!   ▼ applied here
//! logged; each replica that missed it leaves the clean set: Recover it
//! Publish(the PG's state)
//! Reply(Written) to each, with min_size copies in the interval the map still names,
//! else Reply(Busy) to each
//! ```
//!
//! A write answered Busy after it was applied is in the log: the client's retry, with the
//! same request id, is answered from it once the PG serves again.

use std::collections::BTreeSet;

use map::cluster::Epoch;
use map::placement::OsdId;
use map::ObjectName;
use messenger::message::{LogEntry, OsdReply, PgState, ReqId, Version};

use super::core::{Core, Order};
use super::publishable;

/// What happened, as the shell tells the core.
#[derive(Debug)]
pub enum Event {
    /// A client's write reached the PG, which serves, and starts a group. `blocklisted`:
    /// the map blocklists the client's instance.
    Write {
        reqid: ReqId,
        object: ObjectName,
        blocklisted: bool,
    },
    /// Another write joins the group before it is closed: its request is not in the group
    /// already (its object may be, for a write independent of those before it).
    Join {
        reqid: ReqId,
        object: ObjectName,
        blocklisted: bool,
    },
    /// The shell checked the write last ordered (space, conditions, the tail of sealed
    /// chunks, the store's limits) and added it to the group's transaction; or it refused
    /// it.
    Prepared(Result<(), OsdReply>),
    /// No more writes join: the group's log entries are in its transaction, which trims
    /// this many entries off the log.
    Close { trim: usize },
    /// The group's transaction was applied to this OSD's store, or not.
    Applied(Result<(), String>),
    /// A clean replica applied the group.
    ReplicaDone(OsdId),
    /// A clean replica did not: it refused, failed, did not answer, or the map marks it down.
    ReplicaMissed(OsdId),
}

/// What the core asks of the shell, in order.
#[derive(Debug)]
pub enum Action {
    /// Check the write and add it to the group's transaction with this log entry; answer
    /// `Prepared`.
    Prepare(LogEntry),
    /// Send the group's writes, with these entries, to this replica; answer `ReplicaDone`
    /// or `ReplicaMissed`.
    Replicate { to: OsdId, entries: Vec<LogEntry> },
    /// Apply the group's transaction here; answer `Applied`.
    Apply,
    /// Recover this replica under this token.
    Recover { target: OsdId, token: u64 },
    /// Peer the PG again, once the lock is released.
    Repeer,
    /// Publish this state for the interval that began at `interval`.
    Publish { interval: Epoch, state: PgState },
    /// Answer the client of this request; its write is over.
    Reply {
        reqid: ReqId,
        reply: Result<OsdReply, OsdReply>,
    },
}

/// The group of writes in flight.
#[derive(Debug)]
pub(super) struct Write {
    /// Its writes prepared, in version order.
    entries: Vec<LogEntry>,
    /// The write ordered last, while it is prepared.
    preparing: Option<LogEntry>,
    /// Log entries its transaction trims, once closed.
    trim: Option<usize>,
    /// Clean replicas sent the group that have not answered.
    waiting: BTreeSet<OsdId>,
    done: BTreeSet<OsdId>,
    missed: BTreeSet<OsdId>,
    /// What came of applying it here.
    local: Option<Result<(), String>>,
}

impl Write {
    /// The version of the group's last write ordered, which the next one follows.
    pub(super) fn last_ordered(&self) -> Option<Version> {
        self.entries.last().map(|entry| entry.version)
    }
}

impl Core {
    /// Takes one event of the group in flight (or the one that starts it); returns what the
    /// shell does next. `announced` is the newest map epoch that changed the PG's acting set
    /// ([`super::Pg::announced`]), read as the event arrives: a group whose interval a newer
    /// map ended is not acknowledged.
    pub fn on_write(&mut self, announced: Epoch, event: Event) -> Vec<Action> {
        match event {
            Event::Write {
                reqid,
                object,
                blocklisted,
            } => self.start(reqid, &object, blocklisted),
            Event::Join {
                reqid,
                object,
                blocklisted,
            } => {
                let write = self.in_flight();
                assert!(
                    write.trim.is_none() && write.preparing.is_none(),
                    "a write joins a group being ordered, after the last one's Prepared"
                );
                assert!(
                    write.entries.iter().all(|e| e.reqid != reqid),
                    "a group holds each request once"
                );
                self.order(reqid, &object, blocklisted)
            }
            Event::Prepared(prepared) => {
                let write = self.in_flight();
                let entry = write
                    .preparing
                    .take()
                    .expect("a write is prepared once, after its order");
                match prepared {
                    Ok(()) => {
                        write.entries.push(entry);
                        Vec::new()
                    }
                    Err(refusal) => vec![Action::Reply {
                        reqid: entry.reqid,
                        reply: Err(refusal),
                    }],
                }
            }
            Event::Close { trim } => {
                let clean = self.interval.clean.clone();
                let write = self.in_flight();
                assert!(
                    write.trim.is_none() && write.preparing.is_none(),
                    "a group is closed once, after its last write's Prepared"
                );
                if write.entries.is_empty() {
                    // Every write of it was refused or answered: nothing to apply.
                    self.write = None;
                    return Vec::new();
                }
                write.trim = Some(trim);
                write.waiting = clean.iter().copied().collect();
                let entries = write.entries.clone();
                let mut actions: Vec<Action> = clean
                    .into_iter()
                    .map(|to| Action::Replicate {
                        to,
                        entries: entries.clone(),
                    })
                    .collect();
                actions.push(Action::Apply);
                actions
            }
            Event::Applied(result) => {
                let write = self.in_flight();
                assert!(write.local.is_none(), "a group is applied here once");
                write.local = Some(result);
                self.finish(announced)
            }
            Event::ReplicaDone(osd) => {
                let write = self.in_flight();
                assert!(write.waiting.remove(&osd), "osd.{} answers once", osd.0);
                write.done.insert(osd);
                self.finish(announced)
            }
            Event::ReplicaMissed(osd) => {
                let write = self.in_flight();
                assert!(write.waiting.remove(&osd), "osd.{} answers once", osd.0);
                write.missed.insert(osd);
                self.finish(announced)
            }
        }
    }

    /// Whether a group of writes is in flight.
    pub fn writing(&self) -> bool {
        self.write.is_some()
    }

    /// Starts a group with its first write.
    fn start(&mut self, reqid: ReqId, object: &ObjectName, blocklisted: bool) -> Vec<Action> {
        if let Some(left) = self.write.take() {
            // The last group's shell ended without its answers (it panicked): what it
            // applied is in the store but not known here. Read the log again, and peer.
            self.loaded = false;
            let (pool, number) = (self.pg.pool, self.pg.number);
            // Their clients were answered Busy as the shell's answers were dropped.
            drop(left);
            return back_to_peering(
                self.interval.epoch,
                format!(
                    "pg {pool}.{number}: its last writes ended without an answer; peering again"
                ),
                [reqid],
            );
        }
        self.write = Some(Write {
            entries: Vec::new(),
            preparing: None,
            trim: None,
            waiting: BTreeSet::new(),
            done: BTreeSet::new(),
            missed: BTreeSet::new(),
            local: None,
        });
        self.order(reqid, object, blocklisted)
    }

    /// Orders a write of the group being ordered.
    fn order(&mut self, reqid: ReqId, object: &ObjectName, blocklisted: bool) -> Vec<Action> {
        match self.order_write(reqid, object, blocklisted) {
            Order::Duplicate(version) => vec![Action::Reply {
                reqid,
                reply: Ok(OsdReply::Written { version }),
            }],
            Order::Blocklisted => vec![Action::Reply {
                reqid,
                reply: Err(OsdReply::Denied(format!(
                    "client instance {:016x} is blocklisted (its image lock was broken); \
                     reconnect to write again",
                    reqid.client
                ))),
            }],
            Order::Next(entry) => {
                self.in_flight().preparing = Some(entry.clone());
                vec![Action::Prepare(entry)]
            }
        }
    }

    fn in_flight(&mut self) -> &mut Write {
        self.write
            .as_mut()
            .expect("an event of a group comes while it is in flight")
    }

    /// Once the group is applied here and every replica answered: logs its writes, takes
    /// the replicas that missed it out of the clean set, and answers each.
    fn finish(&mut self, announced: Epoch) -> Vec<Action> {
        let write = self.in_flight();
        if write.local.is_none() || !write.waiting.is_empty() {
            return Vec::new();
        }
        let write = self.write.take().expect("in flight");
        let (pool, number) = (self.pg.pool, self.pg.number);
        let interval = self.interval.epoch;
        let reqids = write.entries.iter().map(|e| e.reqid);
        if let Some(Err(why)) = &write.local {
            // The replicas may hold these writes and this OSD does not: stop serving, and
            // let peering take them from them. The clients' retries are then answered from
            // the log.
            return back_to_peering(
                interval,
                format!(
                    "pg {pool}.{number}: applying the write on its primary failed ({why}); \
                     peering again"
                ),
                reqids,
            );
        }
        let mut trim = write.trim.expect("a group is applied once closed");
        for entry in &write.entries {
            for recovery in self.interval.recovering.values_mut() {
                recovery.dirty.insert(entry.object.clone());
            }
            self.note_logged(entry.clone(), trim);
            trim = 0;
        }
        if let Some(profile) = self.interval.erasure {
            if 1 + write.done.len() < profile.k() {
                // Fewer than k shard holders applied it: no shard of it can be rebuilt on
                // the others, and it was never acknowledged. Peering takes it back.
                return back_to_peering(
                    interval,
                    format!(
                        "pg {pool}.{number}: the write reached {} of its shard holders, \
                         fewer than the {} needed to decode it; peering again",
                        1 + write.done.len(),
                        profile.k()
                    ),
                    reqids,
                );
            }
        }
        let mut actions: Vec<Action> = write
            .missed
            .iter()
            .map(|&target| Action::Recover {
                target,
                token: self.begin_recovery(target),
            })
            .collect();
        actions.push(Action::Publish {
            interval,
            state: self.state(),
        });
        let refusal = if !publishable(interval, announced) {
            Some(format!(
                "pg {pool}.{number}: a newer map changed its OSDs during the write; ask again"
            ))
        } else if !self.ack_ok() {
            Some(format!(
                "pg {pool}.{number} lost replicas during a write; recovering"
            ))
        } else {
            assert!(
                1 + write.done.len() >= self.interval.min_size,
                "nothing is acknowledged below min_size"
            );
            assert!(
                self.interval
                    .clean
                    .iter()
                    .all(|osd| write.done.contains(osd)),
                "an acknowledged write is on every clean replica"
            );
            None
        };
        actions.extend(write.entries.iter().map(|entry| Action::Reply {
            reqid: entry.reqid,
            reply: match &refusal {
                Some(why) => Err(OsdReply::Busy(why.clone())),
                None => Ok(OsdReply::Written {
                    version: entry.version,
                }),
            },
        }));
        actions
    }
}

/// The PG stops serving and peers again; the clients of `reqids` are told it is busy, for
/// `why`.
fn back_to_peering(
    interval: Epoch,
    why: String,
    reqids: impl IntoIterator<Item = ReqId>,
) -> Vec<Action> {
    let mut actions = vec![
        Action::Publish {
            interval,
            state: PgState::Peering,
        },
        Action::Repeer,
    ];
    actions.extend(reqids.into_iter().map(|reqid| Action::Reply {
        reqid,
        reply: Err(OsdReply::Busy(why.clone())),
    }));
    actions
}

#[cfg(test)]
mod tests {
    use super::super::core::tests::{name, primary, reqid, version};
    use super::*;

    fn write(id: u64, object: &str) -> Event {
        Event::Write {
            reqid: reqid(id),
            object: name(object),
            blocklisted: false,
        }
    }

    fn join(id: u64, object: &str) -> Event {
        Event::Join {
            reqid: reqid(id),
            object: name(object),
            blocklisted: false,
        }
    }

    fn entry_at(epoch: Epoch, seq: u64, object: &str) -> LogEntry {
        LogEntry {
            version: version(epoch, seq),
            object: name(object),
            reqid: reqid(100 + seq),
        }
    }

    fn entry(core: &Core, id: u64, object: &str) -> LogEntry {
        LogEntry {
            version: version(core.interval.epoch, core.info.last.seq + 1),
            object: name(object),
            reqid: reqid(id),
        }
    }

    /// The write ordered last is prepared, and its group closed.
    fn close(core: &mut Core) -> Vec<Action> {
        same(core.on_write(5, Event::Prepared(Ok(()))), &[]);
        core.on_write(5, Event::Close { trim: 0 })
    }

    fn reply(actions: &[Action]) -> &Result<OsdReply, OsdReply> {
        match actions.last() {
            Some(Action::Reply { reply, .. }) => reply,
            other => panic!("the write is answered last, not {other:?}"),
        }
    }

    /// Actions are compared as they print: replies hold types that do not compare.
    #[track_caller]
    fn same(got: Vec<Action>, want: &[Action]) {
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
    }

    fn busy(actions: &[Action]) -> bool {
        matches!(reply(actions), Err(OsdReply::Busy(_)))
    }

    #[test]
    fn a_write_goes_to_every_clean_replica_and_is_acknowledged_once_all_applied_it() {
        let mut core = primary(5, version(5, 9), 2);
        let next = entry(&core, 2, "b");
        same(
            core.on_write(5, write(2, "b")),
            &[Action::Prepare(next.clone())],
        );
        same(
            close(&mut core),
            &[
                Action::Replicate {
                    to: OsdId(1),
                    entries: vec![next.clone()],
                },
                Action::Replicate {
                    to: OsdId(2),
                    entries: vec![next.clone()],
                },
                Action::Apply,
            ],
        );
        // Answers come in any order; nothing is decided before the last.
        same(core.on_write(5, Event::ReplicaDone(OsdId(2))), &[]);
        same(core.on_write(5, Event::Applied(Ok(()))), &[]);
        assert_eq!(
            core.info.last,
            version(5, 9),
            "logged only once all answered"
        );
        same(
            core.on_write(5, Event::ReplicaDone(OsdId(1))),
            &[
                Action::Publish {
                    interval: 5,
                    state: PgState::Clean,
                },
                Action::Reply {
                    reqid: reqid(2),
                    reply: Ok(OsdReply::Written {
                        version: next.version,
                    }),
                },
            ],
        );
        assert_eq!(core.info.last, next.version);
        assert_eq!(core.log.back(), Some(&next));
        assert!(!core.writing());
        // Its retry is answered from the log, with no IO.
        same(
            core.on_write(5, write(2, "b")),
            &[Action::Reply {
                reqid: reqid(2),
                reply: Ok(OsdReply::Written {
                    version: next.version,
                }),
            }],
        );
        same(core.on_write(5, Event::Close { trim: 0 }), &[]);
        assert!(!core.writing(), "a group with nothing prepared is over");
    }

    #[test]
    fn a_group_goes_to_the_replicas_at_consecutive_versions_and_answers_each_write() {
        let mut core = primary(5, version(5, 9), 2);
        core.log = (1..=3).map(|seq| entry_at(seq, seq, "old")).collect();
        let first = entry(&core, 2, "b");
        same(
            core.on_write(5, write(2, "b")),
            &[Action::Prepare(first.clone())],
        );
        same(core.on_write(5, Event::Prepared(Ok(()))), &[]);
        let second = LogEntry {
            version: version(5, 11),
            object: name("c"),
            reqid: reqid(3),
        };
        same(
            core.on_write(5, join(3, "c")),
            &[Action::Prepare(second.clone())],
        );
        same(core.on_write(5, Event::Prepared(Ok(()))), &[]);
        // A write refused, or from a blocklisted client, takes no version.
        core.on_write(5, join(4, "d"));
        let refusal = OsdReply::Failed("full".into());
        same(
            core.on_write(5, Event::Prepared(Err(refusal.clone()))),
            &[Action::Reply {
                reqid: reqid(4),
                reply: Err(refusal),
            }],
        );
        let denied = core.on_write(
            5,
            Event::Join {
                reqid: reqid(5),
                object: name("e"),
                blocklisted: true,
            },
        );
        assert!(matches!(reply(&denied), Err(OsdReply::Denied(_))));
        let third = LogEntry {
            version: version(5, 12),
            object: name("f"),
            reqid: reqid(6),
        };
        same(
            core.on_write(5, join(6, "f")),
            &[Action::Prepare(third.clone())],
        );
        same(core.on_write(5, Event::Prepared(Ok(()))), &[]);
        let entries = vec![first.clone(), second.clone(), third.clone()];
        same(
            core.on_write(5, Event::Close { trim: 2 }),
            &[
                Action::Replicate {
                    to: OsdId(1),
                    entries: entries.clone(),
                },
                Action::Replicate {
                    to: OsdId(2),
                    entries: entries.clone(),
                },
                Action::Apply,
            ],
        );
        core.on_write(5, Event::Applied(Ok(())));
        core.on_write(5, Event::ReplicaDone(OsdId(1)));
        let actions = core.on_write(5, Event::ReplicaDone(OsdId(2)));
        let answered: Vec<_> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Reply {
                    reqid,
                    reply: Ok(OsdReply::Written { version }),
                } => Some((reqid.seq, *version)),
                _ => None,
            })
            .collect();
        assert_eq!(
            answered,
            [(2, first.version), (3, second.version), (6, third.version)]
        );
        // Logged in order, the trim taken once off the front.
        let logged: Vec<_> = core.log.iter().map(|e| e.version).collect();
        assert_eq!(
            logged,
            [version(3, 3), first.version, second.version, third.version]
        );
        assert_eq!(core.info.last, third.version);
        assert!(!core.writing());
    }

    #[test]
    fn a_replica_that_misses_a_write_is_recovered_and_the_write_counts_the_rest() {
        let mut core = primary(5, version(5, 9), 2);
        core.on_write(5, write(2, "b"));
        close(&mut core);
        core.on_write(5, Event::ReplicaMissed(OsdId(1)));
        core.on_write(5, Event::Applied(Ok(())));
        let actions = core.on_write(5, Event::ReplicaDone(OsdId(2)));
        let Action::Recover { target, token } = actions[0] else {
            panic!("the replica is recovered first: {actions:?}");
        };
        assert_eq!(target, OsdId(1));
        assert_eq!(core.interval.clean, [OsdId(2)]);
        assert_eq!(core.interval.recovering[&OsdId(1)].token, token);
        assert!(matches!(
            actions[1],
            Action::Publish {
                interval: 5,
                state: PgState::Recovering
            }
        ));
        assert!(matches!(reply(&actions), Ok(OsdReply::Written { .. })));
        // The next write goes to the clean replica only, and is marked for the recovery.
        let next = entry(&core, 3, "c");
        core.on_write(5, write(3, "c"));
        same(
            close(&mut core),
            &[
                Action::Replicate {
                    to: OsdId(2),
                    entries: vec![next],
                },
                Action::Apply,
            ],
        );
        core.on_write(5, Event::Applied(Ok(())));
        core.on_write(5, Event::ReplicaDone(OsdId(2)));
        assert!(core.interval.recovering[&OsdId(1)]
            .dirty
            .contains(&name("c")));
    }

    #[test]
    fn a_write_on_fewer_than_min_size_copies_is_logged_but_not_acknowledged() {
        let mut core = primary(5, version(5, 9), 2);
        core.on_write(5, write(2, "b"));
        close(&mut core);
        core.on_write(5, Event::ReplicaMissed(OsdId(1)));
        core.on_write(5, Event::ReplicaMissed(OsdId(2)));
        let actions = core.on_write(5, Event::Applied(Ok(())));
        assert!(busy(&actions), "{actions:?}");
        assert!(actions.iter().any(|a| matches!(
            a,
            Action::Publish {
                state: PgState::Inactive(_),
                ..
            }
        )));
        assert_eq!(core.info.last, version(5, 10));
        assert!(core.interval.clean.is_empty());
        assert_eq!(core.interval.recovering.len(), 2);
        // The tokens of the two recoveries are distinct and newer than any before.
        let tokens: BTreeSet<u64> = core.interval.recovering.values().map(|r| r.token).collect();
        assert_eq!(tokens.len(), 2);
        assert!(core.draw_token() > *tokens.last().expect("two"));
    }

    /// A 2+1 PG's write, applied here, that osd.1 missed; what osd.2's answer brings.
    fn coded_write_missed_by_osd1(osd2: Event) -> (Core, Vec<Action>) {
        let mut core = primary(5, version(5, 9), 2);
        core.interval.erasure = Some(ec::Profile::new(2, 1, 4096).expect("2+1"));
        core.on_write(5, write(2, "b"));
        close(&mut core);
        core.on_write(5, Event::ReplicaMissed(OsdId(1)));
        core.on_write(5, Event::Applied(Ok(())));
        let actions = core.on_write(5, osd2);
        (core, actions)
    }

    #[test]
    fn an_erasure_coded_write_on_fewer_than_k_holders_sends_the_pg_back_to_peering() {
        let (core, actions) = coded_write_missed_by_osd1(Event::ReplicaMissed(OsdId(2)));
        assert!(
            matches!(
                actions[..2],
                [
                    Action::Publish {
                        state: PgState::Peering,
                        ..
                    },
                    Action::Repeer
                ]
            ),
            "no shard of it can be rebuilt: {actions:?}"
        );
        assert!(busy(&actions));
        assert_eq!(
            core.info.last,
            version(5, 10),
            "logged: peering rolls it back"
        );
        // On two holders of three it decodes: the third is rebuilt.
        let (_, actions) = coded_write_missed_by_osd1(Event::ReplicaDone(OsdId(2)));
        assert!(matches!(
            actions[0],
            Action::Recover {
                target: OsdId(1),
                ..
            }
        ));
    }

    #[test]
    fn a_write_that_fails_here_is_not_logged_and_the_pg_peers_again() {
        let mut core = primary(5, version(5, 9), 2);
        core.on_write(5, write(2, "b"));
        close(&mut core);
        core.on_write(5, Event::Applied(Err("the disk is gone".into())));
        core.on_write(5, Event::ReplicaDone(OsdId(1)));
        let actions = core.on_write(5, Event::ReplicaDone(OsdId(2)));
        assert!(matches!(
            actions[..2],
            [
                Action::Publish {
                    interval: 5,
                    state: PgState::Peering
                },
                Action::Repeer
            ]
        ));
        assert!(busy(&actions));
        assert_eq!(core.info.last, version(5, 9));
        assert!(core.write.is_none());
    }

    #[test]
    fn a_write_whose_interval_a_newer_map_ended_is_not_acknowledged() {
        let mut core = primary(5, version(5, 9), 2);
        core.on_write(5, write(2, "b"));
        close(&mut core);
        core.on_write(5, Event::Applied(Ok(())));
        core.on_write(6, Event::ReplicaDone(OsdId(1)));
        let actions = core.on_write(6, Event::ReplicaDone(OsdId(2)));
        assert!(busy(&actions), "{actions:?}");
        assert_eq!(core.info.last, version(5, 10), "applied everywhere: logged");
    }

    #[test]
    fn a_refused_or_blocklisted_write_takes_no_version() {
        let mut core = primary(5, version(5, 9), 2);
        core.on_write(5, write(2, "b"));
        let refusal = OsdReply::Failed("full".into());
        same(
            core.on_write(5, Event::Prepared(Err(refusal.clone()))),
            &[Action::Reply {
                reqid: reqid(2),
                reply: Err(refusal),
            }],
        );
        same(core.on_write(5, Event::Close { trim: 0 }), &[]);
        let actions = core.on_write(
            5,
            Event::Write {
                reqid: reqid(3),
                object: name("b"),
                blocklisted: true,
            },
        );
        assert!(matches!(reply(&actions), Err(OsdReply::Denied(_))));
        same(
            core.on_write(5, join(4, "b")),
            &[Action::Prepare(entry(&core, 4, "b"))],
        );
        assert_eq!(core.log.back().map(|e| e.version), Some(version(5, 9)));
    }

    #[test]
    fn a_write_whose_shell_ended_without_an_answer_sends_the_pg_back_to_peering() {
        let mut core = primary(5, version(5, 9), 2);
        core.on_write(5, write(2, "b"));
        close(&mut core);
        // Its shell panicked here; the next write finds it still in flight.
        let actions = core.on_write(5, write(3, "c"));
        assert!(matches!(
            actions[..2],
            [
                Action::Publish {
                    state: PgState::Peering,
                    ..
                },
                Action::Repeer
            ]
        ));
        assert!(busy(&actions));
        assert!(!core.loaded, "the log is read from the store again");
        assert!(core.write.is_none());
    }
}
