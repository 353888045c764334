//! OSD failures under load, on a real cluster of processes: kill -9 one OSD of three
//! (size 3, min_size 2) during writes, then two; nothing acknowledged may be lost, writes
//! pause only while fewer than min_size copies can be made, and after the OSDs return every
//! replica holds the same objects. And `coffer up` supervising its daemons: restarts,
//! `coffer daemon`, and giving up on a daemon that cannot start.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::load::{check_all, content, kill_under_load, kill_under_writers_of, paused_put};
use common::{all_clean, serial, LocalCluster};
use messenger::message::ObjectOp;

#[test]
fn kill_one_osd_during_writes_then_it_catches_up() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let admin = runtime.block_on(cluster.admin());
    let pool = runtime.block_on(admin.pool("data")).expect("pool");
    let acked = kill_under_writers_of(&mut cluster, &runtime, &pool, (4, Some(4096)), 1, 2);
    runtime.block_on(check_all(&pool, &acked));

    cluster.restart_osd(1);
    cluster.wait_for("every PG clean again", Duration::from_secs(90), all_clean);
    runtime.block_on(check_all(&pool, &acked));
    drop(admin);
    same_on_every_osd(&cluster, &runtime, pool.id(), &acked);
}

/// Stops the OSDs (the monitor stays, to release their store keys) and compares their
/// stores: every one holds what was acknowledged, and the same objects.
fn same_on_every_osd(
    cluster: &LocalCluster,
    runtime: &tokio::runtime::Runtime,
    pool: map::PoolId,
    acked: &BTreeMap<String, (u64, Instant)>,
) {
    for osd in 0..3 {
        cluster.kill(osd, libc::SIGTERM);
    }
    let stores: Vec<_> = (0..3)
        .map(|osd| runtime.block_on(cluster.osd_contents(osd, pool)))
        .collect();
    for name in acked.keys() {
        assert!(stores[0].contains_key(name), "{name} missing on osd.0");
    }
    for osd in 1..3 {
        assert!(
            stores[osd] == stores[0],
            "osd.{osd} differs from osd.0: {} against {} objects",
            stores[osd].len(),
            stores[0].len()
        );
    }
}

/// A cluster of three OSDs with a pool of one PG (`one`), and its admin's handle on it: the
/// writes below all queue in that PG.
fn one_pg_cluster() -> (
    LocalCluster,
    tokio::runtime::Runtime,
    client::Cluster,
    client::Pool,
) {
    let cluster = LocalCluster::start(3, &[]);
    cluster.ok(&["pool", "create", "one", "--pg-num", "1"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let admin = runtime.block_on(cluster.admin());
    let pool = runtime.block_on(admin.pool("one")).expect("pool");
    (cluster, runtime, admin, pool)
}

/// Writes that queue in a PG behind the one in flight go to the replicas together, in one
/// transaction each: with sixteen writers rewriting 512 objects of a pool of one PG, its
/// primaries' groups hold several writes each, killing one of its three OSDs (the primary
/// or a replica) under them loses nothing acknowledged, and once it is back every copy
/// holds the same objects.
#[test]
fn writes_queued_in_one_pg_go_as_groups_and_survive_a_kill() {
    let _serial = serial();
    let (mut cluster, runtime, admin, pool) = one_pg_cluster();
    let acked = kill_under_writers_of(&mut cluster, &runtime, &pool, (16, Some(512)), 1, 2);
    runtime.block_on(check_all(&pool, &acked));

    cluster.restart_osd(1);
    cluster.wait_for("every PG clean again", Duration::from_secs(90), all_clean);
    runtime.block_on(check_all(&pool, &acked));
    let groups = cluster.osds_counter("coffer_osd_write_groups_total");
    let grouped = cluster.osds_counter("coffer_osd_write_group_writes_total");
    assert!(
        groups > 0.0 && grouped >= 2.0 * groups,
        "{grouped} writes in {groups} groups: sixteen writers on one PG make groups of several"
    );
    drop(admin);
    same_on_every_osd(&cluster, &runtime, pool.id(), &acked);
}

/// Sixteen writers committing entries to one object's omap, each a compare-and-swap of
/// keys of its own as S3 PUTs commit to their bucket's index (512 keys, each rewritten
/// from the value its writer last committed): the commits go as groups of several, killing
/// one of the three OSDs under them loses no acknowledged entry, and once it is back every
/// entry reads as last acknowledged. The index already holds 1.4 MiB of entries, as a
/// bucket of a few thousand objects does: more than one frame can carry, so recovery copies
/// it in pages, and scrub finds the copies alike.
#[test]
fn commits_to_one_index_go_as_groups_and_survive_a_kill() {
    let _serial = serial();
    let (mut cluster, runtime, _admin, pool) = one_pg_cluster();
    runtime
        .block_on(pool.create("index", false))
        .expect("create");
    let filled = |n: u64| (format!("fill-{n:05}").into_bytes(), vec![n as u8; 700]);
    const FILLED: u64 = 2000;
    for batch in 0..FILLED / 250 {
        let entries = (batch * 250..(batch + 1) * 250).map(filled).collect();
        runtime
            .block_on(pool.omap_set("index", entries))
            .expect("fill the index");
    }
    const KEYS: u64 = 512;
    let entry = |n: u64| (format!("key-{}", n % KEYS), n.to_be_bytes().to_vec());
    let commits = pool.clone();
    let acked = kill_under_load(&mut cluster, &runtime, 16, 1, 2, move |n| {
        let pool = commits.clone();
        async move {
            let (key, value) = entry(n);
            // The key's writer committed n - KEYS last (16 divides KEYS).
            let last = n.checked_sub(KEYS).map(|last| entry(last).1);
            let ops = vec![
                ObjectOp::AssertExists,
                ObjectOp::AssertOmap {
                    key: key.clone().into_bytes(),
                    value: last,
                },
                ObjectOp::OmapSet {
                    entries: vec![(key.clone().into_bytes(), value)],
                },
            ];
            let committed = pool.operate("index", ops, Bytes::new()).await;
            committed.expect("a commit of a key of its own must succeed");
            key
        }
    });
    let check = || async {
        let keys: Vec<Vec<u8>> = acked.keys().map(|k| k.clone().into_bytes()).collect();
        for chunk in keys.chunks(256) {
            let found = pool.omap_get("index", chunk.to_vec()).await.expect("get");
            for (key, value) in found {
                let key = String::from_utf8(key).expect("key");
                let (n, _) = acked[&key];
                assert_eq!(value, Some(entry(n).1), "{key} as acknowledged");
            }
        }
    };
    runtime.block_on(check());
    cluster.restart_osd(1);
    cluster.wait_for("every PG clean again", Duration::from_secs(90), all_clean);
    runtime.block_on(check());
    let mut after = None;
    let mut fills = Vec::new();
    loop {
        let (page, more) = runtime
            .block_on(pool.omap_list("index", after.clone(), 1000))
            .expect("list");
        after = page.last().map(|(key, _)| key.clone());
        fills.extend(
            page.into_iter()
                .filter(|(key, _)| key.starts_with(b"fill-")),
        );
        if !more {
            break;
        }
    }
    assert_eq!(fills, (0..FILLED).map(filled).collect::<Vec<_>>());
    let (out, err, ok) = common::scrub(&cluster, "one", &[]);
    assert!(ok && out.contains(", 0 inconsistent"), "{out}{err}");
    let groups = cluster.osds_counter("coffer_osd_write_groups_total");
    let grouped = cluster.osds_counter("coffer_osd_write_group_writes_total");
    assert!(
        groups > 0.0 && grouped >= 2.0 * groups,
        "{grouped} writes in {groups} groups: sixteen writers on one object make groups of several"
    );
}

/// Objects named near the limit (2,030 bytes of 2,048): a PG of a thousand and more of them
/// lists in pages that fit a frame, peers again when one of its three OSDs is killed under
/// writers (the log it answers with names each write), and once the OSD is back recovers
/// every acknowledged object.
#[test]
fn a_pg_of_long_names_lists_peers_and_recovers() {
    let _serial = serial();
    let (mut cluster, runtime, _admin, pool) = one_pg_cluster();
    let long = |n: u64| format!("{n:06}.").repeat(290);
    const FILLED: u64 = 1000;
    let mut acked = runtime.block_on(async {
        let mut writers = tokio::task::JoinSet::new();
        for w in 0..16 {
            let pool = pool.clone();
            writers.spawn(async move {
                for n in (w..FILLED).step_by(16) {
                    pool.put(&long(n), content(n)).await.expect("put");
                }
            });
        }
        while let Some(done) = writers.join_next().await {
            done.expect("writer");
        }
        (0..FILLED)
            .map(|n| (long(n), (n, Instant::now())))
            .collect::<BTreeMap<_, _>>()
    });
    let writes = pool.clone();
    acked.extend(kill_under_load(&mut cluster, &runtime, 4, 1, 2, move |n| {
        let pool = writes.clone();
        async move {
            let name = long(FILLED + n);
            pool.put(&name, content(n)).await.expect("put must succeed");
            name
        }
    }));
    let listed = runtime.block_on(pool.list()).expect("list");
    let mut listed: Vec<&str> = listed.iter().map(|name| name.as_str()).collect();
    listed.sort_unstable();
    assert!(
        listed.iter().copied().eq(acked.keys().map(String::as_str)),
        "{} objects listed, {} acknowledged",
        listed.len(),
        acked.len()
    );
    cluster.restart_osd(1);
    cluster.wait_for("every PG clean again", Duration::from_secs(90), all_clean);
    runtime.block_on(check_all(&pool, &acked));
    let (out, err, ok) = common::scrub(&cluster, "one", &[]);
    assert!(ok && out.contains(", 0 inconsistent"), "{out}{err}");
}

#[test]
fn two_osds_down_pauses_writes_until_one_returns() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let admin = runtime.block_on(cluster.admin());
    let pool = runtime.block_on(admin.pool("data")).expect("pool");
    let mut acked = BTreeMap::new();
    for n in 0..50u64 {
        runtime
            .block_on(pool.put(&format!("obj-{n}"), content(n)))
            .expect("put");
        acked.insert(format!("obj-{n}"), (n, Instant::now()));
    }
    cluster.kill(1, libc::SIGKILL);
    cluster.kill(2, libc::SIGKILL);
    // Every PG of every pool (the default pool and the gateway's) has one copy up.
    cluster.wait_for("inactive PGs reported", Duration::from_secs(40), |s| {
        let total: u64 = s["pgs"]
            .as_object()
            .map(|pgs| pgs.values().filter_map(|v| v.as_u64()).sum())
            .unwrap_or(0);
        s["osds"]["up"].as_u64() == Some(1)
            && total > 0
            && s["pgs"]["inactive"].as_u64() == Some(total)
    });
    let status = cluster.ok(&["status"]);
    assert!(status.contains("HEALTH_ERR"), "{status}");
    assert!(
        status.contains("min_size 2"),
        "the status says why: {status}"
    );

    // The CLI says why it waits, and for how long it will.
    let waited = std::process::Command::new("timeout")
        .args(["10", common::COFFER, "--conf"])
        .arg(&cluster.conf)
        .args(["obj", "put", "data", "cli-waits", "/etc/hostname"])
        .output()
        .expect("timeout coffer obj put");
    let said = String::from_utf8_lossy(&waited.stderr);
    assert_eq!(waited.status.code(), Some(124), "obj put returned: {said}");
    assert!(
        said.contains("waiting: pg") && said.contains("1 of its OSDs up, min_size 2"),
        "obj put waits without saying why: {said}"
    );

    // A write now waits (it is not refused, and not acknowledged) ...
    let paused = paused_put(&runtime, &pool, "with one copy");
    // ... until a second OSD returns.
    cluster.restart_osd(1);
    runtime
        .block_on(paused)
        .expect("join")
        .expect("the paused write completes");
    acked.insert("during-outage".into(), (999, Instant::now()));
    runtime.block_on(check_all(&pool, &acked));
    cluster.restart_osd(2);
    cluster.wait_for("every PG clean again", Duration::from_secs(90), all_clean);
    runtime.block_on(check_all(&pool, &acked));
}

#[test]
fn marking_an_osd_out_moves_its_copies_to_the_others() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(4, &[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let admin = runtime.block_on(cluster.admin());
    let pool = runtime.block_on(admin.pool("data")).expect("pool");
    assert!(
        pool.is_edge_sealed(),
        "coffer up's pools are sealed at the edge"
    );
    let mut acked = BTreeMap::new();
    for n in 0..100u64 {
        runtime
            .block_on(pool.put(&format!("obj-{n}"), content(n)))
            .expect("put");
        acked.insert(format!("obj-{n}"), (n, Instant::now()));
    }
    cluster.ok(&["osd", "out", "1"]);
    let listing = cluster.ok(&["osd", "ls"]);
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("osd.1") && l.contains(" out ")),
        "{listing}"
    );
    let waited = cluster.ok(&["wait", "clean", "--timeout", "90"]);
    assert!(waited.contains("PGs active+clean after"), "{waited}");
    assert!(all_clean(&cluster.status()), "wait clean returned early");
    runtime.block_on(check_all(&pool, &acked));

    // Every object now has its three copies on the three OSDs that are in.
    drop(admin);
    for osd in [0, 2, 3] {
        cluster.kill(osd, libc::SIGTERM);
    }
    let stores: Vec<_> = [0, 2, 3]
        .iter()
        .map(|osd| runtime.block_on(cluster.osd_contents(*osd, pool.id())))
        .collect();
    // The default pool is sealed at the edge: the copies are sealed chunks, alike on every
    // OSD, and what they open to was checked through the client above.
    for name in acked.keys() {
        let copies: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(i, store)| {
                store
                    .get(name)
                    .unwrap_or_else(|| panic!("{name} has no copy on the {i}th OSD that is in"))
            })
            .collect();
        assert!(
            copies.iter().all(|copy| *copy == copies[0]),
            "{name} differs between OSDs"
        );
    }
    cluster.stop();
}

fn gone(pid: i64) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.split(") ")
        .nth(1)
        .is_none_or(|rest| rest.starts_with('Z'))
}

/// `coffer up` as a person runs it looks after its daemons: one killed with SIGKILL is
/// started again and its crash shown in `coffer status`; `coffer daemon stop|start|restart`
/// do the same by hand; one that cannot start is given up on after six quick crashes, with
/// its reason, until the operator starts it; Ctrl-C stops every one of them.
#[test]
fn coffer_up_restarts_crashed_daemons_and_gives_up_on_hopeless_ones() {
    let _serial = serial();
    let mut cluster = LocalCluster::start_supervised(3, &["--nbd", "none", "--gw", "none"]);
    cluster.ok(&["obj", "put", "data", "before", "/etc/hostname"]);

    let old = i64::from(cluster.pid(1));
    cluster.kill(1, libc::SIGKILL);
    let osd = cluster.wait_daemon("osd.1", "started again", Duration::from_secs(30), |d| {
        d["phase"] == "running" && d["pid"].as_i64().is_some_and(|pid| pid != old)
    });
    assert_eq!(osd["crashes"].as_array().map(Vec::len), Some(1), "{osd:#}");
    assert_eq!(
        osd["last_exit"]["how"], "killed by signal 9 (SIGKILL)",
        "{osd:#}"
    );
    cluster.wait_for("every PG active+clean", Duration::from_secs(60), all_clean);
    let status = cluster.ok(&["status"]);
    for expected in [
        "HEALTH_WARN",
        "osd.1 crashed 1 time in the last hour",
        "killed by signal 9 (SIGKILL)",
        "daemons:  4 of 4 running under coffer up",
    ] {
        assert!(status.contains(expected), "{expected:?} in:\n{status}");
    }
    let json = cluster.status();
    assert_eq!(json["health"]["status"], "HEALTH_WARN", "{json:#}");
    assert_eq!(
        json["daemons"].as_array().map(Vec::len),
        Some(4),
        "{json:#}"
    );

    // Stopped by hand, an OSD stays down until started by hand.
    let said = cluster.ok(&["daemon", "stop", "osd.2"]);
    assert!(said.contains("osd.2: stopped"), "{said}");
    cluster.wait_for("osd.2 marked down", Duration::from_secs(30), |s| {
        s["osds"]["up"].as_u64() == Some(2)
    });
    assert_eq!(cluster.daemon("osd.2")["phase"], "stopped");
    let waited = cluster.cli(&["wait", "clean", "--timeout", "2"]);
    let said = String::from_utf8_lossy(&waited.stderr);
    assert!(
        !waited.status.success()
            && said.contains("PGs are not active+clean (")
            && said.contains("active+undersized"),
        "three copies on two OSDs never come clean: {said}"
    );
    let listed = cluster.ok(&["daemon", "ls"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("osd.2") && l.contains("stopped")),
        "{listed}"
    );
    cluster.ok(&["daemon", "start", "osd.2"]);
    cluster.ok(&["wait", "clean", "--timeout", "60"]);

    let mon = cluster.daemon("mon.a")["pid"].as_i64().expect("mon pid");
    cluster.ok(&["daemon", "restart", "mon.a"]);
    assert!(gone(mon), "the old monitor is stopped");
    let again = cluster.daemon("mon.a");
    assert_eq!(again["phase"], "running", "{again:#}");
    assert_eq!(
        again["crashes"].as_array().map(Vec::len),
        Some(0),
        "{again:#}"
    );
    let refused = cluster.cli(&["daemon", "restart", "osd.9"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no daemon osd.9"),
        "{refused:?}"
    );

    // An OSD whose keyring is gone fails at every start: given up on, with the reason.
    let keyring = cluster.dir.path().join("osd.0/keyring");
    let away = cluster.dir.path().join("osd.0/keyring.away");
    std::fs::rename(&keyring, &away).expect("move the keyring away");
    cluster.kill(0, libc::SIGKILL);
    let failed = cluster.wait_daemon("osd.0", "given up on", Duration::from_secs(90), |d| {
        d["phase"] == "failed"
    });
    assert_eq!(
        failed["crashes"].as_array().map(Vec::len),
        Some(6),
        "{failed:#}"
    );
    assert!(
        failed["last_exit"]["log"]
            .as_str()
            .is_some_and(|log| log.contains("keyring")),
        "the last exit says why: {failed:#}"
    );
    let status = cluster.ok(&["status"]);
    assert!(status.contains("osd.0 failed: crashed 6 times"), "{status}");
    assert!(
        status.contains("3 of 4 running under coffer up; osd.0 failed"),
        "{status}"
    );
    std::fs::rename(&away, &keyring).expect("put the keyring back");
    cluster.ok(&["daemon", "start", "osd.0"]);
    cluster.wait_for("every PG active+clean", Duration::from_secs(60), all_clean);
    let back = cluster.ok(&["obj", "get", "data", "before"]);
    assert_eq!(
        back,
        std::fs::read_to_string("/etc/hostname").expect("hostname")
    );

    let text = cluster.ok(&["daemon", "ls", "--json"]);
    let all: serde_json::Value = serde_json::from_str(&text).expect("json");
    let pids: Vec<i64> = all
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|d| d["pid"].as_i64())
        .collect();
    assert_eq!(pids.len(), 4, "{text}");
    cluster.stop();
    for pid in pids {
        assert!(gone(pid), "pid {pid} outlived coffer up");
    }
    let after = cluster.cli(&["daemon", "ls"]);
    assert!(
        String::from_utf8_lossy(&after.stderr).contains("no `coffer up` runs"),
        "{after:?}"
    );
}
