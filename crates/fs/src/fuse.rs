//! The FUSE side of a mount (fuser): each kernel request becomes a task on the mount's
//! runtime, answered when the [`Mount`] is done with it. Inode numbers are the MDS's, except
//! that the mount's root is the kernel's 1 (a mount rooted below the file system's root
//! swaps the two). Attributes and names are cached by the kernel for [`LEASE_MS`], and
//! dropped sooner when the MDS says another mount changed them.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Config, Errno as FuseErrno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, Notifier,
    OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, SessionACL, TimeOrNow, WriteFlags,
};

use crate::mount::Mount;
use crate::proto::{Attr, Cred, Ino, Kind, SetAttr, SetTime, LEASE_MS, ROOT_INO};
use crate::readahead::Readahead;
use crate::Errno;

/// How often dirty bytes are checked for their write-back delay.
const WRITEBACK_TICK: Duration = Duration::from_secs(1);
/// The kernel's readahead when the mount's own is off: one page.
const KERNEL_READAHEAD_OFF_BYTES: u32 = 4096;
/// Requests the kernel may have in flight in the background (readahead, write-back).
const MAX_BACKGROUND: u16 = 64;
/// Largest write the kernel sends in one request.
const MAX_WRITE_BYTES: u32 = 1 << 20;

/// How a file system is mounted.
#[derive(Clone, Debug)]
pub struct Options {
    pub fs: String,
    pub read_only: bool,
    pub allow_other: bool,
    pub readahead: Readahead,
}

struct Adapter {
    mount: Arc<Mount>,
    runtime: tokio::runtime::Handle,
    root: Ino,
    blksize: u32,
    readahead: Readahead,
    notifier: Arc<OnceLock<Notifier>>,
}

fn ttl() -> Duration {
    Duration::from_millis(LEASE_MS)
}

fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn ns(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

fn kind(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDevice => FileType::CharDevice,
        Kind::BlockDevice => FileType::BlockDevice,
    }
}

fn errno(e: Errno) -> FuseErrno {
    FuseErrno::from_i32(e.0)
}

/// The caller's credentials, with its supplementary groups from /proc.
fn cred(req: &Request) -> Cred {
    let mut groups = Vec::new();
    if req.pid() != 0 {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", req.pid())) {
            if let Some(line) = status.lines().find(|l| l.starts_with("Groups:")) {
                groups = line["Groups:".len()..]
                    .split_whitespace()
                    .filter_map(|g| g.parse().ok())
                    .collect();
            }
        }
    }
    Cred {
        uid: req.uid(),
        gid: req.gid(),
        groups,
    }
}

impl Adapter {
    fn kernel_ino(&self, ino: Ino) -> INodeNo {
        INodeNo(if ino == self.root {
            ROOT_INO
        } else if ino == ROOT_INO {
            self.root
        } else {
            ino
        })
    }

    fn cluster_ino(&self, ino: INodeNo) -> Ino {
        self.kernel_ino(ino.0).0
    }

    /// The caller, the cluster's inode and a name, owned for the task that answers.
    fn at(&self, req: &Request, ino: INodeNo, name: &OsStr) -> (Cred, Ino, Vec<u8>) {
        (cred(req), self.cluster_ino(ino), name.as_bytes().to_vec())
    }

    fn attr(&self, attr: &Attr) -> FileAttr {
        FileAttr {
            ino: self.kernel_ino(attr.ino),
            size: attr.size,
            blocks: attr.size.div_ceil(512),
            atime: time(attr.atime_ns),
            mtime: time(attr.mtime_ns),
            ctime: time(attr.ctime_ns),
            crtime: time(attr.btime_ns),
            kind: kind(attr.kind),
            perm: attr.perm,
            nlink: attr.nlink,
            uid: attr.uid,
            gid: attr.gid,
            rdev: attr.rdev,
            blksize: self.blksize,
            flags: 0,
        }
    }

    /// Runs `work` on the mount's runtime.
    fn spawn<F>(&self, work: impl FnOnce(Arc<Mount>) -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.runtime.spawn(work(self.mount.clone()));
    }

    fn reply_entry(&self, reply: ReplyEntry, result: Result<Attr, Errno>) {
        match result {
            Ok(attr) => reply.entry(&ttl(), &self.attr(&attr), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn copy(&self) -> Adapter {
        Adapter {
            mount: self.mount.clone(),
            runtime: self.runtime.clone(),
            root: self.root,
            blksize: self.blksize,
            readahead: self.readahead,
            notifier: self.notifier.clone(),
        }
    }

    /// Drops the kernel's attributes of `ino` (another mount changed it).
    fn forget_attrs(&self, ino: Ino) {
        if let Some(notifier) = self.notifier.get() {
            let _ = notifier.inval_inode(self.kernel_ino(ino), -1, 0);
        }
    }
}

fn done(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

fn set_time(time: TimeOrNow) -> SetTime {
    match time {
        TimeOrNow::SpecificTime(at) => SetTime::At(ns(at)),
        TimeOrNow::Now => SetTime::Now,
    }
}

impl Filesystem for Adapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let wanted = InitFlags::FUSE_AUTO_INVAL_DATA
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS;
        let offered = config.capabilities() & wanted;
        let _ = config.add_capabilities(offered);
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_max_write(MAX_WRITE_BYTES);
        if self.readahead == Readahead::Off {
            let _ = config.set_max_readahead(KERNEL_READAHEAD_OFF_BYTES);
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let (cred, parent, name) = self.at(req, parent, name);
        let this = self.copy();
        self.spawn(|mount| async move {
            let result = mount.lookup(&cred, parent, &name).await;
            this.reply_entry(reply, result);
        });
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let (cred, ino) = (cred(req), self.cluster_ino(ino));
        let this = self.copy();
        self.spawn(|mount| async move {
            match mount.getattr(&cred, ino).await {
                Ok(attr) => reply.attr(&ttl(), &this.attr(&attr)),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let (cred, ino) = (cred(req), self.cluster_ino(ino));
        let set = SetAttr {
            perm: mode.map(|m| (m & 0o7777) as u16),
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
        };
        let this = self.copy();
        self.spawn(|mount| async move {
            match mount.setattr(&cred, ino, set).await {
                Ok(attr) => reply.attr(&ttl(), &this.attr(&attr)),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let (cred, ino) = (cred(req), self.cluster_ino(ino));
        self.spawn(|mount| async move {
            match mount.readlink(&cred, ino).await {
                Ok(target) => reply.data(&target),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let Some(file_kind) = Kind::from_mode(mode) else {
            return reply.error(FuseErrno::EINVAL);
        };
        let (cred, parent, name) = self.at(req, parent, name);
        let this = self.copy();
        self.spawn(|mount| async move {
            let result = mount
                .create(
                    &cred,
                    parent,
                    &name,
                    file_kind,
                    (mode & 0o7777) as u16,
                    rdev,
                )
                .await;
            this.reply_entry(reply, result);
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let (cred, parent, name) = self.at(req, parent, name);
        let this = self.copy();
        self.spawn(|mount| async move {
            let result = mount
                .create(&cred, parent, &name, Kind::Dir, (mode & 0o7777) as u16, 0)
                .await;
            this.reply_entry(reply, result);
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (cred, parent, name) = self.at(req, parent, name);
        self.spawn(
            |mount| async move { done(reply, mount.unlink(&cred, parent, &name, false).await) },
        );
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (cred, parent, name) = self.at(req, parent, name);
        self.spawn(
            |mount| async move { done(reply, mount.unlink(&cred, parent, &name, true).await) },
        );
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (cred, parent) = (cred(req), self.cluster_ino(parent));
        let (name, target) = (
            link_name.as_bytes().to_vec(),
            target.as_os_str().as_bytes().to_vec(),
        );
        let this = self.copy();
        self.spawn(|mount| async move {
            let result = mount.symlink(&cred, parent, &name, &target).await;
            this.reply_entry(reply, result);
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let cred = cred(req);
        let (parent, new_parent) = (self.cluster_ino(parent), self.cluster_ino(newparent));
        let (name, new_name) = (name.as_bytes().to_vec(), newname.as_bytes().to_vec());
        self.spawn(|mount| async move {
            let result = mount
                .rename(&cred, parent, &name, new_parent, &new_name, flags.bits())
                .await;
            done(reply, result)
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (cred, ino, parent) = (
            cred(req),
            self.cluster_ino(ino),
            self.cluster_ino(newparent),
        );
        let name = newname.as_bytes().to_vec();
        let this = self.copy();
        self.spawn(|mount| async move {
            let result = mount.link(&cred, ino, parent, &name).await;
            this.reply_entry(reply, result);
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let (cred, ino) = (cred(req), self.cluster_ino(ino));
        let (read, write) = match flags.acc_mode() {
            OpenAccMode::O_RDONLY => (true, false),
            OpenAccMode::O_WRONLY => (false, true),
            OpenAccMode::O_RDWR => (true, true),
        };
        let this = self.copy();
        self.spawn(|mount| async move {
            match mount.open(&cred, ino, read, write).await {
                Ok(opened) => {
                    if opened.changed {
                        let notify = this.copy();
                        let _ = tokio::task::spawn_blocking(move || notify.forget_attrs(ino)).await;
                    }
                    let flags = if opened.keep_cache {
                        FopenFlags::FOPEN_KEEP_CACHE
                    } else {
                        FopenFlags::empty()
                    };
                    reply.opened(FileHandle(opened.fh), flags)
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.spawn(|mount| async move {
            match mount.read(fh.0, offset, u64::from(size)).await {
                Ok(bytes) => reply.data(&bytes),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let data = data.to_vec();
        self.spawn(|mount| async move {
            match mount.write(fh.0, offset, &data).await {
                Ok(written) => reply.written(written),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let cred = cred_cheap(req);
        self.spawn(|mount| async move { done(reply, mount.flush(&cred, fh.0).await) });
    }

    fn release(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let cred = cred_cheap(req);
        self.spawn(|mount| async move { done(reply, mount.release(&cred, fh.0).await) });
    }

    fn fsync(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let cred = cred_cheap(req);
        self.spawn(|mount| async move { done(reply, mount.fsync(&cred, fh.0).await) });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let (cred, ino) = (cred(req), self.cluster_ino(ino));
        self.spawn(|mount| async move {
            // Listing needs read permission; the MDS checks it on every page.
            match mount.getattr(&cred, ino).await {
                Ok(attr) if attr.kind == Kind::Dir => {
                    reply.opened(FileHandle(0), FopenFlags::empty())
                }
                Ok(_) => reply.error(FuseErrno::ENOTDIR),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let (cred, dir) = (cred(req), self.cluster_ino(ino));
        let this = self.copy();
        self.spawn(|mount| async move {
            if offset < 1 && reply.add(ino, 1, FileType::Directory, ".") {
                return reply.ok();
            }
            if offset < 2 && reply.add(ino, 2, FileType::Directory, "..") {
                return reply.ok();
            }
            let listed = fill(&mount, &cred, dir, offset, |entry| {
                let name = OsStr::from_bytes(&entry.name);
                let ino = this.kernel_ino(entry.attr.ino);
                reply.add(ino, entry.cookie, kind(entry.attr.kind), name)
            })
            .await;
            match listed {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let (cred, dir) = (cred(req), self.cluster_ino(ino));
        let this = self.copy();
        self.spawn(|mount| async move {
            let own = match mount.getattr(&cred, dir).await {
                Ok(attr) => this.attr(&attr),
                Err(e) => return reply.error(errno(e)),
            };
            if offset < 1 && reply.add(ino, 1, ".", &ttl(), &own, Generation(0)) {
                return reply.ok();
            }
            if offset < 2 && reply.add(ino, 2, "..", &ttl(), &own, Generation(0)) {
                return reply.ok();
            }
            let listed = fill(&mount, &cred, dir, offset, |entry| {
                let name = OsStr::from_bytes(&entry.name);
                let attr = this.attr(&entry.attr);
                reply.add(attr.ino, entry.cookie, name, &ttl(), &attr, Generation(0))
            })
            .await;
            match listed {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let cred = cred_cheap(req);
        let ino = self.cluster_ino(ino);
        self.spawn(|mount| async move { done(reply, mount.sync(&cred, Some(ino)).await) });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.spawn(|mount| async move {
            match mount.statfs().await {
                Ok((used, total)) => {
                    const BLOCK: u64 = 4096;
                    let free = total.saturating_sub(used) / BLOCK;
                    reply.statfs(
                        total / BLOCK,
                        free,
                        free,
                        u64::MAX >> 1,
                        u64::MAX >> 2,
                        BLOCK as u32,
                        255,
                        BLOCK as u32,
                    );
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let (cred, ino) = (cred(req), self.cluster_ino(ino));
        let (name, value) = (name.as_bytes().to_vec(), value.to_vec());
        self.spawn(|mount| async move {
            done(
                reply,
                mount
                    .setxattr(&cred, ino, &name, &value, flags as u32)
                    .await,
            )
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let (cred, ino, name) = self.at(req, ino, name);
        self.spawn(|mount| async move {
            match mount.getxattr(&cred, ino, &name).await {
                Ok(value) => xattr_reply(reply, &value, size),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let (cred, ino) = (cred(req), self.cluster_ino(ino));
        self.spawn(|mount| async move {
            match mount.listxattr(&cred, ino).await {
                Ok(names) => {
                    let mut list = Vec::new();
                    for name in names {
                        list.extend_from_slice(&name);
                        list.push(0);
                    }
                    xattr_reply(reply, &list, size)
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (cred, ino, name) = self.at(req, ino, name);
        self.spawn(|mount| async move { done(reply, mount.removexattr(&cred, ino, &name).await) });
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // The kernel checks access itself (default_permissions); the MDS checks every use.
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (cred, parent, name) = self.at(req, parent, name);
        let exclusive = flags & libc::O_EXCL != 0;
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let this = self.copy();
        self.spawn(|mount| async move {
            match mount
                .create_open(
                    &cred,
                    parent,
                    &name,
                    (mode & 0o7777) as u16,
                    exclusive,
                    write,
                )
                .await
            {
                Ok((attr, opened)) => reply.created(
                    &ttl(),
                    &this.attr(&attr),
                    Generation(0),
                    FileHandle(opened.fh),
                    FopenFlags::empty(),
                ),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn destroy(&mut self) {
        let mount = self.mount.clone();
        self.runtime.block_on(async move { mount.unmount().await });
    }
}

/// Lists directory `dir` after position `offset` through `add` (which says when the kernel's
/// buffer is full), asking the MDS for pages until it is, or the directory ends.
async fn fill(
    mount: &Mount,
    cred: &Cred,
    dir: Ino,
    offset: u64,
    mut add: impl FnMut(&crate::proto::DirEntry) -> bool,
) -> Result<(), Errno> {
    let mut after = offset.max(2);
    loop {
        let (entries, more) = mount.readdir(cred, dir, after).await?;
        for entry in &entries {
            if add(entry) {
                return Ok(());
            }
            after = entry.cookie;
        }
        if !more {
            return Ok(());
        }
    }
}

/// Data-path requests need only the caller's user and group (the MDS checked the open).
fn cred_cheap(req: &Request) -> Cred {
    Cred {
        uid: req.uid(),
        gid: req.gid(),
        groups: Vec::new(),
    }
}

fn xattr_reply(reply: ReplyXattr, value: &[u8], size: u32) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() > size as usize {
        reply.error(FuseErrno::ERANGE);
    } else {
        reply.data(value);
    }
}

/// Mounts `mount` at `mountpoint` and serves the kernel until the file system is unmounted
/// (`umount`, `fusermount -u`); then flushes what is dirty and ends the session. `ready` is
/// called once the kernel can use the mount.
pub fn serve(
    runtime: &tokio::runtime::Runtime,
    mount: Arc<Mount>,
    mountpoint: &Path,
    options: &Options,
    ready: impl FnOnce(),
) -> Result<(), String> {
    let root = mount.root.ino;
    let notifier = Arc::new(OnceLock::new());
    let adapter = Adapter {
        mount: mount.clone(),
        runtime: runtime.handle().clone(),
        root,
        blksize: u32::try_from(crate::proto::objects::DATA_OBJECT_BYTES).unwrap_or(u32::MAX),
        readahead: options.readahead,
        notifier: notifier.clone(),
    };
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(format!("coffer:{}", options.fs)),
        MountOption::Subtype("coffer".into()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    if options.read_only || mount.read_only {
        config.mount_options.push(MountOption::RO);
    }
    if options.allow_other {
        config.acl = SessionACL::All;
    }
    let session = fuser::Session::new(adapter, mountpoint, &config)
        .map_err(|e| format!("mounting at {}: {e}", mountpoint.display()))?;
    let _ = notifier.set(session.notifier());
    let events = notifier.clone();
    let watched = mount.clone();
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("coffer-fs-events".into())
        .spawn(move || forward_events(handle, watched, events, root))
        .map_err(|e| e.to_string())?;
    let writeback = mount.clone();
    runtime.spawn(async move {
        loop {
            tokio::time::sleep(WRITEBACK_TICK).await;
            writeback.writeback(false).await;
        }
    });
    ready();
    session
        .run()
        .map_err(|e| format!("serving {}: {e}", mountpoint.display()))
}

/// Tells the kernel to drop what other mounts changed, as the MDS reports it.
fn forward_events(
    runtime: tokio::runtime::Handle,
    mount: Arc<Mount>,
    notifier: Arc<OnceLock<Notifier>>,
    root: Ino,
) {
    let kernel = |ino: Ino| {
        INodeNo(if ino == root {
            ROOT_INO
        } else if ino == ROOT_INO {
            root
        } else {
            ino
        })
    };
    let mut after = 0;
    loop {
        match runtime.block_on(mount.events(after)) {
            Ok((events, last)) => {
                after = last;
                let Some(notifier) = notifier.get() else {
                    continue;
                };
                for event in events {
                    let _ = match event {
                        crate::proto::Event::Inode(ino) => notifier.inval_inode(kernel(ino), 0, 0),
                        crate::proto::Event::Entry { parent, name } => {
                            notifier.inval_entry(kernel(parent), OsStr::from_bytes(&name))
                        }
                    };
                }
            }
            Err(e) => {
                tracing::debug!(errno = e.0, "watching for changes");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}
