//! What a monitor serves: maps and auth tables by epoch (held until they change), commands
//! (committed through raft on the leader), store keys to their OSDs, and raft traffic.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use map::auth::Caps;
use map::cluster::{Change, ClusterMap};
use map::placement::OsdId;
use messenger::message::{
    AuthEntry, AuthListing, AuthTable, Command, KmsKeyListing, MonMember, MonReply, MonRequest,
    MonStatus, RaftRpc, MAP_WAIT_MS_MAX,
};
use messenger::{
    CertificateDer, ClusterCa, EntityKind, EntityName, Handler, Mode, Peer, Reply, Request,
};
use openraft::error::{ClientWriteError, RaftError};
use openraft::Raft;
use tokio::sync::watch;

use crate::health::Liveness;
use crate::raft::Shared;
use crate::state::{Outcome, Proposal};
use crate::{MonNode, TypeConfig};

/// How long a command waits to be committed. Without a quorum it is not, and the caller is
/// told so (the change may still apply if the quorum comes back before the leader changes).
pub const COMMIT_TIMEOUT: Duration = Duration::from_millis(messenger::message::COMMIT_WAIT_MS_MAX);

pub struct MonService {
    pub name: EntityName,
    pub raft: Raft<TypeConfig>,
    pub shared: Arc<Shared>,
    pub members: Vec<MonMember>,
    pub liveness: Arc<Liveness>,
}

/// The watched value once `is_newer` holds for it, or the current value at once when there is
/// no condition or after [`MAP_WAIT_MS_MAX`] (the caller then asks again).
async fn held<T: Clone>(
    sender: &watch::Sender<Arc<T>>,
    is_newer: Option<impl Fn(&T) -> bool>,
) -> T {
    if let Some(is_newer) = is_newer {
        let mut watch = sender.subscribe();
        let wait = watch.wait_for(|value| is_newer(value));
        // A timeout is an answer too: the current value.
        let _ = tokio::time::timeout(Duration::from_millis(MAP_WAIT_MS_MAX), wait).await;
    }
    sender.borrow().as_ref().clone()
}

fn reply(message: MonReply) -> Reply {
    Reply::new(&message, Bytes::new())
}

impl Handler for MonService {
    type Grant = Caps;

    fn authorize(&self, entity: &EntityName, cert: &CertificateDer<'_>) -> Result<Caps, String> {
        if entity.kind() == EntityKind::Mon {
            // Monitors are fixed by configuration, and mon certificates are issued only at
            // bootstrap; the certificate chain (checked by TLS) is the proof.
            return Ok(Caps::admin());
        }
        self.shared
            .read(|state| match state.auth.entities.get(entity.as_str()) {
                None => Err(format!("{entity} is not a known entity (or was removed)")),
                Some(entry) if entry.cert_der[..] != cert[..] => Err(format!(
                    "{entity} presented a key that has been replaced or revoked"
                )),
                Some(entry) => Ok(entry.caps.clone()),
            })
    }

    async fn handle(&self, peer: Arc<Peer<Caps>>, request: Request) -> Reply {
        let message = match request.decode::<MonRequest>() {
            Ok(message) => message,
            Err(e) => return reply(MonReply::Failed(format!("undecodable request: {e}"))),
        };
        match message {
            MonRequest::GetMap { newer_than } => {
                if !peer.grant.mon_allows(false) {
                    return reply(MonReply::Denied("reading the map needs mon=r".into()));
                }
                let is_newer = newer_than.map(|e| move |map: &ClusterMap| map.epoch > e);
                let map = held(&self.shared.map, is_newer).await;
                reply(MonReply::Map(Box::new(map)))
            }
            MonRequest::GetAuth { newer_than } => {
                if !matches!(
                    peer.entity.kind(),
                    EntityKind::Osd | EntityKind::Mon | EntityKind::Mds
                ) {
                    return reply(MonReply::Denied("only daemons read the auth table".into()));
                }
                let is_newer = newer_than.map(|v| move |auth: &AuthTable| auth.version > v);
                let auth = held(&self.shared.auth, is_newer).await;
                reply(MonReply::Auth(auth))
            }
            MonRequest::GetStoreKek => {
                let answer = self.store_kek(&peer);
                crate::metrics::kms_request("store_key", &answer);
                reply(answer)
            }
            MonRequest::KmsGenerate { key } => {
                reply(self.kms(&peer, "generate", &key, true, |found| {
                    let (version, plaintext, wrapped) = crate::kms::generate(found, &key)?;
                    Ok(MonReply::DataKey {
                        key: key.clone(),
                        version,
                        plaintext: plaintext.expose().to_vec(),
                        wrapped: wrapped.as_bytes().to_vec(),
                    })
                }))
            }
            MonRequest::KmsDecrypt {
                key,
                version,
                wrapped,
            } => reply(self.kms(&peer, "decrypt", &key, true, |found| {
                let plaintext = crate::kms::decrypt(found, &key, version, &wrapped)?;
                Ok(MonReply::DataKey {
                    key: key.clone(),
                    version,
                    plaintext: plaintext.expose().to_vec(),
                    wrapped: wrapped.clone(),
                })
            })),
            MonRequest::KmsRewrap {
                key,
                version,
                wrapped,
            } => {
                // The leader holds every committed version, the newest included.
                if let Some(redirect) = self.not_leader().await {
                    crate::metrics::kms_request("rewrap", &redirect);
                    return reply(redirect);
                }
                reply(self.kms(&peer, "rewrap", &key, false, |found| {
                    let (version, wrapped) = crate::kms::rewrap(found, &key, version, &wrapped)?;
                    Ok(MonReply::Rewrapped {
                        version,
                        wrapped: wrapped.as_bytes().to_vec(),
                    })
                }))
            }
            MonRequest::Status => {
                if !peer.grant.mon_allows(false) {
                    return reply(MonReply::Denied("status needs mon=r".into()));
                }
                if let Some(redirect) = self.not_leader().await {
                    return reply(redirect);
                }
                reply(MonReply::Status(Box::new(self.status().await)))
            }
            MonRequest::Beacon(beacon) => {
                let id = match peer.entity.kind() {
                    EntityKind::Osd => peer.entity.id().parse::<u32>().ok(),
                    _ => None,
                };
                let Some(id) = id else {
                    return reply(MonReply::Denied("only OSDs send beacons".into()));
                };
                if let Some(redirect) = self.not_leader().await {
                    return reply(redirect);
                }
                self.liveness
                    .beacon(OsdId(id), beacon, std::time::Instant::now());
                reply(MonReply::Done {
                    epoch: self.shared.map.borrow().epoch,
                })
            }
            MonRequest::Command(command) => reply(self.command(&peer, command).await),
            MonRequest::PoolKeys { pool } => {
                let answer = self.pool_keys(&peer, pool);
                crate::metrics::kms_request("pool_keys", &answer);
                reply(answer)
            }
            MonRequest::Raft(kind) => {
                if peer.entity.kind() != EntityKind::Mon {
                    return reply(MonReply::Denied("raft traffic is for monitors only".into()));
                }
                self.raft_rpc(kind, &request.data).await
            }
        }
    }
}

/// A new version of KMS key `name` (its first unless `rotate`), made here on the leader.
fn kms_put(name: String, rotate: bool) -> Proposal {
    Proposal::KmsPut {
        name,
        material: keys::KeyEncryptionKey::generate().expose().to_vec(),
        rotate,
        created_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    }
}

impl MonService {
    /// Runs `serve` on KMS key `name`, for a peer with mon=rw; if the reply `releases` a
    /// data key in the clear, only over a secure link.
    fn kms(
        &self,
        peer: &Peer<Caps>,
        op: &'static str,
        name: &str,
        releases: bool,
        serve: impl FnOnce(&crate::state::KmsKey) -> Result<MonReply, String>,
    ) -> MonReply {
        let answer = self.kms_answer(peer, name, releases, serve);
        crate::metrics::kms_request(op, &answer);
        answer
    }

    fn kms_answer(
        &self,
        peer: &Peer<Caps>,
        name: &str,
        releases: bool,
        serve: impl FnOnce(&crate::state::KmsKey) -> Result<MonReply, String>,
    ) -> MonReply {
        if !peer.grant.mon_allows(true) {
            return MonReply::Denied(format!("{} needs mon=rw for data keys", peer.entity));
        }
        if releases && peer.mode != Mode::Secure {
            return MonReply::Denied("data keys are released only over a secure link".into());
        }
        if let Err(why) = crate::kms::check_not_pool_key(name) {
            return MonReply::Denied(why);
        }
        self.shared
            .read(|s| match s.kms.get(name) {
                Some(found) => serve(found),
                None => Err(format!("KMS key {name} does not exist")),
            })
            .unwrap_or_else(MonReply::Failed)
    }

    /// A pool's data keys, in the clear, for a client that may read the pool, over a secure
    /// link. Never to a daemon: OSDs store sealed chunks without the key
    /// (docs/design/edge-sealing.md).
    fn pool_keys(&self, peer: &Peer<Caps>, pool: map::PoolId) -> MonReply {
        if peer.entity.kind() != EntityKind::Client {
            return MonReply::Denied("pool keys are released only to clients".into());
        }
        if peer.mode != Mode::Secure {
            return MonReply::Denied("pool keys are released only over a secure link".into());
        }
        let found = self.shared.read(|s| {
            let info = s.map.pools.get(&pool)?.clone();
            let kms = s.kms.get(&crate::state::pool_kms_name(pool))?.clone();
            Some((info, kms, s.pool_keys.get(&pool)?.clone()))
        });
        let Some((info, kms, wrapped)) = found else {
            return MonReply::Failed(format!("pool {pool} is not sealed at the edge"));
        };
        if !peer.grant.osd_allows(&info.name, false) {
            return MonReply::Denied(format!("{} may not read pool {}", peer.entity, info.name));
        }
        let kms_name = crate::state::pool_kms_name(pool);
        let mut keys = Vec::with_capacity(wrapped.len());
        for (i, (version, wrapped)) in wrapped.iter().enumerate() {
            match crate::kms::decrypt(&kms, &kms_name, *version, wrapped) {
                Ok(key) => keys.push((i as u16 + 1, key.expose().to_vec())),
                Err(why) => return MonReply::Failed(why),
            }
        }
        MonReply::PoolKeys { keys }
    }

    fn store_kek(&self, peer: &Peer<Caps>) -> MonReply {
        if peer.entity.kind() != EntityKind::Osd {
            return MonReply::Denied("store keys are released only to their OSD".into());
        }
        if peer.mode != Mode::Secure {
            return MonReply::Denied("store keys are released only over a secure link".into());
        }
        let Ok(id) = peer.entity.id().parse::<u32>() else {
            return MonReply::Failed(format!("{} has no OSD number", peer.entity));
        };
        match self.shared.read(|s| s.store_keks.get(&OsdId(id)).cloned()) {
            Some(kek) => MonReply::StoreKek(kek),
            None => MonReply::Failed(format!("{} has no store key", peer.entity)),
        }
    }

    async fn status(&self) -> MonStatus {
        let leader = self.raft.current_leader().await;
        let map = self.shared.map.borrow().as_ref().clone();
        let summary = self.liveness.summary(&map);
        MonStatus {
            name: self.name.to_string(),
            leader: leader
                .and_then(|id| self.members.get(id as usize))
                .map(|m| m.name.clone()),
            monitors: self.members.clone(),
            epoch: map.epoch,
            map,
            pgs: summary.pgs,
            pool_pgs: summary
                .pool_pgs
                .into_iter()
                .map(|((pool, state), n)| (pool, state.to_string(), n))
                .collect(),
            osd_usage: summary.usage.into_iter().collect(),
            inactive: summary.inactive,
            used_bytes: summary.used_bytes,
            total_bytes: summary.total_bytes,
            read_repairs: summary.read_repairs,
            health: summary.health,
            pool_usage: summary.pool_usage.into_iter().collect(),
            recovery_pending: summary.recovery_pending,
            cache: summary.cache,
        }
    }

    async fn command(&self, peer: &Peer<Caps>, command: Command) -> MonReply {
        let is_boot = matches!(command, Command::OsdBoot { .. } | Command::MdsBoot { .. });
        if matches!(command, Command::OsdBoot { .. }) && peer.entity.kind() != EntityKind::Osd {
            return MonReply::Denied("only an OSD reports its own boot".into());
        }
        if matches!(command, Command::MdsBoot { .. }) && peer.entity.kind() != EntityKind::Mds {
            return MonReply::Denied("only a metadata daemon reports its own boot".into());
        }
        if !is_boot && !peer.grant.mon_allows(true) {
            return MonReply::Denied(format!(
                "{} needs mon=rw to change the cluster",
                peer.entity
            ));
        }
        if let Command::AuthList = command {
            let listing = self.shared.read(|s| {
                s.auth
                    .entities
                    .iter()
                    .map(|(entity, entry)| AuthListing {
                        entity: entity.clone(),
                        caps: entry.caps.clone(),
                    })
                    .collect()
            });
            return MonReply::AuthList(listing);
        }
        if let Command::KmsKeyList = command {
            let listing = self.shared.read(|s| {
                s.kms
                    .iter()
                    .map(|(name, key)| KmsKeyListing {
                        name: name.clone(),
                        versions: key.versions.len() as u32,
                        created_ns: key.created_ns,
                    })
                    .collect()
            });
            return MonReply::KmsKeys(listing);
        }
        if let Some(redirect) = self.not_leader().await {
            return redirect;
        }
        let (proposal, on_success) = match self.proposal(peer, command) {
            Ok(prepared) => prepared,
            Err(refusal) => return refusal,
        };
        match tokio::time::timeout(COMMIT_TIMEOUT, self.raft.client_write(proposal)).await {
            Err(_) => MonReply::Failed(format!(
                "not committed within {COMMIT_TIMEOUT:?}: no quorum of monitors (it may still \
                 apply if they return)"
            )),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
                MonReply::NotLeader {
                    leader: forward.leader_node.map(|n| n.addr),
                }
            }
            Ok(Err(e)) => MonReply::Failed(format!("not committed: {e}")),
            Ok(Ok(written)) => match written.data {
                Outcome::Refused(why) => MonReply::Failed(why),
                Outcome::Applied { epoch } => on_success.unwrap_or(MonReply::Done { epoch }),
            },
        }
    }

    async fn not_leader(&self) -> Option<MonReply> {
        let leader = self.raft.current_leader().await;
        let me = self
            .members
            .iter()
            .position(|m| m.name == self.name.as_str())
            .map(|i| i as u64);
        if leader.is_some() && leader == me {
            return None;
        }
        let addr = leader
            .and_then(|id| self.members.get(id as usize))
            .map(|m| m.addr.clone());
        Some(MonReply::NotLeader { leader: addr })
    }

    /// The log entry for a command, and the reply to give once it is committed (when it is
    /// not just `Done`). Keys and certificates are made here, on the leader, so that applying
    /// the entry is deterministic on every monitor.
    fn proposal(
        &self,
        peer: &Peer<Caps>,
        command: Command,
    ) -> Result<(Proposal, Option<MonReply>), MonReply> {
        let failed = |why: String| Err(MonReply::Failed(why));
        match command {
            Command::Change(change) => {
                if matches!(change, Change::AddOsd { .. }) {
                    return failed("add OSDs with osd create, which also makes their keys".into());
                }
                Ok((Proposal::Change(change), None))
            }
            Command::OsdBoot { addr } => {
                let Ok(id) = peer.entity.id().parse::<u32>() else {
                    return failed(format!("{} has no OSD number", peer.entity));
                };
                Ok((
                    Proposal::Change(Change::OsdBoot {
                        id: OsdId(id),
                        addr,
                    }),
                    None,
                ))
            }
            Command::MdsBoot { fs, addr, instance } => Ok((
                Proposal::Change(Change::MdsBoot {
                    fs,
                    name: peer.entity.to_string(),
                    addr,
                    instance,
                }),
                None,
            )),
            Command::AuthAdd { entity, caps } => {
                let name: EntityName = entity
                    .parse()
                    .map_err(|e| MonReply::Failed(format!("{e}")))?;
                if !matches!(name.kind(), EntityKind::Client | EntityKind::Mds) {
                    return failed(
                        "auth add creates client.* and mds.* entities; OSDs come from osd create"
                            .into(),
                    );
                }
                if self.shared.read(|s| s.auth.entities.contains_key(&entity)) {
                    return failed(format!(
                        "{entity} already exists; remove it first to replace its key"
                    ));
                }
                let identity = self
                    .authority()?
                    .issue(&name)
                    .map_err(|e| MonReply::Failed(e.to_string()))?;
                let entry = AuthEntry {
                    cert_der: identity.cert().to_vec(),
                    caps,
                };
                let keyring = MonReply::Keyring {
                    entity: entity.clone(),
                    pem: identity.to_pem(),
                };
                Ok((Proposal::AuthPut { entity, entry }, Some(keyring)))
            }
            Command::AuthRemove { entity } => {
                if entity == peer.entity.as_str() {
                    return failed("an entity cannot remove itself".into());
                }
                Ok((Proposal::AuthRemove { entity }, None))
            }
            Command::OsdCreate { host, weight } => {
                let id = self.shared.read(|s| s.map.next_osd_id());
                let identity = self
                    .authority()?
                    .issue(&EntityName::osd(id.0))
                    .map_err(|e| MonReply::Failed(e.to_string()))?;
                let kek = keys::KeyEncryptionKey::generate().expose().to_vec();
                let created = MonReply::OsdCreated {
                    id,
                    pem: identity.to_pem(),
                };
                let proposal = Proposal::OsdCreate {
                    id,
                    host,
                    weight,
                    cert_der: identity.cert().to_vec(),
                    kek,
                };
                Ok((proposal, Some(created)))
            }
            Command::KmsKeyCreate { name } => {
                crate::kms::check_name(&name).map_err(MonReply::Failed)?;
                Ok((kms_put(name, false), None))
            }
            Command::KmsKeyRotate { name } => {
                crate::kms::check_not_pool_key(&name).map_err(MonReply::Failed)?;
                Ok((kms_put(name, true), None))
            }
            Command::KmsKeyRemove { name } => {
                crate::kms::check_not_pool_key(&name).map_err(MonReply::Failed)?;
                Ok((Proposal::KmsRemove { name }, None))
            }
            Command::PoolCreateEdge { change } => {
                if !matches!(change, Change::CreatePool { .. }) {
                    return failed("pool create --seal edge takes a CreatePool change".into());
                }
                let id = self.shared.read(|s| s.map.next_pool_id());
                let name = crate::state::pool_kms_name(id);
                let Proposal::KmsPut {
                    material,
                    created_ns,
                    ..
                } = kms_put(name.clone(), false)
                else {
                    unreachable!("kms_put makes a KmsPut");
                };
                let key = crate::state::KmsKey {
                    versions: vec![material.clone()],
                    created_ns,
                };
                let (_, _, wrapped) =
                    crate::kms::generate(&key, &name).map_err(MonReply::Failed)?;
                let proposal = Proposal::PoolEdgeCreate {
                    change,
                    id,
                    material,
                    wrapped: wrapped.as_bytes().to_vec(),
                    created_ns,
                };
                Ok((proposal, None))
            }
            Command::PoolRotateKey { name } => {
                let found = self.shared.read(|s| {
                    let pool = s.map.pool_by_name(&name)?;
                    let kms = s.kms.get(&crate::state::pool_kms_name(pool.id))?;
                    let keys = s.pool_keys.get(&pool.id)?;
                    Some((pool.id, kms.clone(), keys.clone()))
                });
                let Some((id, mut kms, keys)) = found else {
                    return failed(format!(
                        "pool {name} does not exist or is not sealed at the edge"
                    ));
                };
                let kms_name = crate::state::pool_kms_name(id);
                let material = keys::KeyEncryptionKey::generate().expose().to_vec();
                kms.versions.push(material.clone());
                let mut rewrapped = Vec::with_capacity(keys.len() + 1);
                for (version, wrapped) in keys {
                    let (version, wrapped) = crate::kms::rewrap(&kms, &kms_name, version, &wrapped)
                        .map_err(MonReply::Failed)?;
                    rewrapped.push((version, wrapped.as_bytes().to_vec()));
                }
                let (version, _, wrapped) =
                    crate::kms::generate(&kms, &kms_name).map_err(MonReply::Failed)?;
                rewrapped.push((version, wrapped.as_bytes().to_vec()));
                let proposal = Proposal::PoolKeyRotate {
                    id,
                    material,
                    keys: rewrapped,
                };
                Ok((proposal, None))
            }
            Command::AuthList | Command::KmsKeyList => unreachable!("served without a proposal"),
        }
    }

    fn authority(&self) -> Result<ClusterCa, MonReply> {
        let (fsid, key, cert) = self
            .shared
            .read(|s| (s.fsid.clone(), s.ca_key_pem.clone(), s.ca_cert_pem.clone()));
        if fsid.is_empty() {
            return Err(MonReply::Failed(
                "the cluster is not bootstrapped yet".into(),
            ));
        }
        ClusterCa::from_pem(&fsid, &key, &cert).map_err(|e| MonReply::Failed(e.to_string()))
    }

    async fn raft_rpc(&self, kind: RaftRpc, body: &[u8]) -> Reply {
        let answer = match kind {
            RaftRpc::AppendEntries => match serde_json::from_slice(body) {
                Ok(rpc) => serde_json::to_vec(&self.raft.append_entries(rpc).await),
                Err(e) => return reply(MonReply::Failed(format!("bad raft body: {e}"))),
            },
            RaftRpc::Vote => match serde_json::from_slice(body) {
                Ok(rpc) => serde_json::to_vec(&self.raft.vote(rpc).await),
                Err(e) => return reply(MonReply::Failed(format!("bad raft body: {e}"))),
            },
            RaftRpc::InstallSnapshot => match serde_json::from_slice(body) {
                Ok(rpc) => serde_json::to_vec(&self.raft.install_snapshot(rpc).await),
                Err(e) => return reply(MonReply::Failed(format!("bad raft body: {e}"))),
            },
        };
        match answer {
            Ok(bytes) => Reply::new(&MonReply::Raft, Bytes::from(bytes)),
            Err(e) => reply(MonReply::Failed(format!("encoding a raft reply: {e}"))),
        }
    }
}

/// The monitor node openraft knows, from its member entry.
pub fn node_of(member: &MonMember) -> MonNode {
    MonNode {
        name: member.name.clone(),
        addr: member.addr.clone(),
    }
}
