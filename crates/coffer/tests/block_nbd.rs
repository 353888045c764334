//! The NBD export against independent clients built on libnbd and qemu's NBD client: fio's
//! nbd engine writes random blocks with checksums and reads them back; qemu-img copies a file
//! into an image and back out unchanged; nbdinfo reports the export as it is; libnbd's
//! Python binding sends what those do not (unaligned TRIM and WRITE_ZEROES, undefined
//! command flags).

mod common;

use std::path::Path;
use std::process::Command;

use common::{fio_verify, run, serial, LocalCluster};

#[test]
fn fio_writes_random_blocks_and_reads_them_back_verified() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &[]);
    cluster.wait_nbd();
    let uri = cluster.nbd_uri();
    // Each shape in its own region, so one shape's verification never sees another's blocks.
    fio_verify(&uri, "4k", 1, "64m", "2m", "0");
    fio_verify(&uri, "4k", 32, "64m", "8m", "64m");
    fio_verify(&uri, "4m", 1, "256m", "48m", "128m");
    fio_verify(&uri, "4m", 32, "256m", "256m", "384m");
}

fn sha256(path: &Path) -> String {
    run("sha256sum", &[path.to_str().expect("utf-8 path")])
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_string()
}

#[test]
fn qemu_img_copies_a_file_in_and_out_and_nbdinfo_describes_the_export() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &[]);
    let size_mib = 200u64;
    cluster.ok(&[
        "image",
        "create",
        "data/vm",
        "--size",
        &format!("{size_mib}M"),
    ]);
    let (_, addr) = cluster.serve_nbd("data/vm", &[]);
    cluster.wait_listening(&addr);
    let uri = format!("nbd://{addr}/vm");

    // A file of random data with runs of zeros, as a disk image has: every third 4 MiB (one
    // data object) is zeros.
    let source = cluster.dir.path().join("source.raw");
    let mut bytes = vec![0u8; (size_mib << 20) as usize];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for (i, chunk) in bytes.chunks_mut(4 << 20).enumerate() {
        if i % 3 == 1 {
            continue;
        }
        for byte in chunk.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = state as u8;
        }
    }
    std::fs::write(&source, &bytes).expect("write the source file");
    drop(bytes);

    run(
        "qemu-img",
        &[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            source.to_str().expect("path"),
            &uri,
        ],
    );
    let copy = cluster.dir.path().join("copy.raw");
    run(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &uri,
            copy.to_str().expect("path"),
        ],
    );
    assert_eq!(
        sha256(&source),
        sha256(&copy),
        "the image must hold the file exactly"
    );

    let info: serde_json::Value =
        serde_json::from_str(&run("nbdinfo", &["--json", &uri])).expect("nbdinfo JSON");
    let export = &info["exports"][0];
    assert_eq!(export["export-size"], size_mib << 20, "{export:#}");
    for flag in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_multi_conn",
        "can_df",
    ] {
        assert_eq!(export[flag], true, "{flag}: {export:#}");
    }
    assert_eq!(export["is_read_only"], false, "{export:#}");
    assert_eq!(export["description"], "data/vm", "{export:#}");
    assert_eq!(export["block_size_preferred"], 4096, "{export:#}");

    // qemu-img writes the zero runs as zeroes, which free whole objects: the map shows holes.
    let map = run("nbdinfo", &["--map", "--totals", &uri]);
    let hole_percent: f64 = map
        .lines()
        .find(|line| line.contains("hole"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|pct| pct.trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("no hole total in the map:\n{map}"));
    assert!(
        (25.0..=40.0).contains(&hole_percent),
        "a third of the file is zeros, so about a third is holes: {map}"
    );

    let listing = run("nbdinfo", &["--list", &format!("nbd://{addr}")]);
    assert!(listing.contains("export=\"vm\""), "{listing}");
}

#[test]
fn the_fio_job_file_runs_every_cell_of_the_image_bench() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &[]);
    cluster.wait_nbd();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let job_file = root.join("bench/fio/image.fio");
    let report = cluster.dir.path().join("fio.json");
    let output = Command::new("fio")
        .arg(&job_file)
        .args(["--output-format=json", "--output"])
        .arg(&report)
        .env("NBD_URI", cluster.nbd_uri())
        .env("SIZE", "32m")
        .env("RUNTIME", "1")
        .output()
        .expect("fio");
    assert!(
        output.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = run(
        "python3",
        &[
            root.join("bench/fio/summary.py").to_str().expect("path"),
            report.to_str().expect("path"),
        ],
    );
    let rows: Vec<&str> = summary.lines().skip(1).collect();
    assert_eq!(rows.len(), 8, "every cell of the image bench:\n{summary}");
    for row in rows {
        let iops: f64 = row
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        assert!(iops > 0.0, "{row}");
    }
}

/// Unaligned TRIM and WRITE_ZEROES zero exactly their bytes, and requests with command flags
/// the protocol does not define for them are refused with EINVAL (tests/nbd/requests.py,
/// through libnbd), on an image in a pool sealed at the edge (the default, where the OSDs
/// can drop only whole 4 KiB chunks) and on one in a pool sealed by the OSDs.
#[test]
fn unaligned_trim_and_zeroes_work_and_undefined_flags_are_refused() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &[]);
    cluster.ok(&["pool", "create", "plain", "--seal", "osd", "--pg-num", "8"]);
    cluster.wait_for(
        "PGs clean",
        std::time::Duration::from_secs(60),
        common::all_clean,
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nbd/requests.py");
    for (image, export) in [("data/edge", "edge"), ("plain/osd", "osd")] {
        cluster.ok(&["image", "create", image, "--size", "16M"]);
        let (_, addr) = cluster.serve_nbd(image, &[]);
        cluster.wait_listening(&addr);
        let uri = format!("nbd://{addr}/{export}");
        // Debian's python, which has libnbd's binding (scripts/setup.sh installs it).
        let out = run("/usr/bin/python3", &[script.to_str().expect("path"), &uri]);
        assert!(
            out.contains("ok   FUA on a write is accepted"),
            "{image}:\n{out}"
        );
    }
    cluster.stop();
}

/// NBD over TLS (tests/nbd/tls.py, through libnbd): `coffer up`'s export offers it with a
/// certificate clients find as `nbds://...?tls-certificates=DIR/nbd/tls`; data written over
/// TLS never crosses the loopback in the clear (tcpdump), while the same data sent without
/// TLS does; a client trusting another authority is refused; a server with
/// `--tls-required` refuses clients without TLS; and a server asked to listen beyond
/// loopback without a certificate refuses to start.
#[test]
fn nbd_over_tls_keeps_data_off_the_wire_and_is_required_where_asked() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &[]);
    let certs = cluster.dir.path().join("nbd/tls");
    let wrong = cluster.dir.path().join("wrong-ca");
    std::fs::create_dir(&wrong).expect("mkdir");
    std::fs::write(
        wrong.join("ca-cert.pem"),
        std::fs::read(cluster.s3_ca()).expect("gw ca"),
    )
    .expect("write the other authority");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nbd/tls.py");
    let uri = cluster.nbd_uri();
    let addr = uri
        .strip_prefix("nbd://")
        .and_then(|rest| rest.split_once('/'))
        .map(|(addr, _)| addr.to_string())
        .expect("nbd://ADDR/NAME");
    cluster.wait_listening(&addr);
    let capture_path = cluster.dir.path().join("nbd-tls.pcap");
    let capture = common::Capture::start(&capture_path);
    let tls_marker = "c0ffee7153a1ed0ff1ceb0a7c0ffee71";
    let out = run(
        "/usr/bin/python3",
        &[
            script.to_str().expect("path"),
            &addr,
            "disk",
            certs.to_str().expect("path"),
            wrong.to_str().expect("path"),
            tls_marker,
            "0",
        ],
    );
    let wire = capture.stop();
    assert!(
        out.contains("ok   a client without TLS is served on loopback"),
        "{out}"
    );
    let marker = (0..tls_marker.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&tls_marker[i..i + 2], 16).expect("hex"))
        .collect::<Vec<u8>>();
    // The plain client read the marker back: it crossed the loopback in the clear then,
    // which shows the capture sees NBD payloads; over TLS it must not have.
    assert!(
        common::contains(&wire, &marker),
        "the capture saw no plain NBD read"
    );
    let sent_over_tls = wire
        .windows(marker.len())
        .filter(|w| *w == marker.as_slice())
        .count();
    assert_eq!(
        sent_over_tls, 1,
        "the marker crossed the wire more than once (the TLS write or read leaked)"
    );

    cluster.ok(&["image", "create", "data/strict", "--size", "16M"]);
    let dir = certs.to_str().expect("path");
    let (_, strict) = cluster.serve_nbd("data/strict", &["--tls-dir", dir, "--tls-required"]);
    cluster.wait_listening(&strict);
    let out = run(
        "/usr/bin/python3",
        &[
            script.to_str().expect("path"),
            &strict,
            "strict",
            dir,
            wrong.to_str().expect("path"),
            tls_marker,
            "1",
        ],
    );
    assert!(
        out.contains("ok   a client without TLS is refused"),
        "{out}"
    );

    let refused = cluster.cli(&["nbd", "serve", "data/strict", "--listen", "192.0.2.1:10999"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("needs TLS"),
        "{said}"
    );
    cluster.stop();
}
