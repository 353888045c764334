//! openraft's storage for a monitor: the log, the vote and the applied state, in one redb
//! database in the monitor's data directory. Every write is committed durably (fsync)
//! before openraft is told it happened.

// openraft's traits fix the error type, `StorageError`, at over 200 bytes.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use map::cluster::ClusterMap;
use messenger::message::AuthTable;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    AnyError, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::state::{MonState, Outcome, Proposal};
use crate::{MonNode, TypeConfig};

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");
const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const PURGED: &str = "last_purged";
const APPLIED: &str = "applied";

type StoreResult<T> = Result<T, StorageError<u64>>;

/// openraft's error for a failed storage step of `kind` (read, write, read_logs, ...).
fn failed(
    kind: fn(AnyError) -> StorageIOError<u64>,
) -> impl Fn(&dyn std::fmt::Display) -> StorageError<u64> {
    move |e| StorageError::from(kind(AnyError::error(e.to_string())))
}

type LogTable<'t> = redb::Table<'t, u64, &'static [u8]>;

/// Reads with `read` over `table`, or gives `absent` if the table was never written.
fn read_table<K: redb::Key + 'static, T>(
    db: &Database,
    table: TableDefinition<K, &[u8]>,
    absent: T,
    read: impl FnOnce(redb::ReadOnlyTable<K, &'static [u8]>) -> Result<T, String>,
) -> StoreResult<T> {
    let err = failed(StorageIOError::read);
    let txn = db.begin_read().map_err(|e| err(&e))?;
    match txn.open_table(table) {
        Ok(table) => read(table).map_err(|e| err(&e)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(absent),
        Err(e) => Err(err(&e)),
    }
}

/// Runs `write` on the log table in one durable write transaction.
fn write_log(
    db: &Database,
    write: impl FnOnce(&mut LogTable<'_>) -> Result<(), String>,
) -> Result<(), String> {
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    {
        let mut table = txn.open_table(LOG).map_err(|e| e.to_string())?;
        write(&mut table)?;
    }
    txn.commit().map_err(|e| e.to_string())
}

fn read_meta<T: for<'de> Deserialize<'de>>(db: &Database, key: &str) -> StoreResult<Option<T>> {
    read_table(db, META, None, |table| {
        let Some(value) = table.get(key).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        serde_json::from_slice(value.value())
            .map(Some)
            .map_err(|e| e.to_string())
    })
}

fn write_meta<T: Serialize>(db: &Database, key: &str, value: &T) -> StoreResult<()> {
    let bytes = serde_json::to_vec(value).map_err(|e| failed(StorageIOError::write)(&e))?;
    write_meta_bytes(db, key, &bytes)
}

fn write_meta_bytes(db: &Database, key: &str, bytes: &[u8]) -> StoreResult<()> {
    let err = failed(StorageIOError::write);
    let txn = db.begin_write().map_err(|e| err(&e))?;
    {
        let mut table = txn.open_table(META).map_err(|e| err(&e))?;
        table.insert(key, bytes).map_err(|e| err(&e))?;
    }
    txn.commit().map_err(|e| err(&e))
}

/// The replicated log.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
}

impl LogStore {
    pub fn new(db: Arc<Database>) -> Self {
        LogStore { db }
    }

    fn entries(
        &self,
        range: impl RangeBounds<u64>,
        last_only: bool,
    ) -> StoreResult<Vec<Entry<TypeConfig>>> {
        read_table(&self.db, LOG, Vec::new(), |table| {
            let decode = |value: &[u8]| serde_json::from_slice(value).map_err(|e| e.to_string());
            if last_only {
                let last = table.last().map_err(|e| e.to_string())?;
                return last
                    .map(|(_, value)| decode(value.value()))
                    .into_iter()
                    .collect();
            }
            let mut entries = Vec::new();
            for row in table.range(range).map_err(|e| e.to_string())? {
                let (_, value) = row.map_err(|e| e.to_string())?;
                entries.push(decode(value.value())?);
            }
            Ok(entries)
        })
    }

    fn remove_range(&self, range: impl RangeBounds<u64>) -> StoreResult<()> {
        write_log(&self.db, |table| {
            table
                .retain_in(range, |_, _| false)
                .map_err(|e| e.to_string())
        })
        .map_err(|e| failed(StorageIOError::write_logs)(&e))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<Entry<TypeConfig>>> {
        self.entries(range, false)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StoreResult<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId<u64>> = read_meta(&self.db, PURGED)?;
        let last = self.entries(.., true)?.pop();
        let last_log_id = last.map(|e| e.log_id).or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> StoreResult<()> {
        write_meta(&self.db, VOTE, vote)
    }

    async fn read_vote(&mut self) -> StoreResult<Option<Vote<u64>>> {
        read_meta(&self.db, VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> StoreResult<()> {
        write_meta(&self.db, COMMITTED, &committed)
    }

    async fn read_committed(&mut self) -> StoreResult<Option<LogId<u64>>> {
        Ok(read_meta::<Option<LogId<u64>>>(&self.db, COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StoreResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let written = write_log(&self.db, |table| {
            for entry in entries {
                let bytes = serde_json::to_vec(&entry).map_err(|e| e.to_string())?;
                table
                    .insert(entry.log_id.index, bytes.as_slice())
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        });
        let outcome = written
            .as_ref()
            .map(|_| ())
            .map_err(|e| failed(StorageIOError::write_logs)(e));
        callback.log_io_completed(written.map_err(std::io::Error::other));
        outcome
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> StoreResult<()> {
        self.remove_range(log_id.index..)
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> StoreResult<()> {
        write_meta(&self.db, PURGED, &log_id)?;
        self.remove_range(..=log_id.index)
    }
}

/// The applied state, as persisted and as sent in snapshots.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Applied {
    pub last_applied: Option<LogId<u64>>,
    pub membership: StoredMembership<u64, MonNode>,
    pub state: MonState,
}

/// The applied state shared with the monitor's service, with watchers for map and auth
/// changes (how subscriptions by epoch are answered).
pub struct Shared {
    applied: RwLock<Applied>,
    pub map: watch::Sender<Arc<ClusterMap>>,
    pub auth: watch::Sender<Arc<AuthTable>>,
}

impl Shared {
    pub fn read<T>(&self, f: impl FnOnce(&MonState) -> T) -> T {
        f(&self.applied().state)
    }

    // A panic while holding the lock leaves a whole `Applied` behind: take it anyway.
    fn applied(&self) -> RwLockReadGuard<'_, Applied> {
        self.applied.read().unwrap_or_else(|p| p.into_inner())
    }

    fn applied_mut(&self) -> RwLockWriteGuard<'_, Applied> {
        self.applied.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the subscribers of whatever moved on; copies only what did.
    fn publish(&self) {
        let applied = self.applied();
        let state = &applied.state;
        self.map.send_if_modified(|current| {
            let newer = state.map.epoch > current.epoch;
            if newer {
                *current = Arc::new(state.map.clone());
            }
            newer
        });
        self.auth.send_if_modified(|current| {
            let newer = state.auth.version > current.version;
            if newer {
                *current = Arc::new(state.auth.clone());
            }
            newer
        });
    }
}

#[derive(Clone)]
pub struct StateMachine {
    db: Arc<Database>,
    pub shared: Arc<Shared>,
}

impl StateMachine {
    pub fn open(db: Arc<Database>) -> StoreResult<Self> {
        let applied: Applied = read_meta(&db, APPLIED)?.unwrap_or_default();
        let shared = Arc::new(Shared {
            map: watch::channel(Arc::new(applied.state.map.clone())).0,
            auth: watch::channel(Arc::new(applied.state.auth.clone())).0,
            applied: RwLock::new(applied),
        });
        Ok(StateMachine { db, shared })
    }

    /// The applied state as a snapshot: encoded under the lock, which is released before the
    /// caller writes or sends it.
    fn snapshot(&self) -> StoreResult<Snapshot<TypeConfig>> {
        let applied = self.shared.applied();
        let bytes = serde_json::to_vec(&*applied)
            .map_err(|e| failed(StorageIOError::read_state_machine)(&e))?;
        let snapshot_id = applied.last_applied.map_or_else(
            || "empty".to_owned(),
            |id| format!("{}-{}", id.leader_id, id.index),
        );
        Ok(Snapshot {
            meta: SnapshotMeta {
                last_log_id: applied.last_applied,
                last_membership: applied.membership.clone(),
                snapshot_id,
            },
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }

    fn persist(&self) -> StoreResult<()> {
        let snapshot = self.snapshot()?;
        write_meta_bytes(&self.db, APPLIED, snapshot.snapshot.get_ref())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> StoreResult<Snapshot<TypeConfig>> {
        self.snapshot()
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> StoreResult<(Option<LogId<u64>>, StoredMembership<u64, MonNode>)> {
        let applied = self.shared.applied();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StoreResult<Vec<Outcome>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut outcomes = Vec::new();
        {
            let mut applied = self.shared.applied_mut();
            for entry in entries {
                applied.last_applied = Some(entry.log_id);
                let outcome = match &entry.payload {
                    EntryPayload::Blank => Outcome::Applied {
                        epoch: applied.state.map.epoch,
                    },
                    EntryPayload::Normal(proposal) => apply_logged(&mut applied.state, proposal),
                    EntryPayload::Membership(membership) => {
                        applied.membership =
                            StoredMembership::new(Some(entry.log_id), membership.clone());
                        Outcome::Applied {
                            epoch: applied.state.map.epoch,
                        }
                    }
                };
                outcomes.push(outcome);
            }
        }
        self.persist()?;
        self.shared.publish();
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StoreResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, MonNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StoreResult<()> {
        let applied: Applied = serde_json::from_slice(snapshot.get_ref())
            .map_err(|e| failed(StorageIOError::read_state_machine)(&e))?;
        if applied.last_applied != meta.last_log_id {
            let why = "a snapshot whose body and metadata disagree";
            return Err(failed(StorageIOError::read_state_machine)(&why));
        }
        *self.shared.applied_mut() = applied;
        self.persist()?;
        self.shared.publish();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StoreResult<Option<Snapshot<TypeConfig>>> {
        let empty = self.shared.applied().last_applied.is_none();
        if empty {
            return Ok(None);
        }
        self.snapshot().map(Some)
    }
}

fn apply_logged(state: &mut MonState, proposal: &Proposal) -> Outcome {
    let outcome = state.apply(proposal);
    if let Outcome::Refused(why) = &outcome {
        tracing::info!(%why, "proposal refused");
    }
    outcome
}
