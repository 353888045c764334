//! Objects of erasure-coded PGs on their primary (docs/design/erasure.md, §5, §6 and §8):
//! a client's write becomes one shard write per holder, planned by `ec::plan`; a read
//! gathers the data shards' units, decoding from k shards where one cannot be read. What
//! a write does to each shard is decided here without IO ([`data_change`],
//! [`shard_writes`], [`data_pieces`]); the rest is the thin part that reads shards from
//! this OSD's store and from the other holders.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use ec::{Coder, Piece, Profile, BLOCK_BYTES};
use map::placement::{OsdId, PgId};
use map::ObjectName;
use messenger::message::{
    Claim, ObjectOp, OpResult, OsdReply, OsdRequest, PeerOp, ShardHead, Version,
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

/// Where a PG's shards are read from: the primary's view, under the PG's lock.
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
        }
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
            Ok((kept, _)) if kept != position => kept,
            _ => return false,
        };
        let mut elsewhere = BTreeSet::new();
        for other in (0..self.profile.shards()).filter(|p| *p != position) {
            if let Ok((shard, _)) = self.read_at(object, version, other, &[]).await {
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
        let mut by_shard: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (index, piece) in pieces.iter().enumerate() {
            by_shard.entry(piece.shard).or_default().push(index);
        }
        let mut out: Vec<Option<Vec<u8>>> = vec![None; pieces.len()];
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
        for (shard, indexes, read) in futures::future::join_all(reads).await {
            match read {
                Some(bytes) => {
                    let mut at = 0;
                    for i in indexes {
                        let len = pieces[i].len as usize;
                        out[i] = Some(bytes[at..at + len].to_vec());
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
                .await?;
            for (i, bytes) in indexes.into_iter().zip(rebuilt) {
                out[i] = Some(bytes);
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
    ) -> Result<Vec<Vec<u8>>, OsdReply> {
        let spans = block_spans(wanted);
        let cut = |bytes: &[u8]| -> Vec<Vec<u8>> {
            wanted
                .iter()
                .map(|&(offset, len)| {
                    let at = span_position(&spans, offset);
                    bytes[at..at + len as usize].to_vec()
                })
                .collect()
        };
        let (k, n) = (self.profile.k(), self.profile.shards());
        let mut shards: Vec<Option<Vec<u8>>> = vec![None; n];
        let mut present = 0;
        for position in 0..n {
            if present == k {
                break;
            }
            if failed.contains(&position) {
                continue;
            }
            match self.read_at(object, version, position, &spans).await {
                Ok((held, bytes)) if held == shard => return Ok(cut(&bytes)),
                Ok((held, bytes)) => {
                    if shards[held].is_none() {
                        shards[held] = Some(bytes);
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
        Coder::new(self.profile)
            .reconstruct(&mut shards)
            .map_err(|e| OsdReply::Failed(format!("decoding {object}: {e}")))?;
        let whole = shards[shard].take().expect("reconstructed");
        Ok(cut(&whole))
    }

    /// `ranges` of shard `shard` of `object` from the holder of its position, if it holds
    /// that shard at `version`.
    async fn read_shard(
        &self,
        object: &ObjectName,
        version: Version,
        shard: usize,
        ranges: &[(u64, u64)],
    ) -> Option<Vec<u8>> {
        let why = match self.read_at(object, version, shard, ranges).await {
            Ok((held, bytes)) if held == shard => return Some(bytes),
            Ok((held, _)) => format!("it holds shard {held}"),
            Err(why) => why,
        };
        self.warn(object, shard, &why);
        None
    }

    fn warn(&self, object: &ObjectName, position: usize, why: &str) {
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
    ) -> Result<(usize, Vec<u8>), String> {
        let wanted: u64 = ranges.iter().map(|(_, len)| len).sum();
        match self.fetch(object, position, ranges).await? {
            Some((head, bytes))
                if head.version == version
                    && usize::from(head.shard) < self.profile.shards()
                    && bytes.len() as u64 == wanted =>
            {
                Ok((usize::from(head.shard), bytes))
            }
            Some((head, _)) => Err(format!(
                "it holds shard {} at version {}.{}",
                head.shard, head.version.epoch, head.version.seq
            )),
            None => Err("it holds no shard of the object".into()),
        }
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
            .map(|(head, _)| head))
    }

    /// `ranges` of whatever shard of `object` the holder of `position` has, with its head.
    async fn fetch(
        &self,
        object: &ObjectName,
        position: usize,
        ranges: &[(u64, u64)],
    ) -> Result<Option<(ShardHead, Vec<u8>)>, String> {
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
            let (ranges, via) = (ranges.to_vec(), self.via);
            self.inner
                .blocking(move |store| objects::read_shard(store, &object, &ranges, via))
                .await
                .and_then(|read| {
                    read.map_err(|e| match e {
                        store::ReadError::Integrity { .. }
                        | store::ReadError::MetadataIntegrity { .. } => damaged(e.to_string()),
                        e => e.to_string(),
                    })
                })
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
                Ok((OsdReply::ShardPieces(head), data)) => {
                    Ok(head.map(|head| (head, data.to_vec())))
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
}
