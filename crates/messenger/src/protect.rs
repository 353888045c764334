//! The frame protection of `secure` mode (docs/design/edge-sealing.md, "Links"). After the
//! TLS 1.3 handshake and the hello, both ends take two keys from the TLS exporter, one per
//! direction, and protect every frame with AES-256-GCM: the header, the metadata and any
//! plaintext data are encrypted; a data segment the sender marks as already sealed travels
//! open, as the frame's additional authenticated data, so it is bound to the frame without
//! being encrypted again; sealed chunks going back to the client that opens them travel open
//! and unbound, their records in the encrypted metadata standing in for the binding.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::hmac;
use zeroize::Zeroize;

/// The exporter label of the frame keys (RFC 8446, section 7.5).
const EXPORTER_LABEL: &[u8] = b"EXPORTER-coffer-frames-v1";
/// Derives a direction's next key from its current one.
const NEXT_KEY_LABEL: &[u8] = b"coffer-frames-next-key-v1";
/// Frames one key protects before both ends roll it forward.
pub(crate) const FRAMES_PER_KEY: u64 = 1 << 20;
pub(crate) const TAG_BYTES: usize = 16;
/// The clear prefix of a protected frame: the protected part's length, the open segment's.
pub(crate) const PREFIX_BYTES: usize = 8;
/// The top bit of the open segment's length in the prefix: the segment is bound by the chunk
/// records in the metadata, not by the frame's tag (it is not the additional data).
pub(crate) const BOUND_BIT: u32 = 1 << 31;

/// One direction of a link: its key, and how many frames it has protected.
pub(crate) struct FrameKey {
    secret: [u8; 32],
    key: LessSafeKey,
    frames: u64,
}

impl Drop for FrameKey {
    fn drop(&mut self) {
        self.secret.zeroize();
    }
}

fn aead_key(secret: &[u8; 32]) -> LessSafeKey {
    let unbound = UnboundKey::new(&AES_256_GCM, secret)
        .unwrap_or_else(|_| unreachable!("a 32-byte key fits AES-256-GCM"));
    LessSafeKey::new(unbound)
}

/// The frame failed its tag: altered, replayed, reordered, or not from the peer.
#[derive(Debug)]
pub(crate) struct Unauthentic;

impl FrameKey {
    pub(crate) fn new(secret: [u8; 32]) -> Self {
        FrameKey {
            key: aead_key(&secret),
            secret,
            frames: 0,
        }
    }

    /// The nonce of the next frame (its number in this direction), rolling the key forward
    /// first when the current one has protected `FRAMES_PER_KEY` frames.
    fn next_nonce(&mut self) -> Nonce {
        if self.frames > 0 && self.frames.is_multiple_of(FRAMES_PER_KEY) {
            let tag = hmac::sign(
                &hmac::Key::new(hmac::HMAC_SHA256, &self.secret),
                NEXT_KEY_LABEL,
            );
            self.secret.copy_from_slice(tag.as_ref());
            self.key = aead_key(&self.secret);
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce[4..].copy_from_slice(&self.frames.to_be_bytes());
        self.frames = self
            .frames
            .checked_add(1)
            .unwrap_or_else(|| unreachable!("2^64 frames on one link"));
        Nonce::assume_unique_for_key(nonce)
    }

    /// Encrypts `protected` in place, binding `open` to it; returns the tag.
    pub(crate) fn seal(&mut self, protected: &mut [u8], open: &[u8]) -> [u8; TAG_BYTES] {
        let nonce = self.next_nonce();
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(open), protected)
            .unwrap_or_else(|_| unreachable!("frames are far below GCM's message limit"));
        let mut out = [0u8; TAG_BYTES];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Decrypts `protected` (the ciphertext followed by its tag) in place, checking that it
    /// and `open` are the peer's next frame; returns the plaintext's length.
    pub(crate) fn open(&mut self, protected: &mut [u8], open: &[u8]) -> Result<usize, Unauthentic> {
        let nonce = self.next_nonce();
        self.key
            .open_in_place(nonce, Aad::from(open), protected)
            .map(|plain| plain.len())
            .map_err(|_| Unauthentic)
    }
}

/// Both directions' keys of one end of a link.
pub(crate) struct FrameKeys {
    pub seal: FrameKey,
    pub open: FrameKey,
}

impl FrameKeys {
    /// The keys from a finished TLS session: the first 32 exported bytes protect what the
    /// client sends, the next 32 what the server sends.
    pub(crate) fn export<D>(
        session: &rustls::ConnectionCommon<D>,
        client: bool,
    ) -> Result<FrameKeys, rustls::Error> {
        let mut material = session.export_keying_material([0u8; 64], EXPORTER_LABEL, None)?;
        let mut to_server = [0u8; 32];
        let mut to_client = [0u8; 32];
        to_server.copy_from_slice(&material[..32]);
        to_client.copy_from_slice(&material[32..]);
        material.zeroize();
        let (seal, open) = if client {
            (to_server, to_client)
        } else {
            (to_client, to_server)
        };
        Ok(FrameKeys {
            seal: FrameKey::new(seal),
            open: FrameKey::new(open),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (FrameKey, FrameKey) {
        (FrameKey::new([7; 32]), FrameKey::new([7; 32]))
    }

    #[test]
    fn frames_open_in_order_and_bind_their_open_segment() {
        let (mut tx, mut rx) = pair();
        for i in 0..3u8 {
            let mut protected = b"header and meta".to_vec();
            let tag = tx.seal(&mut protected, &[i; 64]);
            protected.extend_from_slice(&tag);
            assert_eq!(rx.open(&mut protected, &[i; 64]).ok(), Some(15));
            assert_eq!(&protected[..15], b"header and meta");
        }
    }

    #[test]
    fn a_swapped_segment_or_a_replayed_frame_fails() {
        let (mut tx, mut rx) = pair();
        let mut first = b"first".to_vec();
        let tag = tx.seal(&mut first, b"segment one");
        first.extend_from_slice(&tag);
        let mut swapped = first.clone();
        assert!(rx.open(&mut swapped, b"segment two").is_err());
        // The receiver moved on by one frame: the genuine first frame is now out of place.
        let (_, mut rx) = pair();
        let mut replayed = first.clone();
        assert!(rx.open(&mut first, b"segment one").is_ok());
        assert!(rx.open(&mut replayed, b"segment one").is_err());
    }

    #[test]
    fn both_ends_roll_the_key_at_the_same_frame() {
        let (mut tx, mut rx) = pair();
        tx.frames = FRAMES_PER_KEY - 1;
        rx.frames = FRAMES_PER_KEY - 1;
        let before = tx.secret;
        for _ in 0..2 {
            let mut protected = b"x".to_vec();
            let tag = tx.seal(&mut protected, b"");
            protected.extend_from_slice(&tag);
            assert!(rx.open(&mut protected, b"").is_ok());
        }
        assert_ne!(tx.secret, before);
        assert_eq!(tx.secret, rx.secret);
    }
}
