//! Setting a link up (TLS 1.3 with both ends authenticated, then the hello exchange that
//! names the client and picks the mode) and moving frames over it.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::endpoint::Endpoint;
use crate::entity::{EntityName, Mode, ModePolicy};
use crate::error::{ConnectError, ReadError};
use crate::frame::{Header, HEADER_BYTES};
use crate::identity::{cert_names, server_name};

const PROTOCOL_VERSION: u16 = 1;
/// Largest hello or answer; the exchange carries names and modes only.
const HELLO_BYTES_MAX: usize = 4096;
/// Frames are coalesced into writes of up to this size; larger segments go straight through.
const WRITE_BUFFER_BYTES: usize = 64 << 10;

#[derive(Serialize, Deserialize)]
struct Hello {
    version: u16,
    entity: EntityName,
    modes: Vec<Mode>,
}

#[derive(Serialize, Deserialize)]
enum Answer {
    Welcome { entity: EntityName, mode: Mode },
    Refuse { reason: String },
}

pub(crate) type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
pub(crate) type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// An authenticated link, split for one reader and one writer.
pub(crate) struct Link {
    pub reader: BoxRead,
    pub writer: BoxWrite,
    pub mode: Mode,
}

/// One frame queued for the writer.
pub(crate) struct Outgoing {
    pub header: [u8; HEADER_BYTES],
    pub meta: Bytes,
    pub data: Bytes,
}

async fn write_msg<W, T>(writer: &mut W, message: &T) -> std::io::Result<()>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    let body = postcard::to_allocvec(message).map_err(std::io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(std::io::Error::other)?;
    writer.write_all(&len.to_le_bytes()).await?;
    writer.write_all(&body).await?;
    writer.flush().await
}

async fn read_msg<R, T>(reader: &mut R) -> Result<T, ConnectError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    let mut len = [0u8; 4];
    reader
        .read_exact(&mut len)
        .await
        .map_err(ConnectError::Io)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > HELLO_BYTES_MAX {
        return Err(ConnectError::Protocol(format!("hello of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    reader
        .read_exact(&mut body)
        .await
        .map_err(ConnectError::Io)?;
    postcard::from_bytes(&body).map_err(|e| ConnectError::Protocol(format!("hello: {e}")))
}

/// In crc mode the link leaves TLS after the answer. Nothing may be left in TLS's buffers:
/// the protocol guarantees it (no tickets, and neither side sends again until the other has
/// switched), and this checks it.
fn check_drained(reader: &mut dyn std::io::Read) -> Result<(), ConnectError> {
    let mut probe = [0u8; 1];
    match reader.read(&mut probe) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        Ok(0) => Ok(()),
        Ok(_) => Err(ConnectError::Protocol(
            "data followed the switch to crc mode".into(),
        )),
        Err(e) => Err(ConnectError::Protocol(format!(
            "switching to crc mode: {e}"
        ))),
    }
}

fn plain_link(tcp: TcpStream) -> Link {
    let (reader, writer) = tcp.into_split();
    Link {
        reader: Box::new(reader),
        writer: Box::new(writer),
        mode: Mode::Crc,
    }
}

fn secure_link<S>(stream: S) -> Link
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (reader, writer) = tokio::io::split(stream);
    Link {
        reader: Box::new(reader),
        writer: Box::new(writer),
        mode: Mode::Secure,
    }
}

pub(crate) async fn connect(
    endpoint: &Endpoint,
    addr: SocketAddr,
    peer: &EntityName,
    modes: &[Mode],
) -> Result<Link, ConnectError> {
    let tcp = TcpStream::connect(addr).await.map_err(ConnectError::Io)?;
    tcp.set_nodelay(true).map_err(ConnectError::Io)?;
    let name = server_name(peer).map_err(ConnectError::Protocol)?;
    let connector = tokio_rustls::TlsConnector::from(endpoint.client_tls());
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(ConnectError::Tls)?;
    let hello = Hello {
        version: PROTOCOL_VERSION,
        entity: endpoint.entity().clone(),
        modes: modes.to_vec(),
    };
    write_msg(&mut tls, &hello)
        .await
        .map_err(ConnectError::Io)?;
    match read_msg(&mut tls).await? {
        Answer::Refuse { reason } => Err(ConnectError::Refused(reason)),
        Answer::Welcome { entity, .. } if entity != *peer => Err(ConnectError::Protocol(format!(
            "expected {peer}, the peer says it is {entity}"
        ))),
        Answer::Welcome { mode, .. } if !modes.contains(&mode) => Err(ConnectError::Protocol(
            format!("the peer chose mode {mode}, which was not offered"),
        )),
        Answer::Welcome {
            mode: Mode::Secure, ..
        } => Ok(secure_link(tls)),
        Answer::Welcome {
            mode: Mode::Crc, ..
        } => {
            let (tcp, mut session) = tls.into_inner();
            check_drained(&mut session.reader())?;
            Ok(plain_link(tcp))
        }
    }
}

/// What the server learned about its peer during the handshake.
pub(crate) struct Accepted {
    pub entity: EntityName,
    pub link: Link,
}

/// The server's side of the handshake. `authorize` sees the claimed entity and its
/// certificate (already checked to chain to the cluster and to name that entity).
pub(crate) async fn accept(
    endpoint: &Endpoint,
    tcp: TcpStream,
    modes: &ModePolicy,
    authorize: impl FnOnce(&EntityName, &rustls::pki_types::CertificateDer<'_>) -> Result<(), String>,
) -> Result<Accepted, ConnectError> {
    tcp.set_nodelay(true).map_err(ConnectError::Io)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(endpoint.server_tls());
    let mut tls = acceptor.accept(tcp).await.map_err(ConnectError::Tls)?;
    let hello: Hello = read_msg(&mut tls).await?;
    let cert = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .cloned()
        .ok_or_else(|| ConnectError::Protocol("no client certificate".into()))?;
    let verdict = if hello.version != PROTOCOL_VERSION {
        Err(format!(
            "protocol version {} is not supported (this peer speaks {PROTOCOL_VERSION})",
            hello.version
        ))
    } else {
        cert_names(&cert, &hello.entity)
            .map_err(|e| format!("the certificate is not for {}: {e}", hello.entity))
            .and_then(|()| authorize(&hello.entity, &cert))
            .and_then(|()| {
                let allowed = modes.for_peer(&hello.entity);
                allowed
                    .iter()
                    .copied()
                    .find(|m| hello.modes.contains(m))
                    .ok_or_else(|| {
                        format!(
                            "no common link mode: this peer allows {allowed:?} for {}, offered {:?}",
                            hello.entity.kind().as_str(),
                            hello.modes
                        )
                    })
            })
    };
    let mode = match verdict {
        Ok(mode) => mode,
        Err(reason) => {
            write_msg(
                &mut tls,
                &Answer::Refuse {
                    reason: reason.clone(),
                },
            )
            .await
            .map_err(ConnectError::Io)?;
            // A failed shutdown changes nothing: the link is refused either way.
            let _ = tls.shutdown().await;
            return Err(ConnectError::Refused(format!("{}: {reason}", hello.entity)));
        }
    };
    let answer = Answer::Welcome {
        entity: endpoint.entity().clone(),
        mode,
    };
    write_msg(&mut tls, &answer)
        .await
        .map_err(ConnectError::Io)?;
    let link = match mode {
        Mode::Secure => secure_link(tls),
        Mode::Crc => {
            let (tcp, mut session) = tls.into_inner();
            check_drained(&mut session.reader())?;
            plain_link(tcp)
        }
    };
    Ok(Accepted {
        entity: hello.entity,
        link,
    })
}

/// Reads one frame. An idle link may wait forever for the first byte; once a frame has
/// started, all of it must arrive within `frame_timeout` (a peer too slow is cut off).
/// `Ok(None)` is a clean close between frames.
pub(crate) async fn read_frame(
    reader: &mut BoxRead,
    mode: Mode,
    frame_timeout: Duration,
) -> Result<Option<(Header, Bytes, Bytes)>, ReadError> {
    let mut header = [0u8; HEADER_BYTES];
    let first = reader.read(&mut header).await?;
    if first == 0 {
        return Ok(None);
    }
    let rest = async {
        reader.read_exact(&mut header[first..]).await?;
        let header = Header::decode(&header)?;
        let meta = read_segment(reader, header.meta_len as usize).await?;
        let data = read_segment(reader, header.data_len as usize).await?;
        header.check_body(&meta, &data, mode)?;
        Ok::<_, ReadError>((header, meta, data))
    };
    match tokio::time::timeout(frame_timeout, rest).await {
        Ok(frame) => frame.map(Some),
        Err(_) => Err(ReadError::Timeout(frame_timeout)),
    }
}

/// Reads exactly `len` bytes into fresh, uninitialised memory (no zeroing pass).
async fn read_segment(reader: &mut BoxRead, len: usize) -> std::io::Result<Bytes> {
    let mut segment = BytesMut::with_capacity(len);
    while segment.len() < len {
        let want = (len - segment.len()) as u64;
        if (&mut *reader).take(want).read_buf(&mut segment).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(segment.freeze())
}

/// Writes queued frames until every sender is gone, then closes the write side. Frames that
/// queue up while one is written go out together, with one flush.
pub(crate) async fn write_frames(
    writer: BoxWrite,
    mut queue: mpsc::UnboundedReceiver<Outgoing>,
) -> std::io::Result<()> {
    let mut writer = BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer);
    while let Some(frame) = queue.recv().await {
        write_one(&mut writer, frame).await?;
        while let Ok(frame) = queue.try_recv() {
            write_one(&mut writer, frame).await?;
        }
        writer.flush().await?;
    }
    writer.shutdown().await
}

async fn write_one(writer: &mut BufWriter<BoxWrite>, frame: Outgoing) -> std::io::Result<()> {
    writer.write_all(&frame.header).await?;
    writer.write_all(&frame.meta).await?;
    writer.write_all(&frame.data).await
}
