//! Coffer's messenger: authenticated, encrypted, multiplexed links between clients, storage
//! daemons and monitors.
//!
//! Every link starts with TLS 1.3 (rustls with aws-lc-rs), both ends authenticated by
//! certificates from the cluster's authority. In `secure` mode both ends then protect every
//! frame with AES-256-GCM under keys from the TLS exporter, and data already sealed by a
//! client travels open, bound to its frame; in `crc` mode frames carry CRC32C checksums and
//! nothing is encrypted. Many requests share one link, matched to their replies by tag.
//! Design: docs/design/messenger.md.
//!
//! Must never depend on: `store`, `osd`, `mon` (checked by scripts/check-deps.py).

mod conn;
mod data;
mod endpoint;
mod entity;
mod error;
mod frame;
#[cfg(any(test, fuzzing))]
pub mod fuzz;
mod identity;
mod link;
pub mod message;
pub mod metrics;
mod monc;
mod outbox;
mod protect;
mod server;
#[cfg(test)]
mod tests;

pub use conn::{Connection, DataSegment, Incoming};
pub use data::Data;
pub use endpoint::{Endpoint, Limits, FRAME_TIMEOUT, HANDSHAKE_TIMEOUT, IN_FLIGHT_MAX};
pub use entity::{EntityKind, EntityName, EntityNameError, Mode, ModePolicy, ENTITY_ID_BYTES_MAX};
pub use error::{CallError, ConnectError};
pub use frame::{Segment, DATA_BYTES_MAX, HEADER_BYTES, META_BYTES_MAX};
pub use identity::{CertError, ClusterCa, Identity};
pub use link::RECEIVE_PIECE_BYTES;
pub use monc::{MonAddr, MonClient, MonError, MON_RETRY_TIMEOUT};
pub use protect::SegmentCheck;
pub use rustls::pki_types::CertificateDer;
pub use server::{Handler, Peer, Reply, Request, Server};
