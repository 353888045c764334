//! The mounts of one file system: who each is, where it is rooted, what it holds open, the
//! requests it has had answered, and the changes other mounts made that it should drop from
//! its caches.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use aws_lc_rs::{constant_time, hmac};
use fs::proto::{Event, Ino, SessionInfo, Tag};
use tokio::sync::watch;

/// A session that sends nothing (not even its watch) for this long is ended: its opens are
/// released.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(60);
/// Changes kept for sessions to collect; a session further behind misses some and relies on
/// its lease running out ([`fs::proto::LEASE_MS`]).
pub const EVENTS_MAX: usize = 8192;
/// Answered requests remembered per session, to answer a resend instead of applying it again.
pub const COMPLETED_PER_SESSION_MAX: usize = 1024;

pub struct Session {
    pub entity: String,
    pub root: Ino,
    pub root_path: String,
    pub read_only: bool,
    pub opens: HashMap<Ino, u32>,
    pub last_seen: Instant,
}

pub struct Sessions {
    map: HashMap<u64, Session>,
    events: VecDeque<(u64, u64, Event)>,
    last_event: u64,
    changed: watch::Sender<u64>,
    completed: HashMap<u64, BTreeMap<u64, Completed>>,
}

/// The MAC of `tag` given to request `seq` of session `session` for `op` (encoded), under
/// the file system's replay key (`Tag::proof`).
pub fn proof(key: &hmac::Key, session: u64, seq: u64, tag: &Tag, op: &[u8]) -> [u8; 16] {
    let mut message = Vec::with_capacity(41 + op.len());
    for n in [session, seq, tag.incarnation, tag.entry] {
        message.extend_from_slice(&n.to_be_bytes());
    }
    match tag.ino {
        Some(ino) => {
            message.push(1);
            message.extend_from_slice(&ino.to_be_bytes());
        }
        None => message.push(0),
    }
    message.extend_from_slice(op);
    let mac = hmac::sign(key, &message);
    let mut proof = [0; 16];
    proof.copy_from_slice(&mac.as_ref()[..16]);
    proof
}

/// Whether `tag` is one an MDS of the file system gave request `seq` of session `session`,
/// for `op`.
pub fn proves(key: &hmac::Key, session: u64, seq: u64, tag: &Tag, op: &[u8]) -> bool {
    let want = proof(key, session, seq, tag, op);
    constant_time::verify_slices_are_equal(&want, &tag.proof).is_ok()
}

/// A request that took effect: its journal entry and the inode it created or changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    pub entry: u64,
    pub ino: Option<Ino>,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            map: HashMap::new(),
            events: VecDeque::new(),
            last_event: 0,
            changed: watch::Sender::new(0),
            completed: HashMap::new(),
        }
    }
}

impl Sessions {
    pub fn get_mut(&mut self, id: u64) -> Option<&mut Session> {
        self.map.get_mut(&id)
    }

    /// Starts (or restarts) session `id`.
    pub fn mount(&mut self, id: u64, session: Session) {
        self.map.insert(id, session);
    }

    pub fn unmount(&mut self, id: u64) -> Option<Session> {
        self.completed.remove(&id);
        self.map.remove(&id)
    }

    /// Whether any session holds `ino` open.
    pub fn is_open(&self, ino: Ino) -> bool {
        self.map.values().any(|s| s.opens.contains_key(&ino))
    }

    pub fn open(&mut self, id: u64, ino: Ino) {
        if let Some(session) = self.map.get_mut(&id) {
            *session.opens.entry(ino).or_default() += 1;
        }
    }

    /// Releases one open of `ino` by session `id`; returns whether it was the session's last.
    pub fn release(&mut self, id: u64, ino: Ino) -> bool {
        let Some(session) = self.map.get_mut(&id) else {
            return false;
        };
        match session.opens.get_mut(&ino) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                session.opens.remove(&ino);
                true
            }
            None => false,
        }
    }

    /// Records changes made by session `origin`, for the others.
    pub fn publish(&mut self, origin: u64, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        for event in events {
            self.last_event += 1;
            self.events.push_back((self.last_event, origin, event));
        }
        while self.events.len() > EVENTS_MAX {
            self.events.pop_front();
        }
        self.changed.send_replace(self.last_event);
    }

    /// Changes other sessions made after event `after`, and the last event's id.
    pub fn events_after(&self, id: u64, after: u64) -> (Vec<Event>, u64) {
        let first = self.events.partition_point(|(event, _, _)| *event <= after);
        let events = self
            .events
            .range(first..)
            .filter(|(_, origin, _)| *origin != id)
            .map(|(_, _, event)| event.clone())
            .collect();
        (events, self.last_event)
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Ends the sessions silent for longer than [`SESSION_TIMEOUT`]; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let before = self.map.len();
        let stale: Vec<u64> = self
            .map
            .iter()
            .filter(|(_, s)| now.duration_since(s.last_seen) > SESSION_TIMEOUT)
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            tracing::warn!(
                session = format!("{id:016x}"),
                "session timed out; its opens are released"
            );
            self.unmount(id);
        }
        before - self.map.len()
    }

    /// What request `seq` of session `id` did, if it took effect.
    pub fn completed(&self, id: u64, seq: u64) -> Option<Completed> {
        self.completed.get(&id)?.get(&seq).copied()
    }

    pub fn complete(&mut self, id: u64, seq: u64, done: Completed) {
        let requests = self.completed.entry(id).or_default();
        requests.insert(seq, done);
        while requests.len() > COMPLETED_PER_SESSION_MAX {
            requests.pop_first();
        }
    }

    pub fn list(&self, now: Instant) -> Vec<SessionInfo> {
        let mut out: Vec<SessionInfo> = self
            .map
            .iter()
            .map(|(id, s)| SessionInfo {
                session: *id,
                entity: s.entity.clone(),
                root: s.root_path.clone(),
                opens: s.opens.values().map(|n| u64::from(*n)).sum(),
                idle_ms: now.duration_since(s.last_seen).as_millis() as u64,
            })
            .collect();
        out.sort_by_key(|s| s.session);
        out
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        Session {
            entity: "client.a".into(),
            root: 1,
            root_path: "/".into(),
            read_only: false,
            opens: HashMap::new(),
            last_seen: Instant::now(),
        }
    }

    #[test]
    fn a_session_sees_the_changes_of_others_not_its_own() {
        let mut sessions = Sessions::default();
        sessions.mount(1, session());
        sessions.mount(2, session());
        sessions.publish(1, vec![Event::Inode(7)]);
        sessions.publish(2, vec![Event::Inode(8)]);
        assert_eq!(sessions.events_after(1, 0), (vec![Event::Inode(8)], 2));
        assert_eq!(sessions.events_after(2, 0), (vec![Event::Inode(7)], 2));
        assert_eq!(sessions.events_after(2, 1), (vec![], 2));
    }

    #[test]
    fn opens_are_counted_until_the_last_release() {
        let mut sessions = Sessions::default();
        sessions.mount(1, session());
        sessions.open(1, 9);
        sessions.open(1, 9);
        assert!(!sessions.release(1, 9));
        assert!(sessions.is_open(9));
        assert!(sessions.release(1, 9));
        assert!(!sessions.is_open(9));
        assert!(
            !sessions.release(1, 9),
            "a release without an open changes nothing"
        );
    }

    #[test]
    fn a_tag_proves_itself_only_for_its_request_and_unchanged() {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &[7; 32]);
        let mut tag = Tag {
            incarnation: 3,
            entry: 40,
            ino: Some(9),
            proof: [0; 16],
        };
        let op = b"setattr 9";
        tag.proof = proof(&key, 1, 2, &tag, op);
        assert!(proves(&key, 1, 2, &tag, op));
        assert!(!proves(&key, 5, 2, &tag, op), "another session");
        assert!(!proves(&key, 1, 3, &tag, op), "another request");
        assert!(!proves(&key, 1, 2, &tag, b"create 9"), "another op");
        let other_key = hmac::Key::new(hmac::HMAC_SHA256, &[8; 32]);
        assert!(!proves(&other_key, 1, 2, &tag, op), "another file system");
        for changed in [
            Tag {
                ino: Some(10),
                ..tag
            },
            Tag { ino: None, ..tag },
            Tag { entry: 41, ..tag },
            Tag {
                incarnation: 4,
                ..tag
            },
        ] {
            assert!(!proves(&key, 1, 2, &changed, op), "{changed:?}");
        }
    }

    #[test]
    fn completed_requests_are_remembered_within_a_bound() {
        let mut sessions = Sessions::default();
        let done = |seq| Completed {
            entry: seq + 100,
            ino: Some(seq),
        };
        for seq in 0..(COMPLETED_PER_SESSION_MAX as u64 + 10) {
            sessions.complete(1, seq, done(seq));
        }
        assert_eq!(sessions.completed(1, 5), None, "the oldest are forgotten");
        let newest = COMPLETED_PER_SESSION_MAX as u64 + 9;
        assert_eq!(sessions.completed(1, newest), Some(done(newest)));
    }
}
