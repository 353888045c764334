//! The typed requests and replies between Coffer's processes. The metadata segment of a
//! frame carries one of these (postcard); bulk bytes travel in the data segment.

use map::auth::Caps;
use map::cluster::{Change, ClusterMap, Epoch};
use map::placement::OsdId;
use serde::{Deserialize, Serialize};

/// A request to a monitor.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum MonRequest {
    /// The cluster map: at once with `newer_than: None`; otherwise once its epoch is above
    /// `newer_than`, the monitor holding the request until then or until [`MAP_WAIT_MS_MAX`]
    /// passes (then it answers with what it has).
    GetMap {
        newer_than: Option<Epoch>,
    },
    /// A change to the cluster; served by the raft leader.
    Command(Command),
    /// Raft traffic between monitors; the body (JSON) is in the data segment.
    Raft(RaftRpc),
    /// An OSD asks for the key that unwraps its store's key (secure links only).
    GetStoreKek,
    /// The auth table for an OSD, held like `GetMap`.
    GetAuth {
        newer_than: Option<u64>,
    },
    Status,
}

/// How long a monitor holds a map or auth request before answering with what it has.
pub const MAP_WAIT_MS_MAX: u64 = 20_000;

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
    Status(MonStatus),
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
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MonMember {
    pub name: String,
    pub addr: String,
}
