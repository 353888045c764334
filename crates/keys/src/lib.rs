//! `keys`: Coffer's key hierarchy: secret keys that zeroise on drop and never print, and
//! wrapping of one key under another (a key-encryption key, KEK).
//!
//! Wrapping is AES-256-GCM from aws-lc-rs with a fresh random 96-bit nonce per wrap and
//! caller-supplied additional data, which binds the wrapped key to what it protects (a
//! store's id and mode, later a pool or an object). Wraps are rare (mkfs, rotation, key
//! release), so random nonces stay far below the 2^32 messages NIST allows per key.
//!
//! `gcm` is AES-256-GCM for data chunks, in whichever library is faster on this CPU.
//!
//! It must never depend on IO, tokio, or any other Coffer crate.

pub mod gcm;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::digest;
use std::fmt;
use zeroize::Zeroize;

const TAG_LEN: usize = 16;

/// A secret of `N` bytes. Zeroised on drop; `Debug` prints only its key id.
pub struct SecretKey<const N: usize>(Box<[u8; N]>);

impl<const N: usize> SecretKey<N> {
    pub fn from_bytes(bytes: [u8; N]) -> SecretKey<N> {
        let mut boxed = Box::new([0u8; N]);
        boxed.copy_from_slice(&bytes);
        let mut bytes = bytes;
        bytes.zeroize();
        SecretKey(boxed)
    }

    /// A fresh key from the operating system's CSPRNG (through aws-lc-rs).
    pub fn generate() -> SecretKey<N> {
        let mut key = SecretKey(Box::new([0u8; N]));
        aws_lc_rs::rand::fill(&mut key.0[..])
            .expect("the system random source never fails on Linux");
        key
    }

    pub fn expose(&self) -> &[u8; N] {
        &self.0
    }

    /// A public name for this key: the first 8 bytes of SHA-256("coffer-key-id" || key).
    /// Safe to log; it identifies a key without revealing it.
    pub fn id(&self) -> KeyId {
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(b"coffer-key-id");
        ctx.update(&self.0[..]);
        let d = ctx.finish();
        let mut id = [0u8; 8];
        id.copy_from_slice(&d.as_ref()[..8]);
        KeyId(u64::from_be_bytes(id))
    }
}

impl<const N: usize> Drop for SecretKey<N> {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl<const N: usize> fmt::Debug for SecretKey<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey({})", self.id())
    }
}

/// A key-encryption key: wraps other keys, never data.
pub type KeyEncryptionKey = SecretKey<32>;

/// A key's public identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyId(pub u64);

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A key sealed under a KEK: nonce (12 bytes) || ciphertext || tag (16 bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct WrappedKey(Vec<u8>);

impl WrappedKey {
    pub fn from_bytes(bytes: Vec<u8>) -> WrappedKey {
        WrappedKey(bytes)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for WrappedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WrappedKey({} bytes)", self.0.len())
    }
}

/// Unwrapping failed: the KEK is not the one that wrapped this key, the additional data
/// differs, or the wrapped bytes were altered. The three are indistinguishable by design.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnwrapError;

impl fmt::Display for UnwrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the key-encryption key does not open this wrapped key (wrong key, or the wrapped key or its context was altered)")
    }
}

impl std::error::Error for UnwrapError {}

fn aead_key(kek: &KeyEncryptionKey) -> LessSafeKey {
    let unbound = UnboundKey::new(&AES_256_GCM, kek.expose())
        .expect("a 32-byte key is valid for AES-256-GCM");
    LessSafeKey::new(unbound)
}

/// Seals `secret` under `kek`, bound to `context` (authenticated, not encrypted).
pub fn wrap<const N: usize>(
    kek: &KeyEncryptionKey,
    secret: &SecretKey<N>,
    context: &[u8],
) -> WrappedKey {
    let mut nonce = [0u8; NONCE_LEN];
    aws_lc_rs::rand::fill(&mut nonce).expect("the system random source never fails on Linux");
    let mut out = Vec::with_capacity(NONCE_LEN + N + TAG_LEN);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(secret.expose());
    let tag = aead_key(kek)
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(context),
            &mut out[NONCE_LEN..],
        )
        .expect("sealing a short buffer cannot fail");
    out.extend_from_slice(tag.as_ref());
    WrappedKey(out)
}

/// Opens a key sealed by `wrap` with the same KEK and context.
pub fn unwrap<const N: usize>(
    kek: &KeyEncryptionKey,
    wrapped: &WrappedKey,
    context: &[u8],
) -> Result<SecretKey<N>, UnwrapError> {
    let bytes = wrapped.as_bytes();
    if bytes.len() != NONCE_LEN + N + TAG_LEN {
        return Err(UnwrapError);
    }
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&bytes[..NONCE_LEN]);
    let mut key = SecretKey(Box::new([0u8; N]));
    key.0.copy_from_slice(&bytes[NONCE_LEN..NONCE_LEN + N]);
    aead_key(kek)
        .open_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(context),
            &bytes[NONCE_LEN + N..],
            &mut key.0[..],
        )
        .map_err(|_| UnwrapError)?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_round_trips_under_the_same_kek_and_context() {
        let kek = KeyEncryptionKey::generate();
        let secret = SecretKey::<96>::generate();
        let wrapped = wrap(&kek, &secret, b"store 1");
        let opened: SecretKey<96> = unwrap(&kek, &wrapped, b"store 1").expect("same kek");
        assert_eq!(opened.expose(), secret.expose());
    }

    #[test]
    fn unwrap_refuses_wrong_kek_wrong_context_and_altered_bytes() {
        let kek = KeyEncryptionKey::generate();
        let secret = SecretKey::<32>::generate();
        let wrapped = wrap(&kek, &secret, b"ctx");
        assert!(unwrap::<32>(&KeyEncryptionKey::generate(), &wrapped, b"ctx").is_err());
        assert!(unwrap::<32>(&kek, &wrapped, b"other").is_err());
        for i in 0..wrapped.as_bytes().len() {
            let mut bytes = wrapped.as_bytes().to_vec();
            bytes[i] ^= 1;
            assert!(
                unwrap::<32>(&kek, &WrappedKey::from_bytes(bytes), b"ctx").is_err(),
                "flip at {i}"
            );
        }
        assert!(
            unwrap::<64>(&kek, &wrapped, b"ctx").is_err(),
            "length mismatch"
        );
    }

    #[test]
    fn debug_never_prints_key_bytes() {
        let secret = SecretKey::<32>::from_bytes([0xab; 32]);
        let printed = format!("{secret:?}");
        assert!(
            !printed.contains("ab, ab") && !printed.contains("abab"),
            "{printed}"
        );
        assert!(printed.contains(&secret.id().to_string()));
    }
}
