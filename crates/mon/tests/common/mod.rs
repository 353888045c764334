//! Monitors on loopback, each with its own data directory, that a test can stop and start.

use std::net::SocketAddr;

use coffer_mon::{MonConfig, Monitor, Seed};
use map::auth::Caps;
use map::cluster::Change;
use map::placement::FailureDomain;
use messenger::message::{AuthEntry, Command, MonMember};
use messenger::{ClusterCa, Endpoint, EntityName, Identity, Limits, Mode, MonAddr, MonClient};
use tokio::net::TcpListener;

pub const FSID: &str = "test-cluster";

pub struct Harness {
    pub ca: ClusterCa,
    pub dir: tempfile::TempDir,
    pub members: Vec<MonMember>,
    keyrings: Vec<String>,
    pub mons: Vec<Option<Monitor>>,
    pub admin_pem: String,
}

/// The command that creates pool `name` (size 1, so it needs no OSDs to be meaningful).
pub fn pool(name: &str) -> Command {
    Command::Change(Change::CreatePool {
        name: name.into(),
        size: 1,
        min_size: 1,
        pg_num: 8,
        domain: FailureDomain::Osd,
        erasure: None,
    })
}

pub fn name(text: &str) -> EntityName {
    text.parse().expect("entity name")
}

impl Harness {
    /// `count` monitors, started and bootstrapped (by rank 0) with a `client.admin`.
    pub async fn start(count: usize) -> Harness {
        let ca = ClusterCa::generate(FSID).expect("authority");
        let mut listeners = Vec::new();
        let mut members = Vec::new();
        let mut keyrings = Vec::new();
        for rank in 0..count {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let entity = format!("mon.{}", (b'a' + rank as u8) as char);
            members.push(MonMember {
                name: entity.clone(),
                addr: listener.local_addr().expect("addr").to_string(),
            });
            keyrings.push(ca.issue(&name(&entity)).expect("issue").to_pem());
            listeners.push(listener);
        }
        let admin = ca.issue(&name("client.admin")).expect("issue");
        let mut harness = Harness {
            dir: tempfile::tempdir().expect("tempdir"),
            admin_pem: admin.to_pem(),
            ca,
            members,
            keyrings,
            mons: Vec::new(),
        };
        for (rank, listener) in listeners.into_iter().enumerate() {
            let mon = harness.launch(rank, listener).await;
            harness.mons.push(Some(mon));
        }
        let seed = Seed {
            fsid: FSID.into(),
            ca_key_pem: harness.ca.key_pem(),
            ca_cert_pem: harness.ca.cert_pem(),
            entities: vec![(
                "client.admin".into(),
                AuthEntry {
                    cert_der: admin.cert().to_vec(),
                    caps: Caps::admin(),
                },
            )],
        };
        harness.mons[0]
            .as_ref()
            .expect("rank 0")
            .bootstrap(seed)
            .await
            .expect("bootstrap");
        harness
    }

    async fn launch(&self, rank: usize, listener: TcpListener) -> Monitor {
        let identity = Identity::from_pem(name(&self.members[rank].name), &self.keyrings[rank])
            .expect("keyring");
        let config = MonConfig {
            rank: rank as u64,
            data_dir: self.dir.path().join(&self.members[rank].name),
            monitors: self.members.clone(),
            modes: vec![Mode::Secure, Mode::Crc],
            timeouts: Default::default(),
        };
        Monitor::start(&identity, config, listener)
            .await
            .expect("monitor starts")
    }

    /// Stops monitor `rank` as a crash would leave it: its database as last committed.
    pub async fn stop(&mut self, rank: usize) {
        if let Some(mon) = self.mons[rank].take() {
            mon.shutdown().await;
        }
    }

    /// Starts monitor `rank` again from its data directory, on its old address.
    pub async fn restart(&mut self, rank: usize) {
        let addr: SocketAddr = self.members[rank].addr.parse().expect("addr");
        let listener = TcpListener::bind(addr).await.expect("rebind");
        let mon = self.launch(rank, listener).await;
        self.mons[rank] = Some(mon);
    }

    pub fn mon_addrs(&self) -> Vec<MonAddr> {
        self.members
            .iter()
            .map(|m| MonAddr {
                entity: name(&m.name),
                addr: m.addr.parse().expect("addr"),
            })
            .collect()
    }

    /// A monitor client for the entity whose keyring is `pem`.
    pub fn client(&self, entity: &str, pem: &str, modes: Vec<Mode>) -> MonClient {
        let identity = Identity::from_pem(name(entity), pem).expect("keyring");
        let endpoint = Endpoint::new(&identity, Limits::default()).expect("endpoint");
        MonClient::new(endpoint, self.mon_addrs(), modes)
    }

    pub fn admin(&self) -> MonClient {
        self.client("client.admin", &self.admin_pem, vec![Mode::Secure])
    }
}
