//! The journal: every change to a file system's namespace, in order, in one object of its
//! metadata pool, written before the change is acknowledged.
//!
//! - Entries get their sequence numbers under the namespace lock, in the order they change
//!   memory; one writer task appends them in that order, many per request (group commit),
//!   and `committed` only grows.
//! - A flusher applies committed entries to the namespace's objects every
//!   [`FLUSH_INTERVAL`], then records the last one it applied (`applied`) and trims entries
//!   older than [`RETAIN_ENTRIES`] before it. The retained entries answer requests resent
//!   after a crash; those after `applied` are applied again at start (idempotent puts).
//! - A failed write or flush is fatal to the file system's service: memory then holds
//!   changes the pool may not, and only a restart (replaying the journal) is sound.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use client::{ObjectOp, Pool};
use futures::StreamExt;
use tokio::sync::{watch, Notify};

use crate::record::{self, Entry, Names, Put, Target, APPLIED_ATTR};

/// Most entries in one journal write.
pub const BATCH_ENTRIES_MAX: usize = 256;
/// Most bytes of entries in one journal write (a frame's metadata holds 1 MiB).
pub const BATCH_BYTES_MAX: usize = 512 << 10;
/// How often committed entries are applied to the namespace's objects.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);
/// Applied entries kept in the journal, to answer requests resent to the next MDS.
pub const RETAIN_ENTRIES: u64 = 4096;
/// Most entries or keys in one request to the metadata pool.
pub const REQUEST_KEYS_MAX: usize = 1000;
/// Objects written at once while flushing.
const FLUSH_PARALLEL: usize = 16;

#[derive(Default)]
struct Queue {
    next_seq: u64,
    /// Encoded entries not yet sent to the pool.
    unwritten: VecDeque<(u64, Vec<u8>)>,
    /// Entries not yet applied to the namespace's objects.
    unflushed: VecDeque<(u64, Vec<Put>)>,
    applied: u64,
    /// The oldest entry still in the journal object.
    oldest_kept: u64,
}

pub struct Journal {
    meta: Pool,
    names: Names,
    queue: Mutex<Queue>,
    wake_writer: Notify,
    committed: watch::Sender<u64>,
    failed: watch::Sender<Option<String>>,
}

impl Journal {
    /// A journal continuing after entry `last` (all of them applied up to `applied`), whose
    /// object holds entries from `oldest_kept`.
    pub fn new(meta: Pool, names: Names, last: u64, applied: u64, oldest_kept: u64) -> Journal {
        Journal {
            meta,
            names,
            queue: Mutex::new(Queue {
                next_seq: last + 1,
                applied,
                oldest_kept,
                ..Queue::default()
            }),
            wake_writer: Notify::new(),
            committed: watch::Sender::new(last),
            failed: watch::Sender::new(None),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a change; returns its sequence number. Call it under the namespace lock, in the
    /// order changes are applied to memory.
    pub fn append(&self, session: u64, request: u64, ino: Option<u64>, puts: Vec<Put>) -> u64 {
        let mut queue = self.queue();
        let seq = queue.next_seq;
        queue.next_seq += 1;
        let entry = Entry {
            seq,
            session,
            request,
            ino,
            puts,
        };
        queue.unwritten.push_back((seq, record::encode(&entry)));
        queue.unflushed.push_back((seq, entry.puts));
        drop(queue);
        self.wake_writer.notify_one();
        seq
    }

    /// The newest sequence number given out.
    pub fn last_assigned(&self) -> u64 {
        self.queue().next_seq - 1
    }

    /// Entries not yet applied to the objects (for backpressure).
    pub fn unflushed(&self) -> usize {
        self.queue().unflushed.len()
    }

    /// Waits until entry `seq` is durable in the journal.
    pub async fn wait(&self, seq: u64) -> Result<(), String> {
        let mut committed = self.committed.subscribe();
        let mut failed = self.failed.subscribe();
        loop {
            if *committed.borrow_and_update() >= seq {
                return Ok(());
            }
            if let Some(why) = failed.borrow_and_update().clone() {
                return Err(why);
            }
            tokio::select! {
                changed = committed.changed() => if changed.is_err() { return Err("journal closed".into()) },
                changed = failed.changed() => if changed.is_err() { return Err("journal closed".into()) },
            }
        }
    }

    /// Why the journal stopped, once it has.
    pub fn failure(&self) -> watch::Receiver<Option<String>> {
        self.failed.subscribe()
    }

    fn fail(&self, why: String) {
        tracing::error!(fs = self.names.fs_id, %why, "the journal failed; this file system stops");
        self.failed.send_replace(Some(why));
    }

    /// Appends queued entries to the journal object, batch by batch, until the journal fails.
    pub async fn write_loop(&self) {
        let object = self.names.journal();
        loop {
            self.wake_writer.notified().await;
            loop {
                let batch: Vec<(u64, Vec<u8>)> = {
                    let mut queue = self.queue();
                    let mut bytes = 0;
                    let mut batch = Vec::new();
                    while let Some((_, value)) = queue.unwritten.front() {
                        if batch.len() == BATCH_ENTRIES_MAX
                            || (!batch.is_empty() && bytes + value.len() > BATCH_BYTES_MAX)
                        {
                            break;
                        }
                        bytes += value.len();
                        batch.extend(queue.unwritten.pop_front());
                    }
                    batch
                };
                let Some(last) = batch.last().map(|(seq, _)| *seq) else {
                    break;
                };
                let entries = batch
                    .into_iter()
                    .map(|(seq, value)| (seq.to_be_bytes().to_vec(), value))
                    .collect();
                if let Err(e) = self.meta.omap_set(&object, entries).await {
                    return self.fail(format!("writing the journal: {e}"));
                }
                self.committed.send_replace(last);
            }
        }
    }

    /// Applies committed entries to the namespace's objects every [`FLUSH_INTERVAL`], then
    /// calls `flushed` with the last one applied.
    pub async fn flush_loop<F, Fut>(&self, flushed: F)
    where
        F: Fn(u64) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        loop {
            tokio::time::sleep(FLUSH_INTERVAL).await;
            if self.failed.borrow().is_some() {
                return;
            }
            match self.flush_once().await {
                Ok(Some(last)) => flushed(last).await,
                Ok(None) => {}
                Err(why) => return self.fail(why),
            }
        }
    }

    async fn flush_once(&self) -> Result<Option<u64>, String> {
        let committed = *self.committed.borrow();
        let (batch, oldest_kept) = {
            let queue = self.queue();
            let batch: Vec<(u64, Vec<Put>)> = queue
                .unflushed
                .iter()
                .take_while(|(seq, _)| *seq <= committed)
                .cloned()
                .collect();
            (batch, queue.oldest_kept)
        };
        let Some(last) = batch.last().map(|(seq, _)| *seq) else {
            return Ok(None);
        };
        let puts = batch.iter().flat_map(|(_, puts)| puts.iter());
        apply_to_pool(&self.meta, &self.names, puts).await?;
        // Record how far the objects are, and drop what is older than the retained window.
        let trim_below = last.saturating_sub(RETAIN_ENTRIES).max(oldest_kept);
        let mut ops = vec![ObjectOp::SetAttr {
            name: APPLIED_ATTR.into(),
            value: last.to_be_bytes().to_vec(),
        }];
        let keys: Vec<Vec<u8>> = (oldest_kept..trim_below)
            .take(REQUEST_KEYS_MAX)
            .map(|seq| seq.to_be_bytes().to_vec())
            .collect();
        let new_oldest = oldest_kept + keys.len() as u64;
        if !keys.is_empty() {
            ops.push(ObjectOp::OmapRemove { keys });
        }
        self.meta
            .operate(&self.names.journal(), ops, Bytes::new())
            .await
            .map_err(|e| format!("recording applied journal entries: {e}"))?;
        let mut queue = self.queue();
        queue.unflushed.drain(..batch.len());
        queue.applied = last;
        queue.oldest_kept = new_oldest;
        Ok(Some(last))
    }
}

/// What one object gets from a run of puts.
#[derive(Default)]
struct ObjectWrite {
    remove_object: bool,
    set: BTreeMap<Vec<u8>, Vec<u8>>,
    remove: BTreeSet<Vec<u8>>,
}

/// Writes the final value of every key the puts touch (in order; the last one wins).
pub async fn apply_to_pool<'a>(
    meta: &Pool,
    names: &Names,
    puts: impl Iterator<Item = &'a Put>,
) -> Result<(), String> {
    let mut objects: BTreeMap<String, ObjectWrite> = BTreeMap::new();
    for put in puts {
        match names.target(put) {
            (Target::Key { object, key }, value) => {
                let write = objects.entry(object).or_default();
                match value {
                    Some(value) => {
                        write.remove.remove(&key);
                        write.set.insert(key, value);
                    }
                    None => {
                        write.set.remove(&key);
                        write.remove.insert(key);
                    }
                }
            }
            (Target::RemoveObject(object), _) => {
                let write = objects.entry(object).or_default();
                *write = ObjectWrite {
                    remove_object: true,
                    ..ObjectWrite::default()
                };
            }
        }
    }
    let mut writes = futures::stream::iter(objects.into_iter().map(|(object, write)| async move {
        write_object(meta, &object, write)
            .await
            .map_err(|e| format!("applying the journal to {object}: {e}"))
    }))
    .buffer_unordered(FLUSH_PARALLEL);
    while let Some(done) = writes.next().await {
        done?;
    }
    Ok(())
}

async fn write_object(meta: &Pool, object: &str, write: ObjectWrite) -> Result<(), client::Error> {
    if write.remove_object {
        match meta.remove(object).await {
            Ok(()) | Err(client::Error::NotFound) => {}
            Err(e) => return Err(e),
        }
    }
    let set: Vec<(Vec<u8>, Vec<u8>)> = write.set.into_iter().collect();
    for chunk in set.chunks(REQUEST_KEYS_MAX) {
        meta.omap_set(object, chunk.to_vec()).await?;
    }
    if !write.remove_object {
        let remove: Vec<Vec<u8>> = write.remove.into_iter().collect();
        for chunk in remove.chunks(REQUEST_KEYS_MAX) {
            meta.omap_remove(object, chunk.to_vec()).await?;
        }
    }
    Ok(())
}
