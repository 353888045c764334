//! `coffer bench s3` runs end to end on tiny cells, twice, in a replicated pool and with the
//! content in an erasure-coded one, and reports every configuration it promises: numbers
//! present and positive, the baseline at 100 % in each repetition, the gateway's CPU
//! counted, each pool's raw space per byte stored.
//! Pointed at a running server's endpoint instead, it measures that server with its
//! processes' CPU, refuses a transport or encryption it cannot measure, and leaves nothing
//! behind. No timing is asserted.

mod common;

use std::process::Command;

use common::LocalCluster;

#[test]
fn bench_s3_reports_every_configuration() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("cells.json");
    let output = Command::new(env!("CARGO_BIN_EXE_coffer"))
        .args([
            "bench",
            "s3",
            "--seconds",
            "0.3",
            "--store-gib",
            "2",
            "--io-sizes",
            "64k",
            "--clients",
            "2",
            "--repeat",
            "2",
            "--pool-types",
            "replicated,ec:2+1",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--dir")
        .arg(dir.path())
        .output()
        .expect("run coffer bench s3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("command: "), "the bench prints its command");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    let cells = doc["cells"].as_array().expect("cells");
    assert_eq!(
        cells.len(),
        48,
        "2 pool types x 2 repetitions x 6 configurations x put/get"
    );
    let mut configs: Vec<&str> = cells
        .iter()
        .filter(|c| c["repetition"] == 0)
        .filter_map(|c| c["config"].as_str())
        .collect();
    configs.dedup();
    assert_eq!(
        configs,
        [
            "http/none",
            "https/none",
            "http/sse-s3",
            "https/sse-s3",
            "http/sse-c",
            "https/sse-c",
            "http/none ec:2+1",
            "https/none ec:2+1",
            "http/sse-s3 ec:2+1",
            "https/sse-s3 ec:2+1",
            "http/sse-c ec:2+1",
            "https/sse-c ec:2+1"
        ]
    );
    // Three copies, and 2+1 keeps 1.5 bytes per byte (plus the stores' own records).
    let space = &doc["config"]["space_raw_per_byte"];
    let replicated = space["replicated"].as_f64().unwrap_or(0.0);
    let coded = space["ec:2+1"].as_f64().unwrap_or(0.0);
    assert!((2.9..3.5).contains(&replicated), "{space}");
    assert!((1.45..1.8).contains(&coded), "{space}");
    for cell in cells {
        assert!(cell["ops"].as_u64().unwrap_or(0) > 0, "{cell}");
        assert!(cell["mib_s"].as_f64().unwrap_or(0.0) > 0.0, "{cell}");
        assert!(
            cell["gateway_cpu_s_per_gib"].as_f64().unwrap_or(0.0) > 0.0,
            "{cell}"
        );
        let pct = cell["pct_of_baseline"].as_f64().unwrap_or(0.0);
        assert!(pct.is_finite() && pct > 0.0, "{cell}");
        if cell["config"] == "http/none" {
            assert!((pct - 100.0).abs() < 1e-9, "{cell}");
        }
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name() != "cells.json")
        .collect();
    assert!(
        leftovers.is_empty(),
        "the bench removes its cluster: {leftovers:?}"
    );
}

/// `coffer bench s3 --endpoint`, as against radosgw, here against a running `coffer up`'s
/// gateway: every configuration of its transport measured, the server's CPU counted from
/// the pids given, and the buckets it made removed (the user can be removed after it).
#[test]
fn bench_s3_measures_a_running_endpoint_and_leaves_nothing() {
    let cluster = LocalCluster::start(3, &[]);
    cluster.wait_s3();
    let printed = cluster.ok(&["user", "create", "bench-endpoint", "--json"]);
    let user: serde_json::Value = serde_json::from_str(&printed).expect("user create --json");
    let key = |field: &str| user[field].as_str().expect("a key").to_string();
    let (access, secret) = (key("access_key"), key("secret_key"));
    let endpoint = cluster.s3_endpoint();
    let ca = cluster.s3_ca();
    let gateway_pid = cluster.pid_of("gw").to_string();
    let osd_pids = (0..3)
        .map(|osd| cluster.pid(osd).to_string())
        .collect::<Vec<_>>()
        .join(",");
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("cells.json");
    let bench = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_coffer"))
            .args(["bench", "s3", "--seconds", "0.3", "--io-sizes", "64k"])
            .args([
                "--clients",
                "2",
                "--endpoint",
                &endpoint,
                "--access-key",
                &access,
            ])
            .args(["--secret-key", &secret])
            .args(extra)
            .output()
            .expect("run coffer bench s3")
    };
    let ca_arg = ca.to_str().expect("a path in UTF-8");
    let json_arg = json.to_str().expect("a path in UTF-8");
    let output = bench(&[
        "--ca",
        ca_arg,
        "--gateway-pid",
        &gateway_pid,
        "--cluster-pid",
        &osd_pids,
        "--json",
        json_arg,
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    let cells = doc["cells"].as_array().expect("cells");
    let configs: Vec<&str> = cells.iter().filter_map(|c| c["config"].as_str()).collect();
    assert_eq!(
        configs,
        [
            "https/none",
            "https/none",
            "https/sse-s3",
            "https/sse-s3",
            "https/sse-c",
            "https/sse-c"
        ],
        "one https endpoint x 3 encryptions x put/get"
    );
    for cell in cells {
        assert!(cell["ops"].as_u64().unwrap_or(0) > 0, "{cell}");
        assert!(
            cell["gateway_cpu_s_per_gib"].as_f64().unwrap_or(0.0) > 0.0,
            "{cell}"
        );
        assert!(
            cell["cluster_cpu_s_per_gib"].as_f64().unwrap_or(0.0) > 0.0,
            "{cell}"
        );
    }

    // What it cannot measure is refused before it writes anything.
    let refused = bench(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("needs --ca"),
        "an https endpoint without its authority: {stderr}"
    );
    let refused = bench(&["--ca", ca_arg, "--endpoint", &endpoint]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("one https:// endpoint at most"),
        "two https endpoints: {stderr}"
    );

    // Every bucket the bench made is gone, else the user could not be removed.
    cluster.ok(&["user", "rm", "bench-endpoint"]);
}
