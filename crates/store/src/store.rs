//! `Store`: mkfs, open and statfs. Applying transactions is in apply.rs and commit.rs,
//! reading in read.rs, listing in list.rs.
//!
//! A store is a directory holding `meta.redb` (the metadata database), `wal` (the
//! write-ahead log of small writes, wal.rs) and, unless mkfs was given a block device,
//! `data` (the preallocated data file). The superblock table holds:
//!
//! | field            | bytes                                                          |
//! |------------------|----------------------------------------------------------------|
//! | `format`         | u32 BE, `FORMAT_VERSION`                                       |
//! | `store_id`       | 16 random bytes                                                |
//! | `mode`           | the at-rest mode's name                                        |
//! | `data_blocks`    | u64 BE, blocks of the data device in use                       |
//! | `data_path`      | the data device's path (relative to the directory if no `/`)  |
//! | `wrapped_key`    | the 96-byte store secret wrapped by the caller's KEK, bound to |
//! |                  | store_id, mode and data_blocks (so none of them can be altered)|
//! | `nonce_reserved` | u64 BE nonce high-water mark, sealed under the metadata key    |
//! | `wal_start`      | u64 BE, the write-ahead log's first record (wal.rs)            |
//! | `wal_applied`    | u64 BE, the last log record the database holds                 |
//!
//! The store secret is 64 bytes of data key (XTS uses all, GCM the first 32) and 32 bytes of
//! metadata key. It exists unwrapped only in this process's memory.

use crate::allocator::Allocator;
use crate::behind::Behind;
use crate::cache::{default_cache_bytes, memory_bytes, CacheStats, ReadCache};
use crate::commit::Committer;
use crate::device::{Device, FileDevice, BLOCK_SIZE_BYTES};
use crate::error::ReadError;
use crate::error::{MkfsError, OpenError};
use crate::metadata::{
    MetaSealer, ObjectId, Table, EXTENTS, OBJECTS, OMAP, OMAP_PAGED, POOL_USAGE, SUPERBLOCK, UNDO,
    WAL_APPLIED, WAL_START,
};
use crate::object::decode_extent;
use crate::seal::nonce::{
    nonce_bytes, random_incarnation, NonceCounter, DOMAIN_RESERVATION, DOMAIN_UPGRADE,
};
use crate::seal::{DataSealer, Mode};
use crate::usage::CountError;
use crate::wal::{wal_bytes_for, Wal, WAL_FILE};
use keys::{KeyEncryptionKey, SecretKey, WrappedKey};
use map::cluster::{PoolUsage, HOST_FULL_BYTES};
use map::PoolId;
use redb::{Database, ReadOnlyDatabase, ReadableDatabase, ReadableTable};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// 2 added the `pool_usage` table; a store of format 1 is counted and raised to 2 when
/// opened. 3 added the write-ahead log; opening a store of format 2 creates it. 4 moved
/// every omap but a PG log's to `omap_paged`, its keys sealed (omap.rs); opening a store
/// of format 3 moves them once its log is replayed. 5 added the `undo` table (undo.rs),
/// whose records keep blocks that no extent references: a build that does not know them
/// would count those blocks free. Opening a store of format 4 adds the table.
pub const FORMAT_VERSION: u32 = 5;
const FORMAT_POOL_USAGE: u32 = 2;
const FORMAT_WAL: u32 = 3;
const FORMAT_OMAP_PAGED: u32 = 4;
/// The oldest format `open` upgrades.
const FORMAT_UPGRADABLE: u32 = 1;
/// Smallest data device mkfs accepts: 64 blocks.
pub const STORE_SIZE_BYTES_MIN: u64 = 64 * BLOCK_SIZE_BYTES;
/// How long a look at the room under the store holds (`Store::host_free`).
const ROOM_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
/// Objects are locked through this many striped slots (by object id).
pub(crate) const LOCK_SLOTS: usize = 1024;

const META_FILE: &str = "meta.redb";
const DATA_FILE: &str = "data";

#[derive(Clone, Debug)]
pub struct MkfsOptions {
    pub mode: Mode,
    /// Size of the data file to create; ignored with `device`, whose whole size is used.
    pub size_bytes: u64,
    /// A raw block device (or an existing file) to use instead of creating `data`.
    pub device: Option<PathBuf>,
}

/// Space figures, as `statfs` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Statfs {
    pub total_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    /// Room left on the file system that holds the metadata database, which grows with
    /// the objects (the data file is allocated in full when made), as looked at most
    /// 100 ms ago; `u64::MAX` when the file system cannot say.
    pub host_free_bytes: u64,
}

pub struct Store {
    pub(crate) dir: PathBuf,
    pub(crate) shared: Arc<Shared>,
    pub(crate) device: Box<dyn Device>,
    pub(crate) mode: Mode,
    pub(crate) data: DataSealer,
    pub(crate) allocator: Mutex<Allocator>,
    pub(crate) wal: Wal,
    pub(crate) slots: Box<[RwLock<()>]>,
    /// The thread that commits the changes waiting once enough wait (behind.rs).
    pub(crate) behind: Behind,
    direct_io: bool,
    /// Set once open has replayed the log: only then may closing checkpoint, since a
    /// checkpoint in the middle of a failed replay would abandon the rest of the log.
    replayed: bool,
    /// When the room on the file system under the store was last looked at, and what it
    /// was (`Store::host_free`).
    room: Mutex<(Option<std::time::Instant>, u64)>,
    pub(crate) cache: ReadCache,
    /// Transactions under way (`Store::apply`), so a caller can tell whether one more
    /// would wait for them (`Store::apply_would_wait`).
    pub(crate) applying: std::sync::atomic::AtomicUsize,
}

/// The metadata database and what its commits need: shared by the store and the thread
/// that commits the changes waiting (behind.rs).
pub(crate) struct Shared {
    pub(crate) db: MetaDb,
    pub(crate) meta: MetaSealer,
    pub(crate) nonces: NonceCounter,
    pub(crate) committer: Committer<crate::apply::Batch>,
    /// Logged metadata changes not yet in the database (pending.rs).
    pub(crate) pending: RwLock<crate::pending::Waiting>,
    /// Held by the one commit of the changes waiting under way.
    pub(crate) commits: Mutex<()>,
}

impl Shared {
    /// Durably raises the nonce reservation to `mark` (see seal/nonce.rs).
    pub(crate) fn persist_nonce_reservation(&self, mark: u64) -> Result<(), redb::Error> {
        let txn = self.db.begin_write()?;
        {
            let mut sb = txn.open_table(SUPERBLOCK)?;
            sb.insert(
                "nonce_reserved",
                &reservation_value(&self.meta, self.nonces.incarnation(), mark)[..],
            )?;
        }
        txn.commit()?;
        Ok(())
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({}, {})", self.dir.display(), self.mode)
    }
}

fn wrap_context(store_id: &[u8], mode: Mode, data_blocks: u64) -> Vec<u8> {
    let mut ctx = b"coffer-store-key-v1".to_vec();
    ctx.extend_from_slice(store_id);
    ctx.extend_from_slice(mode.as_str().as_bytes());
    ctx.extend_from_slice(&data_blocks.to_be_bytes());
    ctx
}

fn meta_key(secret: &SecretKey<96>) -> [u8; 32] {
    let mut key = [0u8; 32];
    key.copy_from_slice(&secret.expose()[64..]);
    key
}

fn data_key(secret: &SecretKey<96>) -> [u8; 64] {
    let mut key = [0u8; 64];
    key.copy_from_slice(&secret.expose()[..64]);
    key
}

fn meta_sealer(mode: Mode, secret: &SecretKey<96>) -> MetaSealer {
    if mode.encrypts() {
        let mut key = meta_key(secret);
        let sealer = MetaSealer::sealed(&key);
        zeroize::Zeroize::zeroize(&mut key);
        sealer
    } else {
        MetaSealer::plain()
    }
}

fn reservation_value(meta: &MetaSealer, incarnation: u32, mark: u64) -> Vec<u8> {
    meta.seal_with_nonce(
        Table::Superblock,
        b"nonce_reserved",
        mark.to_be_bytes().to_vec(),
        nonce_bytes(DOMAIN_RESERVATION, incarnation, mark),
    )
}

impl Store {
    /// Creates a store in `dir` (new or empty): the data device, the metadata database, a
    /// fresh store secret wrapped under `kek`.
    pub fn mkfs(
        dir: &Path,
        options: &MkfsOptions,
        kek: &KeyEncryptionKey,
    ) -> Result<(), MkfsError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| MkfsError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        if std::fs::read_dir(dir).map_err(io(dir))?.next().is_some() {
            return Err(MkfsError::NotEmpty {
                path: dir.to_path_buf(),
            });
        }
        let (data_path, stored_path) = match &options.device {
            Some(device) => {
                let device = std::fs::canonicalize(device).map_err(io(device))?;
                let stored = device.display().to_string();
                (device, stored)
            }
            None => {
                let path = dir.join(DATA_FILE);
                if options.size_bytes < STORE_SIZE_BYTES_MIN {
                    return Err(MkfsError::TooSmall {
                        size_bytes: options.size_bytes,
                        min_bytes: STORE_SIZE_BYTES_MIN,
                    });
                }
                FileDevice::create(
                    &path,
                    options.size_bytes / BLOCK_SIZE_BYTES * BLOCK_SIZE_BYTES,
                )
                .map_err(io(&path))?;
                (path, DATA_FILE.to_string())
            }
        };
        let device = FileDevice::open(&data_path).map_err(io(&data_path))?;
        let data_blocks = device.len_bytes() / BLOCK_SIZE_BYTES;
        if data_blocks * BLOCK_SIZE_BYTES < STORE_SIZE_BYTES_MIN {
            return Err(MkfsError::TooSmall {
                size_bytes: device.len_bytes(),
                min_bytes: STORE_SIZE_BYTES_MIN,
            });
        }
        let mut store_id = [0u8; 16];
        aws_lc_rs::rand::fill(&mut store_id)
            .expect("the system random source never fails on Linux");
        let secret = SecretKey::<96>::generate();
        let wrapped = keys::wrap(
            kek,
            &secret,
            &wrap_context(&store_id, options.mode, data_blocks),
        );
        let meta = meta_sealer(options.mode, &secret);
        let wal_path = dir.join(WAL_FILE);
        Wal::create(&wal_path, wal_bytes_for(data_blocks * BLOCK_SIZE_BYTES))
            .and_then(|()| sync_dir(dir))
            .map_err(io(&wal_path))?;
        let meta_path = dir.join(META_FILE);
        let db = Database::create(&meta_path)?;
        let txn = db.begin_write()?;
        {
            let mut sb = txn.open_table(SUPERBLOCK)?;
            sb.insert("format", &FORMAT_VERSION.to_be_bytes()[..])?;
            sb.insert("store_id", &store_id[..])?;
            sb.insert("mode", options.mode.as_str().as_bytes())?;
            sb.insert("data_blocks", &data_blocks.to_be_bytes()[..])?;
            sb.insert("data_path", stored_path.as_bytes())?;
            sb.insert("wrapped_key", wrapped.as_bytes())?;
            sb.insert(
                "nonce_reserved",
                &reservation_value(&meta, random_incarnation(), 0)[..],
            )?;
            sb.insert(WAL_START, &FIRST_RECORD.to_be_bytes()[..])?;
            sb.insert(WAL_APPLIED, &0u64.to_be_bytes()[..])?;
            txn.open_table(OBJECTS)?;
            txn.open_table(EXTENTS)?;
            txn.open_table(OMAP)?;
            txn.open_table(OMAP_PAGED)?;
            txn.open_table(POOL_USAGE)?;
            txn.open_table(UNDO)?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Opens the store in `dir` with its key-encryption key.
    pub fn open(dir: &Path, kek: &KeyEncryptionKey) -> Result<Store, OpenError> {
        refuse_on_panic(|| Store::open_inner(dir, kek, None))
    }

    /// Opens the store on a caller-supplied device (tests wrap the real one to inject faults).
    pub fn open_with_device(
        dir: &Path,
        kek: &KeyEncryptionKey,
        device: Box<dyn Device>,
    ) -> Result<Store, OpenError> {
        refuse_on_panic(|| Store::open_inner(dir, kek, Some(device)))
    }

    fn open_inner(
        dir: &Path,
        kek: &KeyEncryptionKey,
        device: Option<Box<dyn Device>>,
    ) -> Result<Store, OpenError> {
        let meta_path = dir.join(META_FILE);
        if !meta_path.is_file() {
            return Err(OpenError::NotAStore {
                path: dir.to_path_buf(),
            });
        }
        let in_use = |e: redb::DatabaseError| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => OpenError::InUse {
                path: dir.to_path_buf(),
            },
            e => OpenError::from(e),
        };
        // Check the key on a read-only view first: a wrong key must change nothing, and a
        // writable open may already write to the file.
        let superblock = match ReadOnlyDatabase::open(&meta_path) {
            Ok(db) => Some(Superblock::read(&db.begin_read()?)?),
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(OpenError::InUse {
                    path: dir.to_path_buf(),
                })
            }
            // Needs crash repair, which only a writable open does; the key is checked after.
            Err(_) => None,
        };
        if let Some(sb) = &superblock {
            sb.unwrap_secret(kek)?;
        }
        let db = Database::open(&meta_path).map_err(in_use)?;
        let sb = Superblock::read(&db.begin_read()?)?;
        let secret = sb.unwrap_secret(kek)?;
        let meta = meta_sealer(sb.mode, &secret);
        if sb.format < FORMAT_POOL_USAGE {
            count_usage(&db, &meta)?;
        }
        let wal_path = dir.join(WAL_FILE);
        if sb.format < FORMAT_WAL {
            add_wal(&db, &wal_path, sb.data_blocks)?;
        }
        let (wal_start, wal_applied) = read_wal_rows(&db.begin_read()?)?;
        let wal = Wal::open(&wal_path, wal_start).map_err(|source| OpenError::Io {
            path: wal_path.clone(),
            source,
        })?;
        let reserved_stored = &sb.nonce_reserved;
        let reserved = meta
            .open(Table::Superblock, b"nonce_reserved", reserved_stored)
            .ok()
            .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
            .map(u64::from_be_bytes)
            .ok_or_else(|| OpenError::Corrupt {
                what: "the nonce reservation record".into(),
            })?;
        let mut dkey = data_key(&secret);
        let data = DataSealer::new(sb.mode, &dkey).map_err(|_| OpenError::Corrupt {
            what: "the data key (rejected by XTS)".into(),
        });
        zeroize::Zeroize::zeroize(&mut dkey);
        let data = data?;
        let (device, direct_io): (Box<dyn Device>, bool) = match device {
            Some(device) => (device, false),
            None => {
                let path = if sb.data_path.starts_with('/') {
                    PathBuf::from(&sb.data_path)
                } else {
                    dir.join(&sb.data_path)
                };
                let dev = FileDevice::open(&path).map_err(|source| OpenError::Io {
                    path: path.clone(),
                    source,
                })?;
                let direct = dev.direct_io();
                (Box::new(dev), direct)
            }
        };
        if device.len_bytes() < sb.data_blocks * BLOCK_SIZE_BYTES {
            return Err(OpenError::Corrupt {
                what: format!(
                    "data device is {} bytes, the store needs {}",
                    device.len_bytes(),
                    sb.data_blocks * BLOCK_SIZE_BYTES
                ),
            });
        }
        let slots = (0..LOCK_SLOTS).map(|_| RwLock::new(())).collect();
        let shared = Arc::new(Shared {
            db: MetaDb(Some(db)),
            meta,
            nonces: NonceCounter::resume(reserved),
            committer: Committer::new(),
            pending: RwLock::default(),
            commits: Mutex::new(()),
        });
        let mut store = Store {
            dir: dir.to_path_buf(),
            shared,
            device,
            mode: sb.mode,
            data,
            allocator: Mutex::new(Allocator::from_used(sb.data_blocks, Vec::new()).map_err(
                |_| OpenError::Corrupt {
                    what: "the data device's size".into(),
                },
            )?),
            behind: Behind::not_started(),
            wal,
            slots,
            direct_io,
            replayed: false,
            room: Mutex::new((None, u64::MAX)),
            cache: ReadCache::new(default_cache_bytes(memory_bytes())),
            applying: Default::default(),
        };
        store
            .replay_log(wal_start, wal_applied)
            .map_err(|e| OpenError::Corrupt {
                what: format!("the write-ahead log could not be replayed ({e})"),
            })?;
        store.replayed = true;
        if sb.format < FORMAT_OMAP_PAGED {
            page_omaps(&store.shared.db, &store.shared.meta)?;
        }
        if sb.format < FORMAT_VERSION {
            add_undo(&store.shared.db)?;
        }
        let allocator = rebuild_allocator(&store.shared.db, &store.shared.meta, sb.data_blocks)?;
        *store.allocator.lock().expect("allocator lock poisoned") = allocator;
        store.behind =
            Behind::start(Arc::clone(&store.shared)).map_err(|source| OpenError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        Ok(store)
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Gives the read cache a limit of `bytes` (0: no cache), in place of the default
    /// (`default_cache_bytes` of the machine's memory). What it held is let go.
    pub fn set_cache_limit(&mut self, bytes: u64) {
        self.cache = ReadCache::new(bytes);
    }

    /// What the read cache holds and has served since the store opened.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Whether data IO bypasses the page cache (false on file systems without O_DIRECT).
    pub fn direct_io(&self) -> bool {
        self.direct_io
    }

    pub fn statfs(&self) -> Statfs {
        let alloc = self.allocator.lock().expect("allocator lock poisoned");
        let total = alloc.total_blocks() * BLOCK_SIZE_BYTES;
        let free = alloc.free_blocks() * BLOCK_SIZE_BYTES;
        Statfs {
            total_bytes: total,
            allocated_bytes: total - free,
            free_bytes: free,
            host_free_bytes: self.host_free(),
        }
    }

    /// Each pool's objects, their bytes and the store's bytes allocated to them, as of the
    /// last commit (pools with nothing in this store left out). Changes logged and not yet
    /// in the database (pending.rs) are counted without waiting for their commit: the OSD
    /// asks every second, on its network thread. A damaged row is counted again by the
    /// next commit, which is then made at once if changes wait.
    pub fn pool_usage(&self) -> Result<Vec<(PoolId, PoolUsage)>, ReadError> {
        match self.usage_with_waiting() {
            Err(ReadError::MetadataIntegrity { .. }) if !self.shared.waiting().is_empty() => {
                self.settle(None)?;
                self.usage_with_waiting()
            }
            usage => usage,
        }
    }

    fn usage_with_waiting(&self) -> Result<Vec<(PoolId, PoolUsage)>, ReadError> {
        let waiting = self.shared.waiting();
        let txn = self.shared.db.begin_read()?;
        let in_snapshot = log_in_snapshot(&txn)?;
        let rows = txn.open_table(POOL_USAGE)?;
        let mut out = BTreeMap::new();
        for row in rows.iter()? {
            let (key, value) = row?;
            let usage = crate::usage::decode_row(&self.shared.meta, key.value(), value.value());
            let pool = <[u8; 8]>::try_from(key.value())
                .ok()
                .map(u64::from_be_bytes);
            match (pool, usage) {
                (Some(pool), Some(usage)) => {
                    out.insert(PoolId(pool), usage);
                }
                _ => {
                    return Err(ReadError::MetadataIntegrity {
                        what: "a pool's usage record".into(),
                    })
                }
            }
        }
        for (pool, delta) in &waiting.usage(in_snapshot) {
            let usage = out.entry(*pool).or_default();
            *usage = delta.applied_to(*usage);
        }
        out.retain(|_, usage| *usage != PoolUsage::default());
        Ok(out.into_iter().collect())
    }

    /// Each pool's usage counted from every object record and extent (slow: it reads all of
    /// them). Equals `pool_usage` unless the metadata is damaged; the checks use it.
    pub fn count_pool_usage(&self) -> Result<Vec<(PoolId, PoolUsage)>, ReadError> {
        self.settle(None)?;
        let txn = self.shared.db.begin_read()?;
        let objects = txn.open_table(OBJECTS)?;
        let extents = txn.open_table(EXTENTS)?;
        match crate::usage::count(&objects, &extents, &self.shared.meta, None) {
            Ok(counted) => Ok(counted.into_iter().collect()),
            Err(CountError::Storage(e)) => Err(e.into()),
            Err(CountError::Integrity(what)) => Err(ReadError::MetadataIntegrity { what }),
        }
    }

    /// Why the store refuses every transaction, if a commit failed (see commit.rs): it must
    /// be opened again, which tells what the failed commit left, as after a crash.
    pub fn failed(&self) -> Option<String> {
        self.shared.committer.poisoned()
    }

    /// Whether the file system under the store has less than `HOST_FULL_BYTES` of room, as
    /// of a look at most `ROOM_CHECK_INTERVAL` ago. The metadata database grows there, and
    /// commits without a sync may not have found out that it cannot: short of room, every
    /// group commit ends with a checkpoint, so a commit that cannot be made durable fails
    /// at once rather than up to `CHECKPOINT_RECORDS` groups later.
    pub(crate) fn short_of_room(&self) -> bool {
        self.host_free() < HOST_FULL_BYTES
    }

    /// The room on the file system under the store, as looked at most `ROOM_CHECK_INTERVAL`
    /// ago (`u64::MAX` where it cannot be told): a look per write would be a system call
    /// on every write's path, where the OSD checks it.
    fn host_free(&self) -> u64 {
        let mut room = self.room.lock().expect("room lock poisoned");
        if room.0.is_none_or(|at| at.elapsed() >= ROOM_CHECK_INTERVAL) {
            let free = host_free_bytes(&self.dir).unwrap_or(u64::MAX);
            *room = (Some(std::time::Instant::now()), free);
        }
        room.1
    }
}

/// A store closes with a checkpoint, so that the next open has no log to replay. If the
/// checkpoint fails, the log is still whole and the next open replays it.
impl Drop for Store {
    fn drop(&mut self) {
        self.behind.stop();
        if !self.replayed || self.shared.committer.poisoned().is_some() {
            return;
        }
        let checkpoint =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.checkpoint()));
        if !matches!(checkpoint, Ok(Ok(()))) {
            // Not `eprintln!`, which panics when stderr (a daemon's log) is on a full disk.
            let _ = writeln!(
                std::io::stderr(),
                "coffer store: the checkpoint at close failed; the next open replays the log"
            );
        }
    }
}

struct Superblock {
    format: u32,
    store_id: Vec<u8>,
    mode: Mode,
    data_blocks: u64,
    data_path: String,
    wrapped_key: WrappedKey,
    nonce_reserved: Vec<u8>,
}

impl Superblock {
    fn read(txn: &redb::ReadTransaction) -> Result<Superblock, OpenError> {
        let sb = txn.open_table(SUPERBLOCK)?;
        let field = |name: &str| -> Result<Vec<u8>, OpenError> {
            sb.get(name)?
                .map(|v| v.value().to_vec())
                .ok_or_else(|| OpenError::Corrupt {
                    what: format!("superblock field {name} is missing"),
                })
        };
        let corrupt = |name: &str| OpenError::Corrupt {
            what: format!("superblock field {name}"),
        };
        let format =
            u32::from_be_bytes(field("format")?.try_into().map_err(|_| corrupt("format"))?);
        if !(FORMAT_UPGRADABLE..=FORMAT_VERSION).contains(&format) {
            return Err(OpenError::UnsupportedFormat {
                found: format,
                supported: FORMAT_VERSION,
            });
        }
        let mode = String::from_utf8(field("mode")?)
            .ok()
            .and_then(|m| m.parse().ok())
            .ok_or_else(|| corrupt("mode"))?;
        Ok(Superblock {
            format,
            store_id: field("store_id")?,
            mode,
            data_blocks: u64::from_be_bytes(
                field("data_blocks")?
                    .try_into()
                    .map_err(|_| corrupt("data_blocks"))?,
            ),
            data_path: String::from_utf8(field("data_path")?).map_err(|_| corrupt("data_path"))?,
            wrapped_key: WrappedKey::from_bytes(field("wrapped_key")?),
            nonce_reserved: field("nonce_reserved")?,
        })
    }

    fn unwrap_secret(&self, kek: &KeyEncryptionKey) -> Result<SecretKey<96>, OpenError> {
        keys::unwrap(
            kek,
            &self.wrapped_key,
            &wrap_context(&self.store_id, self.mode, self.data_blocks),
        )
        .map_err(|_| OpenError::WrongKey)
    }
}

/// The metadata database, closed without letting a panic escape. redb panics instead of
/// returning an error on some corrupt files, while opening or while closing
/// (tests/corruption.rs found both); a store whose metadata is corrupt must be refused, not
/// crash the daemon that owns it.
pub(crate) struct MetaDb(Option<Database>);

impl std::ops::Deref for MetaDb {
    type Target = Database;

    fn deref(&self) -> &Database {
        self.0
            .as_ref()
            .expect("the database is present until the store is dropped")
    }
}

impl Drop for MetaDb {
    fn drop(&mut self) {
        if let Some(db) = self.0.take() {
            let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(db)));
            if closed.is_err() {
                let _ = writeln!(
                    std::io::stderr(),
                    "coffer store: closing a corrupt metadata database failed; its last commit stands"
                );
            }
        }
    }
}

/// Runs an open, turning a panic inside redb into `OpenError::Corrupt`.
fn refuse_on_panic(open: impl FnOnce() -> Result<Store, OpenError>) -> Result<Store, OpenError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(open)) {
        Ok(opened) => opened,
        Err(panic) => {
            let detail = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic in the metadata database");
            Err(OpenError::Corrupt {
                what: format!("the metadata database could not be read ({detail})"),
            })
        }
    }
}

/// Raises a store of an older format to [`FORMAT_VERSION`]: counts each pool's usage from
/// the records into the `pool_usage` table, in one commit with the new format number.
fn count_usage(db: &Database, meta: &MetaSealer) -> Result<(), OpenError> {
    let txn = db.begin_write()?;
    {
        let objects = txn.open_table(OBJECTS)?;
        let extents = txn.open_table(EXTENTS)?;
        let counted = crate::usage::count(&objects, &extents, meta, None).map_err(|e| match e {
            CountError::Storage(e) => OpenError::from(e),
            CountError::Integrity(what) => OpenError::Corrupt { what },
        })?;
        let mut rows = txn.open_table(POOL_USAGE)?;
        let incarnation = random_incarnation();
        for (n, (pool, usage)) in counted.iter().enumerate() {
            let key = crate::usage::row_key(*pool);
            let value = meta.seal_with_nonce(
                Table::PoolUsage,
                &key,
                crate::usage::encode_row(usage),
                nonce_bytes(DOMAIN_UPGRADE, incarnation, n as u64),
            );
            rows.insert(&key[..], &value[..])?;
        }
        txn.open_table(SUPERBLOCK)?
            .insert("format", &FORMAT_POOL_USAGE.to_be_bytes()[..])?;
    }
    txn.commit()?;
    Ok(())
}

/// The first record of a new log.
const FIRST_RECORD: u64 = 1;

/// Raises a store of format 2 to 3: a new, empty write-ahead log (made again if an earlier
/// upgrade stopped before its commit), and its rows, in one commit with the format number.
fn add_wal(db: &Database, wal_path: &Path, data_blocks: u64) -> Result<(), OpenError> {
    let io = |source| OpenError::Io {
        path: wal_path.to_path_buf(),
        source,
    };
    match std::fs::remove_file(wal_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    Wal::create(wal_path, wal_bytes_for(data_blocks * BLOCK_SIZE_BYTES)).map_err(io)?;
    // The file's name must be durable before the format that needs it.
    if let Some(dir) = wal_path.parent() {
        sync_dir(dir).map_err(io)?;
    }
    let txn = db.begin_write()?;
    {
        let mut sb = txn.open_table(SUPERBLOCK)?;
        sb.insert(WAL_START, &FIRST_RECORD.to_be_bytes()[..])?;
        sb.insert(WAL_APPLIED, &0u64.to_be_bytes()[..])?;
        sb.insert("format", &FORMAT_WAL.to_be_bytes()[..])?;
    }
    txn.commit()?;
    Ok(())
}

/// Raises a store of format 3 to 4: moves every omap but a PG log's from `omap`, where its
/// keys are in clear, to `omap_paged` (omap.rs), in one commit with the format number.
fn page_omaps(db: &Database, meta: &MetaSealer) -> Result<(), OpenError> {
    let damaged = || OpenError::Corrupt {
        what: "an omap value failed its integrity check".into(),
    };
    let txn = db.begin_write()?;
    {
        let mut logs = std::collections::HashSet::new();
        for row in txn.open_table(OBJECTS)?.iter()? {
            let key = row?.0.value().to_vec();
            let pool = <[u8; 8]>::try_from(&key[..8]).map(u64::from_be_bytes);
            if pool.is_ok_and(|pool| PoolId(pool).is_pg_meta()) {
                logs.insert(key[12..].to_vec());
            }
        }
        let mut old = txn.open_table(OMAP)?;
        let mut new = txn.open_table(OMAP_PAGED)?;
        let incarnation = random_incarnation();
        let mut sealed = 0u64;
        let mut seal = |key: &[u8], plain: Vec<u8>| {
            sealed += 1;
            let nonce = nonce_bytes(DOMAIN_UPGRADE, incarnation, sealed - 1);
            meta.seal_with_nonce(Table::OmapPaged, key, plain, nonce)
        };
        let mut object: Option<(ObjectId, Vec<Vec<u8>>)> = None;
        for row in old.iter()? {
            let (key, value) = row?;
            let key = key.value();
            let Ok(id) = ObjectId::try_from(&key[..16.min(key.len())]) else {
                return Err(damaged());
            };
            if logs.contains(&id[..]) {
                continue;
            }
            let plain = meta
                .open(Table::Omap, key, value.value())
                .map_err(|_| damaged())?;
            let omap_key = &key[16..];
            if object.as_ref().is_none_or(|(current, _)| *current != id) {
                write_pages(object.take(), &mut new, &mut seal)?;
                object = Some((id, Vec::new()));
            }
            if let Some((_, keys)) = object.as_mut() {
                keys.push(omap_key.to_vec());
            }
            let entry = crate::omap::entry_key(&id, &meta.omap_slot(&id, omap_key));
            let sealed_entry = seal(&entry, crate::omap::encode_entry(omap_key, &plain));
            new.insert(&entry[..], &sealed_entry[..])?;
        }
        write_pages(object.take(), &mut new, &mut seal)?;
        old.retain(|key, _| key.len() >= 16 && logs.contains(&key[..16]))?;
        txn.open_table(SUPERBLOCK)?
            .insert("format", &FORMAT_OMAP_PAGED.to_be_bytes()[..])?;
    }
    txn.commit()?;
    Ok(())
}

/// Raises a store of format 4 to 5: the `undo` table, empty, with the format number.
fn add_undo(db: &Database) -> Result<(), OpenError> {
    let txn = db.begin_write()?;
    {
        txn.open_table(UNDO)?;
        txn.open_table(SUPERBLOCK)?
            .insert("format", &FORMAT_VERSION.to_be_bytes()[..])?;
    }
    txn.commit()?;
    Ok(())
}

/// Writes the root and pages of the omap of `object` (its id and keys in order).
fn write_pages(
    object: Option<(ObjectId, Vec<Vec<u8>>)>,
    rows: &mut redb::Table<&[u8], &[u8]>,
    seal: &mut impl FnMut(&[u8], Vec<u8>) -> Vec<u8>,
) -> Result<(), OpenError> {
    if let Some((id, keys)) = object {
        for (row, plain) in crate::omap::build(keys) {
            let key = row.key(&id);
            rows.insert(&key[..], &seal(&key, plain)[..])?;
        }
    }
    Ok(())
}

/// Makes the names in `dir` durable (fsync of the directory).
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// `wal_start` and `wal_applied` from the superblock.
fn read_wal_rows(txn: &redb::ReadTransaction) -> Result<(u64, u64), OpenError> {
    let sb = txn.open_table(SUPERBLOCK)?;
    let row = |name: &str| -> Result<u64, OpenError> {
        sb.get(name)?
            .and_then(|v| <[u8; 8]>::try_from(v.value()).ok())
            .map(u64::from_be_bytes)
            .ok_or_else(|| OpenError::Corrupt {
                what: format!("superblock field {name}"),
            })
    };
    Ok((row(WAL_START)?, row(WAL_APPLIED)?))
}

/// The last log record whose changes the snapshot `txn` holds (a durable commit holds every
/// record before `wal_start`).
pub(crate) fn log_in_snapshot(txn: &redb::ReadTransaction) -> Result<u64, ReadError> {
    let (wal_start, wal_applied) =
        read_wal_rows(txn).map_err(|e| ReadError::MetadataIntegrity {
            what: e.to_string(),
        })?;
    Ok(wal_applied.max(wal_start.saturating_sub(1)))
}

/// Every block that no committed extent and no undo record references is free.
fn rebuild_allocator(
    db: &Database,
    meta: &MetaSealer,
    data_blocks: u64,
) -> Result<Allocator, OpenError> {
    let txn = db.begin_read()?;
    let table = txn.open_table(EXTENTS)?;
    let mut used = Vec::new();
    for row in table.iter()? {
        let (key, value) = row?;
        let extent =
            decode_extent(meta, key.value(), value.value()).ok_or_else(|| OpenError::Corrupt {
                what: "an extent record failed its integrity check".into(),
            })?;
        used.push(extent.run());
    }
    for row in txn.open_table(UNDO)?.iter()? {
        let (key, value) = row?;
        let record = crate::undo::decode(meta, key.value(), value.value()).ok_or_else(|| {
            OpenError::Corrupt {
                what: "an undo record failed its integrity check".into(),
            }
        })?;
        used.extend(record.kept);
    }
    Allocator::from_used(data_blocks, used).map_err(|o| OpenError::Corrupt {
        what: format!(
            "device block {} is claimed twice, or past the device's end",
            o.block
        ),
    })
}

/// Room left for an unprivileged writer on the file system holding `dir`.
pub fn host_free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: statvfs(3) with a NUL-terminated path and a buffer of its result type; the
    // buffer is read only when the call succeeds.
    let stat = unsafe {
        if libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return None;
        }
        stat.assume_init()
    };
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::omap_key;
    use crate::transaction::Transaction;
    use map::{ObjectName, ObjectRef};
    use redb::ReadableTableMetadata;

    fn object(pool: u64, name: &str) -> ObjectRef {
        ObjectRef::new(PoolId(pool), ObjectName::new(name).expect("a valid name"))
    }

    /// A store of format 3 kept every omap in `omap`, keys in clear; opening it moves all
    /// but the PG logs' to sealed pages, and they list as before.
    #[test]
    fn a_format_3_store_has_its_omaps_paged_when_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kek = KeyEncryptionKey::from_bytes([3; 32]);
        let options = MkfsOptions {
            mode: Mode::Gcm,
            size_bytes: 1 << 20,
            device: None,
        };
        Store::mkfs(dir.path(), &options, &kek).expect("mkfs");
        let index = object(1, "bucket-index");
        let log = object(PoolId::PG_META_BIT | 1, "pg.0");
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..600)
            .map(|i| {
                (
                    format!("key-{i:04}").into_bytes(),
                    format!("value-{i}").into_bytes(),
                )
            })
            .collect();
        let logged = vec![(b"log-1".to_vec(), b"entry".to_vec())];
        let old_rows = {
            let store = Store::open(dir.path(), &kek).expect("open");
            let mut txn = Transaction::new();
            txn.touch(&index).touch(&log);
            store.apply(txn).expect("create");
            let incarnation = random_incarnation();
            let mut rows = Vec::new();
            for (object, entries) in [(&index, &entries), (&log, &logged)] {
                let id = store
                    .shared
                    .meta
                    .object_id(object.pool, object.name.as_str());
                for (key, value) in entries {
                    let row = omap_key(&id, key);
                    let nonce = nonce_bytes(DOMAIN_UPGRADE, incarnation, rows.len() as u64);
                    let sealed =
                        store
                            .shared
                            .meta
                            .seal_with_nonce(Table::Omap, &row, value.clone(), nonce);
                    rows.push((row, sealed));
                }
            }
            rows
        };
        as_format(dir.path(), FORMAT_WAL, |txn| {
            let mut omap = txn.open_table(OMAP).expect("omap");
            for (row, value) in &old_rows {
                omap.insert(&row[..], &value[..]).expect("an old row");
            }
            txn.delete_table(UNDO).expect("no undo table in format 3");
        });

        let store = Store::open(dir.path(), &kek).expect("open a format 3 store");
        let mut listed = Vec::new();
        loop {
            let after = listed
                .last()
                .map(|(key, _): &(Vec<u8>, Vec<u8>)| key.clone());
            let page = store
                .omap_list(&index, after.as_deref(), 250)
                .expect("list");
            if page.is_empty() {
                break;
            }
            listed.extend(page);
        }
        assert_eq!(listed, entries);
        assert_eq!(store.omap_list(&log, None, 10).expect("the log"), logged);
        assert_eq!(
            store.omap_get(&index, b"key-0321").expect("get"),
            Some(b"value-321".to_vec())
        );
        let mut txn = Transaction::new();
        txn.omap_remove(&index, b"key-0000")
            .omap_set(&index, b"key-9999", b"new");
        store.apply(txn).expect("a change after the move");
        let first = store.omap_list(&index, None, 1).expect("list");
        assert_eq!(first[0].0, b"key-0001");
        drop(store);

        let db = Database::open(dir.path().join(META_FILE)).expect("metadata");
        let txn = db.begin_read().expect("read");
        let format = txn
            .open_table(SUPERBLOCK)
            .expect("superblock")
            .get("format")
            .expect("get");
        assert_eq!(
            format.map(|v| v.value().to_vec()),
            Some(FORMAT_VERSION.to_be_bytes().to_vec())
        );
        let omap = txn.open_table(OMAP).expect("omap");
        assert_eq!(
            omap.len().expect("rows"),
            1,
            "only the PG log's row stays in clear"
        );
        let paged = txn.open_table(OMAP_PAGED).expect("paged");
        let pages = paged
            .iter()
            .expect("rows")
            .filter(|row| row.as_ref().is_ok_and(|(key, _)| key.value()[16] == 1))
            .count();
        assert!(pages > 1, "600 keys take several pages, not {pages}");
    }

    /// Makes the closed store in `dir` one of an older `format`, with `change` to its tables.
    fn as_format(dir: &Path, format: u32, change: impl FnOnce(&redb::WriteTransaction)) {
        let db = Database::open(dir.join(META_FILE)).expect("metadata");
        let txn = db.begin_write().expect("write");
        change(&txn);
        txn.open_table(SUPERBLOCK)
            .expect("superblock")
            .insert("format", &format.to_be_bytes()[..])
            .expect("format");
        txn.commit().expect("commit");
    }

    fn gcm_store(dir: &Path, kek: &KeyEncryptionKey) -> Store {
        let options = MkfsOptions {
            mode: Mode::Gcm,
            size_bytes: 1 << 20,
            device: None,
        };
        Store::mkfs(dir, &options, kek).expect("mkfs");
        Store::open(dir, kek).expect("open")
    }

    /// A read would wait while a transaction holds its object (through its group commit),
    /// and not once it lets go.
    #[test]
    fn a_read_would_wait_for_a_transaction_holding_its_object() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kek = KeyEncryptionKey::from_bytes([7; 32]);
        let store = gcm_store(dir.path(), &kek);
        let held = object(1, "held");
        assert!(!store.read_would_wait(&held));
        let id = store.shared.meta.object_id(held.pool, held.name.as_str());
        let lock = store.slots[crate::apply::slot_of(&id)]
            .write()
            .expect("object lock");
        assert!(store.read_would_wait(&held));
        drop(lock);
        assert!(!store.read_would_wait(&held));
    }

    /// A transaction would wait while another is under way (here held at its object's
    /// lock) and while the log's next records would make a checkpoint, and not otherwise.
    #[test]
    fn a_transaction_would_wait_for_another_under_way_or_a_checkpoint_near() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kek = KeyEncryptionKey::from_bytes([7; 32]);
        let options = MkfsOptions {
            mode: Mode::Gcm,
            size_bytes: 256 << 20,
            device: None,
        };
        Store::mkfs(dir.path(), &options, &kek).expect("mkfs");
        let store = Store::open(dir.path(), &kek).expect("open");
        let held = object(1, "held");
        let write = |fill: u8| {
            let mut txn = Transaction::new();
            txn.write(&held, 0, &[fill; 512]);
            store.apply(txn).expect("write");
        };
        write(0);
        let small = |fill: u8| {
            let mut txn = Transaction::new();
            txn.write(&held, 0, &[fill; 512]);
            txn
        };
        assert!(!store.apply_would_wait(&small(0)));
        let mut remove = Transaction::new();
        remove.remove(&held);
        assert!(
            store.apply_would_wait(&remove),
            "a removal's group is committed at once"
        );

        let id = store.shared.meta.object_id(held.pool, held.name.as_str());
        std::thread::scope(|scope| {
            let lock = store.slots[crate::apply::slot_of(&id)]
                .write()
                .expect("object lock");
            let applying = scope.spawn(|| write(1));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !store.apply_would_wait(&small(1)) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "a transaction waiting for its object's lock is not counted as under way"
                );
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            drop(lock);
            applying.join().expect("the writing thread");
        });
        assert!(!store.apply_would_wait(&small(1)));

        let checkpoint = crate::wal::CHECKPOINT_RECORDS;
        for fill in 0..checkpoint {
            if store.apply_would_wait(&small(2)) {
                break;
            }
            write(fill as u8);
        }
        assert_eq!(store.wal.tail().records, checkpoint - 1);
        write(2);
        assert!(
            store.apply_would_wait(&small(3)),
            "the next group checkpoints first"
        );
        write(3);
        assert_eq!(store.wal.tail().records, 1, "that group made a checkpoint");
        assert!(!store.apply_would_wait(&small(4)));
    }

    /// A store of format 4 has no `undo` table; opening it adds one, and writes keeping
    /// undo records work there.
    #[test]
    fn a_format_4_store_gets_its_undo_table_when_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kek = KeyEncryptionKey::from_bytes([4; 32]);
        let shard = object(1, "shard");
        let store = gcm_store(dir.path(), &kek);
        let mut txn = Transaction::new();
        txn.write(&shard, 0, b"old");
        store.apply(txn).expect("write");
        drop(store);
        as_format(dir.path(), FORMAT_OMAP_PAGED, |txn| {
            txn.delete_table(UNDO).expect("no undo table in format 4");
        });

        let store = Store::open(dir.path(), &kek).expect("open a format 4 store");
        let mut txn = Transaction::new();
        txn.write(&shard, 0, b"new").keep_undo(&shard, 1);
        store.apply(txn).expect("a write keeping undo");
        let mut txn = Transaction::new();
        txn.rollback(&shard, 1);
        store.apply(txn).expect("rollback");
        assert_eq!(store.read(&shard, 0, 3).expect("read")[..], b"old"[..]);
        drop(store);
        let db = ReadOnlyDatabase::open(dir.path().join(META_FILE)).expect("metadata");
        let sb = Superblock::read(&db.begin_read().expect("read")).expect("superblock");
        assert_eq!(sb.format, FORMAT_VERSION);
    }

    /// An undo record altered on disk is found when the store opens: the blocks it keeps
    /// cannot be told, so free space cannot be rebuilt.
    #[test]
    fn a_damaged_undo_record_is_refused_when_the_store_opens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kek = KeyEncryptionKey::from_bytes([5; 32]);
        let shard = object(1, "shard");
        let store = gcm_store(dir.path(), &kek);
        for version in [1, 2] {
            let mut txn = Transaction::new();
            txn.write(&shard, 0, &[version as u8; 8192])
                .keep_undo(&shard, version);
            store.apply(txn).expect("write keeping undo");
        }
        drop(store);
        let db = Database::open(dir.path().join(META_FILE)).expect("metadata");
        let txn = db.begin_write().expect("write");
        {
            let mut rows = txn.open_table(UNDO).expect("undo");
            let (key, mut value) = {
                let first = rows.first().expect("read").expect("a record");
                (first.0.value().to_vec(), first.1.value().to_vec())
            };
            value[crate::seal::NONCE_BYTES] ^= 1;
            rows.insert(&key[..], &value[..]).expect("alter");
        }
        txn.commit().expect("commit");
        drop(db);
        match Store::open(dir.path(), &kek) {
            Err(OpenError::Corrupt { what }) => assert!(what.contains("undo record"), "{what}"),
            other => panic!("opened with a damaged undo record: {:?}", other.err()),
        }
    }
}
