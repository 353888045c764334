//! What clients, OSDs and monitors ask the monitors, and their answers.

use std::collections::BTreeMap;

use map::auth::Caps;
use map::cluster::{Change, ClusterMap, Epoch, PoolUsage, Usage};
use map::placement::{OsdId, PgId};
use map::PoolId;
use serde::{Deserialize, Serialize};

/// A request to a monitor.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum MonRequest {
    /// The cluster map: at once with `newer_than: None`; otherwise once its epoch is above
    /// `newer_than`, the monitor holding the request until then or until [`MAP_WAIT_MS_MAX`]
    /// passes (then it answers with what it has).
    GetMap { newer_than: Option<Epoch> },
    /// A change to the cluster; served by the raft leader.
    Command(Command),
    /// Raft traffic between monitors; the body (JSON) is in the data segment.
    Raft(RaftRpc),
    /// An OSD asks for the key that unwraps its store's key (secure links only).
    GetStoreKek,
    /// The auth table for an OSD, held like `GetMap`.
    GetAuth { newer_than: Option<u64> },
    /// The cluster's state: monitors, map, placement groups and usage (served by the leader,
    /// which gathers the OSDs' beacons).
    Status,
    /// An OSD says it is alive, with the state of the PGs it leads and its usage (to the
    /// leader, every [`BEACON_INTERVAL_MS`]).
    Beacon(OsdBeacon),
    /// A fresh data key, in the clear and wrapped by the current version of KMS key `key`
    /// (secure links and mon=rw only): [`MonReply::DataKey`].
    KmsGenerate { key: String },
    /// The data key `wrapped` by version `version` of KMS key `key`, in the clear (secure
    /// links and mon=rw only): [`MonReply::DataKey`].
    KmsDecrypt {
        key: String,
        version: u32,
        wrapped: Vec<u8>,
    },
    /// The data key `wrapped` by version `version` of KMS key `key`, wrapped again by the
    /// key's newest version; the data key itself never leaves the monitors (mon=rw, served
    /// by the leader): [`MonReply::Rewrapped`].
    KmsRewrap {
        key: String,
        version: u32,
        wrapped: Vec<u8>,
    },
    /// Every data key of a pool sealed at the edge, in the clear, for a client allowed to
    /// read the pool (secure links only; never to an OSD or a monitor): [`MonReply::PoolKeys`].
    PoolKeys { pool: map::PoolId },
}

/// How often an OSD sends its beacon to the monitors.
pub const BEACON_INTERVAL_MS: u64 = 1000;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OsdBeacon {
    /// The map epoch the report is from.
    pub epoch: Epoch,
    /// Each PG this OSD is primary of, with its state.
    pub pgs: Vec<(PgId, PgState)>,
    /// Its store's space and the room on the file system under it.
    pub usage: map::cluster::Usage,
    /// Copies this OSD replaced since it started because a read found them damaged.
    pub read_repairs: u64,
    /// What each pool holds in its store (pools with nothing there left out).
    pub pools: Vec<(PoolId, PoolUsage)>,
    /// Objects recovery has found to copy from this OSD and not copied yet.
    pub recovery_pending: u64,
    /// Its store's read cache.
    pub cache: CacheFigures,
}

/// What OSDs' read caches hold and served: one OSD's in its beacon, the up OSDs' summed in
/// status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheFigures {
    pub limit_bytes: u64,
    pub held_bytes: u64,
    /// Bytes of reads served from memory, and read from the disk, since the OSD started.
    pub hit_bytes: u64,
    pub miss_bytes: u64,
}

impl CacheFigures {
    pub fn add(&mut self, other: &CacheFigures) {
        self.limit_bytes += other.limit_bytes;
        self.held_bytes += other.held_bytes;
        self.hit_bytes += other.hit_bytes;
        self.miss_bytes += other.miss_bytes;
    }
}

/// A placement group's state, as its primary reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PgState {
    /// Serving, and every OSD of its acting set holds all of it.
    Clean,
    /// Serving, with fewer copies than the pool's size (some OSDs down or out).
    Undersized,
    /// Serving while copying objects to the OSDs that lack them.
    Recovering,
    /// The primary gathers the replicas' states before serving.
    Peering,
    /// Not serving: fewer up OSDs hold it than the pool's min_size, or it cannot be peered.
    Inactive(String),
    /// Serving reads, not writes: an erasure-coded PG with fewer complete shards than its
    /// pool's min_size, but at least k to decode its objects from.
    ReadOnly(String),
}

impl PgState {
    /// Every name [`PgState::name`] gives.
    pub const NAMES: [&'static str; 6] = [
        "active+clean",
        "active+undersized",
        "active+recovering",
        "peering",
        "inactive",
        "readonly",
    ];

    /// Whether the PG serves ops (writes and reads) in this state.
    pub fn is_active(&self) -> bool {
        matches!(
            self,
            PgState::Clean | PgState::Undersized | PgState::Recovering
        )
    }

    /// Whether the PG serves reads in this state.
    pub fn serves_reads(&self) -> bool {
        self.is_active() || matches!(self, PgState::ReadOnly(_))
    }

    /// Why the PG does not serve writes, when it is inactive or read-only.
    pub fn not_writable(&self) -> Option<&str> {
        match self {
            PgState::Inactive(why) | PgState::ReadOnly(why) => Some(why),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            PgState::Clean => "active+clean",
            PgState::Undersized => "active+undersized",
            PgState::Recovering => "active+recovering",
            PgState::Peering => "peering",
            PgState::Inactive(_) => "inactive",
            PgState::ReadOnly(_) => "readonly",
        }
    }
}

/// How long a monitor holds a map or auth request before answering with what it has.
pub const MAP_WAIT_MS_MAX: u64 = 20_000;
/// The longest a monitor waits for a command to commit before it answers that it did not
/// (it may still apply): a client waits longer than this for the answer, so that it never
/// sends a command again while its first sending may still commit.
pub const COMMIT_WAIT_MS_MAX: u64 = 10_000;

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub enum RaftRpc {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Command {
    Change(Change),
    /// Creates `entity` with a fresh key; the reply carries its keyring.
    AuthAdd {
        entity: String,
        caps: Caps,
    },
    AuthRemove {
        entity: String,
    },
    AuthList,
    /// Creates the next OSD: its id, key and store key-encryption key.
    OsdCreate {
        host: String,
        weight: u32,
    },
    /// The calling OSD is up and serves at `addr`.
    OsdBoot {
        addr: String,
    },
    /// Creates KMS key `name` (its first version).
    KmsKeyCreate {
        name: String,
    },
    /// Adds a version to KMS key `name`; new data keys are wrapped by it, older wraps still
    /// open with theirs.
    KmsKeyRotate {
        name: String,
    },
    /// Removes KMS key `name` and every version of it: what its data keys protect can no
    /// longer be read.
    KmsKeyRemove {
        name: String,
    },
    KmsKeyList,
    /// Creates a pool sealed at the edge (`change` is a `CreatePool`), with its KMS key
    /// `pool.<id>` and its first data key.
    PoolCreateEdge {
        change: Change,
    },
    /// Gives an edge-sealed pool a new data key for new writes; the KMS key gets a new
    /// version, and every older data key is rewrapped by it.
    PoolRotateKey {
        name: String,
    },
    /// The calling MDS serves file system `fs` at `addr` as client instance `instance`
    /// (fencing the MDS it replaces). Added last, so the other commands keep their numbers.
    MdsBoot {
        fs: String,
        addr: String,
        instance: u64,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum MonReply {
    Map(Box<ClusterMap>),
    /// The command was committed; the map (if it changed) is at `epoch`.
    Done {
        epoch: Epoch,
    },
    Keyring {
        entity: String,
        pem: String,
    },
    OsdCreated {
        id: OsdId,
        pem: String,
    },
    AuthList(Vec<AuthListing>),
    Auth(AuthTable),
    StoreKek(Vec<u8>),
    KmsKeys(Vec<KmsKeyListing>),
    /// A data key of KMS key `key`: in the clear, and wrapped by `version` of it.
    DataKey {
        key: String,
        version: u32,
        plaintext: Vec<u8>,
        wrapped: Vec<u8>,
    },
    Status(Box<MonStatus>),
    /// Raft RPC reply; the body (JSON) is in the data segment.
    Raft,
    /// This monitor is not the leader; try `leader` (an address) if known.
    NotLeader {
        leader: Option<String>,
    },
    /// The caller lacks the capability.
    Denied(String),
    /// The request was invalid or could not be carried out.
    Failed(String),
    /// A data key wrapped again, by `version` of its KMS key. (Added last, so that the other
    /// replies keep their numbers on the wire.)
    Rewrapped {
        version: u32,
        wrapped: Vec<u8>,
    },
    /// A pool's data keys, in the clear: (key version, 32 bytes), oldest first.
    PoolKeys {
        keys: Vec<(u16, Vec<u8>)>,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KmsKeyListing {
    pub name: String,
    pub versions: u32,
    pub created_ns: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AuthListing {
    pub entity: String,
    pub caps: Caps,
}

/// Entities and their current certificates, as OSDs need them to authorise peers.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AuthTable {
    pub version: u64,
    pub entities: std::collections::BTreeMap<String, AuthEntry>,
}

impl AuthTable {
    /// What `entity`, proven by certificate `cert_der`, may do now: refused once the entity
    /// is removed or given a new key. Daemons ask at every request, not only when a link is
    /// accepted, so a removal stops its next request.
    pub fn caps_of(&self, entity: &str, cert_der: &[u8]) -> Result<Caps, String> {
        match self.entities.get(entity) {
            None => Err(format!("{entity} is not a known entity (or was removed)")),
            Some(entry) if entry.cert_der[..] != cert_der[..] => Err(format!(
                "{entity} presented a key that has been replaced or revoked"
            )),
            Some(entry) => Ok(entry.caps.clone()),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AuthEntry {
    pub cert_der: Vec<u8>,
    pub caps: Caps,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MonStatus {
    pub name: String,
    pub leader: Option<String>,
    pub monitors: Vec<MonMember>,
    pub epoch: Epoch,
    pub map: ClusterMap,
    /// Placement groups by state name; `unknown` for those whose primary has not reported.
    pub pgs: BTreeMap<String, u64>,
    /// The same, pool by pool.
    pub pool_pgs: Vec<(PoolId, String, u64)>,
    /// Each up OSD's space, from its last beacon.
    pub osd_usage: Vec<(OsdId, Usage)>,
    /// Why PGs are inactive, as their primaries say (one line per PG, a few at most).
    pub inactive: Vec<String>,
    pub used_bytes: u64,
    pub total_bytes: u64,
    /// Damaged copies each up OSD replaced on read since it started (none: left out).
    pub read_repairs: Vec<(OsdId, u64)>,
    pub health: Health,
    /// Each pool's usage, from the up OSDs' beacons (every pool of the map).
    pub pool_usage: Vec<(PoolId, PoolStats)>,
    /// Objects the up OSDs' recovery has found to copy and not copied yet.
    pub recovery_pending: u64,
    /// The up OSDs' read caches, summed.
    pub cache: CacheFigures,
}

/// One pool's usage, as `coffer df` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStats {
    /// Its objects, one copy each: the copies the up OSDs hold over the pool's size (so
    /// it reads low while copies are missing).
    pub objects: u64,
    /// The bytes of its objects, one copy each, counted as `objects` is.
    pub stored_bytes: u64,
    /// The store bytes all its copies take.
    pub used_bytes: u64,
    /// What more it can take, one copy each, before the first OSD it writes to is full.
    pub max_avail_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Health {
    Ok,
    Warn(Vec<String>),
    Err(Vec<String>),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MonMember {
    pub name: String,
    pub addr: String,
}
