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

/// `coffer bench fs --directory`, as against a ceph-fuse mount, here against a directory of
/// the host's file system: the four cells as mounted, named by --label, the pids recorded,
/// and nothing of the bench's left beside what was there; what it cannot measure is
/// refused before it writes.
#[test]
fn bench_fs_measures_a_mounted_directory_and_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("mounted");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::write(root.join("kept"), b"an operator's file").expect("write");
    let json = dir.path().join("cells.json");
    let own_pid = std::process::id().to_string();
    let bench = |extra: &[&std::ffi::OsStr]| {
        Command::new(env!("CARGO_BIN_EXE_coffer"))
            .args(["bench", "fs", "--seconds", "1", "--file-size", "8M"])
            .args(extra)
            .output()
            .expect("run coffer bench fs")
    };
    let output = bench(&[
        "--directory".as_ref(),
        root.as_os_str(),
        "--label".as_ref(),
        "local".as_ref(),
        "--cluster-pid".as_ref(),
        own_pid.as_ref(),
        "--json".as_ref(),
        json.as_os_str(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("local, readahead mount: sequential 1M and random 4K reads"),
        "the verdict line: {stdout}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    assert_eq!(
        doc["config"]["cluster_pids"][0].as_u64(),
        own_pid.parse().ok()
    );
    let cells = doc["cells"].as_array().expect("cells");
    let tests: Vec<&str> = cells.iter().filter_map(|c| c["test"].as_str()).collect();
    assert_eq!(tests, ["seqrd", "rndrd", "rndwr", "seqwr"], "{doc}");
    for cell in cells {
        assert_eq!(cell["config"], "local", "{cell}");
        assert_eq!(cell["readahead"], "mount", "{cell}");
        assert!(cell.get("at_rest").is_none(), "{cell}");
        for key in ["ops_s", "mib_s"] {
            let value = cell[key].as_f64().unwrap_or(0.0);
            assert!(value.is_finite() && value > 0.0, "{key}: {cell}");
        }
        assert_eq!(cell["pct_of_baseline"].as_f64(), Some(100.0), "{cell}");
    }
    let left: Vec<String> = std::fs::read_dir(&root)
        .expect("read the directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        left,
        ["kept"],
        "the bench removes its own directory, and only it"
    );

    let refused = |extra: &[&std::ffi::OsStr], why: &str| {
        let output = bench(extra);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{extra:?} was not refused");
        assert!(stderr.contains(why), "{extra:?}: {stderr}");
    };
    let missing = dir.path().join("not-mounted");
    refused(
        &["--directory".as_ref(), missing.as_os_str()],
        "not a directory",
    );
    let mut gone = Command::new("true").spawn().expect("spawn true");
    let gone_pid = gone.id().to_string();
    gone.wait().expect("wait for true");
    refused(
        &[
            "--directory".as_ref(),
            root.as_os_str(),
            "--client-pid".as_ref(),
            gone_pid.as_ref(),
        ],
        "no such process",
    );
    refused(
        &[
            "--directory".as_ref(),
            root.as_os_str(),
            "--configs".as_ref(),
            "none/crc".as_ref(),
        ],
        "cannot be used with",
    );
    let left = std::fs::read_dir(&root)
        .expect("read the directory")
        .count();
    assert_eq!(left, 1, "a refused run writes nothing");
}
