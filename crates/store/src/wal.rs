//! The write-ahead log: one sync per group of small writes.
//!
//! Without it a group commit pays two syncs, the data device's and then the metadata
//! database's (redb fsyncs each commit, after about nine page writes). With it, a group is
//! durable once one record is: the group's metadata changes and, for small writes, a copy
//! of the sealed blocks they wrote, appended to the `wal` file and synced there. redb then
//! commits without a sync (`Durability::None`), and the data device is synced only at a
//! checkpoint.
//!
//! ```text
//!  wal file:  | record s | record s+1 | ... | record n | (older records, or zeros) ...
//!             ^ offset 0: the record numbered `wal_start` (superblock)
//!
//!  record:    magic "CWAL" | head_len u32 | data_len u64 | seq u64 | hash u64   (32 bytes)
//!             head: postcard of the metadata ops, pool usage deltas, freed runs, and
//!                   (offset, len) of each copied write; sealed under the metadata key
//!                   (table tag 6, the record's number as key) in every mode but `none`
//!             data: the copied writes' sealed bytes, one after the other
//!             zero padding to a whole block
//!   hash = XXH3-64 of the header's first 24 bytes, head and data
//! ```
//!
//! A checkpoint syncs the data device, commits redb durably with `wal_start` set to the next
//! record's number, and starts the log again at offset 0. It comes when the next record
//! would not fit, after `CHECKPOINT_RECORDS` records, and when the store closes.
//!
//! Opening replays: from offset 0, the records numbered `wal_start`, `wal_start + 1`, ...
//! while each is whole (its hash matches). A torn record is always the last one: the next is
//! written only after it was synced. Every replayed record's copied blocks are written
//! again, except blocks that a record at or after it freed (one of those may since hold a
//! later write's data). Then the metadata of the records past `wal_applied` (the superblock
//! row each logged commit sets, so redb says which records it holds whatever commit of it
//! survived) is applied in order, and a checkpoint ends the replay.
//!
//! The hash finds torn and stale records. The sealed head keeps the usage deltas, the block
//! layout and the row keys from being read or altered on the disk: a record whose hash
//! matches but whose head fails to open makes the open fail (`Scan::damaged`) instead of
//! being taken for the log's end. So does a record that is not whole while the next one
//! is, somewhere after it: a record is written only once the one before it was synced, so
//! that one was whole and was damaged since, and the acknowledged writes after it must not
//! be dropped as if the log ended there. The copied blocks are the same bytes the data
//! device holds (ciphertext in every mode but `none`).

use crate::allocator::Run;
use crate::device::{AlignedBuf, Device, FileDevice, WritePiece, BLOCK_SIZE_BYTES};
use crate::metadata::{MetaOp, Table};
use crate::usage::Delta;
use map::PoolId;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::sync::Mutex;

pub(crate) const WAL_FILE: &str = "wal";
/// The log's size: an eighth of the data device, within these bounds.
pub(crate) const WAL_BYTES_MIN: u64 = 1 << 20;
pub(crate) const WAL_BYTES_MAX: u64 = 64 << 20;
/// Most bytes of small writes one record copies; a group with more syncs the data device
/// instead and logs only its metadata.
pub(crate) const INLINE_BYTES_MAX: u64 = 1 << 20;
/// Records between checkpoints at most. redb keeps the pages that commits without a sync
/// free until a durable commit, so this bounds how far its file grows meanwhile. A
/// checkpoint writes every page changed since the last (about 800 at 512 records of random
/// 4 KiB writes) on some group's path: at 512 that group's write took 10–17 ms once in a
/// thousand at queue depth 1, at 2,048 under 4 ms (docs/benchmarks.md).
pub(crate) const CHECKPOINT_RECORDS: u64 = 2048;

const MAGIC: &[u8; 4] = b"CWAL";
const HEADER_BYTES: usize = 32;
const BLOCK: u64 = BLOCK_SIZE_BYTES;

/// The log's size for a data device of `data_bytes`.
pub(crate) fn wal_bytes_for(data_bytes: u64) -> u64 {
    (data_bytes / 8).clamp(WAL_BYTES_MIN, WAL_BYTES_MAX) / BLOCK * BLOCK
}

/// What a record holds besides the copied bytes.
#[derive(Serialize)]
struct HeadRef<'a> {
    meta: Flat<'a>,
    usage: &'a [(PoolId, Delta)],
    freed: &'a [Run],
    writes: &'a [(u64, u64)],
}

/// The metadata changes of a group's batches, one after the other: written as one sequence,
/// read back as a `Vec<MetaOp>`.
struct Flat<'a>(&'a [&'a [MetaOp]]);

impl Serialize for Flat<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let len = self.0.iter().map(|ops| ops.len()).sum();
        let mut seq = serializer.serialize_seq(Some(len))?;
        for op in self.0.iter().flat_map(|ops| ops.iter()) {
            seq.serialize_element(op)?;
        }
        seq.end()
    }
}

#[derive(Deserialize, Debug, PartialEq)]
struct Head {
    meta: Vec<MetaOp>,
    usage: Vec<(PoolId, Delta)>,
    freed: Vec<Run>,
    writes: Vec<(u64, u64)>,
}

/// One group's changes, as a record carries them.
pub(crate) struct Entry<'a> {
    /// Each batch's metadata changes, in order.
    pub meta: &'a [&'a [MetaOp]],
    pub usage: &'a [(PoolId, Delta)],
    pub freed: &'a [Run],
    /// Small writes whose bytes the record copies (empty when the data device was synced).
    pub writes: &'a [WritePiece<'a>],
}

/// A record read back from the log.
#[derive(Debug, PartialEq)]
pub(crate) struct Replayed {
    pub seq: u64,
    pub meta: Vec<MetaOp>,
    pub usage: Vec<(PoolId, Delta)>,
    pub freed: Vec<Run>,
    /// Each copied write: its device offset and its bytes.
    pub writes: Vec<(u64, Vec<u8>)>,
}

/// The key a record's head is sealed under: its number.
pub(crate) fn head_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// Encodes a record: whole blocks, in an aligned buffer ready for direct IO. `seal` seals
/// the head (the identity in mode `none`).
pub(crate) fn encode(
    seq: u64,
    entry: &Entry<'_>,
    seal: impl FnOnce(Vec<u8>) -> Vec<u8>,
) -> AlignedBuf {
    let writes: Vec<(u64, u64)> = entry
        .writes
        .iter()
        .map(|w| (w.offset_bytes, w.buffer.len() as u64))
        .collect();
    let head = postcard::to_allocvec(&HeadRef {
        meta: Flat(entry.meta),
        usage: entry.usage,
        freed: entry.freed,
        writes: &writes,
    })
    .expect("serialising a record to memory cannot fail");
    let head = seal(head);
    let data_len: usize = entry.writes.iter().map(|w| w.buffer.len()).sum();
    let len = HEADER_BYTES + head.len() + data_len;
    let mut buffer = AlignedBuf::for_overwrite(len.div_ceil(BLOCK as usize));
    buffer[..4].copy_from_slice(MAGIC);
    buffer[4..8].copy_from_slice(&(head.len() as u32).to_le_bytes());
    buffer[8..16].copy_from_slice(&(data_len as u64).to_le_bytes());
    buffer[16..24].copy_from_slice(&seq.to_le_bytes());
    let mut at = HEADER_BYTES;
    buffer[at..at + head.len()].copy_from_slice(&head);
    at += head.len();
    for write in entry.writes {
        buffer[at..at + write.buffer.len()].copy_from_slice(write.buffer);
        at += write.buffer.len();
    }
    buffer[len..].fill(0);
    let hash = record_hash(&buffer[..24], &buffer[HEADER_BYTES..len]);
    buffer[24..32].copy_from_slice(&hash.to_le_bytes());
    buffer
}

fn record_hash(header: &[u8], body: &[u8]) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(header);
    hasher.update(body);
    hasher.digest()
}

/// Opens the head of record `seq`: its plain bytes, or None if it fails its check.
pub(crate) type OpenHead<'a> = dyn Fn(u64, &[u8]) -> Option<Vec<u8>> + 'a;

/// What is at one place in the log.
enum Found {
    /// The record asked for, whole, and its length in whole blocks.
    Record(Replayed, u64),
    /// Not that record whole: the log ends here.
    End,
    /// That record whole by its hash, but its head does not open or does not make sense.
    Unreadable,
}

/// The record numbered `seq` at the start of `bytes`.
fn decode(bytes: &[u8], seq: u64, open: &OpenHead) -> Found {
    match whole(bytes, seq) {
        None => Found::End,
        Some((head, data, len)) => match open(seq, head).and_then(|head| parse(seq, &head, data)) {
            Some(record) => Found::Record(record, len),
            None => Found::Unreadable,
        },
    }
}

/// The head and data of record `seq` at the start of `bytes` and its length in whole
/// blocks, if it is there and its hash matches.
fn whole(bytes: &[u8], seq: u64) -> Option<(&[u8], &[u8], u64)> {
    let header = bytes.get(..HEADER_BYTES)?;
    let field = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let head_len = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
    let data_len = usize::try_from(field(8)).ok()?;
    if &header[..4] != MAGIC || field(16) != seq {
        return None;
    }
    let len = HEADER_BYTES.checked_add(head_len)?.checked_add(data_len)?;
    let body = bytes.get(HEADER_BYTES..len)?;
    if record_hash(&header[..24], body) != field(24) {
        return None;
    }
    let (head, data) = body.split_at(head_len);
    Some((head, data, (len as u64).div_ceil(BLOCK) * BLOCK))
}

/// A record from its opened head and its data; None if they do not make sense: rows of a
/// table a transaction never writes, copies not in whole aligned blocks, or data that does
/// not match the copies' lengths.
fn parse(seq: u64, head: &[u8], mut data: &[u8]) -> Option<Replayed> {
    let head: Head = postcard::from_bytes(head).ok()?;
    let rows_only = head.meta.iter().all(|op| {
        let (MetaOp::Put { table, .. }
        | MetaOp::Remove { table, .. }
        | MetaOp::RemovePrefix { table, .. }) = op;
        matches!(
            table,
            Table::Objects | Table::Extents | Table::Omap | Table::OmapPaged | Table::Undo
        )
    });
    let mut writes = Vec::with_capacity(head.writes.len());
    for (offset_bytes, len) in head.writes {
        let aligned = offset_bytes % BLOCK == 0 && len % BLOCK == 0 && len > 0;
        let len = usize::try_from(len)
            .ok()
            .filter(|l| aligned && *l <= data.len())?;
        let (bytes, rest) = data.split_at(len);
        writes.push((offset_bytes, bytes.to_vec()));
        data = rest;
    }
    (rows_only && data.is_empty()).then_some(Replayed {
        seq,
        meta: head.meta,
        usage: head.usage,
        freed: head.freed,
        writes,
    })
}

/// What a scan of the log found.
#[derive(Debug)]
pub(crate) struct Scan {
    /// The whole records numbered `first`, `first + 1`, ...
    pub records: Vec<Replayed>,
    /// The number of a record after them that was whole once but does not read now: whole
    /// by its hash with a head that does not open (altered, or sealed under another key),
    /// or not whole with the next record whole further on (altered or lost on the disk).
    pub damaged: Option<u64>,
}

/// The records numbered `first`, `first + 1`, ... from the start of `log`. `open` opens a
/// record's head.
pub(crate) fn scan(log: &[u8], first: u64, open: &OpenHead) -> Scan {
    let mut records = Vec::new();
    let mut at = 0usize;
    loop {
        let seq = first + records.len() as u64;
        match decode(log.get(at..).unwrap_or_default(), seq, open) {
            Found::Record(record, len) => {
                records.push(record);
                at += len as usize;
            }
            Found::End => {
                let after = log.get(at..).unwrap_or_default();
                let damaged = whole_later(after, seq + 1).then_some(seq);
                return Scan { records, damaged };
            }
            Found::Unreadable => {
                return Scan {
                    records,
                    damaged: Some(seq),
                }
            }
        }
    }
}

/// Whether record `seq` is whole at some block of `log` past its first.
fn whole_later(log: &[u8], seq: u64) -> bool {
    log.chunks(BLOCK as usize)
        .enumerate()
        .skip(1)
        .any(|(index, block)| {
            block.get(16..24) == Some(&seq.to_le_bytes()[..])
                && whole(&log[index * BLOCK as usize..], seq).is_some()
        })
}

/// The copied blocks to write again on replay: every block of every record's writes but
/// those freed by that record or a later one. A block freed in the log may have been taken
/// since by a later write, whose data must stay.
pub(crate) fn rewrites(records: &[Replayed]) -> Vec<(u64, &[u8])> {
    let mut freed_since: HashSet<u64> = HashSet::new();
    let mut out = Vec::new();
    for record in records.iter().rev() {
        freed_since.extend(
            record
                .freed
                .iter()
                .flat_map(|run| run.start..run.start + run.len),
        );
        for (offset_bytes, bytes) in &record.writes {
            for (index, chunk) in bytes.chunks(BLOCK as usize).enumerate() {
                let offset = offset_bytes + index as u64 * BLOCK;
                if !freed_since.contains(&(offset / BLOCK)) {
                    out.push((offset, chunk));
                }
            }
        }
    }
    out
}

/// The log file and where the next record goes. Only a group commit's leader (or open)
/// appends, so the lock is never contended.
pub(crate) struct Wal {
    device: FileDevice,
    tail: Mutex<Tail>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Tail {
    /// Where the next record goes.
    pub offset_bytes: u64,
    /// The next record's number.
    pub next_seq: u64,
    /// Records since the last checkpoint.
    pub records: u64,
}

impl Wal {
    /// Creates the log file, zero-filled: its blocks are written once now, so appending
    /// later changes no file metadata and a sync is a flush of data alone.
    pub(crate) fn create(path: &Path, len_bytes: u64) -> io::Result<()> {
        FileDevice::create(path, len_bytes)?;
        let device = FileDevice::open(path)?;
        let zeros = AlignedBuf::zeroed((WAL_BYTES_MIN / BLOCK) as usize);
        let mut at = 0;
        while at < len_bytes {
            let len = (len_bytes - at).min(zeros.len() as u64) as usize;
            device.write_at(at, &zeros[..len])?;
            at += len as u64;
        }
        device.sync()
    }

    /// Opens the log, its next record numbered `next_seq` (the database's `wal_start`, so a
    /// checkpoint before the replay is done writes back the number it read).
    pub(crate) fn open(path: &Path, next_seq: u64) -> io::Result<Wal> {
        Ok(Wal {
            device: FileDevice::open(path)?,
            tail: Mutex::new(Tail {
                offset_bytes: 0,
                next_seq,
                records: 0,
            }),
        })
    }

    /// The whole log, read from the device.
    pub(crate) fn read_all(&self) -> io::Result<AlignedBuf> {
        let mut buffer = AlignedBuf::for_overwrite((self.device.len_bytes() / BLOCK) as usize);
        self.device.read_at(0, &mut buffer)?;
        Ok(buffer)
    }

    pub(crate) fn tail(&self) -> Tail {
        *self.tail.lock().expect("log lock poisoned")
    }

    /// Whether a record of `len_bytes` fits before the log's end with no checkpoint first.
    pub(crate) fn fits(&self, len_bytes: u64) -> bool {
        let tail = self.tail();
        tail.records < CHECKPOINT_RECORDS
            && tail.offset_bytes + len_bytes <= self.device.len_bytes()
    }

    /// Whether a checkpoint is near: the next group whose record is as large as a short
    /// group's may be, or the one after, would make one first.
    pub(crate) fn checkpoint_near(&self) -> bool {
        let tail = self.tail();
        tail.records + 1 >= CHECKPOINT_RECORDS
            || tail.offset_bytes + 2 * (INLINE_BYTES_MAX + BLOCK) > self.device.len_bytes()
    }

    /// Whether a record of `len_bytes` fits in the log at all.
    pub(crate) fn holds(&self, len_bytes: u64) -> bool {
        len_bytes <= self.device.len_bytes()
    }

    /// Writes `record` (numbered `tail().next_seq`) at the tail and syncs it.
    pub(crate) fn append(&self, record: &[u8]) -> io::Result<()> {
        let mut tail = self.tail.lock().expect("log lock poisoned");
        assert!(
            tail.offset_bytes + record.len() as u64 <= self.device.len_bytes(),
            "a record is appended only where it fits"
        );
        self.device.write_at(tail.offset_bytes, record)?;
        self.device.sync()?;
        tail.offset_bytes += record.len() as u64;
        tail.next_seq += 1;
        tail.records += 1;
        Ok(())
    }

    /// Takes back the last record appended, `len_bytes` long, whose group did not land after
    /// all: its first block is zeroed and synced, so no replay finds it, and the next record
    /// goes where it was, with its number.
    pub(crate) fn erase_last(&self, len_bytes: u64) -> io::Result<()> {
        let mut tail = self.tail.lock().expect("log lock poisoned");
        assert!(
            tail.records > 0 && tail.offset_bytes >= len_bytes,
            "only a record appended since the last checkpoint is erased"
        );
        let at = tail.offset_bytes - len_bytes;
        self.device.write_at(at, &AlignedBuf::zeroed(1))?;
        self.device.sync()?;
        tail.offset_bytes = at;
        tail.next_seq -= 1;
        tail.records -= 1;
        Ok(())
    }

    /// Starts the log again at offset 0, after a checkpoint.
    pub(crate) fn restart(&self) {
        let next_seq = self.tail().next_seq;
        self.restart_at(next_seq);
    }

    /// Starts the log at offset 0 with record `next_seq` (after a replay).
    pub(crate) fn restart_at(&self, next_seq: u64) {
        *self.tail.lock().expect("log lock poisoned") = Tail {
            offset_bytes: 0,
            next_seq,
            records: 0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(fill: u8) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(1);
        b.fill(fill);
        b
    }

    fn record(seq: u64, writes: &[(u64, &AlignedBuf)], freed: &[Run]) -> AlignedBuf {
        let meta = vec![MetaOp::Put {
            table: Table::Objects,
            key: seq.to_be_bytes().to_vec(),
            value: vec![1, 2, 3],
        }];
        let pieces: Vec<WritePiece<'_>> = writes
            .iter()
            .map(|(offset_bytes, buffer)| WritePiece {
                offset_bytes: *offset_bytes,
                buffer,
            })
            .collect();
        let usage = [(
            PoolId(7),
            Delta {
                objects: 1,
                stored_bytes: 4096,
                blocks: 1,
            },
        )];
        let entry = Entry {
            meta: &[&meta],
            usage: &usage,
            freed,
            writes: &pieces,
        };
        encode(seq, &entry, |head| head)
    }

    fn plain(_: u64, head: &[u8]) -> Option<Vec<u8>> {
        Some(head.to_vec())
    }

    fn seqs(scan: &Scan) -> Vec<u64> {
        scan.records.iter().map(|r| r.seq).collect()
    }

    fn log_of(records: &[AlignedBuf], len_blocks: usize) -> AlignedBuf {
        let mut log = AlignedBuf::zeroed(len_blocks);
        let mut at = 0;
        for r in records {
            log[at..at + r.len()].copy_from_slice(r);
            at += r.len();
        }
        log
    }

    #[test]
    fn records_read_back_as_written_and_in_whole_blocks() {
        let (a, b) = (block(0xaa), block(0xbb));
        let one = record(5, &[(8 * BLOCK, &a)], &[]);
        let two = record(6, &[(9 * BLOCK, &b)], &[Run { start: 3, len: 2 }]);
        assert_eq!(one.len() % BLOCK as usize, 0);
        let log = log_of(&[one, two], 8);
        let records = scan(&log, 5, &plain).records;
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].seq, 5);
        assert_eq!(records[0].writes, vec![(8 * BLOCK, vec![0xaa; 4096])]);
        assert_eq!(records[1].freed, vec![Run { start: 3, len: 2 }]);
        assert_eq!(records[1].usage[0].1.stored_bytes, 4096);
    }

    /// The scan stops at the first record that is not the next one: a torn last record, a
    /// stale one from before the last checkpoint, or zeros.
    #[test]
    fn a_torn_or_stale_record_ends_the_log() {
        let a = block(1);
        let records: Vec<AlignedBuf> = (10..14)
            .map(|s| record(s, &[(s * BLOCK, &a)], &[]))
            .collect();
        let log = log_of(&records, 16);
        assert_eq!(seqs(&scan(&log, 10, &plain)), vec![10, 11, 12, 13]);
        assert!(
            scan(&log, 11, &plain).records.is_empty(),
            "the log must start with the number asked for"
        );
        let last = records[..3].iter().map(|r| r.len()).sum::<usize>();
        for at in [last, last + 24, last + 40, last + 4100] {
            let mut torn = log_of(&records, 16);
            torn[at] ^= 0x40;
            let found = scan(&torn, 10, &plain);
            assert_eq!(seqs(&found), vec![10, 11, 12], "a flipped byte at {at}");
            assert!(
                found.damaged.is_none(),
                "a torn last record is the log's end"
            );
        }
        // A restarted log: record 20 at offset 0, then a stale 11.. behind it.
        let mut restarted = log_of(&records, 16);
        let new = record(20, &[(2 * BLOCK, &a)], &[]);
        restarted[..new.len()].copy_from_slice(&new);
        assert_eq!(seqs(&scan(&restarted, 20, &plain)), vec![20]);
    }

    /// A record whose hash matches but whose head does not open is reported, not taken for
    /// the end of the log: the replay then refuses to open the store.
    #[test]
    fn a_head_that_does_not_open_is_reported_as_damaged() {
        let a = block(1);
        let records: Vec<AlignedBuf> = (1..4).map(|s| record(s, &[(s * BLOCK, &a)], &[])).collect();
        let log = log_of(&records, 16);
        let refuses_two = |seq: u64, head: &[u8]| (seq != 2).then(|| head.to_vec());
        let found = scan(&log, 1, &refuses_two);
        assert_eq!(seqs(&found), vec![1]);
        assert_eq!(found.damaged, Some(2));
    }

    /// A record that is not whole while the next one is, further on, was damaged after it
    /// was synced (a torn record is always the last): reported, whatever byte changed, so
    /// the records after it are not dropped as if the log ended there.
    #[test]
    fn a_damaged_record_before_whole_ones_is_reported_not_taken_for_the_end() {
        let a = block(1);
        let records: Vec<AlignedBuf> = (10..14)
            .map(|s| record(s, &[(s * BLOCK, &a)], &[]))
            .collect();
        let second = records[0].len();
        for (at, damaged) in [
            (0, 10),
            (4, 10),
            (40, 10),
            (second, 11),
            (second + 4100, 11),
        ] {
            let mut log = log_of(&records, 16);
            log[at] ^= 0x01;
            let found = scan(&log, 10, &plain);
            assert_eq!(found.damaged, Some(damaged), "a flipped byte at {at}");
            assert_eq!(found.records.len() as u64, damaged - 10);
        }
        // A record lost whole (zeroed) is damage too when the next one follows.
        let mut log = log_of(&records, 16);
        log[second..second + records[1].len()].fill(0);
        assert_eq!(scan(&log, 10, &plain).damaged, Some(11));
    }

    /// An erased record is gone from the log, and the next one takes its place and number.
    #[test]
    fn an_erased_record_is_not_replayed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(WAL_FILE);
        Wal::create(&path, WAL_BYTES_MIN).expect("create");
        let wal = Wal::open(&path, 1).expect("open");
        let a = block(7);
        let first = record(1, &[(3 * BLOCK, &a)], &[]);
        wal.append(&first).expect("append");
        let second = record(2, &[(4 * BLOCK, &a)], &[]);
        wal.append(&second).expect("append");
        wal.erase_last(second.len() as u64).expect("erase");
        assert_eq!(
            seqs(&scan(&wal.read_all().expect("read"), 1, &plain)),
            vec![1]
        );
        assert_eq!(wal.tail().next_seq, 2);
        let again = record(2, &[(5 * BLOCK, &a)], &[]);
        wal.append(&again).expect("append");
        let records = scan(&wal.read_all().expect("read"), 1, &plain).records;
        assert_eq!(
            records[1].writes[0].0,
            5 * BLOCK,
            "the new record 2 took the old one's place"
        );
    }

    /// The story: record 1 copied block 9, record 2 freed it, a large write then took it
    /// with its own (synced) data. Writing record 1's copy again would destroy that data.
    #[test]
    fn replay_skips_copies_of_blocks_freed_later() {
        let (a, b) = (block(1), block(2));
        let log = log_of(
            &[
                record(1, &[(9 * BLOCK, &a), (4 * BLOCK, &b)], &[]),
                record(2, &[], &[Run { start: 8, len: 2 }]),
                record(3, &[(5 * BLOCK, &b)], &[Run { start: 5, len: 1 }]),
            ],
            16,
        );
        let records = scan(&log, 1, &plain).records;
        let offsets: Vec<u64> = rewrites(&records).iter().map(|(o, _)| o / BLOCK).collect();
        assert_eq!(
            offsets,
            vec![4],
            "9 freed by record 2; 5 freed by its own record"
        );
    }
}
