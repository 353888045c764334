//! Reads for a reply, in pieces (`Store::read_in_pieces`): byte for byte what `read` gives,
//! in every mode, from the device and from the cache; in a `none` store the cache's blocks
//! are handed on as they are.

mod common;

use coffer_store::{Mode, Transaction};
use common::{mkfs, obj, pattern};

const KIB: usize = 1024;

#[test]
fn reads_in_pieces_give_what_read_gives() {
    for mode in [Mode::None, Mode::Gcm] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = mkfs(dir.path(), mode, 8 << 20);
        let o = obj(1, "image.0");
        // Two runs of 300 KiB (each more than one 256 KiB device read) with a hole of
        // 100 KiB between them.
        let mut txn = Transaction::new();
        txn.write(&o, 0, &pattern(1, 300 * KIB));
        txn.write(&o, 400 * KIB as u64, &pattern(2, 300 * KIB));
        store.apply(txn).expect("write");

        // Unaligned starts and ends, across the hole, past the end, and nothing.
        let reads = [
            (100, 650 * KIB as u64),
            (0, 4096),
            (299 * KIB as u64 + 7, 2 * KIB as u64),
            (650 * KIB as u64, 200 * KIB as u64),
            (800 * KIB as u64, 10),
            (5, 0),
        ];
        // Cold (the read in pieces first), then with the cache holding all it read.
        for round in ["cold", "cached"] {
            for (offset, len) in reads {
                let pieces = store
                    .read_in_pieces(&o, offset, len)
                    .expect("read in pieces");
                let want = store.read(&o, offset, len).expect("read");
                assert!(
                    pieces.concat() == want[..],
                    "{mode} {round}: {len} bytes from {offset} differ"
                );
                assert!(pieces.iter().all(|piece| !piece.is_empty()));
                if mode != Mode::None {
                    assert!(pieces.len() <= 1, "{mode}: one buffer, opened in place");
                }
            }
        }
        if mode == Mode::None {
            let pieces = store
                .read_in_pieces(&o, 0, 64 * KIB as u64)
                .expect("a cached read");
            assert_eq!(
                pieces.len(),
                16,
                "a `none` store hands on the cache's blocks"
            );
        }
    }
}
