//! Scrub (`coffer pool scrub`) and read repair. Scrub: each PG's primary compares every
//! copy of its objects; a plaintext byte altered on a replica's disk under stores that
//! encrypt nothing is found, named with its OSD, and repaired from the majority with
//! --repair; the object then reads whole, and a second scrub finds nothing. Read repair: a
//! copy altered on the primary's disk (which serves reads) is detected by the read (by the
//! client's tag check in a pool sealed at the edge, in pools of three copies and of two; by
//! the store's own check in a pool sealed by the OSDs), replaced from a good copy, and the
//! read returns the right bytes; status counts the repairs.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{scrub, serial, LocalCluster};

/// The acting set of the PG holding `object` in `pool`, the primary first.
fn acting(cluster: &LocalCluster, pool: &str, object: &str) -> Vec<u32> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let map = runtime.block_on(cluster.admin()).map();
    let info = map.pool_by_name(pool).expect("pool");
    let name = map::ObjectName::new(object).expect("name");
    map.acting(info, map.pg_of(info, &name))
        .into_iter()
        .map(|osd| osd.0)
        .collect()
}

/// With the cluster stopped, alters one byte of the one copy of `needle` that `osd` holds,
/// after checking that `copies` OSDs hold one each.
fn alter_copy_on(cluster: &LocalCluster, needle: &[u8], osd: u32, copies: usize) {
    let found = common::stored_copies(cluster.dir.path(), needle);
    let holders: std::collections::BTreeSet<String> = found
        .iter()
        .filter_map(|(path, _)| common::osd_of_path(path))
        .collect();
    assert_eq!(holders.len(), copies, "one copy on each OSD: {found:?}");
    assert_eq!(found.len(), copies, "one copy on each OSD: {found:?}");
    let (path, offset) = found
        .iter()
        .find(|(path, _)| common::osd_of_path(path) == Some(format!("osd.{osd}")))
        .expect("osd's copy");
    common::flip_byte(path, offset + 100);
}

/// Scrub finds the altered copy, repair replaces it, and a second scrub finds every copy alike.
fn find_and_repair(cluster: &LocalCluster, pool: &str, object: &str, osd: u32) {
    let (out, err, ok) = scrub(cluster, pool, &[]);
    assert!(!ok, "an inconsistent pool scrubbed clean:\n{out}");
    assert!(
        out.contains(&format!("{object}: osd.{osd}: data differs")),
        "the object and its bad copy are named:\n{out}"
    );
    assert!(out.contains("1 inconsistent, 0 repaired"), "{out}");
    assert!(err.contains("--repair"), "the error says what to do: {err}");

    let (out, err, ok) = scrub(cluster, pool, &["--repair"]);
    assert!(ok, "repair failed:\n{out}\n{err}");
    assert!(
        out.contains(&format!("{object}: osd.{osd}: data differs [repaired]")),
        "{out}"
    );

    let (out, err, ok) = scrub(cluster, pool, &[]);
    assert!(ok, "still inconsistent after repair:\n{out}\n{err}");
    assert!(out.contains("2 objects scrubbed, 0 inconsistent"), "{out}");
}

/// Waits for the OSDs' beacons to count `count` read repairs, then checks status says so.
fn wait_for_repairs(cluster: &LocalCluster, count: u64) {
    cluster.wait_for("read repairs", Duration::from_secs(30), |status| {
        let counted = status["read_repairs"].as_array().map(|osds| {
            osds.iter()
                .filter_map(|osd| osd["copies"].as_u64())
                .sum::<u64>()
        });
        counted == Some(count)
    });
    let copies = if count == 1 { "copy" } else { "copies" };
    let line = format!("repairs:  {count} damaged {copies} replaced on read (osd.");
    let status = cluster.ok(&["status"]);
    assert!(status.contains(&line), "{status}");
}

#[test]
fn a_read_repairs_sealed_chunks_altered_on_the_primary_in_pools_of_three_and_two_copies() {
    let _serial = serial();
    let (mut cluster, victim, sealed_chunk) = common::sealed_victim();
    cluster.ok(&[
        "pool", "create", "pair", "--seal", "edge", "--size", "2", "--pg-num", "8",
    ]);
    cluster.wait_for("PGs clean", Duration::from_secs(60), common::all_clean);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let pair: Vec<u8> = (0..3 * 4096).map(|_| rand::random::<u8>()).collect();
    let pair_chunk = runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("pair").await.expect("pool");
        pool.put("victim", Bytes::from(pair.clone()))
            .await
            .expect("put");
        let read = vec![client::ObjectOp::ReadChunks { first: 1, count: 1 }];
        let (_, sealed) = pool
            .operate("victim", read, Bytes::new())
            .await
            .expect("read");
        sealed
    });
    let primaries = (
        acting(&cluster, "sealed", "victim")[0],
        acting(&cluster, "pair", "victim")[0],
    );
    cluster.stop();
    alter_copy_on(&cluster, &sealed_chunk, primaries.0, 3);
    alter_copy_on(&cluster, &pair_chunk, primaries.1, 2);
    cluster.resume(3);
    cluster.wait_for("PGs clean", Duration::from_secs(90), common::all_clean);

    // The primary serves reads: its altered chunk fails the client's check, the primary
    // replaces its copy with a good one, and the read returns the object whole.
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let sealed = admin.pool("sealed").await.expect("pool");
        assert_eq!(sealed.get("victim").await.expect("get"), victim);
        let two = admin.pool("pair").await.expect("pool");
        assert_eq!(two.get("victim").await.expect("get"), pair);
    });
    wait_for_repairs(&cluster, 2);
    for pool in ["sealed", "pair"] {
        let (out, err, ok) = scrub(&cluster, pool, &[]);
        assert!(
            ok,
            "{pool} still inconsistent after read repair:\n{out}\n{err}"
        );
    }
    cluster.stop();
    for (chunk, copies) in [(&sealed_chunk, 3), (&pair_chunk, 2)] {
        let whole = common::stored_copies(cluster.dir.path(), chunk);
        assert_eq!(whole.len(), copies, "every copy is whole again: {whole:?}");
    }
}

/// Three OSDs whose stores encrypt nothing, and `pool` sealed by the OSDs (plaintext on
/// disk), its PGs clean.
fn plaintext_cluster(pool: &str, pg_num: u32) -> LocalCluster {
    let cluster = LocalCluster::start(3, &["--at-rest", "none"]);
    let pg_num = pg_num.to_string();
    cluster.ok(&["pool", "create", pool, "--seal", "osd", "--pg-num", &pg_num]);
    cluster.wait_for("PGs clean", Duration::from_secs(60), common::all_clean);
    cluster
}

#[test]
fn scrub_repairs_plaintext_altered_on_a_replica() {
    let _serial = serial();
    let mut cluster = plaintext_cluster("plain", 8);
    let marker = b"scrub-marker-6d1f0c".repeat(512);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("plain").await.expect("pool");
        pool.put("notes", Bytes::from(marker.clone()))
            .await
            .expect("put");
        pool.put("bystander", Bytes::from_static(b"unharmed"))
            .await
            .expect("put");
    });
    assert!(cluster
        .ok(&["pool", "scrub", "plain"])
        .contains("0 inconsistent"));
    let replica = acting(&cluster, "plain", "notes")[1];
    cluster.stop();
    alter_copy_on(&cluster, &marker, replica, 3);
    cluster.resume(3);
    cluster.wait_for("PGs clean", Duration::from_secs(90), common::all_clean);

    find_and_repair(&cluster, "plain", "notes", replica);
    cluster.stop();
    let copies = common::stored_copies(cluster.dir.path(), &marker);
    assert_eq!(
        copies.len(),
        3,
        "the replica's copy is whole again: {copies:?}"
    );
}

/// The byte offsets of the 4 KiB blocks of `path` that hold anything but zeros.
fn written_blocks(path: &std::path::Path) -> std::collections::BTreeSet<usize> {
    let bytes = std::fs::read(path).expect("read the data file");
    bytes
        .chunks(4096)
        .enumerate()
        .filter(|(_, block)| block.iter().any(|b| *b != 0))
        .map(|(i, _)| i * 4096)
        .collect()
}

/// A hash of each 4 KiB block of `path`, to tell which blocks a write changed.
fn block_hashes(path: &std::path::Path) -> Vec<u64> {
    use std::hash::{Hash, Hasher};
    let bytes = std::fs::read(path).expect("read the data file");
    bytes
        .chunks(4096)
        .map(|block| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            block.hash(&mut hasher);
            hasher.finish()
        })
        .collect()
}

/// A store that seals at rest (gcm, the default) checks each block it reads: a byte altered
/// in the primary's copy of an object in a pool sealed by the OSDs fails that check, the
/// primary replaces its copy with a replica's, and the read returns the object whole. The
/// ciphertext is found as the blocks the object's write added to the primary's data file.
/// Altered on every copy, an object's read fails as an integrity failure at the client.
#[test]
fn a_read_repairs_a_block_altered_in_the_primarys_sealed_store() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &["--nbd", "none"]);
    cluster.ok(&["pool", "create", "byosd", "--seal", "osd", "--pg-num", "8"]);
    cluster.wait_for("PGs clean", Duration::from_secs(60), common::all_clean);
    let primary = acting(&cluster, "byosd", "first")[0];
    let data = cluster.dir.path().join(format!("osd.{primary}/store/data"));
    assert!(
        data.is_file(),
        "{} is the store's data file",
        data.display()
    );
    cluster.stop();
    let before = written_blocks(&data);
    cluster.resume(3);
    cluster.wait_for("PGs clean", Duration::from_secs(90), common::all_clean);
    let first: Vec<u8> = (0..64 * 1024).map(|_| rand::random::<u8>()).collect();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("byosd").await.expect("pool");
        pool.put("first", Bytes::from(first.clone()))
            .await
            .expect("put");
    });
    cluster.stop();
    let added: Vec<usize> = written_blocks(&data).difference(&before).copied().collect();
    assert!(
        added.len() >= 16,
        "the write added its 16 blocks: {added:?}"
    );
    for block in &added {
        common::flip_byte(&data, block + 100);
    }
    cluster.resume(3);
    cluster.wait_for("PGs clean", Duration::from_secs(90), common::all_clean);

    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("byosd").await.expect("pool");
        assert_eq!(pool.get("first").await.expect("get"), first);
    });
    wait_for_repairs(&cluster, 1);
    let (out, err, ok) = scrub(&cluster, "byosd", &[]);
    assert!(ok, "still inconsistent after read repair:\n{out}\n{err}");

    // Altered on every copy: no good copy is left, and the read fails as an integrity
    // failure all the way to the client and the CLI, never with the altered bytes.
    let stores: Vec<_> = (0..3)
        .map(|osd| cluster.dir.path().join(format!("osd.{osd}/store/data")))
        .collect();
    cluster.stop();
    let before: Vec<_> = stores.iter().map(|path| block_hashes(path)).collect();
    cluster.resume(3);
    cluster.wait_for("PGs clean", Duration::from_secs(90), common::all_clean);
    let second: Vec<u8> = (0..16 * 1024).map(|_| rand::random::<u8>()).collect();
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("byosd").await.expect("pool");
        pool.put("second", Bytes::from(second.clone()))
            .await
            .expect("put");
    });
    cluster.stop();
    for (path, before) in stores.iter().zip(&before) {
        // Blocks freed by the repair above may be reused: the write's blocks are those
        // whose bytes changed.
        let changed: Vec<usize> = block_hashes(path)
            .iter()
            .zip(before)
            .enumerate()
            .filter(|(_, (now, then))| now != then)
            .map(|(i, _)| i * 4096)
            .collect();
        assert!(!changed.is_empty(), "{} holds a copy", path.display());
        for block in changed {
            common::flip_byte(path, block + 100);
        }
    }
    cluster.resume(3);
    cluster.wait_for("PGs clean", Duration::from_secs(90), common::all_clean);
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("byosd").await.expect("pool");
        match pool.get("second").await {
            Err(client::Error::Integrity(why)) => assert!(
                why.contains("second") || why.contains("integrity"),
                "the failure names what broke: {why}"
            ),
            other => panic!("every copy is damaged, yet the read gave {other:?}"),
        }
    });
    let output = cluster.cli(&["obj", "get", "byosd", "second"]);
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && said.contains("integrity: "),
        "coffer obj get: {said}"
    );
    assert!(output.stdout.is_empty(), "no bytes are given out");
    cluster.stop();
}

/// A PG of more objects than one scrub page (256) is compared page by page, each OSD
/// listing from the last name of the page before in (hash, name) order: every object is
/// scrubbed once, and one altered copy far into the PG is found.
#[test]
fn scrub_pages_through_a_pg_of_many_objects() {
    let _serial = serial();
    let mut cluster = plaintext_cluster("many", 1);
    let marker = b"scrub-page-marker-41c7".repeat(200);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("many").await.expect("pool");
        for i in 0..700 {
            pool.put(&format!("small-{i}"), Bytes::from(format!("object {i}")))
                .await
                .expect("put");
        }
        pool.put("marked", Bytes::from(marker.clone()))
            .await
            .expect("put");
    });
    let out = cluster.ok(&["pool", "scrub", "many"]);
    assert!(
        out.contains("701 objects scrubbed, 0 inconsistent"),
        "{out}"
    );
    let replica = acting(&cluster, "many", "marked")[2];
    cluster.stop();
    alter_copy_on(&cluster, &marker, replica, 3);
    cluster.resume(3);
    cluster.wait_for("PGs clean", Duration::from_secs(90), common::all_clean);
    let (out, _, ok) = scrub(&cluster, "many", &[]);
    assert!(!ok, "an inconsistent pool scrubbed clean:\n{out}");
    assert!(
        out.contains(&format!("marked: osd.{replica}: data differs")),
        "{out}"
    );
    assert!(
        out.contains("701 objects scrubbed, 1 inconsistent"),
        "{out}"
    );
    cluster.stop();
}
