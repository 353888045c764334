//! The write side of a link, shared by everyone who sends on it. A small request sent by a
//! caller with no other call in flight on the link, while the link is idle, is sealed and
//! written to the socket by the caller, on its own thread: no task has to wake up to write
//! it (a client's synchronous write, and a primary's requests to its replicas, which its
//! own task sends before it applies the write). Every other frame (long, sent while others
//! are in flight, queued or the socket full, and every reply of a server) waits in order
//! for the link's writer task, which seals what is queued outside the lock and writes it
//! together: at high queue depths one system call carries many frames, which writing each
//! where it is made would lose (docs/benchmarks.md, 2026-12-03).

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Notify;

use crate::data::Data;
use crate::frame::{Segment, HEADER_BYTES};
use crate::link::FrameWriter;
use crate::metrics::Meter;
use crate::protect::{FrameKey, SegmentCheck, BOUND_BIT, PREFIX_BYTES, TAG_BYTES};

/// Frames whose segments come to at most this many bytes may be sealed and written by their
/// sender; longer ones (whose sealing or copy into the socket takes hundreds of
/// microseconds) go to the writer task, so that senders never wait long for the lock.
const DIRECT_BYTES_MAX: usize = 64 << 10;
/// Pieces handed to the socket in one vectored write: 1 MiB of a read served from an OSD's
/// cache in 4 KiB blocks (`Data`), 4 KiB of the stack.
const SLICES_MAX: usize = 256;

/// One frame queued for the writer.
pub(crate) struct Outgoing {
    pub header: crate::frame::Header,
    pub meta: Bytes,
    pub data: Data,
    /// The check an open segment arrived with, when it is passed on; else the writer makes
    /// one.
    pub check: Option<SegmentCheck>,
}

/// A link's write side: the socket, and what is waiting to be written on it.
struct Outbox {
    stream: OwnedWriteHalf,
    state: Mutex<State>,
    /// Wakes the writer task: there is work (`State::busy` was set), a failure, or the last
    /// sender went away.
    wake: Notify,
    meter: Meter,
}

struct State {
    /// The key that protects this end's frames in secure mode. The writer task takes it
    /// out while it seals, and only while `busy` (when no sender uses it).
    key: Option<FrameKey>,
    /// Frames not yet sealed, for the writer task.
    queue: VecDeque<Outgoing>,
    /// Bytes sealed and not yet written, in order.
    pending: VecDeque<Bytes>,
    /// The writer task has work: `queue` or `pending` is not empty, or it is to stop.
    /// Senders write only while it is clear, so the bytes keep their order.
    busy: bool,
    /// A write failed: given to the writer task, which ends the link with it.
    failed: Option<std::io::Error>,
    /// The link is finished (its writer ended): frames sent now are dropped.
    ended: bool,
    senders: usize,
}

/// A handle that sends frames on a link; the link's write side closes (after writing what
/// was sent) when the last handle is dropped.
pub(crate) struct Sender {
    outbox: Arc<Outbox>,
}

/// The link's writer task: write with [`Writer::run`].
pub(crate) struct Writer {
    outbox: Arc<Outbox>,
}

/// The write side of a link, to send on and to write with.
pub(crate) fn outbox(writer: FrameWriter) -> (Sender, Writer) {
    let FrameWriter { stream, key, meter } = writer;
    let outbox = Arc::new(Outbox {
        stream,
        state: Mutex::new(State {
            key,
            queue: VecDeque::new(),
            pending: VecDeque::new(),
            busy: false,
            failed: None,
            ended: false,
            senders: 1,
        }),
        wake: Notify::new(),
        meter,
    });
    (
        Sender {
            outbox: outbox.clone(),
        },
        Writer { outbox },
    )
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change under this lock leaves the state whole: take it after a panic too.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands the writer task its work, once.
    fn make_busy(&self, state: &mut State) {
        if !state.busy {
            state.busy = true;
            self.wake.notify_one();
        }
    }

    /// Writes what the socket takes of `state.pending` now, without waiting.
    fn write_pending(&self, state: &mut State) -> std::io::Result<()> {
        while !state.pending.is_empty() {
            // On the stack: every frame passes here, and a Vec would be allocated per write.
            let mut slices = [IoSlice::new(&[]); SLICES_MAX];
            let mut count = 0;
            for (slot, piece) in slices.iter_mut().zip(state.pending.iter()) {
                *slot = IoSlice::new(piece);
                count += 1;
            }
            let mut written = match self.stream.try_write_vectored(&slices[..count]) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            while written > 0 {
                let front = state
                    .pending
                    .front_mut()
                    .expect("written bytes were pending");
                if written < front.len() {
                    bytes::Buf::advance(front, written);
                    written = 0;
                } else {
                    written -= front.len();
                    state.pending.pop_front();
                }
            }
        }
        Ok(())
    }
}

impl Sender {
    /// Sends `frame` after every frame sent before it; `false` if the link has failed (the
    /// frame is dropped, and the writer task ends the link). `alone`: nothing else is in
    /// flight on the link, so no other frame would go out with this one.
    pub(crate) fn send(&self, frame: Outgoing, alone: bool) -> bool {
        let outbox = &*self.outbox;
        let mut state = outbox.lock();
        if state.ended || state.failed.is_some() {
            return false;
        }
        if !alone || state.busy || frame.meta.len() + frame.data.len() > DIRECT_BYTES_MAX {
            state.queue.push_back(frame);
            outbox.make_busy(&mut state);
            return true;
        }
        let state = &mut *state;
        encode(
            &frame,
            state.key.as_mut(),
            &outbox.meter,
            &mut state.pending,
        );
        if let Err(e) = outbox.write_pending(state) {
            state.failed = Some(e);
        }
        if !state.pending.is_empty() || state.failed.is_some() {
            outbox.make_busy(state);
        }
        true
    }

    /// Whether frames wait for the writer task (sealing, or bytes the socket did not take):
    /// a frame sent on the link goes out only once that task has run.
    pub(crate) fn writer_busy(&self) -> bool {
        self.outbox.lock().busy
    }
}

impl Clone for Sender {
    fn clone(&self) -> Self {
        self.outbox.lock().senders += 1;
        Sender {
            outbox: self.outbox.clone(),
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let mut state = self.outbox.lock();
        state.senders -= 1;
        if state.senders == 0 {
            // The writer finishes what is queued, then closes the write side.
            self.outbox.make_busy(&mut state);
        }
    }
}

impl Writer {
    /// Writes what senders leave to it until every sender is gone and all is written; the
    /// first failure ends it. The link's write side closes when it ends (or is dropped),
    /// and every frame sent after that is dropped.
    pub(crate) async fn run(self) -> std::io::Result<()> {
        loop {
            self.outbox.wake.notified().await;
            if let Some(ended) = self.work().await {
                return ended;
            }
        }
    }

    /// Seals and writes until nothing is left (`None`: wait for more), or the link ends
    /// (its outcome).
    async fn work(&self) -> Option<std::io::Result<()>> {
        let outbox = &*self.outbox;
        loop {
            let (frames, mut key) = {
                let mut state = outbox.lock();
                if let Some(e) = state.failed.take() {
                    return Some(Err(e));
                }
                (std::mem::take(&mut state.queue), state.key.take())
            };
            let mut sealed = VecDeque::new();
            for frame in &frames {
                encode(frame, key.as_mut(), &outbox.meter, &mut sealed);
            }
            let socket_full = {
                let mut state = outbox.lock();
                state.key = key;
                state.pending.extend(sealed);
                if let Err(e) = outbox.write_pending(&mut state) {
                    return Some(Err(e));
                }
                if state.pending.is_empty() && state.queue.is_empty() {
                    state.busy = false;
                    return (state.senders == 0).then_some(Ok(()));
                }
                !state.pending.is_empty()
            };
            if !socket_full {
                continue;
            }
            if let Err(e) = outbox.stream.writable().await {
                return Some(Err(e));
            }
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let mut state = self.outbox.lock();
        state.ended = true;
        state.queue.clear();
        state.pending.clear();
        // The peer learns at once that nothing more comes, even while senders (requests
        // still being handled) hold the socket. A socket already shut down or broken has
        // nothing to learn.
        // SAFETY: shutdown(2) on the descriptor of a socket this outbox owns, open until
        // the outbox is dropped; it neither closes nor invalidates the descriptor.
        unsafe {
            libc::shutdown(
                std::os::fd::AsRawFd::as_raw_fd(self.outbox.stream.as_ref()),
                libc::SHUT_WR,
            );
        }
    }
}

/// Appends the bytes of `frame` to `out`: in crc mode its header, metadata and data; in
/// secure mode the clear prefix (the open segment's length with its top bit set when the
/// segment is bound by chunk records, [`Segment::Bound`]); the header, the segment check of
/// an open segment ([`Segment::Open`]: the one it arrived with, or a new one), the metadata
/// and (unless open) the data, encrypted, and the tag; then the open segment, if any, as
/// raw bytes. Data that goes out as it is is not copied, nor are its pieces joined.
fn encode(frame: &Outgoing, key: Option<&mut FrameKey>, meter: &Meter, out: &mut VecDeque<Bytes>) {
    meter.frame(HEADER_BYTES + frame.meta.len() + frame.data.len());
    let Some(key) = key else {
        let mut head = Vec::with_capacity(HEADER_BYTES + frame.meta.len());
        head.extend_from_slice(&frame.header.encode());
        head.extend_from_slice(&frame.meta);
        out.push_back(Bytes::from(head));
        out.extend(frame.data.pieces().iter().cloned());
        return;
    };
    let none = Data::default();
    let (inside, open, bound_bit): (&Data, &Data, u32) = match frame.header.segment {
        Segment::Inside => (&frame.data, &none, 0),
        Segment::Open => (&none, &frame.data, 0),
        Segment::Bound => (&none, &frame.data, BOUND_BIT),
    };
    let check = (frame.header.segment == Segment::Open).then(|| match &frame.check {
        Some(check) => check.encode(),
        None => SegmentCheck::new(open).encode(),
    });
    let check: &[u8] = check.as_ref().map_or(&[], |c| &c[..]);
    let protected_len = HEADER_BYTES + check.len() + frame.meta.len() + inside.len();
    let mut bytes = Vec::with_capacity(PREFIX_BYTES + protected_len + TAG_BYTES);
    bytes.extend_from_slice(&(protected_len as u32).to_le_bytes());
    bytes.extend_from_slice(&(open.len() as u32 | bound_bit).to_le_bytes());
    bytes.extend_from_slice(&frame.header.encode());
    bytes.extend_from_slice(check);
    bytes.extend_from_slice(&frame.meta);
    for piece in inside.pieces() {
        bytes.extend_from_slice(piece);
    }
    let tag = key.sealing().seal(&mut bytes[PREFIX_BYTES..]);
    metrics::crypto::sealed(metrics::crypto::Kind::Link, protected_len);
    bytes.extend_from_slice(&tag);
    out.push_back(Bytes::from(bytes));
    out.extend(open.pieces().iter().cloned());
}

/// The bytes of one secure frame, as a link sends them.
#[cfg(any(test, fuzzing))]
pub(crate) fn protect(key: &mut FrameKey, frame: &Outgoing) -> Vec<u8> {
    let mut pieces = VecDeque::new();
    let meter = crate::metrics::link(crate::entity::Mode::Secure).1;
    encode(frame, Some(key), &meter, &mut pieces);
    pieces
        .iter()
        .flat_map(|piece| piece.iter().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::entity::Mode;
    use crate::frame::{Header, Kind};
    use crate::link::{read_frame, FrameReader};

    const SECRET: [u8; 32] = [4; 32];

    /// A write side on one end of a loopback TCP connection, and a frame reader on the
    /// other, in `mode`.
    async fn pair(mode: Mode) -> (Sender, Writer, FrameReader) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let (client, accepted) =
            tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        let (_, write_half) = client.expect("connected").into_split();
        let (read_half, _) = accepted.expect("accepted").0.into_split();
        let key = || (mode == Mode::Secure).then(|| FrameKey::new(SECRET));
        let (meter_in, meter_out) = crate::metrics::link(mode);
        let (sender, writer) = outbox(FrameWriter {
            stream: write_half,
            key: key(),
            meter: meter_out,
        });
        let reader = FrameReader {
            stream: Box::new(read_half),
            key: key(),
            meter: meter_in,
        };
        (sender, writer, reader)
    }

    fn frame(mode: Mode, tag: u64, len: usize) -> Outgoing {
        let meta = Bytes::from(tag.to_le_bytes().to_vec());
        let data = Data::from(Bytes::from(vec![tag as u8; len]));
        let segment = if tag.is_multiple_of(3) {
            Segment::Open
        } else {
            Segment::Inside
        };
        let header = Header::for_body(Kind::Request, tag, &meta, &data, mode, segment);
        Outgoing {
            header,
            meta,
            data,
            check: None,
        }
    }

    /// Small frames (written by their senders while the link is idle) and long ones (left to
    /// the writer task) from several senders at once, with the reader stalled until the
    /// socket is full: each sender's frames arrive whole and in the order it sent them,
    /// in both modes, and the link closes once the last sender is gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_keep_each_senders_order_whether_written_by_it_or_by_the_writer() {
        for mode in [Mode::Crc, Mode::Secure] {
            let (sender, writer, mut reader) = pair(mode).await;
            let written = tokio::spawn(writer.run());
            let lens = [100, 4096, DIRECT_BYTES_MAX + 1, 1 << 20, 0, 9000];
            let mut senders = Vec::new();
            for first in 0..4u64 {
                let sender = sender.clone();
                senders.push(tokio::spawn(async move {
                    for n in 0..60u64 {
                        let tag = first + 4 * n;
                        assert!(sender.send(frame(mode, tag, lens[(tag % 6) as usize]), n % 2 == 0));
                        if n.is_multiple_of(7) {
                            tokio::task::yield_now().await;
                        }
                    }
                }));
            }
            drop(sender);
            // Stalled: 4 x 10 frames of 1 MiB do not fit in the socket's buffers.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut next = [0u64, 1, 2, 3];
            let mut count = 0;
            while let Some(got) = read_frame(&mut reader, Duration::from_secs(10))
                .await
                .expect("whole frames")
            {
                let tag = got.header.tag;
                let from = (tag % 4) as usize;
                assert_eq!(
                    tag, next[from],
                    "{mode}: sender {from}'s frames out of order"
                );
                next[from] += 4;
                assert_eq!(&got.meta[..], &tag.to_le_bytes()[..]);
                assert_eq!(got.data.len(), lens[(tag % 6) as usize]);
                assert!(
                    got.data.iter().all(|b| *b == tag as u8),
                    "{mode}: frame {tag}"
                );
                count += 1;
            }
            assert_eq!(
                count, 240,
                "{mode}: every frame arrived, then the link closed"
            );
            for sent in senders {
                sent.await.expect("a sender");
            }
            let written = written.await.expect("the writer task");
            written.expect("the writer wrote all");
        }
    }

    /// A lone sender's direct writes fill the socket while the reader is stalled: the write
    /// the socket takes only part of leaves the rest to the writer task, and the frames
    /// after it queue behind it, so all arrive whole and in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_direct_write_the_socket_takes_in_part_is_finished_by_the_writer() {
        for mode in [Mode::Crc, Mode::Secure] {
            let (sender, writer, mut reader) = pair(mode).await;
            let written = tokio::spawn(writer.run());
            let len = DIRECT_BYTES_MAX - 1024;
            // 32 MiB: more than a loopback socket's buffers hold.
            let frames = (32 << 20) / len as u64;
            for tag in 1..=frames {
                assert!(sender.send(frame(mode, tag * 3 + 1, len), true));
            }
            drop(sender);
            let mut want = 1;
            while let Some(got) = read_frame(&mut reader, Duration::from_secs(10))
                .await
                .expect("whole frames")
            {
                assert_eq!(got.header.tag, want * 3 + 1, "{mode}: in order");
                assert!(
                    got.data.len() == len && got.data.iter().all(|b| *b == (want * 3 + 1) as u8)
                );
                want += 1;
            }
            assert_eq!(want, frames + 1, "{mode}: every frame arrived");
            let written = written.await.expect("the writer task");
            written.expect("the writer wrote all");
        }
    }

    /// Once the writer has ended (its task dropped), sending fails instead of queueing
    /// forever, and the peer sees the link end.
    #[tokio::test]
    async fn sending_after_the_writer_ended_fails_and_the_peer_sees_the_end() {
        let (sender, writer, mut reader) = pair(Mode::Crc).await;
        assert!(sender.send(frame(Mode::Crc, 1, 10), true));
        drop(writer);
        assert!(!sender.send(frame(Mode::Crc, 2, 10), true));
        let first = read_frame(&mut reader, Duration::from_secs(5))
            .await
            .expect("the frame sent before");
        assert_eq!(first.map(|f| f.header.tag), Some(1));
        assert!(read_frame(&mut reader, Duration::from_secs(5))
            .await
            .expect("a clean end")
            .is_none());
    }
}
