//! The S3 gateway under failure (tests/s3/failures.py does the S3 side with boto3):
//! kill -9 during a load of PUTs and a multipart upload, then restart: every acknowledged
//! object reads back whole, nothing partial is visible, and the interrupted upload can be
//! aborted; and hostile requests (malformed XML, an oversized part, a body cut short, junk on
//! the TLS port) each get their error while the gateway keeps serving.
//!
//! Like s3_clients.rs, these need the venv `scripts/test` makes (COFFER_S3_VENV).

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{serial, LocalCluster};

/// Objects the load must have acknowledged before the gateway is killed.
const ACKED_BEFORE_KILL: usize = 6;
const LOAD_WAIT: Duration = Duration::from_secs(120);

fn python() -> PathBuf {
    let venv = std::env::var_os("COFFER_S3_VENV").unwrap_or_else(|| {
        panic!("COFFER_S3_VENV is not set: run the S3 tests through scripts/test (ensure_s3_tools)")
    });
    let python = PathBuf::from(venv).join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/test (ensure_s3_tools makes the venv)",
        python.display()
    );
    python
}

/// `failures.py ARGS` as user `user` of the cluster's gateway.
fn drill(cluster: &LocalCluster, user: &serde_json::Value, args: &[&str]) -> Command {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/s3/failures.py");
    let mut command = Command::new(python());
    command
        .arg(script)
        .args(args)
        .env("S3_ENDPOINT", cluster.s3_endpoint())
        .env("S3_CA", cluster.s3_ca())
        .env(
            "S3_ACCESS",
            user["access_key"].as_str().expect("access key"),
        )
        .env(
            "S3_SECRET",
            user["secret_key"].as_str().expect("secret key"),
        )
        .env_remove("AWS_CA_BUNDLE");
    command
}

fn create_user(cluster: &LocalCluster, name: &str) -> serde_json::Value {
    serde_json::from_str(&cluster.ok(&["user", "create", name, "--json"])).expect("user json")
}

fn run_ok(what: &str, command: &mut Command) -> String {
    let output = command.output().expect("run the drill");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

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
    let user = create_user(&cluster, "loader");
    let acked = cluster.dir.path().join("acked.txt");
    let acked_arg = acked.to_str().expect("UTF-8 path");
    let load = drill(&cluster, &user, &["load", "drill", acked_arg])
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
        &mut drill(&cluster, &user, &["check", "drill", acked_arg]),
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
    let user = create_user(&cluster, "hostile");
    let pid = cluster.pid_of("gw");
    let report = run_ok(
        "the hostile requests",
        &mut drill(&cluster, &user, &["hostile", "hostile"]),
    );
    assert!(report.contains("still serves"), "{report}");
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the gateway is gone\n{}",
        cluster.logs()
    );
}
