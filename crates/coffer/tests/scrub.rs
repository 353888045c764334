//! Scrub (`coffer pool scrub`): each PG's primary compares every copy of its objects. A
//! sealed chunk altered on one OSD's disk in a pool sealed at the edge (so compared without
//! the key), and a plaintext byte altered on one OSD's disk under stores that encrypt
//! nothing, are found, named with their OSD, and repaired from the majority with --repair;
//! the object then reads whole, and a second scrub finds nothing.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{serial, LocalCluster};

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
/// after checking every OSD of the PG holds one.
fn alter_copy_on(cluster: &LocalCluster, needle: &[u8], osd: u32) {
    let found = common::occurrences(cluster.dir.path(), needle);
    let holders: Vec<String> = found
        .iter()
        .filter_map(|(path, _)| common::osd_of_path(path))
        .collect();
    assert_eq!(holders.len(), 3, "one copy on each OSD: {found:?}");
    let (path, offset) = found
        .iter()
        .find(|(path, _)| common::osd_of_path(path) == Some(format!("osd.{osd}")))
        .expect("osd's copy");
    common::flip_byte(path, offset + 100);
}

/// `coffer pool scrub POOL [more]`: its standard output and whether it succeeded.
fn scrub(cluster: &LocalCluster, pool: &str, more: &[&str]) -> (String, String, bool) {
    let mut args = vec!["pool", "scrub", pool];
    args.extend_from_slice(more);
    let output = cluster.cli(&args);
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        output.status.success(),
    )
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

#[test]
fn scrub_repairs_a_sealed_chunk_altered_on_the_primary_without_the_key() {
    let _serial = serial();
    let (mut cluster, victim, sealed_chunk) = common::sealed_victim();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let primary = acting(&cluster, "sealed", "victim")[0];
    cluster.stop();
    alter_copy_on(&cluster, &sealed_chunk, primary);
    cluster.resume(3);
    cluster.wait_for("PGs clean", Duration::from_secs(90), common::all_clean);

    // The primary serves reads, so its altered chunk fails at the client until repaired.
    let read = cluster.cli(&["obj", "get", "sealed", "victim"]);
    assert!(!read.status.success(), "an altered chunk was returned");
    find_and_repair(&cluster, "sealed", "victim", primary);
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("sealed").await.expect("pool");
        assert_eq!(pool.get("victim").await.expect("get"), victim);
    });
    cluster.stop();
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
    alter_copy_on(&cluster, &marker, replica);
    cluster.resume(3);
    cluster.wait_for("PGs clean", Duration::from_secs(90), common::all_clean);

    find_and_repair(&cluster, "plain", "notes", replica);
    cluster.stop();
    let copies = common::occurrences(cluster.dir.path(), &marker);
    assert_eq!(
        copies.len(),
        3,
        "the replica's copy is whole again: {copies:?}"
    );
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
    alter_copy_on(&cluster, &marker, replica);
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
