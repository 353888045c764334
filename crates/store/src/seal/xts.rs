//! `xts-512` and `xts-4096`: AES-256-XTS with 512- or 4096-byte sectors, the LUKS/dm-crypt
//! equivalents, through AWS-LC's `EVP_aes_256_xts` (aws-lc-rs has no safe XTS API).
//!
//! The tweak is the physical sector number (little-endian, as dm-crypt's `plain64`), counted
//! in units of the sector size. Each cipher context is keyed once; per sector only the IV is
//! set (AWS-LC keeps the key schedule when `EVP_CipherInit_ex` gets a null key), which is the
//! same per-sector fixed cost dm-crypt pays. Contexts are not thread-safe, so each IO thread
//! takes one from a small pool and returns it after the run.

use crate::device::BLOCK_SIZE_BYTES;
use aws_lc_sys as sys;
use std::sync::Mutex;
use zeroize::Zeroizing;

struct Ctx(*mut sys::EVP_CIPHER_CTX);

// SAFETY: a context is used by one thread at a time (taken from and returned to the pool).
unsafe impl Send for Ctx {}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: allocated by EVP_CIPHER_CTX_new and freed once.
        unsafe { sys::EVP_CIPHER_CTX_free(self.0) }
    }
}

pub(crate) struct Xts {
    key: Zeroizing<[u8; 64]>,
    sector_bytes: usize,
    encrypters: Mutex<Vec<Ctx>>,
    decrypters: Mutex<Vec<Ctx>>,
}

#[derive(Debug)]
pub(crate) struct XtsKeyRejected;

impl Xts {
    /// Fails when AWS-LC rejects the key (its two halves are equal).
    pub(crate) fn new(key: &[u8; 64], sector_bytes: usize) -> Result<Xts, XtsKeyRejected> {
        assert!(
            sector_bytes == 512 || sector_bytes == 4096,
            "XTS sector size {sector_bytes}"
        );
        let xts = Xts {
            key: Zeroizing::new(*key),
            sector_bytes,
            encrypters: Mutex::new(Vec::new()),
            decrypters: Mutex::new(Vec::new()),
        };
        let ctx = xts.new_ctx(true)?;
        xts.encrypters
            .lock()
            .expect("xts pool lock poisoned")
            .push(ctx);
        Ok(xts)
    }

    fn new_ctx(&self, encrypt: bool) -> Result<Ctx, XtsKeyRejected> {
        // SAFETY: plain FFI calls; every return code is checked.
        unsafe {
            let ctx = sys::EVP_CIPHER_CTX_new();
            assert!(!ctx.is_null(), "EVP_CIPHER_CTX_new: out of memory");
            let ctx = Ctx(ctx);
            let rc = sys::EVP_CipherInit_ex(
                ctx.0,
                sys::EVP_aes_256_xts(),
                std::ptr::null_mut(),
                self.key.as_ptr(),
                std::ptr::null(),
                encrypt as i32,
            );
            if rc != 1 {
                return Err(XtsKeyRejected);
            }
            Ok(ctx)
        }
    }

    /// Encrypts (or decrypts) `buffer` in place; `buffer` starts at device byte `offset_bytes`.
    pub(crate) fn apply(&self, buffer: &mut [u8], offset_bytes: u64, encrypt: bool) {
        assert!(
            offset_bytes.is_multiple_of(BLOCK_SIZE_BYTES)
                && buffer.len().is_multiple_of(BLOCK_SIZE_BYTES as usize)
        );
        let pool = if encrypt {
            &self.encrypters
        } else {
            &self.decrypters
        };
        let popped = pool.lock().expect("xts pool lock poisoned").pop();
        let ctx = match popped {
            Some(ctx) => ctx,
            None => self
                .new_ctx(encrypt)
                .expect("the key was accepted when the store opened"),
        };
        let first_sector = offset_bytes / self.sector_bytes as u64;
        for (i, sector) in buffer.chunks_exact_mut(self.sector_bytes).enumerate() {
            let mut iv = [0u8; 16];
            iv[..8].copy_from_slice(&(first_sector + i as u64).to_le_bytes());
            let mut out_len: i32 = 0;
            // SAFETY: ctx is keyed; in and out are the same valid sector (XTS allows in place).
            unsafe {
                let rc = sys::EVP_CipherInit_ex(
                    ctx.0,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    std::ptr::null(),
                    iv.as_ptr(),
                    -1,
                );
                assert_eq!(rc, 1, "EVP_CipherInit_ex(iv) failed");
                let rc = sys::EVP_CipherUpdate(
                    ctx.0,
                    sector.as_mut_ptr(),
                    &mut out_len,
                    sector.as_ptr(),
                    sector.len() as i32,
                );
                assert!(
                    rc == 1 && out_len as usize == sector.len(),
                    "EVP_CipherUpdate failed on an XTS sector"
                );
            }
        }
        pool.lock().expect("xts pool lock poisoned").push(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes::cipher::KeyInit;

    /// RustCrypto's xts-mode (slow, independent) is the oracle for AWS-LC's XTS.
    fn oracle(key: &[u8; 64], sector_bytes: usize, first_sector: u128, data: &mut [u8]) {
        let xts = xts_mode::Xts128::new(
            aes::Aes256::new_from_slice(&key[..32]).expect("key"),
            aes::Aes256::new_from_slice(&key[32..]).expect("key"),
        );
        xts.encrypt_area(
            data,
            sector_bytes,
            first_sector,
            xts_mode::get_tweak_default,
        );
    }

    #[test]
    fn matches_an_independent_xts_and_round_trips() {
        let mut key = [0u8; 64];
        key.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        for sector_bytes in [512usize, 4096] {
            let xts = Xts::new(&key, sector_bytes).expect("distinct halves");
            let plain: Vec<u8> = (0..3 * 4096).map(|i| (i * 7 % 251) as u8).collect();
            let offset_bytes = 5 * 4096;
            let mut ours = plain.clone();
            xts.apply(&mut ours, offset_bytes, true);
            let mut theirs = plain.clone();
            oracle(
                &key,
                sector_bytes,
                (offset_bytes / sector_bytes as u64) as u128,
                &mut theirs,
            );
            assert!(ours == theirs, "xts-{sector_bytes} differs from the oracle");
            xts.apply(&mut ours, offset_bytes, false);
            assert!(ours == plain, "xts-{sector_bytes} does not round-trip");
        }
    }

    #[test]
    fn a_key_with_equal_halves_is_rejected() {
        assert!(Xts::new(&[9u8; 64], 4096).is_err());
    }
}
