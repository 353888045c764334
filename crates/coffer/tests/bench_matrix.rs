//! `coffer bench matrix` runs end to end and reports every cell it promises: the quick matrix
//! through the block library, the fio engine on fresh clusters, and fio on NBD exports given
//! with --target. Numbers must be present, positive and finite, the baseline at 100 %; no
//! timing is asserted.

mod common;

use std::path::Path;
use std::process::Command;

use common::{serial, LocalCluster, COFFER};

fn run_matrix(dir: &Path, args: &[&str]) -> (String, serde_json::Value) {
    let json = dir.join("cells.json");
    let output = Command::new(COFFER)
        .args(["bench", "matrix"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run coffer bench matrix");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    (stdout, doc)
}

/// Every cell has its figures, and `expected` cells are there for each configuration.
fn check_cells(doc: &serde_json::Value, configs: &[&str], per_config: usize, cluster_cpu: bool) {
    let cells = doc["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), configs.len() * per_config, "{doc:#}");
    for config in configs {
        assert_eq!(
            cells.iter().filter(|c| c["config"] == *config).count(),
            per_config,
            "cells of {config}"
        );
    }
    let positive = |cell: &serde_json::Value, key: &str, value: &serde_json::Value| {
        let v = value.as_f64().unwrap_or(-1.0);
        assert!(v.is_finite() && v > 0.0, "{key} in {cell}");
    };
    for cell in cells {
        assert!(cell["ops"].as_u64().unwrap_or(0) > 0, "{cell}");
        for key in ["iops", "mib_s", "pct_of_baseline"] {
            positive(cell, key, &cell[key]);
        }
        for key in ["mean", "p50", "p99", "p999", "max"] {
            positive(cell, key, &cell["lat_us"][key]);
        }
        for key in [
            "shape",
            "op",
            "io_size",
            "repeats",
            "pct_of_baseline_stddev",
        ] {
            assert!(!cell[key].is_null(), "{key} in {cell}");
        }
        if cluster_cpu {
            positive(cell, "cpu_s_per_gib", &cell["cpu_s_per_gib"]);
            positive(cell, "cpu_s_per_kio", &cell["cpu_s_per_kio"]);
        } else {
            assert!(
                cell["cpu_s_per_gib"].is_null(),
                "no cluster CPU for a target: {cell}"
            );
        }
        if cell["config"] == configs[0] {
            let pct = cell["pct_of_baseline"].as_f64().unwrap_or(0.0);
            assert!((pct - 100.0).abs() < 1e-9, "{cell}");
        }
    }
}

#[test]
fn quick_matrix_reports_every_cell_with_a_table_and_a_plot() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let plot = dir.path().join("matrix.svg");
    let plot_arg = plot.display().to_string();
    let (stdout, doc) = run_matrix(
        dir.path(),
        &["--quick", "--store-gib", "2", "--plot", &plot_arg],
    );
    assert!(stdout.contains("command: "), "the bench prints its command");
    assert!(
        stdout.contains("shapes: many ("),
        "the bench prints the clients: {stdout}"
    );
    let configs = [
        "none/crc",
        "none/secure",
        "gcm/crc",
        "gcm/secure",
        "edge/secure",
    ];
    check_cells(&doc, &configs, 12, true);
    for row in ["many", "one (1x QD 128) 4M", "sync (1x QD 1) 4K"] {
        assert!(stdout.contains(row), "table row {row}:\n{stdout}");
    }
    let svg = std::fs::read_to_string(&plot).expect("plot written");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(
        svg.matches("<rect x=").count(),
        4 + 4 * 12,
        "legend and bars: {svg}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .filter(|e| !["cells.json", "matrix.svg"].contains(&e.file_name().to_str().unwrap_or("")))
        .collect();
    assert!(
        leftovers.is_empty(),
        "the bench removes its clusters: {leftovers:?}"
    );
}

/// Each configuration again with the images' data in an erasure-coded pool (sealed at the
/// edge in the edge configuration), with the raw space the filled images take.
#[test]
fn pool_types_measure_images_whose_data_is_in_an_erasure_coded_pool() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (stdout, doc) = run_matrix(
        dir.path(),
        &[
            "--configs",
            "gcm/secure,edge/secure",
            "--pool-types",
            "replicated,ec:2+1",
            "--shapes",
            "sync",
            "--io-sizes",
            "4k",
            "--seconds",
            "0.3",
            "--store-gib",
            "2",
            "--image-size",
            "32M",
        ],
    );
    let configs = [
        "gcm/secure",
        "edge/secure",
        "gcm/secure ec:2+1",
        "edge/secure ec:2+1",
    ];
    check_cells(&doc, &configs, 2, true);
    let cells = doc["cells"].as_array().expect("cells");
    let space = |config: &str| {
        let cell = cells.iter().find(|c| c["config"] == config).expect(config);
        cell["space_raw_per_byte"].as_f64().unwrap_or(0.0)
    };
    // Three copies, and 2+1 keeps 1.5 bytes per byte (plus the stores' own records).
    assert!((2.9..3.5).contains(&space("gcm/secure")), "{doc:#}");
    assert!((1.45..1.8).contains(&space("gcm/secure ec:2+1")), "{doc:#}");
    assert!(
        (1.45..1.8).contains(&space("edge/secure ec:2+1")),
        "{doc:#}"
    );
    assert!(
        stdout.contains("space: gcm/secure ec:2+1: 1."),
        "the table says the space: {stdout}"
    );
    assert!(
        stdout.contains("ec:2+1 (erasure-coded 2+1"),
        "the header names the pool: {stdout}"
    );
}

/// fio through the NBD export, here of a pool sealed at the edge: the NBD server is the
/// client that seals.
#[test]
fn fio_engine_drives_the_nbd_export_of_fresh_clusters() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let plot = dir.path().join("matrix.png");
    let plot_arg = plot.display().to_string();
    // The cluster on the first CPU and the clients (fio) on the last, as on hosts of their own.
    let last = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let client_cpus = last.to_string();
    let (stdout, doc) = run_matrix(
        dir.path(),
        &[
            "--cluster-cpus",
            "0",
            "--client-cpus",
            &client_cpus,
            "--engine",
            "fio",
            "--configs",
            "none/crc,edge/secure",
            "--shapes",
            "many,sync",
            "--io-sizes",
            "4k",
            "--seconds",
            "0.5",
            "--store-gib",
            "2",
            "--image-size",
            "32M",
            "--plot",
            &plot_arg,
        ],
    );
    check_cells(&doc, &["none/crc", "edge/secure"], 4, true);
    let placement = format!("cluster on CPUs 0, clients on CPUs {last}");
    assert!(stdout.contains(&format!("cpus: {placement}")), "{stdout}");
    assert_eq!(doc["cpus"], placement.as_str());
    assert!(doc["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .all(|c| c["engine"] == "fio"));
    let png = std::fs::read(&plot).expect("png written");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG file");
}

#[test]
fn targets_are_any_nbd_exports_and_bad_arguments_are_refused_up_front() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &[]);
    cluster.wait_nbd();
    let uri = cluster.nbd_uri();
    let dir = tempfile::tempdir().expect("tempdir");
    let (stdout, doc) = run_matrix(
        dir.path(),
        &[
            "--target",
            &format!("first={uri}"),
            "--target",
            &format!("again={uri}"),
            "--shapes",
            "one,sync",
            "--io-sizes",
            "4k,4m",
            "--seconds",
            "0.3",
            "--store-gib",
            "2",
            "--image-size",
            "32M",
        ],
    );
    assert!(stdout.contains("cluster CPU not measured"), "{stdout}");
    check_cells(&doc, &["first", "again"], 8, false);
    for (args, error) in [
        (&["--target", "http://x"][..], "give an NBD URI"),
        (&["--configs", "gcm"][..], "AT-REST/IN-TRANSIT"),
        (&["--configs", "none/crc,rot13/crc"][..], "rot13"),
        (&["--configs", "none/crc,edge/crc"][..], "use edge/secure"),
        (&["--shapes", "lots"][..], "use many, one or sync"),
        (&["--plot", "matrix.gif"][..], ".svg or .png"),
        (&["--pool-types", "ec:4+2"][..], "needs 6 OSDs"),
        (
            &["--pool-types", "ec:2+1", "--engine", "fio"][..],
            "use --engine library",
        ),
        (&["--pool-types", "raid5"][..], "replicated or ec:K+M"),
        (&["--cluster-cpus", "0-x"][..], "not a CPU list"),
        (
            &["--client-cpus", "100000"][..],
            "not one this process may run on",
        ),
    ] {
        let output = Command::new(COFFER)
            .args(["bench", "matrix"])
            .args(args)
            .output()
            .expect("run coffer");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(error),
            "{args:?}: {stderr}"
        );
    }
}
