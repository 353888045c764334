//! Sealing at the edge (docs/design/edge-sealing.md): in a pool with `seal = edge` this
//! library seals every 4 KiB chunk with AES-256-GCM under a key derived from the pool's data
//! key before it leaves the process, and opens what it reads. OSDs store the chunks and
//! their records as they come and never hold the key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_lc_rs::hmac;
use keys::gcm::ChunkCipher;
use map::PoolId;
use messenger::message::{ChunkSeal, CHUNK_BYTES};
use zeroize::Zeroizing;

use crate::Error;

/// Bytes of the writer id W: 6 in the key id, 8 in the nonce.
const WRITER_BYTES: usize = 14;
/// Chunks one writer id seals before the client draws another (the nonce's counter).
const CHUNKS_PER_WRITER: u64 = 1 << 32;
const KEY_LABEL: &[u8] = b"coffer-edge-chunk-key-v1";
const AAD_LABEL: &[u8] = b"coffer-edge-v1";

/// The writer id and counter this process seals under; drawn again in a forked child
/// (another process id) and after [`CHUNKS_PER_WRITER`] chunks.
struct Writer {
    id: [u8; WRITER_BYTES],
    next: u64,
    pid: u32,
}

impl Writer {
    fn draw() -> Writer {
        Writer {
            id: rand::random(),
            next: 0,
            pid: std::process::id(),
        }
    }
}

/// Idle bytes of sealing buffers kept for reuse, per pool handle (librbd's default cache).
const IDLE_BUFFER_BYTES_MAX: usize = 32 << 20;

/// The buffers writes seal their chunks in, kept once sent: a large write then neither zeroes
/// a fresh buffer nor faults its pages in again.
#[derive(Default)]
pub(crate) struct SealBuffers {
    idle: Mutex<Vec<Vec<u8>>>,
}

impl SealBuffers {
    /// An empty buffer, reused if one is idle.
    pub(crate) fn take(&self) -> Vec<u8> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.pop().unwrap_or_default()
    }

    /// `buffer` as the bytes of a request; it comes back here once every copy is dropped.
    pub(crate) fn send(self: &Arc<Self>, buffer: Vec<u8>) -> bytes::Bytes {
        bytes::Bytes::from_owner(Recycled {
            buffer,
            home: self.clone(),
        })
    }
}

struct Recycled {
    buffer: Vec<u8>,
    home: Arc<SealBuffers>,
}

impl AsRef<[u8]> for Recycled {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.clear();
        let mut idle = self.home.idle.lock().unwrap_or_else(|p| p.into_inner());
        let held: usize = idle.iter().map(Vec::capacity).sum();
        if held + buffer.capacity() <= IDLE_BUFFER_BYTES_MAX {
            idle.push(buffer);
        }
    }
}

/// What names a chunk key: (data key version, writer id).
type ChunkKeyId = (u16, [u8; WRITER_BYTES]);
/// Chunk keys already derived.
type Derived = HashMap<ChunkKeyId, Arc<ChunkCipher>>;

/// One pool's data keys and this process's writer state.
pub(crate) struct EdgeKeys {
    pool: PoolId,
    /// Data keys by version; `current` seals new chunks.
    keys: HashMap<u16, Zeroizing<[u8; 32]>>,
    pub(crate) current: u16,
    writer: Mutex<Writer>,
    derived: Mutex<Derived>,
    pub(crate) buffers: Arc<SealBuffers>,
}

impl EdgeKeys {
    pub(crate) fn new(pool: PoolId, keys: Vec<(u16, Vec<u8>)>) -> Result<EdgeKeys, Error> {
        let mut found = HashMap::new();
        for (version, mut bytes) in keys {
            let key: Result<[u8; 32], _> = bytes.as_slice().try_into();
            zeroize::Zeroize::zeroize(&mut bytes);
            let key = key.map_err(|_| Error::Failed("a pool data key is 32 bytes".into()))?;
            found.insert(version, Zeroizing::new(key));
        }
        let current = found
            .keys()
            .copied()
            .max()
            .ok_or_else(|| Error::Failed(format!("pool {pool} has no data key")))?;
        Ok(EdgeKeys {
            pool,
            keys: found,
            current,
            writer: Mutex::new(Writer::draw()),
            derived: Mutex::new(HashMap::new()),
            buffers: Arc::default(),
        })
    }

    /// K_W = HMAC-SHA256(data key, label · pool · W), once per (version, W).
    fn chunk_key(
        &self,
        version: u16,
        writer: &[u8; WRITER_BYTES],
    ) -> Result<Arc<ChunkCipher>, Error> {
        let mut derived = self.derived.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(key) = derived.get(&(version, *writer)) {
            return Ok(key.clone());
        }
        let data_key = self.keys.get(&version).ok_or_else(|| {
            Error::Failed(format!(
                "pool {}: chunk sealed under data key {version}, which this client does not hold",
                self.pool
            ))
        })?;
        let mut input = Vec::with_capacity(KEY_LABEL.len() + 8 + WRITER_BYTES);
        input.extend_from_slice(KEY_LABEL);
        input.extend_from_slice(&self.pool.0.to_be_bytes());
        input.extend_from_slice(writer);
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &data_key[..]), &input);
        let bytes: &[u8; 32] = tag
            .as_ref()
            .try_into()
            .unwrap_or_else(|_| unreachable!("HMAC-SHA256 gives 32 bytes"));
        let key = Arc::new(ChunkCipher::new(bytes));
        if derived.len() >= 1024 {
            derived.clear();
        }
        derived.insert((version, *writer), key.clone());
        Ok(key)
    }

    /// Takes `count` nonce counters under one writer id.
    fn reserve(&self, count: u64) -> ([u8; WRITER_BYTES], u64) {
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if writer.pid != std::process::id() || writer.next + count > CHUNKS_PER_WRITER {
            *writer = Writer::draw();
        }
        let start = writer.next;
        writer.next += count;
        (writer.id, start)
    }

    /// Seals `data` (whole chunks, from chunk index `first` of `object`) in place.
    pub(crate) fn seal(&self, object: &str, first: u64, data: &mut [u8]) -> Vec<ChunkSeal> {
        let chunk = CHUNK_BYTES as usize;
        let mut sealing = self.sealing(object, first, (data.len() / chunk) as u64);
        data.chunks_mut(chunk)
            .map(|bytes| sealing.next(bytes))
            .collect()
    }

    /// Appends `plain` (from chunk index `first` of `object`; a short last chunk is padded
    /// with zeros) to `out` sealed, one chunk at a time: each is sealed while its copy is
    /// still in the CPU's cache, instead of copying all of a large write and then reading it
    /// back to seal it.
    pub(crate) fn seal_copy(
        &self,
        object: &str,
        first: u64,
        plain: &[u8],
        out: &mut Vec<u8>,
    ) -> Vec<ChunkSeal> {
        let chunk = CHUNK_BYTES as usize;
        let count = plain.len().div_ceil(chunk);
        out.reserve(count * chunk);
        let mut sealing = self.sealing(object, first, count as u64);
        plain
            .chunks(chunk)
            .map(|bytes| {
                let at = out.len();
                out.extend_from_slice(bytes);
                out.resize(at + chunk, 0);
                sealing.next(&mut out[at..])
            })
            .collect()
    }

    /// Reserves nonces for `count` chunks from chunk index `first` of `object`.
    fn sealing(&self, object: &str, first: u64, count: u64) -> Sealing {
        let (writer, start) = self.reserve(count);
        let version = self.current;
        let key = self
            .chunk_key(version, &writer)
            .unwrap_or_else(|_| unreachable!("the current key is held"));
        let mut key_id = [0u8; 8];
        key_id[..2].copy_from_slice(&version.to_be_bytes());
        key_id[2..].copy_from_slice(&writer[..6]);
        let mut nonce = [0u8; 12];
        nonce[..8].copy_from_slice(&writer[6..]);
        Sealing {
            key,
            key_id: u64::from_be_bytes(key_id),
            nonce,
            counter: start,
            index: first,
            aad: aad_prefix(self.pool, object),
        }
    }

    /// Opens the chunks of `data` (from chunk index `first` of `object`) in place; a chunk
    /// without a record is a hole and zeros. A chunk that fails is named. `data` must be
    /// exactly one whole chunk per record: on a secure link nothing but these records binds
    /// it (`Segment::Bound`), so no byte may go unopened.
    pub(crate) fn open(
        &self,
        object: &str,
        first: u64,
        data: &mut [u8],
        seals: &[Option<ChunkSeal>],
    ) -> Result<(), Error> {
        if data.len() as u64 != seals.len() as u64 * CHUNK_BYTES {
            return Err(Error::Failed(format!(
                "integrity: {} bytes of chunks from {first} of {object} came with {} chunk \
                 records; each record covers {CHUNK_BYTES} bytes",
                data.len(),
                seals.len()
            )));
        }
        let mut aad = aad_prefix(self.pool, object);
        let mut last_key: Option<(ChunkKeyId, Arc<ChunkCipher>)> = None;
        for (i, (bytes, seal)) in data.chunks_mut(CHUNK_BYTES as usize).zip(seals).enumerate() {
            let Some(seal) = seal else {
                bytes.fill(0);
                continue;
            };
            let index = first + i as u64;
            let id = seal.key_id.to_be_bytes();
            let version = u16::from_be_bytes([id[0], id[1]]);
            let mut writer = [0u8; WRITER_BYTES];
            writer[..6].copy_from_slice(&id[2..]);
            writer[6..].copy_from_slice(&seal.nonce[..8]);
            // Chunks written together share a key: look it up once per run of them.
            let key = match &last_key {
                Some((at, key)) if *at == (version, writer) => key.clone(),
                _ => {
                    let key = self.chunk_key(version, &writer)?;
                    last_key = Some(((version, writer), key.clone()));
                    key
                }
            };
            set_index(&mut aad, index);
            key.open(seal.nonce, &aad, &seal.tag, bytes).map_err(|_| {
                Error::Integrity(format!(
                    "chunk {index} of {object} (bytes {} to {}) in pool {} fails its \
                     tag: altered, moved or not sealed by this pool's keys",
                    index * CHUNK_BYTES,
                    (index + 1) * CHUNK_BYTES,
                    self.pool
                ))
            })?;
            metrics::crypto::opened(metrics::crypto::Kind::Edge, bytes.len());
        }
        Ok(())
    }

    pub(crate) fn holds(&self, version: u16) -> bool {
        self.keys.contains_key(&version)
    }
}

/// The chunks of one write being sealed, in order, under one writer id.
struct Sealing {
    key: Arc<ChunkCipher>,
    key_id: u64,
    /// The writer id's last 8 bytes, then the counter.
    nonce: [u8; 12],
    counter: u64,
    index: u64,
    aad: Vec<u8>,
}

impl Sealing {
    /// Seals the next chunk in place.
    fn next(&mut self, bytes: &mut [u8]) -> ChunkSeal {
        let mut nonce = self.nonce;
        nonce[8..].copy_from_slice(&(self.counter as u32).to_be_bytes());
        set_index(&mut self.aad, self.index);
        let tag = self.key.seal(nonce, &self.aad, bytes);
        metrics::crypto::sealed(metrics::crypto::Kind::Edge, bytes.len());
        self.counter += 1;
        self.index += 1;
        ChunkSeal {
            key_id: self.key_id,
            nonce,
            tag,
        }
    }
}

/// label · pool (u64 BE) · chunk index (u64 BE, set per chunk) · name length (u16 BE) · name
fn aad_prefix(pool: PoolId, object: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(AAD_LABEL.len() + 18 + object.len());
    aad.extend_from_slice(AAD_LABEL);
    aad.extend_from_slice(&pool.0.to_be_bytes());
    aad.extend_from_slice(&[0u8; 8]);
    aad.extend_from_slice(&(object.len() as u16).to_be_bytes());
    aad.extend_from_slice(object.as_bytes());
    aad
}

fn set_index(aad: &mut [u8], index: u64) {
    let at = AAD_LABEL.len() + 8;
    aad[at..at + 8].copy_from_slice(&index.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> EdgeKeys {
        EdgeKeys::new(PoolId(3), vec![(1, vec![9u8; 32])]).expect("keys")
    }

    #[test]
    fn chunks_open_where_they_were_sealed_and_nowhere_else() {
        let edge = keys();
        let plain: Vec<u8> = (0..3 * 4096).map(|i| (i % 251) as u8).collect();
        let mut data = plain.clone();
        let seals = edge.seal("obj", 5, &mut data);
        assert_ne!(data, plain);
        let records: Vec<_> = seals.iter().copied().map(Some).collect();
        let mut opened = data.clone();
        edge.open("obj", 5, &mut opened, &records).expect("open");
        assert_eq!(opened, plain);
        // Moved to another offset, another object, or swapped with a neighbour: refused.
        assert!(edge.open("obj", 6, &mut data.clone(), &records).is_err());
        assert!(edge.open("obj2", 5, &mut data.clone(), &records).is_err());
        let swapped = vec![records[1], records[0], records[2]];
        assert!(edge.open("obj", 5, &mut data.clone(), &swapped).is_err());
        // Another pool's keys cannot open them.
        let other = EdgeKeys::new(PoolId(4), vec![(1, vec![9u8; 32])]).expect("keys");
        assert!(other.open("obj", 5, &mut data.clone(), &records).is_err());
        // A flipped bit anywhere, bytes no record covers, or a record short: refused.
        let mut flipped = data.clone();
        flipped[2 * 4096 + 17] ^= 1;
        assert!(edge.open("obj", 5, &mut flipped, &records).is_err());
        let mut longer = [&data[..], &[0u8; 16][..]].concat();
        assert!(edge.open("obj", 5, &mut longer, &records).is_err());
        assert!(edge
            .open("obj", 5, &mut data.clone(), &records[..2])
            .is_err());
    }

    #[test]
    fn a_write_copied_and_sealed_chunk_by_chunk_opens_padded_with_zeros() {
        let edge = keys();
        let plain: Vec<u8> = (0..2 * 4096 + 100).map(|i| (i % 253) as u8).collect();
        let mut out = b"already".to_vec();
        let seals = edge.seal_copy("obj", 7, &plain, &mut out);
        assert_eq!((seals.len(), out.len()), (3, 7 + 3 * 4096));
        assert_eq!(&out[..7], b"already");
        let records: Vec<_> = seals.iter().copied().map(Some).collect();
        let mut opened = out[7..].to_vec();
        edge.open("obj", 7, &mut opened, &records).expect("open");
        assert_eq!(&opened[..plain.len()], &plain[..]);
        assert!(opened[plain.len()..].iter().all(|&b| b == 0));
        // Each chunk has a nonce of its own.
        assert_ne!(seals[0].nonce, seals[1].nonce);
        assert_ne!(seals[1].nonce, seals[2].nonce);
    }

    #[test]
    fn sealing_buffers_come_back_once_sent_and_idle_ones_are_capped() {
        let buffers = Arc::new(SealBuffers::default());
        let mut first = buffers.take();
        first.extend_from_slice(&[1u8; 4096]);
        let at = first.as_ptr();
        let sent = buffers.send(first);
        let copy = sent.clone();
        drop(sent);
        assert!(
            buffers.take().capacity() == 0,
            "taken back while still referenced"
        );
        drop(copy);
        let again = buffers.take();
        assert_eq!(
            (again.as_ptr(), again.len()),
            (at, 0),
            "the same buffer, emptied"
        );
        for _ in 0..3 {
            drop(buffers.send(Vec::with_capacity(IDLE_BUFFER_BYTES_MAX / 2)));
        }
        let idle = buffers.idle.lock().expect("lock");
        assert_eq!(
            idle.len(),
            2,
            "idle buffers are capped at IDLE_BUFFER_BYTES_MAX"
        );
    }

    #[test]
    fn no_nonce_repeats_and_a_new_writer_after_the_bound() {
        let edge = keys();
        let a = edge.seal("o", 0, &mut vec![0u8; 8192]);
        let b = edge.seal("o", 0, &mut vec![0u8; 8192]);
        let nonces: std::collections::HashSet<_> =
            a.iter().chain(&b).map(|s| (s.key_id, s.nonce)).collect();
        assert_eq!(nonces.len(), 4);
        edge.writer.lock().expect("lock").next = CHUNKS_PER_WRITER - 1;
        let c = edge.seal("o", 0, &mut vec![0u8; 8192]);
        assert_ne!(
            (c[0].key_id, &c[0].nonce[..8]),
            (a[0].key_id, &a[0].nonce[..8])
        );
        assert_eq!(&c[0].nonce[8..], &[0, 0, 0, 0]);
    }
}
