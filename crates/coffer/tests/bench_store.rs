//! `coffer bench store` runs end to end on a tiny store and reports every cell it promises:
//! numbers present, positive and finite, the baseline at 100 %. No timing is asserted.

use std::process::Command;

#[test]
fn bench_store_reports_every_cell_with_sane_numbers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("cells.json");
    let output = Command::new(env!("CARGO_BIN_EXE_coffer"))
        .args([
            "bench",
            "store",
            "--size-gib",
            "0.0625",
            "--seconds",
            "0.2",
            "--qd",
            "4",
            "--json",
        ])
        .arg(&json)
        .arg("--dir")
        .arg(dir.path())
        .output()
        .expect("run coffer bench store");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("command: ") && stdout.contains("machine: "),
        "the header names command and machine:\n{stdout}"
    );
    for comparison in [
        "xts-512 as a percent of xts-4096",
        "edge as a percent of gcm",
    ] {
        assert!(stdout.contains(comparison), "{comparison}:\n{stdout}");
    }

    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("valid JSON");
    let cells = doc["cells"].as_array().expect("cells");
    assert_eq!(
        cells.len(),
        5 * 2 * 2 * 2,
        "modes (none, gcm, edge, xts-4096, xts-512) x io sizes x ops x queue depths"
    );
    assert_eq!(
        cells.iter().filter(|c| c["mode"] == "edge").count(),
        2 * 2 * 2,
        "chunks sealed by a client are measured like every mode"
    );
    for cell in cells {
        for key in ["iops", "mib_s", "pct_of_none", "cpu_s_per_gib"] {
            let value = cell[key].as_f64().unwrap_or(f64::NAN);
            assert!(value.is_finite() && value > 0.0, "{key} in {cell}");
        }
        for key in ["mode", "op"] {
            assert!(cell[key].is_string(), "{key} in {cell}");
        }
        for key in ["io_size", "qd"] {
            assert!(cell[key].as_u64().is_some_and(|v| v > 0), "{key} in {cell}");
        }
        assert!(
            cell["lat_us"]["p99"].as_f64().is_some_and(|v| v > 0.0),
            "{cell}"
        );
        if cell["mode"] == "none" {
            assert_eq!(cell["pct_of_none"].as_f64(), Some(100.0));
        }
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path() != json)
        .collect();
    assert!(
        leftovers.is_empty(),
        "the bench removes its stores: {leftovers:?}"
    );
}
