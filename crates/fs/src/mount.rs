//! A mounted file system, independent of FUSE: namespace operations go to the MDS through
//! the session, file contents to the data pool, with write-back and readahead per open file.
//!
//! Consistency (docs/design/fs.md): within one mount, what the MDS orders (every namespace
//! change) and what this mount holds (its dirty bytes) are what reads see. Between mounts,
//! close-to-open: `close` and `fsync` send the dirty bytes and have the MDS record the size
//! and time before they return, and `open` asks the MDS for the attributes and drops this
//! mount's cached contents if another mount changed the file.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;

use crate::data::{Budget, FileData, Objects};
use crate::link::{MdsLink, Mounted};
use crate::proto::{Attr, Cred, DirEntry, Event, Ino, Kind, Op, Reply, SetAttr, READDIR_PAGE_MAX};
use crate::readahead::{Readahead, Stream};
use crate::{lock, Errno};

/// Inodes whose last-seen attributes a mount remembers (to tell whether another mount
/// changed a file it opens again); past this, the memory starts over.
const SEEN_MAX: usize = 1 << 18;

/// One open file.
struct Handle {
    ino: Ino,
    write: bool,
    data: Option<Arc<FileData>>,
    stream: Mutex<Stream>,
}

/// What `open` tells the kernel.
pub struct Opened {
    pub fh: u64,
    /// The kernel may keep what it cached of the file: nobody changed it since.
    pub keep_cache: bool,
    /// The kernel's attributes for the file are stale: drop them.
    pub changed: bool,
}

pub struct Mount {
    link: MdsLink,
    objects: Objects,
    readahead: Readahead,
    pub read_only: bool,
    pub root: Attr,
    budget: Arc<Budget>,
    files: Mutex<HashMap<Ino, Arc<FileData>>>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_fh: AtomicU64,
    /// The (mtime, size) this mount last saw of each file.
    seen: Mutex<HashMap<Ino, (i64, u64)>>,
}

pub fn now_ns() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_nanos()).unwrap_or(i64::MAX)
}

fn unexpected(reply: Reply) -> Errno {
    tracing::warn!(?reply, "unexpected reply from the MDS");
    Errno(libc::EIO)
}

impl Mount {
    /// Opens a session on file system `fs` (at `path`) and finds its data pool.
    pub async fn start(
        cluster: client::Cluster,
        fs: &str,
        path: &str,
        read_only: bool,
        readahead: Readahead,
    ) -> Result<Mount, String> {
        let (link, mounted) = MdsLink::mount(cluster, fs, path, read_only).await?;
        let Mounted {
            root,
            fs_id,
            data_pool,
            object_bytes,
            read_only,
        } = mounted;
        let pool = link
            .cluster()
            .pool(&data_pool)
            .await
            .map_err(|e| format!("the data pool {data_pool}: {e}"))?;
        Ok(Mount {
            link,
            objects: Objects {
                pool,
                fs_id,
                object_bytes,
            },
            readahead,
            read_only,
            root,
            budget: Arc::new(Budget::default()),
            files: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            seen: Mutex::new(HashMap::new()),
        })
    }

    pub fn cluster(&self) -> &client::Cluster {
        self.link.cluster()
    }

    async fn call(&self, cred: &Cred, op: Op) -> Result<Reply, Errno> {
        self.link.call(cred, op).await
    }

    async fn call_attr(&self, cred: &Cred, op: Op) -> Result<Attr, Errno> {
        match self.call(cred, op).await? {
            Reply::Attr(attr) => Ok(self.local(attr)),
            other => Err(unexpected(other)),
        }
    }

    async fn call_done(&self, cred: &Cred, op: Op) -> Result<(), Errno> {
        match self.call(cred, op).await? {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// `attr` as this mount sees it: with the size and time of its own unrecorded writes, if
    /// it has any.
    fn local(&self, mut attr: Attr) -> Attr {
        if let Some(data) = lock(&self.files).get(&attr.ino) {
            if data.has_unflushed() {
                attr.size = attr.size.max(data.size());
                if let Some(mtime) = data.local_mtime() {
                    attr.mtime_ns = mtime;
                }
            } else {
                // Nothing of this mount's is pending: the MDS's size is the file's (another
                // mount may have grown or cut it).
                data.set_size(attr.size);
            }
        }
        let mut seen = lock(&self.seen);
        if seen.len() >= SEEN_MAX {
            seen.clear();
        }
        seen.insert(attr.ino, (attr.mtime_ns, attr.size));
        attr
    }

    pub async fn lookup(&self, cred: &Cred, parent: Ino, name: &[u8]) -> Result<Attr, Errno> {
        let op = Op::Lookup {
            parent,
            name: name.to_vec(),
        };
        self.call_attr(cred, op).await
    }

    pub async fn getattr(&self, cred: &Cred, ino: Ino) -> Result<Attr, Errno> {
        self.call_attr(cred, Op::GetAttr { ino }).await
    }

    pub async fn setattr(&self, cred: &Cred, ino: Ino, set: SetAttr) -> Result<Attr, Errno> {
        let data = lock(&self.files).get(&ino).cloned();
        if let Some(data) = &data {
            // Bytes still to send must not land after (and so undo) a size or time set now.
            self.flush_file(cred, data).await?;
        }
        if let Some(size) = set.size {
            let current = self.getattr(cred, ino).await?;
            if current.kind == Kind::File {
                self.objects.truncate(ino, current.size, size).await?;
            }
            if let Some(data) = &data {
                data.reset(size);
            }
        }
        let attr = self.call_attr(cred, Op::SetAttr { ino, set }).await?;
        if let Some(data) = &data {
            data.set_size(attr.size);
        }
        Ok(attr)
    }

    /// Creates a directory, device, FIFO or socket (or a file not opened): the name must
    /// be free.
    pub async fn create(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        kind: Kind,
        perm: u16,
        rdev: u32,
    ) -> Result<Attr, Errno> {
        let op = Op::Create {
            parent,
            name: name.to_vec(),
            kind,
            perm,
            rdev,
            exclusive: true,
            open: false,
        };
        self.call_attr(cred, op).await
    }

    /// Creates (or, without `exclusive`, opens an existing) file and opens it.
    pub async fn create_open(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        perm: u16,
        exclusive: bool,
        write: bool,
    ) -> Result<(Attr, Opened), Errno> {
        let op = Op::Create {
            parent,
            name: name.to_vec(),
            kind: Kind::File,
            perm,
            rdev: 0,
            exclusive,
            open: true,
        };
        let attr = self.call_attr(cred, op).await?;
        let opened = self.opened(&attr, write, false);
        Ok((attr, opened))
    }

    pub async fn symlink(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        target: &[u8],
    ) -> Result<Attr, Errno> {
        let op = Op::Symlink {
            parent,
            name: name.to_vec(),
            target: target.to_vec(),
        };
        self.call_attr(cred, op).await
    }

    pub async fn link(
        &self,
        cred: &Cred,
        ino: Ino,
        parent: Ino,
        name: &[u8],
    ) -> Result<Attr, Errno> {
        let op = Op::Link {
            ino,
            parent,
            name: name.to_vec(),
        };
        self.call_attr(cred, op).await
    }

    pub async fn unlink(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        dir: bool,
    ) -> Result<(), Errno> {
        let name = name.to_vec();
        let op = if dir {
            Op::Rmdir { parent, name }
        } else {
            Op::Unlink { parent, name }
        };
        self.call_done(cred, op).await
    }

    pub async fn rename(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        new_parent: Ino,
        new_name: &[u8],
        flags: u32,
    ) -> Result<(), Errno> {
        let op = Op::Rename {
            parent,
            name: name.to_vec(),
            new_parent,
            new_name: new_name.to_vec(),
            flags,
        };
        self.call_done(cred, op).await
    }

    pub async fn readlink(&self, cred: &Cred, ino: Ino) -> Result<Vec<u8>, Errno> {
        match self.call(cred, Op::ReadLink { ino }).await? {
            Reply::Target(target) => Ok(target),
            other => Err(unexpected(other)),
        }
    }

    /// A page of directory `ino`'s entries after cookie `after`; `true` if more follow.
    pub async fn readdir(
        &self,
        cred: &Cred,
        ino: Ino,
        after: u64,
    ) -> Result<(Vec<DirEntry>, bool), Errno> {
        let op = Op::ReadDir {
            ino,
            after,
            limit: READDIR_PAGE_MAX,
        };
        match self.call(cred, op).await? {
            Reply::Entries { mut entries, more } => {
                for entry in &mut entries {
                    entry.attr = self.local(entry.attr.clone());
                }
                Ok((entries, more))
            }
            other => Err(unexpected(other)),
        }
    }

    /// Opens `ino`: the MDS checks the caller may, and the file's attributes as the MDS
    /// holds them tell whether another mount changed it since this one last looked.
    pub async fn open(
        &self,
        cred: &Cred,
        ino: Ino,
        read: bool,
        write: bool,
    ) -> Result<Opened, Errno> {
        let before = lock(&self.seen).get(&ino).copied();
        let op = Op::Open { ino, read, write };
        let attr = match self.call(cred, op).await? {
            Reply::Attr(attr) => attr,
            other => return Err(unexpected(other)),
        };
        let changed = before.is_some_and(|seen| seen != (attr.mtime_ns, attr.size));
        let attr = self.local(attr);
        Ok(self.opened(&attr, write, changed))
    }

    fn opened(&self, attr: &Attr, write: bool, changed: bool) -> Opened {
        self.link.opened(attr.ino);
        let data = (attr.kind == Kind::File).then(|| {
            let mut files = lock(&self.files);
            let data = files
                .entry(attr.ino)
                .or_insert_with(|| {
                    Arc::new(FileData::new(
                        attr.ino,
                        self.objects.clone(),
                        self.budget.clone(),
                        attr.size,
                    ))
                })
                .clone();
            if changed && !data.has_unflushed() {
                data.reset(attr.size);
            } else {
                data.set_size(attr.size.max(data.size()));
            }
            data
        });
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let handle = Handle {
            ino: attr.ino,
            write,
            data,
            stream: Mutex::new(Stream::new(self.readahead)),
        };
        lock(&self.handles).insert(fh, Arc::new(handle));
        Opened {
            fh,
            keep_cache: !changed,
            changed,
        }
    }

    fn handle(&self, fh: u64) -> Result<Arc<Handle>, Errno> {
        lock(&self.handles)
            .get(&fh)
            .cloned()
            .ok_or(Errno(libc::EBADF))
    }

    fn file(&self, fh: u64) -> Result<(Arc<Handle>, Arc<FileData>), Errno> {
        let handle = self.handle(fh)?;
        let data = handle.data.clone().ok_or(Errno(libc::EISDIR))?;
        Ok((handle, data))
    }

    pub async fn read(&self, fh: u64, offset: u64, len: u64) -> Result<Bytes, Errno> {
        let (handle, data) = self.file(fh)?;
        let size = data.size();
        if offset >= size || len == 0 {
            return Ok(Bytes::new());
        }
        let len = len.min(size - offset);
        let plan = lock(&handle.stream).on_read(offset, len, size);
        if let Some(ahead) = plan.ahead {
            data.fetch_ahead(ahead.start, ahead.end);
        }
        data.read(offset, len, plan.fetch.end).await
    }

    pub async fn write(&self, fh: u64, offset: u64, bytes: &[u8]) -> Result<u32, Errno> {
        let (handle, data) = self.file(fh)?;
        if !handle.write || self.read_only {
            return Err(Errno(libc::EBADF));
        }
        self.budget.wait_room().await;
        if data.write(offset, bytes, now_ns()) {
            // Sent in the background; a failure is reported by the next fsync or close, and
            // the size recorded there.
            tokio::spawn(async move {
                let _ = data.flush().await;
            });
        }
        Ok(bytes.len() as u32)
    }

    /// Sends `data`'s dirty bytes and has the MDS record the size and time; says if any flush
    /// since the last one reported failed.
    async fn flush_file(&self, cred: &Cred, data: &FileData) -> Result<(), Errno> {
        let flushed = data.flush().await;
        if let Some(error) = data.take_error() {
            return Err(error);
        }
        let Some(flushed) = flushed? else {
            return Ok(());
        };
        let op = Op::Written {
            ino: data.ino,
            end: flushed.end,
            mtime_ns: flushed.mtime_ns,
        };
        // The file's inode is held while it is open: it is missing only if its creation was
        // lost with a replaced MDS, which for this file is an I/O error.
        self.call_done(cred, op).await.map_err(|e| match e {
            Errno(libc::ENOENT) => Errno(libc::EIO),
            e => e,
        })?;
        data.recorded(&flushed);
        Ok(())
    }

    /// `close`: what this mount wrote to the file is in the data pool and its size and time
    /// are with the MDS (close-to-open).
    pub async fn flush(&self, cred: &Cred, fh: u64) -> Result<(), Errno> {
        match self.handle(fh)?.data.clone() {
            Some(data) => self.flush_file(cred, &data).await,
            None => Ok(()),
        }
    }

    /// `fsync`: as `close`, and durable: the MDS's journal holds every change it answered
    /// (the file's creation, its size) before this returns.
    pub async fn fsync(&self, cred: &Cred, fh: u64) -> Result<(), Errno> {
        let ino = self.handle(fh)?.ino;
        self.flush(cred, fh).await?;
        self.sync(cred, Some(ino)).await
    }

    /// Every namespace change the MDS answered is durable (`fsync` of directory `ino`, or of
    /// the whole mount without one).
    pub async fn sync(&self, cred: &Cred, ino: Option<Ino>) -> Result<(), Errno> {
        self.link.sync(cred, ino).await
    }

    /// The last close of a handle: flushes once more (writes through a shared mapping may
    /// come after `close`) and, for the file's last handle here, tells the MDS.
    pub async fn release(&self, cred: &Cred, fh: u64) -> Result<(), Errno> {
        let Some(handle) = lock(&self.handles).remove(&fh) else {
            return Err(Errno(libc::EBADF));
        };
        let flushed = match &handle.data {
            Some(data) => self.flush_file(cred, data).await,
            None => Ok(()),
        };
        if self.link.closed(handle.ino) {
            let still_open = lock(&self.handles).values().any(|h| h.ino == handle.ino);
            if !still_open {
                let mut files = lock(&self.files);
                if files.get(&handle.ino).is_some_and(|d| !d.has_unflushed()) {
                    files.remove(&handle.ino);
                }
            }
            self.call_done(cred, Op::Release { ino: handle.ino })
                .await?;
        }
        flushed
    }

    /// Flushes every file with dirty bytes older than the write-back delay (or all of
    /// them, at unmount).
    pub async fn writeback(&self, all: bool) {
        let now = Instant::now();
        let due: Vec<Arc<FileData>> = lock(&self.files)
            .values()
            .filter(|d| {
                if all {
                    d.has_unflushed()
                } else {
                    d.is_stale(now)
                }
            })
            .cloned()
            .collect();
        for data in due {
            // A failure stays with the file for its next fsync or close; at unmount there
            // is none, and the sizes are recorded now.
            let flushed = if all {
                self.flush_file(&Cred::default(), &data).await
            } else {
                data.flush().await.map(|_| ())
            };
            if let Err(e) = flushed {
                tracing::warn!(ino = data.ino, errno = e.0, "write-back failed");
            }
        }
    }

    pub async fn setxattr(
        &self,
        cred: &Cred,
        ino: Ino,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> Result<(), Errno> {
        let op = Op::SetXattr {
            ino,
            name: name.to_vec(),
            value: value.to_vec(),
            flags,
        };
        self.call_done(cred, op).await
    }

    pub async fn getxattr(&self, cred: &Cred, ino: Ino, name: &[u8]) -> Result<Vec<u8>, Errno> {
        let op = Op::GetXattr {
            ino,
            name: name.to_vec(),
        };
        match self.call(cred, op).await? {
            Reply::Value(value) => Ok(value),
            other => Err(unexpected(other)),
        }
    }

    pub async fn listxattr(&self, cred: &Cred, ino: Ino) -> Result<Vec<Vec<u8>>, Errno> {
        match self.call(cred, Op::ListXattr { ino }).await? {
            Reply::Names(names) => Ok(names),
            other => Err(unexpected(other)),
        }
    }

    pub async fn removexattr(&self, cred: &Cred, ino: Ino, name: &[u8]) -> Result<(), Errno> {
        let op = Op::RemoveXattr {
            ino,
            name: name.to_vec(),
        };
        self.call_done(cred, op).await
    }

    /// Bytes used and in all, as the cluster reports them.
    pub async fn statfs(&self) -> Result<(u64, u64), Errno> {
        let status = self.cluster().status().await.map_err(|e| {
            tracing::warn!(error = %e, "cluster status for statfs");
            Errno(libc::EIO)
        })?;
        Ok((status.used_bytes, status.total_bytes))
    }

    /// Changes other mounts made after event `after`, and the id to ask after next.
    pub async fn events(&self, after: u64) -> Result<(Vec<Event>, u64), Errno> {
        match self.call(&Cred::default(), Op::Watch { after }).await? {
            Reply::Events { events, last } => {
                for event in &events {
                    if let Event::Inode(ino) = event {
                        lock(&self.seen).remove(ino);
                    }
                }
                Ok((events, last))
            }
            other => Err(unexpected(other)),
        }
    }

    /// At unmount: flushes everything and ends the session.
    pub async fn unmount(&self) {
        self.writeback(true).await;
        if let Err(e) = self.sync(&Cred::default(), None).await {
            tracing::warn!(errno = e.0, "making the namespace durable");
        }
        if let Err(e) = self.call_done(&Cred::default(), Op::Unmount).await {
            tracing::warn!(errno = e.0, "ending the session");
        }
    }
}
