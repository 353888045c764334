//! The NBD export of one image, over TCP or a Unix socket: fixed newstyle negotiation
//! ([`negotiate`]), then transmission with many requests in flight per connection
//! ([`transmit`]). Any client of the NBD protocol works: fio's nbd engine, qemu-img and
//! qemu, nbdcopy and nbdinfo, the kernel's nbd-client.
//!
//! Every write is durable on every copy when it is acknowledged, so `FLUSH` and `FUA` cost
//! nothing, and several connections may share the image (`CAN_MULTI_CONN`): a flush on any
//! of them covers the writes completed on all of them.
//!
//! With a certificate ([`TlsPolicy`]), clients may upgrade a connection to TLS (1.3 or 1.2) with
//! `STARTTLS` (rustls), as `nbds://` URIs do; where TLS is required, nothing is served
//! without it.

#[cfg(any(test, fuzzing))]
pub mod fuzz;
mod negotiate;
mod transmit;
pub mod wire;

use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock, Semaphore};

use crate::error::Error;
use crate::image::Image;

pub use negotiate::{Tls, NEGOTIATION_TIMEOUT, PAYLOAD_BYTES_MAX};
pub use transmit::{BYTES_IN_FLIGHT_MAX, REQUESTS_IN_FLIGHT_MAX};

/// Connections one export serves at once; more are closed as they arrive.
pub const CONNECTIONS_MAX: usize = 64;

/// The NBD error number for a failed image operation.
pub fn errno(e: &Error) -> u32 {
    match e {
        Error::OutOfRange { .. } | Error::Invalid(_) => wire::EINVAL,
        Error::ReadOnly { .. } | Error::LockLost { .. } => wire::EPERM,
        Error::Cluster {
            source: client::Error::Denied(_),
            ..
        } => wire::EPERM,
        Error::Cluster {
            source: client::Error::NoSpace(_),
            ..
        } => wire::ENOSPC,
        // A damaged block with no good copy: a medium error, as a disk reports one.
        Error::Cluster {
            source: client::Error::Integrity(_),
            ..
        } => wire::EIO,
        Error::NoSuchImage { .. }
        | Error::Exists { .. }
        | Error::Locked { .. }
        | Error::Header { .. }
        | Error::Cluster { .. } => wire::EIO,
    }
}

/// One image, exported under its name.
pub struct Export {
    pub image: Arc<Image>,
    /// The export's name; clients may also ask for the default export (the empty name).
    pub name: String,
    /// Held shared by every request in flight; [`Export::drain`] takes it exclusively.
    gate: Arc<RwLock<()>>,
    connections: Arc<Semaphore>,
}

impl Export {
    pub fn new(image: Arc<Image>, name: &str) -> Arc<Export> {
        Arc::new(Export {
            image,
            name: name.into(),
            gate: Arc::new(RwLock::new(())),
            connections: Arc::new(Semaphore::new(CONNECTIONS_MAX)),
        })
    }

    /// What negotiation offers a client: the image as it is now.
    fn offer(&self) -> negotiate::Offer<'_> {
        negotiate::Offer {
            name: &self.name,
            description: self.image.spec(),
            size_bytes: self.image.size(),
            read_only: self.image.is_read_only(),
        }
    }

    /// A share of the gate for one request; `None` once the export is draining.
    async fn enter(&self) -> Option<OwnedRwLockReadGuard<()>> {
        if self.connections.is_closed() {
            return None;
        }
        Some(self.gate.clone().read_owned().await)
    }

    /// Stops new connections and requests, and waits for every request in flight to finish.
    /// While the returned guard lives, no request of this export can start: hold it until
    /// the image's lock is released.
    pub async fn drain(&self) -> OwnedRwLockWriteGuard<()> {
        self.connections.close();
        self.gate.clone().write_owned().await
    }
}

/// Whether connections may, or must, go over TLS.
#[derive(Clone)]
pub struct TlsPolicy {
    /// The server's certificate and key; `None`: plaintext only.
    pub acceptor: Option<tokio_rustls::TlsAcceptor>,
    /// Nothing is served without TLS.
    pub required: bool,
}

impl TlsPolicy {
    pub const PLAIN: TlsPolicy = TlsPolicy {
        acceptor: None,
        required: false,
    };

    fn before_handshake(&self) -> Tls {
        match (&self.acceptor, self.required) {
            (None, _) => Tls::Off,
            (Some(_), false) => Tls::Offered,
            (Some(_), true) => Tls::Required,
        }
    }
}

/// Serves `export` to every client that connects to `listener`, until the listener fails.
pub async fn serve_tcp(
    listener: TcpListener,
    export: Arc<Export>,
    tls: TlsPolicy,
) -> std::io::Result<()> {
    assert!(
        !tls.required || tls.acceptor.is_some(),
        "TLS required without a certificate"
    );
    loop {
        let (stream, peer) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let export = export.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let (reader, writer) = stream.into_split();
            connection(reader, writer, export, peer.to_string(), tls).await;
        });
    }
}

/// Serves `export` on a Unix socket.
pub async fn serve_unix(
    listener: UnixListener,
    export: Arc<Export>,
    tls: TlsPolicy,
) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let export = export.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let (reader, writer) = stream.into_split();
            connection(reader, writer, export, "unix socket".into(), tls).await;
        });
    }
}

async fn connection<R, W>(reader: R, writer: W, export: Arc<Export>, peer: String, tls: TlsPolicy)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let Ok(_slot) = export.connections.clone().try_acquire_owned() else {
        tracing::warn!(%peer, "refusing a connection: {CONNECTIONS_MAX} already open or draining");
        return;
    };
    let deadline = tokio::time::Instant::now() + NEGOTIATION_TIMEOUT;
    let mut stream = tokio::io::join(reader, writer);
    let plain = negotiate::within(deadline, async {
        let no_zeroes = negotiate::greet(&mut stream).await?;
        let outcome = negotiate::options(
            &mut stream,
            &export.offer(),
            no_zeroes,
            tls.before_handshake(),
        )
        .await?;
        Ok((no_zeroes, outcome))
    })
    .await;
    match plain {
        Ok((_, negotiate::Outcome::Transmit(session))) => {
            let (reader, writer) = stream.into_inner();
            serve(reader, writer, &export, session, &peer, false).await;
        }
        Ok((no_zeroes, negotiate::Outcome::StartTls)) => {
            let acceptor = tls
                .acceptor
                .expect("STARTTLS is acknowledged only with a certificate");
            let secured = negotiate::within(deadline, async {
                let mut secure = acceptor.accept(stream).await?;
                let outcome =
                    negotiate::options(&mut secure, &export.offer(), no_zeroes, Tls::Active)
                        .await?;
                Ok((secure, outcome))
            })
            .await;
            match secured {
                Ok((secure, negotiate::Outcome::Transmit(session))) => {
                    let (reader, writer) = tokio::io::split(secure);
                    serve(reader, writer, &export, session, &peer, true).await;
                }
                Ok(_) => {}
                Err(e) => tracing::info!(%peer, "negotiation inside TLS ended: {e}"),
            }
        }
        Ok((_, negotiate::Outcome::Closed)) => {}
        Err(e) => tracing::info!(%peer, "negotiation ended: {e}"),
    }
}

/// Transmission on a negotiated connection, until the client leaves.
async fn serve<R, W>(
    reader: R,
    writer: W,
    export: &Arc<Export>,
    session: negotiate::Session,
    peer: &str,
    tls: bool,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    tracing::info!(
        %peer,
        image = export.image.spec(),
        structured_replies = session.structured_replies,
        tls,
        "client connected"
    );
    let stats = Arc::new(transmit::Stats::default());
    let started = Instant::now();
    let _client = crate::metrics::Client::connected();
    transmit::transmit(reader, writer, export.clone(), session, stats.clone()).await;
    tracing::info!(%peer, "client disconnected");
    tracing::debug!(
        %peer,
        "connection throughput: {}",
        stats.summary(started.elapsed().as_secs_f64())
    );
}
