//! Talking to the monitors: find one that answers, follow the leader for commands, and
//! wait for new maps by epoch.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use map::cluster::{ClusterMap, Epoch};
use tokio::sync::Mutex;

use crate::conn::Connection;
use crate::endpoint::Endpoint;
use crate::entity::{EntityName, Mode};
use crate::error::ConnectError;
use crate::message::{Command, MonReply, MonRequest};

/// How long a request keeps trying monitors (elections, restarts) before giving up.
pub const MON_RETRY_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between rounds over all monitors.
const MON_RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How long a monitor may take to answer beyond what the request itself lets it wait. Past
/// it the link counts as lost (closed, with every call waiting on it) and the next monitor
/// is asked: a monitor whose host was cut off answers nothing, and TCP would wait many
/// minutes to say so. A beacon stuck longer would get a live OSD marked down.
const MON_ANSWER_TIMEOUT: Duration = Duration::from_secs(4);

/// How long `request`'s answer may take: requests for a newer map or auth table are held
/// by the monitor until there is one, or for [`crate::message::MAP_WAIT_MS_MAX`]; a command
/// may wait [`crate::message::COMMIT_WAIT_MS_MAX`] to commit, and must not be sent again
/// while it still may.
fn answer_timeout(request: &MonRequest) -> Duration {
    let held_ms = match request {
        MonRequest::GetMap {
            newer_than: Some(_),
        }
        | MonRequest::GetAuth {
            newer_than: Some(_),
        } => crate::message::MAP_WAIT_MS_MAX,
        MonRequest::Command(_) => crate::message::COMMIT_WAIT_MS_MAX,
        _ => 0,
    };
    MON_ANSWER_TIMEOUT + Duration::from_millis(held_ms)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonAddr {
    pub entity: EntityName,
    pub addr: SocketAddr,
}

#[derive(Debug, thiserror::Error)]
pub enum MonError {
    #[error("no monitor answered within {timeout:?} (last error: {last})")]
    Unreachable { timeout: Duration, last: String },
    #[error("permission denied: {0}")]
    Denied(String),
    #[error("{0}")]
    Failed(String),
    #[error("unexpected reply from the monitor: {0}")]
    Unexpected(String),
}

/// Whether a TLS handshake failed over a certificate (ours rejected, or theirs), which
/// retrying cannot fix, rather than over a lost connection.
fn is_certificate_rejection(e: &std::io::Error) -> bool {
    use rustls::AlertDescription as Alert;
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(_)) => true,
        Some(rustls::Error::AlertReceived(alert)) => matches!(
            alert,
            Alert::BadCertificate
                | Alert::UnknownCA
                | Alert::CertificateUnknown
                | Alert::CertificateRevoked
                | Alert::CertificateExpired
                | Alert::CertificateRequired
                | Alert::AccessDenied
        ),
        _ => false,
    }
}

/// Why one attempt failed: a monitor refused this entity (every monitor refusing ends the
/// call; one alone may just lag behind an `auth add`), or anything else (retried).
enum Failure {
    Refused(String),
    Other(String),
}

pub struct MonClient {
    endpoint: Endpoint,
    mons: Vec<MonAddr>,
    modes: Vec<Mode>,
    link: Mutex<Option<(usize, Connection)>>,
}

impl MonClient {
    pub fn new(endpoint: Endpoint, mons: Vec<MonAddr>, modes: Vec<Mode>) -> Self {
        assert!(
            !mons.is_empty(),
            "a monitor client needs at least one monitor"
        );
        MonClient {
            endpoint,
            mons,
            modes,
            link: Mutex::new(None),
        }
    }

    async fn connection(&self, index: usize) -> Result<Connection, Failure> {
        let mut link = self.link.lock().await;
        if let Some((current, conn)) = link.as_ref() {
            if *current == index && !conn.is_closed() {
                return Ok(conn.clone());
            }
        }
        let mon = &self.mons[index];
        let conn = match self
            .endpoint
            .connect(mon.addr, &mon.entity, &self.modes)
            .await
        {
            Ok(conn) => conn,
            Err(ConnectError::Refused(why)) => return Err(Failure::Refused(why)),
            Err(ConnectError::Tls(e)) if is_certificate_rejection(&e) => {
                return Err(Failure::Refused(format!("{}: {e}", mon.entity)))
            }
            Err(e) => return Err(Failure::Other(format!("{}: {e}", mon.entity))),
        };
        *link = Some((index, conn.clone()));
        Ok(conn)
    }

    /// The monitor of the live link, if there is one; else connects to every monitor at once
    /// and keeps the first link made (as Ceph's monitor client hunts), so that a monitor whose
    /// host is down costs a new client nothing. None if no monitor could be reached; the
    /// caller then goes through them one by one, for their errors.
    async fn current_or_hunt(&self) -> Option<usize> {
        // Held through the hunt: calls made meanwhile wait for its link, not hunt again.
        let mut link = self.link.lock().await;
        if let Some((current, conn)) = link.as_ref() {
            if !conn.is_closed() {
                return Some(*current);
            }
        }
        let mut attempts = tokio::task::JoinSet::new();
        for (index, mon) in self.mons.iter().enumerate() {
            let (endpoint, mon, modes) = (self.endpoint.clone(), mon.clone(), self.modes.clone());
            attempts.spawn(async move {
                let made = endpoint.connect(mon.addr, &mon.entity, &modes).await;
                (index, made)
            });
        }
        while let Some(joined) = attempts.join_next().await {
            if let Ok((index, Ok(conn))) = joined {
                *link = Some((index, conn));
                return Some(index);
            }
        }
        None
    }

    /// Drops and closes the link to monitor `index`, if it is the current one: it gave no
    /// answer within `waited`. Other calls waiting on it (a held map request) fail at once
    /// and go to another monitor.
    async fn forget(&self, index: usize, waited: Duration) {
        let mut link = self.link.lock().await;
        if link.as_ref().is_some_and(|(current, _)| *current == index) {
            if let Some((_, conn)) = link.take() {
                conn.close(&format!("no answer within {waited:?}"));
            }
        }
    }

    /// Sends `request` to a monitor that can serve it: the current one, else the next, and for
    /// commands the leader. Retries through elections and restarts for [`MON_RETRY_TIMEOUT`].
    pub async fn call(&self, request: &MonRequest) -> Result<MonReply, MonError> {
        let deadline = tokio::time::Instant::now() + MON_RETRY_TIMEOUT;
        let mut index = self.current_or_hunt().await.unwrap_or(0);
        let mut tried_in_round = 0;
        let mut refused_in_round = 0;
        loop {
            let outcome = match self.connection(index).await {
                Ok(conn) => {
                    let timeout = answer_timeout(request);
                    let answer = conn.request::<_, MonReply>(request, Bytes::new());
                    match tokio::time::timeout(timeout, answer).await {
                        Ok(answer) => answer.map(|(reply, _)| reply).map_err(|e| {
                            Failure::Other(format!("{}: {e}", self.mons[index].entity))
                        }),
                        Err(_) => {
                            self.forget(index, timeout).await;
                            Err(Failure::Other(format!(
                                "{}: no answer within {timeout:?}",
                                self.mons[index].entity
                            )))
                        }
                    }
                }
                Err(e) => Err(e),
            };
            let last = match outcome {
                Ok(MonReply::NotLeader { leader }) => {
                    let last = format!("{} is not the leader", self.mons[index].entity);
                    let known = leader
                        .and_then(|addr| self.mons.iter().position(|m| m.addr.to_string() == addr));
                    index = known.unwrap_or((index + 1) % self.mons.len());
                    last
                }
                Ok(reply) => return Ok(reply),
                Err(Failure::Refused(why)) => {
                    refused_in_round += 1;
                    if refused_in_round == self.mons.len() {
                        return Err(MonError::Denied(why));
                    }
                    index = (index + 1) % self.mons.len();
                    why
                }
                Err(Failure::Other(e)) => {
                    index = (index + 1) % self.mons.len();
                    e
                }
            };
            tried_in_round += 1;
            if tokio::time::Instant::now() >= deadline {
                return Err(MonError::Unreachable {
                    timeout: MON_RETRY_TIMEOUT,
                    last,
                });
            }
            if tried_in_round >= self.mons.len() {
                tried_in_round = 0;
                refused_in_round = 0;
                tokio::time::sleep(MON_RETRY_PAUSE).await;
            }
        }
    }

    /// A command, committed by the leader; refusals come back as errors.
    pub async fn command(&self, command: Command) -> Result<MonReply, MonError> {
        match self.call(&MonRequest::Command(command)).await? {
            MonReply::Denied(why) => Err(MonError::Denied(why)),
            MonReply::Failed(why) => Err(MonError::Failed(why)),
            reply => Ok(reply),
        }
    }

    /// The current map.
    pub async fn map(&self) -> Result<ClusterMap, MonError> {
        self.get_map(None).await
    }

    /// The map at an epoch above `newer_than`, as soon as there is one; after
    /// [`crate::message::MAP_WAIT_MS_MAX`] without a change, the current map.
    pub async fn map_after(&self, newer_than: Epoch) -> Result<ClusterMap, MonError> {
        self.get_map(Some(newer_than)).await
    }

    async fn get_map(&self, newer_than: Option<Epoch>) -> Result<ClusterMap, MonError> {
        match self.call(&MonRequest::GetMap { newer_than }).await? {
            MonReply::Map(map) => Ok(*map),
            MonReply::Denied(why) => Err(MonError::Denied(why)),
            other => Err(MonError::Unexpected(format!("{other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::CertificateDer;
    use tokio::net::TcpListener;

    use super::*;
    use crate::{ClusterCa, Handler, Limits, Peer, Reply, Request};

    /// A monitor that answers every request with an empty map of epoch 7.
    struct Answering;

    impl Handler for Answering {
        type Grant = ();

        fn authorize(&self, _: &EntityName, _: &CertificateDer<'_>) -> Result<(), String> {
            Ok(())
        }

        async fn handle(&self, _: Arc<Peer<()>>, _: Request) -> Reply {
            let mut map = ClusterMap::default();
            map.epoch = 7;
            Reply::new(&MonReply::Map(Box::new(map)), Bytes::new())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_reaches_a_live_monitor_past_one_that_never_answers() {
        let ca = ClusterCa::generate("test-cluster").expect("authority");
        let limits = Limits {
            // Long enough that going through the monitors in turn would outlast the test.
            handshake_timeout: Duration::from_secs(600),
            ..Limits::default()
        };
        let name = |text: &str| text.parse::<EntityName>().expect("a name");
        let live_identity = ca.issue(&name("mon.b")).expect("issue");
        let live = Endpoint::new(&live_identity, limits)
            .expect("endpoint")
            .serve(
                TcpListener::bind("127.0.0.1:0").await.expect("bind"),
                vec![Mode::Secure],
                Arc::new(Answering),
            )
            .expect("serve");
        // Accepts connections and never says a word: a host that is there but hung.
        let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let silent_addr = silent.local_addr().expect("addr");
        let _held = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = silent.accept().await {
                held.push(stream);
            }
        });
        let client = Endpoint::new(&ca.issue(&name("client.admin")).expect("issue"), limits)
            .expect("endpoint");
        let mons = vec![
            MonAddr {
                entity: name("mon.a"),
                addr: silent_addr,
            },
            MonAddr {
                entity: name("mon.b"),
                addr: live.local_addr(),
            },
        ];
        let monc = MonClient::new(client, mons, vec![Mode::Secure]);
        let map = tokio::time::timeout(Duration::from_secs(20), monc.map())
            .await
            .expect("an answer from the live monitor")
            .expect("a map");
        assert_eq!(map.epoch, 7);
    }
}
