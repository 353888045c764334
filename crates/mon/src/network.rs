//! Raft traffic between monitors, over the messenger. Bodies are openraft's own types in
//! JSON, in the frame's data segment.

// openraft's traits fix the error type, `RPCError`, at over 200 bytes.
#![allow(clippy::result_large_err)]

use std::time::Duration;

use bytes::Bytes;
use messenger::message::{MonReply, MonRequest, RaftRpc};
use messenger::{Connection, Endpoint, EntityName, Mode};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{MonNode, TypeConfig};

pub struct Network {
    pub endpoint: Endpoint,
    pub modes: Vec<Mode>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerLink;

    async fn new_client(&mut self, target: u64, node: &MonNode) -> PeerLink {
        PeerLink {
            endpoint: self.endpoint.clone(),
            modes: self.modes.clone(),
            target,
            node: node.clone(),
            conn: None,
        }
    }
}

pub struct PeerLink {
    endpoint: Endpoint,
    modes: Vec<Mode>,
    target: u64,
    node: MonNode,
    conn: Option<Connection>,
}

/// Why an RPC got no answer from the peer's raft.
enum Failure {
    /// Could not reach the peer: openraft backs off.
    Unreachable(String),
    /// Reached it, but the exchange failed.
    Network(String),
}

type RpcResult<T, E> = Result<T, RPCError<u64, MonNode, RaftError<u64, E>>>;

impl PeerLink {
    async fn connection(&mut self) -> Result<Connection, Failure> {
        if let Some(conn) = self.conn.as_ref().filter(|c| !c.is_closed()) {
            return Ok(conn.clone());
        }
        let entity: EntityName = self
            .node
            .name
            .parse()
            .map_err(|e| Failure::Unreachable(format!("{e}")))?;
        let addr = self
            .node
            .addr
            .parse()
            .map_err(|e| Failure::Unreachable(format!("{e}")))?;
        let conn = self
            .endpoint
            .connect(addr, &entity, &self.modes)
            .await
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        self.conn = Some(conn.clone());
        Ok(conn)
    }

    async fn rpc<Q: Serialize, R: DeserializeOwned>(
        &mut self,
        kind: RaftRpc,
        body: &Q,
        ttl: Duration,
    ) -> Result<R, Failure> {
        let conn = self.connection().await?;
        let body = serde_json::to_vec(body).map_err(|e| Failure::Network(e.to_string()))?;
        let request = MonRequest::Raft(kind);
        let call = conn.request::<_, MonReply>(&request, Bytes::from(body));
        let (reply, data) = match tokio::time::timeout(ttl, call).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                self.conn = None;
                return Err(Failure::Unreachable(e.to_string()));
            }
            Err(_) => return Err(Failure::Network(format!("no answer within {ttl:?}"))),
        };
        match reply {
            MonReply::Raft => {
                serde_json::from_slice(&data).map_err(|e| Failure::Network(e.to_string()))
            }
            other => Err(Failure::Network(format!("unexpected reply {other:?}"))),
        }
    }

    fn lift<T, E: std::error::Error>(
        &self,
        outcome: Result<Result<T, RaftError<u64, E>>, Failure>,
    ) -> RpcResult<T, E> {
        match outcome {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            Err(Failure::Unreachable(why)) => Err(RPCError::Unreachable(Unreachable::new(
                &std::io::Error::other(why),
            ))),
            Err(Failure::Network(why)) => Err(RPCError::Network(NetworkError::new(
                &std::io::Error::other(why),
            ))),
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerLink {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<u64>, openraft::error::Infallible> {
        let outcome = self
            .rpc(RaftRpc::AppendEntries, &rpc, option.hard_ttl())
            .await;
        self.lift(outcome)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<u64>, InstallSnapshotError> {
        let outcome = self
            .rpc(RaftRpc::InstallSnapshot, &rpc, option.hard_ttl())
            .await;
        self.lift(outcome)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<u64>, openraft::error::Infallible> {
        let outcome = self.rpc(RaftRpc::Vote, &rpc, option.hard_ttl()).await;
        self.lift(outcome)
    }
}
