//! `store`: the local object store of one storage daemon, encrypted at rest inside it.
//!
//! What it guarantees:
//! - A transaction (`Transaction`, `Store::apply`) is atomic and durable: when `apply`
//!   returns `Ok`, every operation in it survives a crash; a crash at any moment before
//!   leaves none of it visible. New data never overwrites committed data (copy on write).
//! - With `gcm` (the default), every 4 KiB chunk is AES-256-GCM sealed with a nonce that is
//!   never reused under the store's key (seal/nonce.rs), and bound to its object and offset;
//!   a flipped bit on disk makes the read fail with `ReadError::Integrity` naming the object
//!   and offset. In every mode but `none`, metadata values and object names are sealed too.
//! - The store's secret exists on disk only wrapped by the caller's key-encryption key.
//! - Crypto runs on the calling thread, in place in the aligned IO buffer.
//! - Chunks sealed by a client (`Transaction::write_sealed`) are kept and returned as they
//!   came (`Store::read_sealed`), without the store holding their key.
//!
//! The on-disk format is drawn in docs/design/store-format.md; the crypto argument is in
//! docs/design/at-rest-crypto.md.
//!
//! Depends on `map` (ids), `keys` and `metrics` (counters only). It must never depend on
//! `messenger`, `osd`, tokio networking, or any front end.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod allocator;
mod apply;
mod behind;
mod cache;
mod commit;
mod device;
mod error;
#[cfg(any(test, fuzzing))]
pub mod fuzz;
mod list;
mod metadata;
pub mod metrics;
mod object;
mod omap;
mod pending;
mod read;
mod seal;
mod store;
mod transaction;
mod undo;
mod uring;
mod usage;
mod wal;

pub use apply::{
    ATTRS_BYTES_MAX, ATTR_NAME_BYTES_MAX, OMAP_KEY_BYTES_MAX, OMAP_VALUE_BYTES_MAX,
    TRANSACTION_OPS_MAX, WRITE_BYTES_MAX,
};
pub use cache::{
    default_cache_bytes, memory_bytes, CacheStats, CACHE_BYTES_DEFAULT_MAX, CACHE_BYTES_DEFAULT_MIN,
};
pub use device::{AlignedBuf, Device, FileDevice, BLOCK_SIZE_BYTES};
pub use error::{ApplyError, MkfsError, OpenError, ReadError};
pub use list::{ListCursor, ListEntry, ListPage, LIST_PAGE_ENTRIES_MAX};
pub use object::{EXTENT_BLOCKS_MAX, OBJECT_SIZE_BYTES_MAX, SEALED_EXTENT_BLOCKS_MAX};
pub use read::{
    ObjectStat, OmapEntry, RangesRead, ReadBuf, SealedRead, Via, OMAP_PAGE_ENTRIES_MAX,
    READ_BYTES_MAX,
};
pub use seal::nonce::NONCE_RESERVE_STEP;
pub use seal::{ChunkRecord, Mode, UnknownMode, NONCE_BYTES, TAG_BYTES};
pub use store::{
    host_free_bytes, MkfsOptions, Statfs, Store, FORMAT_VERSION, STORE_SIZE_BYTES_MIN,
};
pub use transaction::Transaction;
