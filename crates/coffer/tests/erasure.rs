//! Erasure-coded pools on a real cluster of processes (issue #33): `pool create --ec`, objects
//! of many sizes put, overwritten in place and read back; a file system's data on the pool
//! (files written, patched in 4 KiB pieces, read after a remount) and an image's (fio
//! verifying random writes through NBD) and an S3 gateway's (boto3: objects of many sizes,
//! ranges, copies, multipart uploads, every kind of SSE), whose metadata stays on replicated
//! pools, as omap is refused on erasure-coded ones; kill -9 of OSDs during writes, which
//! go on while min_size shards can be written and wait, with a status that says why, when
//! they cannot, while reads go on from any k shards (and wait below k); scrub, which
//! encodes each object's shards again, consistent after recovery; and once the OSDs are
//! stopped, every shard on disk checked against the code: each position held once, at the
//! object's version, the bytes the encoder gives.
//! On stores that encrypt nothing, a byte flipped on disk in a data shard and then in a
//! parity shard is found by scrub alone (nothing else can tell), named by OSD and
//! position, and rebuilt from the others by `--repair`; two altered in one stripe cannot
//! be told apart, and scrub says so rather than rebuild from a bad one.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use common::load::{check_all, content, kill_under_writers, paused_put};
use common::{all_clean, fio_verify, serial, LocalCluster};

/// Sizes around the stripe (16 KiB at 4+2, 32 KiB at 8+3 with 4 KiB units) and beyond.
const SIZES: [usize; 10] = [
    1,
    4095,
    4096,
    16_383,
    16_384,
    16_385,
    32_769,
    100_000,
    (1 << 20) + 1,
    4 << 20,
];

fn sized(size: usize) -> Bytes {
    Bytes::from(
        (0..size)
            .map(|i| (i.wrapping_mul(31) ^ (i >> 8) ^ size) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// Creates erasure-coded pool `name` with `options`, and waits for its PGs to be clean.
fn create_pool(cluster: &LocalCluster, name: &str, code: &str, options: &[&str]) -> String {
    let mut args = vec!["pool", "create", name, "--ec", code, "--pg-num", "16"];
    args.extend_from_slice(options);
    let said = cluster.ok(&args);
    cluster.wait_for(
        "the new pool's PGs clean",
        Duration::from_secs(60),
        all_clean,
    );
    said
}

/// Puts an object of each of [`SIZES`] and reads it back whole; returns them by name.
async fn put_sizes(pool: &client::Pool) -> BTreeMap<String, Bytes> {
    let mut objects = BTreeMap::new();
    for size in SIZES {
        let name = format!("sized-{size}");
        let data = sized(size);
        pool.put(&name, data.clone()).await.expect("put");
        let got = pool.get(&name).await.expect("get");
        assert!(got == data, "{name} reads back differently");
        objects.insert(name, data);
    }
    objects
}

/// Writes into `sized-100000` (whose bytes are `old`) a 4 KiB overwrite inside a stripe,
/// a write across two, and one that grows the object, each read back; its bytes after.
fn patch_sized(runtime: &tokio::runtime::Runtime, pool: &client::Pool, old: &[u8]) -> Vec<u8> {
    let mut grown = old.to_vec();
    for (offset, len) in [(20_480usize, 4096usize), (30_000, 6000), (99_998, 5000)] {
        let patch = sized(len + 7).slice(7..);
        runtime
            .block_on(pool.write("sized-100000", offset as u64, patch.clone()))
            .expect("write");
        grown.resize(grown.len().max(offset + len), 0);
        grown[offset..offset + len].copy_from_slice(&patch);
        let got = runtime
            .block_on(pool.read("sized-100000", offset as u64, len as u64))
            .expect("read");
        assert!(
            got == patch,
            "{len} bytes at {offset} read back differently"
        );
    }
    grown
}

/// Every object in `expected`, checked in the stores of the stopped OSDs `osds`: each of the
/// code's positions held exactly once, with the object's size and one version on every
/// shard, and the bytes the encoder gives for that position.
fn check_shards(
    cluster: &LocalCluster,
    runtime: &tokio::runtime::Runtime,
    pool: map::PoolId,
    osds: std::ops::Range<u32>,
    profile: ec::Profile,
    expected: &BTreeMap<String, Bytes>,
) {
    let stores: Vec<_> = osds
        .clone()
        .map(|osd| runtime.block_on(cluster.osd_objects(osd, pool)))
        .collect();
    let mut coder = ec::Coder::new(profile);
    for (name, data) in expected {
        let mut held: BTreeMap<u8, (u32, &[u8])> = BTreeMap::new();
        let mut versions = Vec::new();
        for (osd, store) in osds.clone().zip(&stores) {
            let Some((shard, attrs)) = store.get(name) else {
                continue;
            };
            let position = attrs.get(".shard").and_then(|p| p.first().copied());
            let position =
                position.unwrap_or_else(|| panic!("{name} on osd.{osd} has no position"));
            let size = attrs
                .get(".size")
                .map(|s| u64::from_le_bytes(s.as_slice().try_into().expect("a size is 8 bytes")));
            assert_eq!(
                size,
                Some(data.len() as u64),
                "{name}'s shard {position} on osd.{osd} has the wrong size"
            );
            versions.push(attrs.get(".v").cloned());
            if let Some((other, _)) = held.insert(position, (osd, shard)) {
                panic!("{name}'s shard {position} is on osd.{other} and osd.{osd}");
            }
        }
        assert_eq!(
            held.keys().copied().collect::<Vec<_>>(),
            (0..profile.shards() as u8).collect::<Vec<_>>(),
            "{name} lacks shards"
        );
        versions.dedup();
        assert_eq!(
            versions.len(),
            1,
            "{name}'s shards are of different versions"
        );
        let shards = coder.encode_object(data).expect("encode");
        for (position, (osd, shard)) in held {
            assert!(
                shard == shards[usize::from(position)].as_slice(),
                "{name}'s shard {position} on osd.{osd} is not what the code gives"
            );
        }
    }
}

fn erasure_profile(admin: &client::Cluster, pool: &client::Pool) -> ec::Profile {
    admin.map().pools[&pool.id()]
        .erasure
        .expect("an erasure-coded pool")
        .profile()
}

/// The cluster's JSON status lists all 16 PGs of pool `pool` as inactive because `why`.
fn inactive_because(status: &serde_json::Value, pool: &str, why: &str) -> bool {
    let lines = status["health"]["inactive"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    lines
        .iter()
        .filter_map(|l| l.as_str())
        .any(|l| l.starts_with(&format!("pool {pool}: 16 PGs ")) && l.ends_with(why))
}

/// Scrub encodes every object's shards again and finds them all consistent.
fn scrubbed_consistent(cluster: &LocalCluster, pool: &str) {
    let (out, err, ok) = common::scrub(cluster, pool, &[]);
    assert!(
        ok && out.contains(" 0 inconsistent, 0 repaired"),
        "{out}\n{err}"
    );
}

/// Flips a byte of the one stored shard that begins with `shard`'s first 64 bytes, under
/// its running OSD (a disk's silent error: the stores encrypt nothing, so nothing but the
/// code can tell); returns the OSD (`osd.N`).
fn alter_shard(cluster: &LocalCluster, shard: &[u8]) -> String {
    let found = common::stored_copies(cluster.dir.path(), &shard[..64]);
    assert_eq!(found.len(), 1, "the shard is stored once: {found:?}");
    let (path, offset) = &found[0];
    common::flip_byte(path, offset + 100);
    common::osd_of_path(path).expect("an OSD's file")
}

/// An image whose data objects live in the coded pool `coded`, its header in the
/// replicated default pool: fio writes random blocks through NBD and reads them back
/// verified; removing the image removes its data objects.
fn image_verified_on(cluster: &mut LocalCluster, coded: &str) {
    let said = cluster.ok(&[
        "image",
        "create",
        "data/coded",
        "--size",
        "256M",
        "--data-pool",
        coded,
    ]);
    assert!(said.contains(&format!("in pool {coded}")), "{said}");
    let info = cluster.ok(&["image", "info", "data/coded"]);
    assert!(
        info.contains(&format!("in pool {coded}")) && info.contains("features:     0x1"),
        "{info}"
    );
    let (server, addr) = cluster.serve_nbd("data/coded", &[]);
    cluster.wait_listening(&addr);
    let uri = format!("nbd://{addr}/coded");
    fio_verify(&uri, "4k", 16, "64m", "4m", "0");
    fio_verify(&uri, "64k", 8, "64m", "16m", "64m");
    fio_verify(&uri, "4m", 4, "128m", "64m", "128m");
    assert!(cluster.ok(&["obj", "ls", coded]).contains("coffer.data."));
    // SAFETY: kill(2) on the NBD server this test started, so that its lock is released.
    unsafe { libc::kill(server, libc::SIGTERM) };
    cluster.wait_for(
        "the NBD server's lock released",
        Duration::from_secs(30),
        |_| cluster.cli(&["image", "rm", "data/coded"]).status.success(),
    );
    let left = cluster.ok(&["obj", "ls", coded]);
    assert!(
        !left.contains("coffer.data."),
        "image rm leaves data objects: {left}"
    );
}

/// S3 on the coded pool `coded`: a gateway whose own pool `own` (replicated, made here)
/// keeps users, buckets and indexes, through boto3: objects of many sizes, ranges, copies,
/// deletes, multipart uploads (by hand and managed), every kind of SSE.
fn boto3_on(cluster: &mut LocalCluster, own: &str, coded: &str) {
    cluster.ok(&["pool", "create", own, "--pg-num", "16"]);
    cluster.wait_for("PGs clean", Duration::from_secs(60), all_clean);
    let endpoint = cluster.serve_gw(&["--pool", own, "--data-pool", coded]);
    let user = |name: &str| -> serde_json::Value {
        let made = cluster.ok(&["user", "create", name, "--pool", own, "--json"]);
        serde_json::from_str(&made).expect("user json")
    };
    let (alice, bob) = (user("alice"), user("bob"));
    let key = format!("{coded}-key");
    cluster.ok(&["kms", "key", "create", &key]);
    let mut suite = cluster.s3_script(&alice, "boto3_suite.py", &[]);
    suite
        .env("S3_ENDPOINT", &endpoint)
        .env("S3_OTHER_ACCESS", bob["access_key"].as_str().expect("key"))
        .env("S3_OTHER_SECRET", bob["secret_key"].as_str().expect("key"))
        .env("S3_KMS_KEY", &key)
        .env(
            "S3_STEPS",
            "buckets,objects_of_many_sizes,metadata,ranges,copies,deletes,multipart_upload,\
             managed_transfer,encrypted_objects,encrypted_multipart",
        );
    common::run_ok("the boto3 suite on an erasure-coded data pool", &mut suite);
    let stripes = |pool: &str| {
        let listed = cluster.ok(&["obj", "ls", pool]);
        listed.lines().filter(|l| l.starts_with("gw.data.")).count()
    };
    assert!(stripes(coded) > 0, "the content is in the coded pool");
    assert_eq!(stripes(own), 0, "no content in the gateway's own pool");
}

#[test]
fn four_plus_two_on_six_osds_keeps_what_it_acknowledged_through_kill_9() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(6, &["--fs", "fs"]);
    let said = create_pool(&cluster, "cold", "4+2", &["--seal", "osd"]);
    assert!(
        said.contains("erasure-coded 4+2 (stripe unit 4 KiB), min_size 5")
            && said.contains("sealed at the osd"),
        "{said}"
    );
    let listed = cluster.ok(&["pool", "ls"]);
    assert!(
        listed.contains("cold (id 5): erasure-coded 4+2 (stripe unit 4 KiB), size 6, min_size 5"),
        "{listed}"
    );
    let status = cluster.ok(&["status"]);
    assert!(status.contains("(1 erasure-coded: cold 4+2)"), "{status}");
    // What erasure-coded pools do not take is refused, saying why.
    for (args, why) in [
        (
            &["pool", "create", "hot", "--ec", "4-2"][..],
            "is not an erasure-code profile",
        ),
        (
            &[
                "pool",
                "create",
                "hot",
                "--ec",
                "4+2",
                "--stripe-unit",
                "6K",
            ],
            "must be a multiple of 4 KiB",
        ),
        (
            &["pool", "create", "hot", "--ec", "4+2", "--min-size", "3"],
            "min_size 3",
        ),
    ] {
        let out = cluster.cli(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(why),
            "{args:?}: {stderr}"
        );
    }

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let admin = runtime.block_on(cluster.admin());
    let pool = runtime.block_on(admin.pool("cold")).expect("pool");
    let profile = erasure_profile(&admin, &pool);
    let mut expected = runtime.block_on(put_sizes(&pool));
    let grown = Bytes::from(patch_sized(&runtime, &pool, &expected["sized-100000"]));
    assert!(runtime.block_on(pool.get("sized-100000")).expect("get") == grown);
    expected.insert("sized-100000".into(), grown);
    // Files on the pool: written whole, patched in 4 KiB pieces, read back after a remount.
    cluster.ok(&["fs", "create", "ecfs", "--data-pool", "cold"]);
    let file = sized(3 << 20).to_vec();
    let mut patched = file.clone();
    {
        use std::io::{Seek, SeekFrom, Write};
        let mount = common::mounts::FsMount::new(&cluster, "ecfs", &[]);
        std::fs::write(mount.join("whole"), &file).expect("write a file");
        std::fs::write(mount.join("patched"), &file).expect("write a file");
        let mut handle = std::fs::OpenOptions::new()
            .write(true)
            .open(mount.join("patched"))
            .expect("open");
        for (at, byte) in [(4096usize, 1u8), (70_000, 2), (3 << 20, 3)] {
            handle.seek(SeekFrom::Start(at as u64)).expect("seek");
            handle.write_all(&[byte; 4096]).expect("patch");
            patched.resize(patched.len().max(at + 4096), 0);
            patched[at..at + 4096].fill(byte);
        }
        drop(handle);
        assert!(mount.unmount(), "the mount exits cleanly");
    }
    let mount = common::mounts::FsMount::new(&cluster, "ecfs", &[]);
    assert!(std::fs::read(mount.join("whole")).expect("read") == file);
    assert!(std::fs::read(mount.join("patched")).expect("read") == patched);
    assert!(mount.unmount(), "the mount exits cleanly");
    let refused = cluster.cli(&[
        "fs",
        "create",
        "bad",
        "--meta-pool",
        "cold",
        "--data-pool",
        "data",
    ]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("the metadata pool cold is erasure-coded"),
        "{stderr}"
    );
    image_verified_on(&mut cluster, "cold");
    let refused = cluster.cli(&["image", "create", "cold/disk", "--size", "64M"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("pool cold is erasure-coded: an image's header")
            && stderr.contains("--data-pool cold"),
        "{stderr}"
    );
    let refused = runtime
        .block_on(pool.omap_set("index", vec![(b"k".to_vec(), b"v".to_vec())]))
        .expect_err("omap on an erasure-coded pool");
    assert!(
        refused
            .to_string()
            .contains("erasure-coded: omap lives in a replicated pool"),
        "{refused}"
    );

    boto3_on(&mut cluster, "objects", "cold");
    // Refused before it listens (the timeout only keeps a wrong acceptance from hanging).
    let refused = std::process::Command::new("timeout")
        .arg("60")
        .arg(common::COFFER)
        .arg("--conf")
        .arg(&cluster.conf)
        .args([
            "gw",
            "--listen",
            "127.0.0.1:0",
            "--pool",
            "objects",
            "--data-pool",
            "data",
        ])
        .output()
        .expect("run coffer gw");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && stderr.contains("gateway pool objects keeps its data in pool cold"),
        "{stderr}"
    );
    let gc = cluster.ok(&["gw", "gc", "--pool", "objects", "--older-than", "0s"]);
    assert!(gc.starts_with("removed 0 stripe objects"), "{gc}");

    // Kill -9 one OSD under a write load: writes go on with five shards of six.
    let acked = kill_under_writers(&mut cluster, &runtime, &pool, 3, 1, 5);
    // Every read now decodes around the missing shard where it is a data shard.
    runtime.block_on(check_all(&pool, &acked));

    // A second OSD down leaves four shards, k but below min_size 5: reads go on, decoded
    // from the four; writes wait, saying why.
    cluster.kill(2, libc::SIGKILL);
    cluster.wait_for("writes waiting for shards", Duration::from_secs(40), |s| {
        inactive_because(
            s,
            "cold",
            "4 of its OSDs up, min_size 5; reads are served, writes wait",
        )
    });
    let status = cluster.ok(&["status"]);
    assert!(
        status.contains("HEALTH_ERR")
            && status.contains("16 PGs readonly: writes to them wait")
            && status.contains("pool cold: 16 PGs (5.0, 5.1, 5.2, 5.3, …): 4 of its OSDs up"),
        "{status}"
    );
    runtime.block_on(check_all(&pool, &acked));
    let paused = paused_put(&runtime, &pool, "on four shards of six");

    // A third down (M + 1) leaves three, fewer than k: nothing decodes, so reads wait too,
    // saying why, and go on with the writes once the OSDs return.
    cluster.kill(3, libc::SIGKILL);
    cluster.wait_for(
        "reads and writes waiting for shards",
        Duration::from_secs(40),
        |s| inactive_because(s, "cold", "3 of its OSDs up, min_size 5"),
    );
    let (name, (n, _)) = acked.iter().next().expect("acknowledged writes");
    let paused_get = {
        let (pool, name) = (pool.clone(), name.clone());
        runtime.spawn(async move { pool.get(&name).await })
    };
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !paused_get.is_finished(),
        "a read must not be served from three shards of six"
    );
    cluster.restart_osd(3);
    cluster.restart_osd(2);
    let got = runtime
        .block_on(paused_get)
        .expect("join")
        .expect("the paused read completes once k shards are up");
    assert!(got == content(*n), "{name} reads back differently");
    runtime
        .block_on(paused)
        .expect("join")
        .expect("the paused write completes once five shards can be written");
    cluster.restart_osd(1);
    cluster.wait_for("every PG clean again", Duration::from_secs(120), all_clean);
    runtime.block_on(check_all(&pool, &acked));
    assert!(runtime.block_on(pool.get("during-outage")).expect("get") == content(999));
    scrubbed_consistent(&cluster, "cold");

    drop(admin);
    for osd in 0..6 {
        cluster.kill(osd, libc::SIGTERM);
    }
    for (name, (n, _)) in &acked {
        expected.insert(name.clone(), content(*n));
    }
    expected.insert("during-outage".into(), content(999));
    check_shards(&cluster, &runtime, pool.id(), 0..6, profile, &expected);
}

#[test]
fn eight_plus_three_on_eleven_osds_reads_and_writes_with_two_down() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(11, &[]);
    // Sealed at the edge, the default: the OSDs keep and code only sealed chunks and
    // their records.
    let said = create_pool(&cluster, "wide", "8+3", &["--stripe-unit", "8K"]);
    assert!(said.contains("sealed at the edge"), "{said}");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let admin = runtime.block_on(cluster.admin());
    let pool = runtime.block_on(admin.pool("wide")).expect("pool");
    let profile = erasure_profile(&admin, &pool);
    assert_eq!(
        (profile.k(), profile.m(), profile.unit_bytes()),
        (8, 3, 8192)
    );
    let mut expected = runtime.block_on(put_sizes(&pool));
    // Writes inside chunks (each chunk read, merged, sealed again and its condition checked
    // on the shard that holds it), one that grows the object past a partial last chunk,
    // and a truncate inside a chunk.
    let mut patched = patch_sized(&runtime, &pool, &expected["sized-100000"]);
    runtime
        .block_on(pool.truncate("sized-100000", 70_001))
        .expect("truncate");
    patched.truncate(70_001);
    runtime
        .block_on(pool.write("sized-100000", 90_000, Bytes::from_static(b"end")))
        .expect("write past the cut");
    patched.resize(90_003, 0);
    patched[90_000..].copy_from_slice(b"end");
    let patched = Bytes::from(patched);
    assert!(runtime.block_on(pool.get("sized-100000")).expect("get") == patched);
    expected.insert("sized-100000".into(), patched);
    // Images (an NBD client's 4 KiB writes inside chunks' rows) and S3 (the gateway's SSE
    // stripes, sealed under keys of its own) on the pool.
    image_verified_on(&mut cluster, "wide");
    boto3_on(&mut cluster, "objects", "wide");

    // Two of eleven down, one of them under a write load, leaves nine shards, min_size:
    // reads decode (the records of a missing data shard's chunks too), writes go on.
    let acked = kill_under_writers(&mut cluster, &runtime, &pool, 3, 4, 10);
    expected.extend(
        acked
            .iter()
            .map(|(name, (n, _))| (name.clone(), content(*n))),
    );
    cluster.kill(9, libc::SIGKILL);
    cluster.wait_for("two OSDs marked down", Duration::from_secs(30), |s| {
        s["osds"]["up"].as_u64() == Some(9)
    });
    for (name, data) in &expected {
        let got = runtime.block_on(pool.get(name)).expect("degraded get");
        assert!(
            got == *data,
            "{name} decodes differently with two shards down"
        );
    }
    for n in 0..20u64 {
        let name = format!("degraded-{n}");
        runtime
            .block_on(pool.put(&name, content(n)))
            .expect("put with two down");
        expected.insert(name, content(n));
    }
    // A third leaves eight, k but below min_size 9: reads go on, writes wait until one
    // returns. A read-only PG reads only objects whose last write it knows to be on
    // min_size shards, which a primary tells the holders once its writes pause for 0.1 s:
    // an object written just before its primary died would wait for it to return.
    std::thread::sleep(Duration::from_secs(1));
    cluster.kill(0, libc::SIGKILL);
    cluster.wait_for("writes waiting for shards", Duration::from_secs(40), |s| {
        inactive_because(
            s,
            "wide",
            "8 of its OSDs up, min_size 9; reads are served, writes wait",
        )
    });
    for (name, data) in &expected {
        let got = runtime
            .block_on(pool.get(name))
            .expect("get with three down");
        assert!(got == *data, "{name} decodes differently with three down");
    }
    let paused = paused_put(&runtime, &pool, "on eight shards of eleven");
    for osd in [0, 4, 9] {
        cluster.restart_osd(osd);
    }
    runtime
        .block_on(paused)
        .expect("join")
        .expect("the paused write completes once nine shards can be written");
    expected.insert("during-outage".into(), content(999));
    cluster.wait_for("every PG clean again", Duration::from_secs(120), all_clean);
    for (name, data) in &expected {
        let got = runtime.block_on(pool.get(name)).expect("get");
        assert!(got == *data, "{name} reads back differently after recovery");
    }
    scrubbed_consistent(&cluster, "wide");
    drop(admin);
    for osd in 0..11 {
        cluster.kill(osd, libc::SIGTERM);
    }
    // No OSD kept the plaintext: the start of each object put at the outset, of the one
    // written inside chunks and of one written under the kill, is on no disk.
    let probed = SIZES
        .iter()
        .map(|size| format!("sized-{size}"))
        .chain(acked.keys().next().cloned());
    for name in probed {
        let data = &expected[&name];
        if data.len() >= 64 {
            let found = common::stored_copies(cluster.dir.path(), &data[..64]);
            assert!(found.is_empty(), "{name}'s bytes are on disk: {found:?}");
        }
    }
}

#[test]
fn scrub_finds_a_shard_altered_on_disk_by_its_code_and_rebuilds_it() {
    let _serial = serial();
    let cluster = LocalCluster::start(6, &["--at-rest", "none"]);
    create_pool(&cluster, "plain", "4+2", &["--seal", "osd"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let admin = runtime.block_on(cluster.admin());
    let pool = runtime.block_on(admin.pool("plain")).expect("pool");
    let data = Bytes::from(
        (0..64 * 1024)
            .map(|_| rand::random::<u8>())
            .collect::<Vec<u8>>(),
    );
    runtime
        .block_on(pool.put("notes", data.clone()))
        .expect("put");
    runtime
        .block_on(pool.put("bystander", sized(100_000)))
        .expect("put");
    scrubbed_consistent(&cluster, "plain");
    let shards = ec::Coder::new(erasure_profile(&admin, &pool))
        .encode_object(&data)
        .expect("encode");

    // A data shard, then a parity shard: each found by encoding the others again, rebuilt
    // from them on its OSD, and the object whole again.
    for position in [0, 5] {
        let osd = alter_shard(&cluster, &shards[position]);
        let (out, err, ok) = common::scrub(&cluster, "plain", &[]);
        let named =
            format!("notes: {osd}: shard {position} differs from what the others encode to");
        assert!(!ok && out.contains(&named), "{out}");
        assert!(out.contains("1 inconsistent, 0 repaired"), "{out}");
        assert!(err.contains("--repair"), "the error says what to do: {err}");
        let (out, err, ok) = common::scrub(&cluster, "plain", &["--repair"]);
        assert!(
            ok && out.contains(&named) && out.contains("[repaired]"),
            "{out}\n{err}"
        );
        scrubbed_consistent(&cluster, "plain");
        assert!(runtime.block_on(pool.get("notes")).expect("get") == data);
        assert_eq!(
            common::stored_copies(cluster.dir.path(), &shards[position][..4096]).len(),
            1,
            "shard {position} is whole again"
        );
    }

    // Two shards altered in one stripe: the others cannot tell which, and scrub says so
    // rather than rebuild from a bad one.
    alter_shard(&cluster, &shards[1]);
    alter_shard(&cluster, &shards[2]);
    let (out, err, ok) = common::scrub(&cluster, "plain", &["--repair"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("notes: the shards disagree with their code")
            && out.contains("[not repairable by scrub]")
            && out.contains("1 inconsistent, 0 repaired"),
        "{out}\n{err}"
    );
    assert!(runtime.block_on(pool.get("bystander")).expect("get") == sized(100_000));
}

/// In a pool sealed at the edge the OSDs cannot open a chunk, and a shard's blocks are
/// bytes they code with the chunks' records: a block altered on disk is found by encoding
/// the others again (scrub) and rebuilt from them with its record, a data shard's and a
/// parity shard's alike; one a client reads fails its tag check, and the read repair it
/// asks for finds and rebuilds the shard the same way.
#[test]
fn a_shard_of_an_edge_sealed_pool_altered_on_disk_is_found_by_its_code_and_rebuilt() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(6, &[]);
    create_pool(&cluster, "sealed", "4+2", &[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let data = Bytes::from(
        (0..64 * 1024)
            .map(|_| rand::random::<u8>())
            .collect::<Vec<u8>>(),
    );
    let (profile, stored) = runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("sealed").await.expect("pool");
        pool.put("notes", data.clone()).await.expect("put");
        let read = vec![client::ObjectOp::ReadChunks { first: 0, count: 8 }];
        let (_, sealed) = pool
            .operate("notes", read, Bytes::new())
            .await
            .expect("read sealed");
        // A record of zeros stands for a hole in the code: no chunk is taken with one, and
        // the object is unchanged.
        let zeros = client::ChunkSeal {
            key_id: 0,
            nonce: [0; 12],
            tag: [0; 16],
        };
        let refused = pool
            .operate(
                "notes",
                vec![client::ObjectOp::WriteChunks {
                    first: 0,
                    seals: vec![zeros],
                    end: 4096,
                }],
                Bytes::from(vec![0u8; 4096]),
            )
            .await
            .expect_err("a seal of zeros");
        assert!(
            refused.to_string().contains("stands for a hole"),
            "{refused}"
        );
        (erasure_profile(&admin, &pool), sealed)
    });
    // The stored chunks are the data shards' blocks; the parity blocks are their code.
    let chunks: Vec<&[u8]> = stored.chunks(4096).collect();
    let mut coder = ec::Coder::new(profile);
    let parity = coder.parity(&chunks[..4]).expect("parity");
    let get = |cluster: &LocalCluster| {
        runtime.block_on(async {
            let admin = cluster.admin().await;
            let pool = admin.pool("sealed").await.expect("pool");
            pool.get("notes").await.expect("get")
        })
    };

    for (position, block) in [(1, chunks[1]), (5, parity[1].as_slice())] {
        let osd = alter_shard(&cluster, block);
        let (out, _, ok) = common::scrub(&cluster, "sealed", &[]);
        let named =
            format!("notes: {osd}: shard {position} differs from what the others encode to");
        assert!(!ok && out.contains(&named), "{out}");
        let (out, err, ok) = common::scrub(&cluster, "sealed", &["--repair"]);
        assert!(
            ok && out.contains(&named) && out.contains("[repaired]"),
            "{out}\n{err}"
        );
        scrubbed_consistent(&cluster, "sealed");
        assert_eq!(
            common::stored_copies(cluster.dir.path(), &block[..4096]).len(),
            1,
            "shard {position}'s block is whole again"
        );
    }
    assert!(get(&cluster) == data);

    // Altered while its OSD is down (so no cache holds the block): the client's read fails
    // the tag check, asks for a repair, and reads the object whole.
    cluster.stop();
    alter_shard(&cluster, chunks[6]);
    cluster.resume(6);
    cluster.wait_for("PGs clean", Duration::from_secs(90), all_clean);
    assert!(get(&cluster) == data, "read repaired");
    scrubbed_consistent(&cluster, "sealed");
    cluster.stop();
    assert_eq!(
        common::stored_copies(cluster.dir.path(), &chunks[6][..4096]).len(),
        1,
        "the chunk is whole again"
    );
}

/// Reads of an erasure-coded object run beside its PG's writes (the lock is let go once the
/// PG's holders are noted), and a read that a write raced is read again under the lock:
/// however the reads and writes of one object interleave, every read gives one version
/// whole, never shards of two, and no reader goes back to an older version.
#[test]
fn reads_beside_writes_give_one_version_whole() {
    const WRITES: u8 = 120;
    let _serial = serial();
    let cluster = LocalCluster::start(6, &[]);
    create_pool(&cluster, "beside", "4+2", &[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let admin = runtime.block_on(cluster.admin());
    let pool = runtime.block_on(admin.pool("beside")).expect("pool");
    // 64 KiB: four stripes, every data shard holds some of each version.
    let version = |n: u8| Bytes::from(vec![n; 64 * 1024]);
    runtime.block_on(pool.put("torn", version(0))).expect("put");
    let reads: Vec<usize> = runtime.block_on(async {
        let writer = async {
            for n in 1..=WRITES {
                pool.put("torn", version(n)).await.expect("put");
            }
        };
        let reader = || async {
            let (mut last, mut reads) = (0u8, 0usize);
            while last < WRITES {
                let got = pool.get("torn").await.expect("get");
                let n = got[0];
                assert!(
                    got.len() == 64 * 1024 && got.iter().all(|b| *b == n),
                    "a read gave bytes of two versions (first {n}, read {reads})"
                );
                assert!(n >= last, "a reader went back from version {last} to {n}");
                (last, reads) = (n, reads + 1);
            }
            reads
        };
        let ((), reads) =
            futures::join!(writer, futures::future::join_all((0..4).map(|_| reader())));
        reads
    });
    assert!(reads.iter().all(|r| *r > 1), "{reads:?}");
    let again = cluster.osds_counter("coffer_osd_shard_reads_again_total");
    assert!(
        again > 0.0,
        "no read met a write ({reads:?} reads): the race this test is for never happened"
    );
}
