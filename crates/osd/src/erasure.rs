//! Objects of erasure-coded PGs on their primary (docs/design/erasure.md, §5, §6 and §8):
//! a client's write becomes one shard write per holder, planned by `ec::plan`; a read
//! gathers the data shards' units, decoding from k shards where one cannot be read. What
//! a write does to each shard is decided here without IO ([`data_change`],
//! [`shard_writes`], [`data_pieces`]); the rest is the thin part that reads shards from
//! this OSD's store and from the other holders.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use ec::{Coder, Piece, Profile, BLOCK_BYTES};
use map::placement::{OsdId, PgId};
use map::ObjectName;
use messenger::message::{
    ChunkSeal, Claim, ObjectOp, OpResult, OsdReply, OsdRequest, PeerOp, ShardHead, Version,
    CHUNK_BYTES, CHUNK_SEAL_BYTES,
};
use messenger::DATA_BYTES_MAX;

use store::Via;

use crate::objects;
use crate::recovery::Side;
use crate::OsdState;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A chunk's seal record as a code word: parity shards of a pool sealed at the edge keep,
/// beside each block, the parity of the data shards' words at that block
/// (docs/design/erasure.md, §11). A hole's word is zeros.
pub type Word = [u8; CHUNK_SEAL_BYTES];

/// Bytes of pieces of shards, with the words of their blocks in a pool sealed at the edge.
pub type Sealed = (Vec<u8>, Vec<Word>);

pub fn word_of(seal: Option<ChunkSeal>) -> Word {
    seal.map_or([0; CHUNK_SEAL_BYTES], |seal| seal.to_bytes())
}

/// The seal a word stands for; zeros are a hole.
pub fn seal_of_word(word: &Word) -> Option<ChunkSeal> {
    (word != &[0; CHUNK_SEAL_BYTES]).then(|| ChunkSeal::from_bytes(word))
}

fn words_of(seals: &[Option<ChunkSeal>]) -> Vec<Word> {
    seals.iter().map(|seal| word_of(*seal)).collect()
}

/// The words of shard `shard`, rebuilt block by block from the words of the shards read
/// (`words`, by position; `None` where not read), each block's words one code word.
fn rebuild_words(
    coder: &mut Coder,
    words: &[Option<Vec<Word>>],
    shard: usize,
) -> Result<Vec<Word>, ec::CodeError> {
    let blocks = words.iter().flatten().map(Vec::len).next().unwrap_or(0);
    (0..blocks)
        .map(|block| {
            let mut row: Vec<Option<Word>> = words
                .iter()
                .map(|read| read.as_ref().map(|read| read[block]))
                .collect();
            coder.reconstruct_words(&mut row)?;
            Ok(row[shard].expect("reconstructed"))
        })
        .collect()
}

/// What a client's write does to an erasure-coded object's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataChange {
    /// Its attributes only, or a create.
    None,
    Full {
        len: u64,
    },
    Range {
        offset: u64,
        len: u64,
    },
    /// Zeros over a range, as a write of zeros there is.
    Zero {
        offset: u64,
        len: u64,
    },
    /// A new size: shrinking zeroes what the last stripe keeps past it (so parity stays
    /// what the data shards encode to), then cuts every shard; growing adds zeros, whose
    /// parity is zeros.
    Truncate {
        size: u64,
    },
    Remove,
}

impl DataChange {
    /// The range of the object this change writes, as bytes of `data` or zeros, in an object
    /// of `old_size` bytes under `profile`.
    pub fn written(self, profile: Profile, old_size: u64) -> Option<(u64, u64)> {
        match self {
            DataChange::Range { offset, len } | DataChange::Zero { offset, len } => {
                Some((offset, len))
            }
            DataChange::Truncate { size } if size < old_size => {
                let kept = profile.stripes(size) * profile.width_bytes();
                Some((size, kept.min(old_size) - size)).filter(|(_, len)| *len > 0)
            }
            _ => None,
        }
    }

    /// The object's size after this change, from `old_size`.
    pub fn new_size(self, old_size: u64) -> u64 {
        match self {
            DataChange::None => old_size,
            DataChange::Full { len } => len,
            DataChange::Range { offset, len } | DataChange::Zero { offset, len } => {
                old_size.max(offset.saturating_add(len))
            }
            DataChange::Truncate { size } => size,
            DataChange::Remove => 0,
        }
    }
}

/// What a write's ops do to an erasure-coded object of pool `pool`, or why the pool does
/// not take them: omap lives in replicated pools; a request changes the bytes once.
pub fn data_change(pool: &str, ops: &[ObjectOp]) -> Result<DataChange, OsdReply> {
    let refuse = |why: String| {
        Err(OsdReply::Failed(format!(
            "pool {pool} is erasure-coded: {why}"
        )))
    };
    let mut change = DataChange::None;
    let mut others = false;
    for op in ops {
        let next = match op {
            _ if op.is_condition() => continue,
            ObjectOp::Create { .. } | ObjectOp::SetAttr { .. } | ObjectOp::RemoveAttr { .. } => {
                others = true;
                continue;
            }
            ObjectOp::WriteFull { len } => DataChange::Full { len: *len },
            ObjectOp::Write { offset, len } => DataChange::Range {
                offset: *offset,
                len: *len,
            },
            ObjectOp::Zero { len, .. } if *len > DATA_BYTES_MAX as u64 => {
                return refuse(format!(
                    "a Zero of {len} bytes; one zeroes at most {DATA_BYTES_MAX} bytes of an \
                     erasure-coded object"
                ))
            }
            ObjectOp::Zero { offset, len } => DataChange::Zero {
                offset: *offset,
                len: *len,
            },
            ObjectOp::Truncate { size } if *size > ec::OBJECT_BYTES_MAX => {
                return refuse(format!(
                    "a size of {size} bytes is past an object's limit of {} bytes",
                    ec::OBJECT_BYTES_MAX
                ))
            }
            ObjectOp::Truncate { size } => DataChange::Truncate { size: *size },
            ObjectOp::Remove => DataChange::Remove,
            ObjectOp::OmapSet { .. } | ObjectOp::OmapRemove { .. } | ObjectOp::OmapClear => {
                return refuse("omap lives in a replicated pool".into())
            }
            other => return refuse(format!("{other:?} is not served on its objects yet (#33)")),
        };
        if change != DataChange::None {
            return refuse(
                "one request changes an object's bytes once (one WriteFull, Write, Zero, \
                 Truncate or Remove)"
                    .into(),
            );
        }
        change = next;
    }
    if change == DataChange::Remove && others {
        return refuse("a Remove goes alone (with its conditions)".into());
    }
    Ok(change)
}

/// One shard's part of a write: its ops and the bytes they take, in order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ShardWrite {
    pub ops: Vec<ObjectOp>,
    pub data: Vec<u8>,
}

/// Each of `profile`'s shards' part of a write that makes `change`, with the attribute
/// ops `attrs` (create, set and remove attributes, for every shard) and the shard bytes it
/// changes, `written` (pieces and their bytes: for a whole write, each shard whole from 0);
/// a truncate then cuts or extends every shard to the new size's stripes.
pub fn shard_writes(
    profile: Profile,
    change: DataChange,
    attrs: &[ObjectOp],
    written: Vec<(Piece, Vec<u8>)>,
) -> Vec<ShardWrite> {
    let mut out: Vec<ShardWrite> = (0..profile.shards())
        .map(|_| ShardWrite::default())
        .collect();
    for shard in &mut out {
        shard.ops.push(match change {
            DataChange::Remove => ObjectOp::Remove,
            DataChange::Full { .. } => ObjectOp::WriteFull { len: 0 },
            DataChange::None
            | DataChange::Range { .. }
            | DataChange::Zero { .. }
            | DataChange::Truncate { .. } => ObjectOp::Create { exclusive: false },
        });
        shard.ops.extend(attrs.iter().cloned());
    }
    for (piece, bytes) in written {
        assert_eq!(
            piece.len,
            bytes.len() as u64,
            "a piece's bytes are its length"
        );
        let shard = &mut out[piece.shard];
        match change {
            DataChange::Full { .. } => {
                assert_eq!(piece.offset, 0, "a whole write's shards start at 0");
                shard.ops[0] = ObjectOp::WriteFull { len: piece.len };
            }
            DataChange::Range { .. } | DataChange::Zero { .. } | DataChange::Truncate { .. } => {
                // A shard's pieces come stripe after stripe: one that begins where the
                // last ended extends it (a 4 MiB write at 4+2 is one write per shard, not
                // 256 of one unit each), its bytes following the last's in `data`.
                match shard.ops.last_mut() {
                    Some(ObjectOp::Write { offset, len }) if *offset + *len == piece.offset => {
                        *len += piece.len;
                    }
                    _ => shard.ops.push(ObjectOp::Write {
                        offset: piece.offset,
                        len: piece.len,
                    }),
                }
            }
            DataChange::None | DataChange::Remove => {
                unreachable!("a write that changes no bytes writes no shard bytes")
            }
        }
        shard.data.extend_from_slice(&bytes);
    }
    if let DataChange::Truncate { size } = change {
        let len = profile.shard_bytes(size);
        for shard in &mut out {
            shard.ops.push(ObjectOp::Truncate { size: len });
        }
    }
    out
}

/// The shard bytes holding the object's bytes `[offset, end)`, in the object's order: one
/// piece per unit touched.
pub fn data_pieces(profile: Profile, offset: u64, end: u64) -> Vec<Piece> {
    let unit = profile.unit_bytes();
    let mut pieces = Vec::new();
    let mut at = offset;
    while at < end {
        let (shard, shard_offset) = profile.locate(at);
        let len = (unit - shard_offset % unit).min(end - at);
        pieces.push(Piece {
            shard,
            offset: shard_offset,
            len,
        });
        at += len;
    }
    pieces
}

/// `ranges` (offset, length) with each run of adjacent ones merged: the same bytes in the
/// same order, in fewer reads. A read of many stripes asks each shard for one unit per
/// stripe, which lie end to end on the shard: 256 ranges of a 4 MiB object's data shard at
/// 4+2 become one.
pub fn coalesce(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(offset, len) in ranges {
        match merged.last_mut() {
            Some((at, run)) if *at + *run == offset => *run += len,
            _ => merged.push((offset, len)),
        }
    }
    merged
}

/// The whole code blocks ([`BLOCK_BYTES`]) around `ranges` of a shard, in offset order,
/// overlapping and adjacent ones merged: what to read of k other shards to decode them
/// (the code works block by block, so the same spans of each shard decode as one).
pub fn block_spans(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut blocks: Vec<(u64, u64)> = ranges
        .iter()
        .map(|&(offset, len)| {
            let lo = offset / BLOCK_BYTES * BLOCK_BYTES;
            (lo, (offset + len).div_ceil(BLOCK_BYTES) * BLOCK_BYTES - lo)
        })
        .collect();
    blocks.sort_unstable();
    let mut spans: Vec<(u64, u64)> = Vec::with_capacity(blocks.len());
    for (offset, len) in blocks {
        match spans.last_mut() {
            Some((at, run)) if *at + *run >= offset => *run = (*run).max(offset + len - *at),
            _ => spans.push((offset, len)),
        }
    }
    spans
}

/// Where shard offset `offset` lies in the bytes of `spans` read end to end; it must lie
/// in one of them.
fn span_position(spans: &[(u64, u64)], offset: u64) -> usize {
    let mut before = 0;
    for &(at, len) in spans {
        if (at..at + len).contains(&offset) {
            return (before + offset - at) as usize;
        }
        before += len;
    }
    unreachable!("offset {offset} lies in the spans made around it")
}

/// The shard bytes of a whole write of `data`: each of the k + m shards whole, from 0.
pub fn encode_whole(profile: Profile, data: &[u8]) -> Result<Vec<(Piece, Vec<u8>)>, OsdReply> {
    let len = profile.shard_bytes(data.len() as u64);
    let shards = Coder::new(profile)
        .encode_object(data)
        .map_err(|e| OsdReply::Failed(format!("encoding: {e}")))?;
    Ok(shards
        .into_iter()
        .enumerate()
        .map(|(shard, bytes)| {
            (
                Piece {
                    shard,
                    offset: 0,
                    len,
                },
                bytes,
            )
        })
        .collect())
}

/// One byte change of a request to an object of a pool sealed at the edge, in the
/// request's order (a client may send several: a replace truncates to 0 then writes, a
/// retry rewrites an old partial tail chunk before its own chunks, a truncate rewrites the
/// chunk it cuts inside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EdgeStep {
    /// Chunks from `first`, their bytes from byte `at` of the request's data; the object
    /// becomes at least `end` bytes.
    Chunks {
        first: u64,
        seals: Vec<ChunkSeal>,
        end: u64,
        at: usize,
    },
    /// Whole chunks `[first, first + count)` become holes; the object becomes at least
    /// their end.
    Zero {
        first: u64,
        count: u64,
    },
    Truncate {
        size: u64,
    },
}

/// The byte changes of a request to an object of a pool sealed at the edge, in order, or
/// `None` when it changes none (it creates, removes, or sets attributes only).
pub fn edge_steps(ops: &[ObjectOp]) -> Option<Vec<EdgeStep>> {
    let mut at = 0usize;
    let steps: Vec<EdgeStep> = ops
        .iter()
        .filter_map(|op| match op {
            ObjectOp::WriteChunks { first, seals, end } => {
                let step = EdgeStep::Chunks {
                    first: *first,
                    seals: seals.clone(),
                    end: *end,
                    at,
                };
                at += seals.len() * CHUNK_BYTES as usize;
                Some(step)
            }
            // Whole chunks: `check_seal` refuses any other Zero in an edge pool.
            ObjectOp::Zero { offset, len } => Some(EdgeStep::Zero {
                first: offset / CHUNK_BYTES,
                count: len / CHUNK_BYTES,
            }),
            ObjectOp::Truncate { size } => Some(EdgeStep::Truncate { size: *size }),
            _ => None,
        })
        .collect();
    (!steps.is_empty()).then_some(steps)
}

/// Refuses what an erasure-coded pool sealed at the edge does not take in a request that
/// changes bytes (`WriteChunks`, `Zero`, `Truncate`): omap, which lives in a replicated
/// pool; a remove beside them; a zero of more than one request's data.
pub fn check_edge_ops(pool: &str, ops: &[ObjectOp]) -> Result<(), OsdReply> {
    if edge_steps(ops).is_none() {
        return Ok(());
    }
    for op in ops {
        let why = match op {
            ObjectOp::OmapSet { .. } | ObjectOp::OmapRemove { .. } | ObjectOp::OmapClear => {
                "omap lives in a replicated pool".to_string()
            }
            ObjectOp::Remove => "a Remove goes alone (with its conditions)".into(),
            ObjectOp::Zero { len, .. } if *len > DATA_BYTES_MAX as u64 => format!(
                "a Zero of {len} bytes; one zeroes at most {DATA_BYTES_MAX} bytes of an \
                 erasure-coded object"
            ),
            _ => continue,
        };
        return Err(OsdReply::Failed(format!(
            "pool {pool} is erasure-coded: {why}"
        )));
    }
    Ok(())
}

/// Rows one request may change: each parity shard's part of it is a block per row, and
/// travels in one message.
const ROWS_MAX: u64 = DATA_BYTES_MAX as u64 / CHUNK_BYTES;

/// The partial last chunk of an object of `size` bytes that `step` grows it past without
/// replacing it (a chunk write over it, or a zero of it, replaces it), if any.
fn exposed_tail(step: &EdgeStep, size: u64) -> Option<u64> {
    let (grows_to, replaced) = match step {
        EdgeStep::Chunks {
            first, seals, end, ..
        } => (*end, *first..first + seals.len() as u64),
        EdgeStep::Zero { first, count } => ((first + count) * CHUNK_BYTES, *first..first + count),
        EdgeStep::Truncate { size: to } => (*to, 0..0),
    };
    let tail = size / CHUNK_BYTES;
    (grows_to > size && !size.is_multiple_of(CHUNK_BYTES) && !replaced.contains(&tail))
        .then_some(tail)
}

/// The chunks a step writes or zeroes.
fn step_chunks(step: &EdgeStep) -> u64 {
    match step {
        EdgeStep::Chunks { seals, .. } => seals.len() as u64,
        EdgeStep::Zero { count, .. } => *count,
        EdgeStep::Truncate { .. } => 0,
    }
}

/// A chunk's content after a write: its bytes from the request's data with its seal, or a
/// hole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NewChunk {
    Written { at: usize, seal: ChunkSeal },
    Hole,
}

/// A write to an object of a pool sealed at the edge, planned row by row: a row is one
/// block of every shard at the same shard offset, k chunks and their m parity blocks, and
/// its parity (of the bytes, and of the chunks' records as words) depends on that row
/// alone. Every row a write touches is encoded whole from its k chunks: those the write
/// sets, holes, and the old ones read (docs/design/erasure.md, §11).
#[derive(Debug)]
pub struct EdgePlan {
    profile: Profile,
    old_size: u64,
    /// The smallest size the object had during the request: chunks from it on that the
    /// request does not set are holes.
    cut: u64,
    size: u64,
    chunks: BTreeMap<u64, NewChunk>,
    /// Old partial last chunks the request grows the object past without replacing them:
    /// it is refused if one is sealed (its bytes past the old end are the client's to
    /// zero), as a replicated pool's store refuses it.
    tails: Vec<u64>,
}

impl EdgePlan {
    pub fn new(profile: Profile, old_size: u64, steps: &[EdgeStep]) -> Result<EdgePlan, OsdReply> {
        let (mut size, mut cut) = (old_size, old_size);
        let mut chunks = BTreeMap::new();
        let mut tails = Vec::new();
        let past_limit = |first: u64, count: u64| {
            first
                .checked_add(count)
                .and_then(|end| end.checked_mul(CHUNK_BYTES))
                .is_none_or(|end| end > ec::OBJECT_BYTES_MAX)
        };
        for step in steps {
            match step {
                EdgeStep::Chunks { first, .. } | EdgeStep::Zero { first, .. }
                    if past_limit(*first, step_chunks(step)) =>
                {
                    return Err(OsdReply::Failed(format!(
                        "chunks {first} to {} are past an object's limit of {} bytes",
                        first.saturating_add(step_chunks(step)),
                        ec::OBJECT_BYTES_MAX
                    )));
                }
                EdgeStep::Chunks {
                    first, seals, end, ..
                } if *end <= (first + seals.len() as u64 - 1) * CHUNK_BYTES
                    || *end > (first + seals.len() as u64) * CHUNK_BYTES =>
                {
                    return Err(OsdReply::Failed(format!(
                        "a chunk write's end ({end}) lies outside its last chunk ({})",
                        first + seals.len() as u64 - 1
                    )));
                }
                _ => {}
            }
            if let Some(tail) = exposed_tail(step, size) {
                match chunks.get(&tail) {
                    Some(NewChunk::Written { .. }) => {
                        return Err(OsdReply::Failed(format!(
                            "the request grows the object past chunk {tail}, which it writes \
                             up to byte {size}: write that chunk whole, zeros past the end"
                        )))
                    }
                    Some(NewChunk::Hole) => {}
                    None if tail < cut.div_ceil(CHUNK_BYTES) => tails.push(tail),
                    None => {}
                }
            }
            match step {
                EdgeStep::Chunks {
                    first,
                    seals,
                    end,
                    at,
                } => {
                    for (i, seal) in seals.iter().enumerate() {
                        let at = at + i * CHUNK_BYTES as usize;
                        chunks.insert(first + i as u64, NewChunk::Written { at, seal: *seal });
                    }
                    size = size.max(*end);
                }
                EdgeStep::Zero { first, count } => {
                    chunks.extend((*first..first + count).map(|c| (c, NewChunk::Hole)));
                    size = size.max((first + count) * CHUNK_BYTES);
                }
                EdgeStep::Truncate { size: to } => {
                    size = *to;
                    cut = cut.min(size);
                    chunks.retain(|c, _| *c < size.div_ceil(CHUNK_BYTES));
                }
            }
        }
        if size > ec::OBJECT_BYTES_MAX {
            return Err(OsdReply::Failed(format!(
                "a size of {size} bytes is past an object's limit of {} bytes",
                ec::OBJECT_BYTES_MAX
            )));
        }
        let plan = EdgePlan {
            profile,
            old_size,
            cut,
            size,
            chunks,
            tails,
        };
        // Each parity shard gets a block per row: one request's rows fit in one message.
        let rows = plan.rows().len() as u64;
        if rows > ROWS_MAX {
            return Err(OsdReply::Failed(format!(
                "the request changes {rows} rows of the object's shards; one changes at most \
                 {ROWS_MAX} ({} MiB of each shard)",
                (ROWS_MAX * CHUNK_BYTES) >> 20
            )));
        }
        Ok(plan)
    }

    /// The old partial last chunks to check before the write: it is refused
    /// (`Mismatch`) if one is sealed.
    pub fn tails(&self) -> &[u64] {
        &self.tails
    }

    /// The object's size after the write.
    pub fn size(&self) -> u64 {
        self.size
    }

    fn blocks_per_unit(&self) -> u64 {
        self.profile.unit_bytes() / CHUNK_BYTES
    }

    /// The row and data position of chunk `chunk`.
    fn place(&self, chunk: u64) -> (u64, usize) {
        let (position, offset) = self.profile.locate(chunk * CHUNK_BYTES);
        (offset / CHUNK_BYTES, position)
    }

    /// The chunk at data position `position` of row `row`.
    fn chunk_at(&self, row: u64, position: usize) -> u64 {
        let per_unit = self.blocks_per_unit();
        let (stripe, block) = (row / per_unit, row % per_unit);
        (stripe * self.profile.k() as u64 + position as u64) * per_unit + block
    }

    /// Chunks past the cut that held bytes before it, in the rows the shards keep past the
    /// cut: they become holes although no step names them.
    fn cut_chunks(&self) -> std::ops::Range<u64> {
        let kept_rows = self.profile.shard_bytes(self.cut) / CHUNK_BYTES;
        let from = self.cut.div_ceil(CHUNK_BYTES);
        let to = self.old_size.div_ceil(CHUNK_BYTES);
        // Only the cut's own stripe keeps rows past it.
        let stripe_end =
            kept_rows / self.blocks_per_unit() * self.blocks_per_unit() * self.profile.k() as u64;
        from..to.min(stripe_end).max(from)
    }

    /// The new content of chunk `chunk`, or `None` when it keeps its old bytes.
    fn new_chunk(&self, chunk: u64) -> Option<NewChunk> {
        match self.chunks.get(&chunk) {
            Some(new) => Some(*new),
            None if chunk >= self.cut.div_ceil(CHUNK_BYTES) => Some(NewChunk::Hole),
            None => None,
        }
    }

    /// The rows the write encodes again, in order.
    pub fn rows(&self) -> BTreeSet<u64> {
        self.chunks
            .keys()
            .copied()
            .chain(self.cut_chunks())
            .map(|c| self.place(c).0)
            .collect()
    }

    /// The old chunks the rows need: one block of a data shard each.
    pub fn reads(&self) -> Vec<Piece> {
        let mut pieces = Vec::new();
        for row in self.rows() {
            for position in 0..self.profile.k() {
                if self.new_chunk(self.chunk_at(row, position)).is_none() {
                    pieces.push(Piece {
                        shard: position,
                        offset: row * CHUNK_BYTES,
                        len: CHUNK_BYTES,
                    });
                }
            }
        }
        pieces
    }

    /// Each shard's part of the write, with the attribute ops `attrs`: the request's
    /// `data`, and `old`, what was read of [`EdgePlan::reads`] (bytes and one word each).
    pub fn shard_writes(
        &self,
        attrs: &[ObjectOp],
        data: &[u8],
        old: Vec<Sealed>,
    ) -> Result<Vec<ShardWrite>, OsdReply> {
        let (k, n) = (self.profile.k(), self.profile.shards());
        let block = CHUNK_BYTES as usize;
        let mut old = old.iter();
        let mut coder = Coder::new(self.profile);
        let mut out: Vec<ShardWrite> = (0..n)
            .map(|_| ShardWrite {
                ops: std::iter::once(ObjectOp::Create { exclusive: false })
                    .chain(attrs.iter().cloned())
                    .collect(),
                data: Vec::new(),
            })
            .collect();
        // The shards' length: cut first, so the rows past the cut are holes, then set to
        // the new size's once the rows are written.
        let mut len = self.profile.shard_bytes(self.old_size);
        let cut_len = self.profile.shard_bytes(self.cut);
        if cut_len < len {
            for shard in &mut out {
                shard.ops.push(ObjectOp::Truncate { size: cut_len });
            }
            len = cut_len;
        }
        let zeros = vec![0u8; block];
        let old_chunks = self.old_size.div_ceil(CHUNK_BYTES);
        for row in self.rows() {
            // The row's chunks where they lie (the request's data, the reads, zeros): only
            // the shards' parts copy them.
            let mut bytes: Vec<&[u8]> = Vec::with_capacity(k);
            let mut words: Vec<Word> = Vec::with_capacity(k);
            let mut changed = Vec::with_capacity(k);
            for position in 0..k {
                let chunk = self.chunk_at(row, position);
                let (b, w, change) = match self.new_chunk(chunk) {
                    Some(NewChunk::Written { at, seal }) => {
                        let piece = data.get(at..at + block).ok_or_else(|| {
                            OsdReply::Failed(format!(
                                "{} data bytes sent, the chunk ops use more",
                                data.len()
                            ))
                        })?;
                        (piece, seal.to_bytes(), Some(Some(seal)))
                    }
                    // Past the old end, or in a row the cut took, nothing is stored: a hole
                    // there needs no write.
                    Some(NewChunk::Hole)
                        if (chunk >= old_chunks || row >= len / CHUNK_BYTES)
                            && !self.chunks.contains_key(&chunk) =>
                    {
                        (&zeros[..], [0; CHUNK_SEAL_BYTES], None)
                    }
                    Some(NewChunk::Hole) => (&zeros[..], [0; CHUNK_SEAL_BYTES], Some(None)),
                    None => {
                        let (b, w) = old.next().expect("a read for each old chunk");
                        (&b[..], w[0], None)
                    }
                };
                bytes.push(b);
                words.push(w);
                changed.push(change);
            }
            for (position, change) in changed.into_iter().enumerate() {
                match change {
                    Some(Some(seal)) => push_block(&mut out[position], row, seal, bytes[position]),
                    Some(None) => push_zero(&mut out[position], row),
                    None => {}
                }
            }
            // A row of holes (a written chunk's seal is never zeros, `check_seal`) has zero
            // parity: holes too, where the shards hold the row.
            if words.iter().all(|w| w == &[0; CHUNK_SEAL_BYTES]) {
                if row < len / CHUNK_BYTES {
                    for shard in &mut out[k..] {
                        push_zero(shard, row);
                    }
                }
                continue;
            }
            let parity = coder
                .parity(&bytes)
                .map_err(|e| OsdReply::Failed(format!("encoding: {e}")))?;
            let parity_words = coder
                .word_parity(&words)
                .map_err(|e| OsdReply::Failed(format!("encoding records: {e}")))?;
            for (i, (p, w)) in parity.iter().zip(&parity_words).enumerate() {
                push_block(&mut out[k + i], row, ChunkSeal::from_bytes(w), p);
            }
        }
        // Each shard whose writes leave it another length is cut or extended to the new
        // size's.
        let new_len = self.profile.shard_bytes(self.size);
        for shard in &mut out {
            let end = shard.ops.iter().fold(len, |end, op| match op {
                ObjectOp::WriteChunks { end: to, .. } => end.max(*to),
                ObjectOp::Zero { offset, len } => end.max(offset + len),
                _ => end,
            });
            if end != new_len {
                shard.ops.push(ObjectOp::Truncate { size: new_len });
            }
        }
        Ok(out)
    }
}

/// Adds block `row` of a shard, sealed as `seal`, to its write: to the chunk write that
/// ends there, or as a new one.
fn push_block(shard: &mut ShardWrite, row: u64, seal: ChunkSeal, bytes: &[u8]) {
    match shard.ops.last_mut() {
        Some(ObjectOp::WriteChunks { first, seals, end }) if *first + seals.len() as u64 == row => {
            seals.push(seal);
            *end += CHUNK_BYTES;
        }
        _ => shard.ops.push(ObjectOp::WriteChunks {
            first: row,
            seals: vec![seal],
            end: (row + 1) * CHUNK_BYTES,
        }),
    }
    shard.data.extend_from_slice(bytes);
}

/// Makes block `row` of a shard a hole.
fn push_zero(shard: &mut ShardWrite, row: u64) {
    match shard.ops.last_mut() {
        Some(ObjectOp::Zero { offset, len }) if *offset + *len == row * CHUNK_BYTES => {
            *len += CHUNK_BYTES;
        }
        _ => shard.ops.push(ObjectOp::Zero {
            offset: row * CHUNK_BYTES,
            len: CHUNK_BYTES,
        }),
    }
}

/// Where a PG's shards are read from: the primary's view, taken under the PG's lock.
pub struct Shards<'a> {
    pub inner: &'a OsdState,
    pub pg: PgId,
    pub profile: Profile,
    /// Each position's holder to read from (`Interval::shard_holders`).
    pub holders: Vec<Option<OsdId>>,
    /// The positions whose holder's store found its shard damaged (an integrity check
    /// failed), since this was made.
    damaged: Mutex<BTreeSet<usize>>,
    /// Where the holders read: the data device itself for scrub.
    via: Via,
    /// The pool is sealed at the edge: every block of a shard is kept sealed with a record,
    /// read with its bytes (parity shards keep the parity of the data shards' records).
    edge: bool,
    /// Read without the PG's lock ([`Shards::beside_writes`]): a holder whose shard is at
    /// another version, or who has none, was changed by a write since the read began.
    beside_writes: bool,
    /// Such a holder was found: what was read is not all of one version.
    raced: AtomicBool,
}

impl<'a> Shards<'a> {
    pub fn new(
        inner: &'a OsdState,
        pg: PgId,
        profile: Profile,
        holders: Vec<Option<OsdId>>,
    ) -> Shards<'a> {
        Shards {
            inner,
            pg,
            profile,
            holders,
            damaged: Mutex::new(BTreeSet::new()),
            via: Via::Cache,
            edge: inner.pool_is_edge(pg.pool),
            beside_writes: false,
            raced: AtomicBool::new(false),
        }
    }

    /// The same shards read once the PG's lock is released, while writes may change them:
    /// a shard at another version than the object's head is not decoded around (it is not
    /// damaged, a write moved it) but ends the read, and [`Shards::raced`] says so, for the
    /// caller to read again under the lock.
    pub fn beside_writes(self) -> Shards<'a> {
        Shards {
            beside_writes: true,
            ..self
        }
    }

    /// Whether a read beside writes found a shard a write had changed.
    pub fn raced(&self) -> bool {
        self.raced.load(Ordering::Relaxed)
    }

    /// The same shards read from their holders' data devices, neither using nor filling
    /// their read caches: scrub checks what the disks hold.
    pub fn reading_devices(self) -> Shards<'a> {
        Shards {
            via: Via::Device,
            ..self
        }
    }

    /// Whether rebuilding `position`'s shard of `object` at `version` on its holder would
    /// leave the object undecodable: it would overwrite the only shard of another position
    /// that holder keeps (it moved) while `position`'s is held elsewhere, and fewer than k
    /// positions' shards would be left. Such a rebuild waits until that other position's
    /// holder has its own. (With more left, it goes ahead: two holders that swapped
    /// positions are rebuilt one after the other.)
    pub async fn rebuild_loses_a_shard(
        &self,
        object: &ObjectName,
        version: Version,
        position: usize,
    ) -> bool {
        let kept = match self.read_at(object, version, position, &[]).await {
            Ok((kept, _, _)) if kept != position => kept,
            _ => return false,
        };
        let mut elsewhere = BTreeSet::new();
        for other in (0..self.profile.shards()).filter(|p| *p != position) {
            if let Ok((shard, _, _)) = self.read_at(object, version, other, &[]).await {
                elsewhere.insert(shard);
            }
        }
        !elsewhere.contains(&kept)
            && elsewhere.contains(&position)
            && elsewhere.len() < self.profile.k()
    }

    /// Whether a read found a shard damaged.
    pub fn found_damage(&self) -> bool {
        !lock(&self.damaged).is_empty()
    }

    /// Rebuilds, on its holder, each shard of `object` that a read found damaged, from the
    /// others (read repair, docs/design/erasure.md §8), under `claim`; each holder repaired
    /// or why not.
    pub async fn repair(
        &self,
        object: &ObjectName,
        claim: Claim,
    ) -> Vec<(OsdId, Result<(), String>)> {
        let damaged: Vec<OsdId> = lock(&self.damaged)
            .iter()
            .filter_map(|position| self.holders.get(*position).copied().flatten())
            .collect();
        let mut repaired = Vec::with_capacity(damaged.len());
        for holder in damaged {
            let to = match self.inner.side(holder) {
                Side::Remote(osd) => Side::Target(osd, claim),
                local => local,
            };
            let copied = self
                .inner
                .copy_object(self.pg, object, Side::Local, to)
                .await;
            repaired.push((holder, copied.map(|_| ())));
        }
        repaired
    }

    /// The record of chunk `chunk` of `object` at `head` (`None`: a hole, or past its end).
    async fn chunk_seal(
        &self,
        object: &ObjectName,
        head: Option<ShardHead>,
        chunk: u64,
    ) -> Result<Option<ChunkSeal>, OsdReply> {
        let Some(head) = head.filter(|h| chunk < h.size.div_ceil(CHUNK_BYTES)) else {
            return Ok(None);
        };
        let (shard, offset) = self.profile.locate(chunk * CHUNK_BYTES);
        let piece = Piece {
            shard,
            offset,
            len: CHUNK_BYTES,
        };
        let mut read = self.read_sealed(object, head.version, &[piece]).await?;
        Ok(read.pop().and_then(|(_, words)| seal_of_word(&words[0])))
    }

    /// Checks the chunk conditions of a write of `ops` to `object` (at `head`) in a pool
    /// sealed at the edge, as a replicated PG's primary checks them on its copy: each
    /// `AssertChunk`, and that none of the partial last chunks `tails` ([`EdgePlan::tails`])
    /// the write grows the object past is sealed.
    pub async fn check_chunks(
        &self,
        object: &ObjectName,
        head: Option<ShardHead>,
        ops: &[ObjectOp],
        tails: &[u64],
    ) -> Result<(), OsdReply> {
        for op in ops {
            if let ObjectOp::AssertChunk { index, seal } = op {
                if self.chunk_seal(object, head, *index).await? != *seal {
                    return Err(OsdReply::Mismatch(format!(
                        "chunk {index} of {object} changed since it was read"
                    )));
                }
            }
        }
        for tail in tails {
            if self.chunk_seal(object, head, *tail).await?.is_some() {
                return Err(objects::tail_not_replaced(object, *tail));
            }
        }
        Ok(())
    }

    /// This OSD's shard head of `object` and its attributes; `None` if it holds none.
    pub async fn own_head(
        &self,
        object: &ObjectName,
    ) -> Result<Option<(ShardHead, BTreeMap<String, Vec<u8>>)>, OsdReply> {
        let attrs = self
            .inner
            .attrs_if_any(objects::object_ref(self.pg, object))
            .await?;
        let Some(attrs) = attrs else {
            return Ok(None);
        };
        let head = objects::shard_head(&attrs).ok_or_else(|| {
            OsdReply::Integrity(format!(
                "pg {}.{}: {object}'s shard here lacks its shard attributes",
                self.pg.pool, self.pg.number
            ))
        })?;
        Ok(Some((head, attrs)))
    }

    /// `pieces` of `object`'s shards at `version`, each read from its holder, or rebuilt
    /// from k other shards where the holder is absent, fails, or holds another version.
    pub async fn read(
        &self,
        object: &ObjectName,
        version: Version,
        pieces: &[Piece],
    ) -> Result<Vec<Vec<u8>>, OsdReply> {
        let read = self.read_sealed(object, version, pieces).await?;
        Ok(read.into_iter().map(|(bytes, _)| bytes).collect())
    }

    /// [`Shards::read`] with, in a pool sealed at the edge, the record words of each
    /// piece's blocks (pieces are then whole blocks); no words otherwise.
    pub async fn read_sealed(
        &self,
        object: &ObjectName,
        version: Version,
        pieces: &[Piece],
    ) -> Result<Vec<Sealed>, OsdReply> {
        let mut by_shard: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (index, piece) in pieces.iter().enumerate() {
            by_shard.entry(piece.shard).or_default().push(index);
        }
        let mut out: Vec<Option<Sealed>> = vec![None; pieces.len()];
        let mut failed = BTreeSet::new();
        // Every shard at once, each in as few ranges as its pieces allow.
        let reads = by_shard.into_iter().map(|(shard, indexes)| async move {
            let ranges: Vec<(u64, u64)> = indexes
                .iter()
                .map(|i| (pieces[*i].offset, pieces[*i].len))
                .collect();
            let read = self
                .read_shard(object, version, shard, &coalesce(&ranges))
                .await;
            (shard, indexes, read)
        });
        let read = futures::future::join_all(reads).await;
        if self.raced() {
            return Err(self.race());
        }
        for (shard, indexes, read) in read {
            match read {
                Some((bytes, words)) => {
                    let mut at = 0;
                    for i in indexes {
                        let len = pieces[i].len as usize;
                        out[i] =
                            Some((bytes[at..at + len].to_vec(), self.words_at(&words, at, len)));
                        at += len;
                    }
                }
                None => {
                    failed.insert(shard);
                }
            }
        }
        // What could not be read, rebuilt shard by shard: all of one shard's pieces from
        // one read of each other shard it is decoded from.
        let mut missing: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (index, read) in out.iter().enumerate() {
            if read.is_none() {
                missing.entry(pieces[index].shard).or_default().push(index);
            }
        }
        for (shard, indexes) in missing {
            let wanted: Vec<(u64, u64)> = indexes
                .iter()
                .map(|i| (pieces[*i].offset, pieces[*i].len))
                .collect();
            let rebuilt = self
                .rebuild(object, version, shard, &wanted, &mut failed)
                .await;
            if self.raced() {
                return Err(self.race());
            }
            let rebuilt = rebuilt?;
            for (i, read) in indexes.into_iter().zip(rebuilt) {
                out[i] = Some(read);
            }
        }
        Ok(out
            .into_iter()
            .map(|read| read.expect("every piece read or rebuilt"))
            .collect())
    }

    /// The `wanted` ranges of shard `shard`, which could not be read, decoded from k other
    /// shards over the whole blocks around them ([`block_spans`]), in one read of each.
    /// Each holder's shard counts as the one it says it is (a holder that moved still has
    /// its old position's); positions found unreadable join `failed`.
    async fn rebuild(
        &self,
        object: &ObjectName,
        version: Version,
        shard: usize,
        wanted: &[(u64, u64)],
        failed: &mut BTreeSet<usize>,
    ) -> Result<Vec<Sealed>, OsdReply> {
        let spans = block_spans(wanted);
        let cut = |bytes: &[u8], words: &[Word]| -> Vec<Sealed> {
            wanted
                .iter()
                .map(|&(offset, len)| {
                    let at = span_position(&spans, offset);
                    let len = len as usize;
                    (bytes[at..at + len].to_vec(), self.words_at(words, at, len))
                })
                .collect()
        };
        let (k, n) = (self.profile.k(), self.profile.shards());
        let mut shards: Vec<Option<Vec<u8>>> = vec![None; n];
        let mut words: Vec<Option<Vec<Word>>> = vec![None; n];
        let mut present = 0;
        for position in 0..n {
            if present == k || self.raced() {
                break;
            }
            if failed.contains(&position) {
                continue;
            }
            match self.read_at(object, version, position, &spans).await {
                Ok((held, bytes, read)) if held == shard => return Ok(cut(&bytes, &read)),
                Ok((held, bytes, read)) => {
                    if shards[held].is_none() {
                        shards[held] = Some(bytes);
                        words[held] = Some(read);
                        present += 1;
                    }
                }
                Err(why) => {
                    self.warn(object, position, &why);
                    failed.insert(position);
                }
            }
        }
        if present < k {
            return Err(OsdReply::Busy(format!(
                "pg {}.{}: {present} shards of {object} at version {}.{} could be read, {k} \
                 are needed to decode it",
                self.pg.pool, self.pg.number, version.epoch, version.seq
            )));
        }
        let mut coder = Coder::new(self.profile);
        coder
            .reconstruct(&mut shards)
            .map_err(|e| OsdReply::Failed(format!("decoding {object}: {e}")))?;
        let whole = shards[shard].take().expect("reconstructed");
        let rebuilt = if self.edge {
            rebuild_words(&mut coder, &words, shard)
                .map_err(|e| OsdReply::Failed(format!("decoding {object}'s records: {e}")))?
        } else {
            Vec::new()
        };
        Ok(cut(&whole, &rebuilt))
    }

    /// The words of the blocks of `len` bytes at byte `at` of a read whose blocks' words
    /// are `words` (none outside a pool sealed at the edge).
    fn words_at(&self, words: &[Word], at: usize, len: usize) -> Vec<Word> {
        if !self.edge {
            return Vec::new();
        }
        let block = CHUNK_BYTES as usize;
        words[at / block..(at + len) / block].to_vec()
    }

    /// `ranges` of shard `shard` of `object` from the holder of its position, if it holds
    /// that shard at `version`.
    async fn read_shard(
        &self,
        object: &ObjectName,
        version: Version,
        shard: usize,
        ranges: &[(u64, u64)],
    ) -> Option<(Vec<u8>, Vec<Word>)> {
        let why = match self.read_at(object, version, shard, ranges).await {
            Ok((held, bytes, words)) if held == shard => return Some((bytes, words)),
            Ok((held, _, _)) => format!("it holds shard {held}"),
            Err(why) => why,
        };
        self.warn(object, shard, &why);
        None
    }

    fn warn(&self, object: &ObjectName, position: usize, why: &str) {
        if self.raced() {
            return;
        }
        tracing::warn!(
            pg = %format!("{}.{}", self.pg.pool, self.pg.number),
            %object,
            osd = ?self.holders.get(position).copied().flatten(),
            position,
            %why,
            "a shard could not be read; decoding it from the others"
        );
    }

    /// `ranges` of the shard of `object` that the holder of `position` has at `version`,
    /// and which shard it is; or why there is none.
    pub async fn read_at(
        &self,
        object: &ObjectName,
        version: Version,
        position: usize,
        ranges: &[(u64, u64)],
    ) -> Result<(usize, Vec<u8>, Vec<Word>), String> {
        let wanted: u64 = ranges.iter().map(|(_, len)| len).sum();
        let words = if self.edge { wanted / CHUNK_BYTES } else { 0 };
        match self.fetch(object, position, ranges).await? {
            Some((head, bytes, read))
                if head.version == version
                    && usize::from(head.shard) < self.profile.shards()
                    && bytes.len() as u64 == wanted
                    && read.len() as u64 == words =>
            {
                Ok((usize::from(head.shard), bytes, read))
            }
            found => {
                if self.beside_writes && found.as_ref().is_none_or(|(h, _, _)| h.version != version)
                {
                    self.raced.store(true, Ordering::Relaxed);
                }
                Err(match found {
                    Some((head, _, _)) => format!(
                        "it holds shard {} at version {}.{}",
                        head.shard, head.version.epoch, head.version.seq
                    ),
                    None => "it holds no shard of the object".into(),
                })
            }
        }
    }

    /// What a read beside writes that found a changed shard answers, if the caller does
    /// not read again.
    fn race(&self) -> OsdReply {
        OsdReply::Busy(format!(
            "pg {}.{}: a write changed the shards being read; ask again",
            self.pg.pool, self.pg.number
        ))
    }

    /// The head of the shard of `object` that the holder of `position` has (`None`: it has
    /// none), or why it cannot be read.
    pub async fn head_at(
        &self,
        object: &ObjectName,
        position: usize,
    ) -> Result<Option<ShardHead>, String> {
        Ok(self
            .fetch(object, position, &[])
            .await?
            .map(|(head, _, _)| head))
    }

    /// `ranges` of whatever shard of `object` the holder of `position` has, with its head.
    async fn fetch(
        &self,
        object: &ObjectName,
        position: usize,
        ranges: &[(u64, u64)],
    ) -> Result<Option<(ShardHead, Vec<u8>, Vec<Word>)>, String> {
        let holder = self
            .holders
            .get(position)
            .copied()
            .flatten()
            .ok_or("no holder up to read it from")?;
        let damaged = |why: String| {
            lock(&self.damaged).insert(position);
            format!("its shard is damaged: {why}")
        };
        if holder == self.inner.id {
            let object = objects::object_ref(self.pg, object);
            let (ranges, via, edge) = (ranges.to_vec(), self.via, self.edge);
            self.inner
                .blocking(move |store| objects::read_shard(store, &object, &ranges, via, edge))
                .await
                .and_then(|read| {
                    read.map_err(|e| match e {
                        store::ReadError::Integrity { .. }
                        | store::ReadError::MetadataIntegrity { .. } => damaged(e.to_string()),
                        e => e.to_string(),
                    })
                })
                .map(|read| read.map(|(head, bytes, seals)| (head, bytes, words_of(&seals))))
        } else {
            let request = OsdRequest::Peer {
                pg: self.pg,
                epoch: self.inner.map.borrow().epoch,
                op: PeerOp::ReadShard {
                    object: object.clone(),
                    pieces: ranges.to_vec(),
                    device: self.via == Via::Device,
                },
            };
            match self
                .inner
                .call_peer(holder, &request, Bytes::new(), None)
                .await
            {
                Ok((OsdReply::ShardPieces(head, seals), data)) => {
                    Ok(head.map(|head| (head, data.to_vec(), words_of(&seals))))
                }
                Ok((OsdReply::Integrity(why), _)) => Err(damaged(why)),
                Ok((other, _)) => Err(format!("{other:?}")),
                Err(e) => Err(e),
            }
        }
    }

    /// A client's read ops on `object`: its bytes gathered from the data shards, its size
    /// and version from this OSD's shard. With `complete`, an object at a newer version is
    /// not read: its version is returned instead.
    pub async fn read_ops(
        &self,
        object: &ObjectName,
        ops: &[ObjectOp],
        complete: Option<Version>,
    ) -> Result<Result<(Vec<OpResult>, Vec<u8>), Version>, OsdReply> {
        let Some((head, attrs)) = self.own_head(object).await? else {
            return Err(OsdReply::NotFound);
        };
        if complete.is_some_and(|complete| head.version > complete) {
            return Ok(Err(head.version));
        }
        // A shard a repair is rebuilding piece by piece is at no version until it is whole:
        // beside writes, that is a change under way.
        if self.beside_writes && head.version == Version::default() {
            self.raced.store(true, Ordering::Relaxed);
            return Err(self.race());
        }
        let clamp = |offset: u64, len: u64| {
            (
                offset.min(head.size),
                offset.saturating_add(len).min(head.size),
            )
        };
        let requested = ops.iter().fold(0u64, |sum, op| match op {
            ObjectOp::Read { offset, len } => {
                let (from, to) = clamp(*offset, *len);
                sum.saturating_add(to - from)
            }
            ObjectOp::ReadChunks { count, .. } => {
                sum.saturating_add(u64::from(*count) * CHUNK_BYTES)
            }
            _ => sum,
        });
        if requested > DATA_BYTES_MAX as u64 {
            return Err(OsdReply::Failed(format!(
                "the reads of one request ask for {requested} bytes; a reply carries at most \
                 {DATA_BYTES_MAX}"
            )));
        }
        let mut out = Vec::with_capacity(requested as usize);
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            results.push(match op {
                ObjectOp::Read { offset, len } => {
                    let (from, to) = clamp(*offset, *len);
                    let pieces = data_pieces(self.profile, from, to);
                    for bytes in self.read(object, head.version, &pieces).await? {
                        out.extend_from_slice(&bytes);
                    }
                    OpResult::Read { len: to - from }
                }
                ObjectOp::Stat => {
                    let own = objects::object_ref(self.pg, object);
                    let stat = self
                        .inner
                        .blocking(move |store| store.stat(&own))
                        .await
                        .map_err(OsdReply::Failed)?
                        .map_err(crate::service::read_failure)?;
                    // Beside writes, the time is of the head's version if the head is
                    // still of it after.
                    if self.beside_writes
                        && self.own_head(object).await?.map(|(now, _)| now.version)
                            != Some(head.version)
                    {
                        self.raced.store(true, Ordering::Relaxed);
                        return Err(self.race());
                    }
                    OpResult::Stat {
                        size: head.size,
                        mtime_ns: stat.mtime_ns,
                        version: head.version,
                    }
                }
                ObjectOp::GetAttrs => {
                    let mut attrs = attrs.clone();
                    attrs.retain(|name, _| !objects::is_internal_attr(name));
                    OpResult::Attrs(attrs)
                }
                ObjectOp::ReadChunks { first, count } => {
                    let count = u64::from(*count);
                    let end = first
                        .saturating_add(count)
                        .min(head.size.div_ceil(CHUNK_BYTES));
                    let pieces: Vec<Piece> = (*first..end.max(*first))
                        .map(|chunk| {
                            let (shard, offset) = self.profile.locate(chunk * CHUNK_BYTES);
                            Piece {
                                shard,
                                offset,
                                len: CHUNK_BYTES,
                            }
                        })
                        .collect();
                    let mut seals = Vec::with_capacity(count as usize);
                    for (bytes, words) in self.read_sealed(object, head.version, &pieces).await? {
                        out.extend_from_slice(&bytes);
                        seals.push(seal_of_word(&words[0]));
                    }
                    // Chunks past the end are holes, as a replicated pool answers them.
                    out.resize(
                        out.len() + (count as usize - seals.len()) * CHUNK_BYTES as usize,
                        0,
                    );
                    seals.resize(count as usize, None);
                    OpResult::Chunks {
                        size: head.size,
                        seals,
                    }
                }
                ObjectOp::OmapGet { .. } | ObjectOp::OmapList { .. } => {
                    return Err(OsdReply::Failed(
                        "this pool is erasure-coded: omap lives in a replicated pool".into(),
                    ))
                }
                other => {
                    return Err(OsdReply::Failed(format!(
                        "{other:?} is not served on erasure-coded pools yet (#33)"
                    )))
                }
            });
        }
        Ok(Ok((results, out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        Profile::new(4, 2, 4096).expect("a profile")
    }

    #[test]
    fn omap_and_second_byte_changes_are_refused_with_the_pool_named() {
        let refused = |ops: &[ObjectOp]| match data_change("cold", ops) {
            Err(OsdReply::Failed(why)) => why,
            other => panic!("{ops:?} refused, not {other:?}"),
        };
        assert!(refused(&[ObjectOp::OmapClear]).contains("pool cold is erasure-coded: omap"));
        assert!(refused(&[
            ObjectOp::WriteFull { len: 1 },
            ObjectOp::Write { offset: 0, len: 1 }
        ])
        .contains("once"));
        assert!(refused(&[ObjectOp::ReadChunks { first: 0, count: 1 }]).contains("#33"));
        assert!(refused(&[ObjectOp::Zero {
            offset: 0,
            len: 1 << 30
        }])
        .contains("zeroes at most"));
        assert!(refused(&[ObjectOp::Truncate { size: 1 << 50 }]).contains("past an object's limit"));
        assert!(refused(&[
            ObjectOp::Remove,
            ObjectOp::SetAttr {
                name: "a".into(),
                value: vec![]
            }
        ])
        .contains("alone"));
        let ok = data_change(
            "cold",
            &[
                ObjectOp::AssertExists,
                ObjectOp::SetAttr {
                    name: "a".into(),
                    value: vec![1],
                },
                ObjectOp::Write { offset: 5, len: 3 },
            ],
        );
        assert!(matches!(ok, Ok(DataChange::Range { offset: 5, len: 3 })));
        assert!(data_change("cold", &[ObjectOp::Stat]).is_err());
    }

    #[test]
    fn a_whole_write_gives_each_shard_its_encoded_bytes_and_the_attributes() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 300) as u8).collect();
        let attrs = [ObjectOp::SetAttr {
            name: "a".into(),
            value: vec![1],
        }];
        let written = encode_whole(profile(), &data).expect("encoded");
        let shards = shard_writes(profile(), DataChange::Full { len: 20_000 }, &attrs, written);
        let shard_len = profile().shard_bytes(20_000);
        assert_eq!(shard_len, 8192);
        for shard in &shards {
            assert_eq!(
                shard.ops,
                [ObjectOp::WriteFull { len: shard_len }, attrs[0].clone()]
            );
        }
        // Any four shards give the object back.
        let mut some: Vec<Option<Vec<u8>>> = shards.iter().map(|s| Some(s.data.clone())).collect();
        some[0] = None;
        some[3] = None;
        Coder::new(profile())
            .reconstruct(&mut some)
            .expect("decoded");
        let data_shards: Vec<&[u8]> = some[..4].iter().flatten().map(Vec::as_slice).collect();
        assert_eq!(profile().join(&data_shards, 20_000), data);
        // An empty object has empty shards.
        let empty = shard_writes(
            profile(),
            DataChange::Full { len: 0 },
            &[],
            encode_whole(profile(), &[]).expect("encoded"),
        );
        assert!(empty
            .iter()
            .all(|s| s.ops == [ObjectOp::WriteFull { len: 0 }] && s.data.is_empty()));
    }

    #[test]
    fn a_partial_write_touches_only_its_pieces_and_every_shard_gets_the_attributes() {
        let plan = ec::plan(profile(), 50_000, 4096 + 100, 10).expect("planned");
        let writes = plan.writes();
        let written: Vec<(Piece, Vec<u8>)> = writes
            .iter()
            .map(|p| (*p, vec![p.shard as u8; p.len as usize]))
            .collect();
        let shards = shard_writes(
            profile(),
            DataChange::Range {
                offset: 4196,
                len: 10,
            },
            &[],
            written,
        );
        for (index, shard) in shards.iter().enumerate() {
            let mine: Vec<ObjectOp> = writes
                .iter()
                .filter(|p| p.shard == index)
                .map(|p| ObjectOp::Write {
                    offset: p.offset,
                    len: p.len,
                })
                .collect();
            assert_eq!(shard.ops[0], ObjectOp::Create { exclusive: false });
            assert_eq!(shard.ops[1..], mine[..]);
            assert_eq!(
                shard.data.len() as u64,
                mine.iter().map(|op| op.data_len()).sum::<u64>()
            );
        }
        // The written unit is shard 1's; parity shards 4 and 5 change too; 0, 2, 3 only
        // take the entry.
        assert!(shards[1].ops.len() > 1 && shards[4].ops.len() > 1 && shards[5].ops.len() > 1);
        assert_eq!(shards[0].ops.len(), 1);
        let removed = shard_writes(profile(), DataChange::Remove, &[], Vec::new());
        assert!(removed.iter().all(|s| s.ops == [ObjectOp::Remove]));
    }

    #[test]
    fn a_write_over_whole_stripes_is_one_write_per_shard() {
        let unit = profile().unit_bytes();
        let stripe = unit * profile().k() as u64;
        let (offset, len) = (2 * stripe, 8 * stripe);
        let plan = ec::plan(profile(), 50 * stripe, offset, len).expect("planned");
        let written: Vec<(Piece, Vec<u8>)> = plan
            .writes()
            .iter()
            .map(|p| (*p, vec![(p.offset / unit) as u8; p.len as usize]))
            .collect();
        let change = DataChange::Range { offset, len };
        for (index, shard) in shard_writes(profile(), change, &[], written)
            .iter()
            .enumerate()
        {
            let one = ObjectOp::Write {
                offset: 2 * unit,
                len: 8 * unit,
            };
            assert_eq!(shard.ops[1..], [one], "shard {index}");
            let units: Vec<u8> = shard.data.chunks(unit as usize).map(|c| c[0]).collect();
            assert_eq!(
                units,
                (2..10).collect::<Vec<u8>>(),
                "shard {index}, in order"
            );
        }
    }

    #[test]
    fn a_truncate_zeroes_the_rest_of_its_last_stripe_then_cuts_every_shard() {
        let p = profile();
        let (stripe, unit) = (p.width_bytes(), p.unit_bytes());
        let truncate = |size| DataChange::Truncate { size };
        // Shrinking inside a stripe zeroes that stripe's bytes past the new end.
        assert_eq!(
            truncate(stripe + 100).written(p, 3 * stripe),
            Some((stripe + 100, stripe - 100))
        );
        // ...but no further than the old end; and nothing at a stripe's end or growing.
        assert_eq!(
            truncate(stripe + 100).written(p, stripe + 200),
            Some((stripe + 100, 100))
        );
        assert_eq!(truncate(stripe).written(p, 3 * stripe), None);
        assert_eq!(truncate(5 * stripe).written(p, stripe), None);
        assert_eq!(truncate(stripe + 100).new_size(3 * stripe), stripe + 100);
        let zero = DataChange::Zero { offset: 10, len: 5 };
        assert_eq!(zero.written(p, 0), Some((10, 5)));
        assert_eq!(zero.new_size(0), 15);
        let plan = ec::plan(p, 3 * stripe, stripe + 100, stripe - 100).expect("planned");
        let written: Vec<(Piece, Vec<u8>)> = plan
            .writes()
            .into_iter()
            .map(|piece| (piece, vec![0; piece.len as usize]))
            .collect();
        for shard in shard_writes(p, truncate(stripe + 100), &[], written) {
            assert_eq!(
                shard.ops.first(),
                Some(&ObjectOp::Create { exclusive: false })
            );
            assert_eq!(
                shard.ops.last(),
                Some(&ObjectOp::Truncate { size: 2 * unit })
            );
        }
    }

    #[test]
    fn a_rebuild_reads_the_whole_blocks_around_its_pieces_once() {
        let spans = block_spans(&[(8192, 4096), (100, 10), (0, 4096), (4096, 64), (130, 1)]);
        assert_eq!(spans, [(0, 4160), (8192, 4096)]);
        assert_eq!(span_position(&spans, 100), 100);
        assert_eq!(span_position(&spans, 8192), 4160);
        assert_eq!(span_position(&spans, 8200), 4168);
        assert_eq!(block_spans(&[(70, 1)]), [(64, 64)]);
    }

    #[test]
    fn adjacent_ranges_are_read_as_one() {
        assert_eq!(coalesce(&[]), []);
        assert_eq!(
            coalesce(&[(0, 4096), (4096, 4096), (8192, 100), (9000, 5), (9005, 1)]),
            [(0, 8292), (9000, 6)]
        );
        assert_eq!(
            coalesce(&[(8192, 1), (0, 1)]),
            [(8192, 1), (0, 1)],
            "order is kept"
        );
        // A whole 4 MiB object at 4+2: each data shard's 256 units are one range.
        let pieces = data_pieces(profile(), 0, 4 << 20);
        let shard_one: Vec<(u64, u64)> = pieces
            .iter()
            .filter(|p| p.shard == 1)
            .map(|p| (p.offset, p.len))
            .collect();
        assert_eq!(shard_one.len(), 256);
        assert_eq!(coalesce(&shard_one), [(0, 1 << 20)]);
    }

    #[test]
    fn a_read_takes_each_unit_it_touches_in_order() {
        let p = profile();
        assert_eq!(data_pieces(p, 0, 0), []);
        assert_eq!(
            data_pieces(p, 4000, 4096 * 4 + 10),
            [
                Piece {
                    shard: 0,
                    offset: 4000,
                    len: 96
                },
                Piece {
                    shard: 1,
                    offset: 0,
                    len: 4096
                },
                Piece {
                    shard: 2,
                    offset: 0,
                    len: 4096
                },
                Piece {
                    shard: 3,
                    offset: 0,
                    len: 4096
                },
                Piece {
                    shard: 0,
                    offset: 4096,
                    len: 10
                },
            ]
        );
    }

    fn seal(n: u64) -> ChunkSeal {
        ChunkSeal {
            key_id: 0x1_0000 + n,
            nonce: [n as u8; 12],
            tag: [(n * 3) as u8; 16],
        }
    }

    fn chunk(n: u64) -> Vec<u8> {
        (0..CHUNK_BYTES)
            .map(|i| (i as u8) ^ (n as u8).wrapping_mul(37))
            .collect()
    }

    /// A request's chunk steps: `WriteChunks` of chunks `first..first + count` (seals and
    /// bytes from [`seal`] and [`chunk`]) ending at `end`, and the request's data.
    fn chunks(first: u64, count: u64, end: u64) -> (ObjectOp, Vec<u8>) {
        let data: Vec<u8> = (first..first + count).flat_map(chunk).collect();
        let op = ObjectOp::WriteChunks {
            first,
            seals: (first..first + count).map(seal).collect(),
            end,
        };
        (op, data)
    }

    /// The row each shard's `WriteChunks` ops write, with the bytes and word of each.
    fn written(shard: &ShardWrite) -> Vec<(u64, Vec<u8>, Word)> {
        let mut out = Vec::new();
        let mut at = 0;
        for op in &shard.ops {
            if let ObjectOp::WriteChunks { first, seals, end } = op {
                assert_eq!(*end, (first + seals.len() as u64) * CHUNK_BYTES);
                for (i, seal) in seals.iter().enumerate() {
                    let bytes = shard.data[at..at + CHUNK_BYTES as usize].to_vec();
                    out.push((first + i as u64, bytes, seal.to_bytes()));
                    at += CHUNK_BYTES as usize;
                }
            }
        }
        assert_eq!(at, shard.data.len(), "every byte sent is written");
        out
    }

    #[test]
    fn a_chunk_write_over_whole_rows_codes_bytes_and_records_with_nothing_read() {
        let (op, data) = chunks(0, 8, 8 * CHUNK_BYTES - 100);
        let steps = edge_steps(std::slice::from_ref(&op)).expect("a byte change");
        let plan = EdgePlan::new(profile(), 0, &steps).expect("planned");
        assert_eq!(plan.size(), 8 * CHUNK_BYTES - 100);
        assert_eq!(plan.rows(), BTreeSet::from([0, 1]));
        assert!(plan.reads().is_empty());
        let writes = plan.shard_writes(&[], &data, Vec::new()).expect("written");
        let mut coder = Coder::new(profile());
        for row in 0..2u64 {
            let data_words: Vec<Word> = (0..4).map(|d| seal(row * 4 + d).to_bytes()).collect();
            let data_bytes: Vec<Vec<u8>> = (0..4).map(|d| chunk(row * 4 + d)).collect();
            let refs: Vec<&[u8]> = data_bytes.iter().map(Vec::as_slice).collect();
            let parity = coder.parity(&refs).expect("parity");
            let parity_words = coder.word_parity(&data_words).expect("parity words");
            for (position, shard) in writes.iter().enumerate() {
                let (at, bytes, word) = written(shard)[row as usize].clone();
                assert_eq!(at, row);
                if position < 4 {
                    assert_eq!(
                        (bytes, word),
                        (data_bytes[position].clone(), data_words[position])
                    );
                } else {
                    assert_eq!(
                        (bytes, word),
                        (parity[position - 4].clone(), parity_words[position - 4])
                    );
                }
            }
        }
        // The shards keep the object's stripes, no more: no truncate for a new object
        // whose chunks end where its last stripe does.
        assert!(writes.iter().all(|w| !w
            .ops
            .iter()
            .any(|op| matches!(op, ObjectOp::Truncate { .. }))));
    }

    #[test]
    fn a_chunk_overwrite_reads_its_row_and_writes_its_shard_and_the_parity_only() {
        let old_size = 12 * CHUNK_BYTES;
        let (op, data) = chunks(6, 1, 7 * CHUNK_BYTES);
        let steps = edge_steps(&[ObjectOp::AssertExists, op]).expect("a byte change");
        let plan = EdgePlan::new(profile(), old_size, &steps).expect("planned");
        assert_eq!(plan.size(), old_size);
        // Chunk 6 is position 2 of row 1; the row's other chunks are 4, 5 and 7.
        assert_eq!(plan.rows(), BTreeSet::from([1]));
        let reads: Vec<usize> = plan.reads().iter().map(|p| p.shard).collect();
        assert_eq!(reads, [0, 1, 3]);
        assert!(plan
            .reads()
            .iter()
            .all(|p| (p.offset, p.len) == (CHUNK_BYTES, CHUNK_BYTES)));
        let old: Vec<Sealed> = [4, 5, 7]
            .into_iter()
            .map(|c| (chunk(c), vec![seal(c).to_bytes()]))
            .collect();
        let writes = plan.shard_writes(&[], &data, old).expect("written");
        let touched: Vec<usize> = (0..6)
            .filter(|p| !written(&writes[*p]).is_empty())
            .collect();
        assert_eq!(touched, [2, 4, 5]);
        let words: Vec<Word> = (4..8).map(|c| seal(c).to_bytes()).collect();
        let parity_words = Coder::new(profile()).word_parity(&words).expect("words");
        assert_eq!(written(&writes[4])[0].2, parity_words[0]);
        assert_eq!(written(&writes[5])[0].2, parity_words[1]);
    }

    #[test]
    fn a_truncate_inside_a_chunk_makes_the_rest_of_its_stripe_holes_then_cuts_the_shards() {
        // 10 chunks (3 stripes); the cut inside chunk 5 keeps it (the client rewrote its
        // tail), makes chunks 6 and 7 holes and cuts every shard to 2 stripes.
        let cut = 5 * CHUNK_BYTES + 100;
        let steps = edge_steps(&[ObjectOp::Truncate { size: cut }]).expect("a byte change");
        let plan = EdgePlan::new(profile(), 10 * CHUNK_BYTES, &steps).expect("planned");
        assert_eq!(plan.rows(), BTreeSet::from([1]));
        let reads: Vec<usize> = plan.reads().iter().map(|p| p.shard).collect();
        assert_eq!(reads, [0, 1], "chunks 4 and 5 are kept");
        let old: Vec<Sealed> = [4, 5]
            .into_iter()
            .map(|c| (chunk(c), vec![seal(c).to_bytes()]))
            .collect();
        let writes = plan.shard_writes(&[], &[], old).expect("written");
        for (position, shard) in writes.iter().enumerate() {
            assert_eq!(
                shard.ops.first(),
                Some(&ObjectOp::Create { exclusive: false })
            );
            assert_eq!(
                shard.ops[1],
                ObjectOp::Truncate {
                    size: 2 * CHUNK_BYTES
                }
            );
            let rest = &shard.ops[2..];
            match position {
                0 | 1 => assert!(rest.is_empty(), "{rest:?}"),
                2 | 3 => assert_eq!(
                    rest,
                    [ObjectOp::Zero {
                        offset: CHUNK_BYTES,
                        len: CHUNK_BYTES
                    }]
                ),
                _ => assert!(matches!(rest, [ObjectOp::WriteChunks { first: 1, .. }])),
            }
        }
    }

    #[test]
    fn a_replace_truncates_to_nothing_then_writes_with_no_read() {
        let (op, data) = chunks(0, 2, 2 * CHUNK_BYTES);
        let steps = edge_steps(&[ObjectOp::Truncate { size: 0 }, op]).expect("a byte change");
        let plan = EdgePlan::new(profile(), 40 * CHUNK_BYTES, &steps).expect("planned");
        assert_eq!(plan.size(), 2 * CHUNK_BYTES);
        assert!(plan.reads().is_empty(), "the rest of the row is holes now");
        let writes = plan.shard_writes(&[], &data, Vec::new()).expect("written");
        for (position, shard) in writes.iter().enumerate() {
            assert_eq!(shard.ops[1], ObjectOp::Truncate { size: 0 });
            let last = shard.ops.last().expect("ops");
            if position == 2 || position == 3 {
                // Holes now, written nowhere: only the shard's length says the row is there.
                assert_eq!(shard.ops.len(), 3);
                assert_eq!(last, &ObjectOp::Truncate { size: CHUNK_BYTES });
            } else {
                assert!(
                    matches!(last, ObjectOp::WriteChunks { first: 0, .. }),
                    "{last:?}"
                );
            }
        }
        assert_eq!(written(&writes[1])[0].1, chunk(1));
    }

    #[test]
    fn chunk_steps_outside_their_chunks_or_past_the_limit_are_refused() {
        let refused = |ops: &[ObjectOp]| {
            let steps = edge_steps(ops).expect("a byte change");
            match EdgePlan::new(profile(), 0, &steps) {
                Err(OsdReply::Failed(why)) => why,
                other => panic!("{ops:?} planned: {other:?}"),
            }
        };
        let (short, _) = chunks(3, 2, 4 * CHUNK_BYTES);
        assert!(refused(&[short]).contains("outside its last chunk"));
        let (long, _) = chunks(3, 2, 5 * CHUNK_BYTES + 1);
        assert!(refused(&[long]).contains("outside its last chunk"));
        let far = ObjectOp::Zero {
            offset: u64::MAX / CHUNK_BYTES * CHUNK_BYTES,
            len: CHUNK_BYTES,
        };
        assert!(refused(&[far]).contains("past an object's limit"));
        assert!(edge_steps(&[ObjectOp::Create { exclusive: false }]).is_none());
        let (write, _) = chunks(0, 1, 10);
        assert!(matches!(
            check_edge_ops("cold", &[ObjectOp::Remove, write]),
            Err(OsdReply::Failed(why)) if why.contains("alone")
        ));
    }

    #[test]
    fn a_zero_of_whole_rows_writes_holes_and_no_parity_bytes() {
        let zero = ObjectOp::Zero {
            offset: 4 * CHUNK_BYTES,
            len: 4 * CHUNK_BYTES,
        };
        let steps = edge_steps(&[zero]).expect("a byte change");
        let plan = EdgePlan::new(profile(), 8 * CHUNK_BYTES, &steps).expect("planned");
        assert!(plan.reads().is_empty());
        let writes = plan.shard_writes(&[], &[], Vec::new()).expect("written");
        for shard in &writes {
            assert_eq!(
                &shard.ops[1..],
                [ObjectOp::Zero {
                    offset: CHUNK_BYTES,
                    len: CHUNK_BYTES
                }]
            );
            assert!(shard.data.is_empty());
        }
    }

    #[test]
    fn growing_past_a_partial_last_chunk_checks_it_unless_the_request_replaces_it() {
        let old_size = 5 * CHUNK_BYTES + 100;
        let tails = |ops: &[ObjectOp]| {
            let steps = edge_steps(ops).expect("a byte change");
            EdgePlan::new(profile(), old_size, &steps).map(|plan| plan.tails().to_vec())
        };
        let (past, _) = chunks(8, 1, 9 * CHUNK_BYTES);
        assert_eq!(tails(std::slice::from_ref(&past)).expect("planned"), [5]);
        assert_eq!(
            tails(&[ObjectOp::Truncate {
                size: 10 * CHUNK_BYTES
            }])
            .expect("planned"),
            [5]
        );
        let (over, _) = chunks(5, 1, 6 * CHUNK_BYTES);
        assert!(tails(&[over, past.clone()]).expect("planned").is_empty());
        // Cut inside chunk 2, then grown: chunk 2's old bytes past the cut would show.
        assert_eq!(
            tails(&[
                ObjectOp::Truncate {
                    size: 2 * CHUNK_BYTES + 1
                },
                past
            ])
            .expect("planned"),
            [2]
        );
        // A tail the request itself seals short of its end is refused outright.
        let (short, _) = chunks(5, 1, 5 * CHUNK_BYTES + 200);
        let grow = ObjectOp::Truncate {
            size: 10 * CHUNK_BYTES,
        };
        assert!(matches!(
            tails(&[short, grow]),
            Err(OsdReply::Failed(why)) if why.contains("past chunk 5")
        ));
        let shrink = ObjectOp::Truncate { size: 100 };
        assert!(tails(&[shrink]).expect("planned").is_empty());
    }

    #[test]
    fn a_request_changes_at_most_one_message_of_rows() {
        let zero = ObjectOp::Zero {
            offset: 0,
            len: (ROWS_MAX + 1) * 4 * CHUNK_BYTES,
        };
        let steps = edge_steps(&[zero]).expect("a byte change");
        assert!(matches!(
            EdgePlan::new(profile(), 0, &steps),
            Err(OsdReply::Failed(why)) if why.contains("at most")
        ));
    }
}
