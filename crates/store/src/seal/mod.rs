//! At-rest sealing of data blocks, applied on the thread that does the IO, in place in the
//! IO buffer (see docs/design/at-rest-crypto.md).
//!
//! | mode       | unit        | integrity | per-chunk record kept in metadata         |
//! |------------|-------------|-----------|-------------------------------------------|
//! | `none`     | -           | none      | nothing                                   |
//! | `xts-512`  | 512 B       | none      | nothing (tweak = physical sector number)  |
//! | `xts-4096` | 4 KiB       | none      | nothing (tweak = physical sector number)  |
//! | `gcm`      | 4 KiB chunk | AEAD tag  | nonce (as a counter base per extent), tag |
//!
//! Chunks sealed upstream by a client (`ExtentSeal::Edge`) are stored and returned as they
//! came, in every mode: the store holds no key for them.

mod gcm;
pub(crate) mod nonce;
mod xts;

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

pub(crate) use gcm::Gcm;
pub(crate) use xts::Xts;

/// The at-rest encryption mode of a store, fixed at mkfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum Mode {
    None,
    Xts512,
    Xts4096,
    #[default]
    Gcm,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::None, Mode::Xts512, Mode::Xts4096, Mode::Gcm];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Xts512 => "xts-512",
            Mode::Xts4096 => "xts-4096",
            Mode::Gcm => "gcm",
        }
    }

    /// Whether metadata values and object names are sealed too (every mode but `none`).
    pub fn encrypts(self) -> bool {
        self != Mode::None
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownMode(pub String);

impl fmt::Display for UnknownMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown at-rest mode {:?}; expected one of none, xts-512, xts-4096, gcm",
            self.0
        )
    }
}

impl std::error::Error for UnknownMode {}

impl FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Mode, UnknownMode> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownMode(s.to_string()))
    }
}

pub const TAG_BYTES: usize = 16;
pub const NONCE_BYTES: usize = 12;

/// The seal record of one chunk sealed upstream (MISSION.md, "Encrypt once"): which key,
/// which nonce, which tag. The store keeps it beside the chunk and never interprets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRecord {
    pub key_id: u64,
    pub nonce: [u8; NONCE_BYTES],
    pub tag: [u8; TAG_BYTES],
}

/// How the chunks of one extent were sealed. Kept in the extent's metadata record, in the
/// form of [`StoredSeal`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredSeal", into = "StoredSeal")]
pub(crate) enum ExtentSeal {
    /// `none` and `xts-*`: nothing to keep per chunk.
    Bare,
    /// `gcm`, sealed by this store: chunk i used nonce (data, `incarnation`, `nonce_base + i`).
    Store {
        incarnation: u32,
        nonce_base: u64,
        tags: Vec<[u8; TAG_BYTES]>,
    },
    /// Sealed upstream; stored as received.
    Edge { chunks: Vec<ChunkRecord> },
}

impl ExtentSeal {
    /// The records of chunks `[skip, skip + len)` of this extent.
    pub(crate) fn slice(&self, skip: usize, len: usize) -> ExtentSeal {
        match self {
            ExtentSeal::Bare => ExtentSeal::Bare,
            ExtentSeal::Store {
                incarnation,
                nonce_base,
                tags,
            } => ExtentSeal::Store {
                incarnation: *incarnation,
                nonce_base: nonce_base + skip as u64,
                tags: tags[skip..skip + len].to_vec(),
            },
            ExtentSeal::Edge { chunks } => ExtentSeal::Edge {
                chunks: chunks[skip..skip + len].to_vec(),
            },
        }
    }
}

/// An extent's seal as stored. Chunks sealed upstream are usually sealed in runs (one key,
/// a nonce whose last four bytes count up by one per chunk), so they are kept as those runs
/// and the tags, 16 bytes per chunk instead of 36 (`EdgeTagRuns`). Records that form no run
/// take one each. Tags are kept as one byte string (`Tags`). Earlier forms, still read:
/// `Edge` (one full record per chunk), and `Store` and `EdgeRuns`, whose tags were coded one
/// serde value per byte, which cost about 1 % of an OSD's CPU on 4 MiB writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum StoredSeal {
    Bare,
    Store {
        incarnation: u32,
        nonce_base: u64,
        tags: Vec<[u8; TAG_BYTES]>,
    },
    Edge {
        chunks: Vec<ChunkRecord>,
    },
    EdgeRuns {
        runs: Vec<RecordRun>,
        tags: Vec<[u8; TAG_BYTES]>,
    },
    StoreTags {
        incarnation: u32,
        nonce_base: u64,
        tags: Tags,
    },
    EdgeTagRuns {
        runs: Vec<RecordRun>,
        tags: Tags,
    },
}

/// Chunk tags as one byte string, [`TAG_BYTES`] each.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Tags(Vec<[u8; TAG_BYTES]>);

impl Serialize for Tags {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0.as_flattened())
    }
}

impl<'de> Deserialize<'de> for Tags {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Tags, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Tags;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "chunk tags of {TAG_BYTES} bytes each")
            }
            fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Tags, E> {
                let (tags, rest) = bytes.as_chunks::<TAG_BYTES>();
                if !rest.is_empty() {
                    return Err(E::invalid_length(bytes.len(), &self));
                }
                Ok(Tags(tags.to_vec()))
            }
        }
        d.deserialize_bytes(Visit)
    }
}

/// `chunks` chunks sealed under `key_id`, the first with `nonce`, each next one with the
/// nonce's last four bytes (big-endian) one higher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct RecordRun {
    key_id: u64,
    nonce: [u8; NONCE_BYTES],
    chunks: u32,
}

/// The nonce's counter: its last four bytes, big-endian.
fn counter(nonce: &[u8; NONCE_BYTES]) -> u32 {
    u32::from_be_bytes([nonce[8], nonce[9], nonce[10], nonce[11]])
}

fn runs_of(chunks: &[ChunkRecord]) -> Vec<RecordRun> {
    let mut runs: Vec<RecordRun> = Vec::new();
    for chunk in chunks {
        if let Some(run) = runs.last_mut() {
            let next = counter(&run.nonce).checked_add(run.chunks);
            if run.key_id == chunk.key_id
                && run.nonce[..8] == chunk.nonce[..8]
                && next == Some(counter(&chunk.nonce))
            {
                run.chunks += 1;
                continue;
            }
        }
        runs.push(RecordRun {
            key_id: chunk.key_id,
            nonce: chunk.nonce,
            chunks: 1,
        });
    }
    runs
}

impl From<ExtentSeal> for StoredSeal {
    fn from(seal: ExtentSeal) -> StoredSeal {
        match seal {
            ExtentSeal::Bare => StoredSeal::Bare,
            ExtentSeal::Store {
                incarnation,
                nonce_base,
                tags,
            } => StoredSeal::StoreTags {
                incarnation,
                nonce_base,
                tags: Tags(tags),
            },
            ExtentSeal::Edge { chunks } => StoredSeal::EdgeTagRuns {
                runs: runs_of(&chunks),
                tags: Tags(chunks.iter().map(|c| c.tag).collect()),
            },
        }
    }
}

impl From<StoredSeal> for ExtentSeal {
    fn from(stored: StoredSeal) -> ExtentSeal {
        match stored {
            StoredSeal::Bare => ExtentSeal::Bare,
            StoredSeal::Store {
                incarnation,
                nonce_base,
                tags,
            }
            | StoredSeal::StoreTags {
                incarnation,
                nonce_base,
                tags: Tags(tags),
            } => ExtentSeal::Store {
                incarnation,
                nonce_base,
                tags,
            },
            StoredSeal::Edge { chunks } => ExtentSeal::Edge { chunks },
            StoredSeal::EdgeRuns { runs, tags }
            | StoredSeal::EdgeTagRuns {
                runs,
                tags: Tags(tags),
            } => {
                // Runs that do not account for every tag leave no records, and the
                // extent's length check (`decode_extent`) refuses the extent.
                let counted: u64 = runs.iter().map(|r| u64::from(r.chunks)).sum();
                if counted != tags.len() as u64 {
                    return ExtentSeal::Edge { chunks: Vec::new() };
                }
                let mut tags = tags.into_iter();
                let chunks = runs
                    .iter()
                    .flat_map(|run| {
                        (0..run.chunks).map(move |i| {
                            let mut nonce = run.nonce;
                            let next = counter(&run.nonce).wrapping_add(i);
                            nonce[8..].copy_from_slice(&next.to_be_bytes());
                            (run.key_id, nonce)
                        })
                    })
                    .zip(tags.by_ref())
                    .map(|((key_id, nonce), tag)| ChunkRecord { key_id, nonce, tag })
                    .collect();
                ExtentSeal::Edge { chunks }
            }
        }
    }
}

/// A chunk failed its integrity check; `chunk` is its index within the run.
#[derive(Debug)]
pub(crate) struct ChunkIntegrityError {
    pub chunk: usize,
}

/// The data sealer of one store, chosen by its mode.
pub(crate) enum DataSealer {
    None,
    Xts(Xts),
    Gcm(Gcm),
}

impl DataSealer {
    pub(crate) fn new(mode: Mode, data_key: &[u8; 64]) -> Result<DataSealer, xts::XtsKeyRejected> {
        Ok(match mode {
            Mode::None => DataSealer::None,
            Mode::Xts512 => DataSealer::Xts(Xts::new(data_key, 512)?),
            Mode::Xts4096 => DataSealer::Xts(Xts::new(data_key, 4096)?),
            Mode::Gcm => {
                let mut gcm_key = [0u8; 32];
                gcm_key.copy_from_slice(&data_key[..32]);
                let gcm = Gcm::new(&gcm_key);
                zeroize::Zeroize::zeroize(&mut gcm_key);
                DataSealer::Gcm(gcm)
            }
        })
    }

    /// Whether sealing changes the bytes (encrypts them in place).
    pub(crate) fn changes_bytes(&self) -> bool {
        !matches!(self, DataSealer::None)
    }

    /// Whether sealing keeps a record (nonce, tag) per chunk in the extent metadata.
    pub(crate) fn keeps_chunk_records(&self) -> bool {
        matches!(self, DataSealer::Gcm(_))
    }

    /// How many nonce counter values sealing `blocks` blocks takes.
    pub(crate) fn nonces_needed(&self, blocks: u64) -> u64 {
        match self {
            DataSealer::Gcm(_) => blocks,
            DataSealer::None | DataSealer::Xts(_) => 0,
        }
    }

    /// Seals whole blocks in place, bound for device block `physical_block`, holding logical
    /// chunks `logical_block..` of object `object_id`. `nonce_base` is the first of
    /// `nonces_needed` counter values reserved for this run under `incarnation`.
    pub(crate) fn seal(
        &self,
        buffer: &mut [u8],
        object_id: &[u8; 16],
        logical_block: u64,
        physical_block: u64,
        incarnation: u32,
        nonce_base: u64,
    ) -> ExtentSeal {
        match self {
            DataSealer::None => ExtentSeal::Bare,
            DataSealer::Xts(xts) => {
                xts.apply(
                    buffer,
                    physical_block * crate::device::BLOCK_SIZE_BYTES,
                    true,
                );
                metrics::crypto::sealed(metrics::crypto::Kind::StoreXts, buffer.len());
                ExtentSeal::Bare
            }
            DataSealer::Gcm(gcm) => {
                metrics::crypto::sealed(metrics::crypto::Kind::StoreGcm, buffer.len());
                ExtentSeal::Store {
                    incarnation,
                    nonce_base,
                    tags: gcm.seal(buffer, object_id, logical_block, incarnation, nonce_base),
                }
            }
        }
    }

    /// Opens whole blocks in place that were read from device block `physical_block`.
    pub(crate) fn open(
        &self,
        buffer: &mut [u8],
        object_id: &[u8; 16],
        logical_block: u64,
        physical_block: u64,
        seal: &ExtentSeal,
    ) -> Result<(), ChunkIntegrityError> {
        match (self, seal) {
            (DataSealer::None, ExtentSeal::Bare) => Ok(()),
            (DataSealer::Xts(xts), ExtentSeal::Bare) => {
                xts.apply(
                    buffer,
                    physical_block * crate::device::BLOCK_SIZE_BYTES,
                    false,
                );
                metrics::crypto::opened(metrics::crypto::Kind::StoreXts, buffer.len());
                Ok(())
            }
            (
                DataSealer::Gcm(gcm),
                ExtentSeal::Store {
                    incarnation,
                    nonce_base,
                    tags,
                },
            ) => {
                metrics::crypto::opened(metrics::crypto::Kind::StoreGcm, buffer.len());
                gcm.open(
                    buffer,
                    object_id,
                    logical_block,
                    *incarnation,
                    *nonce_base,
                    tags,
                )
            }
            // A record that does not fit the store's mode was altered (metadata is
            // authenticated in every encrypting mode) or the store is `none` and tampered.
            _ => Err(ChunkIntegrityError { chunk: 0 }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key_id: u64, writer: u8, count: u32, tag: u8) -> ChunkRecord {
        let mut nonce = [writer; NONCE_BYTES];
        nonce[8..].copy_from_slice(&count.to_be_bytes());
        ChunkRecord {
            key_id,
            nonce,
            tag: [tag; TAG_BYTES],
        }
    }

    fn round_trip(seal: &ExtentSeal) -> (ExtentSeal, usize) {
        let bytes = postcard::to_stdvec(seal).expect("encode");
        (postcard::from_bytes(&bytes).expect("decode"), bytes.len())
    }

    #[test]
    fn edge_records_are_kept_as_runs_and_come_back_the_same() {
        let run: Vec<ChunkRecord> = (0..64)
            .map(|i| record(1 << 48 | 7, 9, 100 + i, i as u8))
            .collect();
        let (back, len) = round_trip(&ExtentSeal::Edge {
            chunks: run.clone(),
        });
        assert_eq!(back, ExtentSeal::Edge { chunks: run });
        assert!(
            len < 64 * TAG_BYTES + 48,
            "one run and the tags: {len} bytes"
        );

        // Another key, another writer, a gap, and a counter that would wrap: new runs.
        let mixed = vec![
            record(1, 1, 5, 0),
            record(1, 1, 6, 1),
            record(2, 1, 7, 2),
            record(2, 3, 8, 3),
            record(2, 3, 10, 4),
            record(2, 3, u32::MAX, 5),
            record(2, 3, 0, 6),
        ];
        let (back, _) = round_trip(&ExtentSeal::Edge {
            chunks: mixed.clone(),
        });
        assert_eq!(
            back,
            ExtentSeal::Edge {
                chunks: mixed.clone()
            }
        );
        assert_eq!(runs_of(&mixed).len(), 6);

        for other in [
            ExtentSeal::Bare,
            ExtentSeal::Store {
                incarnation: 3,
                nonce_base: 77,
                tags: vec![[5; TAG_BYTES]; 3],
            },
        ] {
            assert_eq!(round_trip(&other).0, other);
        }
    }

    #[test]
    fn extents_stored_with_full_records_still_read() {
        let chunks = vec![record(4, 2, 1, 1), record(9, 8, 1, 2)];
        let earlier = postcard::to_stdvec(&StoredSeal::Edge {
            chunks: chunks.clone(),
        })
        .expect("encode");
        let read: ExtentSeal = postcard::from_bytes(&earlier).expect("decode");
        assert_eq!(read, ExtentSeal::Edge { chunks });
    }

    #[test]
    fn tags_are_kept_as_one_byte_string_and_the_earlier_forms_still_read() {
        let tags: Vec<[u8; TAG_BYTES]> = (0..64u8).map(|i| [i; TAG_BYTES]).collect();
        let store = ExtentSeal::Store {
            incarnation: 3,
            nonce_base: 77,
            tags: tags.clone(),
        };
        let bytes = postcard::to_stdvec(&store).expect("encode");
        // Variant, incarnation, nonce base, the string's length (2 bytes), the tags.
        assert_eq!(bytes.len(), 1 + 1 + 1 + 2 + 64 * TAG_BYTES);
        assert_eq!(
            postcard::from_bytes::<ExtentSeal>(&bytes).expect("decode"),
            store
        );

        let chunks: Vec<ChunkRecord> = (0..64).map(|i| record(5, 1, i, i as u8)).collect();
        let earlier = [
            StoredSeal::Store {
                incarnation: 3,
                nonce_base: 77,
                tags: tags.clone(),
            },
            StoredSeal::EdgeRuns {
                runs: runs_of(&chunks),
                tags: chunks.iter().map(|c| c.tag).collect(),
            },
        ];
        let expected = [
            store,
            ExtentSeal::Edge {
                chunks: chunks.clone(),
            },
        ];
        for (stored, seal) in earlier.iter().zip(expected) {
            let bytes = postcard::to_stdvec(stored).expect("encode");
            assert_eq!(
                postcard::from_bytes::<ExtentSeal>(&bytes).expect("decode"),
                seal
            );
        }

        // A byte string that is not whole tags is refused.
        let mut cut = postcard::to_stdvec(&StoredSeal::StoreTags {
            incarnation: 3,
            nonce_base: 77,
            tags: Tags(vec![[1; TAG_BYTES]]),
        })
        .expect("encode");
        cut[3] = 15;
        cut.pop();
        assert!(postcard::from_bytes::<ExtentSeal>(&cut).is_err());
    }

    #[test]
    fn runs_that_miscount_their_tags_leave_no_records() {
        let stored = StoredSeal::EdgeRuns {
            runs: vec![RecordRun {
                key_id: 1,
                nonce: [0; NONCE_BYTES],
                chunks: 3,
            }],
            tags: vec![[0; TAG_BYTES]; 2],
        };
        assert_eq!(
            ExtentSeal::from(stored),
            ExtentSeal::Edge { chunks: Vec::new() }
        );
    }
}
