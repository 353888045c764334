//! Server-side encryption, proven on the bytes (tests/s3/encryption.py does the S3 side):
//!
//! - On a cluster that encrypts no data itself (at rest `none`, in transit `crc` between
//!   clients and OSDs, pools sealed by the OSDs; the monitors' links stay secure, as the
//!   KMS requires), a marker
//!   uploaded with any kind of SSE appears in no file of the cluster and nowhere on the
//!   wire, while a marker uploaded plainly appears in both: the scans can see plaintext.
//! - Rotating a KMS key rewraps the data keys of its objects and uploads under the new
//!   version and keeps what it protects readable; removing it makes its objects unreadable
//!   (crypto-shredding) and leaves everything else readable.

mod common;

use common::{serial, LocalCluster};
use gateway::layout;

#[test]
fn sse_keeps_markers_off_every_disk_and_wire_where_plain_objects_show() {
    let _serial = serial();
    // Secure links to the monitors only: the KMS hands out data keys on those alone.
    let cluster = LocalCluster::start(
        3,
        &[
            "--at-rest",
            "none",
            "--in-transit",
            "crc",
            "--mon-transit",
            "secure",
            "--seal",
            "osd",
        ],
    );
    cluster.wait_s3();
    let sse_marker = format!("coffer-sse-marker-{:016x}", rand::random::<u64>());
    let plain_marker = format!("coffer-plain-marker-{:016x}", rand::random::<u64>());
    let (wire, _) = cluster.upload_markers(&sse_marker, &plain_marker);

    assert!(
        common::contains(&wire, plain_marker.as_bytes()),
        "the plain marker must cross the crc links in the clear, or the capture proves nothing"
    );
    assert!(
        !common::contains(&wire, sse_marker.as_bytes()),
        "an SSE marker crossed the loopback in the clear"
    );
    let plain_files = common::on_disk(cluster.dir.path(), plain_marker.as_bytes());
    assert!(
        !plain_files.is_empty(),
        "the plain marker must be in the unencrypted stores, or the scan proves nothing"
    );
    let sse_files = common::on_disk(cluster.dir.path(), sse_marker.as_bytes());
    assert!(
        sse_files.is_empty(),
        "an SSE marker is stored in the clear in {sse_files:?}"
    );
    let sealed = cluster.sse_segments();
    assert!(
        sealed.len() >= 6 && sealed.iter().all(|s| !s.sealed_in_records()),
        "in a pool the OSDs seal, SSE content has its tags inline: {sealed:?}"
    );
}

/// The versions of KMS key `key` that wrap the data keys stored in `bucket`, of its
/// objects' segments and its uploads' parts.
fn wrapping_versions(cluster: &LocalCluster, bucket: &str, key: &str) -> Vec<u32> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut segments = runtime.block_on(cluster.s3_segments());
    segments
        .remove(bucket)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|segment| match segment.sealed {
            Some(layout::SealedKey::Kms {
                key: wrapped_by,
                version,
                ..
            }) if wrapped_by == key => Some(version),
            _ => None,
        })
        .collect()
}

#[test]
fn a_rotated_kms_key_keeps_its_objects_and_a_removed_one_shreds_them() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &[]);
    cluster.wait_s3();
    cluster.ok(&["kms", "key", "create", "shred-key"]);
    let user = cluster.s3_user("shredder");
    let phase = |name: &str| {
        let output = cluster
            .s3_script(
                &user,
                "encryption.py",
                &["shred", "shred", "shred-key", name],
            )
            .output()
            .expect("run encryption.py");
        assert!(
            output.status.success(),
            "the {name} phase failed:\n{}\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            cluster.logs()
        );
    };
    phase("before");
    // The current object's entry, its two versions' records and the upload's part.
    assert_eq!(
        wrapping_versions(&cluster, "shred", "shred-key"),
        vec![1, 1, 1, 1]
    );
    let rotated = cluster.ok(&["kms", "key", "rotate", "shred-key"]);
    assert!(
        rotated.contains("rewrapped 4 data keys of 4 objects and parts"),
        "{rotated}"
    );
    // Every record names version 2 now; no data was rewritten.
    assert_eq!(
        wrapping_versions(&cluster, "shred", "shred-key"),
        vec![2, 2, 2, 2]
    );
    let again = cluster.ok(&["kms", "key", "rewrap", "shred-key"]);
    assert!(again.contains("rewrapped 0 data keys"), "{again}");
    let listed = cluster.ok(&["kms", "key", "ls", "--json"]);
    let keys: serde_json::Value = serde_json::from_str(&listed).expect("kms json");
    let versions = keys
        .as_array()
        .and_then(|keys| keys.iter().find(|k| k["name"] == "shred-key"))
        .map(|k| k["versions"].clone());
    assert_eq!(versions, Some(serde_json::json!(2)), "{listed}");
    phase("rotated");

    let refused = cluster.cli(&["kms", "key", "rm", "shred-key"]);
    assert!(
        !refused.status.success(),
        "removing a key without --yes-i-really-mean-it must be refused"
    );
    cluster.ok(&["kms", "key", "rm", "shred-key", "--yes-i-really-mean-it"]);
    phase("after");
}
