//! `block`: images over the object cluster, exported over NBD.
//!
//! An image is a header object plus data objects of one fixed size, named by index
//! ([`image`]); one writer at a time holds its exclusive lock ([`lock`]); [`nbd`] serves it
//! to fio, qemu, nbdcopy and the kernel's nbd client.
//!
//! Depends on `client` and `map` only. It must never depend on `messenger`, `osd` or
//! `store` directly: a front end sees the cluster exactly as an external client would
//! (checked by scripts/check-deps.py).

#![deny(clippy::unwrap_used)]

pub mod error;
pub mod image;
pub mod lock;
pub mod metrics;
pub mod nbd;

pub use error::Error;
pub use image::{Access, Extent, Image};
