//! An OSD without its daemon's shell: the same service, replication, peering and recovery
//! code as [`crate::Osd`], but the map is handed to it, requests are handed to it, peers are
//! reached through a given [`PeerNet`], and store work runs inline instead of on tokio's
//! blocking pool. The simulator (crates/sim) runs several on one thread, under virtual time,
//! so that a seed decides every interleaving.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use map::cluster::ClusterMap;
use map::placement::{OsdId, PgId};
use map::ObjectName;
use messenger::message::{AuthTable, LogEntry, OsdReply, OsdRequest, PgInfo, PgState};
use store::Store;
use tokio::sync::watch;

use crate::service::{Caller, OsdService};
use crate::{first_token, Incarnation, OsdState, PeerNet, StoreCalls};

/// How many times [`Node::stop`] lets the runtime run before it gives up waiting for the
/// node's aborted tasks to let go of it.
const STOP_YIELDS_MAX: usize = 10_000;

/// Clones are the same node.
#[derive(Clone)]
pub struct Node {
    service: OsdService,
}

impl Node {
    /// An OSD over `store`, at `map`, peering the PGs the map gives it, started
    /// `since_start` after the simulation began (its recovery tokens start from there, above any an
    /// earlier run of it drew). Must be called inside a tokio runtime.
    pub fn new(
        id: OsdId,
        store: Store,
        net: Arc<dyn PeerNet>,
        map: ClusterMap,
        since_start: Duration,
    ) -> Node {
        let map = Arc::new(map);
        let incarnation = Incarnation {
            store_calls: StoreCalls::Inline,
            first_token: first_token(since_start),
        };
        let inner = Arc::new(OsdState::new(
            id,
            store,
            incarnation,
            watch::Sender::new(map.clone()),
            AuthTable::default(),
            net,
            format!("node osd.{}", id.0),
        ));
        inner.on_map(&map);
        Node {
            service: OsdService { inner },
        }
    }

    pub fn id(&self) -> OsdId {
        self.service.inner.id
    }

    /// Takes `map` if it is newer than the one this node has, and peers what it changed.
    pub fn set_map(&self, map: ClusterMap) {
        let inner = &self.service.inner;
        if map.epoch <= inner.map.borrow().epoch {
            return;
        }
        let map = Arc::new(map);
        inner.map.send_replace(map.clone());
        inner.on_map(&map);
    }

    /// Serves `request` from `caller` as the daemon's messenger would hand it over; the
    /// reply's data as its receiver gets it, in one buffer.
    pub async fn serve(
        &self,
        caller: &Caller,
        request: OsdRequest,
        data: Bytes,
    ) -> (OsdReply, Bytes) {
        let reply = self.service.serve(caller, request, data, None).await;
        let message = postcard::from_bytes(&reply.meta)
            .unwrap_or_else(|e| OsdReply::Failed(format!("the OSD's reply does not decode: {e}")));
        (message, reply.data.joined())
    }

    /// Runs `task` as this node's own: [`Node::stop`] ends it.
    pub fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.service.inner.spawn(task);
    }

    /// The state of every PG this node leads.
    pub fn led(&self) -> Vec<(PgId, PgState)> {
        self.service.inner.led()
    }

    /// What this node's copy of `pg` holds: its info and log, read from its store if the
    /// PG is not loaded yet.
    pub async fn log(&self, pg: PgId) -> Result<(PgInfo, Vec<LogEntry>), String> {
        let inner = &self.service.inner;
        let held = inner.pg(pg);
        let mut core = held.core.lock().await;
        inner.load(&mut core, pg).await?;
        Ok((core.info, core.log.iter().cloned().collect()))
    }

    /// The versions of the undo records this OSD's shard of `object` (in `pg`) keeps.
    pub async fn undo_versions(&self, pg: PgId, object: &ObjectName) -> Result<Vec<u64>, String> {
        let object = crate::objects::object_ref(pg, object);
        self.service
            .inner
            .blocking(move |store| store.undo_versions(&object))
            .await?
            .map_err(|e| e.to_string())
    }

    /// Stops the node as `kill -9` would: every task of it ends at its next await, and what
    /// its store committed stays. Returns once the store is closed, so it can be opened
    /// again; every other clone of this node must be in one of its tasks, or dropped.
    pub async fn stop(self) {
        let inner = self.service.inner;
        inner.abort_tasks();
        let store = Arc::downgrade(&inner.store);
        drop(inner);
        for _ in 0..STOP_YIELDS_MAX {
            if store.strong_count() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("a stopped node's tasks still hold its store");
    }
}
