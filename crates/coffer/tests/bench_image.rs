//! `coffer bench image` runs end to end on tiny cells and reports every cell it promises:
//! numbers present and positive, the baseline at 100 %. No timing is asserted.

use std::process::Command;

#[test]
fn bench_image_reports_every_cell() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("cells.json");
    let output = Command::new(env!("CARGO_BIN_EXE_coffer"))
        .args([
            "bench",
            "image",
            "--seconds",
            "0.3",
            "--store-gib",
            "2",
            "--image-size",
            "16M",
            "--io-sizes",
            "4k,4m",
            "--qd",
            "1,4",
            "--configs",
            "none/crc,gcm/secure",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--dir")
        .arg(dir.path())
        .output()
        .expect("run coffer bench image");
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
        16,
        "2 configurations x 2 sizes x read/write x 2 depths"
    );
    for cell in cells {
        assert!(cell["ops"].as_u64().unwrap_or(0) > 0, "{cell}");
        for key in ["ops_s", "mib_s", "cluster_cpu_s_per_gib"] {
            let value = cell[key].as_f64().unwrap_or(0.0);
            assert!(value.is_finite() && value > 0.0, "{key}: {cell}");
        }
        let p99 = cell["lat_us"]["p99"].as_f64().unwrap_or(0.0);
        assert!(p99 > 0.0, "{cell}");
        let pct = cell["pct_of_baseline"].as_f64().unwrap_or(0.0);
        assert!(pct.is_finite() && pct > 0.0, "{cell}");
        if cell["at_rest"] == "none" && cell["in_transit"] == "crc" {
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
