//! What a mount and the metadata daemon (MDS) say to each other: one [`Request`] per
//! namespace operation, answered by one [`Reply`]. File contents never travel here; mounts
//! read and write them in the data pool directly (docs/design/fs.md).
//!
//! Every request carries the session (the mount's client instance), a sequence number that
//! makes a resent request take effect once, and the caller's credentials, which the MDS
//! checks against the inode's owner and mode.

use serde::{Deserialize, Serialize};

/// An inode number; unique in its file system and never reused.
pub type Ino = u64;

/// The file system's root directory.
pub const ROOT_INO: Ino = 1;
/// Longest name in a directory, in bytes (as Linux's NAME_MAX).
pub const NAME_BYTES_MAX: usize = 255;
/// Longest symbolic link target, in bytes.
pub const TARGET_BYTES_MAX: usize = 4096;
/// Longest extended attribute name, in bytes (as Linux's XATTR_NAME_MAX).
pub const XATTR_NAME_BYTES_MAX: usize = 255;
/// Most bytes of extended attributes (names and values) on one inode.
pub const XATTRS_BYTES_MAX: usize = 64 << 10;
/// Most entries in one page of a directory listing.
pub const READDIR_PAGE_MAX: u32 = 1024;
/// How long a mount may trust attributes and names the MDS gave it without asking again;
/// the MDS also tells it at once when another mount changes them.
pub const LEASE_MS: u64 = 1000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl Kind {
    /// The kind in a `mode_t`'s file type bits.
    pub fn from_mode(mode: u32) -> Option<Kind> {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Some(Kind::File),
            libc::S_IFDIR => Some(Kind::Dir),
            libc::S_IFLNK => Some(Kind::Symlink),
            libc::S_IFIFO => Some(Kind::Fifo),
            libc::S_IFSOCK => Some(Kind::Socket),
            libc::S_IFCHR => Some(Kind::CharDevice),
            libc::S_IFBLK => Some(Kind::BlockDevice),
            _ => None,
        }
    }
}

/// An inode's attributes. Times are nanoseconds since the Unix epoch (negative before it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    pub ino: Ino,
    pub kind: Kind,
    /// Permission bits with set-user-id, set-group-id and sticky (07777).
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub btime_ns: i64,
    pub rdev: u32,
}

/// Who asks: the calling process's user, group and supplementary groups.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Cred {
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// A time to set: a given one, or the MDS's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetTime {
    At(i64),
    Now,
}

/// The attributes a `SetAttr` changes; `None` leaves one as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    pub perm: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// The mount has already cut (or left) the data objects; the MDS records the size.
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// `rename(2)`'s flags, as `renameat2` numbers them.
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;

/// `setxattr(2)`'s flags.
pub const XATTR_CREATE: u32 = 1;
pub const XATTR_REPLACE: u32 = 2;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Request {
    /// The file system the request is about.
    pub fs: String,
    /// The mount's session: its client instance, random per mount process.
    pub session: u64,
    /// Increases by one per request of the session; a request resent with the same number
    /// takes effect once.
    pub seq: u64,
    pub cred: Cred,
    pub op: Op,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Op {
    /// Opens (or reopens, after the MDS restarted) the session, rooted at `path`. `opens`
    /// are the inodes the mount still holds open.
    Mount {
        path: String,
        read_only: bool,
        opens: Vec<Ino>,
    },
    Lookup {
        parent: Ino,
        name: Vec<u8>,
    },
    GetAttr {
        ino: Ino,
    },
    SetAttr {
        ino: Ino,
        set: SetAttr,
    },
    /// Creates a file, directory, device, FIFO or socket (not a symbolic link), opened by the
    /// session if `open`.
    Create {
        parent: Ino,
        name: Vec<u8>,
        kind: Kind,
        perm: u16,
        rdev: u32,
        exclusive: bool,
        open: bool,
    },
    Symlink {
        parent: Ino,
        name: Vec<u8>,
        target: Vec<u8>,
    },
    Link {
        ino: Ino,
        parent: Ino,
        name: Vec<u8>,
    },
    Unlink {
        parent: Ino,
        name: Vec<u8>,
    },
    Rmdir {
        parent: Ino,
        name: Vec<u8>,
    },
    Rename {
        parent: Ino,
        name: Vec<u8>,
        new_parent: Ino,
        new_name: Vec<u8>,
        flags: u32,
    },
    /// Entries of directory `ino` whose cookie is above `after`, in cookie order.
    ReadDir {
        ino: Ino,
        after: u64,
        limit: u32,
    },
    ReadLink {
        ino: Ino,
    },
    /// The session opens `ino` (reading, or writing too): checked against its mode, and held
    /// so that unlinking it keeps its data until the last mount releases it.
    Open {
        ino: Ino,
        read: bool,
        write: bool,
    },
    Release {
        ino: Ino,
    },
    /// The session wrote `ino`'s data up to `end` (durably, in the data pool) at `mtime_ns`:
    /// its size becomes at least `end`.
    Written {
        ino: Ino,
        end: u64,
        mtime_ns: i64,
    },
    SetXattr {
        ino: Ino,
        name: Vec<u8>,
        value: Vec<u8>,
        flags: u32,
    },
    GetXattr {
        ino: Ino,
        name: Vec<u8>,
    },
    ListXattr {
        ino: Ino,
    },
    RemoveXattr {
        ino: Ino,
        name: Vec<u8>,
    },
    /// Changes by other sessions after event `after`; held until there is one, or for
    /// [`WATCH_HOLD_MS`]. Also keeps the session alive.
    Watch {
        after: u64,
    },
    Unmount,
    /// The sessions of the file system (operators, `mon=rw`).
    Sessions,
    /// Returns once every change the MDS has answered is in its journal: what `fsync`
    /// waits for (changes are answered as soon as they are decided and queued). Added last,
    /// so the other ops keep their numbers on the wire.
    Sync,
    /// A change this session had answered, sent again (with its first sequence number)
    /// after the session reopened on another MDS: applied only if the journal of the MDS
    /// that answered it lost it, and then as the inode it was answered with. The op travels
    /// encoded ([`Op::replay`]), so decoding a request never recurses. Added after `Sync`,
    /// so the other ops keep their numbers on the wire.
    Replay {
        tag: Tag,
        op: Vec<u8>,
    },
}

/// Where an answered change stands: the MDS that answered it (its instance) and the
/// number of its journal entry, and the inode it created or changed. Changes in a journal
/// are a prefix of those an MDS answered, so a successor that knows where that MDS's
/// journal ended knows whether the change survived it. `proof` is the file system's MDSs'
/// MAC of the tag with the session and sequence number: a mount cannot make up a tag (and
/// so claim an inode number it was never given).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tag {
    pub incarnation: u64,
    pub entry: u64,
    pub ino: Option<Ino>,
    pub proof: [u8; 16],
}

impl Op {
    /// `op`, answered with `tag`, to be replayed.
    pub fn replay(tag: Tag, op: &Op) -> Op {
        Op::Replay {
            tag,
            op: postcard::to_allocvec(op).expect("encoding into a Vec cannot fail"),
        }
    }

    /// The op's name, as metrics label it.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Mount { .. } => "mount",
            Op::Lookup { .. } => "lookup",
            Op::GetAttr { .. } => "get_attr",
            Op::SetAttr { .. } => "set_attr",
            Op::Create { .. } => "create",
            Op::Symlink { .. } => "symlink",
            Op::Link { .. } => "link",
            Op::Unlink { .. } => "unlink",
            Op::Rmdir { .. } => "rmdir",
            Op::Rename { .. } => "rename",
            Op::ReadDir { .. } => "read_dir",
            Op::ReadLink { .. } => "read_link",
            Op::Open { .. } => "open",
            Op::Release { .. } => "release",
            Op::Written { .. } => "written",
            Op::SetXattr { .. } => "set_xattr",
            Op::GetXattr { .. } => "get_xattr",
            Op::ListXattr { .. } => "list_xattr",
            Op::RemoveXattr { .. } => "remove_xattr",
            Op::Watch { .. } => "watch",
            Op::Unmount => "unmount",
            Op::Sessions => "sessions",
            Op::Sync => "sync",
            Op::Replay { .. } => "replay",
        }
    }

    /// Whether the op changes the namespace (and so is journaled, and refused under a
    /// read-only grant).
    pub fn is_change(&self) -> bool {
        matches!(
            self,
            Op::SetAttr { .. }
                | Op::Create { .. }
                | Op::Symlink { .. }
                | Op::Link { .. }
                | Op::Unlink { .. }
                | Op::Rmdir { .. }
                | Op::Rename { .. }
                | Op::Written { .. }
                | Op::SetXattr { .. }
                | Op::RemoveXattr { .. }
                | Op::Replay { .. }
        )
    }
}

/// How long the MDS holds a `Watch` with nothing to report.
pub const WATCH_HOLD_MS: u64 = 20_000;

/// One entry of a directory listing, with its attributes (as `readdirplus` wants them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    /// The entry's position: stable while it exists, whatever else is added or removed.
    pub cookie: u64,
    pub name: Vec<u8>,
    pub attr: Attr,
}

/// Something another session changed, for a mount to drop from its caches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// The inode's attributes (or contents) changed.
    Inode(Ino),
    /// The name in the directory now means something else (or nothing).
    Entry { parent: Ino, name: Vec<u8> },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub session: u64,
    pub entity: String,
    pub root: String,
    pub opens: u64,
    pub idle_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Mounted {
        root: Attr,
        fs_id: u32,
        data_pool: String,
        object_bytes: u64,
        /// The grant allows reading only.
        read_only: bool,
    },
    Attr(Attr),
    Entries {
        entries: Vec<DirEntry>,
        more: bool,
    },
    Target(Vec<u8>),
    Value(Vec<u8>),
    Names(Vec<Vec<u8>>),
    Done,
    Events {
        events: Vec<Event>,
        /// The id to watch after next.
        last: u64,
    },
    Sessions(Vec<SessionInfo>),
    /// The operation failed with this `errno`, for the reason given.
    Failed {
        errno: i32,
        why: String,
    },
    /// The MDS does not know this session (it restarted, or the session timed out): mount
    /// again with the same session and send the request again.
    StaleSession,
    /// This daemon does not serve the file system (any more): look its MDS up in the map
    /// again.
    NotHere(String),
    /// The answer to a change that was journaled (or queued for the journal): `reply`, and
    /// the change's `tag`, which the mount keeps until a `Sync` to replay the change should
    /// this MDS die before its journal holds it. Added last, as `Op::Replay`.
    Changed {
        tag: Tag,
        reply: Box<Reply>,
    },
}

/// Object names in a file system's pools. The file system's number keeps two file systems
/// apart even if an operator points both at one pool.
pub mod objects {
    use super::Ino;

    /// Bytes of file data per object in the data pool.
    pub const DATA_OBJECT_BYTES: u64 = 4 << 20;

    /// Object `index` of file `ino`'s data.
    pub fn data(fs_id: u32, ino: Ino, index: u64) -> String {
        format!("fs{fs_id}.{ino:x}.{index:08x}")
    }
}
