//! Transmission: requests in, replies out, many in flight and answered out of order.
//!
//! One task reads requests (and write payloads) and starts a task per request, at most
//! [`REQUESTS_IN_FLIGHT_MAX`] at once and [`BYTES_IN_FLIGHT_MAX`] of read and write data:
//! past either it stops reading, which pushes back on the client. Each request's task sends its reply to one writer task, which batches replies
//! into the socket and flushes when no more are waiting.
//!
//! A header with a bad magic, or a write whose payload is larger than
//! [`PAYLOAD_BYTES_MAX`], leaves the stream impossible to follow: the server closes the
//! connection (a "hard disconnect"). A client that disconnects in the middle of a write's
//! payload has that write dropped, never applied in part. On `DISC`, or when the client
//! closes, the requests in flight finish before the connection is closed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, OwnedRwLockReadGuard, OwnedSemaphorePermit, Semaphore};

use super::negotiate::{Session, ALLOCATION_CONTEXT_ID, PAYLOAD_BYTES_MAX};
use super::wire::*;
use super::{errno, Export};
use crate::image::Extent;

/// Requests one connection may have in flight.
pub const REQUESTS_IN_FLIGHT_MAX: u32 = 256;
/// Bytes of read replies and write payloads one connection may hold in memory at once.
pub const BYTES_IN_FLIGHT_MAX: u32 = 256 << 20;
/// Bytes the writer gathers before it writes them out.
const REPLY_BUFFER_BYTES: usize = 256 << 10;
/// Zeros sent for holes in simple replies, a slice at a time.
static ZEROS: [u8; 64 << 10] = [0u8; 64 << 10];

/// One piece of a reply, in order.
enum Part {
    Header(Vec<u8>),
    Data(Bytes),
    Zeros(u64),
}

/// What one connection moved, for its closing log line.
#[derive(Default)]
pub struct Stats {
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub written_bytes: AtomicU64,
    pub other: AtomicU64,
    pub errors: AtomicU64,
}

impl Stats {
    pub fn summary(&self, elapsed_secs: f64) -> String {
        let mib = |bytes: &AtomicU64| bytes.load(Ordering::Relaxed) as f64 / (1 << 20) as f64;
        let per_s = |value: f64| value / elapsed_secs.max(1e-9);
        format!(
            "{} reads ({:.1} MiB, {:.1} MiB/s), {} writes ({:.1} MiB, {:.1} MiB/s), {} other, \
             {} errors in {elapsed_secs:.1} s",
            self.reads.load(Ordering::Relaxed),
            mib(&self.read_bytes),
            per_s(mib(&self.read_bytes)),
            self.writes.load(Ordering::Relaxed),
            mib(&self.written_bytes),
            per_s(mib(&self.written_bytes)),
            self.other.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }
}

/// Serves requests until the client disconnects, sends `DISC`, or breaks the protocol. Each
/// request holds a share of the export's shutdown gate until its reply is queued.
pub async fn transmit<R, W>(
    mut reader: R,
    writer: W,
    export: Arc<Export>,
    session: Session,
    stats: Arc<Stats>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (replies, queue) = mpsc::unbounded_channel::<Queued>();
    let writing = tokio::spawn(write_replies(writer, queue));
    let permits = Arc::new(Semaphore::new(REQUESTS_IN_FLIGHT_MAX as usize));
    let data_budget = Arc::new(Semaphore::new(BYTES_IN_FLIGHT_MAX as usize));
    loop {
        let mut header = [0u8; REQUEST_BYTES];
        if let Err(e) = reader.read_exact(&mut header).await {
            if e.kind() != std::io::ErrorKind::UnexpectedEof {
                tracing::debug!(error = %e, "reading a request");
            }
            break;
        }
        let Some(request) = Request::parse(&header) else {
            tracing::warn!("a request with a bad magic: closing the connection");
            break;
        };
        if request.kind == CMD_WRITE && request.len > PAYLOAD_BYTES_MAX {
            tracing::warn!(
                len = request.len,
                "a write larger than the {PAYLOAD_BYTES_MAX}-byte limit: closing the connection"
            );
            break;
        }
        if request.kind == CMD_DISC {
            break;
        }
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        // Larger reads are refused without reading anything, so they hold nothing.
        let data_bytes = match request.kind {
            CMD_READ | CMD_WRITE => request.len.min(PAYLOAD_BYTES_MAX),
            _ => 0,
        };
        let Ok(data_permit) = data_budget.clone().acquire_many_owned(data_bytes).await else {
            break;
        };
        let mut payload = Bytes::new();
        if request.kind == CMD_WRITE {
            match read_payload(&mut reader, request.len as usize).await {
                Some(bytes) => payload = bytes,
                None => {
                    tracing::warn!(
                        "the client left in the middle of a write's payload; it is dropped"
                    );
                    break;
                }
            }
        }
        let Some(gate) = export.enter().await else {
            break;
        };
        let export = export.clone();
        let replies = replies.clone();
        let stats = stats.clone();
        tokio::spawn(async move {
            let (started, kind, len) = (Instant::now(), request.kind, request.len);
            let reply = handle(&export, &session, request, payload, &stats, gate).await;
            crate::metrics::request(kind, len, started.elapsed());
            // The data permit goes with the reply: a read's bytes stay in memory until they
            // are written out.
            let _ = replies.send((reply, data_permit));
            drop(permit);
        });
    }
    // Let the requests in flight finish and their replies go out, then close.
    let _ = permits.acquire_many(REQUESTS_IN_FLIGHT_MAX).await;
    drop(replies);
    let _ = writing.await;
}

/// Exactly `len` bytes of payload, read straight into a fresh buffer (never zeroed first);
/// `None` if the stream ends before.
async fn read_payload<R: AsyncRead + Unpin>(reader: &mut R, len: usize) -> Option<Bytes> {
    let mut buffer = BytesMut::with_capacity(len);
    let mut limited = reader.take(len as u64);
    while buffer.len() < len {
        match limited.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
    Some(buffer.freeze())
}

/// A reply waiting for the writer, with the share of the data budget its bytes hold.
type Queued = (Vec<Part>, OwnedSemaphorePermit);

async fn write_replies<W>(writer: W, mut queue: mpsc::UnboundedReceiver<Queued>)
where
    W: AsyncWrite + Unpin,
{
    let mut out = BufWriter::with_capacity(REPLY_BUFFER_BYTES, writer);
    while let Some((reply, _budget)) = queue.recv().await {
        if write_parts(&mut out, reply).await.is_err() {
            return;
        }
        while let Ok((next, _budget)) = queue.try_recv() {
            if write_parts(&mut out, next).await.is_err() {
                return;
            }
        }
        if out.flush().await.is_err() {
            return;
        }
    }
    let _ = out.shutdown().await;
}

async fn write_parts<W: AsyncWrite + Unpin>(
    out: &mut BufWriter<W>,
    parts: Vec<Part>,
) -> std::io::Result<()> {
    for part in parts {
        match part {
            Part::Header(bytes) => out.write_all(&bytes).await?,
            Part::Data(bytes) => out.write_all(&bytes).await?,
            Part::Zeros(mut len) => {
                while len > 0 {
                    let n = len.min(ZEROS.len() as u64) as usize;
                    out.write_all(&ZEROS[..n]).await?;
                    len -= n as u64;
                }
            }
        }
    }
    Ok(())
}

/// The reply to a request that failed before any data: one error.
fn failure(session: &Session, cookie: u64, error: u32, message: &str) -> Vec<Part> {
    if !session.structured_replies {
        return vec![Part::Header(simple_reply(cookie, error))];
    }
    let message = &message.as_bytes()[..message.len().min(4096)];
    let mut payload = Vec::with_capacity(6 + message.len());
    payload.extend_from_slice(&error.to_be_bytes());
    payload.extend_from_slice(&(message.len() as u16).to_be_bytes());
    payload.extend_from_slice(message);
    let mut header = chunk_header(
        cookie,
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        payload.len() as u32,
    );
    header.extend_from_slice(&payload);
    vec![Part::Header(header)]
}

/// The reply to a request that succeeded with no data.
fn done(session: &Session, cookie: u64) -> Vec<Part> {
    if session.structured_replies {
        vec![Part::Header(chunk_header(
            cookie,
            REPLY_FLAG_DONE,
            REPLY_TYPE_NONE,
            0,
        ))]
    } else {
        vec![Part::Header(simple_reply(cookie, 0))]
    }
}

/// The command flags the protocol defines for command `kind` in this session: FUA on any
/// command; DF on reads once structured replies are on; NO_HOLE and FAST_ZERO on
/// WRITE_ZEROES; REQ_ONE on BLOCK_STATUS. A client must not set any other.
fn flags_documented(kind: u16, session: &Session) -> u16 {
    CMD_FLAG_FUA
        | match kind {
            CMD_READ if session.structured_replies => CMD_FLAG_DF,
            CMD_WRITE_ZEROES => CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
            CMD_BLOCK_STATUS => CMD_FLAG_REQ_ONE,
            _ => 0,
        }
}

/// Checks that `[offset, offset + len)` lies inside the export as the session knows it.
fn in_range(session: &Session, request: &Request) -> bool {
    request
        .offset
        .checked_add(u64::from(request.len))
        .is_some_and(|end| end <= session.size)
}

/// Why `request` is refused before it reaches the image, if it is: the error number and a
/// message for the client.
pub(crate) fn refusal(
    session: &Session,
    read_only: bool,
    request: &Request,
) -> Option<(u32, String)> {
    let writes = matches!(request.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    let ranged = writes || matches!(request.kind, CMD_READ | CMD_BLOCK_STATUS);
    let undocumented = request.flags & !flags_documented(request.kind, session);
    if undocumented != 0 {
        Some((
            EINVAL,
            format!(
                "command flags {undocumented:#x} are not defined for command {} here",
                request.kind
            ),
        ))
    } else if writes && read_only {
        Some((EPERM, "the export is read-only".to_string()))
    } else if request.kind == CMD_READ && request.len > PAYLOAD_BYTES_MAX {
        let error = if request.flags & CMD_FLAG_DF != 0 {
            EOVERFLOW
        } else {
            EINVAL
        };
        Some((
            error,
            format!(
                "a read of {} bytes; the limit is {PAYLOAD_BYTES_MAX}",
                request.len
            ),
        ))
    } else if ranged && request.len == 0 {
        Some((EINVAL, "a request for zero bytes".to_string()))
    } else if ranged && !in_range(session, request) {
        // Writes past the end are out of space; anything else past the end is invalid.
        let error = if matches!(request.kind, CMD_WRITE | CMD_WRITE_ZEROES) {
            ENOSPC
        } else {
            EINVAL
        };
        Some((
            error,
            format!(
                "{} bytes at {} pass the end of the export ({} bytes)",
                request.len, request.offset, session.size
            ),
        ))
    } else if request.kind == CMD_WRITE_ZEROES
        && request.flags & CMD_FLAG_NO_HOLE != 0
        && request.flags & CMD_FLAG_FAST_ZERO != 0
    {
        // Zeros that must stay allocated are written like data: not fast.
        Some((ENOTSUP, "allocated zeros are not fast".to_string()))
    } else if request.kind == CMD_BLOCK_STATUS && !session.allocation {
        Some((
            EINVAL,
            "block status needs the base:allocation context".to_string(),
        ))
    } else if !SERVED.contains(&request.kind) {
        Some((EINVAL, format!("command {} is not supported", request.kind)))
    } else {
        None
    }
}

/// The commands served once a request passes [`refusal`] (`DISC` ends the connection
/// before).
const SERVED: [u16; 6] = [
    CMD_READ,
    CMD_WRITE,
    CMD_FLUSH,
    CMD_TRIM,
    CMD_WRITE_ZEROES,
    CMD_BLOCK_STATUS,
];

async fn handle(
    export: &Export,
    session: &Session,
    request: Request,
    payload: Bytes,
    stats: &Stats,
    _gate: OwnedRwLockReadGuard<()>,
) -> Vec<Part> {
    let cookie = request.cookie;
    if let Some((error, message)) = refusal(session, export.image.is_read_only(), &request) {
        stats.errors.fetch_add(1, Ordering::Relaxed);
        crate::metrics::failed(request.kind);
        return failure(session, cookie, error, &message);
    }
    let image = &export.image;
    let result = match request.kind {
        CMD_READ => {
            stats.reads.fetch_add(1, Ordering::Relaxed);
            stats
                .read_bytes
                .fetch_add(u64::from(request.len), Ordering::Relaxed);
            match image.read(request.offset, u64::from(request.len)).await {
                Ok(extents) => return read_reply(session, &request, extents),
                Err(e) => Err(e),
            }
        }
        CMD_WRITE => {
            stats.writes.fetch_add(1, Ordering::Relaxed);
            stats
                .written_bytes
                .fetch_add(payload.len() as u64, Ordering::Relaxed);
            image.write(request.offset, payload).await
        }
        CMD_FLUSH => {
            stats.other.fetch_add(1, Ordering::Relaxed);
            image.flush()
        }
        CMD_TRIM => {
            stats.other.fetch_add(1, Ordering::Relaxed);
            image
                .zero(request.offset, u64::from(request.len), true)
                .await
        }
        CMD_WRITE_ZEROES => {
            stats.other.fetch_add(1, Ordering::Relaxed);
            let punch = request.flags & CMD_FLAG_NO_HOLE == 0;
            image
                .zero(request.offset, u64::from(request.len), punch)
                .await
        }
        CMD_BLOCK_STATUS => {
            stats.other.fetch_add(1, Ordering::Relaxed);
            match image
                .allocation(request.offset, u64::from(request.len))
                .await
            {
                Ok(runs) => return status_reply(&request, runs),
                Err(e) => Err(e),
            }
        }
        other => unreachable!("command {other} passed refusal(), which serves only {SERVED:?}"),
    };
    match result {
        Ok(()) => done(session, cookie),
        Err(e) => {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            crate::metrics::failed(request.kind);
            tracing::warn!(
                cookie,
                kind = request.kind,
                offset = request.offset,
                len = request.len,
                "request failed: {e}"
            );
            failure(session, cookie, errno(&e), &e.to_string())
        }
    }
}

/// A successful read: data (and zeros) after a simple reply header, or structured chunks:
/// data and holes as they are stored, or one data chunk when the client asked for it whole
/// (`DF`).
fn read_reply(session: &Session, request: &Request, extents: Vec<Extent>) -> Vec<Part> {
    let cookie = request.cookie;
    let to_part = |extent: Extent| match extent {
        Extent::Data(bytes) => Part::Data(bytes),
        Extent::Zeros(len) => Part::Zeros(len),
    };
    if !session.structured_replies {
        let mut parts = vec![Part::Header(simple_reply(cookie, 0))];
        parts.extend(extents.into_iter().map(to_part));
        return parts;
    }
    if request.flags & CMD_FLAG_DF != 0 || extents.len() <= 1 {
        let all_zeros = matches!(extents.as_slice(), [Extent::Zeros(_)]);
        if !all_zeros || request.flags & CMD_FLAG_DF != 0 {
            let mut header = chunk_header(
                cookie,
                REPLY_FLAG_DONE,
                REPLY_TYPE_OFFSET_DATA,
                8 + request.len,
            );
            header.extend_from_slice(&request.offset.to_be_bytes());
            let mut parts = vec![Part::Header(header)];
            parts.extend(extents.into_iter().map(to_part));
            return parts;
        }
    }
    let mut parts = Vec::with_capacity(extents.len() + 1);
    let mut offset = request.offset;
    let count = extents.len();
    for (i, extent) in extents.into_iter().enumerate() {
        let flags = if i + 1 == count { REPLY_FLAG_DONE } else { 0 };
        let len = extent.len();
        match extent {
            Extent::Data(bytes) => {
                let mut header =
                    chunk_header(cookie, flags, REPLY_TYPE_OFFSET_DATA, 8 + len as u32);
                header.extend_from_slice(&offset.to_be_bytes());
                parts.push(Part::Header(header));
                parts.push(Part::Data(bytes));
            }
            Extent::Zeros(len) => {
                let mut header = chunk_header(cookie, flags, REPLY_TYPE_OFFSET_HOLE, 12);
                header.extend_from_slice(&offset.to_be_bytes());
                header.extend_from_slice(&(len as u32).to_be_bytes());
                parts.push(Part::Header(header));
            }
        }
        offset += len;
    }
    parts
}

/// A block status reply for `base:allocation`: allocated runs are plain data, holes read
/// as zeros.
fn status_reply(request: &Request, runs: Vec<(u64, bool)>) -> Vec<Part> {
    let take = if request.flags & CMD_FLAG_REQ_ONE != 0 {
        1
    } else {
        runs.len()
    };
    let mut payload = ALLOCATION_CONTEXT_ID.to_be_bytes().to_vec();
    for (len, allocated) in runs.into_iter().take(take) {
        let state = if allocated {
            0
        } else {
            STATE_HOLE | STATE_ZERO
        };
        // A run never exceeds the request's length, which is a u32.
        payload.extend_from_slice(&(len as u32).to_be_bytes());
        payload.extend_from_slice(&state.to_be_bytes());
    }
    let mut header = chunk_header(
        request.cookie,
        REPLY_FLAG_DONE,
        REPLY_TYPE_BLOCK_STATUS,
        payload.len() as u32,
    );
    header.extend_from_slice(&payload);
    vec![Part::Header(header)]
}
