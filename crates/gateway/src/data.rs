//! Object content as stripes of one upload instance: written from a request body as it
//! arrives and read back as a stream, so that no object is ever held whole in memory.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use client::Pool;
use futures::{Stream, StreamExt};
use md5::{Digest, Md5};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::layout::{self, ObjectEntry, Segment};
use crate::Error;

/// Stripes written at once by one upload (so at most this many stripes, plus the one being
/// filled, are in memory per upload).
const WRITES_IN_FLIGHT: usize = 4;
/// Stripes read ahead of the client by one download.
const READ_AHEAD: usize = 2;
/// Stripes removed at once.
const REMOVES_IN_FLIGHT: usize = 16;

/// What an upload wrote: the instance, its size and the MD5 of its content.
#[derive(Debug)]
pub struct Written {
    pub instance: String,
    pub size: u64,
    pub md5: [u8; 16],
}

impl Written {
    pub fn md5_hex(&self) -> String {
        layout::hex(&self.md5)
    }

    pub fn segment(&self) -> Segment {
        Segment {
            instance: self.instance.clone(),
            size: self.size,
            stripe_bytes: layout::STRIPE_BYTES,
        }
    }
}

/// Writes `body` as the stripes of a new instance. On any failure (of the body or of the
/// cluster) the stripes written so far are removed and the error returned: nothing of a
/// failed upload stays.
pub async fn write<S, E>(pool: &Pool, mut body: S) -> Result<Written, Error>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let instance = layout::new_instance();
    let stripe_bytes = layout::STRIPE_BYTES as usize;
    let mut md5 = Md5::new();
    let mut size = 0u64;
    let mut stripes = 0u64;
    let mut buffer = BytesMut::with_capacity(stripe_bytes);
    let mut writes: JoinSet<Result<(), client::Error>> = JoinSet::new();
    let result: Result<(), Error> = async {
        loop {
            let chunk = match body.next().await {
                Some(Ok(chunk)) => Some(chunk),
                Some(Err(e)) => return Err(Error::Body(e.to_string())),
                None => None,
            };
            let done = chunk.is_none();
            let mut chunk = chunk.unwrap_or_default();
            md5.update(&chunk);
            size += chunk.len() as u64;
            while !chunk.is_empty() || (done && !buffer.is_empty()) {
                let take = chunk.len().min(stripe_bytes - buffer.len());
                buffer.extend_from_slice(&chunk.split_to(take));
                if buffer.len() == stripe_bytes || (done && chunk.is_empty()) {
                    while writes.len() >= WRITES_IN_FLIGHT {
                        joined(writes.join_next().await)?;
                    }
                    let data =
                        std::mem::replace(&mut buffer, BytesMut::with_capacity(stripe_bytes));
                    let (pool, name) = (pool.clone(), layout::stripe_object(&instance, stripes));
                    writes.spawn(async move { pool.put(&name, data.freeze()).await });
                    stripes += 1;
                }
            }
            if done {
                break;
            }
        }
        while let Some(result) = writes.join_next().await {
            joined(Some(result))?;
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => Ok(Written {
            instance,
            size,
            md5: md5.finalize().into(),
        }),
        Err(e) => {
            writes.abort_all();
            while writes.join_next().await.is_some() {}
            remove_stripes(pool, &instance, stripes).await;
            Err(e)
        }
    }
}

fn joined(
    result: Option<Result<Result<(), client::Error>, tokio::task::JoinError>>,
) -> Result<(), Error> {
    match result {
        Some(Ok(Ok(()))) | None => Ok(()),
        Some(Ok(Err(e))) => Err(e.into()),
        Some(Err(e)) => Err(Error::Internal(format!("a stripe write stopped: {e}"))),
    }
}

/// Removes the first `stripes` stripes of `instance`, as far as the cluster lets it: what
/// stays behind is unreachable (no index entry names it) and only costs space.
pub async fn remove_stripes(pool: &Pool, instance: &str, stripes: u64) {
    let names = (0..stripes).map(|n| layout::stripe_object(instance, n));
    let mut removals = futures::stream::iter(names)
        .map(|name| async move {
            match pool.remove(&name).await {
                Ok(()) | Err(client::Error::NotFound) => {}
                Err(e) => tracing::warn!("removing {name}: {e}; it stays as garbage"),
            }
        })
        .buffer_unordered(REMOVES_IN_FLIGHT);
    while removals.next().await.is_some() {}
}

/// Removes the content of `segment`.
pub async fn remove_segment(pool: &Pool, segment: &Segment) {
    remove_stripes(pool, &segment.instance, segment.stripes()).await;
}

/// Removes the content of `entry`.
pub async fn remove(pool: &Pool, entry: &ObjectEntry) {
    for segment in &entry.segments {
        remove_segment(pool, segment).await;
    }
}

/// A stream of the bytes `range` of the object `entry` describes, read stripe by stripe a
/// little ahead of the reader. Dropping the stream stops the reading.
pub fn read(pool: &Pool, entry: &ObjectEntry, range: std::ops::Range<u64>) -> Reader {
    let (send, receive) = mpsc::channel(READ_AHEAD);
    let (pool, entry) = (pool.clone(), entry.clone());
    tokio::spawn(async move {
        let mut at = range.start;
        // Where the current segment starts in the object.
        let mut base = 0;
        let mut segments = entry.segments.iter();
        let mut segment = segments.next();
        while at < range.end {
            let Some(current) = segment else {
                let _ = send
                    .send(Err(std::io::Error::other(
                        "the index entry's segments end early",
                    )))
                    .await;
                return;
            };
            if at >= base + current.size {
                base += current.size;
                segment = segments.next();
                continue;
            }
            let within = at - base;
            let stripe = within / current.stripe_bytes;
            let offset = within % current.stripe_bytes;
            let len = (current.stripe_bytes - offset)
                .min(range.end - at)
                .min(current.size - within);
            let name = layout::stripe_object(&current.instance, stripe);
            let piece = match pool.read(&name, offset, len).await {
                Ok(bytes) if bytes.len() as u64 == len => Ok(bytes),
                Ok(bytes) => Err(std::io::Error::other(format!(
                    "{name} holds {} bytes from {offset}, the index says {len}",
                    bytes.len()
                ))),
                Err(e) => Err(std::io::Error::other(format!("reading {name}: {e}"))),
            };
            let failed = piece.is_err();
            if let Err(e) = &piece {
                tracing::warn!("{e}");
            }
            if send.send(piece).await.is_err() || failed {
                return;
            }
            at += len;
        }
    });
    Reader { receive }
}

/// The stream [`read`] returns.
pub struct Reader {
    receive: mpsc::Receiver<Result<Bytes, std::io::Error>>,
}

impl Stream for Reader {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.receive.poll_recv(cx)
    }
}
