//! A cluster whose stores fill: with the full ratio lowered so that a test fills it quickly,
//! writes of data are refused at once with each client's natural error (the client
//! library's `NoSpace`, the CLI's "no space", ENOSPC over NBD, 507 InsufficientCapacity
//! over S3), health names the full OSDs and the pools they hold, reads and deletes keep
//! working, and once deletes free space the marks go and writes are taken again, with no
//! restart. And a disk too small for the OSDs' stores ends `coffer up` with that reason,
//! leaving nothing running.
//!
//! The S3 side needs the venv `scripts/test` makes (COFFER_S3_VENV), as s3_failures.rs.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{run_ok, serial, LocalCluster, COFFER};

/// The stores count as full at this share (each OSD's store is 1 GiB in the tests).
const FULL_RATIO: &str = "0.3";
/// Most 4 MiB objects the fill may take before a write must have been refused.
const FILL_OBJECTS_MAX: usize = 200;

fn health_checks(cluster: &LocalCluster) -> Vec<String> {
    cluster.status()["health"]["checks"]
        .as_array()
        .map(|checks| {
            checks
                .iter()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A 4 KiB write at offset 0 of the NBD export through libnbd: the error number it fails
/// with, or 0.
fn nbd_write_errno(uri: &str) -> i64 {
    let script = "import nbd, sys\n\
                  h = nbd.NBD()\n\
                  h.connect_uri(sys.argv[1])\n\
                  try:\n    h.pwrite(b'z' * 4096, 0)\n    print(0)\n\
                  except nbd.Error as e:\n    print(e.errnum)\n";
    let out = run_ok(
        "an NBD write",
        std::process::Command::new("/usr/bin/python3").args(["-c", script, uri]),
    );
    out.trim().parse().expect("an error number")
}

#[test]
fn full_stores_refuse_writes_at_once_keep_reads_and_deletes_and_recover_by_themselves() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &[]);
    cluster.wait_s3();
    cluster.wait_nbd();
    let user = cluster.s3_user("filler");
    run_ok(
        "S3 objects before the fill",
        &mut cluster.s3_script(&user, "failures.py", &["full", "brimming", "before"]),
    );
    cluster.ok(&["osd", "set-nearfull-ratio", "0.2"]);
    let set = cluster.ok(&["osd", "set-full-ratio", FULL_RATIO]);
    assert!(set.contains("full at 30.0 %"), "{set}");

    // Fill the default pool with 4 MiB objects until a write is refused.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let object: Vec<u8> = (0..4 << 20).map(|i| (i % 251) as u8).collect();
    let (stored, refusal) = runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("data").await.expect("pool");
        for i in 0..FILL_OBJECTS_MAX {
            match pool
                .put(&format!("fill-{i}"), Bytes::from(object.clone()))
                .await
            {
                Ok(()) => {}
                Err(client::Error::NoSpace(why)) => return (i, why),
                Err(e) => panic!("fill-{i}: {e}"),
            }
        }
        panic!("{FILL_OBJECTS_MAX} objects of 4 MiB and no write refused")
    });
    assert!(stored > 0, "some objects went in before the stores filled");
    assert!(refusal.contains("is full"), "{refusal}");

    // Health says which OSDs and which pools, once the monitors mark them.
    cluster.wait_for("full OSDs marked", Duration::from_secs(30), |status| {
        status["health"]["status"] == "HEALTH_ERR"
    });
    let checks = health_checks(&cluster);
    assert!(
        checks
            .iter()
            .any(|c| c.contains("is full") && c.contains("writes to pools") && c.contains("data")),
        "{checks:?}"
    );
    let osds = cluster.ok(&["osd", "ls"]);
    assert!(osds.contains(" full "), "{osds}");

    // Every client is refused at once, with its own error.
    let asked = Instant::now();
    let put = cluster.cli(&["obj", "put", "data", "late", "/etc/hostname"]);
    let said = String::from_utf8_lossy(&put.stderr);
    assert!(!put.status.success());
    assert!(
        said.contains("no space") && said.contains("is full"),
        "{said}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "the refusal took {:?}",
        asked.elapsed()
    );
    assert_eq!(nbd_write_errno(&cluster.nbd_uri()), 28, "ENOSPC over NBD");
    run_ok(
        "S3 while full",
        &mut cluster.s3_script(&user, "failures.py", &["full", "brimming", "full"]),
    );

    // Reads and deletes work; deleting frees space, and writes come back by themselves.
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("data").await.expect("pool");
        assert_eq!(pool.get("fill-0").await.expect("read while full"), object);
        for i in 0..stored {
            pool.remove(&format!("fill-{i}"))
                .await
                .expect("delete while full");
        }
    });
    cluster.wait_for("the full marks gone", Duration::from_secs(60), |status| {
        status["health"]["checks"].as_array().is_some_and(|checks| {
            !checks
                .iter()
                .any(|c| c.as_str().is_some_and(|c| c.contains("full")))
        })
    });
    cluster.ok(&["obj", "put", "data", "late", "/etc/hostname"]);
    assert_eq!(nbd_write_errno(&cluster.nbd_uri()), 0, "NBD writes again");
    run_ok(
        "S3 after space is freed",
        &mut cluster.s3_script(&user, "failures.py", &["full", "brimming", "after"]),
    );
    cluster.stop();
}

/// `coffer up` on a 300 MiB tmpfs, for stores of 1 GiB: the first OSD cannot make its store,
/// and `coffer up` ends at once with the OSD's reason, stopping the monitor it started.
#[test]
fn a_disk_too_small_for_the_stores_ends_coffer_up_with_the_reason_and_no_orphans() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = dir.path().join("small-disk");
    std::fs::create_dir(&disk).expect("mount point");
    let mount = disk.to_str().expect("path");
    run_ok(
        "mounting a small tmpfs (root)",
        std::process::Command::new("mount").args([
            "-t",
            "tmpfs",
            "-o",
            "size=300m",
            "tmpfs",
            mount,
        ]),
    );
    let data = disk.join("cluster");
    // Bounded: before this was handled, `coffer up` ran on without its OSDs.
    let up = std::process::Command::new("timeout")
        .args(["120", COFFER])
        .args([
            "up",
            "--store-gib",
            "1",
            "--nbd",
            "none",
            "--gw",
            "none",
            "--fs",
            "none",
        ])
        .arg("--data")
        .arg(&data)
        .output()
        .expect("coffer up");
    let said = String::from_utf8_lossy(&up.stderr).into_owned();
    let left = std::process::Command::new("pgrep")
        .args(["-f", data.to_str().expect("path")])
        .output()
        .expect("pgrep");
    run_ok(
        "unmounting the tmpfs",
        std::process::Command::new("umount").arg(mount),
    );
    assert!(
        !up.status.success(),
        "coffer up went on without its OSDs: {said}"
    );
    assert!(
        said.contains("while starting") && said.contains("No space left on device"),
        "{said}"
    );
    assert!(
        left.stdout.is_empty(),
        "left running: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

/// A daemon's stderr is its log; on a file system that filled, the reason it stops cannot
/// be written, and it must still exit as a refusal (status 1), not as a crash (101, a
/// panic while printing it), which the supervisor would count against it.
#[test]
fn a_refusal_that_cannot_be_written_to_a_full_log_still_exits_with_status_1() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let status = std::process::Command::new(COFFER)
        .args(["--conf", "/nonexistent/coffer.toml", "osd", "--id", "0"])
        .stderr(full)
        .status()
        .expect("coffer runs");
    assert_eq!(status.code(), Some(1), "{status}");
}

/// A tmpfs mounted for a test, unmounted when dropped (after the cluster using it stops).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &std::path::Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).expect("mount point");
        run_ok(
            "mounting a tmpfs (root)",
            std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(at),
        );
        Tmpfs(at.to_path_buf())
    }

    fn free_bytes(&self) -> u64 {
        let out = run_ok(
            "df",
            std::process::Command::new("df")
                .args(["--output=avail", "-B1"])
                .arg(&self.0),
        );
        out.lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .expect("df's free bytes")
    }

    /// A file that takes all but `leave` bytes of the file system.
    fn fill(&self, leave: u64) -> std::path::PathBuf {
        let filler = self.0.join("filler");
        let size = self.free_bytes().saturating_sub(leave);
        run_ok(
            "filling the tmpfs",
            std::process::Command::new("fallocate")
                .args(["-l", &size.to_string()])
                .arg(&filler),
        );
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// The file system under one OSD's store fills (its metadata database grows there; the
/// data file does not). Short of room, the OSD counts as full, with the file system named
/// as the cause, and writes are refused while reads go on; with room again, writes resume.
/// Filled to the last byte under a burst of writes, a commit that fails stops the OSD
/// (its store refuses everything until opened again), `coffer up` starts it again, it
/// waits for room, and once there is room it catches up: nothing acknowledged is lost and
/// no one restarts anything by hand.
#[test]
fn the_file_system_under_a_store_filling_refuses_writes_and_recovers_without_a_restart() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    // Declared before the tmpfs so that it is dropped after it: the tmpfs is unmounted
    // (lazily, under the running OSD) before the cluster's directory is removed, which a
    // mount point inside it would stop halfway, leaving every other store on the disk.
    let cluster: LocalCluster;
    // 1 GiB for the store's data file, the rest for its metadata. The OSD's log stays on
    // the host's disk: on the full file system it could not say why the OSD stopped.
    let disk = Tmpfs::mount(&dir.path().join("osd.2").join("store"), "1400m");
    cluster = LocalCluster::start_in(dir, 3, &["--nbd", "none", "--gw", "none"], true);
    cluster.ok(&["obj", "put", "data", "before", "/etc/hostname"]);

    let filler = disk.fill(32 << 20);
    let deadline = Instant::now() + Duration::from_secs(30);
    let full = loop {
        let checks = health_checks(&cluster);
        if let Some(check) = checks.iter().find(|c| c.starts_with("osd.2 is full")) {
            break check.clone();
        }
        assert!(
            Instant::now() < deadline,
            "osd.2 not marked full: {checks:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        full.contains("the file system under its store has") && full.contains("full below 64 MiB"),
        "{full}"
    );
    let refused = cluster.cli(&["obj", "put", "data", "refused", "/etc/hostname"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("no space") && said.contains("osd.2"),
        "{said}"
    );
    let before = cluster.ok(&["obj", "get", "data", "before"]);
    assert_eq!(
        before,
        std::fs::read_to_string("/etc/hostname").expect("hostname")
    );
    std::fs::remove_file(&filler).expect("free the room");
    cluster.wait_for("osd.2 no longer full", Duration::from_secs(30), |s| {
        s["health"]["status"] == "HEALTH_OK"
    });
    cluster.ok(&["obj", "put", "data", "after", "/etc/hostname"]);

    // Every byte taken while writes arrive.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let pool = runtime.block_on(async { cluster.admin().await.pool("data").await.expect("pool") });
    let filler = disk.fill(0);
    let acked: Vec<(String, Bytes)> = runtime.block_on(async {
        let writes = (0..400).map(|n| {
            let pool = pool.clone();
            async move {
                let name = format!("burst-{n}");
                let data = Bytes::from(vec![n as u8; 16 << 10]);
                let put =
                    tokio::time::timeout(Duration::from_secs(60), pool.put(&name, data.clone()));
                matches!(put.await, Ok(Ok(()))).then_some((name, data))
            }
        });
        futures::future::join_all(writes)
            .await
            .into_iter()
            .flatten()
            .collect()
    });
    let stopped = cluster.wait_daemon(
        "osd.2",
        "stopped by its failed store and started again",
        Duration::from_secs(30),
        |d| d["crashes"].as_array().is_some_and(|c| !c.is_empty()) && d["phase"] == "running",
    );
    assert!(
        stopped["last_exit"]["log"]
            .as_str()
            .is_some_and(|log| log.contains("its store failed") && log.contains("No space")),
        "{stopped:#}\n{}",
        cluster.logs()
    );
    std::fs::remove_file(&filler).expect("free the room");
    cluster.wait_for(
        "every PG active+clean",
        Duration::from_secs(120),
        common::all_clean,
    );
    runtime.block_on(async {
        for (name, data) in &acked {
            let back = pool
                .get(name)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&back, data, "{name} reads back what was acknowledged");
        }
    });
    assert!(!acked.is_empty(), "writes went on while osd.2 was down");
}
