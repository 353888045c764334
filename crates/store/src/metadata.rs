//! The metadata database (redb) and its key layout, and the sealing of its values.
//!
//! Tables (all keys and values are byte strings; integers big-endian so order is numeric):
//!
//! | table        | key                                              | value                      |
//! |--------------|--------------------------------------------------|----------------------------|
//! | `superblock` | field name                                       | see `store.rs`             |
//! | `objects`    | pool (8) · name hash (4) · object id (16)        | sealed `ObjectRecord`      |
//! | `extents`    | object id (16) · logical block (8)               | sealed `Extent`            |
//! | `omap`       | object id (16) · omap key (a PG log's only)      | sealed omap value          |
//! | `omap_paged` | object id (16) · row kind · ... (omap.rs)        | sealed root, page or entry |
//! | `pool_usage` | pool (8)                                         | sealed `PoolUsage`         |
//! | `undo`       | pool (8) · name hash (4) · object id (16) · version (8) | sealed `UndoRecord` |
//!
//! The object id is 16 bytes of HMAC-SHA256(id subkey, pool · name) in encrypting modes,
//! so names appear nowhere in clear, and of SHA-256 in `none`. In encrypting modes every
//! value is AES-256-GCM sealed under the value subkey: nonce (12) · ciphertext · tag (16),
//! with the table's tag byte and the row's key as additional data, so a value altered, or
//! moved to another row or table, fails to open. Omap keys are in the sealed values of
//! `omap_paged` (omap.rs), except a PG log's version numbers, kept in clear for their order
//! (see docs/design/at-rest-crypto.md, "What is not hidden").

use crate::seal::nonce::{nonce_bytes, DOMAIN_METADATA};
use crate::seal::{NONCE_BYTES, TAG_BYTES};
use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use aws_lc_rs::{digest, hmac};
use map::{ObjectHash, PoolId};
use redb::TableDefinition;

pub(crate) const SUPERBLOCK: TableDefinition<&str, &[u8]> = TableDefinition::new("superblock");
pub(crate) const OBJECTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("objects");
pub(crate) const EXTENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("extents");
pub(crate) const OMAP: TableDefinition<&[u8], &[u8]> = TableDefinition::new("omap");
/// Every omap but a PG log's, with its keys sealed (omap.rs); from format 4.
pub(crate) const OMAP_PAGED: TableDefinition<&[u8], &[u8]> = TableDefinition::new("omap_paged");
/// The table an object's omap rows are in: `Omap` in a PG metadata pool (a PG's log),
/// `OmapPaged` elsewhere.
pub(crate) fn omap_table(pool: PoolId) -> Table {
    match pool.is_pg_meta() {
        true => Table::Omap,
        false => Table::OmapPaged,
    }
}

/// The rows of `table` (`Omap` or `OmapPaged`) in `txn`.
pub(crate) fn open_omap(
    txn: &redb::ReadTransaction,
    table: Table,
) -> Result<redb::ReadOnlyTable<&'static [u8], &'static [u8]>, redb::TableError> {
    txn.open_table(match table {
        Table::Omap => OMAP,
        _ => OMAP_PAGED,
    })
}

/// Each pool's usage, kept by the group commit (usage.rs); from format 2.
pub(crate) const POOL_USAGE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("pool_usage");
/// The ways back from transactions that kept them (undo.rs); from format 5.
pub(crate) const UNDO: TableDefinition<&[u8], &[u8]> = TableDefinition::new("undo");

/// Superblock rows of the write-ahead log (wal.rs), u64 BE: the number of the record at the
/// log's offset 0, set by each checkpoint, and of the last record whose changes the
/// database holds, set by each logged commit.
pub(crate) const WAL_START: &str = "wal_start";
pub(crate) const WAL_APPLIED: &str = "wal_applied";

pub(crate) type ObjectId = [u8; 16];

/// Which table a sealed value belongs to; part of its additional data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Table {
    Objects = 1,
    Extents = 2,
    Omap = 3,
    Superblock = 4,
    PoolUsage = 5,
    /// The head of a write-ahead log record (wal.rs).
    Wal = 6,
    OmapPaged = 7,
    Undo = 8,
}

pub(crate) fn object_key(pool: PoolId, hash: ObjectHash, id: &ObjectId) -> [u8; 28] {
    let mut key = [0u8; 28];
    key[..8].copy_from_slice(&pool.0.to_be_bytes());
    key[8..12].copy_from_slice(&hash.0.to_be_bytes());
    key[12..].copy_from_slice(id);
    key
}

pub(crate) fn extent_key(id: &ObjectId, logical_block: u64) -> [u8; 24] {
    let mut key = [0u8; 24];
    key[..16].copy_from_slice(id);
    key[16..].copy_from_slice(&logical_block.to_be_bytes());
    key
}

pub(crate) fn extent_key_block(key: &[u8]) -> u64 {
    let mut block = [0u8; 8];
    block.copy_from_slice(&key[16..24]);
    u64::from_be_bytes(block)
}

pub(crate) fn omap_key(id: &ObjectId, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + key.len());
    out.extend_from_slice(id);
    out.extend_from_slice(key);
    out
}

/// A metadata value failed to open: altered, moved, or sealed under another key.
#[derive(Debug)]
pub(crate) struct MetaIntegrityError;

pub(crate) struct MetaSealer {
    aead: Option<LessSafeKey>,
    id_key: Option<hmac::Key>,
    slot_key: Option<hmac::Key>,
}

impl MetaSealer {
    pub(crate) fn plain() -> MetaSealer {
        MetaSealer {
            aead: None,
            id_key: None,
            slot_key: None,
        }
    }

    /// Subkeys are derived from the metadata key, one per use: HMAC-SHA256(metadata key,
    /// label) for the value AEAD, for object ids and for omap entry slots.
    pub(crate) fn sealed(meta_key: &[u8; 32]) -> MetaSealer {
        let parent = hmac::Key::new(hmac::HMAC_SHA256, meta_key);
        let derive = |label: &[u8]| hmac::sign(&parent, label);
        let aead_key = derive(b"coffer metadata values v1");
        let id_key = derive(b"coffer object ids v1");
        let slot_key = derive(b"coffer omap slots v1");
        let unbound = UnboundKey::new(&AES_256_GCM, aead_key.as_ref())
            .expect("a 32-byte key is valid for AES-256-GCM");
        MetaSealer {
            aead: Some(LessSafeKey::new(unbound)),
            id_key: Some(hmac::Key::new(hmac::HMAC_SHA256, id_key.as_ref())),
            slot_key: Some(hmac::Key::new(hmac::HMAC_SHA256, slot_key.as_ref())),
        }
    }

    pub(crate) fn object_id(&self, pool: PoolId, name: &str) -> ObjectId {
        digest16(self.id_key.as_ref(), &pool.0.to_be_bytes(), name.as_bytes())
    }

    /// Where the omap entry of `key` lives among its object's rows in `omap_paged`.
    pub(crate) fn omap_slot(&self, id: &ObjectId, key: &[u8]) -> [u8; 16] {
        digest16(self.slot_key.as_ref(), id, key)
    }

    /// How many nonce counter values one `seal` takes (0 in `none`).
    pub(crate) fn nonces_per_value(&self) -> u64 {
        self.aead.is_some() as u64
    }

    /// Seals a value with the metadata nonce (incarnation, counter).
    pub(crate) fn seal(
        &self,
        table: Table,
        key: &[u8],
        plain: Vec<u8>,
        incarnation: u32,
        nonce_counter: u64,
    ) -> Vec<u8> {
        self.seal_with_nonce(
            table,
            key,
            plain,
            nonce_bytes(DOMAIN_METADATA, incarnation, nonce_counter),
        )
    }

    pub(crate) fn seal_with_nonce(
        &self,
        table: Table,
        key: &[u8],
        mut plain: Vec<u8>,
        nonce: [u8; NONCE_BYTES],
    ) -> Vec<u8> {
        let Some(aead) = &self.aead else { return plain };
        let tag = aead
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(table, key)),
                &mut plain,
            )
            .expect("sealing a metadata value cannot fail");
        let mut out = Vec::with_capacity(NONCE_BYTES + plain.len() + TAG_BYTES);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&plain);
        out.extend_from_slice(tag.as_ref());
        out
    }

    pub(crate) fn open(
        &self,
        table: Table,
        key: &[u8],
        stored: &[u8],
    ) -> Result<Vec<u8>, MetaIntegrityError> {
        let Some(aead) = &self.aead else {
            return Ok(stored.to_vec());
        };
        if stored.len() < NONCE_BYTES + TAG_BYTES {
            return Err(MetaIntegrityError);
        }
        let mut nonce = [0u8; NONCE_BYTES];
        nonce.copy_from_slice(&stored[..NONCE_BYTES]);
        let (body, tag) = stored[NONCE_BYTES..].split_at(stored.len() - NONCE_BYTES - TAG_BYTES);
        let mut plain = body.to_vec();
        aead.open_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(table, key)),
            tag,
            &mut plain,
        )
        .map_err(|_| MetaIntegrityError)?;
        Ok(plain)
    }
}

/// The first 16 bytes of HMAC-SHA256 under `key` (SHA-256 in `none`) of `head` · `tail`.
fn digest16(key: Option<&hmac::Key>, head: &[u8], tail: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    match key {
        Some(key) => {
            let mut ctx = hmac::Context::with_key(key);
            ctx.update(head);
            ctx.update(tail);
            out.copy_from_slice(&ctx.sign().as_ref()[..16]);
        }
        None => {
            let mut ctx = digest::Context::new(&digest::SHA256);
            ctx.update(head);
            ctx.update(tail);
            out.copy_from_slice(&ctx.finish().as_ref()[..16]);
        }
    }
    out
}

fn aad(table: Table, key: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(1 + key.len());
    aad.push(table as u8);
    aad.extend_from_slice(key);
    aad
}

/// One change to the metadata database, computed while preparing a transaction and applied
/// in order inside the group commit (and carried by the write-ahead log's records).
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) enum MetaOp {
    Put {
        table: Table,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Remove {
        table: Table,
        key: Vec<u8>,
    },
    /// Removes every row whose key starts with `prefix` (the omap rows of an object removed
    /// or cleared, if it had any).
    RemovePrefix {
        table: Table,
        prefix: Vec<u8>,
    },
}

/// The upper bound of keys starting with `prefix`, or None when there is none (all 0xff).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last != 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
