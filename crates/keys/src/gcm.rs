//! AES-256-GCM for data chunks (the store's `gcm` mode, chunks sealed at the edge, S3 SSE),
//! from whichever of two maintained libraries is faster on this CPU. Both compute the
//! standard construction (NIST SP 800-38D), so a chunk sealed by one opens with the other.
//!
//! - aws-lc-rs runs AES-GCM in 512-bit registers where the CPU has AVX-512 with VAES and
//!   VPCLMULQDQ: there it is about twice ring (CRATES.md, measured on Xeon).
//! - Without AVX-512, aws-lc-rs 1.19 falls back to 128-bit AES-NI and PCLMULQDQ code, while
//!   ring 0.17 uses VAES and VPCLMULQDQ in 256-bit AVX2 registers: about twice aws-lc-rs on a
//!   CPU that has those but no AVX-512 (docs/benchmarks.md, 2026-11-24, AMD EPYC).
//! - Everywhere else (no VAES, or not x86-64) aws-lc-rs.
//!
//! The choice is made once per process from the CPU's features, never from configuration.
//! ring hashes additional data one block at a time, so this is for chunks with a few dozen
//! bytes of it; a MAC over bulk data (the messenger's segment check) stays on aws-lc-rs.

use std::fmt;
use std::sync::OnceLock;

/// Bytes of a GCM tag.
pub const TAG_BYTES: usize = 16;
/// Bytes of a GCM nonce.
pub const NONCE_BYTES: usize = 12;
/// Most bytes one call seals or opens: GCM's limit of 2^32 - 2 blocks.
pub const MAX_BYTES: u64 = ((1 << 32) - 2) * 16;

/// The library an AES-256-GCM key runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Implementation {
    AwsLc,
    Ring,
}

impl Implementation {
    /// The faster of the two on this CPU (see the module comment); chosen once.
    pub fn fastest() -> Implementation {
        static CHOSEN: OnceLock<Implementation> = OnceLock::new();
        *CHOSEN.get_or_init(choose)
    }

    /// Both, for tests and benchmarks that compare them.
    pub const ALL: [Implementation; 2] = [Implementation::AwsLc, Implementation::Ring];

    /// The library's name, as bench headers and results print it.
    pub fn name(self) -> &'static str {
        match self {
            Implementation::AwsLc => "aws-lc-rs",
            Implementation::Ring => "ring",
        }
    }
}

impl fmt::Display for Implementation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn choose() -> Implementation {
    let wide = is_x86_feature_detected!("vaes")
        && is_x86_feature_detected!("vpclmulqdq")
        && is_x86_feature_detected!("avx2");
    let avx512 = is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl");
    if wide && !avx512 {
        Implementation::Ring
    } else {
        Implementation::AwsLc
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn choose() -> Implementation {
    Implementation::AwsLc
}

/// A chunk's tag did not match: the chunk, its tag, its nonce or its additional data were
/// altered, or it was sealed under another key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagMismatch;

/// One AES-256-GCM key, sealing and opening in place with the tag kept apart.
pub struct ChunkCipher(Key);

/// ring keeps its key schedule and GHASH table inline (544 bytes); aws-lc-rs on the heap.
enum Key {
    AwsLc(aws_lc_rs::aead::LessSafeKey),
    Ring(Box<ring::aead::LessSafeKey>),
}

impl ChunkCipher {
    /// `key` in the fastest implementation on this CPU.
    pub fn new(key: &[u8; 32]) -> ChunkCipher {
        ChunkCipher::with(Implementation::fastest(), key)
    }

    pub fn with(implementation: Implementation, key: &[u8; 32]) -> ChunkCipher {
        ChunkCipher(match implementation {
            Implementation::AwsLc => {
                use aws_lc_rs::aead::{LessSafeKey, UnboundKey, AES_256_GCM};
                let unbound = UnboundKey::new(&AES_256_GCM, key)
                    .unwrap_or_else(|_| unreachable!("a 32-byte key is valid for AES-256-GCM"));
                Key::AwsLc(LessSafeKey::new(unbound))
            }
            Implementation::Ring => {
                use ring::aead::{LessSafeKey, UnboundKey, AES_256_GCM};
                let unbound = UnboundKey::new(&AES_256_GCM, key)
                    .unwrap_or_else(|_| unreachable!("a 32-byte key is valid for AES-256-GCM"));
                Key::Ring(Box::new(LessSafeKey::new(unbound)))
            }
        })
    }

    pub fn implementation(&self) -> Implementation {
        match self.0 {
            Key::AwsLc(_) => Implementation::AwsLc,
            Key::Ring(_) => Implementation::Ring,
        }
    }

    /// Seals `data` in place; returns its tag. The caller keeps `nonce` unique under this key.
    pub fn seal(&self, nonce: [u8; NONCE_BYTES], aad: &[u8], data: &mut [u8]) -> [u8; TAG_BYTES] {
        assert!(
            data.len() as u64 <= MAX_BYTES,
            "AES-GCM seals at most {MAX_BYTES} bytes at once, not {}",
            data.len()
        );
        let mut out = [0u8; TAG_BYTES];
        match &self.0 {
            Key::AwsLc(key) => {
                use aws_lc_rs::aead::{Aad, Nonce};
                let tag = key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad),
                        data,
                    )
                    .unwrap_or_else(|_| unreachable!("the length was checked"));
                out.copy_from_slice(tag.as_ref());
            }
            Key::Ring(key) => {
                use ring::aead::{Aad, Nonce};
                let tag = key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad),
                        data,
                    )
                    .unwrap_or_else(|_| unreachable!("the length was checked"));
                out.copy_from_slice(tag.as_ref());
            }
        }
        out
    }

    /// Opens `data` in place against `tag`. On a mismatch `data` is left unspecified: the
    /// caller must not use it.
    pub fn open(
        &self,
        nonce: [u8; NONCE_BYTES],
        aad: &[u8],
        tag: &[u8; TAG_BYTES],
        data: &mut [u8],
    ) -> Result<(), TagMismatch> {
        if data.len() as u64 > MAX_BYTES {
            return Err(TagMismatch);
        }
        match &self.0 {
            Key::AwsLc(key) => {
                use aws_lc_rs::aead::{Aad, Nonce};
                key.open_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad),
                    tag,
                    data,
                )
                .map(|_| ())
                .map_err(|_| TagMismatch)
            }
            Key::Ring(key) => {
                use ring::aead::{Aad, Nonce, Tag};
                key.open_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad),
                    Tag::from(*tag),
                    data,
                    0..,
                )
                .map(|_| ())
                .map_err(|_| TagMismatch)
            }
        }
    }
}

impl fmt::Debug for ChunkCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkCipher({})", self.implementation())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn both_libraries_seal_the_same_bytes_and_open_each_others_chunks() {
        let key = [5u8; 32];
        let [aws, ring] = Implementation::ALL.map(|i| ChunkCipher::with(i, &key));
        assert_eq!(aws.implementation(), Implementation::AwsLc);
        assert_eq!(ring.implementation(), Implementation::Ring);
        // Lengths either side of the 16-byte block and of ring's 256-byte wide stride.
        for len in [0, 1, 15, 16, 17, 255, 256, 257, 4095, 4096, 65536 + 3] {
            let plain = sample(len);
            let aad = sample(len % 61);
            let nonce = [len as u8; NONCE_BYTES];
            let (mut by_aws, mut by_ring) = (plain.clone(), plain.clone());
            let aws_tag = aws.seal(nonce, &aad, &mut by_aws);
            let ring_tag = ring.seal(nonce, &aad, &mut by_ring);
            assert_eq!((&by_aws, aws_tag), (&by_ring, ring_tag), "{len} bytes");
            if len > 0 {
                assert_ne!(by_aws, plain, "{len} bytes");
            }
            let mut opened = by_aws.clone();
            ring.open(nonce, &aad, &aws_tag, &mut opened)
                .expect("ring opens aws-lc's chunk");
            assert_eq!(opened, plain);
            let mut opened = by_ring;
            aws.open(nonce, &aad, &ring_tag, &mut opened)
                .expect("aws-lc opens ring's chunk");
            assert_eq!(opened, plain);
        }
    }

    #[test]
    fn a_chunk_altered_anywhere_fails_its_tag_in_both_libraries() {
        let key = [9u8; 32];
        let plain = sample(4096);
        let nonce = [1u8; NONCE_BYTES];
        for cipher in Implementation::ALL.map(|i| ChunkCipher::with(i, &key)) {
            let mut sealed = plain.clone();
            let tag = cipher.seal(nonce, b"object 7, chunk 3", &mut sealed);
            let open = |nonce, aad: &[u8], tag: &[u8; TAG_BYTES], data: &[u8]| {
                cipher.open(nonce, aad, tag, &mut data.to_vec())
            };
            assert_eq!(open(nonce, b"object 7, chunk 3", &tag, &sealed), Ok(()));
            let mut flipped = sealed.clone();
            flipped[4000] ^= 0x10;
            assert_eq!(
                open(nonce, b"object 7, chunk 3", &tag, &flipped),
                Err(TagMismatch)
            );
            assert_eq!(
                open(nonce, b"object 7, chunk 4", &tag, &sealed),
                Err(TagMismatch)
            );
            assert_eq!(
                open([2; NONCE_BYTES], b"object 7, chunk 3", &tag, &sealed),
                Err(TagMismatch)
            );
            let mut bad_tag = tag;
            bad_tag[15] ^= 1;
            assert_eq!(
                open(nonce, b"object 7, chunk 3", &bad_tag, &sealed),
                Err(TagMismatch)
            );
            assert_eq!(
                open(nonce, b"object 7, chunk 3", &tag, &sealed[..4095]),
                Err(TagMismatch)
            );
            let other = ChunkCipher::with(cipher.implementation(), &[10u8; 32]);
            assert_eq!(
                other.open(nonce, b"object 7, chunk 3", &tag, &mut sealed.clone()),
                Err(TagMismatch)
            );
        }
    }
}
