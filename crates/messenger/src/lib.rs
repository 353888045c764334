//! Coffer's messenger: authenticated, encrypted, multiplexed links between clients, storage
//! daemons and monitors.
//!
//! Every link is TLS 1.3 (rustls with aws-lc-rs) with both ends authenticated by
//! certificates from the cluster's authority. In `secure` mode every frame stays inside TLS;
//! in `crc` mode the link leaves TLS once both ends are authenticated and frames carry
//! CRC32C checksums instead. Many requests share one link, matched to their replies by tag.
//! Design: docs/design/messenger.md.
//!
//! Must never depend on: `store`, `osd`, `mon` (checked by scripts/check-deps.py).

mod conn;
mod endpoint;
mod entity;
mod error;
mod frame;
mod identity;
mod link;
pub mod message;
mod monc;
mod server;
#[cfg(test)]
mod tests;

pub use conn::{Connection, Incoming};
pub use endpoint::{Endpoint, Limits, FRAME_TIMEOUT, HANDSHAKE_TIMEOUT, IN_FLIGHT_MAX};
pub use entity::{EntityKind, EntityName, EntityNameError, Mode, ModePolicy, ENTITY_ID_BYTES_MAX};
pub use error::{CallError, ConnectError};
pub use frame::{DATA_BYTES_MAX, HEADER_BYTES, META_BYTES_MAX};
pub use identity::{CertError, ClusterCa, Identity};
pub use monc::{MonAddr, MonClient, MonError, MON_RETRY_TIMEOUT};
pub use rustls::pki_types::CertificateDer;
pub use server::{Handler, Peer, Reply, Request, Server};
