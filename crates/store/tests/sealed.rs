//! Chunks sealed upstream by a client that holds the key (MISSION.md, "Encrypt once") are
//! stored and returned byte for byte, in every mode, without the store decrypting or
//! re-encrypting them; operations that would need their plaintext are refused clearly.

mod common;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use bytes::Bytes;
use coffer_store::{
    AlignedBuf, ApplyError, ChunkRecord, Mode, ReadError, Transaction, Via, BLOCK_SIZE_BYTES,
};
use common::{aligned, find, mkfs, obj, pattern};

const CHUNK: usize = BLOCK_SIZE_BYTES as usize;
const KEY_ID: u64 = 0xfeed;

/// A client's sealing, as the edge will do it: AES-256-GCM per chunk, AAD = object || index.
struct Client {
    key: LessSafeKey,
}

impl Client {
    fn new() -> Client {
        Client {
            key: LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[42u8; 32]).expect("key")),
        }
    }

    fn seal(&self, name: &str, first_chunk: u64, plain: &[u8]) -> (Vec<u8>, Vec<ChunkRecord>) {
        let mut data = plain.to_vec();
        let records = data
            .chunks_exact_mut(CHUNK)
            .enumerate()
            .map(|(i, chunk)| {
                let index = first_chunk + i as u64;
                let mut nonce = [0u8; 12];
                nonce[4..].copy_from_slice(&index.to_be_bytes());
                let aad = [name.as_bytes(), &index.to_be_bytes()].concat();
                let tag = self
                    .key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad),
                        chunk,
                    )
                    .expect("seal");
                ChunkRecord {
                    key_id: KEY_ID,
                    nonce,
                    tag: tag.as_ref().try_into().expect("16-byte tag"),
                }
            })
            .collect();
        (data, records)
    }

    fn open(&self, name: &str, first_chunk: u64, data: &mut [u8], records: &[Option<ChunkRecord>]) {
        for (i, (chunk, record)) in data.chunks_exact_mut(CHUNK).zip(records).enumerate() {
            let record = record.expect("a stored chunk");
            let index = first_chunk + i as u64;
            let aad = [name.as_bytes(), &index.to_be_bytes()].concat();
            self.key
                .open_in_place_separate_tag(
                    Nonce::assume_unique_for_key(record.nonce),
                    Aad::from(aad),
                    &record.tag,
                    chunk,
                )
                .expect("the client opens what the store returned");
        }
    }
}

#[test]
fn client_sealed_chunks_are_stored_and_returned_as_they_came_in_every_mode() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = mkfs(dir.path(), mode, 1 << 20);
        let client = Client::new();
        let o = obj(1, "image.0");
        let plain = pattern(5, 4 * CHUNK);
        let (sealed, records) = client.seal("image.0", 2, &plain);
        let mut txn = Transaction::new();
        // Handed over on a block boundary: stored from where it is.
        txn.write_sealed(&o, 2, aligned(&sealed), records.clone());
        store.apply(txn).expect("sealed write");
        assert_eq!(store.stat(&o).expect("stat").size_bytes, 6 * CHUNK as u64);

        // Leave junk in a pooled buffer of the size the read takes (5 blocks round up to
        // 8): the hole must still read as zeros.
        let mut junk = AlignedBuf::for_overwrite(8);
        junk.fill(0xa5);
        drop(junk);
        let read = store.read_sealed(&o, 1, 5).expect("read sealed");
        let bytes = read.data.concat();
        assert_eq!(read.chunks[0], None, "{mode}: chunk 1 is a hole");
        assert!(
            bytes[..CHUNK].iter().all(|&b| b == 0),
            "{mode}: a hole reads as zeros"
        );
        assert_eq!(
            &read.chunks[1..],
            &records.iter().copied().map(Some).collect::<Vec<_>>()[..]
        );
        assert!(
            bytes[CHUNK..] == sealed[..],
            "{mode}: bytes differ from what the client sent"
        );
        let mut data = bytes[CHUNK..].to_vec();
        client.open("image.0", 2, &mut data, &read.chunks[1..]);
        assert!(data == plain);

        drop(store);
        let disk = std::fs::read(dir.path().join("data")).expect("data file");
        assert!(
            find(&disk, &sealed[..CHUNK]).is_some(),
            "{mode}: the sealed chunk lies on disk exactly as sent"
        );
        assert!(
            find(&disk, &plain[..64]).is_none(),
            "{mode}: no plaintext on disk"
        );
    }
}

#[test]
fn plaintext_access_to_client_sealed_chunks_is_refused_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 1 << 20);
    let client = Client::new();
    let o = obj(1, "image.1");
    let (sealed, records) = client.seal("image.1", 0, &pattern(6, 2 * CHUNK));
    let mut txn = Transaction::new();
    txn.write_sealed(&o, 0, Bytes::copy_from_slice(&sealed), records);
    store.apply(txn).expect("sealed write");

    assert!(matches!(
        store.read(&o, 0, 10),
        Err(ReadError::EdgeSealed {
            offset_bytes: 0,
            ..
        })
    ));
    let mut txn = Transaction::new();
    txn.write(&o, 100, b"partial plaintext write inside a sealed chunk");
    let err = store.apply(txn).expect_err("needs the chunk's plaintext");
    assert!(
        matches!(
            err,
            ApplyError::EdgeSealed {
                offset_bytes: 0,
                ..
            }
        ),
        "{err:?}"
    );

    let mut txn = Transaction::new();
    txn.zero(&o, 10, 100);
    assert!(
        matches!(
            store.apply(txn),
            Err(ApplyError::EdgeSealed {
                offset_bytes: 0,
                ..
            })
        ),
        "zeroing part of a sealed chunk"
    );
    let mut txn = Transaction::new();
    txn.write_sealed(
        &o,
        0,
        Bytes::copy_from_slice(&sealed[..100]),
        vec![ChunkRecord {
            key_id: KEY_ID,
            nonce: [0; 12],
            tag: [0; 16],
        }],
    );
    assert!(
        matches!(store.apply(txn), Err(ApplyError::Invalid { .. })),
        "a partial sealed chunk"
    );

    // Whole-chunk replacement needs no plaintext, and store-sealed chunks are not returned
    // by read_sealed.
    let (again, records) = client.seal("image.1", 1, &pattern(7, CHUNK));
    let mut txn = Transaction::new();
    txn.write_sealed(&o, 1, Bytes::copy_from_slice(&again), records)
        .write(&obj(1, "plain"), 0, b"store sealed");
    store.apply(txn).expect("replace one chunk");
    assert!(store.read_sealed(&o, 1, 1).expect("read").data.concat() == again[..]);
    assert!(matches!(
        store.read_sealed(&obj(1, "plain"), 0, 1),
        Err(ReadError::Invalid { .. })
    ));
}

/// The story: a client-sealed last chunk was truncated to 100 bytes (the store kept the
/// chunk, since it cannot zero bytes it cannot open), then the object grew again, and the
/// chunk's old bytes past 100 reappeared where zeros belong.
#[test]
fn growing_past_a_truncated_client_sealed_chunk_is_refused_until_it_is_rewritten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 1 << 20);
    let client = Client::new();
    let o = obj(1, "file");
    let (sealed, records) = client.seal("file", 0, &pattern(8, CHUNK));
    let mut txn = Transaction::new();
    txn.write_sealed(&o, 0, Bytes::copy_from_slice(&sealed), records)
        .truncate(&o, 100);
    store
        .apply(txn)
        .expect("sealed write, then truncate into the chunk");
    assert_eq!(store.stat(&o).expect("stat").size_bytes, 100);

    type Build = Box<dyn Fn(&mut Transaction)>;
    let grow: Vec<(&str, Build)> = vec![
        (
            "truncate up",
            Box::new(|t: &mut Transaction| {
                t.truncate(&obj(1, "file"), 4096);
            }),
        ),
        (
            "write further on",
            Box::new(|t: &mut Transaction| {
                t.write(&obj(1, "file"), 1 << 16, b"later");
            }),
        ),
        (
            "zero further on",
            Box::new(|t: &mut Transaction| {
                t.zero(&obj(1, "file"), 8192, 10);
            }),
        ),
        (
            "an empty write further on",
            Box::new(|t: &mut Transaction| {
                t.write(&obj(1, "file"), 8192, b"");
            }),
        ),
        (
            "an empty zero further on",
            Box::new(|t: &mut Transaction| {
                t.zero(&obj(1, "file"), 8192, 0);
            }),
        ),
    ];
    for (what, build) in grow {
        let mut txn = Transaction::new();
        build(&mut txn);
        let err = store.apply(txn).expect_err(what);
        assert!(
            matches!(
                err,
                ApplyError::EdgeSealed {
                    offset_bytes: 0,
                    ..
                }
            ),
            "{what}: {err:?}"
        );
        assert_eq!(
            store.stat(&o).expect("stat").size_bytes,
            100,
            "{what}: nothing applied"
        );
    }

    // Rewriting the chunk (with zeros past byte 100) in the same transaction makes it fine.
    let mut plain = pattern(8, CHUNK);
    plain[100..].fill(0);
    let (again, records) = client.seal("file", 0, &plain);
    let (next, next_records) = client.seal("file", 1, &pattern(9, CHUNK));
    let mut txn = Transaction::new();
    txn.write_sealed(
        &o,
        0,
        Bytes::from([again, next].concat()),
        [records, next_records].concat(),
    );
    store.apply(txn).expect("the client rewrote its last chunk");
    assert_eq!(store.stat(&o).expect("stat").size_bytes, 2 * CHUNK as u64);
}

/// `read_ranges_via` gives what `read` and `read_sealed` give, range by range, with the
/// attributes and size of the same state: sealed chunks with their records, holes and
/// chunks past the largest object as `None`; plaintext zero past the object's end (after a
/// truncate inside a block, and far past it); and malformed requests refused.
#[test]
fn ranges_read_in_one_snapshot_agree_with_single_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 1 << 20);
    let client = Client::new();
    let o = obj(1, "image.1");
    let (sealed, records) = client.seal("image.1", 2, &pattern(9, 4 * CHUNK));
    let mut txn = Transaction::new();
    txn.write_sealed(&o, 2, aligned(&sealed), records);
    txn.set_attr(&o, "shard", b"3");
    store.apply(txn).expect("sealed write");
    let chunk = CHUNK as u64;
    let read = store
        .read_ranges_via(
            &o,
            &[(chunk, 2 * chunk), (5 * chunk, 3 * chunk)],
            true,
            Via::Cache,
        )
        .expect("ranges");
    assert_eq!(read.attrs.get("shard").map(Vec::as_slice), Some(&b"3"[..]));
    assert_eq!(read.size_bytes, 6 * chunk);
    let (first, second) = (
        store.read_sealed(&o, 1, 2).expect("read"),
        store.read_sealed(&o, 5, 3).expect("read"),
    );
    assert!(
        read.data[..2 * CHUNK] == first.data.concat()[..]
            && read.data[2 * CHUNK..] == second.data.concat()[..]
    );
    assert_eq!(
        read.chunks,
        [&first.chunks[..], &second.chunks[..]].concat()
    );
    assert_eq!(read.chunks[0], None, "chunk 1 is a hole");
    assert_eq!(
        read.chunks[3..],
        [None, None],
        "chunks 6 and 7 lie past the end"
    );
    let past = store
        .read_ranges_via(&o, &[(1 << 40, chunk)], true, Via::Device)
        .expect("past the largest object");
    assert!(past.data == vec![0; CHUNK] && past.chunks == [None]);
    assert!(
        matches!(
            store.read_ranges_via(&o, &[(100, chunk)], true, Via::Cache),
            Err(ReadError::Invalid { .. })
        ),
        "sealed chunks are read whole"
    );

    let p = obj(1, "plain");
    let plain = pattern(10, 2 * CHUNK);
    let mut txn = Transaction::new();
    txn.write(&p, 0, &plain);
    txn.truncate(&p, 4500);
    store.apply(txn).expect("write and truncate");
    let ranges = [(0, 4096), (4000, 2000), (6000, 100), (1 << 40, 10), (10, 0)];
    let read = store
        .read_ranges_via(&p, &ranges, false, Via::Cache)
        .expect("ranges");
    assert_eq!(read.size_bytes, 4500);
    let mut want = plain[..4096].to_vec();
    want.extend_from_slice(&plain[4000..4500]);
    want.resize(want.len() + 1500 + 100 + 10, 0);
    assert!(
        read.data == want,
        "bytes past the end of the object read as zeros"
    );
    assert!(read.chunks.is_empty());
    assert!(store.read(&p, 4000, 2000).expect("read")[..] == plain[4000..4500]);
    assert!(matches!(
        store.read_ranges_via(&obj(1, "absent"), &[], false, Via::Cache),
        Err(ReadError::NotFound { .. })
    ));
    assert!(matches!(
        store.read_ranges_via(&p, &[(0, u64::MAX), (0, 1)], false, Via::Cache),
        Err(ReadError::Invalid { .. })
    ));
}

/// A read of client-sealed chunks that the cache holds hands on the cached blocks
/// themselves, one piece per block, and what it reads from the device as one slice per run:
/// what it returns is byte for byte what a read of the device returns, holes and chunks
/// past the end as zeros, whether the cache holds none of the range, part of it (the front
/// or the back) or all of it.
#[test]
fn sealed_reads_in_pieces_from_the_cache_match_the_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mkfs(dir.path(), Mode::Gcm, 1 << 20);
    let client = Client::new();
    // Chunks 0 to 3 and 6 to 9 written, 4 and 5 a hole, 10 and 11 past the end; the cache
    // is filled with the back run first, then with the front run first.
    for (name, filled) in [("image.2", 6), ("image.3", 0)] {
        let o = obj(1, name);
        let (front, front_records) = client.seal(name, 0, &pattern(11, 4 * CHUNK));
        let (back, back_records) = client.seal(name, 6, &pattern(12, 4 * CHUNK));
        let mut txn = Transaction::new();
        txn.write_sealed(&o, 0, aligned(&front), front_records);
        txn.write_sealed(&o, 6, aligned(&back), back_records);
        store.apply(txn).expect("sealed writes");

        let held = store.cache_stats().held_bytes;
        let device = store
            .read_sealed_via(&o, 0, 12, Via::Device)
            .expect("read the device");
        let want = device.data.concat();
        assert!(want[..4 * CHUNK] == front[..] && want[6 * CHUNK..10 * CHUNK] == back[..]);
        assert!(
            want[4 * CHUNK..6 * CHUNK].iter().all(|&b| b == 0)
                && want[10 * CHUNK..].iter().all(|&b| b == 0),
            "the hole and the chunks past the end read as zeros"
        );
        assert_eq!(
            device.data.len(),
            4,
            "a slice per run read, a piece per run of zeros"
        );
        assert_eq!(
            store.cache_stats().held_bytes,
            held,
            "a device read keeps nothing"
        );

        let missed = store.read_sealed(&o, filled, 4).expect("fill the cache");
        let at = filled as usize * CHUNK;
        assert!(missed.data.concat() == want[at..at + 4 * CHUNK]);
        let hits = store.cache_stats().hit_bytes;
        let part = store.read_sealed(&o, 0, 12).expect("part from the cache");
        assert_eq!(
            store.cache_stats().hit_bytes - hits,
            4 * CHUNK as u64,
            "{name}: the chunks read first came from the cache"
        );
        let whole = store.read_sealed(&o, 0, 12).expect("all from the cache");
        assert_eq!(
            store.cache_stats().hit_bytes - hits,
            12 * CHUNK as u64,
            "{name}: then the others did too"
        );
        assert_eq!(
            whole.data.len(),
            4 + 1 + 4 + 1,
            "each cached block is a piece of its own, each run of zeros one"
        );
        for read in [&part, &whole] {
            assert!(
                read.data.concat() == want,
                "{name}: the cache gave other bytes"
            );
            assert_eq!(read.chunks, device.chunks);
            assert_eq!(read.size_bytes, device.size_bytes);
        }
    }
    // A client may name any chunk: one far past the largest object reads as zeros.
    let far = store
        .read_sealed(&obj(1, "image.2"), u64::MAX - 1, 4)
        .expect("chunks past the largest object");
    assert!(far.data.concat() == vec![0; 4 * CHUNK] && far.chunks == [None; 4]);
}
