//! In-transit encryption on a whole cluster: a marker a client writes never appears in a
//! capture of the loopback traffic (client to OSD, OSD to OSD, anything to the monitor) in
//! `secure` mode, and does appear in `crc` mode, which proves the capture sees the traffic.

mod common;

use common::{serial, Capture, LocalCluster};

/// Runs a cluster in `mode`, writes and reads a marker while tcpdump records loopback, and
/// returns whether the marker is in the capture.
fn marker_seen_on_the_wire(mode: &str) -> bool {
    // Pools sealed by the OSDs, so that only the link protects the data on the wire.
    let mut cluster = LocalCluster::start(2, &["--in-transit", mode, "--seal", "osd"]);
    let marker = format!("coffer-marker-{}", rand::random::<u64>());
    let capture = Capture::start(&cluster.dir.path().join("lo.pcap"));
    let file = cluster.dir.path().join("marker");
    std::fs::write(&file, marker.repeat(100)).expect("write marker");
    cluster.ok(&["obj", "put", "data", "secret", file.to_str().expect("path")]);
    let read = cluster.ok(&["obj", "get", "data", "secret"]);
    assert!(read.contains(&marker));
    let bytes = capture.stop();
    assert!(
        bytes.len() > 10_000,
        "the capture holds the object's traffic ({} bytes)",
        bytes.len()
    );
    cluster.stop();
    common::contains(&bytes, marker.as_bytes())
}

#[test]
fn secure_links_hide_object_data_and_crc_links_do_not() {
    let _serial = serial();
    assert!(
        !marker_seen_on_the_wire("secure"),
        "plaintext on a secure link"
    );
    assert!(
        marker_seen_on_the_wire("crc"),
        "crc mode must show the marker, or the capture proves nothing"
    );
}
