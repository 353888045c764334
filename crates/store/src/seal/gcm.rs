//! `gcm` mode: AES-256-GCM per 4 KiB chunk, from aws-lc-rs, in place in the IO buffer.
//!
//! chunk i of an extent: nonce = (DOMAIN_DATA, incarnation, nonce_base + i) (see nonce.rs),
//! additional data = object id (16 bytes) || logical chunk index (8 bytes, big-endian), so a
//! chunk moved to another object or offset fails its check. The 16-byte tag goes into the
//! extent's metadata record.

use super::nonce::{nonce_bytes, DOMAIN_DATA};
use super::{ChunkIntegrityError, TAG_BYTES};
use crate::device::BLOCK_SIZE_BYTES;
use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

pub(crate) struct Gcm {
    key: LessSafeKey,
}

fn aad(object_id: &[u8; 16], logical_chunk: u64) -> [u8; 24] {
    let mut aad = [0u8; 24];
    aad[..16].copy_from_slice(object_id);
    aad[16..].copy_from_slice(&logical_chunk.to_be_bytes());
    aad
}

impl Gcm {
    pub(crate) fn new(key: &[u8; 32]) -> Gcm {
        let unbound =
            UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte key is valid for AES-256-GCM");
        Gcm {
            key: LessSafeKey::new(unbound),
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
                let nonce = Nonce::assume_unique_for_key(nonce_bytes(
                    DOMAIN_DATA,
                    incarnation,
                    nonce_base + i as u64,
                ));
                let tag = self
                    .key
                    .seal_in_place_separate_tag(
                        nonce,
                        Aad::from(aad(object_id, first_logical_chunk + i as u64)),
                        chunk,
                    )
                    .expect("sealing a 4 KiB chunk cannot fail");
                let mut out = [0u8; TAG_BYTES];
                out.copy_from_slice(tag.as_ref());
                out
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
            let nonce = Nonce::assume_unique_for_key(nonce_bytes(
                DOMAIN_DATA,
                incarnation,
                nonce_base + i as u64,
            ));
            self.key
                .open_in_place_separate_tag(
                    nonce,
                    Aad::from(aad(object_id, first_logical_chunk + i as u64)),
                    tag,
                    chunk,
                )
                .map_err(|_| ChunkIntegrityError { chunk: i })?;
        }
        Ok(())
    }
}
