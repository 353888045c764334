//! Pools sealed at the edge (docs/design/edge-sealing.md): the client seals, the daemons
//! store sealed chunks. A marker written through the CLI, the client library, the NBD
//! export and the S3 gateway (with and without SSE, on a cluster whose stores and OSD links
//! encrypt nothing themselves) never appears in any store file or in a capture of the
//! loopback traffic; partial
//! writes, concurrent writers of one chunk, truncation, an OSD killed and recovered and a
//! key rotation all keep the data whole; OSDs refuse plaintext, and the pool keys are
//! refused to a client without read access. A chunk altered on every replica's disk fails
//! at the client, by name, and nothing else is lost; one altered on the primary's disk alone
//! is repaired from the others by the read (through the S3 gateway, under an SSE key).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{run_ok, serial, Capture, LocalCluster, COFFER};

/// Serves image `spec` with `coffer nbd serve` on the Unix socket `socket` (so that the
/// plaintext between the NBD client and the server, both at the edge, stays off the
/// loopback capture); returns the server once the socket exists.
fn serve_nbd_on_socket(cluster: &LocalCluster, spec: &str, socket: &Path) -> std::process::Child {
    let server = Command::new(COFFER)
        .arg("--conf")
        .arg(&cluster.conf)
        .args(["nbd", "serve", spec, "--socket"])
        .arg(socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start coffer nbd serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the NBD server did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

/// Writes `bytes` at the start of the NBD export on `socket` with nbdcopy, and reads them
/// back the same way.
fn nbd_round_trip(socket: &Path, export: &str, bytes: &[u8], scratch: &Path) -> Vec<u8> {
    let uri = format!("nbd+unix:///{export}?socket={}", socket.display());
    let source = scratch.join("nbd-source");
    std::fs::write(&source, bytes).expect("write source");
    run_ok(
        "nbdcopy to the export",
        Command::new("nbdcopy").arg(&source).arg(&uri),
    );
    let back = scratch.join("nbd-back");
    run_ok(
        "nbdcopy from the export",
        Command::new("nbdcopy").arg(&uri).arg(&back),
    );
    let mut read = std::fs::read(&back).expect("read back");
    read.truncate(bytes.len());
    std::fs::remove_file(&source).expect("remove source");
    std::fs::remove_file(&back).expect("remove copy");
    read
}

#[test]
fn edge_sealed_pools_keep_plaintext_off_every_daemon_and_disk() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &[]);
    cluster.ok(&[
        "pool", "create", "sealed", "--seal", "edge", "--pg-num", "8",
    ]);
    let listing = cluster.ok(&["pool", "ls"]);
    assert!(listing.contains("sealed at edge (data key 1)"), "{listing}");
    cluster.wait_for(
        "the new pool's PGs clean",
        Duration::from_secs(60),
        common::all_clean,
    );

    cluster.ok(&["image", "create", "sealed/disk", "--size", "8M"]);
    let marker = format!("edge-marker-{:016x}", rand::random::<u64>());
    let capture = Capture::start(&cluster.dir.path().join("lo.pcap"));
    // Through the NBD export: the NBD server is the edge.
    let scratch = tempfile::tempdir().expect("tempdir");
    let socket = scratch.path().join("nbd.sock");
    let mut server = serve_nbd_on_socket(&cluster, "sealed/disk", &socket);
    let disk_bytes = format!("{}end", marker.repeat(1000)).into_bytes();
    assert_eq!(
        nbd_round_trip(&socket, "disk", &disk_bytes, scratch.path()),
        disk_bytes
    );
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    server.wait().expect("the NBD server stops");
    // An odd length: the last chunk is partial.
    let body = format!("{}tail", marker.repeat(400));
    let file = cluster.dir.path().join("marker");
    std::fs::write(&file, &body).expect("write marker");
    cluster.ok(&[
        "obj",
        "put",
        "sealed",
        "secret",
        file.to_str().expect("path"),
    ]);
    assert_eq!(cluster.ok(&["obj", "get", "sealed", "secret"]), body);

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("sealed").await.expect("pool");
        assert!(pool.is_edge_sealed());
        let mut expect = body.clone().into_bytes();
        // Partial writes inside a chunk, across chunks, and past the end.
        for (offset, text) in [
            (5, "xyz"),
            (4090, "across-the-boundary"),
            (expect.len() + 3000, "beyond"),
        ] {
            let text = format!("{text}-{marker}");
            pool.write("secret", offset as u64, Bytes::from(text.clone()))
                .await
                .expect("write");
            if expect.len() < offset + text.len() {
                expect.resize(offset + text.len(), 0);
            }
            expect[offset..offset + text.len()].copy_from_slice(text.as_bytes());
            assert_eq!(
                pool.get("secret").await.expect("get"),
                expect,
                "after a write at {offset}"
            );
        }
        // Whole chunks from a chunk boundary: a buffer handed over (sealed where it is) and
        // one the caller still holds (sealed in a copy: the caller's bytes stay as they were).
        let text = |label: &str| -> Vec<u8> {
            let unit = format!("{label}-{marker}-");
            unit.bytes().cycle().take(3 * 4096).collect()
        };
        let kept = Bytes::from(text("shared"));
        for (offset, bytes) in [
            (8192, Bytes::from(text("handed-over"))),
            (20480, kept.clone()),
        ] {
            let end = offset + bytes.len();
            expect.resize(expect.len().max(end), 0);
            expect[offset..end].copy_from_slice(&bytes);
            pool.write("secret", offset as u64, bytes)
                .await
                .expect("write");
        }
        assert_eq!(
            &kept[..],
            &text("shared")[..],
            "the caller's bytes were changed"
        );
        assert_eq!(pool.get("secret").await.expect("get"), expect);
        // A cut inside a chunk, then growth: the cut-off bytes read as zeros.
        pool.truncate("secret", 4100).await.expect("truncate");
        pool.truncate("secret", 9000).await.expect("grow");
        expect.truncate(4100);
        expect.resize(9000, 0);
        assert_eq!(pool.get("secret").await.expect("get"), expect);
        // Two writers of different bytes of one chunk, at once: neither loses the other's.
        let writers: Vec<_> = (0..2u8)
            .map(|w| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    for i in 0..20u64 {
                        let at = 8192 + 100 * i + 50 * u64::from(w);
                        let bytes = Bytes::from(vec![b'a' + w; 10]);
                        pool.write("shared", at, bytes).await.expect("write");
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.expect("writer");
        }
        let shared = pool.read("shared", 8192, 2000).await.expect("read");
        for i in 0..20usize {
            for w in 0..2usize {
                let at = 100 * i + 50 * w;
                let want = [b'a' + w as u8; 10];
                assert_eq!(&shared[at..at + 10], &want, "writer {w} write {i}");
            }
        }
        // The OSDs refuse plaintext in this pool.
        let refused = pool
            .operate(
                "plain",
                vec![client::ObjectOp::WriteFull { len: 4 }],
                Bytes::from_static(b"text"),
            )
            .await
            .err();
        assert!(
            format!("{refused:?}").contains("sealed at the edge"),
            "{refused:?}"
        );
        // An empty object, put or written: there and empty. A chunk write of no chunks is
        // refused at once, with a reason.
        pool.put("empty", Bytes::new()).await.expect("put nothing");
        pool.write("empty too", 5000, Bytes::new())
            .await
            .expect("write nothing");
        for name in ["empty", "empty too"] {
            assert_eq!(pool.stat(name).await.expect("stat").size, 0, "{name}");
            assert!(pool.get(name).await.expect("get").is_empty(), "{name}");
        }
        let refused = pool
            .operate(
                "empty",
                vec![client::ObjectOp::WriteChunks {
                    first: 0,
                    seals: Vec::new(),
                    end: 0,
                }],
                Bytes::new(),
            )
            .await
            .err();
        assert!(
            format!("{refused:?}").contains("at least one chunk"),
            "{refused:?}"
        );
    });
    let traffic = capture.stop();
    assert!(traffic.len() > 10_000, "the capture holds the traffic");
    assert!(
        !common::contains(&traffic, marker.as_bytes()),
        "the marker crossed the wire"
    );
    let on_disk = common::on_disk(cluster.dir.path(), marker.as_bytes());
    assert!(
        on_disk.iter().all(|f| f.ends_with("marker")),
        "marker on disk: {on_disk:?}"
    );

    // An OSD killed and restarted: recovery moves the sealed chunks it missed.
    cluster.kill(2, libc::SIGKILL);
    let later = format!("written-while-osd.2-was-down-{marker}");
    let file2 = cluster.dir.path().join("later");
    std::fs::write(&file2, &later).expect("write");
    cluster.ok(&[
        "obj",
        "put",
        "sealed",
        "later",
        file2.to_str().expect("path"),
    ]);
    cluster.restart_osd(2);
    cluster.wait_for("recovered", Duration::from_secs(90), common::all_clean);
    cluster.kill(0, libc::SIGKILL);
    cluster.kill(1, libc::SIGKILL);
    cluster.restart_osd(0);
    // The read waits (the client's retries) until osd.0 and osd.2 serve every PG.
    assert_eq!(cluster.ok(&["obj", "get", "sealed", "later"]), later);

    // Rotation: new writes under key 2, old chunks still open.
    let rotated = cluster.ok(&["pool", "rotate-key", "sealed"]);
    assert!(rotated.contains("data key 2"), "{rotated}");
    cluster.ok(&[
        "obj",
        "put",
        "sealed",
        "after",
        file2.to_str().expect("path"),
    ]);
    assert_eq!(cluster.ok(&["obj", "get", "sealed", "after"]), later);
    assert_eq!(cluster.ok(&["obj", "get", "sealed", "later"]), later);
    // The KMS commands do not reach a pool's key.
    let denied = cluster.cli(&["kms", "key", "rm", "pool.2"]);
    assert!(!denied.status.success());
    cluster.stop();
}

/// The S3 gateway is the edge of its pool: on a cluster that itself encrypts nothing but
/// its monitor links (stores `none`, OSD links `crc`), `coffer up --seal edge` seals the
/// gateway's pool, and neither an SSE marker nor a plainly uploaded one reaches a disk or
/// the wire (the S3 clients speak HTTPS to the gateway). On the same cluster with
/// `--seal osd`, tests/s3_encryption.rs finds the plain marker in both: the scans see.
#[test]
fn the_s3_gateway_seals_plain_and_sse_objects_at_the_edge() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(
        3,
        &[
            "--at-rest",
            "none",
            "--in-transit",
            "crc",
            "--mon-transit",
            "secure",
            "--seal",
            "edge",
        ],
    );
    cluster.wait_s3();
    let listing = cluster.ok(&["pool", "ls"]);
    assert_eq!(
        listing.matches("sealed at edge").count(),
        2,
        "the default pool and the gateway's: {listing}"
    );
    let sse_marker = format!("edge-sse-marker-{:016x}", rand::random::<u64>());
    let plain_marker = format!("edge-plain-marker-{:016x}", rand::random::<u64>());
    let (wire, user) = cluster.upload_markers(&sse_marker, &plain_marker);
    assert!(wire.len() > 1_000_000, "the capture holds the uploads");
    for marker in [&sse_marker, &plain_marker] {
        assert!(
            !common::contains(&wire, marker.as_bytes()),
            "{marker} crossed the loopback in the clear"
        );
        let files = common::on_disk(cluster.dir.path(), marker.as_bytes());
        assert!(
            files.is_empty(),
            "{marker} is stored in the clear in {files:?}"
        );
    }
    // Sealed once: SSE content is the pool's chunks, its tags their records.
    let sealed = cluster.sse_segments();
    assert!(
        sealed.len() >= 6 && sealed.iter().all(|s| s.sealed_in_records()),
        "on an edge pool, SSE content is sealed in the pool's chunk records: {sealed:?}"
    );

    // A chunk of an SSE object altered on every disk: its GET fails, the others still read.
    // A chunk of another altered on its primary alone: the gateway's read has it repaired.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (sealed_chunk, kms_chunk, kms_primary) = runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("s3").await.expect("pool");
        let index = gateway::layout::index_object("markers");
        let (entries, _) = pool.omap_list(&index, None, 100).await.expect("index");
        let stripe_of = |key: &[u8]| {
            let (_, value) = entries
                .iter()
                .find(|(name, _)| name == key)
                .expect("the object's entry");
            let entry: gateway::layout::ObjectEntry =
                gateway::layout::decode(value).expect("entry");
            gateway::layout::stripe_object(&entry.segments[0].instance, 0)
        };
        let read = vec![client::ObjectOp::ReadChunks { first: 5, count: 1 }];
        let stripe = stripe_of(b"sse-s3");
        let (_, sealed) = pool
            .operate(&stripe, read.clone(), Bytes::new())
            .await
            .expect("read");
        // The pool's key does not open it, and the client says so at once.
        let refused = pool
            .get(&stripe)
            .await
            .expect_err("opened under the pool's key");
        assert!(
            refused
                .to_string()
                .contains("sealed under a key of its own"),
            "{refused}"
        );
        let kms_stripe = stripe_of(b"sse-kms");
        let (_, kms_sealed) = pool
            .operate(&kms_stripe, read, Bytes::new())
            .await
            .expect("read");
        let map = admin.map();
        let info = map.pool_by_name("s3").expect("pool");
        let name = map::ObjectName::new(kms_stripe).expect("name");
        let primary = map.acting(info, map.pg_of(info, &name))[0];
        (sealed, kms_sealed, format!("osd.{}", primary.0))
    });
    cluster.stop();
    let found: Vec<_> = common::stored_copies(cluster.dir.path(), &sealed_chunk)
        .into_iter()
        .filter(|(path, _)| common::osd_of_path(path).is_some())
        .collect();
    assert_eq!(found.len(), 3, "a copy on each OSD: {found:?}");
    for (path, offset) in &found {
        common::flip_byte(path, offset + 100);
    }
    let kms_copies = common::stored_copies(cluster.dir.path(), &kms_chunk);
    let (path, offset) = kms_copies
        .iter()
        .find(|(path, _)| common::osd_of_path(path).as_ref() == Some(&kms_primary))
        .expect("the primary's copy");
    common::flip_byte(path, offset + 100);
    cluster.resume(3);
    cluster.wait_s3();
    // "altered" also reads the last object whole: each chunk opens only if it is intact.
    run_ok(
        "reading the altered objects",
        &mut cluster.s3_script(
            &user,
            "encryption.py",
            &["altered", "markers", "sse-s3", "sse-kms"],
        ),
    );
    cluster.wait_for(
        "the read repair counted",
        Duration::from_secs(30),
        |status| {
            status["read_repairs"]
                .as_array()
                .is_some_and(|osds| osds.iter().any(|osd| osd["copies"] == 1))
        },
    );
    cluster.stop();
    let whole: Vec<_> = common::stored_copies(cluster.dir.path(), &kms_chunk)
        .into_iter()
        .filter(|(path, _)| common::osd_of_path(path).is_some())
        .collect();
    assert_eq!(
        whole.len(),
        3,
        "the primary's copy is whole again: {whole:?}"
    );
}

#[test]
fn a_chunk_altered_on_every_disk_fails_at_the_client_and_nothing_else_is_lost() {
    let _serial = serial();
    let (mut cluster, victim, sealed_chunk) = common::sealed_victim();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    cluster.stop();
    let found = common::stored_copies(cluster.dir.path(), &sealed_chunk);
    let osds: std::collections::BTreeSet<String> = found
        .iter()
        .filter_map(|(path, _)| common::osd_of_path(path))
        .collect();
    assert_eq!(osds.len(), 3, "a copy on each OSD: {found:?}");
    for (path, offset) in &found {
        common::flip_byte(path, offset + 100);
    }
    cluster.resume(3);
    cluster.wait_for("PGs clean", Duration::from_secs(90), common::all_clean);
    let read = cluster.cli(&["obj", "get", "sealed", "victim"]);
    let stderr = String::from_utf8_lossy(&read.stderr);
    assert!(!read.status.success(), "an altered chunk was returned");
    assert!(
        stderr.contains("integrity: chunk 1 of victim"),
        "the error names the chunk: {stderr}"
    );
    assert_eq!(
        cluster.ok(&["obj", "get", "sealed", "bystander"]),
        "unharmed"
    );
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("sealed").await.expect("pool");
        let other = pool.read("victim", 8192, 4096).await.expect("chunk 2");
        assert_eq!(
            &other[..],
            &victim[8192..],
            "the chunks around it still open"
        );
        // Rewriting the altered chunk whole heals the object.
        pool.write("victim", 4096, Bytes::from(victim[4096..8192].to_vec()))
            .await
            .expect("rewrite");
        assert_eq!(pool.get("victim").await.expect("get"), victim);
    });
    cluster.stop();
}
