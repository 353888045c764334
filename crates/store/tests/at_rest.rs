//! What a stolen disk shows. In every encrypting mode, no data, name, attribute, omap key
//! or omap value appears in clear in any store file; in `none` they do (proving the scan works).
//! In `gcm`, writing the same bytes to the same place twice never produces the same
//! ciphertext (a fresh nonce per write).

mod common;

use coffer_store::{Mode, Transaction};
use common::{aligned, find, mkfs, obj};

const MARKER: &[u8] = b"COFFER-PLAINTEXT-MARKER-7f3a";

fn store_files(dir: &std::path::Path) -> Vec<u8> {
    let mut all = std::fs::read(dir.join("data")).expect("data");
    all.extend(std::fs::read(dir.join("meta.redb")).expect("meta"));
    all.extend(std::fs::read(dir.join("wal")).expect("wal"));
    all
}

#[test]
fn no_plaintext_data_names_or_values_on_disk_in_encrypting_modes() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = mkfs(dir.path(), mode, 1 << 20);
        let data: Vec<u8> = MARKER.iter().copied().cycle().take(3 * 4096 + 77).collect();
        let name = "secret-object-name-COFFER";
        let mut txn = Transaction::new();
        txn.write(&obj(1, name), 0, &data)
            .set_attr(&obj(1, name), "owner", b"attr-value-COFFER-1")
            .omap_set(&obj(1, name), b"k", b"omap-value-COFFER-2");
        // Enough keys for several omap pages, so the root's fences are on disk too.
        for i in 0..500 {
            txn.omap_set(
                &obj(1, name),
                format!("omap-key-COFFER-3-{i:04}").as_bytes(),
                b"",
            );
        }
        store.apply(txn).expect("write");
        drop(store);
        let disk = store_files(dir.path());
        let found: Vec<&str> = [
            MARKER,
            name.as_bytes(),
            b"attr-value-COFFER-1",
            b"omap-value-COFFER-2",
            b"omap-key-COFFER-3",
        ]
        .iter()
        .filter(|needle| find(&disk, needle).is_some())
        .map(|n| std::str::from_utf8(n).expect("ascii"))
        .collect();
        if mode.encrypts() {
            assert!(
                found.is_empty(),
                "{mode}: found in clear on disk: {found:?}"
            );
        } else {
            assert_eq!(
                found.len(),
                5,
                "{mode}: the scan must see every plaintext in `none`: {found:?}"
            );
        }
    }
}

/// Plaintext handed over on block boundaries (one IO piece, and several): `none` writes it
/// from where it is, the encrypting modes seal a copy; the caller's bytes never change, and
/// every mode reads back what was written.
#[test]
fn aligned_bytes_handed_over_are_written_as_is_only_where_nothing_encrypts() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = mkfs(dir.path(), mode, 4 << 20);
        let small: Vec<u8> = MARKER.iter().copied().cycle().take(4096).collect();
        let large: Vec<u8> = MARKER
            .iter()
            .rev()
            .copied()
            .cycle()
            .take(75 * 4096)
            .collect();
        let (small_bytes, large_bytes) = (aligned(&small), aligned(&large));
        let mut txn = Transaction::new();
        txn.write_bytes(&obj(1, "small"), 8192, small_bytes.clone())
            .write_bytes(&obj(1, "large"), 0, large_bytes.clone());
        store.apply(txn).expect("write");
        assert!(
            small_bytes[..] == small[..] && large_bytes[..] == large[..],
            "{mode}: caller's bytes changed"
        );
        assert!(
            store.read(&obj(1, "small"), 8192, 4096).expect("read")[..] == small[..],
            "{mode}"
        );
        assert!(
            store
                .read(&obj(1, "large"), 0, large.len() as u64)
                .expect("read")[..]
                == large[..],
            "{mode}"
        );
        drop(store);
        let disk = std::fs::read(dir.path().join("data")).expect("data");
        let reversed: Vec<u8> = MARKER.iter().rev().copied().collect();
        for needle in [MARKER, &reversed[..]] {
            assert_eq!(find(&disk, needle).is_some(), !mode.encrypts(), "{mode}");
        }
    }
}

#[test]
fn gcm_never_writes_the_same_ciphertext_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 1 << 20);
    let block = vec![0x5au8; 4096];
    for _ in 0..2 {
        let mut txn = Transaction::new();
        txn.write(&obj(1, "same"), 0, &block);
        store.apply(txn).expect("write");
    }
    drop(store);
    let data = std::fs::read(dir.path().join("data")).expect("data");
    let used: Vec<&[u8]> = data
        .chunks(4096)
        .filter(|b| b.iter().any(|x| *x != 0))
        .collect();
    assert_eq!(
        used.len(),
        2,
        "copy on write keeps the old block until it is reused"
    );
    assert_ne!(
        used[0], used[1],
        "the same plaintext sealed twice must differ"
    );
}

/// The story: a store's metadata file is put back to an older copy (a restored VM snapshot,
/// a cloned disk, or an attacker), so the nonce counter resumes at an old mark. Without a
/// fresh per-open incarnation in every nonce, the next write would reuse the nonce of a
/// write made after the snapshot, and the two ciphertexts would XOR to the two plaintexts.
#[test]
fn gcm_does_not_reuse_nonces_after_the_store_is_rolled_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 1 << 20);
    let mut txn = Transaction::new();
    txn.touch(&obj(1, "victim"));
    store.apply(txn).expect("touch");
    drop(store);
    let snapshot: Vec<(std::path::PathBuf, Vec<u8>)> = ["meta.redb", "data", "wal"]
        .iter()
        .map(|f| {
            (
                dir.path().join(f),
                std::fs::read(dir.path().join(f)).expect("read"),
            )
        })
        .collect();

    let write_and_capture = |plain: &[u8]| -> Vec<u8> {
        let store = coffer_store::Store::open(dir.path(), &common::kek(7)).expect("open");
        let mut txn = Transaction::new();
        txn.write(&obj(1, "victim"), 0, plain);
        store.apply(txn).expect("write");
        drop(store);
        let data = std::fs::read(dir.path().join("data")).expect("data");
        let blocks: Vec<&[u8]> = data
            .chunks(4096)
            .filter(|b| b.iter().any(|x| *x != 0))
            .collect();
        assert_eq!(blocks.len(), 1, "one sealed block on disk");
        blocks[0].to_vec()
    };
    let x = vec![0x11u8; 4096];
    let y = vec![0x22u8; 4096];
    let first = write_and_capture(&x);
    for (path, bytes) in &snapshot {
        std::fs::write(path, bytes).expect("roll back");
    }
    let second = write_and_capture(&y);
    let keystream_reused = first
        .iter()
        .zip(&second)
        .zip(x.iter().zip(&y))
        .all(|((c1, c2), (p1, p2))| c1 ^ c2 == p1 ^ p2);
    assert!(
        !keystream_reused,
        "the rolled-back store sealed new data under a nonce it had used before"
    );
}
