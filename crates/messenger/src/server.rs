//! The server side of links: accept, authenticate, then serve each request on its own task
//! and send the replies as they finish.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use rustls::pki_types::CertificateDer;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use crate::data::Data;
use crate::endpoint::Endpoint;
use crate::entity::ModePolicy;
use crate::entity::{EntityName, Mode};
use crate::error::ConnectError;
use crate::frame::{Header, Kind, Segment, DATA_BYTES_MAX, META_BYTES_MAX};
use crate::link::{self, Received};
use crate::outbox::{self, Outgoing};
use crate::protect::SegmentCheck;

/// An authenticated peer, as the handler sees it.
pub struct Peer<G> {
    pub entity: EntityName,
    pub addr: SocketAddr,
    pub mode: Mode,
    /// What [`Handler::authorize`] granted this peer (its capabilities).
    pub grant: G,
}

pub struct Request {
    pub meta: Bytes,
    pub data: Bytes,
    /// The check an open data segment passed on a secure link: chunks sealed at the edge,
    /// which an OSD passes on with their data when it replicates them.
    pub check: Option<SegmentCheck>,
}

impl Request {
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, postcard::Error> {
        postcard::from_bytes(&self.meta)
    }
}

pub struct Reply {
    pub meta: Bytes,
    pub data: Data,
    /// How the data crosses a secure link: `Open` or `Bound` when it is chunks already
    /// sealed by a client (docs/design/edge-sealing.md).
    pub segment: Segment,
}

impl Reply {
    pub fn new<T: Serialize>(message: &T, data: impl Into<Data>) -> Self {
        Reply::with(message, data, Segment::Inside)
    }

    /// A reply whose data crosses a secure link as `segment` says.
    pub fn with<T: Serialize>(message: &T, data: impl Into<Data>, segment: Segment) -> Self {
        let meta = postcard::to_allocvec(message)
            .unwrap_or_else(|e| panic!("encoding a reply cannot fail for serde types: {e}"));
        Reply {
            meta: Bytes::from(meta),
            data: data.into(),
            segment,
        }
    }
}

/// What a server does with authenticated peers and their requests.
pub trait Handler: Send + Sync + 'static {
    /// What an accepted peer is allowed; kept with the peer for every request.
    type Grant: Send + Sync + 'static;

    /// Decides whether `entity`, proven by `cert` (checked to chain to the cluster authority
    /// and to name `entity`), may use this server. The reason for a refusal goes back to the
    /// peer.
    fn authorize(
        &self,
        entity: &EntityName,
        cert: &CertificateDer<'_>,
    ) -> Result<Self::Grant, String>;

    fn handle(
        &self,
        peer: Arc<Peer<Self::Grant>>,
        request: Request,
    ) -> impl std::future::Future<Output = Reply> + Send;
}

/// A running server; dropping it stops accepting and closes every link it accepted.
pub struct Server {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and closes every link, and returns once the listening socket is closed
    /// (so that the address can be bound again).
    pub async fn shutdown(mut self) {
        self.task.abort();
        // The task ends cancelled; that is the point.
        let _ = (&mut self.task).await;
    }
}

impl Endpoint {
    /// Serves `handler` on `listener`, accepting the modes that `modes` allows each kind of
    /// peer (a `Vec<Mode>` allows the same to every peer), in order of this server's
    /// preference.
    pub fn serve<H: Handler>(
        &self,
        listener: TcpListener,
        modes: impl Into<ModePolicy>,
        handler: Arc<H>,
    ) -> std::io::Result<Server> {
        let addr = listener.local_addr()?;
        let endpoint = self.clone();
        let modes = Arc::new(modes.into());
        let task = tokio::spawn(async move {
            let mut links = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((tcp, peer_addr)) => {
                            links.spawn(serve_link(endpoint.clone(), tcp, peer_addr, modes.clone(), handler.clone()));
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        }
                    },
                    Some(_) = links.join_next() => {}
                }
            }
        });
        Ok(Server { addr, task })
    }
}

async fn serve_link<H: Handler>(
    endpoint: Endpoint,
    tcp: TcpStream,
    addr: SocketAddr,
    modes: Arc<ModePolicy>,
    handler: Arc<H>,
) {
    let limits = endpoint.limits();
    let mut grant = None;
    let handshake = link::accept(&endpoint, tcp, &modes, |entity, cert| {
        grant = Some(handler.authorize(entity, cert)?);
        Ok(())
    });
    let accepted = match tokio::time::timeout(limits.handshake_timeout, handshake).await {
        Ok(Ok(accepted)) => accepted,
        Ok(Err(e)) => {
            crate::metrics::handshake_failed(&e);
            tracing::info!(%addr, error = %e, "link refused");
            return;
        }
        Err(_) => {
            let e = ConnectError::Timeout(limits.handshake_timeout);
            crate::metrics::handshake_failed(&e);
            tracing::info!(%addr, error = %e, "link refused");
            return;
        }
    };
    let Some(grant) = grant else {
        unreachable!("an accepted link was authorized");
    };
    let link::Accepted { entity, link, .. } = accepted;
    let mode = link.mode;
    tracing::debug!(%addr, peer = %entity, %mode, "link up");
    let peer = Arc::new(Peer {
        entity,
        addr,
        mode,
        grant,
    });
    let (queue, writer) = outbox::outbox(link.writer);
    let writer = writer.run();
    let mut reader = link.reader;
    let slots = Arc::new(Semaphore::new(limits.in_flight_max));
    let read_requests = async move {
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                unreachable!("the semaphore is never closed");
            };
            match link::read_frame(&mut reader, limits.frame_timeout).await {
                Ok(Some(Received { header, .. })) if header.segment == Segment::Bound => {
                    tracing::warn!(peer = %peer.entity, "peer sent data bound only by chunk records, which a server cannot check; closing");
                    return;
                }
                Ok(Some(Received {
                    header,
                    meta,
                    data,
                    check,
                })) if header.kind == Kind::Request => {
                    let responder = Responder {
                        queue: Some(queue.clone()),
                        tag: header.tag,
                        mode,
                        _slot: slot,
                    };
                    let handler = handler.clone();
                    let peer = peer.clone();
                    tokio::spawn(async move {
                        let request = Request { meta, data, check };
                        let reply = handler.handle(peer, request).await;
                        responder.send(reply);
                    });
                }
                Ok(Some(Received { header, .. })) => {
                    tracing::warn!(peer = %peer.entity, kind = ?header.kind, "peer sent a frame that is not a request; closing");
                    return;
                }
                Ok(None) => return,
                // A peer that exits without a TLS close_notify (any killed or finished
                // process) is an ordinary end of link.
                Err(crate::error::ReadError::Io(e))
                    if e.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    tracing::debug!(peer = %peer.entity, error = %e, "peer went away");
                    return;
                }
                Err(e) => {
                    tracing::warn!(peer = %peer.entity, error = %e, "closing link");
                    return;
                }
            }
        }
    };
    let (_, written) = tokio::join!(read_requests, writer);
    if let Err(e) = written {
        tracing::debug!(%addr, error = %e, "link write side ended");
    }
}

/// Sends exactly one answer per request: the reply, or `Refused` if the handler never
/// produced one (it panicked, or its reply broke the frame limits).
struct Responder {
    queue: Option<outbox::Sender>,
    tag: u64,
    mode: Mode,
    _slot: OwnedSemaphorePermit,
}

impl Responder {
    fn send(mut self, reply: Reply) {
        let fits = reply.meta.len() <= META_BYTES_MAX as usize
            && reply.data.len() <= DATA_BYTES_MAX as usize;
        if fits {
            self.push(Kind::Reply, reply.meta, reply.data, reply.segment);
        } else {
            self.push(
                Kind::Refused,
                Bytes::from_static(b"reply exceeds the frame limits"),
                Data::default(),
                Segment::Inside,
            );
        }
    }

    fn push(&mut self, kind: Kind, meta: Bytes, data: Data, segment: Segment) {
        if let Some(queue) = self.queue.take() {
            let header = Header::for_body(kind, self.tag, &meta, &data, self.mode, segment);
            let frame = Outgoing {
                header,
                meta,
                data,
                check: None,
            };
            // Replies go to the writer task, which sends those that finish together in one
            // system call: a server cannot tell whether another is about to finish (a
            // quick read's reply often finds the others still being handled), and at high
            // queue depths writing each where it is made cost a sixth of small reads'
            // rate (docs/benchmarks.md, 2026-12-03). The link may have closed meanwhile;
            // then there is nobody to answer.
            let _ = queue.send(frame, false);
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.push(
            Kind::Refused,
            Bytes::from_static(b"the request handler failed"),
            Data::default(),
            Segment::Inside,
        );
    }
}
