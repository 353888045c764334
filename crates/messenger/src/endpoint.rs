//! One process's side of every link: its identity, its TLS configuration and its limits.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::conn::Connection;
use crate::entity::{EntityName, Mode};
use crate::error::ConnectError;
use crate::identity::{CertError, Identity};
use crate::link;

/// How long a peer has to finish the TLS handshake and the hello exchange.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a peer has to finish a frame it has started.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests in flight on one link; further requests wait (client) or are not read (server).
pub const IN_FLIGHT_MAX: usize = 256;

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub handshake_timeout: Duration,
    pub frame_timeout: Duration,
    pub in_flight_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            handshake_timeout: HANDSHAKE_TIMEOUT,
            frame_timeout: FRAME_TIMEOUT,
            in_flight_max: IN_FLIGHT_MAX,
        }
    }
}

/// Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<EndpointConfig>,
}

/// An endpoint's identity and TLS configurations, shared by its clones.
struct EndpointConfig {
    entity: EntityName,
    client_tls: Arc<rustls::ClientConfig>,
    server_tls: Arc<rustls::ServerConfig>,
    limits: Limits,
}

impl Endpoint {
    pub fn new(identity: &Identity, limits: Limits) -> Result<Self, CertError> {
        Ok(Endpoint {
            inner: Arc::new(EndpointConfig {
                entity: identity.entity().clone(),
                client_tls: identity.client_config()?,
                server_tls: identity.server_config()?,
                limits,
            }),
        })
    }

    pub fn entity(&self) -> &EntityName {
        &self.inner.entity
    }

    pub fn limits(&self) -> Limits {
        self.inner.limits
    }

    pub(crate) fn client_tls(&self) -> Arc<rustls::ClientConfig> {
        self.inner.client_tls.clone()
    }

    pub(crate) fn server_tls(&self) -> Arc<rustls::ServerConfig> {
        self.inner.server_tls.clone()
    }

    /// Opens a link to `peer` at `addr`, offering `modes` in order of preference; the server
    /// picks by its own policy. Both ends are authenticated before this returns.
    pub async fn connect(
        &self,
        addr: SocketAddr,
        peer: &EntityName,
        modes: &[Mode],
    ) -> Result<Connection, ConnectError> {
        let timeout = self.inner.limits.handshake_timeout;
        let link = tokio::time::timeout(timeout, link::connect(self, addr, peer, modes))
            .await
            .map_err(|_| ConnectError::Timeout(timeout))
            .and_then(|linked| linked)
            .inspect_err(crate::metrics::handshake_failed)?;
        Ok(Connection::start(link, peer.clone(), self.inner.limits))
    }
}
