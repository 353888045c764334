//! Setting a link up (TLS 1.3 with both ends authenticated, then the hello exchange that
//! names the client and picks the mode) and moving frames over it.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

use crate::endpoint::Endpoint;
use crate::entity::{EntityName, Mode, ModePolicy};
use crate::error::{ConnectError, ReadError};
use crate::frame::{
    BodyDigest, FrameError, Header, Segment, DATA_BYTES_MAX, HEADER_BYTES, META_BYTES_MAX,
};
use crate::identity::{cert_names, server_name};
use crate::metrics::Meter;
use crate::protect::{
    FrameKey, FrameKeys, SegmentCheck, BOUND_BIT, CHECK_BYTES, PREFIX_BYTES, TAG_BYTES,
};

pub(crate) const PROTOCOL_VERSION: u16 = 12;
/// Largest hello or answer; the exchange carries names and modes only.
const HELLO_BYTES_MAX: usize = 4096;
/// Reads from the socket fill a buffer of this size, so a small frame (a 4 KiB write, a
/// reply) arrives in one system call rather than one per part (prefix, sealed part, data);
/// reads at least this long go straight into the segment.
const RECEIVE_BUFFER_BYTES: usize = 64 << 10;
/// A segment is read from the socket at most this many bytes at a time, each piece checked
/// as soon as it is read, while it is in the CPU's cache (a core's L2 holds 0.5 to 1.25 MiB
/// on these machines); checked in one pass over a whole 4 MiB segment, the bytes came back
/// from memory.
pub const RECEIVE_PIECE_BYTES: usize = 256 << 10;
/// Data segments from `ALIGNED_SEGMENT_BYTES_MIN` long are received at an address that is a
/// multiple of this, so a store writes their whole blocks with direct IO from where they are,
/// without a copy. Shorter ones are not worth the longer allocation (a copy of a few blocks
/// costs less).
pub(crate) const SEGMENT_ALIGN_BYTES: usize = 4096;
pub(crate) const ALIGNED_SEGMENT_BYTES_MIN: usize = 64 << 10;

#[derive(Serialize, Deserialize)]
pub(crate) struct Hello {
    pub version: u16,
    pub entity: EntityName,
    pub modes: Vec<Mode>,
}

#[derive(Serialize, Deserialize)]
pub(crate) enum Answer {
    Welcome { entity: EntityName, mode: Mode },
    Refuse { reason: String },
}

pub(crate) type BoxRead = Box<dyn AsyncRead + Send + Unpin>;

/// An authenticated link, split for one reader and one writer.
pub(crate) struct Link {
    pub reader: FrameReader,
    pub writer: FrameWriter,
    pub mode: Mode,
}

/// The read side of a link: the byte stream, and in secure mode the key that opens the
/// peer's frames.
pub(crate) struct FrameReader {
    pub stream: BoxRead,
    pub(crate) key: Option<FrameKey>,
    pub(crate) meter: Meter,
}

/// The write side of a link: the socket, and in secure mode the key that protects this
/// end's frames.
pub(crate) struct FrameWriter {
    pub stream: OwnedWriteHalf,
    pub(crate) key: Option<FrameKey>,
    pub(crate) meter: Meter,
}

/// One frame read: its header and segments, and the check its open segment passed (on a
/// secure link).
pub(crate) struct Received {
    pub header: Header,
    pub meta: Bytes,
    pub data: Bytes,
    pub check: Option<SegmentCheck>,
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

/// The hello a connecting peer sends, read as [`accept`] reads it.
pub(crate) async fn read_hello<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> Result<Hello, ConnectError> {
    read_msg(reader).await
}

/// The server's answer to a hello, read as [`connect`] reads it.
pub(crate) async fn read_answer<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> Result<Answer, ConnectError> {
    read_msg(reader).await
}

/// Checks that TLS holds no plaintext the peer sent after its last handshake message.
fn check_drained(reader: &mut dyn std::io::Read) -> Result<(), ConnectError> {
    let mut probe = [0u8; 1];
    match reader.read(&mut probe) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        Ok(0) => Ok(()),
        Ok(_) => Err(ConnectError::Protocol(
            "data followed the switch to frames".into(),
        )),
        Err(e) => Err(ConnectError::Protocol(format!("switching to frames: {e}"))),
    }
}

/// Leaves TLS once the hello is answered. Nothing may be left in TLS's buffers: the
/// protocol guarantees it (no tickets, and neither side sends again until the other has
/// switched), and `check_drained` checks it. In secure mode both ends then protect frames
/// with keys from the TLS exporter (docs/design/edge-sealing.md, "Links").
fn leave_tls<D>(
    tcp: TcpStream,
    session: &mut rustls::ConnectionCommon<D>,
    mode: Mode,
    client: bool,
) -> Result<Link, ConnectError> {
    check_drained(&mut session.reader())?;
    let (seal, open) = match mode {
        Mode::Crc => (None, None),
        Mode::Secure => {
            let keys = FrameKeys::export(session, client)
                .map_err(|e| ConnectError::Protocol(format!("exporting the frame keys: {e}")))?;
            (Some(keys.seal), Some(keys.open))
        }
    };
    let (reader, writer) = tcp.into_split();
    let (reading, writing) = crate::metrics::link(mode);
    Ok(Link {
        reader: FrameReader {
            stream: Box::new(tokio::io::BufReader::with_capacity(
                RECEIVE_BUFFER_BYTES,
                reader,
            )),
            key: open,
            meter: reading,
        },
        writer: FrameWriter {
            stream: writer,
            key: seal,
            meter: writing,
        },
        mode,
    })
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
    match read_answer(&mut tls).await? {
        Answer::Refuse { reason } => Err(ConnectError::Refused(reason)),
        Answer::Welcome { entity, .. } if entity != *peer => Err(ConnectError::Protocol(format!(
            "expected {peer}, the peer says it is {entity}"
        ))),
        Answer::Welcome { mode, .. } if !modes.contains(&mode) => Err(ConnectError::Protocol(
            format!("the peer chose mode {mode}, which was not offered"),
        )),
        Answer::Welcome { mode, .. } => {
            let (tcp, mut session) = tls.into_inner();
            leave_tls(tcp, &mut session, mode, true)
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
    let hello = read_hello(&mut tls).await?;
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
    let (tcp, mut session) = tls.into_inner();
    let link = leave_tls(tcp, &mut session, mode, false)?;
    Ok(Accepted {
        entity: hello.entity,
        link,
    })
}

/// Reads one frame. An idle link may wait forever for the first byte; once a frame has
/// started, all of it must arrive within `frame_timeout` (a peer too slow is cut off).
/// `Ok(None)` is a clean close between frames.
pub(crate) async fn read_frame(
    reader: &mut FrameReader,
    frame_timeout: Duration,
) -> Result<Option<Received>, ReadError> {
    let FrameReader { stream, key, meter } = reader;
    let mut start = [0u8; HEADER_BYTES];
    let want = if key.is_some() {
        PREFIX_BYTES
    } else {
        HEADER_BYTES
    };
    let first = stream.read(&mut start[..want]).await?;
    if first == 0 {
        return Ok(None);
    }
    let rest = async {
        stream.read_exact(&mut start[first..want]).await?;
        match key {
            None => {
                let header = Header::decode(&start)?;
                let mut body = BodyDigest::new();
                let mut digest = |piece: &[u8]| body.update(piece);
                let meta = read_segment(stream, header.meta_len as usize, &mut digest).await?;
                let data = read_data(stream, header.data_len as usize, &mut digest).await?;
                header.check_body(body)?;
                Ok::<_, ReadError>(Received {
                    header,
                    meta,
                    data,
                    check: None,
                })
            }
            Some(key) => read_protected(stream, key, &start[..PREFIX_BYTES]).await,
        }
    };
    let read = match tokio::time::timeout(frame_timeout, rest).await {
        Ok(frame) => frame,
        Err(_) => Err(ReadError::Timeout(frame_timeout)),
    };
    match read {
        Ok(frame) => {
            meter.frame(HEADER_BYTES + frame.meta.len() + frame.data.len());
            Ok(Some(frame))
        }
        Err(e) => {
            crate::metrics::link_failed(&e);
            Err(e)
        }
    }
}

/// The rest of a secure frame after its clear prefix: the protected part and its tag, then
/// the open segment, checked piece by piece as it arrives unless it is bound by chunk
/// records; the lengths are checked against the limits before anything is allocated.
async fn read_protected(
    stream: &mut BoxRead,
    key: &mut FrameKey,
    prefix: &[u8],
) -> Result<Received, ReadError> {
    let protected_len = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
    let open_word = u32::from_le_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]);
    let bound = open_word & BOUND_BIT != 0;
    let open_len = open_word & !BOUND_BIT;
    let protected_max =
        HEADER_BYTES + CHECK_BYTES + META_BYTES_MAX as usize + DATA_BYTES_MAX as usize;
    if !(HEADER_BYTES..=protected_max).contains(&protected_len) {
        return Err(FrameError::Lengths.into());
    }
    if open_len > DATA_BYTES_MAX {
        return Err(FrameError::DataTooLarge(open_len).into());
    }
    let sealed = read_segment(stream, protected_len + TAG_BYTES, &mut |_| ()).await?;
    let mut sealed = BytesMut::from(sealed);
    key.opening()
        .open(&mut sealed)
        .map_err(|_| FrameError::Unauthentic)?;
    metrics::crypto::opened(metrics::crypto::Kind::Link, protected_len);
    sealed.truncate(protected_len);
    let mut head = [0u8; HEADER_BYTES];
    head.copy_from_slice(&sealed[..HEADER_BYTES]);
    let header = Header::decode(&head)?;
    let travels_open = header.segment.travels_open();
    let checked = header.segment == Segment::Open;
    let inside = if travels_open { 0 } else { header.data_len };
    let check_len = if checked { CHECK_BYTES } else { 0 };
    let agrees = HEADER_BYTES + check_len + header.meta_len as usize + inside as usize
        == protected_len
        && (if travels_open { header.data_len } else { 0 }) == open_len
        && (header.segment == Segment::Bound) == bound;
    if !agrees {
        return Err(FrameError::Lengths.into());
    }
    let body = sealed.freeze();
    let meta_at = HEADER_BYTES + check_len;
    let meta_end = meta_at + header.meta_len as usize;
    let meta = body.slice(meta_at..meta_end);
    let (data, check) = if checked {
        let mut bytes = [0u8; CHECK_BYTES];
        bytes.copy_from_slice(&body[HEADER_BYTES..meta_at]);
        let check = SegmentCheck::decode(&bytes);
        let mut checking = check.checking();
        let data = read_data(stream, open_len as usize, &mut |piece| {
            checking.update(piece)
        })
        .await?;
        checking.finish().map_err(|_| FrameError::Unauthentic)?;
        (data, Some(check))
    } else if travels_open {
        (
            read_data(stream, open_len as usize, &mut |_| ()).await?,
            None,
        )
    } else {
        (body.slice(meta_end..), None)
    };
    Ok(Received {
        header,
        meta,
        data,
        check,
    })
}

/// Reads exactly `len` bytes into fresh, uninitialised memory (no zeroing pass).
async fn read_segment(
    reader: &mut BoxRead,
    len: usize,
    each: &mut impl FnMut(&[u8]),
) -> std::io::Result<Bytes> {
    read_into(reader, BytesMut::with_capacity(len), len, each).await
}

/// [`read_segment`] for a data segment: from `ALIGNED_SEGMENT_BYTES_MIN` long, its first byte
/// lands on a multiple of `SEGMENT_ALIGN_BYTES` (the allocation is that much longer; only the
/// bytes skipped to get there are zeroed).
async fn read_data(
    reader: &mut BoxRead,
    len: usize,
    each: &mut impl FnMut(&[u8]),
) -> std::io::Result<Bytes> {
    if len < ALIGNED_SEGMENT_BYTES_MIN {
        return read_segment(reader, len, each).await;
    }
    let mut segment = BytesMut::with_capacity(len + SEGMENT_ALIGN_BYTES);
    let skip = segment.as_ptr().align_offset(SEGMENT_ALIGN_BYTES);
    segment.resize(skip, 0);
    bytes::Buf::advance(&mut segment, skip);
    read_into(reader, segment, len, each).await
}

async fn read_into(
    reader: &mut BoxRead,
    mut segment: BytesMut,
    len: usize,
    each: &mut impl FnMut(&[u8]),
) -> std::io::Result<Bytes> {
    while segment.len() < len {
        let at = segment.len();
        let want = (len - at).min(RECEIVE_PIECE_BYTES) as u64;
        if (&mut *reader).take(want).read_buf(&mut segment).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        each(&segment[at..]);
    }
    Ok(segment.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Kind;
    use crate::outbox::{protect, Outgoing};
    use crate::Data;

    const SECRET: [u8; 32] = [3; 32];

    /// One secure frame of `segment` with a 64-byte data segment, as its sender writes it.
    fn frame_bytes(segment: Segment) -> Vec<u8> {
        let (meta, data) = (
            Bytes::from_static(b"records"),
            Data::from(Bytes::from(vec![7u8; 64])),
        );
        let header = Header::for_body(Kind::Reply, 9, &meta, &data, Mode::Secure, segment);
        let frame = Outgoing {
            header,
            meta,
            data,
            check: None,
        };
        protect(&mut FrameKey::new(SECRET), &frame)
    }

    async fn receive(bytes: Vec<u8>) -> Result<Option<Received>, ReadError> {
        let mut reader = FrameReader {
            stream: Box::new(std::io::Cursor::new(bytes)),
            key: Some(FrameKey::new(SECRET)),
            meter: crate::metrics::link(Mode::Secure).0,
        };
        read_frame(&mut reader, Duration::from_secs(1)).await
    }

    fn unauthentic(outcome: Result<Option<Received>, ReadError>) -> bool {
        matches!(
            outcome,
            Err(ReadError::Frame(
                FrameError::Unauthentic | FrameError::Lengths
            ))
        )
    }

    #[tokio::test]
    async fn a_bound_segment_is_left_to_its_records_and_an_open_one_is_checked() {
        // The open segment ends the frame.
        let last = |mut bytes: Vec<u8>| {
            let at = bytes.len() - 1;
            bytes[at] ^= 1;
            bytes
        };
        let frame = receive(frame_bytes(Segment::Bound))
            .await
            .expect("a bound frame")
            .expect("not closed");
        assert_eq!(frame.header.segment, Segment::Bound);
        assert_eq!(
            (&frame.meta[..], &frame.data[..]),
            (&b"records"[..], &[7u8; 64][..])
        );
        assert!(frame.check.is_none());
        // Altered in flight, a bound segment reaches the receiver, whose chunk records must
        // catch it (the client's open; tests in client/src/edge.rs); an open one does not.
        let altered = receive(last(frame_bytes(Segment::Bound)))
            .await
            .expect("the link does not check a bound segment")
            .expect("not closed");
        assert_ne!(&altered.data[..], &[7u8; 64][..]);
        assert!(unauthentic(receive(last(frame_bytes(Segment::Open))).await));
        // An open segment comes with the check it passed, to be passed on with it.
        let open = receive(frame_bytes(Segment::Open))
            .await
            .expect("an open frame")
            .expect("not closed");
        let check = open.check.expect("an open segment's check");
        let mut checking = check.checking();
        checking.update(&open.data);
        assert!(checking.finish().is_ok());
    }

    #[tokio::test]
    async fn a_passed_on_check_goes_with_its_segment_and_no_other() {
        let (meta, data) = (
            Bytes::from_static(b"replicate"),
            Bytes::from(vec![5u8; 300]),
        );
        let check = SegmentCheck::new(&Data::from(data.clone()));
        let passed_on = |data: Bytes| {
            let data = Data::from(data);
            let header =
                Header::for_body(Kind::Request, 3, &meta, &data, Mode::Secure, Segment::Open);
            let frame = Outgoing {
                header,
                meta: meta.clone(),
                data,
                check: Some(check.clone()),
            };
            protect(&mut FrameKey::new(SECRET), &frame)
        };
        let frame = receive(passed_on(data.clone()))
            .await
            .expect("the segment the check was made for")
            .expect("not closed");
        assert_eq!(frame.check.map(|c| c.encode()), Some(check.encode()));
        assert!(unauthentic(
            receive(passed_on(Bytes::from(vec![6u8; 300]))).await
        ));
    }

    /// Data segments from 64 KiB long arrive at a block-aligned address (the store writes
    /// them from there), in crc frames and in secure frames' open and bound segments.
    #[tokio::test]
    async fn long_data_segments_arrive_block_aligned_in_every_mode() {
        let meta = Bytes::from_static(b"m");
        for len in [ALIGNED_SEGMENT_BYTES_MIN, 300 * 1024 + 5] {
            let data = Bytes::from((0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
            let crc = {
                let body = Data::from(data.clone());
                let header =
                    Header::for_body(Kind::Request, 1, &meta, &body, Mode::Crc, Segment::Inside);
                [&header.encode()[..], &meta[..], &data[..]].concat()
            };
            let mut received = Vec::new();
            let mut reader = FrameReader {
                stream: Box::new(std::io::Cursor::new(crc)),
                key: None,
                meter: crate::metrics::link(Mode::Crc).0,
            };
            received.push(read_frame(&mut reader, Duration::from_secs(1)).await);
            for segment in [Segment::Open, Segment::Bound] {
                let body = Data::from(data.clone());
                let header = Header::for_body(Kind::Reply, 2, &meta, &body, Mode::Secure, segment);
                let frame = Outgoing {
                    header,
                    meta: meta.clone(),
                    data: body,
                    check: None,
                };
                received.push(receive(protect(&mut FrameKey::new(SECRET), &frame)).await);
            }
            for frame in received {
                let frame = frame.expect("a frame").expect("not closed");
                assert!(frame.data == data, "{len} bytes came through");
                assert_eq!(
                    frame.data.as_ptr() as usize % SEGMENT_ALIGN_BYTES,
                    0,
                    "{len}"
                );
            }
        }
    }

    #[tokio::test]
    async fn the_bound_bit_in_the_clear_must_agree_with_the_protected_header() {
        let flip_bound = |mut bytes: Vec<u8>| {
            bytes[7] ^= 0x80;
            bytes
        };
        for segment in [Segment::Bound, Segment::Open, Segment::Inside] {
            assert!(
                unauthentic(receive(flip_bound(frame_bytes(segment))).await),
                "{segment:?} with its bound bit flipped was accepted"
            );
        }
    }
}
