//! `coffer bench fs` runs end to end (a fresh cluster, a mount per cell, sysbench's fileio
//! test) on tiny cells and reports every cell it promises: numbers present and positive,
//! the readahead extremes compared, the verdict line printed. No timing is asserted.

use std::process::Command;

#[test]
fn bench_fs_reports_every_cell() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("cells.json");
    let output = Command::new(env!("CARGO_BIN_EXE_coffer"))
        .args([
            "bench",
            "fs",
            "--seconds",
            "1",
            "--store-gib",
            "2",
            "--file-size",
            "32M",
            "--readahead",
            "auto,0,1m",
            "--configs",
            "none/crc",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--dir")
        .arg(dir.path())
        .output()
        .expect("run coffer bench fs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("command: "), "the bench prints its command");
    assert!(
        stdout.contains("readahead auto: sequential 1M reads at"),
        "the verdict line: {stdout}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    let cells = doc["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 8, "2 reads x 3 readaheads, 2 writes");
    for cell in cells {
        for key in ["ops_s", "mib_s", "pct_of_baseline"] {
            let value = cell[key].as_f64().unwrap_or(0.0);
            assert!(value.is_finite() && value > 0.0, "{key}: {cell}");
        }
        let run = &cell["runs"][0];
        assert!(run["lat_avg_ms"].as_f64().unwrap_or(0.0) > 0.0, "{cell}");
        if cell["test"].as_str().is_some_and(|t| t.ends_with("rd")) {
            let pct = cell["pct_of_best_extreme"].as_f64().unwrap_or(0.0);
            assert!(pct.is_finite() && pct > 0.0, "{cell}");
        }
    }
    assert!(
        std::fs::read_dir(dir.path())
            .expect("bench dir")
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with("fs-")),
        "the bench removes its cluster"
    );
}
