//! A mount's session with its file system's metadata daemon: requests with their sequence
//! numbers, sent again to whichever MDS the cluster map names when the link breaks or the MDS
//! is replaced, and the session reopened (with what the mount holds open) when the MDS does
//! not know it. The changes the MDS answered are kept until a `Sync` covers them, and a
//! reopened session replays them before anything else is sent: the new MDS applies again
//! those its predecessor's journal lost, so an MDS killed between an answer and its journal
//! write loses nothing a mount was told.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use client::Cluster;

use crate::proto::{Attr, Cred, Ino, Op, Reply, Request, Tag};
use crate::{lock, Errno};

/// How long a request keeps trying (the MDS restarting, its file system replaying its
/// journal) before it fails with EIO.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Answered changes kept for replay at most; past it, a change waits for a `Sync` first.
/// Half the answers an MDS remembers per session, so a resend is never mistaken for new.
pub const UNSAFE_MAX: usize = 512;

/// What the MDS said when the session opened.
#[derive(Clone, Debug)]
pub struct Mounted {
    pub root: Attr,
    pub fs_id: u32,
    pub data_pool: String,
    pub object_bytes: u64,
    pub read_only: bool,
}

pub struct MdsLink {
    cluster: Cluster,
    fs: String,
    path: String,
    read_only: bool,
    session: u64,
    seq: AtomicU64,
    /// What this mount holds open, told to a new MDS when the session reopens.
    opens: Mutex<HashMap<Ino, u32>>,
    /// Changes the MDS answered that no `Sync` has covered yet, by sequence number.
    unsafe_changes: Mutex<BTreeMap<u64, Unsafe>>,
    /// The inodes of changes a new MDS could not apply again: their `fsync` fails (EIO).
    lost: Mutex<HashSet<Ino>>,
    /// The MDSs that answered this mount, in the order it met them: a replay goes in the
    /// order the MDSs applied the changes (by MDS, then journal entry).
    met: Mutex<Vec<u64>>,
    /// Counts reopens. Requests hold it shared while they are sent and a reopen holds it
    /// alone, so nothing reaches a new MDS before the replays.
    reopens: tokio::sync::RwLock<u64>,
    /// The session reopened and not every change was replayed yet (the link failed
    /// meanwhile): every request finishes the replay first.
    unreplayed: AtomicBool,
}

/// How a replay ended.
enum Replayed {
    All,
    /// The MDS does not know the session (it was replaced again): reopen first.
    Stale,
    /// The link failed: try again.
    Cut,
}

/// An answered change, as it would be replayed.
struct Unsafe {
    cred: Cred,
    op: Op,
    tag: Tag,
}

/// The inodes a change changes (besides the one its answer names): what fails to `fsync`
/// if it is lost.
fn changed_inodes(op: &Op) -> impl Iterator<Item = Ino> {
    let (first, second) = match op {
        Op::SetAttr { ino, .. }
        | Op::Written { ino, .. }
        | Op::SetXattr { ino, .. }
        | Op::RemoveXattr { ino, .. } => (Some(*ino), None),
        Op::Create { parent, .. }
        | Op::Symlink { parent, .. }
        | Op::Unlink { parent, .. }
        | Op::Rmdir { parent, .. } => (Some(*parent), None),
        Op::Link { ino, parent, .. } => (Some(*ino), Some(*parent)),
        Op::Rename {
            parent, new_parent, ..
        } => (Some(*parent), Some(*new_parent)),
        _ => (None, None),
    };
    first.into_iter().chain(second)
}

impl MdsLink {
    /// Opens a session on file system `fs`, rooted at `path`.
    pub async fn mount(
        cluster: Cluster,
        fs: &str,
        path: &str,
        read_only: bool,
    ) -> Result<(MdsLink, Mounted), String> {
        if !cluster.map().filesystems.contains_key(fs) {
            cluster
                .wait_for_epoch(cluster.map().epoch + 1)
                .await
                .map_err(|e| e.to_string())?;
            if !cluster.map().filesystems.contains_key(fs) {
                return Err(format!("there is no file system {fs:?} (coffer fs ls)"));
            }
        }
        let link = MdsLink {
            session: cluster.instance(),
            cluster,
            fs: fs.into(),
            path: path.into(),
            read_only,
            seq: AtomicU64::new(1),
            opens: Mutex::new(HashMap::new()),
            unsafe_changes: Mutex::new(BTreeMap::new()),
            lost: Mutex::new(HashSet::new()),
            met: Mutex::new(Vec::new()),
            reopens: tokio::sync::RwLock::new(0),
            unreplayed: AtomicBool::new(false),
        };
        let mounted = link.open_session().await.map_err(|(errno, why)| {
            format!(
                "mounting {fs}:{path}: {why} ({})",
                std::io::Error::from_raw_os_error(errno)
            )
        })?;
        Ok((link, mounted))
    }

    pub fn session(&self) -> u64 {
        self.session
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    fn opens(&self) -> std::sync::MutexGuard<'_, HashMap<Ino, u32>> {
        lock(&self.opens)
    }

    fn unsafe_changes(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Unsafe>> {
        lock(&self.unsafe_changes)
    }

    pub fn opened(&self, ino: Ino) {
        *self.opens().entry(ino).or_default() += 1;
    }

    /// Drops one open of `ino`; returns whether it was the last.
    pub fn closed(&self, ino: Ino) -> bool {
        let mut opens = self.opens();
        match opens.get_mut(&ino) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                opens.remove(&ino);
                true
            }
            None => false,
        }
    }

    async fn open_session(&self) -> Result<Mounted, (i32, String)> {
        let opens: Vec<Ino> = self
            .opens()
            .iter()
            .flat_map(|(ino, n)| std::iter::repeat_n(*ino, *n as usize))
            .collect();
        let op = Op::Mount {
            path: self.path.clone(),
            read_only: self.read_only,
            opens,
        };
        match self.send(&Cred::default(), op, false).await? {
            Reply::Mounted {
                root,
                fs_id,
                data_pool,
                object_bytes,
                read_only,
            } => Ok(Mounted {
                root,
                fs_id,
                data_pool,
                object_bytes,
                read_only,
            }),
            other => Err((libc::EIO, format!("unexpected reply {other:?}"))),
        }
    }

    /// Sends `op` as `cred` until an MDS answers it; a failure the MDS gives is an errno.
    pub async fn call(&self, cred: &Cred, op: Op) -> Result<Reply, Errno> {
        self.send(cred, op, true).await.map_err(|(errno, why)| {
            tracing::debug!(errno, %why, "the MDS refused");
            Errno(errno)
        })
    }

    /// Every change the MDS answered is durable: in its journal, or, if it was replaced, in
    /// its successor's after the replay. Fails (EIO) for inode `ino` (for any, without one)
    /// if a change of it could not be applied again: that change is in no journal.
    pub async fn sync(&self, cred: &Cred, ino: Option<Ino>) -> Result<(), Errno> {
        self.settle(cred).await?;
        let lost = lock(&self.lost);
        match ino {
            Some(ino) if !lost.contains(&ino) => Ok(()),
            None if lost.is_empty() => Ok(()),
            _ => Err(Errno(libc::EIO)),
        }
    }

    /// Has the MDS's journal hold every change it answered, and forgets them.
    async fn settle(&self, cred: &Cred) -> Result<(), Errno> {
        let covered: Vec<u64> = self.unsafe_changes().keys().copied().collect();
        self.call(cred, Op::Sync).await?;
        let mut pending = self.unsafe_changes();
        for seq in covered {
            pending.remove(&seq);
        }
        Ok(())
    }

    async fn send(&self, cred: &Cred, op: Op, remount: bool) -> Result<Reply, (i32, String)> {
        if remount && op.is_change() && self.unsafe_changes().len() >= UNSAFE_MAX {
            Box::pin(self.settle(&Cred::default()))
                .await
                .map_err(|Errno(errno)| (errno, "syncing the answered changes".to_string()))?;
        }
        let request = Request {
            fs: self.fs.clone(),
            session: self.session,
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            cred: cred.clone(),
            op,
        };
        match self.send_request(&request, remount).await? {
            Reply::Failed { errno, why } => Err((errno, why)),
            Reply::Changed { reply, .. } => Ok(*reply),
            reply => Ok(reply),
        }
    }

    /// Sends `request` until an MDS answers it (a refusal too); the error is the link's.
    /// With `remount`, a session the MDS does not know is reopened (and replayed) first, and
    /// an answered change is kept for replay.
    async fn send_request(&self, request: &Request, remount: bool) -> Result<Reply, (i32, String)> {
        let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        let mut pause = Duration::from_millis(20);
        loop {
            if remount && self.unreplayed.load(Ordering::SeqCst) {
                let _alone = self.reopens.write().await;
                if !Box::pin(self.replay_pending()).await {
                    let why = "the changes the replaced MDS answered are not all replayed yet";
                    if tokio::time::Instant::now() >= deadline {
                        return Err((libc::EIO, why.into()));
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                    continue;
                }
            }
            // A watch may be held long and orders nothing: it does not hold a reopen back.
            let (reopens, sending) = if remount {
                let gate = self.reopens.read().await;
                if self.unreplayed.load(Ordering::SeqCst) {
                    // A reopen left its replay unfinished while this waited for the gate.
                    continue;
                }
                let reopens = *gate;
                (
                    reopens,
                    (!matches!(request.op, Op::Watch { .. })).then_some(gate),
                )
            } else {
                (0, None)
            };
            let why = match self.mds() {
                None => format!("file system {} has no metadata daemon", self.fs),
                Some((entity, addr)) => match self
                    .cluster
                    .call_daemon::<Request, Reply>(&entity, &addr, request, Bytes::new())
                    .await
                {
                    Ok((Reply::StaleSession, _)) if remount => {
                        drop(sending);
                        Box::pin(self.reopen(reopens)).await?;
                        continue;
                    }
                    Ok((Reply::NotHere(why), _)) => why,
                    Ok((reply, _)) => {
                        // Kept while the gate is held: a reopen after this replays it.
                        if let (true, Reply::Changed { tag, .. }) = (remount, &reply) {
                            let answered = Unsafe {
                                cred: request.cred.clone(),
                                op: request.op.clone(),
                                tag: *tag,
                            };
                            self.unsafe_changes().insert(request.seq, answered);
                            self.met(tag.incarnation);
                        }
                        return Ok(reply);
                    }
                    Err(client::Error::Unreachable(why)) => why,
                    Err(client::Error::Denied(why)) => return Err((libc::EACCES, why)),
                    Err(e) => return Err((libc::EIO, e.to_string())),
                },
            };
            // Not held while waiting to try again: a reopen may need to get in.
            drop(sending);
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(fs = %self.fs, %why, "gave up reaching the metadata daemon");
                return Err((libc::EIO, why));
            }
            if pause >= Duration::from_millis(500) {
                tracing::info!(fs = %self.fs, %why, "waiting for the metadata daemon");
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            let epoch = self.cluster.map().epoch;
            if let Err(e) = self.cluster.wait_for_epoch(epoch + 1).await {
                tracing::debug!(error = %e, "refreshing the map");
            }
        }
    }

    /// Reopens the session on an MDS that did not know it and replays the changes no `Sync`
    /// covered, unless another request did so since reopen number `seen`.
    async fn reopen(&self, seen: u64) -> Result<(), (i32, String)> {
        let mut reopens = self.reopens.write().await;
        if *reopens != seen {
            return Ok(());
        }
        tracing::info!(fs = %self.fs, "the MDS did not know this session; reopening it");
        self.open_session().await?;
        *reopens += 1;
        self.unreplayed.store(true, Ordering::SeqCst);
        self.replay_pending().await;
        Ok(())
    }

    /// Replays what the reopened session has not replayed yet, reopening it again if the
    /// MDS was replaced meanwhile; returns whether nothing is left. The caller holds the gate
    /// alone.
    async fn replay_pending(&self) -> bool {
        for _ in 0..2 {
            if !self.unreplayed.load(Ordering::SeqCst) {
                return true;
            }
            match self.replay().await {
                Replayed::All => {
                    self.unreplayed.store(false, Ordering::SeqCst);
                    return true;
                }
                Replayed::Stale => {
                    if let Err((errno, why)) = self.open_session().await {
                        tracing::info!(fs = %self.fs, errno, %why, "reopening the session to replay");
                        return false;
                    }
                }
                Replayed::Cut => return false,
            }
        }
        false
    }

    /// Sends the changes no `Sync` covered again, in the order the MDSs applied them, with
    /// their tags; the MDS applies those its predecessor's journal lost. A change the MDS
    /// refuses is lost: its inodes' `fsync` fails from then on. One the MDS already has is
    /// sent again harmlessly if the replay is cut short and starts over.
    async fn replay(&self) -> Replayed {
        let mut pending: Vec<(u64, Cred, Op, Tag)> = self
            .unsafe_changes()
            .iter()
            .map(|(seq, u)| (*seq, u.cred.clone(), u.op.clone(), u.tag))
            .collect();
        {
            let met = lock(&self.met);
            let rank = |incarnation| met.iter().position(|m| *m == incarnation);
            pending.sort_by_key(|(_, _, _, tag)| (rank(tag.incarnation), tag.entry));
        }
        let mut lost = 0;
        for (seq, cred, op, tag) in &pending {
            let request = Request {
                fs: self.fs.clone(),
                session: self.session,
                seq: *seq,
                cred: cred.clone(),
                op: Op::replay(*tag, op),
            };
            match self.send_request(&request, false).await {
                Ok(Reply::Changed { tag, .. }) => {
                    if let Some(change) = self.unsafe_changes().get_mut(seq) {
                        change.tag = tag;
                    }
                    self.met(tag.incarnation);
                }
                Ok(Reply::Failed { errno, why }) => {
                    tracing::warn!(fs = %self.fs, seq, errno, %why, ?op, "a change the replaced MDS answered could not be applied again; its fsync fails");
                    self.unsafe_changes().remove(seq);
                    lock(&self.lost).extend(changed_inodes(op).chain(tag.ino));
                    lost += 1;
                }
                Ok(Reply::StaleSession) => return Replayed::Stale,
                // Applied, and nothing to keep (a change decided anew as none).
                Ok(_) => {}
                Err((errno, why)) => {
                    tracing::info!(fs = %self.fs, errno, %why, "the replay was cut short");
                    return Replayed::Cut;
                }
            }
        }
        if !pending.is_empty() {
            tracing::info!(fs = %self.fs, replayed = pending.len(), lost, "replayed the changes no sync had covered");
        }
        Replayed::All
    }

    /// Notes MDS `incarnation` as met, after those met before.
    fn met(&self, incarnation: u64) {
        let mut met = lock(&self.met);
        if !met.contains(&incarnation) {
            met.push(incarnation);
        }
    }

    /// The MDS the map names for this file system: its entity and address.
    fn mds(&self) -> Option<(String, String)> {
        let map = self.cluster.map();
        let mds = map.filesystems.get(&self.fs)?.mds.as_ref()?;
        Some((mds.name.clone(), mds.addr.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_change_names_the_inodes_whose_fsync_must_fail() {
        let inodes = |op: Op| changed_inodes(&op).collect::<Vec<_>>();
        let rename = Op::Rename {
            parent: 2,
            name: b"a".to_vec(),
            new_parent: 3,
            new_name: b"b".to_vec(),
            flags: 0,
        };
        assert_eq!(inodes(rename), [2, 3]);
        let link = Op::Link {
            ino: 9,
            parent: 4,
            name: b"l".to_vec(),
        };
        assert_eq!(inodes(link), [9, 4]);
        let written = Op::Written {
            ino: 7,
            end: 10,
            mtime_ns: 0,
        };
        assert_eq!(inodes(written), [7]);
        let unlink = Op::Unlink {
            parent: 5,
            name: b"x".to_vec(),
        };
        assert_eq!(inodes(unlink), [5]);
        assert!(inodes(Op::Sync).is_empty());
    }
}
