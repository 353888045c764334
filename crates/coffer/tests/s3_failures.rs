//! The S3 gateway under failure (tests/s3/failures.py does the S3 side with boto3):
//! kill -9 during a load of PUTs and a multipart upload, then restart: every acknowledged
//! object reads back whole, nothing partial is visible, and the interrupted upload can be
//! aborted; and hostile requests (malformed XML, an oversized part, a body cut short, junk on
//! the TLS port) each get their error while the gateway keeps serving.
//!
//! Like s3_clients.rs, these need the venv `scripts/test` makes (COFFER_S3_VENV).

mod common;

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
    let report = run_ok(
        "the check after the restart",
        &mut cluster.s3_script(&user, "failures.py", &["check", "drill", acked_arg]),
    );
    assert!(
        report.contains("aborted"),
        "the check ran to its end:\n{report}"
    );
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
