//! Images: a block device's bytes, striped over objects of one pool.
//!
//! An image called NAME in a pool is made of
//! - its header object `coffer.image.NAME`, whose attribute `image` holds the [`Header`]
//!   (id, size, object size, features, creation time) and whose attribute `lock` holds the
//!   exclusive lock ([`crate::lock`]);
//! - its data objects `coffer.data.ID.INDEX` (ID and INDEX as 16 hex digits): object INDEX
//!   holds the image's bytes `[INDEX * object_size, (INDEX + 1) * object_size)`. A data
//!   object that does not exist reads as zeros and uses no space; a short one reads as
//!   zeros past its end;
//! - an entry NAME in the omap of the pool's directory object `coffer.images`.
//!
//! With a data pool (`image create --data-pool`, the feature [`FEATURE_DATA_POOL`]), the
//! data objects live in that pool and the rest in the image's own: an erasure-coded pool,
//! which keeps no omap, holds the data of images whose headers live in a replicated one.
//!
//! Data objects are named by the image's random id, not its name, so an image made again
//! under the name of one removed half-way never sees the old one's bytes.
//!
//! The consistency and durability contract is in docs/design/block.md. In short: a write
//! returns once every copy of every object it touches has it durably (the OSDs acknowledge
//! only then), so a flush has nothing left to wait for; writes that overlap while both are
//! in flight land in an unspecified order; a write across objects is not atomic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use client::stripe::{self, Piece};
use client::{ObjectOp, Pool};
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::lock::{self, Lock, LockOwner, LOCK_RENEW_INTERVAL};

/// Object size of a new image unless asked otherwise.
pub const OBJECT_SIZE_DEFAULT: u64 = 4 << 20;
/// Smallest object size: one store block.
pub const OBJECT_SIZE_MIN: u64 = 4 << 10;
/// Largest object size: one object must fit a request's data segment.
pub const OBJECT_SIZE_MAX: u64 = 32 << 20;
/// Image sizes are whole sectors.
pub const SECTOR_BYTES: u64 = 512;
/// Largest image: 1 PiB.
pub const IMAGE_SIZE_MAX: u64 = 1 << 50;
/// Longest image name, in bytes.
pub const IMAGE_NAME_BYTES_MAX: usize = 96;
/// Objects one image operation works on at once (reads, writes, removals).
pub const OBJECTS_IN_FLIGHT_MAX: usize = 16;
/// Zeros for writes of zeros, one object's worth at most. Never written, so the pages that
/// back it stay the kernel's shared zero page.
static ZEROS: [u8; OBJECT_SIZE_MAX as usize] = [0u8; OBJECT_SIZE_MAX as usize];
/// Header format this build writes and reads.
const HEADER_FORMAT: u32 = 1;
/// Feature bit: the image's data objects live in the pool its header names
/// ([`Header::data_pool`]), not its own. A build without it refuses the image rather than
/// read zeros from the wrong pool.
pub const FEATURE_DATA_POOL: u64 = 1;
/// Feature bits this build understands; an image with others is refused.
const FEATURES_KNOWN: u64 = FEATURE_DATA_POOL;
const DIRECTORY_OBJECT: &str = "coffer.images";
const HEADER_PREFIX: &str = "coffer.image.";
const HEADER_ATTR: &str = "image";
/// Directory entries read per request when listing.
const LIST_PAGE_ENTRIES: u32 = 1000;

/// What an image's header records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub format: u32,
    /// Random; names the data objects.
    pub id: u64,
    pub size: u64,
    pub object_size: u64,
    /// Feature bits; a reader refuses an image with bits it does not know.
    pub features: u64,
    pub created_unix_secs: u64,
    /// A shrink from this size in progress: data objects past `size` may still hold bytes.
    /// The trim is finished before the image serves a writer again or grows.
    pub trimming_from: Option<u64>,
    /// The id of the pool holding the data objects, when not the image's own (with the
    /// feature bit [`FEATURE_DATA_POOL`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_pool: Option<u64>,
}

impl Header {
    fn data_object(&self, index: u64) -> String {
        format!("coffer.data.{:016x}.{index:016x}", self.id)
    }
}

/// The object that holds image `name`'s header and its lock record.
pub fn header_object(name: &str) -> String {
    format!("{HEADER_PREFIX}{name}")
}

fn check_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= IMAGE_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "image name {name:?}: use 1 to {IMAGE_NAME_BYTES_MAX} letters, digits, '-', '_' \
             and '.'"
        )))
    }
}

fn check_size(size: u64) -> Result<(), Error> {
    if size == 0 || !size.is_multiple_of(SECTOR_BYTES) || size > IMAGE_SIZE_MAX {
        return Err(Error::Invalid(format!(
            "image size {size}: use a positive multiple of {SECTOR_BYTES} bytes up to \
             {IMAGE_SIZE_MAX}"
        )));
    }
    Ok(())
}

fn spec(pool: &Pool, name: &str) -> String {
    format!("{}/{name}", pool.name())
}

/// The header of image `name` and its bytes as stored (for compare-and-swap).
async fn read_header(pool: &Pool, name: &str) -> Result<(Header, Vec<u8>), Error> {
    let image = spec(pool, name);
    let mut attrs = match pool.attrs(&header_object(name)).await {
        Ok(attrs) => attrs,
        Err(client::Error::NotFound) => return Err(Error::NoSuchImage { image }),
        Err(e) => return Err(Error::cluster(&image)(e)),
    };
    let raw = attrs.remove(HEADER_ATTR).ok_or_else(|| Error::Header {
        image: image.clone(),
        why: "its header object has no image record".into(),
    })?;
    let header: Header = serde_json::from_slice(&raw).map_err(|e| Error::Header {
        image: image.clone(),
        why: format!("its header does not decode: {e}"),
    })?;
    if header.format != HEADER_FORMAT {
        return Err(Error::Header {
            image,
            why: format!(
                "header format {} (this build reads {HEADER_FORMAT})",
                header.format
            ),
        });
    }
    let unknown = header.features & !FEATURES_KNOWN;
    if unknown != 0 {
        return Err(Error::Header {
            image,
            why: format!("it uses features {unknown:#x} that this build does not have"),
        });
    }
    Ok((header, raw))
}

/// The pool holding `header`'s data objects: its own pool (`pool`), or its data pool.
async fn data_pool(pool: &Pool, image: &str, header: &Header) -> Result<Pool, Error> {
    let Some(id) = header.data_pool else {
        return Ok(pool.clone());
    };
    let cluster = pool.cluster();
    let name = cluster
        .map()
        .pools
        .get(&map::PoolId(id))
        .map(|info| info.name.clone())
        .ok_or_else(|| Error::Header {
            image: image.into(),
            why: format!("its data pool (id {id}) does not exist"),
        })?;
    cluster.pool(&name).await.map_err(Error::cluster(image))
}

/// Why images cannot live in `pool` (one that keeps no omap), if they cannot.
fn check_header_pool(pool: &Pool) -> Result<(), Error> {
    let map = pool.cluster().map();
    match map.pools.get(&pool.id()) {
        Some(info) if info.erasure.is_some() => Err(Error::Invalid(format!(
            "pool {0} is erasure-coded: an image's header and the pool's image directory \
             live in omap, which only replicated pools keep; create the image in a \
             replicated pool with --data-pool {0}",
            info.name
        ))),
        _ => Ok(()),
    }
}

fn encode_header(header: &Header) -> Vec<u8> {
    serde_json::to_vec(header).unwrap_or_else(|e| unreachable!("a header encodes: {e}"))
}

/// Replaces the header with `new` if it is still `expected`; false if it changed meanwhile.
async fn swap_header(
    pool: &Pool,
    name: &str,
    expected: &[u8],
    new: &Header,
) -> Result<bool, Error> {
    let ops = vec![
        ObjectOp::AssertAttr {
            name: HEADER_ATTR.into(),
            value: Some(expected.to_vec()),
        },
        ObjectOp::SetAttr {
            name: HEADER_ATTR.into(),
            value: encode_header(new),
        },
    ];
    match pool.operate(&header_object(name), ops, Bytes::new()).await {
        Ok(_) => Ok(true),
        Err(client::Error::Mismatch(_)) => Ok(false),
        Err(e) => Err(Error::cluster(&spec(pool, name))(e)),
    }
}

/// Makes image `name` of `size` bytes over objects of `object_size` bytes, in `pool`.
pub async fn create(pool: &Pool, name: &str, size: u64, object_size: u64) -> Result<Header, Error> {
    create_with_data(pool, name, size, object_size, None).await
}

/// Makes image `name` of `size` bytes over objects of `object_size` bytes: its header in
/// `pool`, its data objects in `data` if given (an erasure-coded pool, say), else in `pool`.
pub async fn create_with_data(
    pool: &Pool,
    name: &str,
    size: u64,
    object_size: u64,
    data: Option<&Pool>,
) -> Result<Header, Error> {
    check_name(name)?;
    check_header_pool(pool)?;
    check_size(size)?;
    if !object_size.is_power_of_two() || !(OBJECT_SIZE_MIN..=OBJECT_SIZE_MAX).contains(&object_size)
    {
        return Err(Error::Invalid(format!(
            "object size {object_size}: use a power of two from {OBJECT_SIZE_MIN} to \
             {OBJECT_SIZE_MAX}"
        )));
    }
    let image = spec(pool, name);
    let data_pool = data.map(Pool::id).filter(|id| *id != pool.id());
    let header = Header {
        format: HEADER_FORMAT,
        id: rand::random(),
        size,
        object_size,
        features: if data_pool.is_some() {
            FEATURE_DATA_POOL
        } else {
            0
        },
        created_unix_secs: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        trimming_from: None,
        data_pool: data_pool.map(|id| id.0),
    };
    let ops = vec![
        ObjectOp::Create { exclusive: true },
        ObjectOp::SetAttr {
            name: HEADER_ATTR.into(),
            value: encode_header(&header),
        },
    ];
    match pool.operate(&header_object(name), ops, Bytes::new()).await {
        Ok(_) => {}
        Err(client::Error::Exists) => return Err(Error::Exists { image }),
        Err(e) => return Err(Error::cluster(&image)(e)),
    }
    pool.omap_set(
        DIRECTORY_OBJECT,
        vec![(name.as_bytes().to_vec(), Vec::new())],
    )
    .await
    .map_err(Error::cluster(&image))?;
    Ok(header)
}

/// The names of the pool's images, in name order.
pub async fn list(pool: &Pool) -> Result<Vec<String>, Error> {
    let mut names = Vec::new();
    let mut after = None;
    loop {
        let (page, more) = match pool
            .omap_list(DIRECTORY_OBJECT, after.take(), LIST_PAGE_ENTRIES)
            .await
        {
            Ok(listed) => listed,
            Err(client::Error::NotFound) => return Ok(names),
            Err(e) => return Err(Error::cluster(pool.name())(e)),
        };
        after = page.last().map(|(key, _)| key.clone());
        names.extend(
            page.into_iter()
                .map(|(key, _)| String::from_utf8_lossy(&key).into_owned()),
        );
        if !more {
            return Ok(names);
        }
    }
}

/// An image's header and who holds its lock.
#[derive(Clone, Debug)]
pub struct Info {
    pub header: Header,
    pub lock: Option<LockOwner>,
}

pub async fn info(pool: &Pool, name: &str) -> Result<Info, Error> {
    check_name(name)?;
    let (header, _) = read_header(pool, name).await?;
    let lock = lock::holder(pool, &spec(pool, name), &header_object(name)).await?;
    Ok(Info { header, lock })
}

/// Breaks the lock of image `name`, fencing its holder; returns who held it.
pub async fn break_lock(pool: &Pool, name: &str) -> Result<Option<LockOwner>, Error> {
    check_name(name)?;
    read_header(pool, name).await?;
    lock::break_lock(pool, &spec(pool, name), &header_object(name)).await
}

/// Removes data objects `[first, end)`, and cuts the object holding byte `keep_bytes` (when
/// inside it) down to it: makes everything past `keep_bytes` read as zeros.
async fn trim(
    pool: &Pool,
    image: &str,
    header: &Header,
    keep_bytes: u64,
    end: u64,
) -> Result<(), Error> {
    let first = stripe::object_count(keep_bytes, header.object_size);
    futures::stream::iter(first..end)
        .map(|index| async move {
            match pool.remove(&header.data_object(index)).await {
                Ok(()) | Err(client::Error::NotFound) => Ok(()),
                Err(e) => Err(e),
            }
        })
        .buffer_unordered(OBJECTS_IN_FLIGHT_MAX)
        .try_collect::<Vec<()>>()
        .await
        .map_err(Error::cluster(image))?;
    let within = keep_bytes % header.object_size;
    if within != 0 {
        let ops = vec![ObjectOp::AssertExists, ObjectOp::Truncate { size: within }];
        let boundary = header.data_object(keep_bytes / header.object_size);
        match pool.operate(&boundary, ops, Bytes::new()).await {
            Ok(_) | Err(client::Error::NotFound) => {}
            Err(e) => return Err(Error::cluster(image)(e)),
        }
    }
    Ok(())
}

/// Finishes a shrink that stopped half-way (the caller holds the lock).
async fn finish_trim(pool: &Pool, name: &str) -> Result<Header, Error> {
    loop {
        let (header, raw) = read_header(pool, name).await?;
        let Some(from) = header.trimming_from else {
            return Ok(header);
        };
        let end = stripe::object_count(from, header.object_size);
        let image = spec(pool, name);
        trim(
            &data_pool(pool, &image, &header).await?,
            &image,
            &header,
            header.size,
            end,
        )
        .await?;
        let done = Header {
            trimming_from: None,
            ..header.clone()
        };
        if swap_header(pool, name, &raw, &done).await? {
            return Ok(done);
        }
    }
}

/// Sets the size of image `name`. Growing works while the image is served (a server sees the
/// new size within a few seconds, and its clients when they connect again); shrinking
/// discards the bytes past the new size and needs the image's lock, so it is refused while a
/// writer has the image.
pub async fn resize(pool: &Pool, name: &str, new_size: u64) -> Result<(), Error> {
    check_name(name)?;
    check_size(new_size)?;
    let image = spec(pool, name);
    loop {
        let (header, raw) = read_header(pool, name).await?;
        if header.trimming_from.is_none() && new_size >= header.size {
            if new_size == header.size {
                return Ok(());
            }
            let grown = Header {
                size: new_size,
                ..header
            };
            if swap_header(pool, name, &raw, &grown).await? {
                return Ok(());
            }
            continue;
        }
        // A shrink, or a grow over a shrink that stopped half-way: both need the lock.
        let lock = Lock::acquire(pool, &image, &header_object(name), "resize", false).await?;
        let result = shrink_locked(pool, name, new_size).await;
        lock.release().await?;
        return result;
    }
}

async fn shrink_locked(pool: &Pool, name: &str, new_size: u64) -> Result<(), Error> {
    let header = finish_trim(pool, name).await?;
    if new_size >= header.size {
        return resize_header(pool, name, new_size).await;
    }
    let (header, raw) = read_header(pool, name).await?;
    let shrinking = Header {
        size: new_size,
        trimming_from: Some(header.size),
        ..header
    };
    if !swap_header(pool, name, &raw, &shrinking).await? {
        return Err(Error::Invalid(format!(
            "the header of {} changed during the resize; try again",
            spec(pool, name)
        )));
    }
    finish_trim(pool, name).await.map(|_| ())
}

async fn resize_header(pool: &Pool, name: &str, new_size: u64) -> Result<(), Error> {
    loop {
        let (header, raw) = read_header(pool, name).await?;
        let resized = Header {
            size: new_size,
            ..header
        };
        if swap_header(pool, name, &raw, &resized).await? {
            return Ok(());
        }
    }
}

/// Removes image `name` and all its data. Refused while a writer holds the image.
pub async fn remove(pool: &Pool, name: &str) -> Result<(), Error> {
    check_name(name)?;
    let image = spec(pool, name);
    let lock = Lock::acquire(pool, &image, &header_object(name), "rm", false).await?;
    let (header, _) = read_header(pool, name).await?;
    let extent = header.size.max(header.trimming_from.unwrap_or(0));
    let end = stripe::object_count(extent, header.object_size);
    let result = async {
        trim(
            &data_pool(pool, &image, &header).await?,
            &image,
            &header,
            0,
            end,
        )
        .await?;
        pool.omap_remove(DIRECTORY_OBJECT, vec![name.as_bytes().to_vec()])
            .await
            .map_err(Error::cluster(&image))?;
        match pool.remove(&header_object(name)).await {
            Ok(()) | Err(client::Error::NotFound) => Ok(()),
            Err(e) => Err(Error::cluster(&image)(e)),
        }
    }
    .await;
    if result.is_err() {
        lock.release().await?;
    }
    result
}

/// How an image is opened.
#[derive(Clone, Copy, Debug)]
pub enum Access {
    /// Reads only; no lock, so any number of readers (and one writer) may have it.
    ReadOnly,
    /// The one writer: takes the exclusive lock for `purpose`. With `wait_stale`, a lock
    /// whose holder stopped renewing it is broken after [`lock::LOCK_STALE_AFTER`]; without,
    /// a held lock fails the open at once.
    Write {
        purpose: &'static str,
        wait_stale: bool,
    },
}

/// One piece of what a read returns, in address order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Extent {
    Data(Bytes),
    /// This many bytes that read as zeros and are stored nowhere.
    Zeros(u64),
}

impl Extent {
    pub fn len(&self) -> u64 {
        match self {
            Extent::Data(bytes) => bytes.len() as u64,
            Extent::Zeros(len) => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An open image.
pub struct Image {
    /// The pool of its header.
    pool: Pool,
    /// The pool of its data objects: `pool`, or its data pool.
    data: Pool,
    name: String,
    spec: String,
    header: Header,
    size: AtomicU64,
    lock: Option<Lock>,
}

impl Image {
    /// Opens image `name` of `pool`. A writer finishes any shrink that stopped half-way.
    /// While the image is open, a task renews its lock and follows its size (growth).
    pub async fn open(pool: &Pool, name: &str, access: Access) -> Result<Arc<Image>, Error> {
        check_name(name)?;
        let image = spec(pool, name);
        let (mut header, _) = read_header(pool, name).await?;
        let lock = match access {
            Access::ReadOnly => None,
            Access::Write {
                purpose,
                wait_stale,
            } => {
                let lock =
                    Lock::acquire(pool, &image, &header_object(name), purpose, wait_stale).await?;
                match finish_trim(pool, name).await {
                    Ok(current) => header = current,
                    Err(e) => {
                        lock.release().await?;
                        return Err(e);
                    }
                }
                Some(lock)
            }
        };
        let data = match data_pool(pool, &image, &header).await {
            Ok(data) => data,
            Err(e) => {
                if let Some(lock) = &lock {
                    lock.release().await?;
                }
                return Err(e);
            }
        };
        let opened = Arc::new(Image {
            pool: pool.clone(),
            data,
            name: name.into(),
            spec: image,
            size: AtomicU64::new(header.size),
            header,
            lock,
        });
        tokio::spawn(keep(Arc::downgrade(&opened)));
        Ok(opened)
    }

    /// `pool/name`.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    pub fn object_size(&self) -> u64 {
        self.header.object_size
    }

    pub fn is_read_only(&self) -> bool {
        self.lock.is_none()
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<(), Error> {
        let size = self.size();
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(Error::OutOfRange {
                image: self.spec.clone(),
                offset,
                len,
                size,
            }),
        }
    }

    fn check_writable(&self) -> Result<&Lock, Error> {
        let lock = self.lock.as_ref().ok_or_else(|| Error::ReadOnly {
            image: self.spec.clone(),
        })?;
        if lock.is_lost() {
            return Err(lock.lost_error());
        }
        Ok(lock)
    }

    /// A failed write. A refusal by the OSDs while this client is blocklisted means this
    /// writer was fenced off: its lock is lost for good.
    fn write_failure(&self, lock: &Lock, e: client::Error) -> Error {
        let cluster = self.pool.cluster();
        if matches!(e, client::Error::Denied(_))
            && cluster.map().blocklist.contains(&cluster.instance())
        {
            lock.mark_lost();
            return lock.lost_error();
        }
        Error::cluster(&self.spec)(e)
    }

    fn pieces(&self, offset: u64, len: u64) -> impl Iterator<Item = Piece> + '_ {
        stripe::pieces(offset, len, self.header.object_size)
    }

    /// `len` bytes from `offset`, as data and runs of zeros in address order.
    pub async fn read(&self, offset: u64, len: u64) -> Result<Vec<Extent>, Error> {
        self.check_range(offset, len)?;
        let per_object: Vec<Vec<Extent>> = futures::stream::iter(self.pieces(offset, len))
            .map(|piece| self.read_piece(piece))
            .buffered(OBJECTS_IN_FLIGHT_MAX)
            .try_collect()
            .await?;
        Ok(per_object.into_iter().flatten().collect())
    }

    async fn read_piece(&self, piece: Piece) -> Result<Vec<Extent>, Error> {
        let object = self.header.data_object(piece.index);
        match self.data.read(&object, piece.offset, piece.len).await {
            Ok(bytes) => {
                let short = piece.len - bytes.len() as u64;
                let mut out = Vec::with_capacity(2);
                if !bytes.is_empty() {
                    out.push(Extent::Data(bytes));
                }
                if short > 0 {
                    out.push(Extent::Zeros(short));
                }
                Ok(out)
            }
            Err(client::Error::NotFound) => Ok(vec![Extent::Zeros(piece.len)]),
            Err(e) => Err(Error::cluster(&self.spec)(e)),
        }
    }

    /// Writes `data` at `offset`; returns once every copy holds it durably.
    pub async fn write(&self, offset: u64, data: Bytes) -> Result<(), Error> {
        self.check_range(offset, data.len() as u64)?;
        let lock = self.check_writable()?;
        let pieces: Vec<Piece> = self.pieces(offset, data.len() as u64).collect();
        if let [piece] = pieces[..] {
            // Within one object the buffer goes on whole, so that a pool sealed at the edge
            // can seal it where it is if the caller no longer holds it (an NBD payload).
            let object = self.header.data_object(piece.index);
            return self
                .data
                .write(&object, piece.offset, data)
                .await
                .map_err(|e| self.write_failure(lock, e));
        }
        futures::stream::iter(pieces)
            .map(|piece| {
                let start = piece.range_offset as usize;
                let bytes = data.slice(start..start + piece.len as usize);
                let object = self.header.data_object(piece.index);
                async move { self.data.write(&object, piece.offset, bytes).await }
            })
            .buffer_unordered(OBJECTS_IN_FLIGHT_MAX)
            .try_collect::<Vec<()>>()
            .await
            .map_err(|e| self.write_failure(lock, e))?;
        Ok(())
    }

    /// Makes `[offset, offset + len)` read as zeros. With `punch`, frees the space too
    /// (whole objects are removed, parts of objects become holes); without, zeros are
    /// written, so the range stays allocated.
    pub async fn zero(&self, offset: u64, len: u64, punch: bool) -> Result<(), Error> {
        self.check_range(offset, len)?;
        let lock = self.check_writable()?;
        let object_size = self.header.object_size;
        futures::stream::iter(self.pieces(offset, len))
            .map(|piece| {
                let object = self.header.data_object(piece.index);
                async move {
                    let result = if !punch {
                        let zeros = Bytes::from_static(&ZEROS[..piece.len as usize]);
                        self.data.write(&object, piece.offset, zeros).await
                    } else if piece.is_whole(object_size) {
                        self.data.remove(&object).await
                    } else {
                        self.data.zero(&object, piece.offset, piece.len).await
                    };
                    match result {
                        // Nothing stored there: it reads as zeros already.
                        Ok(()) | Err(client::Error::NotFound) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
            })
            .buffer_unordered(OBJECTS_IN_FLIGHT_MAX)
            .try_collect::<Vec<()>>()
            .await
            .map_err(|e| self.write_failure(lock, e))?;
        Ok(())
    }

    /// Makes every completed write durable. Each write is durable on every copy before it
    /// completes, so there is nothing left to do; a writer that lost its lock is told so.
    pub fn flush(&self) -> Result<(), Error> {
        if let Some(lock) = &self.lock {
            if lock.is_lost() {
                return Err(lock.lost_error());
            }
        }
        Ok(())
    }

    /// Which parts of `[offset, offset + len)` hold stored data (`true`) and which are holes
    /// that read as zeros (`false`), as (length, allocated) runs in address order, adjacent
    /// runs merged.
    pub async fn allocation(&self, offset: u64, len: u64) -> Result<Vec<(u64, bool)>, Error> {
        self.check_range(offset, len)?;
        let per_object: Vec<[(u64, bool); 2]> = futures::stream::iter(self.pieces(offset, len))
            .map(|piece| async move {
                let object = self.header.data_object(piece.index);
                let stored = match self.data.stat(&object).await {
                    Ok(stat) => stat.size.saturating_sub(piece.offset).min(piece.len),
                    Err(client::Error::NotFound) => 0,
                    Err(e) => return Err(Error::cluster(&self.spec)(e)),
                };
                Ok([(stored, true), (piece.len - stored, false)])
            })
            .buffered(OBJECTS_IN_FLIGHT_MAX)
            .try_collect()
            .await?;
        let mut runs: Vec<(u64, bool)> = Vec::new();
        for (run_len, allocated) in per_object.into_iter().flatten() {
            match runs.last_mut() {
                _ if run_len == 0 => {}
                Some((last_len, last_allocated)) if *last_allocated == allocated => {
                    *last_len += run_len;
                }
                _ => runs.push((run_len, allocated)),
            }
        }
        Ok(runs)
    }

    /// Gives up the lock. Writes after this fail.
    pub async fn close(&self) -> Result<(), Error> {
        match &self.lock {
            Some(lock) => lock.release().await,
            None => Ok(()),
        }
    }

    /// One round of upkeep: renew the lock, and follow the header's size.
    async fn keep_once(&self) -> Result<(), Error> {
        if let Some(lock) = &self.lock {
            lock.renew().await?;
        }
        let (header, _) = read_header(&self.pool, &self.name).await?;
        self.size.fetch_max(header.size, Ordering::AcqRel);
        Ok(())
    }
}

/// Renews an open image's lock and follows its size until the image is dropped or its lock
/// is lost.
async fn keep(image: Weak<Image>) {
    loop {
        tokio::time::sleep(LOCK_RENEW_INTERVAL).await;
        let Some(image) = image.upgrade() else {
            return;
        };
        match image.keep_once().await {
            Ok(()) => {}
            Err(e @ Error::LockLost { .. }) => {
                tracing::error!(image = %image.spec, "{e}; writes are refused from now on");
                return;
            }
            Err(e) => tracing::warn!(image = %image.spec, "renewing the lock: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_names_its_data_pool_only_when_it_has_one() {
        let stored_before = r#"{"format":1,"id":7,"size":4096,"object_size":4194304,"features":0,"created_unix_secs":1,"trimming_from":null}"#;
        let header: Header = serde_json::from_str(stored_before).expect("decodes");
        assert_eq!(header.data_pool, None);
        assert_eq!(
            encode_header(&header),
            stored_before.as_bytes(),
            "an image without a data pool keeps its header's bytes"
        );
        let coded = Header {
            features: FEATURE_DATA_POOL,
            data_pool: Some(5),
            ..header
        };
        let encoded = String::from_utf8(encode_header(&coded)).expect("JSON");
        assert!(encoded.contains(r#""data_pool":5"#), "{encoded}");
        assert_eq!(FEATURES_KNOWN & FEATURE_DATA_POOL, FEATURE_DATA_POOL);
    }
}
