//! A mount's session with its file system's metadata daemon: requests with their sequence
//! numbers, sent again to whichever MDS the cluster map names when the link breaks or the MDS
//! is replaced, and the session reopened (with what the mount holds open) when the MDS does
//! not know it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use client::Cluster;

use crate::proto::{Attr, Cred, Ino, Op, Reply, Request};
use crate::Errno;

/// How long a request keeps trying (the MDS restarting, its file system replaying its
/// journal) before it fails with EIO.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

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
        self.opens.lock().unwrap_or_else(|p| p.into_inner())
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

    async fn send(&self, cred: &Cred, op: Op, remount: bool) -> Result<Reply, (i32, String)> {
        let request = Request {
            fs: self.fs.clone(),
            session: self.session,
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            cred: cred.clone(),
            op,
        };
        let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        let mut pause = Duration::from_millis(20);
        loop {
            let why = match self.mds() {
                None => format!("file system {} has no metadata daemon", self.fs),
                Some((entity, addr)) => match self
                    .cluster
                    .call_daemon::<Request, Reply>(&entity, &addr, &request, Bytes::new())
                    .await
                {
                    Ok((Reply::Failed { errno, why }, _)) => return Err((errno, why)),
                    Ok((Reply::StaleSession, _)) if remount => {
                        tracing::info!(fs = %self.fs, "the MDS did not know this session; reopening it");
                        match Box::pin(self.open_session()).await {
                            Ok(_) => continue,
                            Err((errno, why)) => return Err((errno, why)),
                        }
                    }
                    Ok((Reply::NotHere(why), _)) => why,
                    Ok((reply, _)) => return Ok(reply),
                    Err(client::Error::Unreachable(why)) => why,
                    Err(client::Error::Denied(why)) => return Err((libc::EACCES, why)),
                    Err(e) => return Err((libc::EIO, e.to_string())),
                },
            };
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

    /// The MDS the map names for this file system: its entity and address.
    fn mds(&self) -> Option<(String, String)> {
        let map = self.cluster.map();
        let mds = map.filesystems.get(&self.fs)?.mds.as_ref()?;
        Some((mds.name.clone(), mds.addr.clone()))
    }
}
