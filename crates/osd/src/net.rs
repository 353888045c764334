//! How an OSD reaches the other OSDs. Every OSD-to-OSD request of replication, peering and
//! recovery goes through [`PeerNet::call`]: the messenger in a daemon, and a simulated network
//! (with injected loss, delay and partitions) when the same logic runs under a simulator.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use map::cluster::ClusterMap;
use map::placement::OsdId;
use messenger::message::{OsdReply, OsdRequest};
use messenger::{Connection, DataSegment, Endpoint, EntityName, Mode, SegmentCheck};
use tokio::sync::watch;

use crate::PEER_TIMEOUT;

pub type Call<'a> = Pin<Box<dyn Future<Output = Result<(OsdReply, Bytes), String>> + Send + 'a>>;

pub trait PeerNet: Send + Sync + 'static {
    /// Sends `request` (with `data` in its data segment) to OSD `osd` and returns its reply,
    /// or why there is none (unreachable, link lost, no answer within [`PEER_TIMEOUT`]).
    /// `check` is the segment check that chunks sealed at the edge arrived with (a client's
    /// write being replicated): they go on with it, not hashed again.
    fn call<'a>(
        &'a self,
        osd: OsdId,
        request: &'a OsdRequest,
        data: Bytes,
        check: Option<SegmentCheck>,
    ) -> Call<'a>;

    /// Whether requests started to `osd` still wait for a task of this OSD's own to send
    /// them (its link's writer task, when other frames are in flight there).
    fn sends_waiting(&self, osd: OsdId) -> bool;
}

/// Peers over the messenger: one link per OSD, at the address the map gives, reopened when
/// it closes or the OSD moves.
pub struct MessengerNet {
    pub endpoint: Endpoint,
    pub modes: Vec<Mode>,
    pub map: watch::Receiver<Arc<ClusterMap>>,
    /// Held only to look up or insert, never across an await: a PG's writer starts its
    /// replicas' calls and may then apply a write before it polls them again, and a call
    /// queued for an async lock meanwhile would hold every other call up.
    pub links: std::sync::Mutex<HashMap<OsdId, (String, Connection)>>,
}

impl MessengerNet {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<OsdId, (String, Connection)>> {
        // A panic while holding it leaves the table whole: take it anyway.
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn connection(&self, osd: OsdId) -> Result<Connection, String> {
        let addr = self
            .map
            .borrow()
            .osds
            .get(&osd)
            .and_then(|o| o.addr.clone())
            .ok_or_else(|| format!("osd.{} has no address in the map", osd.0))?;
        if let Some((known, conn)) = self.table().get(&osd) {
            if *known == addr && !conn.is_closed() {
                return Ok(conn.clone());
            }
        }
        // Connect without holding the table: one unreachable OSD must not stall the others.
        let socket: SocketAddr = addr
            .parse()
            .map_err(|e| format!("osd.{} address {addr:?}: {e}", osd.0))?;
        let conn = self
            .endpoint
            .connect(socket, &EntityName::osd(osd.0), &self.modes)
            .await
            .map_err(|e| format!("connecting to osd.{}: {e}", osd.0))?;
        self.table().insert(osd, (addr, conn.clone()));
        Ok(conn)
    }
}

impl PeerNet for MessengerNet {
    fn call<'a>(
        &'a self,
        osd: OsdId,
        request: &'a OsdRequest,
        data: Bytes,
        check: Option<SegmentCheck>,
    ) -> Call<'a> {
        Box::pin(async move {
            let conn = self.connection(osd).await?;
            let segment = match (request.data_is_sealed(), check) {
                (false, _) => DataSegment::Plain,
                (true, None) => DataSegment::Sealed,
                (true, Some(check)) => DataSegment::PassedOn(check),
            };
            match tokio::time::timeout(PEER_TIMEOUT, conn.request_with(request, data, segment))
                .await
            {
                Ok(Ok(reply)) => Ok(reply),
                Ok(Err(e)) => Err(format!("osd.{}: {e}", osd.0)),
                Err(_) => Err(format!(
                    "osd.{} did not answer within {PEER_TIMEOUT:?}",
                    osd.0
                )),
            }
        })
    }

    fn sends_waiting(&self, osd: OsdId) -> bool {
        // Not asked under the table's lock: the link's own lock may be held by a socket write.
        let conn = self.table().get(&osd).map(|(_, conn)| conn.clone());
        conn.is_some_and(|conn| conn.writer_busy())
    }
}
