//! Content that a GET is streaming is removed only when the GET is done with it. A DELETE or
//! an overwrite takes the object's name away at once (a new GET does not find it), but a GET
//! that started before reads the object it started with to its end, as S3 promises; the
//! stripes go when this gateway's last reader of them lets go.
//!
//! Only this gateway process's readers are counted: a GET served by another gateway on the
//! same pool is cut short by a removal here (with an error, never with other bytes).
//!
//! An object whose segments are kept out of line is held by its list's instance, taken
//! before the list is read: its removal then waits, list and segments, for the readers of
//! the list.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use client::Pool;

use crate::data;
use crate::layout::{ObjectEntry, Segment};

/// The instances being read, and the removals waiting for their readers.
#[derive(Clone)]
pub struct Readers {
    pool: Pool,
    held: Arc<Mutex<HashMap<String, Held>>>,
}

#[derive(Default)]
struct Held {
    readers: usize,
    /// What to remove once the last reader is done.
    removals: Vec<Segment>,
}

impl Readers {
    pub fn new(pool: Pool) -> Readers {
        Readers {
            pool,
            held: Arc::default(),
        }
    }

    /// Marks the content of `entry` as being read until the returned hold is dropped: its
    /// segments, or its list where it keeps them out of line (whether read yet or not).
    pub fn hold(&self, entry: &ObjectEntry) -> Hold {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let instances: Vec<String> = match &entry.listed {
            Some(listed) => vec![listed.instance.clone()],
            None => entry.segments.iter().map(|s| s.instance.clone()).collect(),
        };
        for instance in &instances {
            held.entry(instance.clone()).or_default().readers += 1;
        }
        Hold {
            readers: self.clone(),
            instances,
        }
    }

    /// Removes the content of `segment`, which no record names any more: now, or when its
    /// readers are done.
    pub async fn remove_segment(&self, segment: &Segment) {
        {
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(reading) = held.get_mut(&segment.instance) {
                reading.removals.push(segment.clone());
                return;
            }
        }
        data::remove_segment(&self.pool, segment).await;
    }

    /// Removes `segments` and their `list` (an entry's out of line), which no record names
    /// any more: now, or when the readers of the list are done.
    pub async fn remove_listed(&self, list: &Segment, segments: Vec<Segment>) {
        {
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(reading) = held.get_mut(&list.instance) {
                reading.removals.extend(segments);
                reading.removals.push(list.clone());
                return;
            }
        }
        for segment in segments.iter().chain([list]) {
            self.remove_segment(segment).await;
        }
    }
}

/// Content being read (see [`Readers::hold`]).
pub struct Hold {
    readers: Readers,
    instances: Vec<String>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut held = self.readers.held.lock().unwrap_or_else(|p| p.into_inner());
        for instance in &self.instances {
            let Some(reading) = held.get_mut(instance) else {
                continue;
            };
            assert!(reading.readers > 0, "a hold on {instance} counted");
            reading.readers -= 1;
            if reading.readers > 0 {
                continue;
            }
            let removals = held
                .remove(instance)
                .map(|h| h.removals)
                .unwrap_or_default();
            if let (false, Ok(runtime)) =
                (removals.is_empty(), tokio::runtime::Handle::try_current())
            {
                // Each as any removal: a segment another reader holds waits for it too.
                let readers = self.readers.clone();
                runtime.spawn(async move {
                    for segment in &removals {
                        readers.remove_segment(segment).await;
                    }
                });
            }
        }
    }
}
