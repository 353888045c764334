//! One file system's service: its namespace, journal and sessions, and the requests of its
//! mounts. A change is decided under the namespace lock (pure, in `ops`), queued for the
//! journal and applied to memory there, in one order, and answered with its tag (this MDS
//! and its journal entry). A mount keeps what it was answered until a `Sync` says the journal
//! holds it; if this MDS dies first, the next one applies what its journal lost again when
//! the mount replays it (`Op::Replay`), judged by the tag against where this MDS's journal
//! ended (`record::Incarnations`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lc_rs::hmac;
use client::{Cluster, Pool};
use fs::proto::{
    objects, Attr, Cred, Event, Ino, Kind, Op, Reply, Request, Tag, LEASE_MS, ROOT_INO,
    WATCH_HOLD_MS,
};
use map::auth::{Access, Caps};
use map::filesystem::FsInfo;
use tokio::sync::{watch, Mutex, Notify};
use tokio::task::JoinHandle;

use crate::journal::{self, Journal};
use crate::namespace::{self, Missing, Namespace, INOS_RESERVED};
use crate::ops::{self, Change, Ctx, NewInode, Refusal, RenameArgs};
use crate::record::{
    self, Entry, Incarnations, Inode, Names, Put, APPLIED_ATTR, INCARNATIONS_KEY, NEXT_INO_KEY,
    REPLAY_KEY,
};
use crate::sessions::{self, Completed, Session, Sessions};

/// Entries the journal may hold unapplied before new changes wait for the flusher.
pub const UNFLUSHED_ENTRIES_MAX: usize = 65_536;
/// How long after start unlinked-but-open files wait for their mounts to reconnect and say
/// they still hold them, before they are purged.
pub const RECLAIM_GRACE: Duration = Duration::from_secs(30);
/// Objects past a purged file's recorded size probed for data a mount wrote but never
/// recorded (it crashed first).
const PURGE_PROBE_OBJECTS: u64 = 8;
/// How long a new MDS that replaced another serves only the mounts' replays of what the
/// other answered: long enough for every live mount to reconnect (its watch notices the
/// replacement at once), so that no other change gets in between.
const REPLAY_WINDOW: Duration = Duration::from_secs(8);
/// Unlinked files purged per round.
const PURGE_BATCH: usize = 64;

struct State {
    ns: Namespace,
    sessions: Sessions,
}

pub struct FsServer {
    pub info: FsInfo,
    data_pool: String,
    meta: Pool,
    data: Pool,
    journal: Arc<Journal>,
    /// This MDS's tenure (`incarnations.current`, a random number per `open`) and where its
    /// predecessors' journals ended: what a replayed change is judged by.
    incarnations: Incarnations,
    /// The key of tags' MACs.
    replay_key: hmac::Key,
    /// Until when only replays are served, if this MDS replaced another.
    replays_until: Option<Instant>,
    state: Mutex<State>,
    events: watch::Receiver<u64>,
    purge_wake: Notify,
    started: Instant,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for FsServer {
    fn drop(&mut self) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

pub fn now_ns() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_nanos()).unwrap_or(i64::MAX)
}

fn failed(errno: i32, why: impl Into<String>) -> Reply {
    Reply::Failed {
        errno,
        why: why.into(),
    }
}

/// Whether `path` is `grant` or below it (both normalised).
fn path_within(path: &str, grant: &str) -> bool {
    grant == "/" || path == grant || path.starts_with(&format!("{grant}/"))
}

#[cfg(test)]
pub fn tests_root() -> Inode {
    root_inode(0)
}

fn root_inode(now: i64) -> Inode {
    Inode {
        attr: Attr {
            ino: ROOT_INO,
            kind: Kind::Dir,
            perm: 0o755,
            nlink: 2,
            uid: 0,
            gid: 0,
            size: 0,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            btime_ns: now,
            rdev: 0,
        },
        parent: ROOT_INO,
        target: None,
        xattrs: BTreeMap::new(),
    }
}

impl FsServer {
    /// Opens file system `info`: replays its journal into its objects, loads what it needs
    /// and starts its journal writer, flusher and purger. The caller is already its active
    /// MDS in the map (so the previous one is fenced).
    pub async fn open(cluster: &Cluster, info: FsInfo) -> Result<Arc<FsServer>, String> {
        let map = cluster.map();
        let pool_name = |id| {
            map.pools
                .get(&id)
                .map(|p| p.name.clone())
                .ok_or_else(|| format!("file system {}: pool {id} is gone", info.name))
        };
        let meta = cluster
            .pool(&pool_name(info.meta_pool)?)
            .await
            .map_err(|e| e.to_string())?;
        let data_pool = pool_name(info.data_pool)?;
        let data = cluster.pool(&data_pool).await.map_err(|e| e.to_string())?;
        let names = Names { fs_id: info.id.0 };
        let (journal, entries) = replay(&meta, &names).await?;
        let mut sessions = Sessions::default();
        for entry in &entries {
            let done = Completed {
                entry: entry.seq,
                ino: entry.ino,
            };
            sessions.complete(entry.session, entry.request, done);
        }
        let keys = vec![
            NEXT_INO_KEY.to_vec(),
            INCARNATIONS_KEY.to_vec(),
            REPLAY_KEY.to_vec(),
        ];
        let found = match meta.omap_get(&names.super_object(), keys).await {
            Ok(found) => found.into_iter().collect::<HashMap<_, _>>(),
            Err(client::Error::NotFound) => HashMap::new(),
            Err(e) => return Err(format!("reading {}: {e}", names.super_object())),
        };
        let next_ino = match found.get(NEXT_INO_KEY).cloned().flatten() {
            Some(value) => record::be_u64("next inode", &value)?,
            None => ROOT_INO + 1,
        };
        let incarnations = match found.get(INCARNATIONS_KEY).cloned().flatten() {
            Some(value) => record::decode::<Incarnations>("incarnations", &value)?,
            None => Incarnations::default(),
        };
        // A number of its own for this tenure (a process may serve a file system, lose it and
        // take it back): answers before and after are told apart.
        let mut tenure = [0; 8];
        aws_lc_rs::rand::fill(&mut tenure).map_err(|_| "no random bytes for a tenure")?;
        let tenure = u64::from_be_bytes(tenure).max(1);
        let replaces = incarnations.current != 0;
        let replay_key = match found.get(REPLAY_KEY).cloned().flatten() {
            Some(key) => key,
            None => {
                let mut key = vec![0; 32];
                aws_lc_rs::rand::fill(&mut key).map_err(|_| "no random bytes for a key")?;
                key
            }
        };
        // Where the journal ends now is where the previous MDS's ended: recorded before this
        // one answers anything, so that its mounts' replays can be judged by it.
        let incarnations = incarnations.succeed(tenure, journal.last_assigned());
        let record = vec![
            (INCARNATIONS_KEY.to_vec(), record::encode(&incarnations)),
            (REPLAY_KEY.to_vec(), replay_key.clone()),
        ];
        meta.omap_set(&names.super_object(), record)
            .await
            .map_err(|e| format!("recording this MDS in {}: {e}", names.super_object()))?;
        let purge = namespace::list_all(&meta, &names.purge())
            .await?
            .into_iter()
            .map(|(key, _)| record::be_u64("purge key", &key))
            .collect::<Result<_, _>>()?;
        let mut ns = Namespace::new(names, next_ino, purge);
        ns.load(namespace::Missing::Shard(0), &meta).await?;
        let journal = Arc::new(journal);
        if ns
            .inode(ROOT_INO)
            .map_err(|_| "shard 0 was just loaded")?
            .is_none()
        {
            let puts = vec![
                Put::Inode {
                    ino: ROOT_INO,
                    inode: Some(root_inode(now_ns())),
                },
                Put::NextIno(next_ino.max(ROOT_INO + 1)),
            ];
            let seq = journal.append(0, 0, Some(ROOT_INO), puts.clone());
            ns.apply(&puts, seq);
        }
        let events = sessions.subscribe();
        let server = Arc::new(FsServer {
            info,
            data_pool,
            meta,
            data,
            journal,
            incarnations,
            replay_key: hmac::Key::new(hmac::HMAC_SHA256, &replay_key),
            replays_until: replaces.then(|| Instant::now() + REPLAY_WINDOW),
            state: Mutex::new(State { ns, sessions }),
            events,
            purge_wake: Notify::new(),
            started: Instant::now(),
            tasks: std::sync::Mutex::new(Vec::new()),
        });
        server.start_tasks();
        let root_seq = server.journal.last_assigned();
        server.journal.wait(root_seq).await?;
        tracing::info!(
            fs = %server.info.name,
            replayed = entries.len(),
            "file system open"
        );
        Ok(server)
    }

    fn start_tasks(self: &Arc<Self>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        let journal = self.journal.clone();
        tasks.push(tokio::spawn(async move { journal.write_loop().await }));
        let weak = Arc::downgrade(self);
        let journal = self.journal.clone();
        tasks.push(tokio::spawn(async move {
            journal
                .flush_loop(|last| {
                    let weak = weak.clone();
                    async move {
                        if let Some(server) = weak.upgrade() {
                            server.state.lock().await.ns.flushed(last);
                        }
                    }
                })
                .await
        }));
        let weak = Arc::downgrade(self);
        tasks.push(tokio::spawn(async move { purge_loop(weak).await }));
        let weak = Arc::downgrade(self);
        tasks.push(tokio::spawn(async move { expire_loop(weak).await }));
    }

    /// Why this file system's service stopped, once it has.
    pub fn failure(&self) -> watch::Receiver<Option<String>> {
        self.journal.failure()
    }

    pub async fn handle(&self, entity: &str, caps: &Caps, request: Request) -> Reply {
        let (started, op) = (Instant::now(), request.op.name());
        let reply = self.answer(entity, caps, request).await;
        let failed = matches!(reply, Reply::Failed { .. });
        crate::metrics::request(op, started.elapsed(), failed);
        if matches!(op, "mount" | "unmount") {
            crate::metrics::sessions(&self.info.name, self.sessions().await);
        }
        reply
    }

    async fn answer(&self, entity: &str, caps: &Caps, request: Request) -> Reply {
        let Request {
            session,
            seq,
            cred,
            op,
            ..
        } = request;
        match op {
            Op::Mount {
                path,
                read_only,
                opens,
            } => {
                self.mount(entity, caps, session, path, read_only, opens)
                    .await
            }
            Op::Watch { after } => self.watch(session, after).await,
            Op::Release { ino } => {
                let mut state = self.state.lock().await;
                if state.sessions.release(session, ino) && state.ns.purge.contains(&ino) {
                    self.purge_wake.notify_one();
                }
                Reply::Done
            }
            Op::Unmount => {
                let mut state = self.state.lock().await;
                if state.sessions.unmount(session).is_some() {
                    self.purge_wake.notify_one();
                }
                Reply::Done
            }
            Op::Sessions => {
                if !caps.mon_allows(true) {
                    return failed(libc::EACCES, "listing sessions is an operator's (mon=rw)");
                }
                Reply::Sessions(self.state.lock().await.sessions.list(Instant::now()))
            }
            Op::Sync => {
                // A session this MDS does not know reopens first, and so replays what an
                // earlier MDS answered it: only then is waiting for this journal enough.
                {
                    let mut state = self.state.lock().await;
                    let Some(known) = state.sessions.get_mut(session) else {
                        return Reply::StaleSession;
                    };
                    if known.entity != entity {
                        return failed(libc::EACCES, "the session belongs to another entity");
                    }
                    known.last_seen = Instant::now();
                }
                match self.journal.wait(self.journal.last_assigned()).await {
                    Ok(()) => Reply::Done,
                    Err(why) => failed(libc::EIO, why),
                }
            }
            op => self.operate(entity, caps, session, seq, cred, op).await,
        }
    }

    async fn mount(
        &self,
        entity: &str,
        caps: &Caps,
        session: u64,
        path: String,
        read_only: bool,
        opens: Vec<Ino>,
    ) -> Reply {
        let fs = &self.info.name;
        let Some((grant, access)) = caps.fs_grant(fs) else {
            return failed(
                libc::EACCES,
                format!("{entity} may not mount file system {fs}"),
            );
        };
        let path = match map::auth::normal_path(&path) {
            Ok(path) => path,
            Err(e) => return failed(libc::EINVAL, e.to_string()),
        };
        if !path_within(&path, &grant) {
            return failed(
                libc::EACCES,
                format!("{entity} may mount {fs} only at {grant} or below"),
            );
        }
        let mut state = self.state.lock().await;
        let root = loop {
            match ops::resolve(&state.ns, &path) {
                Ok(root) => break root,
                Err(Refusal::Missing(missing)) => {
                    if let Err(e) = state.ns.load(missing, &self.meta).await {
                        return failed(libc::EIO, e);
                    }
                }
                Err(Refusal::Errno(errno, why)) => return failed(errno, why),
            }
        };
        let attr = match state.ns.inode(root) {
            Ok(Some(inode)) => inode.attr.clone(),
            _ => return failed(libc::EIO, "the root vanished while mounting"),
        };
        let mut open_counts = HashMap::new();
        for ino in opens {
            *open_counts.entry(ino).or_insert(0) += 1;
        }
        state.sessions.mount(
            session,
            Session {
                entity: entity.into(),
                root,
                root_path: path.clone(),
                read_only: read_only || access == Access::Read,
                opens: open_counts,
                last_seen: Instant::now(),
            },
        );
        tracing::info!(fs = %fs, %entity, session = format!("{session:016x}"), root = %path, "mounted");
        Reply::Mounted {
            root: attr,
            fs_id: self.info.id.0,
            data_pool: self.data_pool.clone(),
            object_bytes: objects::DATA_OBJECT_BYTES,
            read_only: read_only || access == Access::Read,
        }
    }

    async fn watch(&self, session: u64, after: u64) -> Reply {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(WATCH_HOLD_MS);
        let mut changed = self.events.clone();
        loop {
            {
                let mut state = self.state.lock().await;
                let Some(known) = state.sessions.get_mut(session) else {
                    return Reply::StaleSession;
                };
                known.last_seen = Instant::now();
                let (events, last) = state.sessions.events_after(session, after);
                if !events.is_empty() || last < after {
                    return Reply::Events { events, last };
                }
                changed.borrow_and_update();
            }
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                return Reply::Events {
                    events: Vec::new(),
                    last: *changed.borrow(),
                };
            }
        }
    }

    async fn operate(
        &self,
        entity: &str,
        caps: &Caps,
        session: u64,
        seq: u64,
        cred: Cred,
        op: Op,
    ) -> Reply {
        let fs = &self.info.name;
        // While mounts replay what the previous MDS answered, nothing else gets in between;
        // a session this MDS does not know hears so at once, to reopen and replay.
        if let Some(until) = self
            .replays_until
            .filter(|_| !matches!(op, Op::Replay { .. }))
        {
            if self.state.lock().await.sessions.get_mut(session).is_none() {
                return Reply::StaleSession;
            }
            tokio::time::sleep_until(until.into()).await;
        }
        // Backpressure: a flusher far behind holds new changes back, not memory.
        for _ in 0..1000 {
            if !op.is_change() || self.journal.unflushed() < UNFLUSHED_ENTRIES_MAX {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut state = self.state.lock().await;
        let (root, read_only) = {
            let Some(known) = state.sessions.get_mut(session) else {
                return Reply::StaleSession;
            };
            if known.entity != entity {
                return failed(libc::EACCES, "the session belongs to another entity");
            }
            known.last_seen = Instant::now();
            // The grant is read at every request: a revoked entity is stopped here.
            match caps.fs_grant(fs) {
                Some((grant, access)) if path_within(&known.root_path, &grant) => {
                    if access == Access::Read {
                        known.read_only = true;
                    }
                }
                _ => {
                    return failed(
                        libc::EACCES,
                        format!(
                            "{entity} may no longer use file system {fs} at {}",
                            known.root_path
                        ),
                    )
                }
            }
            (known.root, known.read_only)
        };
        if op.is_change() && read_only {
            return failed(libc::EROFS, "this mount may only read");
        }
        let (op, replay) = match op {
            Op::Replay { tag, op } => match record::decode::<Op>("replayed op", &op) {
                Ok(op) => (op, Some(tag)),
                Err(why) => return failed(libc::EINVAL, why),
            },
            op => (op, None),
        };
        if replay.is_some() && (!op.is_change() || matches!(op, Op::Replay { .. })) {
            return failed(libc::EINVAL, "only a change is replayed, once");
        }
        let resend = if op.is_change() {
            state.sessions.completed(session, seq)
        } else {
            None
        };
        let (mut claim, mut named) = (None, None);
        if let Some(tag) = &replay {
            if !sessions::proves(&self.replay_key, session, seq, tag, &record::encode(&op)) {
                return failed(
                    libc::EINVAL,
                    "the replayed change's tag is not one this file system's MDSs gave",
                );
            }
            if let Some(done) = resend {
                return self.changed(session, seq, &op, done, Reply::Done);
            }
            if tag.incarnation == self.incarnations.current {
                // Answered by this MDS, which journals it or stops: the tag stands.
                return Reply::Changed {
                    tag: *tag,
                    reply: Box::new(Reply::Done),
                };
            }
            match self.incarnations.kept(tag) {
                Some(true) => {
                    // In a journal this MDS replayed: entry 0 is within every journal's end.
                    let kept = Completed {
                        entry: 0,
                        ino: tag.ino,
                    };
                    return self.changed(session, seq, &op, kept, Reply::Done);
                }
                Some(false) if self.incarnations.predecessor() != Some(tag.incarnation) => {
                    return failed(
                        libc::EIO,
                        "the change was lost by an MDS before the one this replaced, which \
                         served other changes since",
                    )
                }
                Some(false) if self.replays_until.is_some_and(|t| Instant::now() < t) => {
                    tracing::info!(
                        fs = %fs,
                        session = format!("{session:016x}"),
                        seq,
                        "applying a change the previous MDS answered but did not journal"
                    );
                    let creates = matches!(op, Op::Create { .. } | Op::Symlink { .. });
                    claim = tag.ino.filter(|_| creates);
                    named = tag.ino;
                }
                Some(false) => {
                    return failed(
                        libc::EIO,
                        "the change the previous MDS answered and lost came back after the \
                         window for replays: other mounts may have changed what it changes",
                    )
                }
                None => {
                    return failed(
                        libc::EIO,
                        format!(
                            "the change was answered by MDS instance {:016x}, too many \
                             replacements ago to tell whether its journal kept it",
                            tag.incarnation
                        ),
                    )
                }
            }
        }
        let ctx = Ctx {
            cred: &cred,
            root,
            now_ns: now_ns(),
        };
        let change = loop {
            let decided = match resend {
                Some(done) => answer_resend(&state.ns, &ctx, &op, done.ino),
                None => ops::still_names(&state.ns, &op, named)
                    .and_then(|()| decide(&state.ns, &ctx, &op, claim)),
            };
            match decided {
                Ok(change) => break change,
                Err(Refusal::Missing(Missing::Inos)) => {
                    if let Err(e) = self.reserve_inos(&mut state.ns).await {
                        return failed(libc::EIO, e);
                    }
                }
                Err(Refusal::Missing(missing)) => {
                    if let Err(e) = state.ns.load(missing, &self.meta).await {
                        return failed(libc::EIO, e);
                    }
                }
                Err(Refusal::Errno(errno, why)) => return failed(errno, why),
            }
        };
        let opened = match (&op, &change.reply) {
            (Op::Open { ino, .. }, Reply::Attr(_)) => Some(*ino),
            (Op::Create { open: true, .. }, Reply::Attr(attr)) => Some(attr.ino),
            _ => None,
        };
        // A replayed open was counted when the session reopened with what it holds.
        if let Some(ino) = opened.filter(|_| resend.is_none() && replay.is_none()) {
            state.sessions.open(session, ino);
        }
        let mut done = resend;
        if !change.puts.is_empty() {
            let entry = self
                .journal
                .append(session, seq, change.ino, change.puts.clone());
            state.ns.apply(&change.puts, entry);
            if let Some(dir) = change.new_dir {
                state.ns.new_dir(dir);
            }
            let completed = Completed {
                entry,
                ino: change.ino,
            };
            state.sessions.complete(session, seq, completed);
            done = Some(completed);
            state.sessions.publish(session, change.events);
            if change
                .puts
                .iter()
                .any(|p| matches!(p, Put::Purge { queued: true, .. }))
            {
                self.purge_wake.notify_one();
            }
        }
        // A replay decided anew as no change is in effect as it is: entry 0 of this tenure,
        // within any journal's end.
        if replay.is_some() {
            done = done.or(Some(Completed {
                entry: 0,
                ino: change.ino,
            }));
        }
        // Answered now, before the journal holds it: `Sync` (fsync) waits for that, and the
        // tag lets the mount replay the change should this MDS die first.
        match (done, change.reply) {
            (_, reply @ Reply::Failed { .. }) | (None, reply) => reply,
            (Some(done), reply) => self.changed(session, seq, &op, done, reply),
        }
    }

    /// `reply` to request `seq` of `session`, change `op` that took effect as `done`, with
    /// the tag the mount keeps until a `Sync`.
    fn changed(&self, session: u64, seq: u64, op: &Op, done: Completed, reply: Reply) -> Reply {
        let mut tag = Tag {
            incarnation: self.incarnations.current,
            entry: done.entry,
            ino: done.ino,
            proof: [0; 16],
        };
        tag.proof = sessions::proof(&self.replay_key, session, seq, &tag, &record::encode(op));
        Reply::Changed {
            tag,
            reply: Box::new(reply),
        }
    }

    /// Reserves the next [`INOS_RESERVED`] inode numbers, durably, before any is handed out.
    async fn reserve_inos(&self, ns: &mut Namespace) -> Result<(), String> {
        let puts = vec![Put::NextIno(ns.reserved_ino + INOS_RESERVED)];
        let seq = self.journal.append(0, 0, None, puts.clone());
        ns.apply(&puts, seq);
        self.journal.wait(seq).await
    }

    /// How many sessions are mounted.
    pub async fn sessions(&self) -> usize {
        let state = self.state.lock().await;
        if state.sessions.is_empty() {
            0
        } else {
            state.sessions.list(Instant::now()).len()
        }
    }

    /// Purges up to [`PURGE_BATCH`] unlinked inodes no session holds open: their data
    /// objects, then (journaled) their records.
    async fn purge_round(&self) -> Result<usize, String> {
        let candidates: Vec<(Ino, u64)> = {
            let mut state = self.state.lock().await;
            let inos: Vec<Ino> = state
                .ns
                .purge
                .iter()
                .copied()
                .filter(|ino| !state.sessions.is_open(*ino))
                .take(PURGE_BATCH)
                .collect();
            let mut out = Vec::new();
            for ino in inos {
                let size = loop {
                    match state.ns.inode(ino) {
                        Ok(inode) => break inode.map_or(0, |i| i.attr.size),
                        Err(missing) => state.ns.load(missing, &self.meta).await?,
                    }
                };
                out.push((ino, size));
            }
            out
        };
        for (ino, size) in &candidates {
            self.remove_data(*ino, *size).await?;
        }
        let mut state = self.state.lock().await;
        for (ino, _) in &candidates {
            if state.sessions.is_open(*ino) {
                continue;
            }
            let exists = loop {
                match state.ns.inode(*ino) {
                    Ok(inode) => break inode.is_some(),
                    Err(missing) => state.ns.load(missing, &self.meta).await?,
                }
            };
            let mut puts = vec![Put::Purge {
                ino: *ino,
                queued: false,
            }];
            if exists {
                puts.push(Put::Inode {
                    ino: *ino,
                    inode: None,
                });
            }
            let seq = self.journal.append(0, 0, Some(*ino), puts.clone());
            state.ns.apply(&puts, seq);
            state.sessions.publish(0, vec![Event::Inode(*ino)]);
        }
        Ok(candidates.len())
    }

    async fn remove_data(&self, ino: Ino, size: u64) -> Result<(), String> {
        let known = size.div_ceil(objects::DATA_OBJECT_BYTES);
        let mut index = 0;
        let mut misses = 0;
        while index < known || misses < PURGE_PROBE_OBJECTS {
            let object = objects::data(self.info.id.0, ino, index);
            match self.data.remove(&object).await {
                Ok(()) => misses = 0,
                Err(client::Error::NotFound) => {
                    if index >= known {
                        misses += 1;
                    }
                }
                Err(e) => return Err(format!("purging {object}: {e}")),
            }
            index += 1;
        }
        Ok(())
    }
}

/// The change a request decides, on the namespace as it is.
/// `claim` is the inode number a replayed create was answered with.
fn decide(ns: &Namespace, ctx: &Ctx, op: &Op, claim: Option<Ino>) -> Result<Change, Refusal> {
    match op {
        Op::Lookup { parent, name } => ops::lookup(ns, ctx, *parent, name),
        Op::GetAttr { ino } => ops::getattr(ns, ctx, *ino),
        Op::SetAttr { ino, set } => ops::setattr(ns, ctx, *ino, set),
        Op::Create {
            parent,
            name,
            kind,
            perm,
            rdev,
            exclusive,
            ..
        } => {
            if *kind == Kind::Symlink {
                return Err(Refusal::Errno(
                    libc::EINVAL,
                    "symbolic links come from Symlink".into(),
                ));
            }
            let new = NewInode {
                kind: *kind,
                perm: *perm,
                rdev: *rdev,
                target: None,
                claim,
            };
            ops::create(ns, ctx, *parent, name, new, *exclusive)
        }
        Op::Symlink {
            parent,
            name,
            target,
        } => {
            let new = NewInode {
                kind: Kind::Symlink,
                perm: 0o777,
                rdev: 0,
                target: Some(target),
                claim,
            };
            ops::create(ns, ctx, *parent, name, new, true)
        }
        Op::Link { ino, parent, name } => ops::link(ns, ctx, *ino, *parent, name),
        Op::Unlink { parent, name } => ops::unlink(ns, ctx, *parent, name, false),
        Op::Rmdir { parent, name } => ops::unlink(ns, ctx, *parent, name, true),
        Op::Rename {
            parent,
            name,
            new_parent,
            new_name,
            flags,
        } => ops::rename(
            ns,
            ctx,
            &RenameArgs {
                parent: *parent,
                name,
                new_parent: *new_parent,
                new_name,
                flags: *flags,
            },
        ),
        Op::ReadDir { ino, after, limit } => ops::readdir(ns, ctx, *ino, *after, *limit),
        Op::ReadLink { ino } => ops::readlink(ns, ctx, *ino),
        Op::Open { ino, read, write } => ops::open(ns, ctx, *ino, *read, *write),
        Op::Written { ino, end, mtime_ns } => ops::written(ns, ctx, *ino, *end, *mtime_ns),
        Op::SetXattr {
            ino,
            name,
            value,
            flags,
        } => ops::setxattr(ns, ctx, *ino, name, value, *flags),
        Op::GetXattr { ino, name } => ops::getxattr(ns, ctx, *ino, name),
        Op::ListXattr { ino } => ops::listxattr(ns, ctx, *ino),
        Op::RemoveXattr { ino, name } => ops::removexattr(ns, ctx, *ino, name),
        Op::Mount { .. }
        | Op::Watch { .. }
        | Op::Release { .. }
        | Op::Unmount
        | Op::Sessions
        | Op::Sync
        | Op::Replay { .. } => Err(Refusal::Errno(
            libc::EINVAL,
            "handled before deciding".into(),
        )),
    }
}

/// The answer to a change resent after it took effect: the inode it made or changed as it is
/// now (once its shard is loaded), or done.
fn answer_resend(ns: &Namespace, ctx: &Ctx, op: &Op, ino: Option<Ino>) -> Result<Change, Refusal> {
    let wants_attr = matches!(
        op,
        Op::SetAttr { .. } | Op::Create { .. } | Op::Symlink { .. } | Op::Link { .. }
    );
    let reply = match ino.filter(|_| wants_attr) {
        Some(ino) => match ops::getattr(ns, ctx, ino) {
            Ok(change) => change.reply,
            Err(Refusal::Missing(missing)) => return Err(Refusal::Missing(missing)),
            Err(Refusal::Errno(errno, why)) => failed(errno, why),
        },
        None => Reply::Done,
    };
    Ok(Change::read(reply))
}

/// Reads the journal at start: applies what the objects lack, and returns the journal to
/// continue with and every entry it still holds.
async fn replay(meta: &Pool, names: &Names) -> Result<(Journal, Vec<Entry>), String> {
    let object = names.journal();
    let applied = match meta.attrs(&object).await {
        Ok(attrs) => match attrs.get(APPLIED_ATTR) {
            Some(value) => record::be_u64("applied", value)?,
            None => 0,
        },
        Err(client::Error::NotFound) => 0,
        Err(e) => return Err(format!("reading {object}: {e}")),
    };
    let mut entries = Vec::new();
    for (key, value) in namespace::list_all(meta, &object).await? {
        let seq = record::be_u64("journal key", &key)?;
        let entry: Entry = record::decode("journal entry", &value)?;
        if entry.seq != seq {
            return Err(format!("journal entry {seq} says it is {}", entry.seq));
        }
        entries.push(entry);
    }
    let pending: Vec<&Entry> = entries.iter().filter(|e| e.seq > applied).collect();
    let last = entries.last().map_or(applied, |e| e.seq.max(applied));
    if !pending.is_empty() {
        tracing::info!(
            fs = names.fs_id,
            entries = pending.len(),
            "replaying the journal"
        );
        journal::apply_to_pool(meta, names, pending.iter().flat_map(|e| e.puts.iter())).await?;
        meta.set_attr(&object, APPLIED_ATTR, &last.to_be_bytes())
            .await
            .map_err(|e| format!("recording the replay: {e}"))?;
    }
    let oldest_kept = entries.first().map_or(last + 1, |e| e.seq);
    Ok((
        Journal::new(meta.clone(), *names, last, last, oldest_kept),
        entries,
    ))
}

async fn purge_loop(server: std::sync::Weak<FsServer>) {
    loop {
        let Some(strong) = server.upgrade() else {
            return;
        };
        let wait = async {
            tokio::select! {
                _ = strong.purge_wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
        };
        wait.await;
        if strong.started.elapsed() < RECLAIM_GRACE {
            let left = RECLAIM_GRACE - strong.started.elapsed();
            drop(strong);
            tokio::time::sleep(left).await;
            continue;
        }
        match strong.purge_round().await {
            Ok(n) if n == PURGE_BATCH => strong.purge_wake.notify_one(),
            Ok(_) => {}
            Err(e) => tracing::warn!(fs = %strong.info.name, error = %e, "purging unlinked files"),
        }
    }
}

async fn expire_loop(server: std::sync::Weak<FsServer>) {
    loop {
        tokio::time::sleep(Duration::from_millis(LEASE_MS * 10)).await;
        let Some(strong) = server.upgrade() else {
            return;
        };
        if strong.state.lock().await.sessions.expire(Instant::now()) > 0 {
            strong.purge_wake.notify_one();
        }
        crate::metrics::sessions(&strong.info.name, strong.sessions().await);
    }
}
