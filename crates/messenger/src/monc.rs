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
/// How long a monitor may take to answer a request it does not hold back. Past it the link
/// counts as lost and the next monitor is asked: a monitor whose host was cut off answers
/// nothing, and TCP would wait many minutes to say so.
const MON_ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `request`'s answer may take: requests for a newer map or auth table are held
/// by the monitor until there is one, or for [`crate::message::MAP_WAIT_MS_MAX`].
fn answer_timeout(request: &MonRequest) -> Duration {
    match request {
        MonRequest::GetMap {
            newer_than: Some(_),
        }
        | MonRequest::GetAuth {
            newer_than: Some(_),
        } => MON_ANSWER_TIMEOUT + Duration::from_millis(crate::message::MAP_WAIT_MS_MAX),
        _ => MON_ANSWER_TIMEOUT,
    }
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

    /// Drops the link to monitor `index`, if it is the current one: it stopped answering.
    async fn forget(&self, index: usize) {
        let mut link = self.link.lock().await;
        if link.as_ref().is_some_and(|(current, _)| *current == index) {
            *link = None;
        }
    }

    /// Sends `request` to a monitor that can serve it: the current one, else the next, and for
    /// commands the leader. Retries through elections and restarts for [`MON_RETRY_TIMEOUT`].
    pub async fn call(&self, request: &MonRequest) -> Result<MonReply, MonError> {
        let deadline = tokio::time::Instant::now() + MON_RETRY_TIMEOUT;
        let mut index = self.link.lock().await.as_ref().map_or(0, |(i, _)| *i);
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
                            self.forget(index).await;
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
