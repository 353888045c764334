//! `coffer bench cluster` runs end to end on tiny cells and reports every corner it promises,
//! in a replicated and an erasure-coded pool: numbers present and positive, the baseline at
//! 100 %, the space each put used. No timing is asserted.

use std::process::Command;

#[test]
fn bench_cluster_reports_every_corner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("cells.json");
    let output = Command::new(env!("CARGO_BIN_EXE_coffer"))
        .args([
            "bench",
            "cluster",
            "--seconds",
            "0.3",
            "--store-gib",
            "2",
            "--io-sizes",
            "4k",
            "--clients",
            "2",
            "--pool-types",
            "replicated,ec:2+1",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--dir")
        .arg(dir.path())
        .output()
        .expect("run coffer bench cluster");
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
    assert_eq!(cells.len(), 16, "4 corners x 2 pools x put/get");
    for cell in cells {
        // A 4 KiB object takes a 4 KiB block per copy, and at 2+1 a 4 KiB unit per shard.
        let used = cell["used_per_byte"].as_f64();
        match cell["op"].as_str() {
            Some("put") => assert!(used.is_some_and(|u| (2.9..4.0).contains(&u)), "{cell}"),
            _ => assert_eq!(used, None, "{cell}"),
        }
        assert!(cell["ops"].as_u64().unwrap_or(0) > 0, "{cell}");
        assert!(
            cell["cluster_cpu_s_per_gib"].as_f64().unwrap_or(0.0) > 0.0,
            "{cell}"
        );
        let pct = cell["pct_of_baseline"].as_f64().unwrap_or(0.0);
        assert!(pct.is_finite() && pct > 0.0, "{cell}");
        if cell["at_rest"] == "none"
            && cell["in_transit"] == "crc"
            && cell["pool_type"] == "replicated"
        {
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
        "the bench removes its clusters: {leftovers:?}"
    );
}
