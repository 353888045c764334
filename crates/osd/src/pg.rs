//! One placement group on this OSD: its log, what it serves, and who else holds it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use map::cluster::Epoch;
use map::placement::{OsdId, PgId};
use map::ObjectName;
use messenger::message::{LogEntry, PgInfo, PgState, ReqId, Version};
use tokio::sync::{watch, Mutex};

/// How long an op waits for its PG to serve before the client is told it is busy (the
/// client then asks again, so a PG that comes back is served without an error).
pub const SERVE_WAIT: Duration = Duration::from_secs(5);

pub struct Pg {
    pub id: PgId,
    /// Held for every write, and while peering: writes to a PG are applied one at a time,
    /// in version order, on every OSD that holds it.
    pub core: Mutex<Core>,
    /// What the PG serves now, for ops waiting on it and for the beacon.
    pub serving: watch::Sender<Serving>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Serving {
    /// This OSD is not the PG's primary (or has not peered it yet).
    NotPrimary,
    /// Primary in the interval that began at `epoch`, in `state`.
    Primary { epoch: Epoch, state: PgState },
}

impl Serving {
    pub fn is_active(&self) -> bool {
        matches!(
            self,
            Serving::Primary {
                state: PgState::Clean | PgState::Undersized | PgState::Recovering,
                ..
            }
        )
    }
}

#[derive(Default)]
pub struct Core {
    pub loaded: bool,
    pub info: PgInfo,
    pub log: VecDeque<LogEntry>,
    /// Request ids in the log, for retried writes.
    pub reqids: HashMap<ReqId, Version>,
    pub interval: Interval,
}

/// The acting set as this OSD last peered it (empty when not primary).
#[derive(Clone, Debug, Default)]
pub struct Interval {
    pub epoch: Epoch,
    pub acting: Vec<OsdId>,
    pub size: usize,
    pub min_size: usize,
    /// Replicas that hold everything and get every write.
    pub clean: Vec<OsdId>,
    /// Replicas being recovered, each by one task.
    pub recovering: HashMap<OsdId, Recovery>,
}

/// One recovery task's claim on a target: a task whose token is no longer here stops.
#[derive(Clone, Debug, Default)]
pub struct Recovery {
    pub token: u64,
    /// Objects written since the recovery began, to copy again before the target joins.
    pub dirty: HashSet<ObjectName>,
}

impl Core {
    pub fn set_log(&mut self, info: PgInfo, log: VecDeque<LogEntry>) {
        self.reqids = log.iter().map(|e| (e.reqid, e.version)).collect();
        self.info = info;
        self.log = log;
    }

    /// After a write and its log entry were applied: the log, trimmed by `trim` entries.
    pub fn note_logged(&mut self, entry: LogEntry, trim: usize) {
        self.info.last = entry.version;
        self.log.drain(..trim.min(self.log.len()));
        self.reqids.insert(entry.reqid, entry.version);
        self.log.push_back(entry);
        if self.reqids.len() > self.log.len() {
            let live: HashSet<ReqId> = self.log.iter().map(|e| e.reqid).collect();
            self.reqids.retain(|id, _| live.contains(id));
        }
    }

    /// The state to report: active with enough clean copies, else why not.
    pub fn state(&self) -> PgState {
        let copies = 1 + self.interval.clean.len();
        if copies < self.interval.min_size {
            let why = if self.interval.acting.len() < self.interval.min_size {
                format!(
                    "{} of its OSDs up, min_size {}",
                    self.interval.acting.len(),
                    self.interval.min_size
                )
            } else {
                format!(
                    "{copies} complete copies, min_size {}; recovering the others",
                    self.interval.min_size
                )
            };
            PgState::Inactive(why)
        } else if !self.interval.recovering.is_empty() {
            PgState::Recovering
        } else if self.interval.acting.len() < self.interval.size {
            PgState::Undersized
        } else {
            PgState::Clean
        }
    }
}

impl Pg {
    pub fn new(id: PgId) -> Pg {
        Pg {
            id,
            core: Mutex::new(Core::default()),
            serving: watch::Sender::new(Serving::NotPrimary),
        }
    }

    pub fn publish(&self, core: &Core) {
        let serving = Serving::Primary {
            epoch: core.interval.epoch,
            state: core.state(),
        };
        self.serving.send_replace(serving);
    }

    /// Waits (up to [`SERVE_WAIT`]) until the PG serves; the reason it does not otherwise.
    pub async fn wait_active(&self) -> Result<(), String> {
        let mut watch = self.serving.subscribe();
        let waited = tokio::time::timeout(SERVE_WAIT, watch.wait_for(Serving::is_active)).await;
        match waited {
            Ok(Ok(_)) => Ok(()),
            _ => Err(match &*self.serving.borrow() {
                Serving::NotPrimary => "this OSD is not (yet) the PG's primary".to_string(),
                Serving::Primary {
                    state: PgState::Inactive(why),
                    ..
                } => {
                    format!("pg {}.{} is inactive: {why}", self.id.pool, self.id.number)
                }
                Serving::Primary { state, .. } => {
                    format!("pg {}.{} is {}", self.id.pool, self.id.number, state.name())
                }
            }),
        }
    }
}
