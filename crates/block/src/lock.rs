//! The exclusive lock of an image: one writer at a time.
//!
//! The lock is the `lock` attribute of the image's header object. It is only ever changed by
//! a write that carries the condition "the attribute is still what I last read", checked by
//! the header's primary OSD under its PG lock: a compare-and-swap, so two writers can never
//! both believe they hold it.
//!
//! The holder rewrites its record every [`LOCK_RENEW_INTERVAL`] (a renewal counter moves),
//! so a record that stays byte-for-byte the same for [`LOCK_STALE_AFTER`] belongs to a
//! writer that is gone or cut off. Nobody compares clocks across hosts.
//!
//! Breaking a lock fences its holder first: the holder's client instance is blocklisted in
//! the cluster map, and every OSD refuses its writes from that epoch on (checked under the PG
//! lock, after the breaker's own requests, which carry the new epoch). A writer that was only
//! paused therefore cannot write over its successor when it wakes up.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use client::{ObjectOp, Pool};
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The header attribute that holds the lock record.
pub const LOCK_ATTR: &str = "lock";
/// How often the holder rewrites its record.
pub const LOCK_RENEW_INTERVAL: Duration = Duration::from_secs(5);
/// A record unchanged for this long is stale: its holder stopped renewing it.
pub const LOCK_STALE_AFTER: Duration = Duration::from_secs(20);
/// How often a writer waiting for a stale lock looks at it again.
const LOCK_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Attempts to remove a record that keeps changing under a break.
const BREAK_ATTEMPTS_MAX: u32 = 5;

/// Who holds an image's lock, as recorded in the image's header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockOwner {
    pub entity: String,
    /// The holder's cluster connection: what breaking the lock blocklists.
    pub instance: u64,
    pub host: String,
    pub pid: u32,
    /// What holds it: `nbd serve`, `resize`, `rm`.
    pub purpose: String,
    pub since_unix_secs: u64,
    pub renewals: u64,
}

impl fmt::Display for LockOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let age = unix_now().saturating_sub(self.since_unix_secs);
        write!(
            f,
            "{} ({}, pid {} on {}, instance {:016x}, taken {age} s ago)",
            self.entity, self.purpose, self.pid, self.host, self.instance
        )
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn encode(owner: &LockOwner) -> Vec<u8> {
    serde_json::to_vec(owner).unwrap_or_else(|e| unreachable!("a lock record encodes: {e}"))
}

/// The lock record in `bytes`; an unreadable record is reported, never overwritten silently.
pub fn decode(image: &str, bytes: &[u8]) -> Result<LockOwner, Error> {
    serde_json::from_slice(bytes).map_err(|e| Error::Header {
        image: image.to_string(),
        why: format!("its lock record does not decode ({e}); break it to reset it"),
    })
}

/// Sets the lock attribute to `new` (`None`: removes it) if it still holds `expected`.
async fn swap(
    pool: &Pool,
    header: &str,
    expected: Option<&[u8]>,
    new: Option<Vec<u8>>,
) -> Result<(), client::Error> {
    let condition = ObjectOp::AssertAttr {
        name: LOCK_ATTR.into(),
        value: expected.map(<[u8]>::to_vec),
    };
    let change = match new {
        Some(value) => ObjectOp::SetAttr {
            name: LOCK_ATTR.into(),
            value,
        },
        None => ObjectOp::RemoveAttr {
            name: LOCK_ATTR.into(),
        },
    };
    pool.operate(header, vec![condition, change], Bytes::new())
        .await
        .map(|_| ())
}

/// The current lock record's bytes (`None`: unlocked).
async fn read_record(pool: &Pool, image: &str, header: &str) -> Result<Option<Vec<u8>>, Error> {
    match pool.attrs(header).await {
        Ok(mut attrs) => Ok(attrs.remove(LOCK_ATTR)),
        Err(client::Error::NotFound) => Err(Error::NoSuchImage {
            image: image.to_string(),
        }),
        Err(e) => Err(Error::cluster(image)(e)),
    }
}

/// A held lock. The image renews it; [`Lock::release`] gives it up.
pub struct Lock {
    pool: Pool,
    image: String,
    header: String,
    /// The record as last written, `None` once released. Held across each renewal's and the
    /// release's compare-and-swap: a release that raced a renewal would otherwise swap
    /// against the record the renewal just replaced, fail the comparison, and leave the lock
    /// held by a writer that is gone.
    owner: tokio::sync::Mutex<Option<LockOwner>>,
    lost: AtomicBool,
}

impl Lock {
    /// Takes the lock of `image` (header object `header`) for `purpose`. If another writer
    /// holds it: with `wait_stale`, waits until its record has stayed the same for
    /// [`LOCK_STALE_AFTER`], then breaks it (fencing that writer) and takes it; without, fails
    /// with [`Error::Locked`] at once.
    pub async fn acquire(
        pool: &Pool,
        image: &str,
        header: &str,
        purpose: &str,
        wait_stale: bool,
    ) -> Result<Lock, Error> {
        let mut owner = LockOwner {
            entity: pool.cluster().entity(),
            instance: pool.cluster().instance(),
            host: host_name(),
            pid: std::process::id(),
            purpose: purpose.into(),
            since_unix_secs: unix_now(),
            renewals: 0,
        };
        let mut watched: Option<(Vec<u8>, Instant)> = None;
        loop {
            match read_record(pool, image, header).await? {
                None => {
                    owner.since_unix_secs = unix_now();
                    match swap(pool, header, None, Some(encode(&owner))).await {
                        Ok(()) => {
                            return Ok(Lock {
                                pool: pool.clone(),
                                image: image.into(),
                                header: header.into(),
                                owner: tokio::sync::Mutex::new(Some(owner)),
                                lost: AtomicBool::new(false),
                            })
                        }
                        // Another writer took it between the read and the swap.
                        Err(client::Error::Mismatch(_)) => continue,
                        Err(e) => return Err(Error::cluster(image)(e)),
                    }
                }
                Some(record) => {
                    let holder = decode(image, &record)?;
                    if !wait_stale {
                        return Err(Error::Locked {
                            image: image.into(),
                            owner: Box::new(holder),
                        });
                    }
                    match &watched {
                        Some((seen, since)) if *seen == record => {
                            if since.elapsed() >= LOCK_STALE_AFTER {
                                tracing::warn!(%image, %holder, "breaking a stale lock");
                                break_record(pool, image, header, &record).await?;
                                watched = None;
                            }
                        }
                        _ => {
                            tracing::info!(
                                %image, %holder,
                                "image is locked; taking it over if its holder stops renewing \
                                 for {LOCK_STALE_AFTER:?}"
                            );
                            watched = Some((record, Instant::now()));
                        }
                    }
                    tokio::time::sleep(LOCK_POLL_INTERVAL).await;
                }
            }
        }
    }

    /// Rewrites the record with the next renewal count. A record that changed under us means
    /// the lock was broken: the lock is lost for good.
    pub async fn renew(&self) -> Result<(), Error> {
        if self.is_lost() {
            return Err(self.lost_error());
        }
        let mut owner = self.owner.lock().await;
        let Some(current) = owner.as_ref() else {
            return Ok(());
        };
        let next = LockOwner {
            renewals: current.renewals + 1,
            ..current.clone()
        };
        match swap(
            &self.pool,
            &self.header,
            Some(&encode(current)),
            Some(encode(&next)),
        )
        .await
        {
            Ok(()) => {
                *owner = Some(next);
                Ok(())
            }
            Err(client::Error::Mismatch(_) | client::Error::Denied(_)) => {
                self.mark_lost();
                Err(self.lost_error())
            }
            Err(e) => Err(Error::cluster(&self.image)(e)),
        }
    }

    /// This writer was fenced off (the OSDs refuse its writes).
    pub(crate) fn mark_lost(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    pub fn lost_error(&self) -> Error {
        Error::LockLost {
            image: self.image.clone(),
        }
    }

    /// Gives the lock up (if it is still ours).
    pub async fn release(&self) -> Result<(), Error> {
        if self.is_lost() {
            return Ok(());
        }
        let mut owner = self.owner.lock().await;
        let Some(current) = owner.as_ref() else {
            return Ok(());
        };
        match swap(&self.pool, &self.header, Some(&encode(current)), None).await {
            Ok(()) | Err(client::Error::Mismatch(_)) => {
                *owner = None;
                Ok(())
            }
            Err(e) => Err(Error::cluster(&self.image)(e)),
        }
    }
}

/// Fences the holder recorded in `record` (blocklists its client instance), then removes
/// the record if it is still the same. False: it changed meanwhile.
async fn break_record(
    pool: &Pool,
    image: &str,
    header: &str,
    record: &[u8],
) -> Result<bool, Error> {
    // An unreadable record names nobody to fence; removing it is all there is to do.
    if let Ok(holder) = decode(image, record) {
        pool.cluster()
            .blocklist(holder.instance)
            .await
            .map_err(Error::cluster(image))?;
    }
    match swap(pool, header, Some(record), None).await {
        Ok(()) => Ok(true),
        Err(client::Error::Mismatch(_)) => Ok(false),
        Err(e) => Err(Error::cluster(image)(e)),
    }
}

/// Breaks the lock of `image` whoever holds it: fences the holder, then removes its record.
/// Returns who held it (`None`: it was not locked, or its record was unreadable).
pub async fn break_lock(
    pool: &Pool,
    image: &str,
    header: &str,
) -> Result<Option<LockOwner>, Error> {
    for _ in 0..BREAK_ATTEMPTS_MAX {
        let Some(record) = read_record(pool, image, header).await? else {
            return Ok(None);
        };
        if break_record(pool, image, header, &record).await? {
            return Ok(decode(image, &record).ok());
        }
    }
    Err(Error::Invalid(format!(
        "the lock of {image} kept changing during {BREAK_ATTEMPTS_MAX} attempts to break it"
    )))
}

/// Who holds the lock of `image`, if anyone.
pub async fn holder(pool: &Pool, image: &str, header: &str) -> Result<Option<LockOwner>, Error> {
    read_record(pool, image, header)
        .await?
        .map(|record| decode(image, &record))
        .transpose()
}
