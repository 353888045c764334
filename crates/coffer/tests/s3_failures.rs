//! The S3 gateway under failure (tests/s3/failures.py does the S3 side with boto3):
//! kill -9 during a load of PUTs and two multipart uploads, then restart and collect the
//! garbage (`coffer gw gc`): every acknowledged object reads back whole, nothing partial is
//! visible, the garbage is gone, one interrupted upload completes whole and the other aborts;
//! and hostile requests (malformed XML, an oversized part, a body cut short, junk on
//! the TLS port) each get their error while the gateway keeps serving.
//!
//! Like s3_clients.rs, these need the venv `scripts/test` makes (COFFER_S3_VENV).

mod common;

use std::collections::BTreeSet;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{run_ok, serial, LocalCluster};

/// Objects the load must have acknowledged before the gateway is killed.
const ACKED_BEFORE_KILL: usize = 6;
const LOAD_WAIT: Duration = Duration::from_secs(120);

fn acked_objects(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with("objects/"))
        .count()
}

fn stop(mut child: Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_gateway_killed_mid_load_keeps_what_it_acknowledged_and_shows_nothing_partial() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &[]);
    cluster.wait_s3();
    let user = cluster.s3_user("loader");
    let acked = cluster.dir.path().join("acked.txt");
    let acked_arg = acked.to_str().expect("UTF-8 path");
    let load = cluster
        .s3_script(&user, "failures.py", &["load", "drill", acked_arg])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the load");
    let deadline = Instant::now() + LOAD_WAIT;
    while acked_objects(&acked) < ACKED_BEFORE_KILL {
        assert!(
            Instant::now() < deadline,
            "the load acknowledged {} objects in {LOAD_WAIT:?}\n{}",
            acked_objects(&acked),
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    cluster.kill_daemon("gw", libc::SIGKILL);
    // Without its gateway the load fails on its next request.
    stop(load);

    cluster.restart_gw();
    cluster.wait_s3();
    collect_garbage(&cluster);
    let report = run_ok(
        "the check after the restart and the collection",
        &mut cluster.s3_script(&user, "failures.py", &["check", "drill", acked_arg]),
    );
    assert!(
        report.contains("aborted"),
        "the check ran to its end:\n{report}"
    );
}

/// The number in `coffer gw gc`'s report before `what`.
fn reported(report: &str, what: &str) -> u64 {
    let words: Vec<&str> = report.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == what)
        .unwrap_or_else(|| panic!("no {what:?} in {report:?}"));
    words[at - 1]
        .parse()
        .unwrap_or_else(|_| panic!("no count before {what:?} in {report:?}"))
}

/// Collects the garbage the kill left, beside garbage planted as a killed PUT and a killed
/// upload start leave it (a stripe and an upload record that nothing names), with no grace
/// period: only the unnamed goes, and the check that follows finds every object and upload
/// whole.
fn collect_garbage(cluster: &LocalCluster) {
    let stripe = "gw.data.00000000000000000000000000c0ffee.0";
    let upload = "gw.upload.00000000c0ffee000000000000000000";
    let planted = cluster.dir.path().join("planted");
    std::fs::write(&planted, vec![7u8; 100_000]).expect("write");
    let planted = planted.to_str().expect("UTF-8 path");
    for name in [stripe, upload] {
        cluster.ok(&["obj", "put", "s3", name, planted]);
    }
    let spared = cluster.ok(&["gw", "gc"]);
    assert_eq!(reported(&spared, "stripe"), 0, "{spared}");
    assert_eq!(reported(&spared, "stray"), 0, "{spared}");

    // Counted here without the gateway's walk: instances of stripes that nothing names.
    let unnamed = unnamed_instances(cluster);
    assert!(unnamed.contains("00000000000000000000000000c0ffee"));
    let dry = cluster.ok(&["gw", "gc", "--older-than", "0s", "--dry-run"]);
    assert!(dry.starts_with("would remove"), "{dry}");
    assert_eq!(reported(&dry, "writes"), unnamed.len() as u64, "{dry}");
    assert_eq!(reported(&dry, "stray"), 1, "{dry}");
    cluster.ok(&["obj", "stat", "s3", stripe]);

    let collected = cluster.ok(&["gw", "gc", "--older-than", "0s"]);
    assert_eq!(
        reported(&collected, "stripe"),
        reported(&dry, "stripe"),
        "the dry run and the collection differ:\n{dry}{collected}"
    );
    for name in [stripe, upload] {
        let gone = cluster.cli(&["obj", "stat", "s3", name]);
        assert!(!gone.status.success(), "{name} survived the collection");
    }
    assert_eq!(unnamed_instances(cluster), BTreeSet::new());
    let again = cluster.ok(&["gw", "gc", "--older-than", "0s"]);
    assert_eq!(reported(&again, "stripe"), 0, "{again}");
}

/// The instances of the pool's stripe objects that no object and no upload in progress
/// names.
fn unnamed_instances(cluster: &LocalCluster) -> BTreeSet<String> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let named: BTreeSet<String> = runtime
        .block_on(cluster.s3_segments())
        .into_values()
        .flatten()
        .map(|segment| segment.instance)
        .collect();
    cluster
        .ok(&["obj", "ls", "s3"])
        .lines()
        .filter_map(|name| name.strip_prefix("gw.data."))
        .filter_map(|rest| {
            rest.rsplit_once('.')
                .map(|(instance, _)| instance.to_string())
        })
        .filter(|instance| !named.contains(instance))
        .collect()
}

#[test]
fn hostile_requests_get_their_errors_and_the_gateway_keeps_serving() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &[]);
    cluster.wait_s3();
    let user = cluster.s3_user("hostile");
    let pid = cluster.pid_of("gw");
    let report = run_ok(
        "the hostile requests",
        &mut cluster.s3_script(&user, "failures.py", &["hostile", "hostile"]),
    );
    assert!(report.contains("still serves"), "{report}");
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the gateway is gone\n{}",
        cluster.logs()
    );
}

/// A GET streaming a 40 MiB object while another request deletes it, or overwrites it,
/// reads the whole object it started with (the gateway removes the old stripes only when
/// the GET is done); so does one of an object of 2,000 parts, whose segments its entry
/// keeps out of line; afterwards nothing is left as garbage.
#[test]
fn a_get_raced_by_a_delete_or_an_overwrite_reads_what_it_started_with() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &[]);
    // Parts of any size, for the object of 2,000 parts.
    let mut conf = cluster.conf();
    conf.gw.as_mut().expect("a gateway").part_min_bytes = Some(1);
    conf.save(&cluster.conf).expect("save the configuration");
    cluster.ok(&["daemon", "restart", "gw"]);
    cluster.wait_s3();
    let user = cluster.s3_user("racer");
    let report = run_ok(
        "GETs raced by changes",
        &mut cluster.s3_script(&user, "failures.py", &["race", "raced"]),
    );
    assert!(
        report.contains("raced by delete reads the whole"),
        "{report}"
    );
    assert!(
        report.contains("raced by overwrite reads the whole"),
        "{report}"
    );
    assert!(
        report.contains("of 2,000 parts raced by overwrite reads the whole"),
        "{report}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !unnamed_instances(&cluster).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the raced objects' stripes were not removed after their GETs: {:?}",
            unnamed_instances(&cluster)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
