//! The file system when things go wrong or are not allowed: every fsync'd file is whole
//! after the metadata daemon and then an OSD are killed with SIGKILL under a workload;
//! grants hold mounts to their file system, path and access, checked by the daemons, and a
//! removed client is stopped at its next operation; and file contents never reach a disk
//! or the wire in the clear, even where the stores and links encrypt nothing themselves.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::mounts::FsMount;
use common::{serial, Capture, LocalCluster};

/// The workload: creates file `fI`, writes `content(I)`, fsyncs and closes it, then prints
/// I; forever. A process of its own, so the test process holds no file of the mount open
/// (a daemon the test starts would inherit it, and its exec would close it: a FUSE flush
/// that waits for the metadata daemon being restarted).
const WORKLOAD: &str = "
import os, sys
d = sys.argv[1]
i = 0
while True:
    data = (b'file %d ' % i).ljust(64 * 1024 + i % 4096, bytes([97 + i % 26]))
    fd = os.open(os.path.join(d, 'f%d' % i), os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    print(i, flush=True)
    i += 1
";

fn content(i: usize) -> Vec<u8> {
    let mut bytes = format!("file {i} ").into_bytes();
    bytes.resize(64 * 1024 + i % 4096, b'a' + (i % 26) as u8);
    bytes
}

/// A workload process creates files, writes them, fsyncs and closes them, saying each once
/// fsync returned. The metadata daemon is killed with SIGKILL and restarted, then an OSD
/// is, while it runs. Afterwards a fresh mount finds every file the workload reported whole:
/// what fsync acknowledged survived both, and the workload saw no error (its requests waited
/// for the new MDS and for the PGs to peer).
#[test]
fn fsynced_files_survive_the_mds_and_an_osd_killed_mid_workload() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &["--fs", "fs", "--nbd", "none", "--gw", "none"]);
    let mount = FsMount::new(&cluster, "fs", &[]);
    let dir = mount.join("work");
    std::fs::create_dir(&dir).expect("mkdir");
    let mut workload = Command::new("python3")
        .args(["-c", WORKLOAD])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let done = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let done = done.clone();
        let stdout = workload.stdout.take().expect("workload's stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(i) = line.trim().parse::<usize>() {
                    done.lock().expect("lock").push(i);
                }
            }
        })
    };
    let count = |done: &Mutex<Vec<usize>>| done.lock().expect("lock").len();
    let wait_more = |cluster: &LocalCluster, than: usize, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while count(&done) < than + 20 {
            assert!(
                Instant::now() < deadline,
                "the workload stalled {what} at {} files:\n{}\n== the mount's log\n{}",
                count(&done),
                cluster.logs(),
                mount.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_more(&cluster, 0, "at first");
    cluster.kill_daemon("mds.a", libc::SIGKILL);
    let at_kill = count(&done);
    cluster.restart_mds();
    wait_more(&cluster, at_kill, "after the MDS was killed");
    cluster.kill(1, libc::SIGKILL);
    let at_kill = count(&done);
    wait_more(&cluster, at_kill, "after osd.1 was killed");
    cluster.restart_osd(1);
    wait_more(&cluster, count(&done), "after osd.1 came back");
    let _ = workload.kill();
    let status = workload.wait().expect("workload");
    reader.join().expect("reader thread");
    let mut stderr = String::new();
    if let Some(mut pipe) = workload.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    assert!(!status.success(), "the workload ran until it was stopped");
    assert!(
        !stderr.contains("Error"),
        "the workload saw an error: {stderr}\n{}",
        mount.log()
    );
    drop(mount);

    let fresh = FsMount::new(&cluster, "fs", &[]);
    let acknowledged = done.lock().expect("lock").clone();
    for i in &acknowledged {
        let got = std::fs::read(fresh.join(&format!("work/f{i}"))).unwrap_or_default();
        assert!(
            got == content(*i),
            "f{i} was fsync'd but reads back {} bytes",
            got.len()
        );
    }
    assert!(acknowledged.len() >= 80, "{} files", acknowledged.len());
}

/// The writer of the test below: at each line on its input, first creates the file named
/// by its argument, then writes and fsyncs it; it reports each step.
const REPLAYED_WRITER: &str = "
import os, sys
sys.stdin.readline()
fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
print('created', flush=True)
sys.stdin.readline()
os.write(fd, b'answered before the MDS died, synced after\\n' * 1000)
os.fsync(fd)
os.close(fd)
print('synced', flush=True)
";

/// A create the MDS answered but never journaled survives the MDS: with every OSD stopped
/// (SIGSTOP), the MDS answers a create from memory while its journal write waits; then the
/// MDS and every OSD are killed (SIGKILL), so that write is gone for good. The next MDS's
/// journal lacks the file; the mount replays the create (with the inode number it was
/// answered with) when its session reopens, and the writer's fsync succeeds. A fresh mount
/// reads the file whole.
#[test]
fn a_create_answered_but_never_journaled_is_replayed_to_the_next_mds() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &["--fs", "fs", "--nbd", "none", "--gw", "none"]);
    let mount = FsMount::new(&cluster, "fs", &[]);
    std::fs::create_dir(mount.join("work")).expect("mkdir");
    // Loads the directory and reserves inode numbers, so the create needs no OSD.
    std::fs::write(mount.join("work/first"), b"journaled").expect("write");
    let mut writer = Command::new("python3")
        .args(["-c", REPLAYED_WRITER])
        .arg(mount.join("work/lost"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut input = writer.stdin.take().expect("writer's stdin");
    let (said, lines) = std::sync::mpsc::channel();
    let stdout = writer.stdout.take().expect("writer's stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = said.send(line);
        }
    });
    let next_line = |what: &str| {
        lines
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("the writer never said {what:?}"))
    };

    for osd in 0..3 {
        cluster.signal(&format!("osd.{osd}"), libc::SIGSTOP);
    }
    input.write_all(b"create\n").expect("to the writer");
    input.flush().expect("to the writer");
    assert_eq!(next_line("created"), "created");
    cluster.kill_daemon("mds.a", libc::SIGKILL);
    for osd in 0..3 {
        cluster.kill(osd, libc::SIGKILL);
    }
    for osd in 0..3 {
        cluster.restart_osd(osd);
    }
    cluster.restart_mds();
    input.write_all(b"write\n").expect("to the writer");
    input.flush().expect("to the writer");
    let synced = lines.recv_timeout(Duration::from_secs(180));
    if synced.is_err() {
        let _ = writer.kill();
    }
    let status = writer.wait().expect("writer");
    let mut stderr = String::new();
    if let Some(mut pipe) = writer.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    assert!(
        status.success() && synced.as_deref() == Ok("synced"),
        "the writer failed ({status}): {stderr}\n== the mount's log\n{}\n{}",
        mount.log(),
        cluster.logs()
    );
    let logs = cluster.logs();
    assert!(
        logs.contains("applying a change the previous MDS answered but did not journal"),
        "the new MDS never applied a replayed change:\n{logs}"
    );
    drop(mount);

    let fresh = FsMount::new(&cluster, "fs", &[]);
    let got = std::fs::read(fresh.join("work/lost")).expect("the replayed file");
    assert_eq!(
        got,
        b"answered before the MDS died, synced after\n".repeat(1000)
    );
    assert_eq!(
        std::fs::read(fresh.join("work/first")).expect("the first file"),
        b"journaled"
    );
}

fn cli_err(cluster: &LocalCluster, args: &[&str]) -> String {
    let output = cluster.cli(args);
    assert!(!output.status.success(), "coffer {args:?} succeeded");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `coffer fs authorize` grants one file system, under one path, read-only or read-write.
/// The metadata daemon refuses a mount elsewhere and writes under a read-only grant; the
/// OSDs refuse a read-only client's writes to the data pool; and a client removed with
/// `coffer auth rm` is refused at its next operation while its mount stays up.
#[test]
fn grants_hold_mounts_to_their_file_system_path_and_access() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &["--fs", "fs", "--nbd", "none", "--gw", "none"]);
    cluster.ok(&["fs", "create", "two"]);
    let admin = FsMount::new(&cluster, "fs", &[]);
    std::fs::create_dir(admin.join("proj")).expect("mkdir");
    std::fs::write(admin.join("outside"), b"not theirs").expect("write");
    std::fs::write(admin.join("proj/readme"), b"hello").expect("write");
    let keyring = |name: &str| cluster.dir.path().join(format!("client.{name}.keyring"));

    let granted = cluster.ok(&["fs", "authorize", "fs", "client.proj", "/proj", "rw"]);
    assert!(granted.contains("fs=fs:/proj:rw"), "{granted}");
    let refused = FsMount::as_entity(&cluster, "fs", "client.proj", &keyring("proj"), &[])
        .err()
        .expect("mounting the whole file system is refused");
    assert!(refused.contains("only at /proj"), "{refused}");
    let refused = FsMount::as_entity(
        &cluster,
        "two",
        "client.proj",
        &keyring("proj"),
        &["--path", "/proj"],
    )
    .err()
    .expect("mounting another file system is refused");
    assert!(
        refused.contains("may not mount file system two"),
        "{refused}"
    );
    let proj = FsMount::as_entity(
        &cluster,
        "fs",
        "client.proj",
        &keyring("proj"),
        &["--path", "/proj"],
    )
    .expect("mount at its path");
    assert_eq!(std::fs::read(proj.join("readme")).expect("read"), b"hello");
    std::fs::write(proj.join("mine"), b"written by proj").expect("write under the grant");
    assert_eq!(
        std::fs::read(admin.join("proj/mine")).expect("read"),
        b"written by proj"
    );

    cluster.ok(&["fs", "authorize", "fs", "client.reader", "r"]);
    let reader = FsMount::as_entity(&cluster, "fs", "client.reader", &keyring("reader"), &[])
        .expect("read-only mount");
    assert_eq!(
        std::fs::read(reader.join("outside")).expect("read"),
        b"not theirs"
    );
    let write = std::fs::write(reader.join("nope"), b"x");
    assert_eq!(
        write.err().and_then(|e| e.raw_os_error()),
        Some(libc::EROFS)
    );
    // The OSDs hold the same line: the reader's key cannot write the data pool.
    let reader_keyring = keyring("reader").display().to_string();
    let refused = cli_err(
        &cluster,
        &[
            "--name",
            "client.reader",
            "--keyring",
            &reader_keyring,
            "obj",
            "put",
            "fs.data",
            "x",
            "/etc/hostname",
        ],
    );
    assert!(refused.contains("may not write"), "{refused}");

    cluster.ok(&["auth", "rm", "client.proj"]);
    let stopped = std::fs::write(proj.join("after"), b"x");
    assert_eq!(
        stopped.err().and_then(|e| e.raw_os_error()),
        Some(libc::EACCES),
        "a removed client is refused at its next operation"
    );
    assert!(!admin.join("proj/after").exists());
}

/// A marker written into files through a mount, on a cluster whose stores keep plaintext
/// (`--at-rest none`) and whose OSD links only checksum (`--in-transit crc`), never appears
/// in any store file or in a capture of the loopback traffic: the mount sealed it at the
/// edge before it left, and reads it back whole.
#[test]
fn file_contents_reach_no_disk_and_no_wire_in_the_clear() {
    let _serial = serial();
    let cluster = LocalCluster::start(
        3,
        &[
            "--fs",
            "fs",
            "--nbd",
            "none",
            "--gw",
            "none",
            "--at-rest",
            "none",
            "--in-transit",
            "crc",
            "--mon-transit",
            "secure",
        ],
    );
    let marker = format!("coffer-fs-marker-{}", std::process::id());
    let capture = Capture::start(&cluster.dir.path().join("lo.pcap"));
    let mount = FsMount::new(&cluster, "fs", &[]);
    let mut text = Vec::new();
    for _ in 0..20_000 {
        text.extend_from_slice(marker.as_bytes());
    }
    std::fs::write(mount.join("small"), marker.as_bytes()).expect("write");
    std::fs::write(mount.join("large"), &text).expect("write");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(mount.join("large"))
        .expect("open");
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(1001)).expect("seek");
    file.write_all(marker.as_bytes())
        .expect("an unaligned overwrite");
    file.sync_all().expect("fsync");
    drop(file);
    drop(mount);
    let fresh = FsMount::new(&cluster, "fs", &[]);
    assert_eq!(
        std::fs::read(fresh.join("small")).expect("read"),
        marker.as_bytes()
    );
    let mut want = text.clone();
    want[1001..1001 + marker.len()].copy_from_slice(marker.as_bytes());
    assert!(std::fs::read(fresh.join("large")).expect("read") == want);
    drop(fresh);
    let traffic = capture.stop();
    assert!(
        traffic.len() > text.len(),
        "the capture holds the traffic ({} bytes)",
        traffic.len()
    );
    assert!(
        !common::contains(&traffic, marker.as_bytes()),
        "the marker crossed the loopback in the clear"
    );
    let found = common::on_disk(cluster.dir.path(), marker.as_bytes());
    assert!(found.is_empty(), "the marker is on disk: {found:?}");
}
