//! Images as the documentation promises them: the CLI's lifecycle and its errors, import
//! and export of raw files; unwritten
//! bytes read as zeros and use no space; a discard frees space; shrinking discards the bytes
//! past the new size, for good; one writer at a time, with a stale writer fenced off when its
//! lock is broken.

mod common;

use std::sync::Arc;

use block::image::{self, Access};
use block::lock::Lock;
use block::{Extent, Image};
use bytes::Bytes;
use common::{serial, LocalCluster};

const MIB: u64 = 1 << 20;

/// What a read returned, as plain bytes.
fn flatten(extents: Vec<Extent>) -> Vec<u8> {
    let mut out = Vec::new();
    for extent in extents {
        match extent {
            Extent::Data(bytes) => out.extend_from_slice(&bytes),
            Extent::Zeros(len) => out.resize(out.len() + len as usize, 0),
        }
    }
    out
}

async fn read_all(image: &Image, offset: u64, len: u64) -> Vec<u8> {
    flatten(image.read(offset, len).await.expect("read"))
}

fn pattern(len: usize, seed: u8) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect::<Vec<u8>>(),
    )
}

async fn stored(image: &Image) -> u64 {
    let runs = image.allocation(0, image.size()).await.expect("allocation");
    runs.iter().filter(|r| r.1).map(|r| r.0).sum()
}

#[test]
fn image_lifecycle_through_the_cli() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &["--nbd", "none"]);
    let created = cluster.ok(&["image", "create", "data/one", "--size", "1G"]);
    assert!(created.contains("1 GiB"), "{created}");
    cluster.ok(&[
        "image",
        "create",
        "data/two",
        "--size",
        "64M",
        "--object-size",
        "1M",
    ]);
    assert_eq!(cluster.ok(&["image", "ls", "data"]), "one\ntwo\n");

    let info: serde_json::Value =
        serde_json::from_str(&cluster.ok(&["image", "info", "data/two", "--json"])).expect("json");
    assert_eq!(info["size"], 64 * MIB);
    assert_eq!(info["object_size"], MIB);
    assert_eq!(info["lock"], serde_json::Value::Null);

    cluster.ok(&["image", "resize", "data/two", "--size", "128M"]);
    let info: serde_json::Value =
        serde_json::from_str(&cluster.ok(&["image", "info", "data/two", "--json"])).expect("json");
    assert_eq!(info["size"], 128 * MIB);
    let du = cluster.ok(&["image", "du", "data/two"]);
    assert!(du.contains(": 0 bytes of 128 MiB stored"), "{du}");

    // Clear errors, and nothing changes.
    let failures: [(&[&str], &str); 7] = [
        (
            &["image", "create", "data/one", "--size", "1G"],
            "already exists",
        ),
        (
            &["image", "create", "data/odd", "--size", "1000"],
            "multiple of 512",
        ),
        (
            &["image", "create", "data/bad name", "--size", "1G"],
            "image name",
        ),
        (
            &[
                "image",
                "create",
                "data/obj",
                "--size",
                "1G",
                "--object-size",
                "3M",
            ],
            "power of two",
        ),
        (
            &["image", "create", "nopool/x", "--size", "1G"],
            "does not exist",
        ),
        (&["image", "info", "data/missing"], "does not exist"),
        (
            &["image", "create", "justaname", "--size", "1G"],
            "POOL/NAME",
        ),
    ];
    for (args, expected) in failures {
        let output = cluster.cli(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} must fail");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    assert_eq!(cluster.ok(&["image", "ls", "data"]), "one\ntwo\n");

    import_and_export(&cluster);

    cluster.ok(&["image", "rm", "data/one"]);
    assert_eq!(cluster.ok(&["image", "ls", "data"]), "two\n");
    let gone = cluster.cli(&["image", "info", "data/one"]);
    assert!(String::from_utf8_lossy(&gone.stderr).contains("does not exist"));
}

/// A raw file into an image and back, to a file and to standard output; zeros are stored
/// in neither; bad files and names are refused, changing nothing.
fn import_and_export(cluster: &LocalCluster) {
    let dir = cluster.dir.path();
    let raw = dir.join("disk.raw");
    // Data, a whole object of zeros, then a tail shorter than an object.
    let mut bytes = pattern((9 * MIB) as usize + 1536, 7).to_vec();
    bytes[(4 * MIB) as usize..(8 * MIB) as usize].fill(0);
    std::fs::write(&raw, &bytes).expect("raw file");
    let raw_arg = raw.display().to_string();
    let imported = cluster.ok(&["image", "import", &raw_arg, "data/imported"]);
    assert!(
        imported.starts_with(&format!("imported {raw_arg} into data/imported: ")),
        "{imported}"
    );
    let du = cluster.ok(&["image", "du", "data/imported"]);
    let stored = 5 * MIB + 1536;
    assert!(
        du.contains(&format!("({stored} bytes) of")),
        "zeros are not stored: {du}"
    );

    let exported = dir.join("exported.raw");
    let exported_arg = exported.display().to_string();
    let said = cluster.ok(&["image", "export", "data/imported", &exported_arg]);
    assert!(said.starts_with("exported data/imported to "), "{said}");
    assert!(
        std::fs::read(&exported).expect("exported") == bytes,
        "the export differs"
    );
    let streamed = cluster.cli(&["image", "export", "data/imported", "-"]);
    assert!(streamed.status.success(), "{streamed:?}");
    assert!(
        streamed.stdout == bytes,
        "the export to standard output differs"
    );

    let fails = |args: &[&str], expected: &str| {
        let output = cluster.cli(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} must fail");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    };
    fails(
        &["image", "export", "data/imported", &exported_arg],
        "exists: export writes a new file",
    );
    fails(&["image", "import", &raw_arg, "data/two"], "already exists");
    let odd = dir.join("odd.raw");
    std::fs::write(&odd, [1u8; 1000]).expect("odd file");
    fails(
        &["image", "import", &odd.display().to_string(), "data/odd"],
        "is 1000 bytes: an image is a whole number of 512-byte sectors",
    );
    fails(
        &["image", "import", "/nonexistent/disk.raw", "data/none"],
        "No such file",
    );
    fails(&["image", "export", "data/missing", "-"], "does not exist");
    assert_eq!(
        cluster.ok(&["image", "ls", "data"]),
        "imported\none\ntwo\n",
        "failed imports leave no image"
    );
    let again = cluster.cli(&["image", "export", "data/imported", "-"]);
    assert!(again.stdout == bytes, "a refused import changed nothing");
    cluster.ok(&["image", "rm", "data/imported"]);
}

#[test]
fn unwritten_bytes_are_zeros_and_discard_and_shrink_free_space() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &["--nbd", "none"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("data").await.expect("pool");
        image::create(&pool, "d", 64 * MIB, 4 * MIB)
            .await
            .expect("create");
        let writer = Access::Write {
            purpose: "test",
            wait_stale: false,
        };
        let disk: Arc<Image> = Image::open(&pool, "d", writer).await.expect("open");
        assert_eq!(
            read_all(&disk, 0, 8 * MIB).await,
            vec![0u8; 8 * MIB as usize]
        );
        assert_eq!(stored(&disk).await, 0, "nothing written, nothing stored");

        // A write across an object boundary, at an odd offset, reads back exactly.
        let data = pattern((5 * MIB) as usize, 7);
        disk.write(3 * MIB + 123, data.clone())
            .await
            .expect("write");
        assert_eq!(read_all(&disk, 3 * MIB + 123, 5 * MIB).await, data.to_vec());
        let before = stored(&disk).await;
        assert!(before >= 5 * MIB, "{before}");

        // Discarding a whole object removes it; part of one becomes a hole.
        disk.zero(4 * MIB, 4 * MIB, true).await.expect("discard");
        let after = stored(&disk).await;
        assert!(after <= before - 4 * MIB, "{before} -> {after}");
        let object = format!(
            "coffer.data.{:016x}.{:016x}",
            image::info(&pool, "d").await.expect("info").header.id,
            1
        );
        assert!(matches!(
            pool.stat(&object).await,
            Err(client::Error::NotFound)
        ));
        let mut expected = data.to_vec();
        let cut = (4 * MIB - (3 * MIB + 123)) as usize;
        expected[cut..cut + (4 * MIB) as usize].fill(0);
        assert_eq!(read_all(&disk, 3 * MIB + 123, 5 * MIB).await, expected);

        // Zeros that must stay allocated are written, not punched.
        disk.zero(4 * MIB, 4096, false).await.expect("write zeroes");
        assert_eq!(stored(&disk).await, after + 4096);

        // Reads and writes past the end are refused, and change nothing.
        assert!(matches!(
            disk.write(64 * MIB - 10, pattern(20, 1)).await,
            Err(block::Error::OutOfRange { .. })
        ));
        assert!(disk.read(64 * MIB, 1).await.is_err());

        // Shrinking needs the lock: refused while this writer has the image.
        let refused = image::resize(&pool, "d", 4 * MIB).await;
        assert!(
            matches!(refused, Err(block::Error::Locked { .. })),
            "{refused:?}"
        );
        disk.close().await.expect("close");
        drop(disk);

        // Shrink into the middle of the written range, then grow back: the cut bytes are
        // gone for good, and read as zeros.
        image::resize(&pool, "d", 3 * MIB + 4096)
            .await
            .expect("shrink");
        image::resize(&pool, "d", 64 * MIB).await.expect("grow");
        let disk = Image::open(&pool, "d", Access::ReadOnly)
            .await
            .expect("open");
        let mut expected = vec![0u8; (3 * MIB + 4096) as usize];
        expected[(3 * MIB + 123) as usize..].copy_from_slice(&data[..4096 - 123]);
        assert_eq!(read_all(&disk, 0, 3 * MIB + 4096).await, expected);
        assert_eq!(
            read_all(&disk, 3 * MIB + 4096, 61 * MIB - 4096).await,
            vec![0u8; (61 * MIB - 4096) as usize]
        );
        // Allocation is counted per object, up to its size: only object 0 is left, cut at
        // the new size.
        assert_eq!(stored(&disk).await, 3 * MIB + 4096);
    });
}

#[test]
fn one_writer_at_a_time_and_a_broken_lock_fences_the_old_writer() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &[]);
    cluster.wait_nbd();
    let uri = cluster.nbd_uri();
    let write = |uri: &str, pattern: &str| {
        std::process::Command::new("qemu-io")
            .args(["-f", "raw", "-c", &format!("write -P {pattern} 0 64k"), uri])
            .output()
            .expect("qemu-io")
    };
    let ok = write(&uri, "0x11");
    assert!(
        ok.status.success() && !String::from_utf8_lossy(&ok.stdout).contains("failed"),
        "{ok:?}"
    );

    // A second writer is refused, clearly; the image cannot be removed or shrunk under it.
    let second = cluster.cli(&["nbd", "serve", "data/disk", "--listen", "127.0.0.1:1"]);
    let why = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a second writer must be refused");
    assert!(
        why.contains("is locked by client.admin (nbd serve"),
        "{why}"
    );
    assert!(
        why.contains("lock break"),
        "the error says how to break a stale lock: {why}"
    );
    for args in [
        &["image", "rm", "data/disk"][..],
        &["image", "resize", "data/disk", "--size", "1G"],
    ] {
        let refused = cluster.cli(args);
        assert!(!refused.status.success(), "{args:?} must be refused");
    }
    let info = cluster.ok(&["image", "info", "data/disk"]);
    assert!(
        info.contains("locked by:    client.admin (nbd serve"),
        "{info}"
    );

    // Readers need no lock.
    let (_, reader) = cluster.serve_nbd("data/disk", &["--read-only"]);
    cluster.wait_listening(&reader);
    let reader_uri = format!("nbd://{reader}/disk");
    let read = std::process::Command::new("qemu-io")
        .args(["-r", "-f", "raw", "-c", "read -P 0x11 0 64k", &reader_uri])
        .output()
        .expect("qemu-io");
    let read_out = String::from_utf8_lossy(&read.stdout);
    assert!(
        read.status.success() && !read_out.contains("fail"),
        "{read:?}"
    );
    let refused = write(&reader_uri, "0x22");
    let refused_text = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(
        refused_text.contains("Permission denied"),
        "a read-only export refuses writes: {refused_text}"
    );

    // Breaking the lock fences the writer off: its next write fails, and a new writer can
    // take the image and write.
    let broken = cluster.ok(&["image", "lock", "break", "data/disk"]);
    assert!(broken.contains("fenced off"), "{broken}");
    let fenced = write(&uri, "0x33");
    let fenced_text = format!(
        "{}{}",
        String::from_utf8_lossy(&fenced.stdout),
        String::from_utf8_lossy(&fenced.stderr)
    );
    assert!(
        fenced_text.contains("Operation not permitted"),
        "the fenced writer's write must fail: {fenced_text}"
    );
    assert!(
        !cluster.ok(&["blocklist", "ls"]).trim().is_empty(),
        "the old writer's instance is blocklisted"
    );
    let (_, successor) = cluster.serve_nbd("data/disk", &[]);
    cluster.wait_listening(&successor);
    let successor_uri = format!("nbd://{successor}/disk");
    let ok = write(&successor_uri, "0x44");
    assert!(ok.status.success() && !String::from_utf8_lossy(&ok.stdout).contains("failed"));
    let check = std::process::Command::new("qemu-io")
        .args(["-f", "raw", "-c", "read -P 0x44 0 64k", &successor_uri])
        .output()
        .expect("qemu-io");
    let check_out = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && !check_out.contains("fail"),
        "{check_out}"
    );
}

/// The story: a writer closed its image while its lock renewal was in flight. The release
/// compared against the record the renewal had just replaced, failed the comparison, took
/// that as "someone else has it" and returned; the lock stayed held by a process that was
/// gone, and the next writer was refused until the lock went stale and was broken. Renewals
/// and the release now take turns.
#[test]
fn a_release_racing_a_renewal_still_frees_the_image() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &["--nbd", "none"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("data").await.expect("pool");
        image::create(&pool, "race", 16 * MIB, 4 * MIB)
            .await
            .expect("create");
        let header = image::header_object("race");
        for round in 0..20 {
            let lock = Lock::acquire(&pool, "data/race", &header, "test", false)
                .await
                .expect("the image is free");
            let (renewed, released) = tokio::join!(lock.renew(), lock.release());
            renewed.expect("renew");
            released.expect("release");
            let info = image::info(&pool, "race").await.expect("info");
            assert!(
                info.lock.is_none(),
                "round {round}: released, yet locked by {:?}",
                info.lock
            );
        }
    });
}
