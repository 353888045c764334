//! The client side of a link: many requests in flight, replies matched by tag in whatever
//! order they come.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;

use crate::data::Data;
use crate::endpoint::Limits;
use crate::entity::{EntityName, Mode};
use crate::error::CallError;
use crate::frame::{Header, Kind, Segment, DATA_BYTES_MAX, META_BYTES_MAX};
use crate::link::{self, Link, Received};
use crate::outbox::{self, Outgoing};
use crate::protect::SegmentCheck;

/// A reply: the metadata segment (decode it with [`Incoming::decode`]) and the data segment.
#[derive(Debug)]
pub struct Incoming {
    pub meta: Bytes,
    pub data: Bytes,
}

/// How a request's data segment crosses a secure link (docs/design/edge-sealing.md,
/// "Links"); in crc mode the body checksum covers it whatever this says.
#[derive(Clone, Debug)]
pub enum DataSegment {
    /// Encrypted with the frame.
    Plain,
    /// Chunks their sender sealed at the edge: sent as they are, under a new segment check.
    Sealed,
    /// Sealed chunks passed on (an OSD replicating a client's write), with the check they
    /// arrived with: not hashed again.
    PassedOn(SegmentCheck),
}

impl Incoming {
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, postcard::Error> {
        postcard::from_bytes(&self.meta)
    }
}

type Waiter = oneshot::Sender<Result<Incoming, CallError>>;

#[derive(Default)]
struct Pending {
    waiters: HashMap<u64, Waiter>,
    /// Set once, when the link fails; every waiter then and later gets this reason.
    closed: Option<String>,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panic while holding this lock leaves the map consistent: take it anyway.
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn close(&self, reason: String) {
        let mut pending = self.lock();
        if pending.closed.is_none() {
            tracing::debug!(%reason, "link closed");
            pending.closed = Some(reason.clone());
        }
        for (_, waiter) in pending.waiters.drain() {
            // The caller may have given up; nobody to tell then.
            let _ = waiter.send(Err(CallError::Closed(reason.clone())));
        }
    }
}

/// Cheap to clone; the link closes when the last clone is dropped.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<ConnectionState>,
}

/// What a `Connection` and its clones share: the queue to the writer, the reply slots.
struct ConnectionState {
    peer: EntityName,
    mode: Mode,
    queue: outbox::Sender,
    shared: Arc<Shared>,
    next_tag: AtomicU64,
    slots: Semaphore,
    in_flight_max: usize,
    reader: JoinHandle<()>,
}

impl Drop for ConnectionState {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Connection {
    pub(crate) fn start(link: Link, peer: EntityName, limits: Limits) -> Self {
        let Link {
            mut reader,
            writer,
            mode,
        } = link;
        let shared = Arc::new(Shared::default());
        let (queue, writer) = outbox::outbox(writer);
        let writer_shared = shared.clone();
        tokio::spawn(async move {
            if let Err(e) = writer.run().await {
                writer_shared.close(format!("writing: {e}"));
            }
        });
        let reader_shared = shared.clone();
        let reader = tokio::spawn(async move {
            let reason = loop {
                match link::read_frame(&mut reader, limits.frame_timeout).await {
                    Ok(Some(Received {
                        header, meta, data, ..
                    })) => {
                        if let Err(reason) = deliver(&reader_shared, header, meta, data) {
                            break reason;
                        }
                    }
                    Ok(None) => break "closed by the peer".to_owned(),
                    Err(e) => break format!("reading: {e}"),
                }
            };
            reader_shared.close(reason);
        });
        Connection {
            inner: Arc::new(ConnectionState {
                peer,
                mode,
                queue,
                shared,
                next_tag: AtomicU64::new(1),
                slots: Semaphore::new(limits.in_flight_max),
                in_flight_max: limits.in_flight_max,
                reader,
            }),
        }
    }

    pub fn peer(&self) -> &EntityName {
        &self.inner.peer
    }

    pub fn mode(&self) -> Mode {
        self.inner.mode
    }

    /// Whether the link has failed; a closed connection never recovers; open a new one.
    pub fn is_closed(&self) -> bool {
        self.inner.shared.lock().closed.is_some()
    }

    /// Whether requests sent on the link wait for its writer task: a task that means to keep
    /// its thread busy for a while should let that task run first.
    pub fn writer_busy(&self) -> bool {
        self.inner.queue.writer_busy()
    }

    /// Gives the link up (its peer stopped answering): every call waiting on it fails with
    /// `reason`, and so does every later one.
    pub fn close(&self, reason: &str) {
        self.inner.shared.close(reason.to_owned());
        self.inner.reader.abort();
    }

    /// Sends a request and waits for its reply. Other calls may be in flight at the same time
    /// on the same connection; their replies may come in any order.
    pub async fn call(&self, meta: Bytes, data: Bytes) -> Result<Incoming, CallError> {
        self.call_with(meta, data, DataSegment::Plain).await
    }

    /// [`Connection::call`] with the data segment crossing a secure link as `segment` says:
    /// chunks already sealed travel open, checked but not encrypted again.
    pub async fn call_with(
        &self,
        meta: Bytes,
        data: Bytes,
        segment: DataSegment,
    ) -> Result<Incoming, CallError> {
        check_len(&meta, META_BYTES_MAX)?;
        check_len(&data, DATA_BYTES_MAX)?;
        let _slot = self
            .inner
            .slots
            .acquire()
            .await
            .map_err(|_| CallError::Closed("connection dropped".into()))?;
        let tag = self.inner.next_tag.fetch_add(1, Ordering::Relaxed);
        let (waiter, reply) = oneshot::channel();
        {
            let mut pending = self.inner.shared.lock();
            if let Some(reason) = &pending.closed {
                return Err(CallError::Closed(reason.clone()));
            }
            pending.waiters.insert(tag, waiter);
        }
        let (kind, check) = match segment {
            DataSegment::Plain => (Segment::Inside, None),
            DataSegment::Sealed => (Segment::Open, None),
            DataSegment::PassedOn(check) => (Segment::Open, Some(check)),
        };
        let data = Data::from(data);
        let header = Header::for_body(Kind::Request, tag, &meta, &data, self.inner.mode, kind);
        let frame = Outgoing {
            header,
            meta,
            data,
            check,
        };
        let alone = self.inner.slots.available_permits() + 1 == self.inner.in_flight_max;
        if !self.inner.queue.send(frame, alone) {
            self.inner.shared.close("the writer stopped".into());
        }
        reply
            .await
            .map_err(|_| CallError::Closed("connection dropped".into()))?
    }

    /// [`Connection::call`] with a typed request and reply.
    pub async fn request<Q, R>(&self, request: &Q, data: Bytes) -> Result<(R, Bytes), CallError>
    where
        Q: Serialize,
        R: DeserializeOwned,
    {
        self.request_with(request, data, DataSegment::Plain).await
    }

    /// [`Connection::request`] with the data segment crossing a secure link as `segment`
    /// says.
    pub async fn request_with<Q, R>(
        &self,
        request: &Q,
        data: Bytes,
        segment: DataSegment,
    ) -> Result<(R, Bytes), CallError>
    where
        Q: Serialize,
        R: DeserializeOwned,
    {
        let meta = Bytes::from(postcard::to_allocvec(request)?);
        let reply = self.call_with(meta, data, segment).await?;
        Ok((reply.decode()?, reply.data))
    }
}

fn check_len(segment: &Bytes, limit: u32) -> Result<(), CallError> {
    if segment.len() > limit as usize {
        return Err(CallError::TooLarge {
            bytes: segment.len(),
            limit,
        });
    }
    Ok(())
}

/// Hands a reply to its waiter. A frame that is not a reply to a request in flight is a
/// protocol violation and ends the link.
fn deliver(shared: &Shared, header: Header, meta: Bytes, data: Bytes) -> Result<(), String> {
    if header.kind == Kind::Request {
        return Err("the server sent a request".into());
    }
    let waiter = shared.lock().waiters.remove(&header.tag);
    let Some(waiter) = waiter else {
        return Err(format!("reply to unknown request {}", header.tag));
    };
    let outcome = match header.kind {
        Kind::Reply => Ok(Incoming { meta, data }),
        Kind::Refused => Err(CallError::Refused(
            String::from_utf8_lossy(&meta).into_owned(),
        )),
        Kind::Request => unreachable!("requests were refused above"),
    };
    // The caller may have given up waiting.
    let _ = waiter.send(outcome);
    Ok(())
}
