//! Requests to the daemons a front end talks to besides the OSDs and monitors (a file
//! system's metadata daemon), in message types the caller defines. The link is the same as
//! every other: mutual TLS, the cluster's link mode for clients.

use std::collections::HashMap;
use std::net::SocketAddr;

use bytes::Bytes;
use messenger::{Connection, EntityName};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Cluster, Error};

/// The open links to such daemons, by entity and address.
#[derive(Default)]
pub(crate) struct DaemonLinks {
    links: HashMap<(String, String), Connection>,
}

impl Cluster {
    /// Sends `request` (and `data`) to daemon `entity` at `addr` and returns its reply. A
    /// link that cannot be made or breaks is `Error::Unreachable`: the caller decides whether
    /// to look the daemon up again and resend.
    pub async fn call_daemon<Q: Serialize, R: DeserializeOwned>(
        &self,
        entity: &str,
        addr: &str,
        request: &Q,
        data: Bytes,
    ) -> Result<(R, Bytes), Error> {
        let conn = self.daemon_link(entity, addr).await?;
        match conn.request::<Q, R>(request, data).await {
            Ok(answer) => Ok(answer),
            Err(e) => {
                let key = (entity.to_string(), addr.to_string());
                self.inner.daemons.lock().await.links.remove(&key);
                Err(Error::Unreachable(format!("{entity} at {addr}: {e}")))
            }
        }
    }

    async fn daemon_link(&self, entity: &str, addr: &str) -> Result<Connection, Error> {
        let key = (entity.to_string(), addr.to_string());
        if let Some(conn) = self.inner.daemons.lock().await.links.get(&key) {
            if !conn.is_closed() {
                return Ok(conn.clone());
            }
        }
        let peer: EntityName = entity.parse().map_err(|e| Error::Invalid(format!("{e}")))?;
        let socket: SocketAddr = addr
            .parse()
            .map_err(|e| Error::Invalid(format!("{entity} address {addr:?}: {e}")))?;
        // Connect without holding the table: one unreachable daemon must not stall the rest.
        let conn = self
            .inner
            .endpoint
            .connect(socket, &peer, &self.inner.modes)
            .await
            .map_err(|e| Error::Unreachable(format!("{entity} at {addr}: {e}")))?;
        self.inner
            .daemons
            .lock()
            .await
            .links
            .insert(key, conn.clone());
        Ok(conn)
    }
}
