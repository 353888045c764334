//! The cluster map: which OSDs exist, where they listen, whether they are up and in, and the
//! pools. Every change goes through [`ClusterMap::apply`], which validates it and bumps the
//! epoch, so the monitors (which agree on the order of changes) and every follower of the
//! map compute the same map at the same epoch.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::filesystem::{self, FsId, FsInfo, MdsInfo, FILESYSTEMS_MAX};
use crate::placement::{self, Candidate, FailureDomain, OsdId, PgId};
use crate::{ObjectName, PoolId};

/// A version of the cluster map; every applied change makes a new one.
pub type Epoch = u64;

/// Largest replica count a pool may ask for.
pub const POOL_SIZE_MAX: u8 = 10;
/// Largest number of placement groups in one pool.
pub const PG_NUM_MAX: u32 = 1 << 16;
/// Longest pool name, in bytes.
pub const POOL_NAME_BYTES_MAX: usize = 128;
/// An OSD's weight when added without one: 1.0 in 16.16 fixed point.
pub const WEIGHT_ONE: u32 = 1 << 16;
/// Most client instances the blocklist holds; past it, blocklisting is refused until an
/// operator removes entries.
pub const BLOCKLIST_ENTRIES_MAX: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdInfo {
    pub id: OsdId,
    pub host: String,
    /// Relative capacity, 16.16 fixed point.
    pub weight: u32,
    /// Where it serves clients and peers, as it reported at its last boot.
    pub addr: Option<String>,
    pub up: bool,
    pub is_in: bool,
    /// Marked out by the monitors after it stayed down too long (not by an operator): it is
    /// marked in again when it boots.
    #[serde(default)]
    pub auto_out: bool,
    /// How full its store is, as the monitors last judged from its beacons.
    #[serde(default)]
    pub space: Space,
}

/// An OSD's store against the cluster's ratios ([`SpaceRatios`]): nearfull warns; full
/// refuses writes to the PGs it holds (deletes still go through) until space is freed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Space {
    #[default]
    Ok,
    NearFull,
    Full,
}

/// When a store counts as nearfull and full, in thousandths of its size (Ceph's
/// `mon_osd_nearfull_ratio` and `mon_osd_full_ratio`, 0.85 and 0.95 by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceRatios {
    pub nearfull_permille: u16,
    pub full_permille: u16,
}

impl Default for SpaceRatios {
    fn default() -> Self {
        SpaceRatios {
            nearfull_permille: 850,
            full_permille: 950,
        }
    }
}

/// Below this much room on the file system under a store, the OSD counts as full: its
/// metadata database grows there with every write (the data file does not: it is allocated
/// when made), and a commit that meets a full file system fails. The room covers what the
/// writes in flight between two of its beacons can take.
pub const HOST_FULL_BYTES: u64 = 64 << 20;
/// Below this much room on the file system under a store, the OSD counts as nearfull.
pub const HOST_NEARFULL_BYTES: u64 = 256 << 20;

/// An OSD's space as it reports it: its store's, and the room on the file system under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub used_bytes: u64,
    pub total_bytes: u64,
    /// `u64::MAX` when the file system cannot say.
    pub host_free_bytes: u64,
}

impl Usage {
    /// Whether the file system under the store is short of room ([`HOST_FULL_BYTES`]).
    pub fn host_full(&self) -> bool {
        judge_host(self.host_free_bytes) == Space::Full
    }
}

impl Default for Usage {
    /// Nothing known: an empty store on a file system that does not say.
    fn default() -> Self {
        Usage {
            used_bytes: 0,
            total_bytes: 0,
            host_free_bytes: u64::MAX,
        }
    }
}

/// One pool's share of a store: its objects, the bytes they hold (their sizes) and the
/// store's bytes allocated to them. The store keeps it in the same commit as the data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolUsage {
    pub objects: u64,
    pub stored_bytes: u64,
    pub allocated_bytes: u64,
}

impl PoolUsage {
    /// Adds `other` to these figures.
    pub fn add(&mut self, other: &PoolUsage) {
        self.objects += other.objects;
        self.stored_bytes += other.stored_bytes;
        self.allocated_bytes += other.allocated_bytes;
    }
}

impl SpaceRatios {
    /// How full an OSD is: the fuller of its store against the ratios and the file system
    /// under it against [`HOST_FULL_BYTES`] and [`HOST_NEARFULL_BYTES`]. An empty store (no
    /// size reported yet) counts as `Ok` for its part.
    pub fn judge(&self, usage: &Usage) -> Space {
        self.judge_store(usage)
            .max(judge_host(usage.host_free_bytes))
    }

    fn judge_store(&self, usage: &Usage) -> Space {
        if usage.total_bytes == 0 {
            return Space::Ok;
        }
        let permille = u128::from(usage.used_bytes) * 1000 / u128::from(usage.total_bytes);
        if permille >= u128::from(self.full_permille) {
            Space::Full
        } else if permille >= u128::from(self.nearfull_permille) {
            Space::NearFull
        } else {
            Space::Ok
        }
    }

    /// Bytes an OSD can still take before it counts as full: its store's room below the
    /// full ratio, and no more than the room the file system under it has above
    /// [`HOST_FULL_BYTES`].
    pub fn room(&self, usage: &Usage) -> u64 {
        let full = u128::from(usage.total_bytes) * u128::from(self.full_permille) / 1000;
        let store = u64::try_from(full)
            .unwrap_or(u64::MAX)
            .saturating_sub(usage.used_bytes);
        store.min(usage.host_free_bytes.saturating_sub(HOST_FULL_BYTES))
    }

    /// Why an OSD is as full as it is, for health: `96.0 % of its store used (full at 95.0
    /// %)`, with `the file system under its store has 12 MiB free (full below 64 MiB)` when
    /// that counts too.
    pub fn explain(&self, usage: &Usage) -> String {
        let share = 100.0 * usage.used_bytes as f64 / usage.total_bytes.max(1) as f64;
        let mut text = format!("{share:.1} % of its store used");
        let limit =
            |word: &str, permille: u16| format!(" ({word} at {:.1} %)", f64::from(permille) / 10.0);
        match self.judge_store(usage) {
            Space::Full => text += &limit("full", self.full_permille),
            Space::NearFull => text += &limit("nearfull", self.nearfull_permille),
            Space::Ok => {}
        }
        let (word, bytes) = match judge_host(usage.host_free_bytes) {
            Space::Full => ("full", HOST_FULL_BYTES),
            Space::NearFull => ("nearfull", HOST_NEARFULL_BYTES),
            Space::Ok => return text,
        };
        format!(
            "{text}; the file system under its store has {} MiB free ({word} below {} MiB)",
            usage.host_free_bytes >> 20,
            bytes >> 20
        )
    }
}

fn judge_host(free_bytes: u64) -> Space {
    if free_bytes < HOST_FULL_BYTES {
        Space::Full
    } else if free_bytes < HOST_NEARFULL_BYTES {
        Space::NearFull
    } else {
        Space::Ok
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolInfo {
    pub id: PoolId,
    pub name: String,
    pub size: u8,
    pub min_size: u8,
    pub pg_num: u32,
    pub domain: FailureDomain,
    /// Where the pool's data is sealed; fixed when the pool is created.
    #[serde(default)]
    pub seal: Seal,
    /// The code of an erasure-coded pool (its size is then k + m, one shard per
    /// position); None for a replicated pool. Fixed when the pool is created.
    #[serde(default)]
    pub erasure: Option<Erasure>,
}

impl PoolInfo {
    /// What storing one byte in this pool takes of the OSDs' space, as a fraction
    /// (numerator, denominator): `size` bytes for a replicated pool, (k + m) / k for an
    /// erasure-coded one (padding of a last stripe aside).
    pub fn raw_per_byte(&self) -> (u64, u64) {
        match self.erasure.map(|e| e.profile()) {
            Some(profile) => (profile.shards() as u64, profile.k() as u64),
            None => (u64::from(self.size.max(1)), 1),
        }
    }
}

/// An erasure-coded pool's code (docs/design/erasure.md, §4): k data shards, m parity
/// shards, the stripe unit. A valid `ec::Profile` by construction, and checked again when a
/// map is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ErasureFields")]
pub struct Erasure {
    k: u8,
    m: u8,
    unit_bytes: u32,
}

#[derive(Deserialize)]
struct ErasureFields {
    k: u8,
    m: u8,
    unit_bytes: u32,
}

impl TryFrom<ErasureFields> for Erasure {
    type Error = String;

    fn try_from(fields: ErasureFields) -> Result<Erasure, String> {
        let profile = ec::Profile::new(
            usize::from(fields.k),
            usize::from(fields.m),
            u64::from(fields.unit_bytes),
        )
        .map_err(|e| e.to_string())?;
        Ok(Erasure::new(profile))
    }
}

impl Erasure {
    pub fn new(profile: ec::Profile) -> Erasure {
        let narrow = |n: usize| u8::try_from(n).expect("a profile has at most 32 shards");
        Erasure {
            k: narrow(profile.k()),
            m: narrow(profile.m()),
            unit_bytes: u32::try_from(profile.unit_bytes()).expect("a unit is at most 1 MiB"),
        }
    }

    pub fn profile(&self) -> ec::Profile {
        ec::Profile::new(
            usize::from(self.k),
            usize::from(self.m),
            u64::from(self.unit_bytes),
        )
        .expect("checked when made or decoded")
    }
}

/// Where a pool's data is sealed (docs/design/edge-sealing.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Seal {
    /// Clients send plaintext; each OSD's store seals it (its at-rest mode).
    #[default]
    Osd,
    /// Clients seal 4 KiB chunks under the pool's data key `key` (a version, from 1) and
    /// OSDs store them as they come, never holding the key.
    Edge { key: u16 },
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMap {
    pub epoch: Epoch,
    pub osds: BTreeMap<OsdId, OsdInfo>,
    pub pools: BTreeMap<PoolId, PoolInfo>,
    /// Client instances (the `client` half of their request ids) whose writes every OSD
    /// refuses: writers fenced off when their image lock was broken. Entries stay until an
    /// operator removes them.
    pub blocklist: BTreeSet<u64>,
    next_pool: u64,
    /// File systems by name (docs/design/fs.md).
    #[serde(default)]
    pub filesystems: BTreeMap<String, FsInfo>,
    #[serde(default)]
    next_fs: u32,
    #[serde(default)]
    pub space_ratios: SpaceRatios,
    #[serde(skip)]
    acting: ActingCache,
}

/// Acting sets already computed from this map: every request asks for its PG's primary, and
/// straw2 over every OSD is too much work to repeat per request. Emptied by every change;
/// not part of the map's value (equal maps may hold different caches).
#[derive(Default)]
struct ActingCache(Mutex<HashMap<PgId, Vec<OsdId>>>);

impl ActingCache {
    fn clear(&mut self) {
        self.0.get_mut().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

impl Clone for ActingCache {
    fn clone(&self) -> Self {
        ActingCache::default()
    }
}

impl PartialEq for ActingCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ActingCache {}

impl fmt::Debug for ActingCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ActingCache")
    }
}

/// One change to the map. The monitors put these in their replicated log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    AddOsd {
        id: OsdId,
        host: String,
        weight: u32,
    },
    /// The OSD started and serves at `addr`: it is up, and in again if the monitors had
    /// marked it out (an operator's `out` stays).
    OsdBoot {
        id: OsdId,
        addr: String,
    },
    OsdDown {
        id: OsdId,
    },
    /// An operator marks the OSD out: it holds no data until marked in.
    OsdOut {
        id: OsdId,
    },
    /// The monitors mark a down OSD out after it stayed down too long.
    OsdAutoOut {
        id: OsdId,
    },
    OsdIn {
        id: OsdId,
    },
    RemoveOsd {
        id: OsdId,
    },
    /// A pool, erasure-coded if `erasure` says so (its size then k + m).
    CreatePool {
        name: String,
        size: u8,
        min_size: u8,
        pg_num: u32,
        domain: FailureDomain,
        #[serde(default)]
        erasure: Option<Erasure>,
    },
    RemovePool {
        name: String,
    },
    /// Every OSD refuses writes from this client instance from this epoch on.
    Blocklist {
        client: u64,
    },
    Unblocklist {
        client: u64,
    },
    /// A file system over two existing pools, neither used by another file system.
    CreateFs {
        name: String,
        meta_pool: String,
        data_pool: String,
        owns_pools: bool,
    },
    /// Removes the file system from the map (its pools stay until removed).
    RemoveFs {
        name: String,
    },
    /// MDS `name`, as client instance `instance`, serves file system `fs` at `addr` from this
    /// epoch; the instance of the MDS it replaces is blocklisted in the same epoch.
    MdsBoot {
        fs: String,
        name: String,
        addr: String,
        instance: u64,
    },
    /// The monitors judged the OSD's store anew from its beacon.
    OsdSpace {
        id: OsdId,
        space: Space,
    },
    /// An operator sets when stores count as nearfull and full.
    SetSpaceRatios {
        ratios: SpaceRatios,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeError {
    OsdExists(OsdId),
    NoSuchOsd(OsdId),
    OsdStillUp(OsdId),
    NotAutoOut(OsdId),
    PoolExists(String),
    NoSuchPool(String),
    InvalidPool(String),
    BlocklistFull,
    NotBlocklisted(u64),
    FsExists(String),
    NoSuchFs(String),
    InvalidFs(String),
    /// A pool cannot go (or serve a second file system) while file system `fs` uses it.
    PoolInUse {
        pool: String,
        fs: String,
    },
    InvalidRatios(String),
}

impl fmt::Display for ChangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChangeError::OsdExists(id) => write!(f, "osd.{} already exists", id.0),
            ChangeError::NoSuchOsd(id) => write!(f, "osd.{} does not exist", id.0),
            ChangeError::OsdStillUp(id) => write!(f, "osd.{} is up; stop it first", id.0),
            ChangeError::NotAutoOut(id) => {
                write!(f, "osd.{} is up or already out; it is not marked out", id.0)
            }
            ChangeError::PoolExists(name) => write!(f, "pool {name:?} already exists"),
            ChangeError::NoSuchPool(name) => write!(f, "pool {name:?} does not exist"),
            ChangeError::InvalidPool(why) => write!(f, "invalid pool: {why}"),
            ChangeError::BlocklistFull => write!(
                f,
                "the blocklist holds {BLOCKLIST_ENTRIES_MAX} clients; remove some first"
            ),
            ChangeError::NotBlocklisted(client) => {
                write!(f, "client instance {client:016x} is not blocklisted")
            }
            ChangeError::FsExists(name) => write!(f, "file system {name:?} already exists"),
            ChangeError::NoSuchFs(name) => write!(f, "file system {name:?} does not exist"),
            ChangeError::InvalidFs(why) => write!(f, "invalid file system: {why}"),
            ChangeError::PoolInUse { pool, fs } => {
                write!(f, "pool {pool:?} is used by file system {fs:?}")
            }
            ChangeError::InvalidRatios(why) => write!(f, "invalid ratios: {why}"),
        }
    }
}

impl std::error::Error for ChangeError {}

impl ClusterMap {
    /// Applies `change` and moves to the next epoch, or changes nothing and says why.
    /// The id the next created pool gets (ids are never reused).
    pub fn next_pool_id(&self) -> PoolId {
        PoolId(self.next_pool + 1)
    }

    /// Sets pool `id`'s seal, in a new epoch, as the monitors do when they create a pool
    /// sealed at the edge or rotate its data key.
    pub fn set_seal(&mut self, id: PoolId, seal: Seal) -> Result<(), ChangeError> {
        let pool = self
            .pools
            .get_mut(&id)
            .ok_or_else(|| ChangeError::NoSuchPool(format!("id {}", id.0)))?;
        pool.seal = seal;
        self.epoch += 1;
        Ok(())
    }

    pub fn apply(&mut self, change: &Change) -> Result<(), ChangeError> {
        match change {
            Change::AddOsd { id, host, weight } => {
                if self.osds.contains_key(id) {
                    return Err(ChangeError::OsdExists(*id));
                }
                let info = OsdInfo {
                    id: *id,
                    host: host.clone(),
                    weight: *weight,
                    addr: None,
                    up: false,
                    is_in: true,
                    auto_out: false,
                    space: Space::Ok,
                };
                self.osds.insert(*id, info);
            }
            Change::OsdBoot { id, addr } => {
                let osd = self.osd_mut(*id)?;
                osd.addr = Some(addr.clone());
                osd.up = true;
                if osd.auto_out {
                    osd.is_in = true;
                    osd.auto_out = false;
                }
            }
            Change::OsdDown { id } => self.osd_mut(*id)?.up = false,
            Change::OsdSpace { id, space } => self.osd_mut(*id)?.space = *space,
            Change::SetSpaceRatios { ratios } => {
                let SpaceRatios {
                    nearfull_permille: near,
                    full_permille: full,
                } = *ratios;
                if near == 0 || near >= full || full > 1000 {
                    return Err(ChangeError::InvalidRatios(format!(
                        "nearfull {near}, full {full} (in thousandths): need 0 < nearfull < \
                         full <= 1000"
                    )));
                }
                self.space_ratios = *ratios;
            }
            Change::OsdOut { id } => {
                let osd = self.osd_mut(*id)?;
                osd.is_in = false;
                osd.auto_out = false;
            }
            Change::OsdAutoOut { id } => {
                let osd = self.osd_mut(*id)?;
                if osd.up || !osd.is_in {
                    return Err(ChangeError::NotAutoOut(*id));
                }
                osd.is_in = false;
                osd.auto_out = true;
            }
            Change::OsdIn { id } => {
                let osd = self.osd_mut(*id)?;
                osd.is_in = true;
                osd.auto_out = false;
            }
            Change::RemoveOsd { id } => {
                if self.osd_mut(*id)?.up {
                    return Err(ChangeError::OsdStillUp(*id));
                }
                self.osds.remove(id);
            }
            Change::CreatePool {
                name,
                size,
                min_size,
                pg_num,
                domain,
                erasure,
            } => {
                check_pool(name, *size, *min_size, *pg_num, *erasure)?;
                if self.pool_by_name(name).is_some() {
                    return Err(ChangeError::PoolExists(name.clone()));
                }
                self.next_pool += 1;
                let id = PoolId(self.next_pool);
                let pool = PoolInfo {
                    id,
                    name: name.clone(),
                    size: *size,
                    min_size: *min_size,
                    pg_num: *pg_num,
                    domain: *domain,
                    seal: Seal::Osd,
                    erasure: *erasure,
                };
                self.pools.insert(id, pool);
            }
            Change::RemovePool { name } => {
                let id = self
                    .pool_by_name(name)
                    .ok_or_else(|| ChangeError::NoSuchPool(name.clone()))?
                    .id;
                self.check_pool_unused(id, name)?;
                self.pools.remove(&id);
            }
            Change::Blocklist { client } => {
                if self.blocklist.len() >= BLOCKLIST_ENTRIES_MAX && !self.blocklist.contains(client)
                {
                    return Err(ChangeError::BlocklistFull);
                }
                self.blocklist.insert(*client);
            }
            Change::Unblocklist { client } => {
                if !self.blocklist.remove(client) {
                    return Err(ChangeError::NotBlocklisted(*client));
                }
            }
            Change::CreateFs {
                name,
                meta_pool,
                data_pool,
                owns_pools,
            } => self.create_fs(name, meta_pool, data_pool, *owns_pools)?,
            Change::RemoveFs { name } => {
                self.filesystems
                    .remove(name)
                    .ok_or_else(|| ChangeError::NoSuchFs(name.clone()))?;
            }
            Change::MdsBoot {
                fs,
                name,
                addr,
                instance,
            } => {
                let since = self.epoch + 1;
                let previous = self
                    .filesystems
                    .get(fs)
                    .ok_or_else(|| ChangeError::NoSuchFs(fs.clone()))?
                    .mds
                    .as_ref()
                    .map(|mds| mds.instance)
                    .filter(|old| old != instance);
                if let Some(old) = previous {
                    if self.blocklist.len() >= BLOCKLIST_ENTRIES_MAX {
                        return Err(ChangeError::BlocklistFull);
                    }
                    self.blocklist.insert(old);
                }
                let info = self
                    .filesystems
                    .get_mut(fs)
                    .expect("the file system was found above");
                info.mds = Some(MdsInfo {
                    name: name.clone(),
                    addr: addr.clone(),
                    instance: *instance,
                    since,
                });
            }
        }
        self.epoch += 1;
        self.acting.clear();
        Ok(())
    }

    fn create_fs(
        &mut self,
        name: &str,
        meta_pool: &str,
        data_pool: &str,
        owns_pools: bool,
    ) -> Result<(), ChangeError> {
        filesystem::check_name(name)?;
        if self.filesystems.contains_key(name) {
            return Err(ChangeError::FsExists(name.into()));
        }
        if self.filesystems.len() >= FILESYSTEMS_MAX {
            return Err(ChangeError::InvalidFs(format!(
                "the cluster holds {FILESYSTEMS_MAX} file systems already"
            )));
        }
        if meta_pool == data_pool {
            return Err(ChangeError::InvalidFs(
                "the metadata and data pools must differ".into(),
            ));
        }
        let mut ids = [PoolId(0); 2];
        for (slot, pool) in ids.iter_mut().zip([meta_pool, data_pool]) {
            let info = self
                .pool_by_name(pool)
                .ok_or_else(|| ChangeError::NoSuchPool(pool.into()))?;
            if pool == meta_pool && info.erasure.is_some() {
                return Err(ChangeError::InvalidFs(format!(
                    "the metadata pool {pool} is erasure-coded: the namespace lives in omap, \
                     which only replicated pools keep (an erasure-coded pool can be the data \
                     pool)"
                )));
            }
            let id = info.id;
            self.check_pool_unused(id, pool)?;
            *slot = id;
        }
        self.next_fs += 1;
        let info = FsInfo {
            id: FsId(self.next_fs),
            name: name.into(),
            meta_pool: ids[0],
            data_pool: ids[1],
            owns_pools,
            mds: None,
        };
        self.filesystems.insert(name.into(), info);
        Ok(())
    }

    fn check_pool_unused(&self, id: PoolId, pool: &str) -> Result<(), ChangeError> {
        match self
            .filesystems
            .values()
            .find(|fs| fs.meta_pool == id || fs.data_pool == id)
        {
            Some(fs) => Err(ChangeError::PoolInUse {
                pool: pool.into(),
                fs: fs.name.clone(),
            }),
            None => Ok(()),
        }
    }

    fn osd_mut(&mut self, id: OsdId) -> Result<&mut OsdInfo, ChangeError> {
        self.osds.get_mut(&id).ok_or(ChangeError::NoSuchOsd(id))
    }

    pub fn pool_by_name(&self, name: &str) -> Option<&PoolInfo> {
        self.pools.values().find(|pool| pool.name == name)
    }

    /// The placement group an object belongs to.
    pub fn pg_of(&self, pool: &PoolInfo, name: &ObjectName) -> PgId {
        PgId {
            pool: pool.id,
            number: placement::pg_of(name.hash().0, pool.pg_num),
        }
    }

    /// The OSDs a PG maps to, in order (the first is the primary when up), whether or not
    /// they are up: the "up set" before liveness.
    pub fn pg_osds(&self, pool: &PoolInfo, pg: PgId) -> Vec<OsdId> {
        placement::place(pg, &self.candidates(), usize::from(pool.size), pool.domain)
    }

    /// Every OSD, as placement sees it.
    fn candidates(&self) -> Vec<Candidate> {
        self.osds
            .values()
            .map(|osd| Candidate {
                osd: osd.id,
                host: osd.host.clone(),
                weight: osd.weight,
                is_in: osd.is_in,
            })
            .collect()
    }

    /// Why a write of data to PG `pg` of `pool` is refused for want of space, if it is: an
    /// OSD of its acting set is full. Deletes and metadata writes are not asked about.
    pub fn full_refusal(&self, pool: &PoolInfo, pg: PgId) -> Option<String> {
        // Every write asks: with no store full, no acting set is looked up.
        if !self.osds.values().any(|o| o.space == Space::Full) {
            return None;
        }
        let full: Vec<String> = self
            .acting(pool, pg)
            .iter()
            .filter(|id| self.osds.get(id).is_some_and(|o| o.space == Space::Full))
            .map(|id| format!("osd.{}", id.0))
            .collect();
        if full.is_empty() {
            return None;
        }
        Some(format!(
            "pool {} is full: {} of pg {}.{} {} full (`coffer status` says whether a store \
             or the file system under it); free space or add OSDs, and writes resume by \
             themselves",
            pool.name,
            full.join(", "),
            pool.id,
            pg.number,
            if full.len() == 1 { "is" } else { "are" },
        ))
    }

    /// The pools with a PG that OSD `id` holds a copy of.
    pub fn pools_on(&self, id: OsdId) -> Vec<&str> {
        self.pools
            .values()
            .filter(|pool| {
                (0..pool.pg_num).any(|number| {
                    let pg = PgId {
                        pool: pool.id,
                        number,
                    };
                    self.pg_osds(pool, pg).contains(&id)
                })
            })
            .map(|pool| pool.name.as_str())
            .collect()
    }

    /// How many separate places a pool with failure domain `domain` can put copies in: the
    /// OSDs that are in, or their distinct hosts. A pool whose size exceeds it stays
    /// undersized.
    pub fn domains_in(&self, domain: FailureDomain) -> usize {
        let in_osds = self.osds.values().filter(|osd| osd.is_in);
        match domain {
            FailureDomain::Osd => in_osds.count(),
            FailureDomain::Host => in_osds
                .map(|osd| osd.host.as_str())
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
        }
    }

    /// The OSDs of a PG that are up, in placement order: the first is the primary. Computed
    /// once per PG and map.
    pub fn acting(&self, pool: &PoolInfo, pg: PgId) -> Vec<OsdId> {
        let mut cache = self.acting.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = cache.get(&pg) {
            return set.clone();
        }
        let set: Vec<OsdId> = self
            .pg_osds(pool, pg)
            .into_iter()
            .filter(|id| self.osds.get(id).is_some_and(|osd| osd.up))
            .collect();
        cache.insert(pg, set.clone());
        set
    }

    /// The OSD holding each shard of a PG of an erasure-coded pool, by position (shard i at
    /// position i): k + m entries, None where the OSD placed there is down or none could be
    /// placed. A down OSD leaves its position empty; no other shard moves (erasure.md, §4).
    ///
    /// # Panics
    /// If `pool` is replicated.
    pub fn shards(&self, pool: &PoolInfo, pg: PgId) -> Vec<Option<OsdId>> {
        let profile = pool
            .erasure
            .expect("shards are asked of an erasure-coded pool")
            .profile();
        let positions =
            placement::place_positions(pg, &self.candidates(), profile.shards(), pool.domain);
        positions
            .into_iter()
            .map(|at| at.filter(|id| self.osds.get(id).is_some_and(|osd| osd.up)))
            .collect()
    }

    /// The next OSD id no OSD has.
    pub fn next_osd_id(&self) -> OsdId {
        OsdId(self.osds.keys().next_back().map_or(0, |id| id.0 + 1))
    }
}

fn check_pool(
    name: &str,
    size: u8,
    min_size: u8,
    pg_num: u32,
    erasure: Option<Erasure>,
) -> Result<(), ChangeError> {
    let invalid = |why: String| Err(ChangeError::InvalidPool(why));
    if name.is_empty() || name.len() > POOL_NAME_BYTES_MAX {
        return invalid(format!("a name must be 1 to {POOL_NAME_BYTES_MAX} bytes"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return invalid(format!("{name:?}: use letters, digits, '-', '_' and '.'"));
    }
    match erasure.map(|e| e.profile()) {
        None if size == 0 || size > POOL_SIZE_MAX => {
            return invalid(format!("size {size} is not within 1..={POOL_SIZE_MAX}"));
        }
        Some(profile) if usize::from(size) != profile.shards() => {
            return invalid(format!(
                "size {size} is not k + m ({}) of the code {profile}",
                profile.shards()
            ));
        }
        // Fewer than k shards cannot be read back.
        Some(profile) if usize::from(min_size) < profile.k() || min_size > size => {
            return invalid(format!(
                "min_size {min_size} is not within k..=k + m ({}..={size}) of the code {profile}",
                profile.k()
            ));
        }
        _ => {}
    }
    if min_size == 0 || min_size > size {
        return invalid(format!(
            "min_size {min_size} is not within 1..=size ({size})"
        ));
    }
    if pg_num == 0 || pg_num > PG_NUM_MAX {
        return invalid(format!("pg_num {pg_num} is not within 1..={PG_NUM_MAX}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str) -> Change {
        Change::CreatePool {
            name: name.into(),
            size: 3,
            min_size: 2,
            pg_num: 32,
            domain: FailureDomain::Osd,
            erasure: None,
        }
    }

    #[test]
    fn room_is_what_is_left_below_the_full_ratio_and_above_the_host_floor() {
        let ratios = SpaceRatios::default();
        let usage = |used_bytes, host_free_bytes| Usage {
            used_bytes,
            total_bytes: 1000,
            host_free_bytes,
        };
        assert_eq!(ratios.room(&usage(100, u64::MAX)), 850);
        assert_eq!(ratios.room(&usage(990, u64::MAX)), 0, "past full: none");
        assert_eq!(ratios.room(&usage(0, HOST_FULL_BYTES + 7)), 7);
        assert_eq!(ratios.room(&usage(0, 1)), 0);
    }

    #[test]
    fn changes_bump_the_epoch_and_refusals_change_nothing() {
        let mut map = ClusterMap::default();
        for i in 0..3 {
            let add = Change::AddOsd {
                id: map.next_osd_id(),
                host: "h".into(),
                weight: WEIGHT_ONE,
            };
            map.apply(&add).expect("add osd");
            map.apply(&Change::OsdBoot {
                id: OsdId(i),
                addr: format!("127.0.0.1:{}", 7000 + i),
            })
            .expect("boot");
        }
        map.apply(&pool("rbd")).expect("pool");
        assert_eq!(map.epoch, 7);
        let before = map.clone();
        assert_eq!(
            map.apply(&pool("rbd")),
            Err(ChangeError::PoolExists("rbd".into()))
        );
        assert_eq!(
            map.apply(&Change::RemoveOsd { id: OsdId(1) }),
            Err(ChangeError::OsdStillUp(OsdId(1)))
        );
        assert!(matches!(
            map.apply(&Change::CreatePool {
                name: "bad name".into(),
                size: 3,
                min_size: 2,
                pg_num: 8,
                domain: FailureDomain::Osd,
                erasure: None,
            }),
            Err(ChangeError::InvalidPool(_))
        ));
        assert_eq!(map, before);
    }

    /// A map of `count` OSDs, up and in, each on a host of its own.
    fn up_osds_on_their_own_hosts(count: u32) -> ClusterMap {
        let mut map = ClusterMap::default();
        for i in 0..count {
            let add = Change::AddOsd {
                id: OsdId(i),
                host: format!("h{i}"),
                weight: WEIGHT_ONE,
            };
            map.apply(&add).expect("add");
            map.apply(&Change::OsdBoot {
                id: OsdId(i),
                addr: String::new(),
            })
            .expect("boot");
        }
        map
    }

    fn erasure(k: usize, m: usize) -> Option<Erasure> {
        Some(Erasure::new(ec::Profile::new(k, m, 4096).expect("profile")))
    }

    fn ec_pool(name: &str, size: u8, min_size: u8) -> Change {
        Change::CreatePool {
            name: name.into(),
            size,
            min_size,
            pg_num: 16,
            domain: FailureDomain::Host,
            erasure: erasure(4, 2),
        }
    }

    /// Shard i of a PG lives at position i: a down OSD leaves a hole and no shard moves; an
    /// OSD marked out is replaced at its own position.
    #[test]
    fn an_erasure_coded_pool_has_a_shard_per_position_and_a_down_osd_leaves_a_hole() {
        let mut map = up_osds_on_their_own_hosts(8);
        map.apply(&ec_pool("ec", 6, 5))
            .expect("an erasure-coded pool");
        let p = map.pool_by_name("ec").expect("pool").clone();
        assert_eq!(p.erasure, erasure(4, 2));
        for number in 0..p.pg_num {
            let pg = PgId { pool: p.id, number };
            let shards = map.shards(&p, pg);
            let placed: Vec<OsdId> = shards.iter().flatten().copied().collect();
            assert_eq!(placed, map.pg_osds(&p, pg), "all up: every position held");
            let mut down = map.clone();
            down.apply(&Change::OsdDown { id: placed[2] })
                .expect("down");
            let mut holed = shards.clone();
            holed[2] = None;
            assert_eq!(down.shards(&p, pg), holed, "pg {number}");
            down.apply(&Change::OsdOut { id: placed[2] }).expect("out");
            let replaced = down.shards(&p, pg);
            assert_eq!(replaced[..2], shards[..2], "pg {number}");
            assert!(replaced[2].is_some_and(|osd| osd != placed[2]));
        }
    }

    #[test]
    fn erasure_coded_pools_are_checked_when_created_and_when_read() {
        let mut map = ClusterMap::default();
        for (change, why) in [
            (ec_pool("a", 5, 5), "size 5 is not k + m (6)"),
            (
                ec_pool("a", 6, 3),
                "min_size 3 is not within k..=k + m (4..=6)",
            ),
            (ec_pool("a", 6, 7), "min_size 7"),
        ] {
            match map.apply(&change) {
                Err(ChangeError::InvalidPool(reason)) => assert!(reason.contains(why), "{reason}"),
                other => panic!("{change:?} gave {other:?}"),
            }
        }
        map.apply(&ec_pool("a", 6, 4))
            .expect("min_size k is allowed");
        let pool = map.pool_by_name("a").expect("pool").clone();
        let json = serde_json::to_string(&pool).expect("encode");
        let back: PoolInfo = serde_json::from_str(&json).expect("decode");
        assert_eq!(back, pool);
        let bad = json.replace("\"unit_bytes\":4096", "\"unit_bytes\":100");
        assert_ne!(bad, json);
        let refused = serde_json::from_str::<PoolInfo>(&bad).expect_err("a unit of 100 bytes");
        assert!(refused.to_string().contains("unit"), "{refused}");
        let replicated = json.replace(",\"erasure\":{\"k\":4,\"m\":2,\"unit_bytes\":4096}", "");
        assert_ne!(replicated, json);
        let old: PoolInfo = serde_json::from_str(&replicated).expect("a pool of an older map");
        assert_eq!(old.erasure, None);
    }

    #[test]
    fn acting_sets_skip_down_osds_and_keep_order() {
        let mut map = up_osds_on_their_own_hosts(4);
        map.apply(&pool("p")).expect("pool");
        let p = map.pool_by_name("p").expect("pool").clone();
        let pg = map.pg_of(&p, &ObjectName::new("obj").expect("name"));
        let up = map.pg_osds(&p, pg);
        assert_eq!(up.len(), 3);
        assert_eq!(
            map.acting(&p, pg),
            up,
            "all up: the acting set is the up set"
        );
        // The acting set computed above is cached; a change must not leave it stale.
        map.apply(&Change::OsdDown { id: up[0] }).expect("down");
        assert_eq!(map.acting(&p, pg), up[1..].to_vec());
        assert_eq!(map.pg_osds(&p, pg), up, "down alone does not re-place");
    }

    #[test]
    fn blocklist_holds_clients_until_removed_and_is_bounded() {
        let mut map = ClusterMap::default();
        map.apply(&Change::Blocklist { client: 7 })
            .expect("blocklist");
        map.apply(&Change::Blocklist { client: 7 })
            .expect("blocklisting twice is harmless");
        assert!(map.blocklist.contains(&7));
        map.apply(&Change::Unblocklist { client: 7 })
            .expect("unblocklist");
        assert_eq!(
            map.apply(&Change::Unblocklist { client: 7 }),
            Err(ChangeError::NotBlocklisted(7))
        );
        for client in 0..BLOCKLIST_ENTRIES_MAX as u64 {
            map.apply(&Change::Blocklist { client })
                .expect("within the bound");
        }
        let full = map.clone();
        assert_eq!(
            map.apply(&Change::Blocklist { client: u64::MAX }),
            Err(ChangeError::BlocklistFull)
        );
        assert_eq!(map, full, "a refused change leaves the map as it was");
    }

    /// A file system claims its two pools, and each MDS that boots fences the one before it
    /// in the same epoch: the old instance is blocklisted when the new one becomes active.
    #[test]
    fn file_systems_claim_their_pools_and_a_new_mds_fences_the_old() {
        let mut map = ClusterMap::default();
        for name in ["fs.meta", "fs.data", "other"] {
            map.apply(&pool(name)).expect("pool");
        }
        let create = |name: &str, meta: &str, data: &str| Change::CreateFs {
            name: name.into(),
            meta_pool: meta.into(),
            data_pool: data.into(),
            owns_pools: true,
        };
        map.apply(&create("fs", "fs.meta", "fs.data"))
            .expect("create fs");
        let before = map.clone();
        assert_eq!(
            map.apply(&create("fs", "other", "fs.data")),
            Err(ChangeError::FsExists("fs".into()))
        );
        assert_eq!(
            map.apply(&create("two", "other", "fs.data")),
            Err(ChangeError::PoolInUse {
                pool: "fs.data".into(),
                fs: "fs".into()
            })
        );
        assert!(matches!(
            map.apply(&create("bad/name", "other", "other")),
            Err(ChangeError::InvalidFs(_))
        ));
        assert_eq!(
            map.apply(&Change::RemovePool {
                name: "fs.meta".into()
            }),
            Err(ChangeError::PoolInUse {
                pool: "fs.meta".into(),
                fs: "fs".into()
            })
        );
        assert_eq!(map, before, "refused changes leave the map as it was");
        map.apply(&ec_pool("coded", 6, 5))
            .expect("an erasure-coded pool");
        let refused = map.apply(&create("wide", "coded", "other"));
        assert!(
            matches!(&refused, Err(ChangeError::InvalidFs(why))
                if why.contains("metadata pool coded is erasure-coded")),
            "{refused:?}"
        );
        map.apply(&create("wide", "other", "coded"))
            .expect("an erasure-coded data pool");

        let boot = |instance: u64| Change::MdsBoot {
            fs: "fs".into(),
            name: "mds.a".into(),
            addr: "127.0.0.1:6800".into(),
            instance,
        };
        map.apply(&boot(11)).expect("first mds");
        assert!(map.blocklist.is_empty(), "nothing to fence at first");
        map.apply(&boot(11)).expect("the same instance again");
        assert!(map.blocklist.is_empty(), "an MDS does not fence itself");
        map.apply(&boot(12)).expect("a new mds");
        assert!(map.blocklist.contains(&11), "the old instance is fenced");
        let mds = map.filesystems["fs"].mds.clone().expect("active mds");
        assert_eq!((mds.instance, mds.since), (12, map.epoch));

        map.apply(&Change::RemoveFs { name: "fs".into() })
            .expect("remove fs");
        map.apply(&Change::RemovePool {
            name: "fs.meta".into(),
        })
        .expect("its pools are free again");
        assert_eq!(
            map.apply(&Change::RemoveFs { name: "fs".into() }),
            Err(ChangeError::NoSuchFs("fs".into()))
        );
    }
}
