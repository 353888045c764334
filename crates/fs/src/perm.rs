//! POSIX permission checks, as the metadata daemon makes them for the credentials a mount
//! sends (the kernel makes the same checks first, from its cached attributes; the MDS's are
//! the ones that count, on the attributes it holds).

use crate::proto::{Attr, Cred, Kind};

pub const MAY_READ: u16 = 4;
pub const MAY_WRITE: u16 = 2;
pub const MAY_EXEC: u16 = 1;

pub const S_ISUID: u16 = 0o4000;
pub const S_ISGID: u16 = 0o2000;
pub const S_ISVTX: u16 = 0o1000;

/// Whether `cred` may access `attr` as `mask` (a combination of `MAY_*`). The superuser may
/// read and write anything, and execute what has an execute bit or is a directory.
pub fn allows(attr: &Attr, cred: &Cred, mask: u16) -> bool {
    if cred.uid == 0 {
        return mask & MAY_EXEC == 0 || attr.kind == Kind::Dir || attr.perm & 0o111 != 0;
    }
    let bits = if cred.uid == attr.uid {
        attr.perm >> 6
    } else if cred.in_group(attr.gid) {
        attr.perm >> 3
    } else {
        attr.perm
    } & 7;
    bits & mask == mask
}

/// Whether `cred` may remove or rename `child` out of directory `dir`: write and search on
/// the directory, and with the sticky bit set, ownership of the child or the directory.
pub fn may_delete(dir: &Attr, child: &Attr, cred: &Cred) -> bool {
    if !allows(dir, cred, MAY_WRITE | MAY_EXEC) {
        return false;
    }
    dir.perm & S_ISVTX == 0 || cred.uid == 0 || cred.uid == child.uid || cred.uid == dir.uid
}

/// Whether `cred` owns `attr` (or is the superuser): who may change its mode and times.
pub fn owns(attr: &Attr, cred: &Cred) -> bool {
    cred.uid == 0 || cred.uid == attr.uid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Attr;

    fn attr(kind: Kind, perm: u16, uid: u32, gid: u32) -> Attr {
        Attr {
            ino: 2,
            kind,
            perm,
            nlink: 1,
            uid,
            gid,
            size: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            btime_ns: 0,
            rdev: 0,
        }
    }

    fn cred(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        Cred {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn owner_group_and_others_get_their_own_bits() {
        let file = attr(Kind::File, 0o640, 1000, 100);
        assert!(allows(&file, &cred(1000, 1, &[]), MAY_READ | MAY_WRITE));
        assert!(!allows(&file, &cred(1000, 1, &[]), MAY_EXEC));
        assert!(allows(&file, &cred(2000, 100, &[]), MAY_READ));
        assert!(!allows(&file, &cred(2000, 100, &[]), MAY_WRITE));
        assert!(
            allows(&file, &cred(2000, 7, &[100]), MAY_READ),
            "supplementary group"
        );
        assert!(
            !allows(&file, &cred(2000, 7, &[]), MAY_READ),
            "others get nothing"
        );
        // The owner's bits apply to the owner even when the group's would allow more.
        let odd = attr(Kind::File, 0o070, 1000, 100);
        assert!(!allows(&odd, &cred(1000, 100, &[]), MAY_READ));
    }

    #[test]
    fn the_superuser_needs_an_execute_bit_only_to_execute() {
        let root = cred(0, 0, &[]);
        let file = attr(Kind::File, 0o600, 1000, 100);
        assert!(allows(&file, &root, MAY_READ | MAY_WRITE));
        assert!(!allows(&file, &root, MAY_EXEC));
        assert!(allows(&attr(Kind::File, 0o100, 1, 1), &root, MAY_EXEC));
        assert!(allows(&attr(Kind::Dir, 0o000, 1, 1), &root, MAY_EXEC));
    }

    #[test]
    fn a_sticky_directory_keeps_others_entries() {
        let tmp = attr(Kind::Dir, 0o1777, 0, 0);
        let mine = attr(Kind::File, 0o644, 1000, 100);
        assert!(may_delete(&tmp, &mine, &cred(1000, 100, &[])));
        assert!(!may_delete(&tmp, &mine, &cred(2000, 100, &[])));
        assert!(may_delete(&tmp, &mine, &cred(0, 0, &[])));
        let open = attr(Kind::Dir, 0o777, 0, 0);
        assert!(may_delete(&open, &mine, &cred(2000, 100, &[])));
        let closed = attr(Kind::Dir, 0o755, 0, 0);
        assert!(!may_delete(&closed, &mine, &cred(1000, 100, &[])));
    }
}
