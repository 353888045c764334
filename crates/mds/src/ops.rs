//! The namespace operations, decided in pure code: each reads the loaded namespace and
//! returns the [`Put`]s that make the change, the reply and the events for other mounts, or
//! a refusal (an errno, or what must be loaded first). Nothing here does IO or reads a
//! clock; the caller journals the puts, applies them and replies.
//!
//! POSIX rules kept here: permissions from the caller's credentials, the sticky bit,
//! set-group-id directories, link counts (a directory has 2 plus one per subdirectory),
//! `rename` replacing its target atomically (or exchanging, or refusing with
//! `RENAME_NOREPLACE`), and unlinked files kept until no mount holds them open.

use fs::perm::{self, MAY_EXEC, MAY_READ, MAY_WRITE, S_ISGID, S_ISUID, S_ISVTX};
use fs::proto::{
    Attr, Cred, DirEntry, Event, Ino, Kind, Op, Reply, SetAttr, SetTime, NAME_BYTES_MAX,
    RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT_INO, TARGET_BYTES_MAX, XATTRS_BYTES_MAX, XATTR_CREATE,
    XATTR_NAME_BYTES_MAX, XATTR_REPLACE,
};

use crate::namespace::{Missing, Namespace};
use crate::record::{Dentry, Inode, Put};

/// Longest walk up the tree when checking that an inode is under a grant's root.
const DEPTH_MAX: usize = 4096;

/// Who asks, from where, and when.
pub struct Ctx<'a> {
    pub cred: &'a Cred,
    /// The session's root (a grant's path, or the file system's root).
    pub root: Ino,
    pub now_ns: i64,
}

#[derive(Debug)]
pub enum Refusal {
    Missing(Missing),
    Errno(i32, String),
}

impl From<Missing> for Refusal {
    fn from(missing: Missing) -> Refusal {
        Refusal::Missing(missing)
    }
}

fn errno(code: i32, why: impl Into<String>) -> Refusal {
    Refusal::Errno(code, why.into())
}

/// For a replayed unlink, rmdir or rename, that its name still names `named`, the inode it
/// named when the replaced MDS answered: replays from several mounts may come in another
/// order than that MDS applied them, and a name that now means another file is left alone.
pub fn still_names(ns: &Namespace, op: &Op, named: Option<Ino>) -> Result<(), Refusal> {
    let Some(named) = named else {
        return Ok(());
    };
    let (Op::Unlink { parent, name }
    | Op::Rmdir { parent, name }
    | Op::Rename { parent, name, .. }) = op
    else {
        return Ok(());
    };
    match ns.dir(*parent)?.get(name) {
        Some(dentry) if dentry.ino == named => Ok(()),
        _ => Err(errno(
            libc::ESTALE,
            format!("the name no longer names inode {named}"),
        )),
    }
}

/// What an operation decided.
#[derive(Debug)]
pub struct Change {
    pub puts: Vec<Put>,
    pub reply: Reply,
    /// The inode created or changed (answers a resend of the request).
    pub ino: Option<Ino>,
    pub events: Vec<Event>,
    /// A directory this change creates, empty and so already loaded.
    pub new_dir: Option<Ino>,
}

impl Change {
    /// A change that changes nothing: only its reply.
    pub(crate) fn read(reply: Reply) -> Change {
        Change {
            puts: Vec::new(),
            reply,
            ino: None,
            events: Vec::new(),
            new_dir: None,
        }
    }
}

pub type Decided = Result<Change, Refusal>;

fn get(ns: &Namespace, ino: Ino) -> Result<&Inode, Refusal> {
    ns.inode(ino)?
        .ok_or_else(|| errno(libc::ENOENT, format!("inode {ino} does not exist")))
}

fn get_dir(ns: &Namespace, ino: Ino) -> Result<&Inode, Refusal> {
    let inode = get(ns, ino)?;
    if inode.attr.kind != Kind::Dir {
        return Err(errno(
            libc::ENOTDIR,
            format!("inode {ino} is not a directory"),
        ));
    }
    Ok(inode)
}

fn check_name(name: &[u8]) -> Result<(), Refusal> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(errno(libc::EINVAL, "not a name a directory can hold"));
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(errno(
            libc::ENAMETOOLONG,
            format!("a name is at most {NAME_BYTES_MAX} bytes"),
        ));
    }
    Ok(())
}

fn need(attr: &Attr, ctx: &Ctx, mask: u16, what: &str) -> Result<(), Refusal> {
    if perm::allows(attr, ctx.cred, mask) {
        Ok(())
    } else {
        Err(errno(
            libc::EACCES,
            format!("uid {} may not {what} inode {}", ctx.cred.uid, attr.ino),
        ))
    }
}

/// `ino` is the session's root or below it (by the parents recorded in each inode).
pub fn within(ns: &Namespace, ino: Ino, root: Ino) -> Result<(), Refusal> {
    if root == ROOT_INO {
        return Ok(());
    }
    let mut at = ino;
    for _ in 0..DEPTH_MAX {
        if at == root {
            return Ok(());
        }
        if at == ROOT_INO {
            break;
        }
        at = get(ns, at)?.parent;
    }
    Err(errno(
        libc::EACCES,
        format!("inode {ino} is outside this mount's grant"),
    ))
}

fn touch_dir(dir: &Inode, now_ns: i64) -> Inode {
    let mut dir = dir.clone();
    dir.attr.mtime_ns = now_ns;
    dir.attr.ctime_ns = now_ns;
    dir
}

fn put_inode(inode: Inode) -> Put {
    Put::Inode {
        ino: inode.attr.ino,
        inode: Some(inode),
    }
}

fn entry(parent: Ino, name: &[u8]) -> Event {
    Event::Entry {
        parent,
        name: name.to_vec(),
    }
}

pub fn lookup(ns: &Namespace, ctx: &Ctx, parent: Ino, name: &[u8]) -> Decided {
    within(ns, parent, ctx.root)?;
    let dir = get_dir(ns, parent)?;
    need(&dir.attr, ctx, MAY_EXEC, "search")?;
    check_name(name)?;
    let dentry = ns
        .dir(parent)?
        .get(name)
        .ok_or_else(|| errno(libc::ENOENT, "no such entry"))?;
    Ok(Change::read(Reply::Attr(get(ns, dentry.ino)?.attr.clone())))
}

pub fn getattr(ns: &Namespace, ctx: &Ctx, ino: Ino) -> Decided {
    within(ns, ino, ctx.root)?;
    Ok(Change::read(Reply::Attr(get(ns, ino)?.attr.clone())))
}

fn time(set: SetTime, now_ns: i64) -> i64 {
    match set {
        SetTime::At(ns) => ns,
        SetTime::Now => now_ns,
    }
}

pub fn setattr(ns: &Namespace, ctx: &Ctx, ino: Ino, set: &SetAttr) -> Decided {
    within(ns, ino, ctx.root)?;
    let mut inode = get(ns, ino)?.clone();
    let cred = ctx.cred;
    let attr = &mut inode.attr;
    if let Some(uid) = set.uid.filter(|uid| *uid != attr.uid) {
        if cred.uid != 0 {
            return Err(errno(libc::EPERM, "only the superuser changes an owner"));
        }
        attr.uid = uid;
    }
    if let Some(gid) = set.gid.filter(|gid| *gid != attr.gid) {
        if cred.uid != 0 && !(cred.uid == attr.uid && cred.in_group(gid)) {
            return Err(errno(
                libc::EPERM,
                "only the owner, to a group of theirs, or the superuser changes a group",
            ));
        }
        attr.gid = gid;
    }
    if (set.uid.is_some() || set.gid.is_some()) && attr.kind != Kind::Dir && cred.uid != 0 {
        attr.perm &= !S_ISUID;
        if attr.perm & 0o010 != 0 {
            attr.perm &= !S_ISGID;
        }
    }
    if let Some(mode) = set.perm {
        if !perm::owns(attr, cred) {
            return Err(errno(libc::EPERM, "only the owner changes a mode"));
        }
        attr.perm = mode & 0o7777;
        if cred.uid != 0 && !cred.in_group(attr.gid) {
            attr.perm &= !S_ISGID;
        }
    }
    if let Some(size) = set.size {
        match attr.kind {
            Kind::Dir => return Err(errno(libc::EISDIR, "a directory has no size to set")),
            Kind::File => {}
            _ => return Err(errno(libc::EINVAL, "only a file's size can be set")),
        }
        need(attr, ctx, MAY_WRITE, "truncate")?;
        attr.size = size;
        attr.mtime_ns = ctx.now_ns;
    }
    for (value, slot) in [(set.atime, 0), (set.mtime, 1)] {
        let Some(value) = value else { continue };
        let allowed = perm::owns(attr, cred)
            || (value == SetTime::Now && perm::allows(attr, cred, MAY_WRITE));
        if !allowed {
            return Err(errno(libc::EPERM, "only the owner sets a time"));
        }
        let at = time(value, ctx.now_ns);
        if slot == 0 {
            attr.atime_ns = at;
        } else {
            attr.mtime_ns = at;
        }
    }
    attr.ctime_ns = ctx.now_ns;
    let reply = Reply::Attr(attr.clone());
    Ok(Change {
        puts: vec![put_inode(inode)],
        reply,
        ino: Some(ino),
        events: vec![Event::Inode(ino)],
        new_dir: None,
    })
}

/// What a new inode is made of.
pub struct NewInode<'a> {
    pub kind: Kind,
    pub perm: u16,
    pub rdev: u32,
    pub target: Option<&'a [u8]>,
    /// The inode number a replayed create was answered with (see `Op::Replay`).
    pub claim: Option<Ino>,
}

pub fn create(
    ns: &Namespace,
    ctx: &Ctx,
    parent: Ino,
    name: &[u8],
    new: NewInode,
    exclusive: bool,
) -> Decided {
    within(ns, parent, ctx.root)?;
    let dir = get_dir(ns, parent)?;
    check_name(name)?;
    need(&dir.attr, ctx, MAY_EXEC, "search")?;
    if let Some(existing) = ns.dir(parent)?.get(name) {
        let attr = get(ns, existing.ino)?.attr.clone();
        if exclusive || new.claim.is_some() || new.kind != Kind::File || attr.kind != Kind::File {
            return Err(errno(libc::EEXIST, "the name exists"));
        }
        return Ok(Change::read(Reply::Attr(attr)));
    }
    need(&dir.attr, ctx, MAY_WRITE, "add entries to")?;
    if let Some(target) = new.target {
        if target.is_empty() || target.len() > TARGET_BYTES_MAX {
            return Err(errno(
                libc::ENAMETOOLONG,
                format!("a link target is 1 to {TARGET_BYTES_MAX} bytes"),
            ));
        }
    }
    let ino = match new.claim {
        Some(ino) => {
            if !ns.replayable.contains(&ino) || ns.purge.contains(&ino) {
                return Err(errno(
                    libc::EINVAL,
                    format!("inode {ino} is not one the replaced MDS may have handed out"),
                ));
            }
            ns.shard_loaded(ino)?;
            if ns.inode(ino)?.is_some() {
                return Err(errno(libc::EEXIST, format!("inode {ino} exists")));
            }
            ino
        }
        None => {
            let ino = ns.next_ino;
            if ino >= ns.reserved_ino {
                return Err(Missing::Inos.into());
            }
            ns.shard_loaded(ino)?;
            ino
        }
    };
    let cred = ctx.cred;
    let inherit = dir.attr.perm & S_ISGID != 0;
    let gid = if inherit { dir.attr.gid } else { cred.gid };
    let mut mode = new.perm & 0o7777;
    if new.kind == Kind::Dir && inherit {
        mode |= S_ISGID;
    }
    if new.kind != Kind::Dir && cred.uid != 0 && !cred.in_group(gid) {
        mode &= !S_ISGID;
    }
    let attr = Attr {
        ino,
        kind: new.kind,
        perm: mode,
        nlink: if new.kind == Kind::Dir { 2 } else { 1 },
        uid: cred.uid,
        gid,
        size: new.target.map_or(0, |t| t.len() as u64),
        atime_ns: ctx.now_ns,
        mtime_ns: ctx.now_ns,
        ctime_ns: ctx.now_ns,
        btime_ns: ctx.now_ns,
        rdev: new.rdev,
    };
    let inode = Inode {
        attr: attr.clone(),
        parent,
        target: new.target.map(<[u8]>::to_vec),
        xattrs: Default::default(),
    };
    let mut parent_inode = touch_dir(dir, ctx.now_ns);
    if new.kind == Kind::Dir {
        parent_inode.attr.nlink += 1;
    }
    let puts = vec![
        put_inode(inode),
        Put::Dentry {
            dir: parent,
            name: name.to_vec(),
            dentry: Some(Dentry {
                ino,
                kind: new.kind,
            }),
        },
        put_inode(parent_inode),
    ];
    Ok(Change {
        puts,
        reply: Reply::Attr(attr),
        ino: Some(ino),
        events: vec![entry(parent, name), Event::Inode(parent)],
        new_dir: (new.kind == Kind::Dir).then_some(ino),
    })
}

pub fn link(ns: &Namespace, ctx: &Ctx, ino: Ino, parent: Ino, name: &[u8]) -> Decided {
    within(ns, ino, ctx.root)?;
    within(ns, parent, ctx.root)?;
    let dir = get_dir(ns, parent)?;
    check_name(name)?;
    need(&dir.attr, ctx, MAY_WRITE | MAY_EXEC, "add entries to")?;
    let mut inode = get(ns, ino)?.clone();
    if inode.attr.kind == Kind::Dir {
        return Err(errno(libc::EPERM, "directories cannot be hard-linked"));
    }
    if inode.attr.nlink == 0 {
        return Err(errno(libc::ENOENT, "the file was removed"));
    }
    if ns.dir(parent)?.get(name).is_some() {
        return Err(errno(libc::EEXIST, "the name exists"));
    }
    inode.attr.nlink = inode
        .attr
        .nlink
        .checked_add(1)
        .ok_or_else(|| errno(libc::EMLINK, "too many links"))?;
    inode.attr.ctime_ns = ctx.now_ns;
    let attr = inode.attr.clone();
    let kind = attr.kind;
    Ok(Change {
        puts: vec![
            put_inode(inode),
            Put::Dentry {
                dir: parent,
                name: name.to_vec(),
                dentry: Some(Dentry { ino, kind }),
            },
            put_inode(touch_dir(dir, ctx.now_ns)),
        ],
        reply: Reply::Attr(attr),
        ino: Some(ino),
        events: vec![entry(parent, name), Event::Inode(parent), Event::Inode(ino)],
        new_dir: None,
    })
}

/// The puts that drop one link of non-directory `inode`; the last link queues it for purge
/// (its record stays until then, for the mounts that hold it open).
fn drop_link(mut inode: Inode, now_ns: i64, puts: &mut Vec<Put>) {
    assert!(
        inode.attr.nlink > 0,
        "inode {} has no link to drop",
        inode.attr.ino
    );
    inode.attr.nlink -= 1;
    inode.attr.ctime_ns = now_ns;
    if inode.attr.nlink == 0 {
        puts.push(Put::Purge {
            ino: inode.attr.ino,
            queued: true,
        });
    }
    puts.push(put_inode(inode));
}

/// The puts that remove empty directory `inode`.
fn drop_dir(inode: &Inode, puts: &mut Vec<Put>) {
    let ino = inode.attr.ino;
    puts.push(Put::Inode { ino, inode: None });
    puts.push(Put::DirGone { dir: ino });
}

pub fn unlink(ns: &Namespace, ctx: &Ctx, parent: Ino, name: &[u8], dir_wanted: bool) -> Decided {
    within(ns, parent, ctx.root)?;
    let dir = get_dir(ns, parent)?;
    check_name(name)?;
    need(&dir.attr, ctx, MAY_EXEC, "search")?;
    let dentry = ns
        .dir(parent)?
        .get(name)
        .ok_or_else(|| errno(libc::ENOENT, "no such entry"))?;
    let child = get(ns, dentry.ino)?;
    match (dir_wanted, child.attr.kind == Kind::Dir) {
        (true, false) => return Err(errno(libc::ENOTDIR, "not a directory")),
        (false, true) => return Err(errno(libc::EISDIR, "a directory (use rmdir)")),
        _ => {}
    }
    if !perm::may_delete(&dir.attr, &child.attr, ctx.cred) {
        return Err(errno(libc::EACCES, "may not remove entries here"));
    }
    let mut parent_inode = touch_dir(dir, ctx.now_ns);
    let mut puts = vec![Put::Dentry {
        dir: parent,
        name: name.to_vec(),
        dentry: None,
    }];
    if dir_wanted {
        if dentry.ino == ctx.root || dentry.ino == ROOT_INO {
            return Err(errno(libc::EBUSY, "the mount's root"));
        }
        if !ns.dir(dentry.ino)?.is_empty() {
            return Err(errno(libc::ENOTEMPTY, "the directory is not empty"));
        }
        drop_dir(child, &mut puts);
        parent_inode.attr.nlink -= 1;
    } else {
        drop_link(child.clone(), ctx.now_ns, &mut puts);
    }
    puts.push(put_inode(parent_inode));
    Ok(Change {
        puts,
        reply: Reply::Done,
        ino: Some(dentry.ino),
        events: vec![
            entry(parent, name),
            Event::Inode(parent),
            Event::Inode(dentry.ino),
        ],
        new_dir: None,
    })
}

/// Whether `ancestor` is `ino` or above it.
fn is_ancestor(ns: &Namespace, ancestor: Ino, ino: Ino) -> Result<bool, Refusal> {
    let mut at = ino;
    for _ in 0..DEPTH_MAX {
        if at == ancestor {
            return Ok(true);
        }
        if at == ROOT_INO {
            return Ok(false);
        }
        at = get(ns, at)?.parent;
    }
    Err(errno(libc::ELOOP, "the tree is deeper than the MDS walks"))
}

pub struct RenameArgs<'a> {
    pub parent: Ino,
    pub name: &'a [u8],
    pub new_parent: Ino,
    pub new_name: &'a [u8],
    pub flags: u32,
}

pub fn rename(ns: &Namespace, ctx: &Ctx, args: &RenameArgs) -> Decided {
    let RenameArgs {
        parent,
        name,
        new_parent,
        new_name,
        flags,
    } = *args;
    if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
        || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
    {
        return Err(errno(libc::EINVAL, format!("rename flags {flags:#x}")));
    }
    within(ns, parent, ctx.root)?;
    within(ns, new_parent, ctx.root)?;
    let from_dir = get_dir(ns, parent)?;
    let to_dir = get_dir(ns, new_parent)?;
    check_name(name)?;
    check_name(new_name)?;
    let source = ns
        .dir(parent)?
        .get(name)
        .ok_or_else(|| errno(libc::ENOENT, "no such entry"))?;
    let target = ns.dir(new_parent)?.get(new_name);
    let src = get(ns, source.ino)?;
    if !perm::may_delete(&from_dir.attr, &src.attr, ctx.cred) {
        return Err(errno(libc::EACCES, "may not move entries out of here"));
    }
    need(&to_dir.attr, ctx, MAY_WRITE | MAY_EXEC, "add entries to")?;
    if parent == new_parent && name == new_name {
        return Ok(Change::read(Reply::Done));
    }
    if flags & RENAME_NOREPLACE != 0 && target.is_some() {
        return Err(errno(libc::EEXIST, "the new name exists"));
    }
    if source.ino == ctx.root || source.ino == ROOT_INO {
        return Err(errno(libc::EBUSY, "the mount's root"));
    }
    let exchange = flags & RENAME_EXCHANGE != 0;
    if exchange && target.is_none() {
        return Err(errno(libc::ENOENT, "nothing to exchange with"));
    }
    if src.attr.kind == Kind::Dir && is_ancestor(ns, source.ino, new_parent)? {
        return Err(errno(libc::EINVAL, "a directory cannot move under itself"));
    }
    if let Some(target) = target {
        if target.ino == source.ino {
            return Ok(Change::read(Reply::Done));
        }
        let dst = get(ns, target.ino)?;
        if !perm::may_delete(&to_dir.attr, &dst.attr, ctx.cred) {
            return Err(errno(libc::EACCES, "may not replace entries here"));
        }
        if exchange && dst.attr.kind == Kind::Dir && is_ancestor(ns, target.ino, parent)? {
            return Err(errno(libc::EINVAL, "a directory cannot move under itself"));
        }
    }

    let now = ctx.now_ns;
    // Work on copies: the two parents may be one directory.
    let mut inodes: std::collections::BTreeMap<Ino, Inode> = Default::default();
    inodes.insert(parent, touch_dir(from_dir, now));
    inodes.insert(new_parent, touch_dir(to_dir, now));
    let mut puts = Vec::new();
    let mut events = vec![
        entry(parent, name),
        entry(new_parent, new_name),
        Event::Inode(parent),
        Event::Inode(new_parent),
        Event::Inode(source.ino),
    ];
    let mut moved = src.clone();
    moved.attr.ctime_ns = now;
    moved.parent = new_parent;
    if moved.attr.kind == Kind::Dir && parent != new_parent {
        inodes.get_mut(&parent).expect("inserted above").attr.nlink -= 1;
        inodes
            .get_mut(&new_parent)
            .expect("inserted above")
            .attr
            .nlink += 1;
    }
    puts.push(Put::Dentry {
        dir: new_parent,
        name: new_name.to_vec(),
        dentry: Some(source),
    });
    match target {
        Some(target) if exchange => {
            let mut other = get(ns, target.ino)?.clone();
            other.attr.ctime_ns = now;
            other.parent = parent;
            if other.attr.kind == Kind::Dir && parent != new_parent {
                inodes
                    .get_mut(&new_parent)
                    .expect("inserted above")
                    .attr
                    .nlink -= 1;
                inodes.get_mut(&parent).expect("inserted above").attr.nlink += 1;
            }
            puts.push(Put::Dentry {
                dir: parent,
                name: name.to_vec(),
                dentry: Some(target),
            });
            puts.push(put_inode(other));
            events.push(Event::Inode(target.ino));
        }
        Some(target) => {
            let dst = get(ns, target.ino)?;
            match (moved.attr.kind == Kind::Dir, dst.attr.kind == Kind::Dir) {
                (true, false) => {
                    return Err(errno(libc::ENOTDIR, "the new name is not a directory"))
                }
                (false, true) => return Err(errno(libc::EISDIR, "the new name is a directory")),
                (true, true) => {
                    if !ns.dir(target.ino)?.is_empty() {
                        return Err(errno(
                            libc::ENOTEMPTY,
                            "the new name is a directory with entries",
                        ));
                    }
                    drop_dir(dst, &mut puts);
                    inodes
                        .get_mut(&new_parent)
                        .expect("inserted above")
                        .attr
                        .nlink -= 1;
                }
                (false, false) => drop_link(dst.clone(), now, &mut puts),
            }
            puts.push(Put::Dentry {
                dir: parent,
                name: name.to_vec(),
                dentry: None,
            });
            events.push(Event::Inode(target.ino));
        }
        None => puts.push(Put::Dentry {
            dir: parent,
            name: name.to_vec(),
            dentry: None,
        }),
    }
    puts.push(put_inode(moved));
    puts.extend(inodes.into_values().map(put_inode));
    Ok(Change {
        puts,
        reply: Reply::Done,
        ino: Some(source.ino),
        events,
        new_dir: None,
    })
}

pub fn readdir(ns: &Namespace, ctx: &Ctx, ino: Ino, after: u64, limit: u32) -> Decided {
    within(ns, ino, ctx.root)?;
    let dir = get_dir(ns, ino)?;
    need(&dir.attr, ctx, MAY_READ, "list")?;
    let limit = limit.clamp(1, fs::proto::READDIR_PAGE_MAX) as usize;
    let mut entries = Vec::new();
    let mut more = false;
    for ((cookie, name), dentry) in ns.dir(ino)?.entries.range((after + 1, Vec::new())..) {
        // A page never splits names that share a cookie, so the next page can start after it.
        if entries.len() >= limit
            && entries
                .last()
                .is_some_and(|e: &DirEntry| e.cookie != *cookie)
        {
            more = true;
            break;
        }
        entries.push(DirEntry {
            cookie: *cookie,
            name: name.clone(),
            attr: get(ns, dentry.ino)?.attr.clone(),
        });
    }
    Ok(Change::read(Reply::Entries { entries, more }))
}

pub fn readlink(ns: &Namespace, ctx: &Ctx, ino: Ino) -> Decided {
    within(ns, ino, ctx.root)?;
    let inode = get(ns, ino)?;
    match &inode.target {
        Some(target) => Ok(Change::read(Reply::Target(target.clone()))),
        None => Err(errno(libc::EINVAL, "not a symbolic link")),
    }
}

pub fn open(ns: &Namespace, ctx: &Ctx, ino: Ino, read: bool, write: bool) -> Decided {
    within(ns, ino, ctx.root)?;
    let inode = get(ns, ino)?;
    if inode.attr.kind == Kind::Dir && write {
        return Err(errno(libc::EISDIR, "a directory"));
    }
    let mask = if read { MAY_READ } else { 0 } | if write { MAY_WRITE } else { 0 };
    need(&inode.attr, ctx, mask, "open")?;
    Ok(Change::read(Reply::Attr(inode.attr.clone())))
}

pub fn written(ns: &Namespace, ctx: &Ctx, ino: Ino, end: u64, mtime_ns: i64) -> Decided {
    within(ns, ino, ctx.root)?;
    let mut inode = get(ns, ino)?.clone();
    if inode.attr.kind != Kind::File {
        return Err(errno(libc::EINVAL, "only a file has data"));
    }
    inode.attr.size = inode.attr.size.max(end);
    inode.attr.mtime_ns = mtime_ns;
    inode.attr.ctime_ns = ctx.now_ns;
    Ok(Change {
        puts: vec![put_inode(inode)],
        reply: Reply::Done,
        ino: Some(ino),
        events: vec![Event::Inode(ino)],
        new_dir: None,
    })
}

/// Extended attributes: `user.*` for whoever may write (set, remove) or read (get, list) the
/// inode, the other namespaces for the superuser; POSIX ACLs are not kept.
fn xattr_access(attr: &Attr, ctx: &Ctx, name: &[u8], write: bool) -> Result<(), Refusal> {
    if name.is_empty() || name.len() > XATTR_NAME_BYTES_MAX {
        return Err(errno(libc::ERANGE, "an attribute name is 1 to 255 bytes"));
    }
    if name.starts_with(b"system.posix_acl_") {
        return Err(errno(libc::EOPNOTSUPP, "POSIX ACLs are not kept"));
    }
    if name.starts_with(b"user.") {
        if attr.kind == Kind::Symlink {
            return Err(errno(libc::EPERM, "no user attributes on symbolic links"));
        }
        if write
            && attr.kind == Kind::Dir
            && attr.perm & S_ISVTX != 0
            && !perm::owns(attr, ctx.cred)
        {
            return Err(errno(
                libc::EPERM,
                "a sticky directory's attributes are its owner's",
            ));
        }
        let mask = if write { MAY_WRITE } else { MAY_READ };
        return need(attr, ctx, mask, "use the attributes of");
    }
    if ctx.cred.uid == 0 {
        Ok(())
    } else {
        Err(errno(
            libc::EPERM,
            "only the superuser uses this attribute namespace",
        ))
    }
}

pub fn setxattr(
    ns: &Namespace,
    ctx: &Ctx,
    ino: Ino,
    name: &[u8],
    value: &[u8],
    flags: u32,
) -> Decided {
    within(ns, ino, ctx.root)?;
    let mut inode = get(ns, ino)?.clone();
    xattr_access(&inode.attr, ctx, name, true)?;
    let exists = inode.xattrs.contains_key(name);
    if flags & XATTR_CREATE != 0 && exists {
        return Err(errno(libc::EEXIST, "the attribute exists"));
    }
    if flags & XATTR_REPLACE != 0 && !exists {
        return Err(errno(libc::ENODATA, "no such attribute"));
    }
    inode.xattrs.insert(name.to_vec(), value.to_vec());
    let total: usize = inode.xattrs.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > XATTRS_BYTES_MAX {
        return Err(errno(
            libc::ENOSPC,
            format!("an inode holds at most {XATTRS_BYTES_MAX} bytes of attributes"),
        ));
    }
    inode.attr.ctime_ns = ctx.now_ns;
    Ok(Change {
        puts: vec![put_inode(inode)],
        reply: Reply::Done,
        ino: Some(ino),
        events: vec![Event::Inode(ino)],
        new_dir: None,
    })
}

pub fn getxattr(ns: &Namespace, ctx: &Ctx, ino: Ino, name: &[u8]) -> Decided {
    within(ns, ino, ctx.root)?;
    let inode = get(ns, ino)?;
    xattr_access(&inode.attr, ctx, name, false)?;
    match inode.xattrs.get(name) {
        Some(value) => Ok(Change::read(Reply::Value(value.clone()))),
        None => Err(errno(libc::ENODATA, "no such attribute")),
    }
}

pub fn listxattr(ns: &Namespace, ctx: &Ctx, ino: Ino) -> Decided {
    within(ns, ino, ctx.root)?;
    let inode = get(ns, ino)?;
    let names = inode
        .xattrs
        .keys()
        .filter(|name| name.starts_with(b"user.") || ctx.cred.uid == 0)
        .cloned()
        .collect();
    Ok(Change::read(Reply::Names(names)))
}

pub fn removexattr(ns: &Namespace, ctx: &Ctx, ino: Ino, name: &[u8]) -> Decided {
    within(ns, ino, ctx.root)?;
    let mut inode = get(ns, ino)?.clone();
    xattr_access(&inode.attr, ctx, name, true)?;
    if inode.xattrs.remove(name).is_none() {
        return Err(errno(libc::ENODATA, "no such attribute"));
    }
    inode.attr.ctime_ns = ctx.now_ns;
    Ok(Change {
        puts: vec![put_inode(inode)],
        reply: Reply::Done,
        ino: Some(ino),
        events: vec![Event::Inode(ino)],
        new_dir: None,
    })
}

/// The inode a path names, from the file system's root, as the superuser walks it (a
/// mount's root).
pub fn resolve(ns: &Namespace, path: &str) -> Result<Ino, Refusal> {
    let mut at = ROOT_INO;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        get_dir(ns, at)?;
        at = ns
            .dir(at)?
            .get(part.as_bytes())
            .ok_or_else(|| errno(libc::ENOENT, format!("{path}: no such directory")))?
            .ino;
    }
    get_dir(ns, at)?;
    Ok(at)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashSet};

    use super::*;
    use crate::namespace::Namespace;
    use crate::record::Names;

    const ROOT: Cred = Cred {
        uid: 0,
        gid: 0,
        groups: Vec::new(),
    };

    /// A namespace with an empty root directory, as a new file system starts.
    fn namespace() -> (Namespace, u64) {
        namespace_reserved(ROOT_INO + 1)
    }

    /// The same, as an MDS finds it that starts at reservation `reserved`.
    fn namespace_reserved(reserved: Ino) -> (Namespace, u64) {
        let mut ns = Namespace::new(Names { fs_id: 1 }, reserved, HashSet::new());
        ns.assume_empty_shard(0);
        ns.new_dir(ROOT_INO);
        let mut root = crate::server::tests_root();
        root.attr.perm = 0o777;
        ns.apply(
            &[Put::Inode {
                ino: ROOT_INO,
                inode: Some(root),
            }],
            1,
        );
        (ns, 1)
    }

    fn ctx(cred: &Cred) -> Ctx<'_> {
        Ctx {
            cred,
            root: ROOT_INO,
            now_ns: 1_000,
        }
    }

    /// Runs `decide` to completion (loading empty shards as a new file system would have them)
    /// and applies what it decided.
    fn run(
        ns: &mut Namespace,
        seq: &mut u64,
        decide: impl Fn(&Namespace) -> Decided,
    ) -> Result<Reply, i32> {
        loop {
            match decide(ns) {
                Ok(change) => {
                    *seq += 1;
                    ns.apply(&change.puts, *seq);
                    if let Some(dir) = change.new_dir {
                        ns.new_dir(dir);
                    }
                    return Ok(change.reply);
                }
                Err(Refusal::Missing(Missing::Shard(shard))) => ns.assume_empty_shard(shard),
                Err(Refusal::Missing(Missing::Inos)) => {
                    *seq += 1;
                    ns.apply(&[Put::NextIno(ns.reserved_ino + 16)], *seq);
                }
                Err(Refusal::Missing(missing)) => panic!("a test namespace lacks {missing:?}"),
                Err(Refusal::Errno(errno, _)) => return Err(errno),
            }
        }
    }

    fn attr(reply: Result<Reply, i32>) -> Attr {
        match reply {
            Ok(Reply::Attr(attr)) => attr,
            other => panic!("expected attributes, got {other:?}"),
        }
    }

    fn make(
        ns: &mut Namespace,
        seq: &mut u64,
        cred: &Cred,
        parent: Ino,
        name: &str,
        kind: Kind,
    ) -> Result<Reply, i32> {
        run(ns, seq, |ns| {
            let new = NewInode {
                kind,
                perm: 0o755,
                rdev: 0,
                target: None,
                claim: None,
            };
            create(ns, &ctx(cred), parent, name.as_bytes(), new, true)
        })
    }

    fn get_attr(ns: &Namespace, ino: Ino) -> Attr {
        ns.inode(ino).expect("loaded").expect("exists").attr.clone()
    }

    /// Link counts follow POSIX: a file has one per name, a directory two plus one per
    /// subdirectory; the last unlink queues the inode for purge and keeps its record.
    /// A create replayed to a new MDS takes the number its lost answer gave: once, for a
    /// name that is free, and only a number the replaced MDS may have handed out.
    #[test]
    fn a_replayed_create_claims_its_number_within_the_replaced_mds_reservations() {
        use crate::namespace::INOS_RESERVED;
        let reserved = 3 * INOS_RESERVED;
        let (mut ns, mut seq) = namespace_reserved(reserved);
        assert_eq!(ns.replayable, INOS_RESERVED..reserved);
        let claim = |ns: &mut Namespace, seq: &mut u64, name: &str, ino: Ino| {
            run(ns, seq, |ns| {
                let new = NewInode {
                    kind: Kind::File,
                    perm: 0o644,
                    rdev: 0,
                    target: None,
                    claim: Some(ino),
                };
                create(ns, &ctx(&ROOT), ROOT_INO, name.as_bytes(), new, false)
            })
        };
        let lost = reserved - 5;
        assert_eq!(attr(claim(&mut ns, &mut seq, "lost", lost)).ino, lost);
        assert_eq!(get_attr(&ns, lost).kind, Kind::File);
        assert_eq!(
            ns.next_ino, reserved,
            "new numbers still start at the reservation"
        );
        assert_eq!(
            claim(&mut ns, &mut seq, "again", lost),
            Err(libc::EEXIST),
            "a number is claimed once"
        );
        assert_eq!(
            claim(&mut ns, &mut seq, "lost", lost - 1),
            Err(libc::EEXIST),
            "a replay never takes over a file of the same name"
        );
        assert_eq!(
            claim(&mut ns, &mut seq, "old", INOS_RESERVED - 1),
            Err(libc::EINVAL),
            "older than the replaced MDS's reservations"
        );
        assert_eq!(
            claim(&mut ns, &mut seq, "new", reserved),
            Err(libc::EINVAL),
            "not handed out yet"
        );
        ns.purge.insert(lost - 2);
        assert_eq!(
            claim(&mut ns, &mut seq, "purged", lost - 2),
            Err(libc::EINVAL),
            "an unlinked file's number"
        );
        let fresh = attr(make(
            &mut ns,
            &mut seq,
            &ROOT,
            ROOT_INO,
            "fresh",
            Kind::File,
        ));
        assert_eq!(fresh.ino, reserved);
    }

    #[test]
    fn links_are_counted_and_the_last_unlink_queues_a_purge() {
        let (mut ns, mut seq) = namespace();
        let dir = attr(make(&mut ns, &mut seq, &ROOT, ROOT_INO, "d", Kind::Dir)).ino;
        assert_eq!(get_attr(&ns, ROOT_INO).nlink, 3);
        let file = attr(make(&mut ns, &mut seq, &ROOT, dir, "f", Kind::File)).ino;
        assert_eq!(
            make(&mut ns, &mut seq, &ROOT, dir, "f", Kind::File),
            Err(libc::EEXIST)
        );
        let linked = attr(run(&mut ns, &mut seq, |ns| {
            link(ns, &ctx(&ROOT), file, ROOT_INO, b"g")
        }));
        assert_eq!(linked.nlink, 2);
        run(&mut ns, &mut seq, |ns| {
            unlink(ns, &ctx(&ROOT), dir, b"f", false)
        })
        .expect("unlink");
        assert_eq!(get_attr(&ns, file).nlink, 1);
        assert!(ns.purge.is_empty());
        assert_eq!(
            run(&mut ns, &mut seq, |ns| unlink(
                ns,
                &ctx(&ROOT),
                ROOT_INO,
                b"d",
                false
            )),
            Err(libc::EISDIR)
        );
        run(&mut ns, &mut seq, |ns| {
            unlink(ns, &ctx(&ROOT), ROOT_INO, b"g", false)
        })
        .expect("unlink");
        assert!(ns.purge.contains(&file), "the last link queues a purge");
        assert_eq!(
            get_attr(&ns, file).nlink,
            0,
            "the record stays for open handles"
        );
        run(&mut ns, &mut seq, |ns| {
            unlink(ns, &ctx(&ROOT), ROOT_INO, b"d", true)
        })
        .expect("rmdir");
        assert_eq!(get_attr(&ns, ROOT_INO).nlink, 2);
        assert!(ns.inode(dir).expect("loaded").is_none());
    }

    /// A rename over a file drops the replaced file's link; moving a directory moves a link
    /// between the parents; a directory cannot move under itself; exchange swaps.
    #[test]
    fn rename_replaces_moves_and_exchanges() {
        let (mut ns, mut seq) = namespace();
        let a = attr(make(&mut ns, &mut seq, &ROOT, ROOT_INO, "a", Kind::Dir)).ino;
        let b = attr(make(&mut ns, &mut seq, &ROOT, ROOT_INO, "b", Kind::Dir)).ino;
        let x = attr(make(&mut ns, &mut seq, &ROOT, a, "x", Kind::File)).ino;
        let y = attr(make(&mut ns, &mut seq, &ROOT, b, "y", Kind::File)).ino;
        let args =
            |parent, name: &'static [u8], new_parent, new_name: &'static [u8], flags| RenameArgs {
                parent,
                name,
                new_parent,
                new_name,
                flags,
            };
        run(&mut ns, &mut seq, |ns| {
            rename(ns, &ctx(&ROOT), &args(a, b"x", b, b"y", 0))
        })
        .expect("rename over");
        assert_eq!(ns.dir(b).expect("loaded").get(b"y").map(|d| d.ino), Some(x));
        assert!(ns.dir(a).expect("loaded").get(b"x").is_none());
        assert!(
            ns.purge.contains(&y),
            "the replaced file lost its only link"
        );
        let sub = attr(make(&mut ns, &mut seq, &ROOT, a, "sub", Kind::Dir)).ino;
        assert_eq!(get_attr(&ns, a).nlink, 3);
        run(&mut ns, &mut seq, |ns| {
            rename(ns, &ctx(&ROOT), &args(a, b"sub", b, b"sub", 0))
        })
        .expect("move dir");
        assert_eq!((get_attr(&ns, a).nlink, get_attr(&ns, b).nlink), (2, 3));
        assert_eq!(ns.inode(sub).expect("loaded").expect("exists").parent, b);
        assert_eq!(
            run(&mut ns, &mut seq, |ns| rename(
                ns,
                &ctx(&ROOT),
                &args(ROOT_INO, b"b", sub, b"b", 0)
            )),
            Err(libc::EINVAL)
        );
        let z = attr(make(&mut ns, &mut seq, &ROOT, a, "z", Kind::File)).ino;
        assert_eq!(
            run(&mut ns, &mut seq, |ns| rename(
                ns,
                &ctx(&ROOT),
                &args(a, b"z", b, b"y", RENAME_NOREPLACE)
            )),
            Err(libc::EEXIST)
        );
        run(&mut ns, &mut seq, |ns| {
            rename(ns, &ctx(&ROOT), &args(a, b"z", b, b"sub", RENAME_EXCHANGE))
        })
        .expect("exchange");
        assert_eq!(
            ns.dir(a).expect("loaded").get(b"z").map(|d| d.ino),
            Some(sub)
        );
        assert_eq!(
            ns.dir(b).expect("loaded").get(b"sub").map(|d| d.ino),
            Some(z)
        );
        assert_eq!(
            (get_attr(&ns, a).nlink, get_attr(&ns, b).nlink),
            (3, 2),
            "the directory's link moved back"
        );
    }

    /// Another user may not add to a directory it cannot write, nor remove others' entries
    /// from a sticky one; a grant's root hides what lies outside it.
    #[test]
    fn permissions_and_grants_are_checked() {
        let (mut ns, mut seq) = namespace();
        let user = Cred {
            uid: 1000,
            gid: 1000,
            groups: Vec::new(),
        };
        let closed = attr(make(
            &mut ns,
            &mut seq,
            &ROOT,
            ROOT_INO,
            "closed",
            Kind::Dir,
        ))
        .ino;
        assert_eq!(
            make(&mut ns, &mut seq, &user, closed, "f", Kind::File),
            Err(libc::EACCES)
        );
        let tmp = attr(make(&mut ns, &mut seq, &ROOT, ROOT_INO, "tmp", Kind::Dir)).ino;
        let mode = SetAttr {
            perm: Some(0o1777),
            ..SetAttr::default()
        };
        run(&mut ns, &mut seq, |ns| setattr(ns, &ctx(&ROOT), tmp, &mode)).expect("chmod");
        make(&mut ns, &mut seq, &ROOT, tmp, "roots", Kind::File).expect("create");
        let mine = attr(make(&mut ns, &mut seq, &user, tmp, "mine", Kind::File));
        assert_eq!((mine.uid, mine.gid), (1000, 1000));
        assert_eq!(
            run(&mut ns, &mut seq, |ns| unlink(
                ns,
                &ctx(&user),
                tmp,
                b"roots",
                false
            )),
            Err(libc::EACCES)
        );
        run(&mut ns, &mut seq, |ns| {
            unlink(ns, &ctx(&user), tmp, b"mine", false)
        })
        .expect("own entry");
        assert_eq!(
            run(&mut ns, &mut seq, |ns| setattr(ns, &ctx(&user), tmp, &mode)),
            Err(libc::EPERM),
            "only the owner changes a mode"
        );

        let granted = Ctx {
            cred: &ROOT,
            root: tmp,
            now_ns: 1,
        };
        assert!(lookup(&ns, &granted, tmp, b"roots").is_ok());
        assert!(matches!(
            lookup(&ns, &granted, ROOT_INO, b"closed"),
            Err(Refusal::Errno(libc::EACCES, _))
        ));
        assert!(matches!(
            getattr(&ns, &granted, closed),
            Err(Refusal::Errno(libc::EACCES, _))
        ));
    }

    /// Pages of any size list every entry once, whatever the names' cookies.
    #[test]
    fn listings_page_through_every_entry_once() {
        let (mut ns, mut seq) = namespace();
        let names: BTreeSet<String> = (0..100).map(|i| format!("n{i}")).collect();
        for name in &names {
            make(&mut ns, &mut seq, &ROOT, ROOT_INO, name, Kind::File).expect("create");
        }
        for limit in [1, 7, 100, 1000] {
            let mut seen = Vec::new();
            let mut after = 2;
            loop {
                let Ok(Change {
                    reply: Reply::Entries { entries, more },
                    ..
                }) = readdir(&ns, &ctx(&ROOT), ROOT_INO, after, limit)
                else {
                    panic!("listing failed");
                };
                assert!(
                    entries.len() <= limit as usize
                        || entries.windows(2).all(|w| w[0].cookie == w[1].cookie)
                );
                for entry in &entries {
                    assert!(entry.cookie > after);
                    after = entry.cookie;
                    seen.push(String::from_utf8(entry.name.clone()).expect("UTF-8"));
                }
                if !more {
                    break;
                }
            }
            assert_eq!(seen.len(), names.len(), "limit {limit}");
            assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), names);
        }
    }
}
