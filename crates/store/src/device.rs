//! The device seam: where the store's data blocks live.
//!
//! `Device` is the narrow interface (positional read, positional write, sync, length, and
//! two batched forms) that tests wrap to inject IO failures and that a simulator can
//! replace. The batched forms let the caller open or seal one piece on its own thread while
//! the device works on the others; their default runs one piece at a time. `FileDevice` is the real
//! one: a preallocated file or a raw block device opened with O_DIRECT, so data bypasses the
//! page cache and every buffer handed to it is `BLOCK_SIZE_BYTES`-aligned in memory, offset
//! and length. `AlignedBuf` is that buffer; sealing happens inside it, in place. Bytes that
//! need no sealing and already sit on block boundaries (`Blocks::Shared`, such as a segment
//! the messenger received aligned) are written from where they are.

use std::alloc::{self, Layout};
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// The unit of allocation, of direct IO, and of `gcm` sealing (one chunk = one block).
pub const BLOCK_SIZE_BYTES: u64 = 4096;
/// Largest piece of a batched IO (256 KiB): small enough that opening or sealing one piece
/// overlaps the device's work on the others, large enough to keep per-IO costs low.
pub const IO_PIECE_BLOCKS_MAX: u64 = 64;

/// One piece of a batched IO: where on the device, and the buffer it fills or comes from.
pub struct IoPiece<'a> {
    pub offset_bytes: u64,
    pub buffer: &'a mut [u8],
}

/// One write of bytes that are ready as they are.
#[derive(Clone, Copy)]
pub struct WritePiece<'a> {
    pub offset_bytes: u64,
    pub buffer: &'a [u8],
}

pub trait Device: Send + Sync {
    fn read_at(&self, offset_bytes: u64, buffer: &mut [u8]) -> io::Result<()>;
    fn write_at(&self, offset_bytes: u64, buffer: &[u8]) -> io::Result<()>;
    /// Makes every completed write durable (fdatasync).
    fn sync(&self) -> io::Result<()>;
    fn len_bytes(&self) -> u64;

    /// Reads every piece. As each read completes, calls `opened(index, buffer)` on this
    /// thread (in any order, while others may still be in flight) and stops calling it after
    /// it returns false. Returns only once no read is in flight.
    fn read_each(
        &self,
        pieces: &mut [IoPiece<'_>],
        opened: &mut dyn FnMut(usize, &mut [u8]) -> bool,
    ) -> io::Result<()> {
        read_one_by_one(self, pieces, opened)
    }

    /// For each piece in order, calls `seal(index, buffer)` and then starts writing it, so
    /// sealing the next piece overlaps writing this one. Returns once every write completed.
    fn write_each(
        &self,
        pieces: &mut [IoPiece<'_>],
        seal: &mut dyn FnMut(usize, &mut [u8]),
    ) -> io::Result<()> {
        write_one_by_one(self, pieces, seal)
    }

    /// Writes pieces that are already sealed, submitted together where the device can (one
    /// system call and one notification of the device for many). Returns once every write
    /// completed.
    fn write_all(&self, pieces: &[WritePiece<'_>]) -> io::Result<()> {
        write_ready_one_by_one(self, pieces)
    }

    /// Writes pieces as `write_all` does, and calls `alongside` (IO on another file) while
    /// they are in flight where the device can; by default, after them. `alongside` runs
    /// whatever becomes of the writes, whose outcome is returned.
    fn write_all_alongside(
        &self,
        pieces: &[WritePiece<'_>],
        alongside: &mut dyn FnMut(),
    ) -> io::Result<()> {
        let written = self.write_all(pieces);
        alongside();
        written
    }
}

/// `Device::write_all` without batching: one write after the other.
fn write_ready_one_by_one<D: Device + ?Sized>(
    device: &D,
    pieces: &[WritePiece<'_>],
) -> io::Result<()> {
    pieces
        .iter()
        .try_for_each(|piece| device.write_at(piece.offset_bytes, piece.buffer))
}

/// `Device::read_each` without overlap: one read, then its callback, then the next.
fn read_one_by_one<D: Device + ?Sized>(
    device: &D,
    pieces: &mut [IoPiece<'_>],
    opened: &mut dyn FnMut(usize, &mut [u8]) -> bool,
) -> io::Result<()> {
    for (index, piece) in pieces.iter_mut().enumerate() {
        device.read_at(piece.offset_bytes, piece.buffer)?;
        if !opened(index, piece.buffer) {
            break;
        }
    }
    Ok(())
}

/// `Device::write_each` without overlap: seal one piece, write it, then the next.
fn write_one_by_one<D: Device + ?Sized>(
    device: &D,
    pieces: &mut [IoPiece<'_>],
    seal: &mut dyn FnMut(usize, &mut [u8]),
) -> io::Result<()> {
    for (index, piece) in pieces.iter_mut().enumerate() {
        seal(index, piece.buffer);
        device.write_at(piece.offset_bytes, piece.buffer)?;
    }
    Ok(())
}

/// A file or block device opened for direct IO. Falls back to buffered IO (with `sync`
/// still making writes durable) only where the file system refuses O_DIRECT, such as tmpfs.
pub struct FileDevice {
    file: File,
    len_bytes: u64,
    direct_io: bool,
}

impl FileDevice {
    /// Creates a regular file of `len_bytes`, with its blocks allocated now (so a full disk
    /// is found at mkfs, not at the first write).
    pub fn create(path: &Path, len_bytes: u64) -> io::Result<()> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        let rc = unsafe {
            libc::posix_fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                len_bytes as libc::off_t,
            )
        };
        if rc != 0 {
            let _ = std::fs::remove_file(path);
            return Err(io::Error::from_raw_os_error(rc));
        }
        file.sync_all()
    }

    pub fn open(path: &Path) -> io::Result<FileDevice> {
        let direct = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path);
        let (file, direct_io) = match direct {
            Ok(file) => (file, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                (OpenOptions::new().read(true).write(true).open(path)?, false)
            }
            Err(e) => return Err(e),
        };
        let len_bytes = device_len_bytes(&file)?;
        Ok(FileDevice {
            file,
            len_bytes,
            direct_io,
        })
    }

    pub fn direct_io(&self) -> bool {
        self.direct_io
    }
}

fn device_len_bytes(file: &File) -> io::Result<u64> {
    let meta = file.metadata()?;
    if std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
        let mut size: u64 = 0;
        // BLKGETSIZE64 = _IOR(0x12, 114, size_t)
        const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
        let rc = unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(file),
                BLKGETSIZE64,
                &mut size,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(size)
    } else {
        Ok(meta.len())
    }
}

fn assert_aligned(offset_bytes: u64, buffer: &[u8]) {
    assert!(
        offset_bytes.is_multiple_of(BLOCK_SIZE_BYTES)
            && (buffer.len() as u64).is_multiple_of(BLOCK_SIZE_BYTES)
            && (buffer.as_ptr() as usize).is_multiple_of(BLOCK_SIZE_BYTES as usize),
        "unaligned device IO: offset {offset_bytes}, len {}, address {:p}",
        buffer.len(),
        buffer.as_ptr()
    );
}

impl Device for FileDevice {
    fn read_at(&self, offset_bytes: u64, buffer: &mut [u8]) -> io::Result<()> {
        assert_aligned(offset_bytes, buffer);
        self.file.read_exact_at(buffer, offset_bytes)
    }

    fn write_at(&self, offset_bytes: u64, buffer: &[u8]) -> io::Result<()> {
        assert_aligned(offset_bytes, buffer);
        self.file.write_all_at(buffer, offset_bytes)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    fn read_each(
        &self,
        pieces: &mut [IoPiece<'_>],
        opened: &mut dyn FnMut(usize, &mut [u8]) -> bool,
    ) -> io::Result<()> {
        pieces
            .iter()
            .for_each(|p| assert_aligned(p.offset_bytes, p.buffer));
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.file);
        match crate::uring::read_each(fd, pieces, opened) {
            Some(result) => result,
            None => read_one_by_one(self, pieces, opened),
        }
    }

    fn write_each(
        &self,
        pieces: &mut [IoPiece<'_>],
        seal: &mut dyn FnMut(usize, &mut [u8]),
    ) -> io::Result<()> {
        pieces
            .iter()
            .for_each(|p| assert_aligned(p.offset_bytes, p.buffer));
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.file);
        match crate::uring::write_each(fd, pieces, seal) {
            Some(result) => result,
            None => write_one_by_one(self, pieces, seal),
        }
    }

    fn write_all(&self, pieces: &[WritePiece<'_>]) -> io::Result<()> {
        pieces
            .iter()
            .for_each(|p| assert_aligned(p.offset_bytes, p.buffer));
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.file);
        match crate::uring::write_all(fd, pieces) {
            Some(result) => result,
            None => write_ready_one_by_one(self, pieces),
        }
    }

    fn write_all_alongside(
        &self,
        pieces: &[WritePiece<'_>],
        alongside: &mut dyn FnMut(),
    ) -> io::Result<()> {
        pieces
            .iter()
            .for_each(|p| assert_aligned(p.offset_bytes, p.buffer));
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.file);
        match crate::uring::write_all_alongside(fd, pieces, alongside) {
            Some(result) => result,
            None => {
                let written = write_ready_one_by_one(self, pieces);
                alongside();
                written
            }
        }
    }
}

/// Largest buffer the pool keeps (one 4 MiB object); larger ones are freed on drop.
pub const POOL_BUFFER_BLOCKS_MAX: usize = 1024;
/// Most memory the pool holds while no one uses it.
pub const POOL_BYTES_MAX: usize = 256 << 20;

/// Recycled aligned allocations by power-of-two capacity (1 to `POOL_BUFFER_BLOCKS_MAX`
/// blocks), so the IO path neither faults in fresh pages nor zeroes memory the device is
/// about to overwrite. Every allocation is zeroed once when first made, so its bytes are
/// always initialised.
struct Pool {
    free: Vec<Vec<std::ptr::NonNull<u8>>>,
    bytes: usize,
}

// SAFETY: the pool owns the allocations it holds; they are not aliased.
unsafe impl Send for Pool {}

static POOL: std::sync::Mutex<Pool> = std::sync::Mutex::new(Pool {
    free: Vec::new(),
    bytes: 0,
});

fn class_of(capacity_blocks: usize) -> usize {
    capacity_blocks.trailing_zeros() as usize
}

/// A heap buffer aligned to `BLOCK_SIZE_BYTES`, a whole number of blocks long.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    capacity_blocks: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zero-filled buffer of `blocks` blocks.
    pub fn zeroed(blocks: usize) -> AlignedBuf {
        let mut buffer = AlignedBuf::for_overwrite(blocks);
        buffer.fill(0);
        buffer
    }

    /// A buffer of `blocks` blocks whose bytes are unspecified (left from an earlier use in
    /// this process). The caller must write every byte it later reads or writes out.
    pub fn for_overwrite(blocks: usize) -> AlignedBuf {
        let len = blocks
            .checked_mul(BLOCK_SIZE_BYTES as usize)
            .expect("an aligned buffer fits in memory");
        if blocks == 0 {
            return AlignedBuf {
                ptr: std::ptr::NonNull::dangling(),
                len: 0,
                capacity_blocks: 0,
            };
        }
        let capacity_blocks = if blocks <= POOL_BUFFER_BLOCKS_MAX {
            blocks.next_power_of_two()
        } else {
            blocks
        };
        if capacity_blocks <= POOL_BUFFER_BLOCKS_MAX {
            let mut pool = POOL.lock().expect("buffer pool lock poisoned");
            let class = class_of(capacity_blocks);
            if let Some(ptr) = pool.free.get_mut(class).and_then(Vec::pop) {
                pool.bytes -= capacity_blocks * BLOCK_SIZE_BYTES as usize;
                return AlignedBuf {
                    ptr,
                    len,
                    capacity_blocks,
                };
            }
        }
        let layout = Self::layout(capacity_blocks);
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        AlignedBuf {
            ptr,
            len,
            capacity_blocks,
        }
    }

    /// `data` placed `head` bytes into a buffer of whole blocks, zeros before and after it.
    pub(crate) fn copied(data: &[u8], head: usize) -> AlignedBuf {
        let blocks = (head + data.len()).div_ceil(BLOCK_SIZE_BYTES as usize);
        let mut buffer = AlignedBuf::for_overwrite(blocks);
        buffer[..head].fill(0);
        buffer[head..head + data.len()].copy_from_slice(data);
        buffer[head + data.len()..].fill(0);
        buffer
    }

    fn layout(capacity_blocks: usize) -> Layout {
        let size = capacity_blocks
            .checked_mul(BLOCK_SIZE_BYTES as usize)
            .expect("an aligned buffer fits in memory");
        Layout::from_size_align(size, BLOCK_SIZE_BYTES as usize)
            .expect("block-multiple sizes form a valid layout")
    }

    pub fn blocks(&self) -> usize {
        self.len / BLOCK_SIZE_BYTES as usize
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.capacity_blocks == 0 {
            return;
        }
        let bytes = self.capacity_blocks * BLOCK_SIZE_BYTES as usize;
        if self.capacity_blocks <= POOL_BUFFER_BLOCKS_MAX {
            let mut pool = POOL.lock().expect("buffer pool lock poisoned");
            if pool.bytes + bytes <= POOL_BYTES_MAX {
                let class = class_of(self.capacity_blocks);
                if pool.free.len() <= class {
                    pool.free.resize_with(class + 1, Vec::new);
                }
                pool.free[class].push(self.ptr);
                pool.bytes += bytes;
                return;
            }
        }
        // SAFETY: allocated in `for_overwrite` with this layout, and not pooled.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.capacity_blocks)) }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (or dangling with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

/// The buffer handed on as `Bytes` without a copy: it goes back to the pool when the last
/// clone of those bytes is dropped.
impl From<AlignedBuf> for bytes::Bytes {
    fn from(buffer: AlignedBuf) -> bytes::Bytes {
        bytes::Bytes::from_owner(buffer)
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} blocks)", self.blocks())
    }
}

/// Whole blocks to write: a buffer of the store's, which sealing may change in place, or bytes
/// of the caller's that start on a block boundary in memory and are whole blocks long, kept
/// (not copied) until they are written, for writes that seal nothing in place.
pub(crate) enum Blocks {
    Owned(AlignedBuf),
    Shared(bytes::Bytes),
}

impl Blocks {
    /// `data` as whole blocks: kept where it is if it is aligned and whole, else copied into
    /// an aligned buffer, zero-padded to the end of its last block.
    pub(crate) fn from_bytes(data: bytes::Bytes) -> Blocks {
        let block = BLOCK_SIZE_BYTES as usize;
        if !data.is_empty()
            && data.len().is_multiple_of(block)
            && (data.as_ptr() as usize).is_multiple_of(block)
        {
            return Blocks::Shared(data);
        }
        Blocks::Owned(AlignedBuf::copied(&data, 0))
    }

    pub(crate) fn blocks(&self) -> usize {
        self.len() / BLOCK_SIZE_BYTES as usize
    }

    /// The store's own buffer of these bytes, to seal in place (a copy if they are shared).
    pub(crate) fn into_owned(self) -> AlignedBuf {
        match self {
            Blocks::Owned(buffer) => buffer,
            Blocks::Shared(bytes) => AlignedBuf::copied(&bytes, 0),
        }
    }
}

impl Deref for Blocks {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Blocks::Owned(buffer) => buffer,
            Blocks::Shared(bytes) => bytes,
        }
    }
}

impl std::fmt::Debug for Blocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocks::Owned(buffer) => buffer.fmt(f),
            Blocks::Shared(_) => write!(f, "Shared({} blocks)", self.blocks()),
        }
    }
}
