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

/// How the chunks of one extent were sealed. Kept in the extent's metadata record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
                ExtentSeal::Bare
            }
            DataSealer::Gcm(gcm) => ExtentSeal::Store {
                incarnation,
                nonce_base,
                tags: gcm.seal(buffer, object_id, logical_block, incarnation, nonce_base),
            },
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
                Ok(())
            }
            (
                DataSealer::Gcm(gcm),
                ExtentSeal::Store {
                    incarnation,
                    nonce_base,
                    tags,
                },
            ) => gcm.open(
                buffer,
                object_id,
                logical_block,
                *incarnation,
                *nonce_base,
                tags,
            ),
            // A record that does not fit the store's mode was altered (metadata is
            // authenticated in every encrypting mode) or the store is `none` and tampered.
            _ => Err(ChunkIntegrityError { chunk: 0 }),
        }
    }
}
