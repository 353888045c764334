//! The frame protection of `secure` mode (docs/design/edge-sealing.md, "Links"). After the
//! TLS 1.3 handshake and the hello, both ends take two keys from the TLS exporter, one per
//! direction, and protect every frame with AES-256-GCM: the header, the metadata and any
//! plaintext data are encrypted. A data segment the sender marks as already sealed travels
//! open after the protected part, checked by a one-time key that the protected part carries
//! ([`SegmentCheck`]), so it is bound to the frame without being encrypted again, and an OSD
//! passing it on to its replicas passes the check on instead of hashing it again; sealed
//! chunks going back to the client that opens them travel open and unchecked, their records
//! in the encrypted metadata standing in for the check.

use aws_lc_rs::aead::NONCE_LEN;
use aws_lc_rs::hmac;
use aws_lc_sys as sys;
use std::os::raw::c_int;
use std::ptr::{null, null_mut};
use zeroize::Zeroize;

use crate::data::Data;

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
/// records in the metadata, not by a segment check.
pub(crate) const BOUND_BIT: u32 = 1 << 31;
/// A segment check in the protected part: the one-time key, then the tag.
pub(crate) const CHECK_BYTES: usize = 32 + TAG_BYTES;

/// One direction of a link: its key, and how many frames it has protected.
pub(crate) struct FrameKey {
    secret: [u8; 32],
    gcm: Gcm,
    frames: u64,
}

impl Drop for FrameKey {
    fn drop(&mut self) {
        self.secret.zeroize();
    }
}

/// The frame failed its tag: altered, replayed, reordered, or not from the peer.
#[derive(Debug)]
pub(crate) struct Unauthentic;

impl FrameKey {
    pub(crate) fn new(secret: [u8; 32]) -> Self {
        FrameKey {
            gcm: Gcm::new(&secret),
            secret,
            frames: 0,
        }
    }

    /// The nonce of the next frame (its number in this direction), rolling the key forward
    /// first when the current one has protected `FRAMES_PER_KEY` frames.
    fn next_nonce(&mut self) -> [u8; NONCE_LEN] {
        if self.frames > 0 && self.frames.is_multiple_of(FRAMES_PER_KEY) {
            let tag = hmac::sign(
                &hmac::Key::new(hmac::HMAC_SHA256, &self.secret),
                NEXT_KEY_LABEL,
            );
            self.secret.copy_from_slice(tag.as_ref());
            self.gcm = Gcm::new(&self.secret);
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce[4..].copy_from_slice(&self.frames.to_be_bytes());
        self.frames = self
            .frames
            .checked_add(1)
            .unwrap_or_else(|| unreachable!("2^64 frames on one link"));
        nonce
    }

    /// Starts sealing the next frame.
    pub(crate) fn sealing(&mut self) -> Framing<'_> {
        self.framing(true)
    }

    /// Starts opening the peer's next frame.
    pub(crate) fn opening(&mut self) -> Framing<'_> {
        self.framing(false)
    }

    fn framing(&mut self, seal: bool) -> Framing<'_> {
        let nonce = self.next_nonce();
        let ok = self.gcm.start(&nonce, seal);
        Framing {
            gcm: &mut self.gcm,
            ok,
        }
    }

    /// Encrypts `protected` in place; returns the tag.
    #[cfg(test)]
    pub(crate) fn seal(&mut self, protected: &mut [u8]) -> [u8; TAG_BYTES] {
        self.sealing().seal(protected)
    }

    /// Decrypts `protected` (the ciphertext followed by its tag) in place, checking that it
    /// is the peer's next frame; returns the plaintext's length.
    #[cfg(test)]
    pub(crate) fn open(&mut self, protected: &mut [u8]) -> Result<usize, Unauthentic> {
        self.opening().open(protected)
    }
}

/// The protected part of one frame being sealed or opened ([`Framing::seal`] or
/// [`Framing::open`], as the frame was started by [`FrameKey::sealing`] or
/// [`FrameKey::opening`]), under the frame's number as its nonce.
pub(crate) struct Framing<'a> {
    gcm: &'a mut Gcm,
    ok: bool,
}

impl Framing<'_> {
    /// Encrypts `protected` in place; returns the tag.
    pub(crate) fn seal(self, protected: &mut [u8]) -> [u8; TAG_BYTES] {
        let tag = self.ok.then(|| self.gcm.seal(protected)).flatten();
        tag.unwrap_or_else(|| unreachable!("frames are far below GCM's message limit"))
    }

    /// Decrypts `protected` (the ciphertext followed by its tag) in place and checks the tag;
    /// returns the plaintext's length.
    pub(crate) fn open(self, protected: &mut [u8]) -> Result<usize, Unauthentic> {
        let plain = protected.len().checked_sub(TAG_BYTES).ok_or(Unauthentic)?;
        let (text, tag) = protected.split_at_mut(plain);
        if self.ok && self.gcm.open(text, tag) {
            Ok(plain)
        } else {
            Err(Unauthentic)
        }
    }
}

/// The check of a data segment that travels open (chunks sealed at the edge), carried in the
/// protected part of every frame that carries the segment: GMAC (AES-256-GCM over no text,
/// the segment as the additional data, nonce zero) under a one-time key that the segment's
/// first sender draws. The key is used for that one segment only (a resend carries the same
/// bytes), and only the ends of the links it crosses, inside their encrypted frames, ever
/// see it: an altered, swapped or moved segment fails the check. An OSD that replicates a
/// client's segment sends it on with the check it arrived with, instead of hashing it again
/// under each replica link's key.
#[derive(Clone)]
pub struct SegmentCheck {
    key: [u8; 32],
    tag: [u8; TAG_BYTES],
}

impl Drop for SegmentCheck {
    fn drop(&mut self) {
        self.key.zeroize();
    }
}

impl std::fmt::Debug for SegmentCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SegmentCheck(..)")
    }
}

impl SegmentCheck {
    /// A check of `segment` (its pieces in order) under a new key (also what `coffer bench
    /// mac` measures).
    pub fn new(segment: &Data) -> SegmentCheck {
        let mut key = [0u8; 32];
        aws_lc_rs::rand::fill(&mut key)
            .unwrap_or_else(|_| unreachable!("the system random source does not fail"));
        let mut gcm = Gcm::new(&key);
        let hashed =
            gcm.start(&[0; NONCE_LEN], true) && segment.pieces().iter().all(|piece| gcm.aad(piece));
        let tag = hashed.then(|| gcm.seal(&mut [])).flatten();
        let tag = tag.unwrap_or_else(|| unreachable!("segments are far below GMAC's limit"));
        SegmentCheck { key, tag }
    }

    pub(crate) fn encode(&self) -> [u8; CHECK_BYTES] {
        let mut out = [0u8; CHECK_BYTES];
        out[..32].copy_from_slice(&self.key);
        out[32..].copy_from_slice(&self.tag);
        out
    }

    pub(crate) fn decode(bytes: &[u8; CHECK_BYTES]) -> SegmentCheck {
        let mut check = SegmentCheck {
            key: [0; 32],
            tag: [0; TAG_BYTES],
        };
        check.key.copy_from_slice(&bytes[..32]);
        check.tag.copy_from_slice(&bytes[32..]);
        check
    }

    /// Starts checking the segment as it arrives, piece by piece.
    pub(crate) fn checking(&self) -> Checking {
        let mut gcm = Gcm::new(&self.key);
        let ok = gcm.start(&[0; NONCE_LEN], false);
        Checking {
            gcm,
            ok,
            tag: self.tag,
        }
    }
}

/// A segment being checked against its [`SegmentCheck`].
pub(crate) struct Checking {
    gcm: Gcm,
    ok: bool,
    tag: [u8; TAG_BYTES],
}

impl Checking {
    /// The next piece of the segment.
    pub(crate) fn update(&mut self, piece: &[u8]) {
        self.ok = self.ok && self.gcm.aad(piece);
    }

    /// Whether every piece, in order, was the segment the check was made for.
    pub(crate) fn finish(mut self) -> Result<(), Unauthentic> {
        if self.ok && self.gcm.open(&mut [], &mut self.tag) {
            Ok(())
        } else {
            Err(Unauthentic)
        }
    }
}

/// AES-256-GCM through aws-lc's `EVP_CIPHER` interface, which, unlike the AEAD one
/// (aws-lc-rs), takes the additional data in pieces: a frame's open segment (up to 64 MiB)
/// is checked piece by piece as it comes off the socket, while each piece is in the CPU's
/// cache, instead of in one pass over bytes that have gone back to memory.
struct Gcm(*mut sys::EVP_CIPHER_CTX);

// SAFETY: the context is owned by one FrameKey and only used through `&mut self`.
unsafe impl Send for Gcm {}

impl Drop for Gcm {
    fn drop(&mut self) {
        // SAFETY: allocated by EVP_CIPHER_CTX_new and freed once; freeing cleanses the key.
        unsafe { sys::EVP_CIPHER_CTX_free(self.0) }
    }
}

impl Gcm {
    fn new(key: &[u8; 32]) -> Gcm {
        // SAFETY: plain FFI calls; every return code is checked.
        unsafe {
            let ctx = sys::EVP_CIPHER_CTX_new();
            assert!(!ctx.is_null(), "EVP_CIPHER_CTX_new: out of memory");
            let gcm = Gcm(ctx);
            let rc = sys::EVP_CipherInit_ex(
                ctx,
                sys::EVP_aes_256_gcm(),
                null_mut(),
                key.as_ptr(),
                null(),
                1,
            );
            assert_eq!(rc, 1, "EVP_CipherInit_ex refused a 32-byte AES-256-GCM key");
            gcm
        }
    }

    /// Starts a message under `nonce` (12 bytes, GCM's default), to seal or to open.
    fn start(&mut self, nonce: &[u8; NONCE_LEN], seal: bool) -> bool {
        // SAFETY: the context is keyed; a null cipher and key keep them, the IV is 12 bytes.
        unsafe {
            sys::EVP_CipherInit_ex(
                self.0,
                null(),
                null_mut(),
                null(),
                nonce.as_ptr(),
                c_int::from(seal),
            ) == 1
        }
    }

    /// More additional data; every piece must come before the text.
    fn aad(&mut self, piece: &[u8]) -> bool {
        piece.chunks(c_int::MAX as usize).all(|part| {
            let mut out_len: c_int = 0;
            // SAFETY: a null output makes this additional data; `part` is valid for its length.
            unsafe {
                sys::EVP_CipherUpdate(
                    self.0,
                    null_mut(),
                    &mut out_len,
                    part.as_ptr(),
                    part.len() as c_int,
                ) == 1
            }
        })
    }

    /// Encrypts or decrypts `text` in place (GCM has no final block, so nothing follows).
    fn crypt(&mut self, text: &mut [u8]) -> bool {
        let Ok(len) = c_int::try_from(text.len()) else {
            return false;
        };
        let mut out_len: c_int = 0;
        // SAFETY: GCM works in place: the same `len` valid bytes in and out.
        unsafe {
            sys::EVP_CipherUpdate(self.0, text.as_mut_ptr(), &mut out_len, text.as_ptr(), len) == 1
                && out_len == len
        }
    }

    /// Encrypts `text` in place; the tag.
    fn seal(&mut self, text: &mut [u8]) -> Option<[u8; TAG_BYTES]> {
        let mut tag = [0u8; TAG_BYTES];
        let mut out_len: c_int = 0;
        // SAFETY: the final call writes nothing for GCM; the tag buffer holds TAG_BYTES.
        let done = self.crypt(text)
            && unsafe {
                sys::EVP_CipherFinal_ex(self.0, text.as_mut_ptr(), &mut out_len) == 1
                    && sys::EVP_CIPHER_CTX_ctrl(
                        self.0,
                        sys::EVP_CTRL_GCM_GET_TAG,
                        TAG_BYTES as c_int,
                        tag.as_mut_ptr().cast(),
                    ) == 1
            };
        done.then_some(tag)
    }

    /// Decrypts `text` in place and checks `tag`.
    fn open(&mut self, text: &mut [u8], tag: &mut [u8]) -> bool {
        let mut out_len: c_int = 0;
        // SAFETY: the tag is TAG_BYTES long; the final call writes nothing for GCM.
        self.crypt(text)
            && unsafe {
                sys::EVP_CIPHER_CTX_ctrl(
                    self.0,
                    sys::EVP_CTRL_GCM_SET_TAG,
                    TAG_BYTES as c_int,
                    tag.as_mut_ptr().cast(),
                ) == 1
                    && sys::EVP_CipherFinal_ex(self.0, text.as_mut_ptr(), &mut out_len) == 1
            }
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
    fn frames_open_in_order_and_a_replayed_one_fails() {
        let (mut tx, mut rx) = pair();
        let mut frames = Vec::new();
        for _ in 0..3 {
            let mut protected = b"header and meta".to_vec();
            let tag = tx.seal(&mut protected);
            protected.extend_from_slice(&tag);
            frames.push(protected.clone());
            assert_eq!(rx.open(&mut protected).ok(), Some(15));
            assert_eq!(&protected[..15], b"header and meta");
        }
        // The receiver moved on: the genuine first frame is now out of place.
        assert!(rx.open(&mut frames[0]).is_err());
        // A frame shorter than its tag is refused, not a panic.
        assert!(rx.opening().open(&mut [0u8; 5]).is_err());
    }

    #[test]
    fn a_segment_checked_in_pieces_passes_as_when_checked_whole() {
        let segment: Vec<u8> = (0..100_003u32).map(|i| (i * 7 % 251) as u8).collect();
        let whole = Data::from(bytes::Bytes::from(segment.clone()));
        let check = SegmentCheck::decode(&SegmentCheck::new(&whole).encode());
        // Pieces of every alignment to GCM's 16-byte blocks, an empty one among them.
        let splits: [&[usize]; 4] = [&[], &[1, 15, 16, 17, 0, 4096], &[65_536], &[3; 40]];
        for split in splits {
            let mut checking = check.checking();
            let mut rest = &segment[..];
            for len in split {
                let (piece, after) = rest.split_at((*len).min(rest.len()));
                checking.update(piece);
                rest = after;
            }
            checking.update(rest);
            assert!(checking.finish().is_ok(), "{split:?}");
        }
        // One bit flipped, a byte missing, or another segment's check: refused.
        let mut tampered = segment.clone();
        tampered[99_000] ^= 1;
        let refused = |check: &SegmentCheck, bytes: &[u8]| {
            let mut checking = check.checking();
            bytes.chunks(4099).for_each(|piece| checking.update(piece));
            checking.finish().is_err()
        };
        assert!(refused(&check, &tampered));
        assert!(refused(&check, &segment[1..]));
        assert!(refused(&SegmentCheck::new(&whole), &tampered));
        // A check made over the segment in pieces (a reply from an OSD's cache) is the
        // segment's: it passes whole and refuses the tampered one.
        let pieces: Data = whole
            .joined()
            .chunks(4099)
            .map(bytes::Bytes::copy_from_slice)
            .collect();
        let made_in_pieces = SegmentCheck::new(&pieces);
        assert!(!refused(&made_in_pieces, &segment));
        assert!(refused(&made_in_pieces, &tampered));
        // Each check has a key of its own.
        assert_ne!(
            SegmentCheck::new(&whole).encode(),
            SegmentCheck::new(&whole).encode()
        );
    }

    #[test]
    fn frames_and_checks_are_standard_aes_256_gcm() {
        use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
        let reference = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[7; 32]).expect("key"));
        let (mut tx, _) = pair();
        for frame in 0..3u64 {
            let mut ours = b"header and meta".to_vec();
            let tag = tx.seal(&mut ours);
            let mut nonce = [0u8; NONCE_LEN];
            nonce[4..].copy_from_slice(&frame.to_be_bytes());
            let mut theirs = b"header and meta".to_vec();
            let expected = reference
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::empty(),
                    &mut theirs,
                )
                .expect("seal");
            assert_eq!((ours, &tag[..]), (theirs, expected.as_ref()));
        }
        // A segment check is GMAC: GCM with no text, the segment as the additional data.
        let segment: Vec<u8> = (0..70_001u32).map(|i| (i % 253) as u8).collect();
        let check = SegmentCheck::new(&Data::from(bytes::Bytes::from(segment.clone()))).encode();
        let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &check[..32]).expect("key"));
        let gmac = key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key([0; NONCE_LEN]),
                Aad::from(&segment[..]),
                &mut [],
            )
            .expect("gmac");
        assert_eq!(&check[32..], gmac.as_ref());
    }

    #[test]
    fn both_ends_roll_the_key_at_the_same_frame() {
        let (mut tx, mut rx) = pair();
        tx.frames = FRAMES_PER_KEY - 1;
        rx.frames = FRAMES_PER_KEY - 1;
        let before = tx.secret;
        for _ in 0..2 {
            let mut protected = b"x".to_vec();
            let tag = tx.seal(&mut protected);
            protected.extend_from_slice(&tag);
            assert!(rx.open(&mut protected).is_ok());
        }
        assert_ne!(tx.secret, before);
        assert_eq!(tx.secret, rx.secret);
    }
}
