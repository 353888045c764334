//! What the monitors agree on, and how each committed proposal changes it. Pure: the same
//! proposals in the same order give the same state on every monitor.

use std::collections::BTreeMap;

use map::auth::Caps;
use map::cluster::{Change, ClusterMap, Epoch, Seal};
use map::placement::OsdId;
use map::PoolId;
use messenger::message::{AuthEntry, AuthTable};
use serde::{Deserialize, Serialize};

/// The replicated state. It holds the cluster authority's key and every OSD's store
/// key-encryption key, so a monitor's data directory is the cluster's root of trust
/// (docs/design/monitors.md).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MonState {
    pub fsid: String,
    pub ca_key_pem: String,
    pub ca_cert_pem: String,
    pub map: ClusterMap,
    pub auth: AuthTable,
    pub store_keks: BTreeMap<OsdId, Vec<u8>>,
    /// The built-in KMS: each key's versions (32 bytes each, the newest last).
    #[serde(default)]
    pub kms: BTreeMap<String, KmsKey>,
    /// The data keys of pools sealed at the edge, oldest (key 1) first, each wrapped by the
    /// version (the number beside it) of the pool's KMS key `pool.<id>`.
    #[serde(default)]
    pub pool_keys: BTreeMap<PoolId, Vec<(u32, Vec<u8>)>>,
}

/// The KMS key that wraps the data keys of pool `id` (a name the KMS commands refuse).
pub fn pool_kms_name(id: PoolId) -> String {
    format!("{}{}", crate::kms::POOL_KEY_PREFIX, id.0)
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct KmsKey {
    pub versions: Vec<Vec<u8>>,
    pub created_ns: u64,
}

/// One entry of the replicated log.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Proposal {
    Bootstrap {
        fsid: String,
        ca_key_pem: String,
        ca_cert_pem: String,
        entities: Vec<(String, AuthEntry)>,
    },
    Change(Change),
    AuthPut {
        entity: String,
        entry: AuthEntry,
    },
    AuthRemove {
        entity: String,
    },
    OsdCreate {
        id: OsdId,
        host: String,
        weight: u32,
        cert_der: Vec<u8>,
        kek: Vec<u8>,
    },
    /// Creates KMS key `name` with its first version, or adds a version (`rotate`).
    KmsPut {
        name: String,
        material: Vec<u8>,
        rotate: bool,
        created_ns: u64,
    },
    KmsRemove {
        name: String,
    },
    /// Creates pool `id` (`change`, a `CreatePool`) sealed at the edge: its KMS key (first
    /// version `material`) and its first data key, `wrapped` by that version.
    PoolEdgeCreate {
        change: Change,
        id: PoolId,
        material: Vec<u8>,
        wrapped: Vec<u8>,
        created_ns: u64,
    },
    /// Pool `id`'s KMS key gets version `material`; `keys` are all of the pool's data keys,
    /// every one wrapped by that version, the last one new: new writes use it.
    PoolKeyRotate {
        id: PoolId,
        material: Vec<u8>,
        keys: Vec<(u32, Vec<u8>)>,
    },
}

/// What applying a proposal did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Applied { epoch: Epoch },
    Refused(String),
}

/// The capabilities every OSD gets: read the map, read and write objects.
pub fn osd_caps() -> Caps {
    Caps::parse("mon=r osd=rw").unwrap_or_else(|e| unreachable!("constant caps parse: {e}"))
}

impl MonState {
    pub fn apply(&mut self, proposal: &Proposal) -> Outcome {
        let refused = |why: String| Outcome::Refused(why);
        match proposal {
            Proposal::Bootstrap {
                fsid,
                ca_key_pem,
                ca_cert_pem,
                entities,
            } => {
                if !self.fsid.is_empty() {
                    return refused(format!("the cluster {} is already bootstrapped", self.fsid));
                }
                self.fsid = fsid.clone();
                self.ca_key_pem = ca_key_pem.clone();
                self.ca_cert_pem = ca_cert_pem.clone();
                for (entity, entry) in entities {
                    self.auth.entities.insert(entity.clone(), entry.clone());
                }
                self.auth.version += 1;
            }
            Proposal::Change(change) => {
                let removed = match change {
                    Change::RemovePool { name } => self.map.pool_by_name(name).map(|p| p.id),
                    _ => None,
                };
                if let Err(e) = self.map.apply(change) {
                    return refused(e.to_string());
                }
                // A removed pool's keys go with it: what it held can no longer be opened.
                if let Some(id) = removed {
                    self.pool_keys.remove(&id);
                    self.kms.remove(&pool_kms_name(id));
                }
            }
            Proposal::PoolEdgeCreate {
                change,
                id,
                material,
                wrapped,
                created_ns,
            } => {
                if self.map.next_pool_id() != *id {
                    return refused("another pool was created meanwhile; try again".into());
                }
                if let Err(e) = self.map.apply(change) {
                    return refused(e.to_string());
                }
                if let Err(e) = self.map.set_seal(*id, Seal::Edge { key: 1 }) {
                    return refused(e.to_string());
                }
                let key = KmsKey {
                    versions: vec![material.clone()],
                    created_ns: *created_ns,
                };
                self.kms.insert(pool_kms_name(*id), key);
                self.pool_keys.insert(*id, vec![(1, wrapped.clone())]);
            }
            Proposal::PoolKeyRotate { id, material, keys } => {
                let current = self.pool_keys.get(id).map_or(0, Vec::len);
                let Some(kms) = self.kms.get_mut(&pool_kms_name(*id)) else {
                    return refused(format!("pool {id} has no KMS key"));
                };
                if keys.len() != current + 1 {
                    return refused("the pool's keys changed meanwhile; try again".into());
                }
                // Version 65535 stays unused: its key ids would reach `OWN_KEY_ID`.
                if keys.len() >= usize::from(u16::MAX) {
                    return refused(format!(
                        "pool {id} has used all {} data key versions",
                        u16::MAX - 1
                    ));
                }
                kms.versions.push(material.clone());
                self.pool_keys.insert(*id, keys.clone());
                let seal = Seal::Edge {
                    key: keys.len() as u16,
                };
                if let Err(e) = self.map.set_seal(*id, seal) {
                    return refused(e.to_string());
                }
            }
            Proposal::AuthPut { entity, entry } => {
                self.auth.entities.insert(entity.clone(), entry.clone());
                self.auth.version += 1;
            }
            Proposal::AuthRemove { entity } => {
                if self.auth.entities.remove(entity).is_none() {
                    return refused(format!("{entity} does not exist"));
                }
                self.auth.version += 1;
            }
            Proposal::OsdCreate {
                id,
                host,
                weight,
                cert_der,
                kek,
            } => {
                let add = Change::AddOsd {
                    id: *id,
                    host: host.clone(),
                    weight: *weight,
                };
                if let Err(e) = self.map.apply(&add) {
                    return refused(e.to_string());
                }
                let entry = AuthEntry {
                    cert_der: cert_der.clone(),
                    caps: osd_caps(),
                };
                self.auth.entities.insert(format!("osd.{}", id.0), entry);
                self.auth.version += 1;
                self.store_keks.insert(*id, kek.clone());
            }
            Proposal::KmsPut {
                name,
                material,
                rotate,
                created_ns,
            } => match (self.kms.get_mut(name), rotate) {
                (Some(key), true) => key.versions.push(material.clone()),
                (None, false) => {
                    let key = KmsKey {
                        versions: vec![material.clone()],
                        created_ns: *created_ns,
                    };
                    self.kms.insert(name.clone(), key);
                }
                (Some(_), false) => return refused(format!("KMS key {name} exists")),
                (None, true) => return refused(format!("KMS key {name} does not exist")),
            },
            Proposal::KmsRemove { name } => {
                if self.kms.remove(name).is_none() {
                    return refused(format!("KMS key {name} does not exist"));
                }
            }
        }
        Outcome::Applied {
            epoch: self.map.epoch,
        }
    }
}
