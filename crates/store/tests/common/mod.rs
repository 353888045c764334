//! Helpers shared by the store's integration tests.
#![allow(dead_code)]

pub mod model;

use coffer_store::{MkfsOptions, Mode, Store};
use keys::KeyEncryptionKey;
use map::{ObjectName, ObjectRef, PoolId};
use std::path::Path;

pub fn kek(seed: u8) -> KeyEncryptionKey {
    KeyEncryptionKey::from_bytes([seed; 32])
}

pub fn mkfs(dir: &Path, mode: Mode, size_bytes: u64) -> Store {
    Store::mkfs(
        dir,
        &MkfsOptions {
            mode,
            size_bytes,
            device: None,
        },
        &kek(7),
    )
    .expect("mkfs");
    Store::open(dir, &kek(7)).expect("open")
}

pub fn obj(pool: u64, name: &str) -> ObjectRef {
    ObjectRef::new(PoolId(pool), ObjectName::new(name).expect("valid name"))
}

/// Bytes that name their own position, so a misplaced block is visible in a diff.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `data` in memory that starts on a block boundary, as the messenger receives large
/// segments: the store may write it from where it is.
pub fn aligned(data: &[u8]) -> bytes::Bytes {
    let block = coffer_store::BLOCK_SIZE_BYTES as usize;
    let mut buffer = bytes::BytesMut::with_capacity(data.len() + block);
    let pad = buffer.as_ptr().align_offset(block);
    buffer.resize(pad, 0);
    bytes::Buf::advance(&mut buffer, pad);
    buffer.extend_from_slice(data);
    assert_eq!(buffer.as_ptr() as usize % block, 0, "aligned");
    buffer.freeze()
}
