//! The cluster through the CLI, as an operator uses it: `coffer up`, objects of many sizes
//! in two pools, listing and removal, capabilities, clear errors, and a restart that keeps
//! everything.

mod common;

use common::{serial, LocalCluster};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn objects_pools_and_capabilities_through_the_cli() {
    let _serial = serial();
    // No NBD export, so no default image: the pool listings hold only this test's objects.
    let mut cluster = LocalCluster::start(3, &["--nbd", "none"]);
    let dir = tempfile::tempdir().expect("tempdir");
    // The default pool is sealed at the edge (secure monitor links); this one by the OSDs,
    // so the objects below go through both kinds of pool.
    cluster.ok(&[
        "pool", "create", "second", "--size", "2", "--pg-num", "8", "--seal", "osd",
    ]);
    let pools = cluster.ok(&["pool", "ls"]);
    let sealed = |pool: &str| {
        pools
            .lines()
            .find(|line| line.starts_with(&format!("{pool} ")))
            .and_then(|line| line.rsplit("sealed at ").next())
            .and_then(|seal| seal.split(' ').next())
            .map(str::to_owned)
    };
    assert_eq!(sealed("data").as_deref(), Some("edge"), "{pools}");
    assert_eq!(sealed("second").as_deref(), Some("osd"), "{pools}");

    let sizes = [
        0usize,
        1,
        4095,
        4096,
        4097,
        65_536,
        1 << 20,
        (5 << 20) + 3,
        20 << 20,
    ];
    for (i, size) in sizes.iter().enumerate() {
        let input = dir.path().join(format!("in-{i}"));
        std::fs::write(&input, pattern(*size, i as u8)).expect("write input");
        let path = input.to_str().expect("utf-8 path");
        cluster.ok(&["obj", "put", "data", &format!("obj-{i}"), path]);
        cluster.ok(&["obj", "put", "second", &format!("obj-{i}"), path]);
    }
    for (i, size) in sizes.iter().enumerate() {
        for pool in ["data", "second"] {
            let output = dir.path().join(format!("out-{pool}-{i}"));
            let path = output.to_str().expect("utf-8 path");
            cluster.ok(&["obj", "get", pool, &format!("obj-{i}"), path]);
            let got = std::fs::read(&output).expect("read output");
            assert!(got == pattern(*size, i as u8), "{pool}/obj-{i} differs");
        }
        let stat = cluster.ok(&["obj", "stat", "data", &format!("obj-{i}"), "--json"]);
        let stat: serde_json::Value = serde_json::from_str(&stat).expect("stat json");
        assert_eq!(stat["size"].as_u64(), Some(*size as u64));
    }
    // Read again, the 20 MiB object comes from the primaries' read caches, which status
    // reports.
    let again = dir.path().join("again");
    cluster.ok(&["obj", "get", "data", "obj-8", again.to_str().expect("path")]);
    assert!(std::fs::read(&again).expect("read again") == pattern(sizes[8], 8));
    cluster.wait_for(
        "the second read served from memory",
        std::time::Duration::from_secs(10),
        |s| {
            let cache = &s["cache"];
            let held = cache["held_bytes"].as_u64().unwrap_or(0);
            cache["hit_bytes"].as_u64().unwrap_or(0) >= 20 << 20
                && held >= 20 << 20
                && held <= cache["limit_bytes"].as_u64().unwrap_or(0)
        },
    );
    let status = cluster.ok(&["status"]);
    assert!(
        status.contains("  cache:    ") && status.contains(" read from memory"),
        "{status}"
    );
    let listed = cluster.ok(&["obj", "ls", "data"]);
    assert_eq!(listed.lines().count(), sizes.len(), "{listed}");
    // Output for people: sizes in binary units with the exact bytes, dates in UTC.
    let stat = cluster.ok(&["obj", "stat", "data", "obj-7"]);
    assert!(
        stat.starts_with("obj-7: 5.0 MiB (5242883 bytes), modified 20") && stat.contains(" UTC"),
        "{stat}"
    );
    assert!(cluster
        .ok(&["obj", "stat", "data", "obj-8"])
        .contains(": 20 MiB, "));

    cluster.ok(&["obj", "rm", "data", "obj-0"]);
    let missing = cluster.cli(&["obj", "get", "data", "obj-0"]);
    assert!(!missing.status.success());
    let error = String::from_utf8_lossy(&missing.stderr);
    assert!(error.contains("no such object"), "{error}");
    assert_eq!(
        cluster.ok(&["obj", "ls", "data"]).lines().count(),
        sizes.len() - 1
    );
    assert_eq!(
        cluster.ok(&["obj", "ls", "second"]).lines().count(),
        sizes.len()
    );

    // Bad input gets a clear error and changes nothing.
    let bad_pool = cluster.cli(&["obj", "put", "nosuch", "x", "/etc/hostname"]);
    assert!(String::from_utf8_lossy(&bad_pool.stderr).contains("does not exist"));
    let bad_size = cluster.cli(&["pool", "create", "big", "--size", "11"]);
    assert!(!bad_size.status.success());
    // More copies than OSDs: created (OSDs may come), but said at once and in status.
    let wide = cluster.cli(&["pool", "create", "wide", "--size", "5", "--pg-num", "8"]);
    let warned = String::from_utf8_lossy(&wide.stderr);
    assert!(wide.status.success(), "{warned}");
    assert!(
        warned.contains("wants 5 copies, but the cluster has 3 OSDs in"),
        "{warned}"
    );
    let status = cluster.ok(&["status"]);
    assert!(
        status.contains("pool wide wants 5 copies but only 3 OSDs are in"),
        "{status}"
    );
    assert_eq!(
        status.matches("pgs:").count(),
        1,
        "one line of PG states: {status}"
    );
    cluster.ok(&["pool", "rm", "wide", "--yes-i-really-mean-it"]);
    let refused = cluster.cli(&["pool", "rm", "second"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--yes-i-really-mean-it"));

    // Capabilities: read-only, and limited to one pool.
    let reader = dir.path().join("reader.keyring");
    cluster.ok(&[
        "auth",
        "add",
        "client.reader",
        "--caps",
        "mon=r osd=r",
        "-o",
        reader.to_str().expect("path"),
    ]);
    let limited = dir.path().join("limited.keyring");
    cluster.ok(&[
        "auth",
        "add",
        "client.limited",
        "--caps",
        "mon=r osd=rw pool=second",
        "-o",
        limited.to_str().expect("path"),
    ]);
    let as_user = |name: &str, keyring: &std::path::Path, args: &[&str]| {
        let mut full = vec!["--name", name, "--keyring", keyring.to_str().expect("path")];
        full.extend_from_slice(args);
        cluster.cli(&full)
    };
    let read = as_user("client.reader", &reader, &["obj", "get", "data", "obj-1"]);
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let write = as_user(
        "client.reader",
        &reader,
        &["obj", "put", "data", "r", "/etc/hostname"],
    );
    assert!(!write.status.success());
    assert!(String::from_utf8_lossy(&write.stderr).contains("permission denied"));
    let other_pool = as_user("client.limited", &limited, &["obj", "get", "data", "obj-1"]);
    assert!(String::from_utf8_lossy(&other_pool.stderr).contains("permission denied"));
    let own_pool = as_user(
        "client.limited",
        &limited,
        &["obj", "put", "second", "mine", "/etc/hostname"],
    );
    assert!(
        own_pool.status.success(),
        "{}",
        String::from_utf8_lossy(&own_pool.stderr)
    );
    // Scrub is an operator's command.
    let scrub = as_user("client.limited", &limited, &["pool", "scrub", "second"]);
    assert!(
        String::from_utf8_lossy(&scrub.stderr).contains("may not scrub"),
        "{}",
        String::from_utf8_lossy(&scrub.stderr)
    );
    let scrubbed = cluster.ok(&["pool", "scrub", "second"]);
    assert!(
        scrubbed.contains("objects scrubbed, 0 inconsistent") && scrubbed.contains("(8 PGs, "),
        "{scrubbed}"
    );
    assert_eq!(scrubbed.lines().count(), 1, "one summary line: {scrubbed}");
    let verbose = cluster.ok(&["pool", "scrub", "second", "--verbose"]);
    assert_eq!(verbose.lines().count(), 9, "a line per PG: {verbose}");
    let no_pg = cluster.cli(&["pool", "scrub", "second", "--pg", "4096"]);
    assert!(String::from_utf8_lossy(&no_pg.stderr).contains("PGs (0 to"));
    let listing = cluster.ok(&["auth", "ls"]);
    assert!(
        listing.contains("client.reader") && listing.contains("osd.0"),
        "{listing}"
    );
    cluster.ok(&["auth", "rm", "client.reader"]);
    let revoked = as_user("client.reader", &reader, &["obj", "get", "data", "obj-1"]);
    assert!(!revoked.status.success(), "a removed key must stop working");

    // Ctrl-C: with no cluster, status says so at once and how to start one.
    cluster.stop();
    let asked = std::time::Instant::now();
    let none = cluster.cli(&["status"]);
    let said = String::from_utf8_lossy(&none.stderr);
    assert!(!none.status.success());
    assert!(
        said.contains("no cluster answers") && said.contains("coffer up"),
        "{said}"
    );
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(10),
        "status waited {:?} for a cluster that is not there",
        asked.elapsed()
    );
    // `coffer up` again: the same cluster with its data.
    cluster.resume(3);
    let output = dir.path().join("after-restart");
    cluster.ok(&[
        "obj",
        "get",
        "data",
        "obj-8",
        output.to_str().expect("path"),
    ]);
    assert!(std::fs::read(&output).expect("read") == pattern(sizes[8], 8));
    let status = cluster.status();
    assert_eq!(status["osds"]["up"].as_u64(), Some(3), "{status:#}");
    assert_eq!(status["health"]["status"], "HEALTH_OK", "{status:#}");
}

#[test]
fn three_monitors_keep_the_cluster_working_when_one_dies() {
    let _serial = serial();
    let cluster = LocalCluster::start(2, &["--mons", "3"]);
    let status = cluster.status();
    assert_eq!(
        status["monitors"].as_array().map(Vec::len),
        Some(3),
        "{status:#}"
    );
    cluster.ok(&["obj", "put", "data", "before", "/etc/hostname"]);
    let leader = status["leader"].as_str().expect("a leader").to_string();
    cluster.kill_daemon(&leader, libc::SIGKILL);
    // Map changes still commit, through the two that remain.
    cluster.ok(&["pool", "create", "after", "--size", "2", "--pg-num", "4"]);
    cluster.ok(&["obj", "put", "after", "x", "/etc/hostname"]);
    let status = cluster.status();
    let new_leader = status["leader"].as_str().expect("a leader");
    assert_ne!(new_leader, leader, "{status:#}");
    assert_eq!(
        cluster.ok(&["obj", "get", "data", "before"]),
        std::fs::read_to_string("/etc/hostname").expect("hostname")
    );
}
