//! Pools sealed at the edge (docs/design/edge-sealing.md): the client seals, the daemons
//! store sealed chunks. A marker written through the CLI and the client library never
//! appears in any store file or in a capture of the loopback traffic; partial writes,
//! concurrent writers of one chunk, truncation, an OSD killed and recovered and a key
//! rotation all keep the data whole; OSDs refuse plaintext, and the pool keys are refused
//! to a client without read access.

mod common;

use bytes::Bytes;
use common::{serial, Capture, LocalCluster};

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
        std::time::Duration::from_secs(60),
        common::all_clean,
    );

    let marker = format!("edge-marker-{:016x}", rand::random::<u64>());
    let capture = Capture::start(&cluster.dir.path().join("lo.pcap"));
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
    cluster.wait_for(
        "recovered",
        std::time::Duration::from_secs(90),
        common::all_clean,
    );
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
