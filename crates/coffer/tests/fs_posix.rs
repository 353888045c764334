//! The file system through real FUSE mounts of one cluster (`coffer up` with its default
//! file system and metadata daemon): files of every size read back as written, through a
//! second mount too; names behave as POSIX says (rename over a file, hard and symbolic links,
//! extended attributes, errors); permissions hold for another user; a directory of 10,000
//! entries lists whole; two mounts see each other's changes on open; and ordinary programs
//! (git, sqlite, tar, rsync) work unmodified.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use common::mounts::FsMount;
use common::{run_ok, LocalCluster};

static SHARED: Mutex<Weak<LocalCluster>> = Mutex::new(Weak::new());

/// The cluster the tests of this file share while any of them runs.
fn cluster() -> Arc<LocalCluster> {
    let mut slot = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(cluster) = slot.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(LocalCluster::start(
        3,
        &["--fs", "fs", "--nbd", "none", "--gw", "none"],
    ));
    *slot = Arc::downgrade(&cluster);
    cluster
}

/// A directory of its own for each test, in the shared file system.
fn own_dir(mount: &FsMount, name: &str) -> std::path::PathBuf {
    let dir = mount.join(name);
    std::fs::create_dir(&dir).expect("test directory");
    dir
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn errno_of(result: std::io::Result<impl Sized>) -> Option<i32> {
    result.err().and_then(|e| e.raw_os_error())
}

/// Files of sizes around the chunk (4 KiB) and object (4 MiB) boundaries read back whole
/// from the mount that wrote them and from a fresh one; a sparse file reads zeros in its
/// hole; truncation shrinks and grows with zeros; appends land at the end.
#[test]
fn files_keep_their_bytes_at_every_size() {
    let cluster = cluster();
    let mount = FsMount::new(&cluster, "fs", &[]);
    let dir = own_dir(&mount, "sizes");
    let sizes = [
        0usize,
        1,
        4095,
        4096,
        4097,
        (1 << 20) + 3,
        (4 << 20) - 1,
        (9 << 20) + 5,
    ];
    for (i, size) in sizes.iter().enumerate() {
        std::fs::write(dir.join(format!("f{size}")), pattern(*size, i as u8)).expect("write");
    }
    // A sparse file: one byte past 100 MiB.
    let sparse = dir.join("sparse");
    let mut file = std::fs::File::create(&sparse).expect("create");
    file.seek(SeekFrom::Start(100 << 20)).expect("seek");
    file.write_all(b"!").expect("write");
    drop(file);
    // Truncate down then up: the cut bytes come back as zeros.
    let cut = dir.join("cut");
    std::fs::write(&cut, pattern(10_000, 9)).expect("write");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&cut)
        .expect("open");
    file.set_len(5000).expect("shrink");
    file.set_len(8000).expect("grow");
    drop(file);
    // Appends.
    let log = dir.join("log");
    for line in 0..100 {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("open for append");
        writeln!(file, "line {line}").expect("append");
    }

    let fresh = FsMount::new(&cluster, "fs", &[]);
    for view in [&mount, &fresh] {
        let dir = view.join("sizes");
        for (i, size) in sizes.iter().enumerate() {
            let got = std::fs::read(dir.join(format!("f{size}"))).expect("read");
            assert!(
                got == pattern(*size, i as u8),
                "a file of {size} bytes read back different"
            );
        }
        let mut file = std::fs::File::open(dir.join("sparse")).expect("open sparse");
        assert_eq!(file.metadata().expect("stat").len(), (100 << 20) + 1);
        let mut hole = vec![1u8; 1 << 20];
        file.seek(SeekFrom::Start(50 << 20)).expect("seek");
        file.read_exact(&mut hole).expect("read hole");
        assert!(hole.iter().all(|b| *b == 0), "a hole reads as zeros");
        let mut last = Vec::new();
        file.seek(SeekFrom::Start(100 << 20)).expect("seek");
        file.read_to_end(&mut last).expect("read end");
        assert_eq!(last, b"!");
        let got = std::fs::read(dir.join("cut")).expect("read cut");
        let mut want = pattern(10_000, 9);
        want.truncate(5000);
        want.resize(8000, 0);
        assert!(
            got == want,
            "truncated then grown: the cut bytes read as zeros"
        );
        let text = std::fs::read_to_string(dir.join("log")).expect("read log");
        assert_eq!(text.lines().count(), 100);
        assert_eq!(text.lines().last(), Some("line 99"));
    }
}

/// Renames replace their target atomically, links count, symbolic links resolve, extended
/// attributes round-trip, and refusals carry the errno POSIX gives.
#[test]
fn names_behave_as_posix_says() {
    let cluster = cluster();
    let mount = FsMount::new(&cluster, "fs", &[]);
    let dir = own_dir(&mount, "names");
    std::fs::write(dir.join("a"), b"old").expect("write a");
    std::fs::write(dir.join("b"), b"new").expect("write b");
    std::fs::rename(dir.join("b"), dir.join("a")).expect("rename over a");
    assert_eq!(std::fs::read(dir.join("a")).expect("read"), b"new");
    assert!(!dir.join("b").exists());

    std::fs::hard_link(dir.join("a"), dir.join("a2")).expect("link");
    assert_eq!(std::fs::metadata(dir.join("a")).expect("stat").nlink(), 2);
    assert_eq!(
        std::fs::metadata(dir.join("a")).expect("stat").ino(),
        std::fs::metadata(dir.join("a2")).expect("stat").ino()
    );
    std::fs::remove_file(dir.join("a")).expect("unlink one name");
    assert_eq!(
        std::fs::read(dir.join("a2")).expect("read other name"),
        b"new"
    );
    assert_eq!(std::fs::metadata(dir.join("a2")).expect("stat").nlink(), 1);

    std::os::unix::fs::symlink("a2", dir.join("s")).expect("symlink");
    assert_eq!(
        std::fs::read_link(dir.join("s")).expect("readlink"),
        Path::new("a2")
    );
    assert_eq!(
        std::fs::read(dir.join("s")).expect("through the link"),
        b"new"
    );

    std::fs::create_dir(dir.join("sub")).expect("mkdir");
    std::fs::write(dir.join("sub/x"), b"x").expect("write");
    assert_eq!(
        errno_of(std::fs::remove_dir(dir.join("sub"))),
        Some(libc::ENOTEMPTY)
    );
    assert_eq!(
        errno_of(std::fs::create_dir(dir.join("sub"))),
        Some(libc::EEXIST)
    );
    let exclusive = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.join("a2"));
    assert_eq!(errno_of(exclusive), Some(libc::EEXIST));
    assert_eq!(
        errno_of(std::fs::rename(dir.join("sub"), dir.join("sub/inside"))),
        Some(libc::EINVAL)
    );
    assert_eq!(
        errno_of(std::fs::read(dir.join("missing"))),
        Some(libc::ENOENT)
    );
    // A directory moves with its contents; its old parent loses the link its new one gains.
    std::fs::create_dir(dir.join("other")).expect("mkdir");
    let links = |path: &Path| std::fs::metadata(path).expect("stat").nlink();
    let (before, other_before) = (links(&dir), links(&dir.join("other")));
    std::fs::rename(dir.join("sub"), dir.join("other/sub")).expect("move a directory");
    assert_eq!(
        std::fs::read(dir.join("other/sub/x")).expect("read moved"),
        b"x"
    );
    assert_eq!(links(&dir), before - 1);
    assert_eq!(links(&dir.join("other")), other_before + 1);
    std::fs::remove_file(dir.join("other/sub/x")).expect("unlink");
    std::fs::remove_dir(dir.join("other/sub")).expect("rmdir");

    let script = format!(
        "import os\n\
         p = {path:?}\n\
         os.setxattr(p, 'user.colour', b'blue')\n\
         assert os.getxattr(p, 'user.colour') == b'blue'\n\
         assert 'user.colour' in os.listxattr(p)\n\
         try:\n    os.setxattr(p, 'user.colour', b'red', os.XATTR_CREATE)\n    raise SystemExit('XATTR_CREATE replaced')\n\
         except FileExistsError:\n    pass\n\
         os.removexattr(p, 'user.colour')\n\
         try:\n    os.getxattr(p, 'user.colour')\n    raise SystemExit('removed attribute read')\n\
         except OSError as e:\n    assert e.errno == 61, e\n",
        path = dir.join("a2").display().to_string()
    );
    run_ok(
        "extended attributes",
        Command::new("python3").args(["-c", &script]),
    );
}

/// Another user is held to the modes: refused where the bits say so, allowed where they
/// do, and a sticky directory keeps its entries to their owners.
#[test]
fn a_second_user_is_held_to_the_modes() {
    let cluster = cluster();
    let mount = FsMount::new(&cluster, "fs", &["-o", "allow_other"]);
    let dir = own_dir(&mount, "perms");
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .args(args)
            .output()
            .expect("setpriv")
    };
    std::fs::write(dir.join("secret"), b"root only").expect("write");
    std::fs::set_permissions(dir.join("secret"), std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let secret = dir.join("secret").display().to_string();
    assert!(
        !as_nobody(&["cat", &secret]).status.success(),
        "nobody read a 0600 root file"
    );
    let inside = dir.join("new").display().to_string();
    assert!(
        !as_nobody(&["touch", &inside]).status.success(),
        "nobody wrote in a 0755 root directory"
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let out = as_nobody(&["touch", &inside]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::metadata(dir.join("new")).expect("stat").uid(),
        65534
    );
    assert!(
        !as_nobody(&["rm", "-f", &secret]).status.success(),
        "the sticky bit kept root's file"
    );
    std::fs::set_permissions(dir.join("secret"), std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    let out = as_nobody(&["cat", &secret]);
    assert_eq!(out.stdout, b"root only");
}

/// 10,000 entries in one directory: all listed (in pages of the MDS's), from another mount
/// too, and all gone after removal.
#[test]
fn a_directory_of_ten_thousand_entries_lists_whole() {
    let cluster = cluster();
    let mount = FsMount::new(&cluster, "fs", &[]);
    let dir = own_dir(&mount, "many");
    let script = format!(
        "import os\n\
         d = {dir:?}\n\
         for i in range(10000):\n    os.close(os.open(os.path.join(d, 'entry-%05d' % i), os.O_CREAT | os.O_WRONLY))\n",
        dir = dir.display().to_string()
    );
    run_ok(
        "creating 10,000 files",
        Command::new("python3").args(["-c", &script]),
    );
    let want: BTreeSet<String> = (0..10_000).map(|i| format!("entry-{i:05}")).collect();
    let other = FsMount::new(&cluster, "fs", &[]);
    for view in [mount.join("many"), other.join("many")] {
        let names: Vec<String> = std::fs::read_dir(&view)
            .expect("list")
            .map(|e| e.expect("entry").file_name().into_string().expect("UTF-8"))
            .collect();
        assert_eq!(names.len(), 10_000, "every entry once");
        assert_eq!(names.into_iter().collect::<BTreeSet<_>>(), want);
    }
    run_ok("removing them", Command::new("rm").arg("-rf").arg(&dir));
    assert!(!dir.exists());
}

/// Two mounts: what one closes the other reads on its next open (close-to-open), renames
/// and unlinks show on the other within the lease on names, and a file one mount holds open
/// stays readable there after the other unlinks it.
#[test]
fn two_mounts_see_each_other_close_to_open() {
    let cluster = cluster();
    let one = FsMount::new(&cluster, "fs", &[]);
    let two = FsMount::new(&cluster, "fs", &[]);
    let dir = own_dir(&one, "shared");
    let there = two.join("shared");
    for round in 0..5u8 {
        let bytes = pattern(5000 + usize::from(round) * 3000, round);
        std::fs::write(dir.join("f"), &bytes).expect("write on one");
        assert!(
            std::fs::read(there.join("f")).expect("read on two") == bytes,
            "round {round}"
        );
        let more = pattern(100, round + 50);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(there.join("f"))
            .expect("open on two");
        file.write_all(&more).expect("append on two");
        drop(file);
        let mut want = bytes.clone();
        want.extend_from_slice(&more);
        assert!(
            std::fs::read(dir.join("f")).expect("read on one") == want,
            "round {round} back"
        );
    }
    // Names are cached for a lease at most; the MDS's notice usually drops them sooner.
    let within_lease = |what: &str, shows: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_millis(2 * fs::proto::LEASE_MS);
        while !shows() {
            assert!(
                Instant::now() < deadline,
                "{what} did not show on two within the lease"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    std::fs::rename(dir.join("f"), dir.join("g")).expect("rename on one");
    within_lease("the rename", &|| {
        there.join("g").exists() && !there.join("f").exists()
    });

    let mut held = std::fs::File::open(there.join("g")).expect("open on two");
    std::fs::remove_file(dir.join("g")).expect("unlink on one");
    within_lease("the unlink", &|| !there.join("g").exists());
    let mut content = Vec::new();
    held.read_to_end(&mut content)
        .expect("read the unlinked file");
    assert_eq!(
        content.len(),
        5000 + 4 * 3000 + 100,
        "two still reads what it holds open"
    );
}

/// Ordinary programs, unmodified: git commits a tree and checks it, sqlite runs
/// transactions, tar extracts a tree identical to its source, and rsync copies one and then
/// finds nothing to copy.
#[test]
fn ordinary_programs_work_on_the_mount() {
    let cluster = cluster();
    let mount = FsMount::new(&cluster, "fs", &[]);
    let dir = own_dir(&mount, "programs");
    let source = tempfile::tempdir().expect("source");
    let tree = source.path().join("tree");
    run_ok(
        "a source tree",
        Command::new("cp")
            .arg("-a")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))
            .arg(&tree),
    );
    std::os::unix::fs::symlink("main.rs", tree.join("link")).expect("symlink");

    let repo = dir.join("repo");
    run_ok("cp", Command::new("cp").arg("-a").arg(&tree).arg(&repo));
    let git = |args: &[&str]| {
        let mut command = Command::new("git");
        command
            .args([
                "-c",
                "user.email=test@coffer",
                "-c",
                "user.name=test",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(&repo);
        run_ok(&format!("git {args:?}"), &mut command)
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "a tree on coffer"]);
    git(&["fsck", "--strict"]);
    assert!(
        git(&["status", "--porcelain"]).is_empty(),
        "nothing changed after the commit"
    );

    let db = dir.join("db.sqlite").display().to_string();
    let script = format!(
        "import sqlite3\n\
         db = sqlite3.connect({db:?})\n\
         db.execute('create table t (k integer primary key, v text)')\n\
         for i in range(200):\n    with db:\n        db.execute('insert into t values (?, ?)', (i, 'v%d' % i))\n\
         with db:\n    db.execute('update t set v = v || \"!\" where k % 2 = 0')\n\
         db.close()\n\
         db = sqlite3.connect({db:?})\n\
         assert db.execute('pragma integrity_check').fetchone()[0] == 'ok'\n\
         assert db.execute('select count(*) from t').fetchone()[0] == 200\n\
         assert db.execute('select v from t where k = 10').fetchone()[0] == 'v10!'\n"
    );
    run_ok("sqlite", Command::new("python3").args(["-c", &script]));

    let archive = source.path().join("tree.tar");
    run_ok(
        "tar c",
        Command::new("tar")
            .arg("cf")
            .arg(&archive)
            .arg("-C")
            .arg(&tree)
            .arg("."),
    );
    let extracted = dir.join("extracted");
    std::fs::create_dir(&extracted).expect("mkdir");
    run_ok(
        "tar x",
        Command::new("tar")
            .arg("xf")
            .arg(&archive)
            .arg("-C")
            .arg(&extracted),
    );
    run_ok(
        "diff -r after tar",
        Command::new("diff").arg("-r").arg(&tree).arg(&extracted),
    );

    let copy = dir.join("rsynced");
    let mut source_arg = tree.clone().into_os_string();
    source_arg.push("/");
    run_ok(
        "rsync -a",
        Command::new("rsync").arg("-a").arg(&source_arg).arg(&copy),
    );
    run_ok(
        "diff -r after rsync",
        Command::new("diff").arg("-r").arg(&tree).arg(&copy),
    );
    let again = run_ok(
        "rsync -a again",
        Command::new("rsync")
            .args(["-a", "--itemize-changes"])
            .arg(&source_arg)
            .arg(&copy),
    );
    assert!(again.trim().is_empty(), "the second rsync copied: {again}");
}
