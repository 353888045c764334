//! `gcm` mode: AES-256-GCM per 4 KiB chunk, in place in the IO buffer, from the library
//! that is faster on this CPU (`keys::gcm`).
//!
//! chunk i of an extent: nonce = (DOMAIN_DATA, incarnation, nonce_base + i) (see nonce.rs),
//! additional data = object id (16 bytes) || logical chunk index (8 bytes, big-endian), so a
//! chunk moved to another object or offset fails its check. The 16-byte tag goes into the
//! extent's metadata record.

use super::nonce::{nonce_bytes, DOMAIN_DATA};
use super::{ChunkIntegrityError, TAG_BYTES};
use crate::device::BLOCK_SIZE_BYTES;
use keys::gcm::ChunkCipher;

pub(crate) struct Gcm {
    key: ChunkCipher,
}

fn aad(object_id: &[u8; 16], logical_chunk: u64) -> [u8; 24] {
    let mut aad = [0u8; 24];
    aad[..16].copy_from_slice(object_id);
    aad[16..].copy_from_slice(&logical_chunk.to_be_bytes());
    aad
}

impl Gcm {
    pub(crate) fn new(key: &[u8; 32]) -> Gcm {
        Gcm {
            key: ChunkCipher::new(key),
        }
    }

    /// Seals each 4 KiB chunk of `buffer` in place; returns one tag per chunk.
    pub(crate) fn seal(
        &self,
        buffer: &mut [u8],
        object_id: &[u8; 16],
        first_logical_chunk: u64,
        incarnation: u32,
        nonce_base: u64,
    ) -> Vec<[u8; TAG_BYTES]> {
        buffer
            .chunks_exact_mut(BLOCK_SIZE_BYTES as usize)
            .enumerate()
            .map(|(i, chunk)| {
                let nonce = nonce_bytes(DOMAIN_DATA, incarnation, nonce_base + i as u64);
                self.key.seal(
                    nonce,
                    &aad(object_id, first_logical_chunk + i as u64),
                    chunk,
                )
            })
            .collect()
    }

    /// Opens each chunk of `buffer` in place against its tag.
    pub(crate) fn open(
        &self,
        buffer: &mut [u8],
        object_id: &[u8; 16],
        first_logical_chunk: u64,
        incarnation: u32,
        nonce_base: u64,
        tags: &[[u8; TAG_BYTES]],
    ) -> Result<(), ChunkIntegrityError> {
        assert_eq!(
            buffer.len() / BLOCK_SIZE_BYTES as usize,
            tags.len(),
            "one tag per chunk"
        );
        for (i, (chunk, tag)) in buffer
            .chunks_exact_mut(BLOCK_SIZE_BYTES as usize)
            .zip(tags)
            .enumerate()
        {
            let nonce = nonce_bytes(DOMAIN_DATA, incarnation, nonce_base + i as u64);
            self.key
                .open(
                    nonce,
                    &aad(object_id, first_logical_chunk + i as u64),
                    tag,
                    chunk,
                )
                .map_err(|_| ChunkIntegrityError { chunk: i })?;
        }
        Ok(())
    }
}
