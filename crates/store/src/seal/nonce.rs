//! Nonces for AES-256-GCM sealing of data chunks and metadata values.
//!
//! A nonce is 96 bits: a 2-bit domain (0 data chunks, 1 metadata values, 2 the reservation
//! record, 3 values written while raising an older format) and a 30-bit incarnation in the first 32 bits, then a 64-bit counter, all
//! big-endian. Each sealed chunk or value takes the next counter value.
//!
//! The counter is reserved ahead in steps of `NONCE_RESERVE_STEP`: the new high-water mark
//! is committed durably to the metadata database *before* any nonce under it is handed out,
//! and `open` resumes at the persisted mark. So after any crash the store continues above
//! every nonce that may have reached the disk, and a 64-bit counter does not wrap (2^64
//! chunks of 4 KiB is 64 ZiB).
//!
//! The incarnation is drawn at random at every open. It covers what the mark cannot: a
//! metadata file rolled back to an older copy (a restored snapshot, a cloned disk, or an
//! attacker) resumes at an old mark, and would otherwise seal new data under nonces that old
//! ciphertext already used. With a fresh incarnation, a repeat needs both a rollback and two
//! opens drawing the same 30 bits.
//!
//! Invariant: no (key, nonce) pair is ever used to seal twice. Tested below and in
//! tests/at_rest.rs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// How far ahead the counter is reserved: 2^24 chunks = 64 GiB of writes per reservation.
pub const NONCE_RESERVE_STEP: u64 = 1 << 24;

pub(crate) const DOMAIN_DATA: u32 = 0;
pub(crate) const DOMAIN_METADATA: u32 = 1;
/// The reservation record itself is sealed with its own mark as the counter: marks only grow.
pub(crate) const DOMAIN_RESERVATION: u32 = 2;
/// Values written by a commit that raises a store's format (to 2, to 4), before the counter
/// is resumed: a fresh incarnation each, counting from 0. Each commit also raises the
/// format, so it happens once.
pub(crate) const DOMAIN_UPGRADE: u32 = 3;

/// Incarnations are 30 bits; the top two bits of the first word hold the domain.
pub(crate) const INCARNATION_MASK: u32 = (1 << 30) - 1;

pub(crate) fn nonce_bytes(domain: u32, incarnation: u32, counter: u64) -> [u8; 12] {
    assert!(
        domain < 4 && incarnation <= INCARNATION_MASK,
        "nonce domain {domain}, incarnation {incarnation}"
    );
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&(domain << 30 | incarnation).to_be_bytes());
    nonce[4..].copy_from_slice(&counter.to_be_bytes());
    nonce
}

/// A fresh random incarnation.
pub(crate) fn random_incarnation() -> u32 {
    let mut bytes = [0u8; 4];
    aws_lc_rs::rand::fill(&mut bytes).expect("the system random source never fails on Linux");
    u32::from_be_bytes(bytes) & INCARNATION_MASK
}

pub(crate) struct NonceCounter {
    incarnation: u32,
    next: AtomicU64,
    reserved: AtomicU64,
    reserve_lock: Mutex<()>,
}

impl NonceCounter {
    /// Resumes at `reserved`, the persisted high-water mark: every value below it may have
    /// been used before the last shutdown or crash.
    pub(crate) fn resume(reserved: u64) -> NonceCounter {
        NonceCounter {
            incarnation: random_incarnation(),
            next: AtomicU64::new(reserved),
            reserved: AtomicU64::new(reserved),
            reserve_lock: Mutex::new(()),
        }
    }

    /// This open's incarnation, part of every nonce it hands out.
    pub(crate) fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// Takes `count` consecutive counter values and returns the first. Before returning,
    /// makes sure they lie below a durably persisted reservation, calling `persist(mark)`
    /// to raise it when needed.
    pub(crate) fn take<E>(
        &self,
        count: u64,
        persist: impl Fn(u64) -> Result<(), E>,
    ) -> Result<u64, E> {
        let first = self.next.fetch_add(count, Ordering::Relaxed);
        let end = first
            .checked_add(count)
            .expect("a 64-bit nonce counter does not wrap");
        while end > self.reserved.load(Ordering::Acquire) {
            let _guard = self
                .reserve_lock
                .lock()
                .expect("nonce reservation lock poisoned");
            let reserved = self.reserved.load(Ordering::Acquire);
            if end > reserved {
                let mark = end.max(reserved) + NONCE_RESERVE_STEP;
                persist(mark)?;
                self.reserved.store(mark, Ordering::Release);
            }
        }
        Ok(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn concurrent_takes_never_overlap_and_stay_below_the_persisted_mark() {
        let persisted = Mutex::new(vec![0u64]);
        let counter = NonceCounter::resume(0);
        let taken = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let (counter, persisted, taken) = (&counter, &persisted, &taken);
                scope.spawn(move || {
                    for i in 0..2000u64 {
                        let count = 1 + (t * 31 + i * 17) % (NONCE_RESERVE_STEP / 256);
                        let first = counter
                            .take(count, |mark| -> Result<(), ()> {
                                persisted.lock().expect("lock").push(mark);
                                Ok(())
                            })
                            .expect("persist never fails here");
                        let mark = *persisted
                            .lock()
                            .expect("lock")
                            .iter()
                            .max()
                            .expect("a mark");
                        assert!(
                            first + count <= mark,
                            "handed out {first}+{count} above the persisted mark {mark}"
                        );
                        taken.lock().expect("lock").push((first, count));
                    }
                });
            }
        });
        let mut ranges = taken.into_inner().expect("lock");
        ranges.sort();
        assert!(
            ranges.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0),
            "two takes overlap"
        );
    }

    #[test]
    fn resuming_from_a_mark_never_reuses_a_value_below_it() {
        let counter = NonceCounter::resume(0);
        let marks = Mutex::new(Vec::new());
        let before: HashSet<u64> = (0..100)
            .map(|_| {
                counter
                    .take(1, |m| -> Result<(), ()> {
                        marks.lock().expect("lock").push(m);
                        Ok(())
                    })
                    .expect("ok")
            })
            .collect();
        // A crash: a new process resumes from the last persisted mark.
        let resumed = NonceCounter::resume(
            *marks
                .lock()
                .expect("lock")
                .last()
                .expect("a reservation was made"),
        );
        let after = resumed
            .take(1, |_| -> Result<(), ()> { Ok(()) })
            .expect("ok");
        assert!(
            before.iter().all(|b| *b < after),
            "a value used before the crash came back"
        );
    }

    #[test]
    fn a_failed_reservation_hands_out_nothing() {
        let counter = NonceCounter::resume(0);
        assert!(counter.take(1, |_| Err("disk full")).is_err());
        assert_eq!(counter.reserved.load(Ordering::Acquire), 0);
    }
}
