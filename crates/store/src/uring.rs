//! Batched direct IO through io_uring, on the calling thread.
//!
//! One ring per thread (created on first use, `RING_ENTRIES` deep). A batch submits as many
//! pieces as the ring holds and, as reads complete, hands each piece to the caller's
//! callback while the rest are still in flight; writes are submitted one by one right after
//! the caller seals each piece, so sealing piece i+1 overlaps writing piece i, or, when they
//! are already sealed, all at once (one system call for up to a ring of pieces). No other
//! thread touches the data: this is the store's rule that crypto runs on the IO thread.
//!
//! Safety argument: the kernel writes into (or reads from) a piece's buffer from submission
//! until its completion. A batch never returns, and never unwinds, while a piece is in
//! flight: `Batch` drains every outstanding completion in its `Drop`, so even a panicking
//! callback cannot free a buffer the kernel still targets.
//!
//! Where io_uring is unavailable (an old kernel, or disabled by sysctl), or the thread's
//! ring is already in use further up the stack, these return None and the device falls
//! back to one synchronous call per piece.

use crate::device::{IoPiece, WritePiece};
use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;

/// Pieces in flight at once per thread.
pub const RING_ENTRIES: u32 = 64;

thread_local! {
    static RING: RefCell<Option<IoUring>> = RefCell::new(new_ring());
}

/// A ring, if this kernel has io_uring with the READ and WRITE opcodes (Linux 5.6+; on
/// 5.1 to 5.5 a ring can be made but every READ/WRITE would fail with EINVAL).
fn new_ring() -> Option<IoUring> {
    let ring = IoUring::new(RING_ENTRIES).ok()?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe).ok()?;
    (probe.is_supported(opcode::Read::CODE) && probe.is_supported(opcode::Write::CODE))
        .then_some(ring)
}

/// A batch's view of the ring, and how many of its pieces the kernel still holds.
struct Batch<'r> {
    ring: &'r mut IoUring,
    in_flight: usize,
}

impl Batch<'_> {
    /// Submits what is queued and waits for at least `wait` completions; returns them as
    /// (piece index, result).
    fn submit_and_reap(&mut self, wait: usize) -> Vec<(usize, i32)> {
        loop {
            match self.ring.submit_and_wait(wait) {
                Ok(_) => break,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN)
                    ) =>
                {
                    std::thread::yield_now();
                    continue;
                }
                // Buffers are in the kernel's hands; returning would let them be freed.
                Err(e) => panic!("io_uring submit failed with IO in flight: {e}"),
            }
        }
        let done: Vec<(usize, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        self.in_flight -= done.len();
        done
    }

    /// Submits what is queued without waiting for any of it (what is not taken now goes in
    /// with the next wait).
    fn submit(&mut self) {
        let _ = self.ring.submit();
    }

    fn push(&mut self, entry: io_uring::squeue::Entry) {
        // SAFETY: the entry's buffer stays valid until its completion is reaped (see the
        // module's safety argument); the queue has room because in_flight < RING_ENTRIES.
        unsafe {
            self.ring
                .submission()
                .push(&entry)
                .expect("the submission queue has room")
        };
        self.in_flight += 1;
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        while self.in_flight > 0 {
            self.submit_and_reap(1);
        }
    }
}

fn check(result: i32, offset_bytes: u64, len: usize, what: &str) -> io::Result<()> {
    if result < 0 {
        Err(io::Error::from_raw_os_error(-result))
    } else if result as usize != len {
        Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("short {what} at device offset {offset_bytes}: {result} of {len} bytes"),
        ))
    } else {
        Ok(())
    }
}

fn with_ring<T>(f: impl FnOnce(&mut IoUring) -> T) -> Option<T> {
    RING.with(|cell| {
        let mut guard = cell.try_borrow_mut().ok()?;
        let ring = guard.as_mut()?;
        Some(f(ring))
    })
}

pub(crate) fn read_each(
    fd: RawFd,
    pieces: &mut [IoPiece<'_>],
    opened: &mut dyn FnMut(usize, &mut [u8]) -> bool,
) -> Option<io::Result<()>> {
    with_ring(|ring| {
        let mut batch = Batch { ring, in_flight: 0 };
        let mut next = 0;
        let mut failed: Option<io::Error> = None;
        let mut stopped = false;
        loop {
            while next < pieces.len()
                && batch.in_flight < RING_ENTRIES as usize
                && failed.is_none()
                && !stopped
            {
                let piece = &mut pieces[next];
                let entry = opcode::Read::new(
                    types::Fd(fd),
                    piece.buffer.as_mut_ptr(),
                    piece.buffer.len() as u32,
                )
                .offset(piece.offset_bytes)
                .build()
                .user_data(next as u64);
                batch.push(entry);
                next += 1;
            }
            if batch.in_flight == 0 {
                break;
            }
            for (index, result) in batch.submit_and_reap(1) {
                if failed.is_some() || stopped {
                    continue;
                }
                let piece = &pieces[index];
                match check(result, piece.offset_bytes, piece.buffer.len(), "read") {
                    Ok(()) => stopped = !opened(index, pieces[index].buffer),
                    Err(e) => failed = Some(e),
                }
            }
        }
        failed.map_or(Ok(()), Err)
    })
}

pub(crate) fn write_each(
    fd: RawFd,
    pieces: &mut [IoPiece<'_>],
    seal: &mut dyn FnMut(usize, &mut [u8]),
) -> Option<io::Result<()>> {
    write_pieces(
        fd,
        pieces,
        &mut |index, piece| seal(index, piece.buffer),
        true,
        None,
    )
}

/// Writes pieces that are ready as they are, submitted together.
pub(crate) fn write_all(fd: RawFd, pieces: &[WritePiece<'_>]) -> Option<io::Result<()>> {
    write_pieces(fd, &mut pieces.to_vec(), &mut |_, _| {}, false, None)
}

/// Submits every piece, then calls `alongside` while they are in flight, then waits for
/// them. `alongside` must not use this thread's ring (it is in use here); it runs even when
/// the writes fail.
pub(crate) fn write_all_alongside(
    fd: RawFd,
    pieces: &[WritePiece<'_>],
    alongside: &mut dyn FnMut(),
) -> Option<io::Result<()>> {
    write_pieces(
        fd,
        &mut pieces.to_vec(),
        &mut |_, _| {},
        false,
        Some(alongside),
    )
}

/// A piece the ring writes: where it goes and its bytes once `prepare` has run on it.
trait ToWrite {
    fn offset_bytes(&self) -> u64;
    fn bytes(&self) -> &[u8];
}

impl ToWrite for IoPiece<'_> {
    fn offset_bytes(&self) -> u64 {
        self.offset_bytes
    }
    fn bytes(&self) -> &[u8] {
        self.buffer
    }
}

impl ToWrite for WritePiece<'_> {
    fn offset_bytes(&self) -> u64 {
        self.offset_bytes
    }
    fn bytes(&self) -> &[u8] {
        self.buffer
    }
}

/// Prepares (seals) and queues each piece in turn; with `submit_each`, submits it at once,
/// else the queued pieces go in together when the ring is full and at the end.
fn write_pieces<P: ToWrite>(
    fd: RawFd,
    pieces: &mut [P],
    prepare: &mut dyn FnMut(usize, &mut P),
    submit_each: bool,
    alongside: Option<&mut dyn FnMut()>,
) -> Option<io::Result<()>> {
    with_ring(|ring| {
        let mut batch = Batch { ring, in_flight: 0 };
        let mut failed: Option<io::Error> = None;
        let record = |done: Vec<(usize, i32)>, pieces: &[P], failed: &mut Option<io::Error>| {
            for (index, result) in done {
                let piece = &pieces[index];
                let checked = check(result, piece.offset_bytes(), piece.bytes().len(), "write");
                if let (Err(e), None) = (checked, failed.as_ref()) {
                    *failed = Some(e);
                }
            }
        };
        for index in 0..pieces.len() {
            if batch.in_flight == RING_ENTRIES as usize {
                let done = batch.submit_and_reap(1);
                record(done, pieces, &mut failed);
            }
            if failed.is_some() {
                break;
            }
            let piece = &mut pieces[index];
            prepare(index, piece);
            let entry = opcode::Write::new(
                types::Fd(fd),
                piece.bytes().as_ptr(),
                piece.bytes().len() as u32,
            )
            .offset(piece.offset_bytes())
            .build()
            .user_data(index as u64);
            batch.push(entry);
            if !submit_each {
                continue;
            }
            if let Err(e) = batch.ring.submit() {
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN)
                ) {
                    failed = Some(e);
                }
            }
        }
        if let Some(alongside) = alongside {
            batch.submit();
            alongside();
        }
        while batch.in_flight > 0 {
            let done = batch.submit_and_reap(1);
            record(done, pieces, &mut failed);
        }
        failed.map_or(Ok(()), Err)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::BLOCK_SIZE_BYTES;
    use std::os::fd::AsRawFd;

    const PIECE: usize = BLOCK_SIZE_BYTES as usize;

    /// A file of `blocks` blocks, block i filled with byte i, and 8 aligned read buffers.
    fn setup(blocks: usize) -> (tempfile::NamedTempFile, crate::device::AlignedBuf) {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        let bytes: Vec<u8> = (0..blocks).flat_map(|i| vec![i as u8; PIECE]).collect();
        std::io::Write::write_all(&mut file, &bytes).expect("fill");
        (file, crate::device::AlignedBuf::zeroed(8))
    }

    fn pieces<'b>(buffer: &'b mut [u8], offsets: &[u64]) -> Vec<IoPiece<'b>> {
        buffer
            .chunks_exact_mut(PIECE)
            .zip(offsets)
            .map(|(buffer, offset)| IoPiece {
                offset_bytes: *offset,
                buffer,
            })
            .collect()
    }

    #[test]
    fn every_piece_arrives_once_with_its_own_bytes() {
        let (file, mut buffer) = setup(8);
        let mut io = pieces(&mut buffer, &[7, 0, 3, 5].map(|b| b * PIECE as u64));
        let mut seen = Vec::new();
        read_each(file.as_file().as_raw_fd(), &mut io, &mut |i, bytes| {
            seen.push((i, bytes[0]));
            true
        })
        .expect("io_uring available")
        .expect("reads succeed");
        seen.sort();
        assert_eq!(seen, vec![(0, 7), (1, 0), (2, 3), (3, 5)]);
    }

    #[test]
    fn a_short_read_is_an_error_and_the_ring_stays_usable() {
        let (file, mut buffer) = setup(2);
        let fd = file.as_file().as_raw_fd();
        let mut io = pieces(&mut buffer, &[0, 5 * PIECE as u64]);
        let result = read_each(fd, &mut io, &mut |_, _| true).expect("io_uring available");
        assert_eq!(
            result.expect_err("past the end").kind(),
            io::ErrorKind::UnexpectedEof
        );
        let mut io = pieces(&mut buffer, &[PIECE as u64]);
        read_each(fd, &mut io, &mut |_, bytes| bytes[0] == 1)
            .expect("ring")
            .expect("next batch works");
    }

    #[test]
    fn a_panicking_callback_drains_the_batch_before_unwinding() {
        let (file, mut buffer) = setup(8);
        let fd = file.as_file().as_raw_fd();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut io = pieces(
                &mut buffer,
                &[0, 1, 2, 3, 4, 5, 6, 7].map(|b| b * PIECE as u64),
            );
            read_each(fd, &mut io, &mut |_, _| panic!("opening failed"))
        }));
        assert!(caught.is_err());
        // Nothing of the panicked batch is left in flight: the next batch sees only its own.
        let mut io = pieces(&mut buffer, &[2 * PIECE as u64]);
        let mut calls = 0;
        read_each(fd, &mut io, &mut |i, bytes| {
            calls += 1;
            i == 0 && bytes[0] == 2
        })
        .expect("ring")
        .expect("read");
        assert_eq!(calls, 1);
    }

    #[test]
    fn writes_are_sealed_in_order_and_all_land() {
        let (file, mut buffer) = setup(8);
        let fd = file.as_file().as_raw_fd();
        let mut io = pieces(&mut buffer, &[4, 6, 1].map(|b| b * PIECE as u64));
        let mut order = Vec::new();
        write_each(fd, &mut io, &mut |i, bytes| {
            order.push(i);
            bytes.fill(0xa0 + i as u8);
        })
        .expect("ring")
        .expect("writes");
        assert_eq!(order, vec![0, 1, 2]);
        let on_disk = std::fs::read(file.path()).expect("read back");
        for (i, block) in [4usize, 6, 1].iter().enumerate() {
            assert!(on_disk[block * PIECE..(block + 1) * PIECE]
                .iter()
                .all(|b| *b == 0xa0 + i as u8));
        }
    }

    /// More ready pieces than the ring holds, submitted together: every one lands whole.
    #[test]
    fn ready_pieces_written_together_all_land_past_a_full_ring() {
        let blocks = RING_ENTRIES as usize * 2 + 3;
        let (file, _) = setup(blocks);
        let fd = file.as_file().as_raw_fd();
        let mut buffer = crate::device::AlignedBuf::zeroed(blocks);
        for (i, piece) in buffer.chunks_exact_mut(PIECE).enumerate() {
            piece.fill(0x80 ^ i as u8);
        }
        let offsets: Vec<u64> = (0..blocks).rev().map(|b| (b * PIECE) as u64).collect();
        let io: Vec<WritePiece<'_>> = buffer
            .chunks_exact(PIECE)
            .zip(&offsets)
            .map(|(buffer, &offset_bytes)| WritePiece {
                offset_bytes,
                buffer,
            })
            .collect();
        write_all(fd, &io).expect("ring").expect("writes");
        let on_disk = std::fs::read(file.path()).expect("read back");
        for i in 0..blocks {
            let block = blocks - 1 - i;
            assert!(
                on_disk[block * PIECE..(block + 1) * PIECE]
                    .iter()
                    .all(|b| *b == 0x80 ^ i as u8),
                "piece {i} at block {block}"
            );
        }
    }
}
