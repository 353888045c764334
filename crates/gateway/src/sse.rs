//! Server-side encryption: content sealed in independently authenticated chunks under a
//! data key of its own, the data key wrapped by a KMS key (SSE-S3, SSE-KMS) or by the
//! customer's key (SSE-C), and a cache of unwrapped data keys so that a GET does not wait on
//! the KMS.
//!
//! A chunk is content sealed with AES-256-GCM: the nonce is the chunk's index (a data key
//! seals one segment, once), and the additional data binds the chunk to its segment's
//! instance, its index and whether it is the last, so chunks cannot be swapped, moved to
//! another segment, or dropped from the end unnoticed. A ranged GET opens only the chunks
//! the range touches.
//!
//! Two layouts (`Segment::sealed_in_records`): in a pool the OSDs seal, 64 KiB chunks with
//! their tags inline in the stripes; in a pool sealed at the edge, 4 KiB chunks written as
//! the pool's chunks (`WriteChunks`) with the tags in their records, so that this seal is
//! the only one (the gateway is the edge, and the pool's key adds no second pass).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lc_rs::digest;
use keys::gcm::ChunkCipher;
use keys::SecretKey;

use crate::Error;

/// Bytes of content per sealed chunk (tags inline).
pub const CHUNK_BYTES: u64 = 64 << 10;
/// Bytes of content per chunk sealed in records: the pool's chunk.
pub const RECORD_CHUNK_BYTES: u64 = client::CHUNK_BYTES;
/// The key id of chunk records sealed under a segment's own data key (no pool key has it,
/// so the client library refuses to open such a chunk as the pool's).
pub const SEGMENT_KEY_ID: u64 = client::OWN_KEY_ID;
pub const TAG_BYTES: u64 = 16;
pub const SEALED_CHUNK_BYTES: u64 = CHUNK_BYTES + TAG_BYTES;
/// Sealed chunks per stripe: a stripe of a sealed segment holds whole chunks.
pub const CHUNKS_PER_STRIPE: u64 = 64;
pub const SEALED_STRIPE_BYTES: u64 = SEALED_CHUNK_BYTES * CHUNKS_PER_STRIPE;
/// The KMS key that SSE-S3 (and SSE-KMS without a key id) uses; the gateway creates it.
pub const MANAGED_KEY: &str = "coffer/s3";

/// Bytes stored for `size` bytes of content.
pub fn sealed_len(size: u64) -> u64 {
    let rest = size % CHUNK_BYTES;
    (size / CHUNK_BYTES) * SEALED_CHUNK_BYTES + if rest > 0 { rest + TAG_BYTES } else { 0 }
}

/// Bytes of content in chunk `index` of a segment of `size` bytes.
pub fn chunk_len(size: u64, index: u64) -> u64 {
    (size - index * CHUNK_BYTES).min(CHUNK_BYTES)
}

/// The key that seals and opens the chunks of one segment.
pub struct ChunkKey {
    key: ChunkCipher,
    instance: String,
}

impl ChunkKey {
    pub fn new(data_key: &SecretKey<32>, instance: &str) -> ChunkKey {
        ChunkKey {
            key: ChunkCipher::new(data_key.expose()),
            instance: instance.into(),
        }
    }

    pub fn nonce_bytes(index: u64) -> [u8; 12] {
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&index.to_be_bytes());
        nonce
    }

    fn aad(&self, index: u64, last: bool) -> Vec<u8> {
        let mut aad = b"coffer-sse\0".to_vec();
        aad.extend_from_slice(self.instance.as_bytes());
        aad.push(0);
        aad.extend_from_slice(&index.to_be_bytes());
        aad.push(u8::from(last));
        aad
    }

    /// Seals chunk `index` in place; returns its tag.
    pub fn seal(&self, index: u64, last: bool, chunk: &mut [u8]) -> [u8; 16] {
        metrics::crypto::sealed(metrics::crypto::Kind::Sse, chunk.len());
        self.key
            .seal(Self::nonce_bytes(index), &self.aad(index, last), chunk)
    }

    /// Opens sealed chunk `index` (content then tag) in place; returns the content's length.
    pub fn open(&self, index: u64, last: bool, sealed: &mut [u8]) -> Result<usize, Error> {
        let len = sealed
            .len()
            .checked_sub(TAG_BYTES as usize)
            .ok_or_else(|| self.failed(index))?;
        let (chunk, tag) = sealed.split_at_mut(len);
        let tag: &[u8; 16] = (&*tag)
            .try_into()
            .unwrap_or_else(|_| unreachable!("split at 16 bytes from the end"));
        self.open_detached(index, last, tag, chunk)?;
        Ok(len)
    }

    fn failed(&self, index: u64) -> Error {
        Error::Corrupt(format!(
            "chunk {index} of {} fails authentication",
            self.instance
        ))
    }

    /// Opens chunk `index` in place, its tag apart (a chunk record's).
    pub fn open_detached(
        &self,
        index: u64,
        last: bool,
        tag: &[u8; 16],
        chunk: &mut [u8],
    ) -> Result<(), Error> {
        self.key
            .open(Self::nonce_bytes(index), &self.aad(index, last), tag, chunk)
            .map_err(|_| self.failed(index))?;
        metrics::crypto::opened(metrics::crypto::Kind::Sse, chunk.len());
        Ok(())
    }
}

/// The context a customer key wraps a segment's data key under.
pub fn customer_context(instance: &str) -> Vec<u8> {
    format!("coffer-sse-c:{instance}").into_bytes()
}

/// The check value of a customer key: SHA-256 of a domain, `salt` and the key.
pub fn customer_check(salt: &[u8; 16], key: &SecretKey<32>) -> [u8; 32] {
    let mut ctx = digest::Context::new(&digest::SHA256);
    ctx.update(b"coffer-sse-c-check\0");
    ctx.update(salt);
    ctx.update(key.expose());
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// How many unwrapped data keys the cache holds, and for how long.
const CACHE_ENTRIES_MAX: usize = 10_000;
const CACHE_LIFETIME: Duration = Duration::from_secs(300);
const CACHE_EVICTED_AT_ONCE: usize = CACHE_ENTRIES_MAX / 10;

/// Unwrapped data keys by their wrapped form, bounded in count and lifetime; held in memory
/// only (never logged, never written), zeroised when dropped.
#[derive(Clone, Default)]
pub struct KeyCache {
    entries: Arc<Mutex<HashMap<Vec<u8>, Cached>>>,
}

struct Cached {
    key: Arc<SecretKey<32>>,
    kms_key: String,
    at: Instant,
}

impl KeyCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Cached>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, wrapped: &[u8]) -> Option<Arc<SecretKey<32>>> {
        let mut entries = self.lock();
        let found = match entries.get(wrapped) {
            Some(cached) if cached.at.elapsed() < CACHE_LIFETIME => Some(cached.key.clone()),
            Some(_) => {
                entries.remove(wrapped);
                None
            }
            None => None,
        };
        crate::metrics::key_cache(found.is_some());
        found
    }

    pub fn put(&self, wrapped: &[u8], kms_key: &str, key: Arc<SecretKey<32>>) {
        let mut entries = self.lock();
        if entries.len() >= CACHE_ENTRIES_MAX {
            entries.retain(|_, cached| cached.at.elapsed() < CACHE_LIFETIME);
        }
        if entries.len() >= CACHE_ENTRIES_MAX {
            // The oldest tenth at once: a cache kept full (a GET of thousands of parts)
            // scans its entries once in so many keys, not for each.
            let mut ages: Vec<Instant> = entries.values().map(|cached| cached.at).collect();
            let (_, cut, _) = ages.select_nth_unstable(CACHE_EVICTED_AT_ONCE - 1);
            let cut = *cut;
            entries.retain(|_, cached| cached.at > cut);
        }
        let cached = Cached {
            key,
            kms_key: kms_key.into(),
            at: Instant::now(),
        };
        entries.insert(wrapped.to_vec(), cached);
    }

    /// Drops the data keys of KMS keys not in `existing` (removed keys: their objects must
    /// become unreadable).
    pub fn keep_only(&self, existing: &[String]) {
        self.lock()
            .retain(|_, cached| existing.contains(&cached.kms_key));
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed_chunks(key: &ChunkKey, content: &[u8]) -> Vec<Vec<u8>> {
        let count = content.len().div_ceil(CHUNK_BYTES as usize);
        content
            .chunks(CHUNK_BYTES as usize)
            .enumerate()
            .map(|(i, chunk)| {
                let mut sealed = chunk.to_vec();
                let tag = key.seal(i as u64, i + 1 == count, &mut sealed);
                sealed.extend_from_slice(&tag);
                sealed
            })
            .collect()
    }

    #[test]
    fn chunks_open_in_place_and_only_where_they_were_sealed() {
        let data_key = SecretKey::<32>::generate();
        let key = ChunkKey::new(&data_key, "instance-a");
        let content: Vec<u8> = (0..CHUNK_BYTES * 2 + 5).map(|i| i as u8).collect();
        let chunks = sealed_chunks(&key, &content);
        assert_eq!(chunks.len(), 3);
        let stored: usize = chunks.iter().map(Vec::len).sum();
        assert_eq!(stored as u64, sealed_len(content.len() as u64));

        let mut first = chunks[0].clone();
        let len = key.open(0, false, &mut first).expect("opens");
        assert_eq!(&first[..len], &content[..CHUNK_BYTES as usize]);

        // Swapped with another chunk, taken as the last, moved to another segment, or
        // altered: each fails.
        assert!(key.open(1, false, &mut chunks[0].clone()).is_err());
        assert!(key.open(0, true, &mut chunks[0].clone()).is_err());
        let other = ChunkKey::new(&data_key, "instance-b");
        assert!(other.open(0, false, &mut chunks[0].clone()).is_err());
        let mut altered = chunks[2].clone();
        altered[0] ^= 1;
        assert!(key.open(2, true, &mut altered).is_err());
        // A segment cut after a full chunk: that chunk was not sealed as the last.
        assert!(key.open(1, true, &mut chunks[1].clone()).is_err());
    }

    #[test]
    fn sizes_of_sealed_content() {
        assert_eq!(sealed_len(0), 0);
        assert_eq!(sealed_len(1), 17);
        assert_eq!(sealed_len(CHUNK_BYTES), SEALED_CHUNK_BYTES);
        assert_eq!(sealed_len(CHUNK_BYTES + 1), SEALED_CHUNK_BYTES + 17);
        assert_eq!(chunk_len(CHUNK_BYTES + 1, 1), 1);
        assert_eq!(chunk_len(CHUNK_BYTES * 3, 2), CHUNK_BYTES);
    }

    #[test]
    fn a_full_cache_drops_its_oldest_tenth_at_once() {
        let cache = KeyCache::default();
        let wrapped = |n: usize| format!("w{n}").into_bytes();
        for n in 0..CACHE_ENTRIES_MAX {
            cache.put(&wrapped(n), "a", Arc::new(SecretKey::generate()));
        }
        assert_eq!(cache.len(), CACHE_ENTRIES_MAX);
        cache.put(
            &wrapped(CACHE_ENTRIES_MAX),
            "a",
            Arc::new(SecretKey::generate()),
        );
        let left = cache.len();
        assert!(
            left <= CACHE_ENTRIES_MAX - CACHE_EVICTED_AT_ONCE + 1,
            "{left} left"
        );
        assert!(cache.get(&wrapped(0)).is_none(), "the oldest went");
        assert!(
            cache.get(&wrapped(CACHE_ENTRIES_MAX)).is_some(),
            "the newest stays"
        );
        assert!(cache.get(&wrapped(CACHE_ENTRIES_MAX - 1)).is_some());
        // The room made takes the next keys without another scan.
        for n in 1..CACHE_EVICTED_AT_ONCE {
            cache.put(
                &wrapped(CACHE_ENTRIES_MAX + n),
                "a",
                Arc::new(SecretKey::generate()),
            );
        }
        assert_eq!(cache.len(), left + CACHE_EVICTED_AT_ONCE - 1);
    }

    #[test]
    fn the_cache_forgets_keys_of_removed_kms_keys() {
        let cache = KeyCache::default();
        cache.put(b"w1", "a", Arc::new(SecretKey::generate()));
        cache.put(b"w2", "b", Arc::new(SecretKey::generate()));
        assert!(cache.get(b"w1").is_some());
        cache.keep_only(&["b".to_string()]);
        assert!(cache.get(b"w1").is_none());
        assert!(cache.get(b"w2").is_some());
        assert_eq!(cache.len(), 1);
    }
}
