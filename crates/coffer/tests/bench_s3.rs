//! `coffer bench s3` runs end to end on tiny cells, twice, in a replicated pool and with the
//! content in an erasure-coded one, and reports every configuration it promises: numbers
//! present and positive, the baseline at 100 % in each repetition, the gateway's CPU
//! counted, each pool's raw space per byte stored.
//! No timing is asserted.

use std::process::Command;

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
