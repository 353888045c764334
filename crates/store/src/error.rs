//! Errors, one enum per operation (as redb does). None of them ever carries key material.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum MkfsError {
    #[error("{path} already holds a store or other files; mkfs needs an empty or new directory")]
    NotEmpty { path: PathBuf },
    #[error("store size {size_bytes} bytes is too small: at least {min_bytes} bytes are needed")]
    TooSmall { size_bytes: u64, min_bytes: u64 },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("metadata database: {0}")]
    Metadata(#[from] redb::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{path} is not a Coffer store (no metadata database)")]
    NotAStore { path: PathBuf },
    #[error("the key-encryption key does not open this store's data key (wrong key, or the superblock was altered); nothing was changed")]
    WrongKey,
    #[error("{path} is already open by another process")]
    InUse { path: PathBuf },
    #[error("store format {found} is not supported (this build reads format {supported})")]
    UnsupportedFormat { found: u32, supported: u32 },
    #[error("store metadata is corrupt: {what}")]
    Corrupt { what: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("metadata database: {0}")]
    Metadata(#[from] redb::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("object {object} not found")]
    NotFound { object: String },
    #[error("integrity check failed: object {object} at offset {offset_bytes} (data altered or rotted on disk)")]
    Integrity { object: String, offset_bytes: u64 },
    #[error("integrity check failed in the metadata of {what}")]
    MetadataIntegrity { what: String },
    #[error(
        "object {object} at offset {offset_bytes} was sealed by a client; read it with read_sealed"
    )]
    EdgeSealed { object: String, offset_bytes: u64 },
    #[error("invalid read: {reason}")]
    Invalid { reason: String },
    #[error("device IO: {0}")]
    Io(#[from] io::Error),
    #[error("metadata database: {0}")]
    Metadata(#[from] redb::Error),
    #[error("the store stopped after a failed commit ({cause}); reopen it to read what it logged")]
    Poisoned { cause: String },
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("store is full: the transaction needs {needed_bytes} bytes, {free_bytes} are free; nothing was applied")]
    NoSpace { needed_bytes: u64, free_bytes: u64 },
    #[error("invalid transaction: {reason}; nothing was applied")]
    Invalid { reason: String },
    #[error("object {object} at offset {offset_bytes} holds client-sealed chunks; only whole-chunk sealed writes may change it")]
    EdgeSealed { object: String, offset_bytes: u64 },
    #[error("reading existing data for a partial write: {0}")]
    Read(#[from] ReadError),
    #[error("device IO: {0}; nothing was applied")]
    Io(#[from] io::Error),
    #[error("metadata database: {0}")]
    Metadata(#[from] redb::Error),
    #[error("the store stopped accepting writes after a failed commit ({cause}); reopen it")]
    Poisoned { cause: String },
}

macro_rules! redb_into {
    ($($from:ty),*) => {$(
        impl From<$from> for ApplyError { fn from(e: $from) -> Self { ApplyError::Metadata(e.into()) } }
        impl From<$from> for ReadError { fn from(e: $from) -> Self { ReadError::Metadata(e.into()) } }
        impl From<$from> for OpenError { fn from(e: $from) -> Self { OpenError::Metadata(e.into()) } }
        impl From<$from> for MkfsError { fn from(e: $from) -> Self { MkfsError::Metadata(e.into()) } }
    )*};
}

redb_into!(
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::DatabaseError
);

impl From<crate::omap::Damaged> for ReadError {
    fn from(damaged: crate::omap::Damaged) -> Self {
        ReadError::MetadataIntegrity {
            what: damaged.0.to_string(),
        }
    }
}

impl From<crate::omap::Damaged> for ApplyError {
    fn from(damaged: crate::omap::Damaged) -> Self {
        ApplyError::Read(damaged.into())
    }
}
