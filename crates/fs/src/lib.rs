//! `fs`: Coffer's POSIX file system over the object cluster.
//!
//! A file system is a namespace kept by its metadata daemon (the `mds` crate) in a
//! metadata pool, and file contents striped over objects of a data pool, which mounts read
//! and write directly (sealed at the edge in an edge pool: neither the MDS nor the OSDs see
//! them). `proto` is what a mount and the MDS say; `perm` the POSIX permission checks the MDS
//! makes; `readahead` how a mount fetches ahead of sequential readers and not of random ones.
//! docs/design/fs.md has the design.
//!
//! Depends on `client` and `map`. It must never depend on `messenger`, `osd`, `store` or
//! `mon`: a mount sees the cluster as any client does (checked by scripts/check-deps.py).

#![deny(clippy::unwrap_used)]

pub mod data;
pub mod fuse;
pub mod link;
pub mod mount;
pub mod perm;
pub mod proto;
pub mod readahead;

/// `mutex`'s guard, whether or not a holder panicked: what it guards stays consistent
/// between statements.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A failure as the kernel hears it: an `errno` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);
