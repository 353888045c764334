//! Object content as stripes of one upload instance: written from a request body as it
//! arrives (sealed in chunks on the way when the object is encrypted) and read back as a
//! stream, so that no object is ever held whole in memory.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use client::{ChunkSeal, ObjectOp, OpResult, Pool};
use futures::{Stream, StreamExt};
use keys::SecretKey;
use md5::{Digest, Md5};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::checksum::{Algorithm, Checksum, Hasher};
use crate::layout::{self, ObjectEntry, SealedKey, Segment};
use crate::sse::{self, ChunkKey};
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
    /// The checksum asked for, if one was.
    pub checksum: Option<Checksum>,
    /// The wrapped data key, if the content was sealed.
    pub sealed: Option<SealedKey>,
    /// Bytes per stripe (which also tells the sealed layouts apart).
    pub stripe_bytes: u64,
}

impl Written {
    pub fn md5_hex(&self) -> String {
        layout::hex(&self.md5)
    }

    pub fn segment(&self) -> Segment {
        Segment {
            instance: self.instance.clone(),
            size: self.size,
            stripe_bytes: self.stripe_bytes,
            sealed: self.sealed.clone(),
        }
    }
}

/// How to seal a new segment: its data key, and that key as stored.
pub struct Sealing {
    pub data_key: SecretKey<32>,
    pub stored: SealedKey,
}

/// How content goes into stripes: plain; sealed in 64 KiB chunks with their tags inline; or
/// sealed in the pool's 4 KiB chunks with their tags in the chunk records (a pool sealed at
/// the edge, where this seal is the only one).
enum Layout {
    Plain,
    Inline(ChunkKey),
    Records(ChunkKey),
}

/// Fills stripes of one instance and writes each as it fills. Content is sealed in the
/// stripe buffer, in place. A chunk (inline) or a stripe (records) is sealed only once more
/// content arrives (or the content ends), so that the last chunk is known.
struct Striper<'a> {
    pool: &'a Pool,
    instance: String,
    layout: Layout,
    stripe_bytes: usize,
    buffer: BytesMut,
    /// Where the chunk being filled starts in `buffer` (inline layout).
    chunk_start: usize,
    chunks: u64,
    stripes: u64,
    writes: JoinSet<Result<(), client::Error>>,
}

impl Striper<'_> {
    async fn push(&mut self, mut bytes: &[u8]) -> Result<(), Error> {
        while !bytes.is_empty() {
            let room = self.stripe_bytes - self.buffer.len();
            let take = match self.layout {
                Layout::Inline(_) => {
                    let chunk_bytes = sse::CHUNK_BYTES as usize;
                    let open = self.buffer.len() - self.chunk_start;
                    if open == chunk_bytes {
                        self.seal_open(false);
                        if self.buffer.len() == self.stripe_bytes {
                            self.flush(false).await?;
                        }
                        continue;
                    }
                    bytes.len().min(chunk_bytes - open)
                }
                Layout::Records(_) if room == 0 => {
                    self.flush(false).await?;
                    continue;
                }
                Layout::Plain | Layout::Records(_) => bytes.len().min(room),
            };
            self.buffer.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if matches!(self.layout, Layout::Plain) && self.buffer.len() == self.stripe_bytes {
                self.flush(false).await?;
            }
        }
        Ok(())
    }

    fn seal_open(&mut self, last: bool) {
        if let Layout::Inline(key) = &self.layout {
            let tag = key.seal(self.chunks, last, &mut self.buffer[self.chunk_start..]);
            self.buffer.extend_from_slice(&tag);
            self.chunks += 1;
            self.chunk_start = self.buffer.len();
        }
    }

    /// Writes the stripe in the buffer; `last`: it ends the content.
    async fn flush(&mut self, last: bool) -> Result<(), Error> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        while self.writes.len() >= WRITES_IN_FLIGHT {
            joined(self.writes.join_next().await)?;
        }
        let mut data =
            std::mem::replace(&mut self.buffer, BytesMut::with_capacity(self.stripe_bytes));
        self.chunk_start = 0;
        let (pool, name) = (
            self.pool.clone(),
            layout::stripe_object(&self.instance, self.stripes),
        );
        match &self.layout {
            Layout::Records(key) => {
                let end = data.len() as u64;
                let seals = seal_records(key, self.chunks, last, &mut data);
                self.chunks += seals.len() as u64;
                let ops = vec![ObjectOp::WriteChunks {
                    first: 0,
                    seals,
                    end,
                }];
                self.writes.spawn(async move {
                    pool.operate(&name, ops, data.freeze()).await.map(|_| ())
                });
            }
            Layout::Plain | Layout::Inline(_) => {
                self.writes
                    .spawn(async move { pool.put(&name, data.freeze()).await });
            }
        }
        self.stripes += 1;
        Ok(())
    }

    async fn finish(&mut self) -> Result<(), Error> {
        if self.buffer.len() > self.chunk_start {
            self.seal_open(true);
        }
        self.flush(true).await?;
        while let Some(result) = self.writes.join_next().await {
            joined(Some(result))?;
        }
        Ok(())
    }
}

/// Seals a stripe's content in place as the pool's 4 KiB chunks (the last one padded with
/// zeros), numbered from `first` across the segment; `last`: the stripe ends the content.
/// Returns the chunks' records.
fn seal_records(key: &ChunkKey, first: u64, last: bool, data: &mut BytesMut) -> Vec<ChunkSeal> {
    let chunk = sse::RECORD_CHUNK_BYTES as usize;
    data.resize(data.len().next_multiple_of(chunk), 0);
    let count = data.len() / chunk;
    data.chunks_mut(chunk)
        .enumerate()
        .map(|(i, bytes)| {
            let index = first + i as u64;
            ChunkSeal {
                key_id: sse::SEGMENT_KEY_ID,
                nonce: ChunkKey::nonce_bytes(index),
                tag: key.seal(index, last && i + 1 == count, bytes),
            }
        })
        .collect()
}

/// Writes `body` as the stripes of a new instance, sealed with `sealing` if given, computing
/// its MD5 and its `checksum` as it passes. On any failure (of the body or of the cluster)
/// the stripes written so far are removed and the error returned: nothing of a failed
/// upload stays.
pub async fn write<S, E>(
    pool: &Pool,
    mut body: S,
    sealing: Option<Sealing>,
    checksum: Option<Algorithm>,
) -> Result<Written, Error>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let instance = layout::new_instance();
    let (content_layout, sealed) = match sealing {
        Some(sealing) => {
            let key = ChunkKey::new(&sealing.data_key, &instance);
            let content_layout = match pool.is_edge_sealed() {
                true => Layout::Records(key),
                false => Layout::Inline(key),
            };
            (content_layout, Some(sealing.stored))
        }
        None => (Layout::Plain, None),
    };
    let stripe_bytes = match content_layout {
        Layout::Inline(_) => sse::SEALED_STRIPE_BYTES,
        Layout::Plain | Layout::Records(_) => layout::STRIPE_BYTES,
    } as usize;
    let mut striper = Striper {
        pool,
        instance: instance.clone(),
        layout: content_layout,
        stripe_bytes,
        buffer: BytesMut::with_capacity(stripe_bytes),
        chunk_start: 0,
        chunks: 0,
        stripes: 0,
        writes: JoinSet::new(),
    };
    let mut md5 = Md5::new();
    let mut hasher = checksum.map(Hasher::new);
    let mut size = 0u64;
    let result: Result<(), Error> = async {
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| Error::Body(e.to_string()))?;
            md5.update(&chunk);
            if let Some(hasher) = &mut hasher {
                hasher.update(&chunk);
            }
            size += chunk.len() as u64;
            striper.push(&chunk).await?;
        }
        striper.finish().await
    }
    .await;
    match result {
        Ok(()) => Ok(Written {
            instance,
            size,
            md5: md5.finalize().into(),
            checksum: checksum
                .zip(hasher)
                .map(|(algorithm, hasher)| Checksum::whole(algorithm, hasher.finish())),
            sealed,
            stripe_bytes: stripe_bytes as u64,
        }),
        Err(e) => {
            striper.writes.abort_all();
            while striper.writes.join_next().await.is_some() {}
            remove_stripes(pool, &instance, striper.stripes).await;
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

/// Removes the content of `entry`, which no record names, with its list of segments if
/// it has one. A list that cannot be read leaves its segments behind as garbage, which
/// `coffer gw gc` finds (no entry names them).
pub async fn remove(pool: &Pool, entry: &ObjectEntry) {
    let mut entry = entry.clone();
    if let Err(e) = with_segments(pool, &mut entry).await {
        tracing::warn!("{e}: its segments stay as garbage");
    }
    for segment in entry
        .segments
        .iter()
        .chain(&entry.listed.map(|l| l.segment()))
    {
        remove_segment(pool, segment).await;
    }
}

/// Keeps `entry`'s segments, with its parts' digests, in a list of their own when they
/// are too many for its index entry (`layout::SEGMENTS_INLINE_BYTES_MAX`): writes the
/// list to a fresh instance, and leaves `entry` naming it, with neither. The entry's
/// content is `segments` either way.
pub async fn list_segments(pool: &Pool, entry: &mut ObjectEntry) -> Result<(), Error> {
    assert!(
        entry.listed.is_none(),
        "an entry's segments are listed once"
    );
    let Some(list) = entry.segment_list() else {
        return Ok(());
    };
    let listed = layout::Listed {
        instance: layout::new_instance(),
        count: entry.segments.len() as u32,
        bytes: list.len() as u64,
    };
    let name = layout::stripe_object(&listed.instance, 0);
    pool.put(&name, Bytes::from(list)).await?;
    entry.keep_listed(listed);
    Ok(())
}

/// Fills in `entry`'s segments, and its parts' digests, from its list, if it keeps them
/// out of line.
pub async fn with_segments(pool: &Pool, entry: &mut ObjectEntry) -> Result<(), Error> {
    let Some(listed) = &entry.listed else {
        return Ok(());
    };
    if !entry.segments.is_empty() {
        return Ok(());
    }
    let name = layout::stripe_object(&listed.instance, 0);
    let bytes = match pool.read(&name, 0, listed.bytes).await {
        Ok(bytes) => bytes,
        Err(client::Error::NotFound) => {
            return Err(Error::NotFound(format!("segment list {name}")))
        }
        Err(e) => return Err(e.into()),
    };
    entry
        .fill_listed(&bytes)
        .map_err(|why| Error::Corrupt(format!("segment list {name}: {why}")))
}

/// Reads bytes `[from, to)` of the content of a plain segment, stripe by stripe.
async fn read_plain(
    pool: &Pool,
    segment: &Segment,
    from: u64,
    to: u64,
    send: &Pieces,
) -> Result<(), std::io::Error> {
    let mut at = from;
    while at < to {
        let stripe = at / segment.stripe_bytes;
        let offset = at % segment.stripe_bytes;
        let len = (segment.stripe_bytes - offset).min(to - at);
        let piece = read_exact(pool, &segment.instance, stripe, offset, len).await?;
        if send.send(Ok(vec![piece])).await.is_err() {
            return Ok(());
        }
        at += len;
    }
    Ok(())
}

/// Reads bytes `[from, to)` of the content of a sealed segment: the chunks they touch,
/// a stripe's worth at a time, opened and cut to the range.
async fn read_sealed(
    pool: &Pool,
    segment: &Segment,
    key: &ChunkKey,
    from: u64,
    to: u64,
    send: &Pieces,
) -> Result<(), std::io::Error> {
    let last_chunk = (segment.size - 1) / sse::CHUNK_BYTES;
    let mut chunk = from / sse::CHUNK_BYTES;
    let end_chunk = (to - 1) / sse::CHUNK_BYTES;
    while chunk <= end_chunk {
        let stripe = chunk / sse::CHUNKS_PER_STRIPE;
        let stripe_last = ((stripe + 1) * sse::CHUNKS_PER_STRIPE - 1).min(end_chunk);
        let offset = (chunk % sse::CHUNKS_PER_STRIPE) * sse::SEALED_CHUNK_BYTES;
        let len: u64 = (chunk..=stripe_last)
            .map(|c| sse::chunk_len(segment.size, c) + sse::TAG_BYTES)
            .sum();
        let sealed = read_exact(pool, &segment.instance, stripe, offset, len).await?;
        // Opened in place (the read's buffer is ours alone, so this does not copy), then
        // handed on as one slice per chunk: the plaintext is never copied here.
        let mut buffer = BytesMut::from(sealed);
        let mut kept = Vec::with_capacity((stripe_last - chunk + 1) as usize);
        let mut at = 0usize;
        for c in chunk..=stripe_last {
            let sealed_len = (sse::chunk_len(segment.size, c) + sse::TAG_BYTES) as usize;
            let opened = key
                .open(c, c == last_chunk, &mut buffer[at..at + sealed_len])
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            let chunk_start = c * sse::CHUNK_BYTES;
            let skip = from.saturating_sub(chunk_start) as usize;
            let keep = (to - chunk_start).min(opened as u64) as usize;
            kept.push(at + skip..at + keep);
            at += sealed_len;
        }
        let buffer = buffer.freeze();
        let pieces = kept.into_iter().map(|range| buffer.slice(range)).collect();
        if send.send(Ok(pieces)).await.is_err() {
            return Ok(());
        }
        chunk = stripe_last + 1;
    }
    Ok(())
}

/// Reads bytes `[from, to)` of the content of a segment sealed in chunk records: the
/// chunks they touch with their records (`ReadChunks`), a stripe's worth at a time, opened
/// in place and cut to the range.
async fn read_records(
    pool: &Pool,
    segment: &Segment,
    key: &ChunkKey,
    from: u64,
    to: u64,
    send: &Pieces,
) -> Result<(), std::io::Error> {
    let chunk = sse::RECORD_CHUNK_BYTES;
    let last_chunk = (segment.size - 1) / chunk;
    let mut at = from;
    while at < to {
        let stripe = at / segment.stripe_bytes;
        let base = stripe * segment.stripe_bytes;
        let stop = (base + segment.stripe_bytes).min(to);
        let first = (at - base) / chunk;
        let count = (stop - base).div_ceil(chunk) - first;
        let name = layout::stripe_object(&segment.instance, stripe);
        let piece = Records {
            pool,
            name: &name,
            key,
            first,
            count,
            base_chunk: base / chunk,
            last_chunk,
        };
        // A chunk that fails its tag has the primary replace its copy from a good one.
        let buffer = match piece.read().await {
            Err(client::Error::Integrity(why)) => match pool.read_repair(&name, &why).await {
                Ok(()) => piece.read().await,
                Err(e) => Err(e),
            },
            read => read,
        }
        .map_err(|e| std::io::Error::other(format!("reading {name}: {e}")))?;
        let start = (at - base - first * chunk) as usize;
        let piece = buffer.freeze().slice(start..start + (stop - at) as usize);
        if send.send(Ok(vec![piece])).await.is_err() {
            return Ok(());
        }
        at = stop;
    }
    Ok(())
}

/// Chunks `[first, first + count)` of stripe object `name`, sealed in records under the
/// object's own key.
struct Records<'a> {
    pool: &'a Pool,
    name: &'a str,
    key: &'a ChunkKey,
    first: u64,
    count: u64,
    /// The segment's chunk index of the stripe's first chunk.
    base_chunk: u64,
    /// The segment's last chunk index (sealed as the last).
    last_chunk: u64,
}

impl Records<'_> {
    /// The chunks, read and opened in place; a chunk that fails its tag is
    /// `client::Error::Integrity`.
    async fn read(&self) -> Result<BytesMut, client::Error> {
        let (chunk, count) = (sse::RECORD_CHUNK_BYTES, self.count);
        let ops = vec![ObjectOp::ReadChunks {
            first: self.first,
            count: count as u32,
        }];
        let (results, data) = self.pool.operate(self.name, ops, Bytes::new()).await?;
        let seals = match results.into_iter().next() {
            Some(OpResult::Chunks { seals, .. }) => seals,
            other => {
                return Err(client::Error::Failed(format!(
                    "unexpected result {other:?}"
                )))
            }
        };
        if seals.len() as u64 != count || data.len() as u64 != count * chunk {
            return Err(client::Error::Failed(format!(
                "{} chunks ({} bytes) where the index says {count}",
                seals.len(),
                data.len()
            )));
        }
        let mut buffer = BytesMut::from(data);
        for (i, (bytes, seal)) in buffer.chunks_mut(chunk as usize).zip(&seals).enumerate() {
            let index = self.base_chunk + self.first + i as u64;
            let seal =
                seal.ok_or_else(|| client::Error::Integrity(format!("chunk {index} is missing")))?;
            self.key
                .open_detached(index, index == self.last_chunk, &seal.tag, bytes)
                .map_err(|e| client::Error::Integrity(e.to_string()))?;
        }
        Ok(buffer)
    }
}

async fn read_exact(
    pool: &Pool,
    instance: &str,
    stripe: u64,
    offset: u64,
    len: u64,
) -> Result<Bytes, std::io::Error> {
    let name = layout::stripe_object(instance, stripe);
    match pool.read(&name, offset, len).await {
        Ok(bytes) if bytes.len() as u64 == len => Ok(bytes),
        Ok(bytes) => Err(std::io::Error::other(format!(
            "{name} holds {} bytes from {offset}, the index says {len}",
            bytes.len()
        ))),
        Err(e) => Err(std::io::Error::other(format!("reading {name}: {e}"))),
    }
}

/// Where a read sends what it read: a stripe's worth at a time, in pieces.
type Pieces = mpsc::Sender<Result<Vec<Bytes>, std::io::Error>>;

/// A stream of the bytes `range` of the object `entry` describes, read stripe by stripe a
/// little ahead of the reader; `keys` holds the data key of each sealed segment, in order.
/// The content stays until the reading ends (`hold`). Dropping the stream stops the reading.
pub fn read(
    pool: &Pool,
    entry: &ObjectEntry,
    range: std::ops::Range<u64>,
    keys: Vec<Option<Arc<SecretKey<32>>>>,
    hold: crate::readers::Hold,
) -> Reader {
    let (send, receive) = mpsc::channel(READ_AHEAD);
    let (pool, entry) = (pool.clone(), entry.clone());
    tokio::spawn(async move {
        let _hold = hold;
        let mut base = 0;
        for (segment, key) in entry.segments.iter().zip(keys) {
            let end = base + segment.size;
            let (from, to) = (range.start.max(base), range.end.min(end));
            if from < to {
                let (from, to) = (from - base, to - base);
                let read = match (&segment.sealed, key) {
                    (None, _) => read_plain(&pool, segment, from, to, &send).await,
                    (Some(_), Some(key)) => {
                        let key = ChunkKey::new(&key, &segment.instance);
                        match segment.sealed_in_records() {
                            true => read_records(&pool, segment, &key, from, to, &send).await,
                            false => read_sealed(&pool, segment, &key, from, to, &send).await,
                        }
                    }
                    (Some(_), None) => Err(std::io::Error::other("no data key for a segment")),
                };
                if let Err(e) = read {
                    tracing::warn!("{e}");
                    let _ = send.send(Err(e)).await;
                    return;
                }
            }
            base = end;
        }
    });
    Reader {
        receive,
        batch: Vec::new().into_iter(),
    }
}

/// The stream [`read`] returns.
pub struct Reader {
    receive: mpsc::Receiver<Result<Vec<Bytes>, std::io::Error>>,
    /// What the last batch holds that was not yet yielded.
    batch: std::vec::IntoIter<Bytes>,
}

impl Stream for Reader {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(piece) = self.batch.next() {
                return Poll::Ready(Some(Ok(piece)));
            }
            match self.receive.poll_recv(cx) {
                Poll::Ready(Some(Ok(batch))) => self.batch = batch.into_iter(),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_sealed_in_records_open_only_where_they_were_sealed() {
        let data_key = SecretKey::<32>::generate();
        let key = ChunkKey::new(&data_key, "instance-a");
        let chunk = sse::RECORD_CHUNK_BYTES as usize;
        let content: Vec<u8> = (0..2 * chunk + 100).map(|i| i as u8).collect();
        let mut data = BytesMut::from(&content[..]);
        let seals = seal_records(&key, 10, true, &mut data);
        assert_eq!(seals.len(), 3);
        assert_eq!(data.len(), 3 * chunk, "the last chunk is padded");
        assert!(seals.iter().all(|s| s.key_id == sse::SEGMENT_KEY_ID));

        let opened = |index: u64, last: bool, at: usize| {
            let mut bytes = data[at * chunk..(at + 1) * chunk].to_vec();
            key.open_detached(index, last, &seals[at].tag, &mut bytes)
                .map(|()| bytes)
        };
        assert_eq!(opened(10, false, 0).expect("opens"), &content[..chunk]);
        let tail = opened(12, true, 2).expect("the last opens");
        assert_eq!(&tail[..100], &content[2 * chunk..]);
        assert!(tail[100..].iter().all(|b| *b == 0));
        // At another index, not as the last, the last taken as a middle chunk: each fails.
        assert!(opened(11, false, 0).is_err());
        assert!(opened(12, false, 2).is_err());
        assert!(opened(11, true, 1).is_err());
    }
}
