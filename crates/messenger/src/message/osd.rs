//! What clients and OSDs ask an OSD, and its answers: object operations and their
//! results, and the OSD-to-OSD vocabulary of replication, recovery and scrub.

use std::collections::BTreeMap;

use map::cluster::Epoch;
use map::placement::{OsdId, PgId};
use map::ObjectName;
use serde::{Deserialize, Serialize};

use crate::frame::Segment;

/// Where a write stands in its placement group's history: the map epoch in which its primary
/// ordered it, then its sequence number in the PG. Later writes have greater versions.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Version {
    pub epoch: Epoch,
    pub seq: u64,
}

/// In an erasure-coded PG, the OSDs each epoch's writes were sent to, by position (`None`
/// where no OSD was up): an acknowledged write reached min_size of them.
pub type Writers = BTreeMap<Epoch, Vec<Option<OsdId>>>;

/// A client's request id: its instance (random per connection to the cluster) and a counter.
/// A write retried with the same id takes effect once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReqId {
    pub client: u64,
    pub seq: u64,
}

/// Bytes of one chunk sealed at the edge: the store's block.
pub const CHUNK_BYTES: u64 = 4096;

/// The key id of chunk records sealed under a key of their own, not the pool's (the S3
/// gateway's SSE segments, under each segment's data key): the pool's clients cannot open
/// them. Pool key ids start with their version, and the monitors never issue 65535.
pub const OWN_KEY_ID: u64 = u64::MAX;

/// The seal record of one chunk sealed at the edge (docs/design/edge-sealing.md): key id,
/// nonce and tag. OSDs keep it beside the chunk and never interpret it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkSeal {
    pub key_id: u64,
    pub nonce: [u8; 12],
    pub tag: [u8; 16],
}

/// Bytes of one [`ChunkSeal`] in a list on the wire: key id (little-endian), nonce, tag.
pub const CHUNK_SEAL_BYTES: usize = 36;

impl ChunkSeal {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    /// Its wire form: key id (little-endian), nonce, tag. In an erasure-coded pool sealed
    /// at the edge, parity shards keep the code words of these bytes as their records.
    pub fn to_bytes(&self) -> [u8; CHUNK_SEAL_BYTES] {
        let mut out = [0u8; CHUNK_SEAL_BYTES];
        out[..8].copy_from_slice(&self.key_id.to_le_bytes());
        out[8..20].copy_from_slice(&self.nonce);
        out[20..].copy_from_slice(&self.tag);
        out
    }

    pub fn from_bytes(bytes: &[u8; CHUNK_SEAL_BYTES]) -> ChunkSeal {
        ChunkSeal::take(bytes)
    }

    fn take(bytes: &[u8]) -> ChunkSeal {
        let (key_id, rest) = bytes.split_at(8);
        let (nonce, tag) = rest.split_at(12);
        ChunkSeal {
            key_id: u64::from_le_bytes(key_id.try_into().expect("8 bytes")),
            nonce: nonce.try_into().expect("12 bytes"),
            tag: tag[..16].try_into().expect("16 bytes"),
        }
    }
}

/// Lists of chunk seals travel as one byte string each (`#[serde(with = ...)]`) rather than
/// one serde value per byte of every nonce and tag: a 4 MiB write carries 1,024 of them
/// through every hop, and coding them byte by byte was about 1 % of all CPU in a profile of
/// 4 MiB writes.
mod seal_list {
    use super::{ChunkSeal, CHUNK_SEAL_BYTES};
    use serde::de::{Error, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(seals: &[ChunkSeal], s: S) -> Result<S::Ok, S::Error> {
        let mut out = Vec::with_capacity(seals.len() * CHUNK_SEAL_BYTES);
        seals.iter().for_each(|seal| seal.put(&mut out));
        s.serialize_bytes(&out)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ChunkSeal>, D::Error> {
        struct Seals;
        impl Visitor<'_> for Seals {
            type Value = Vec<ChunkSeal>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "chunk seals of {CHUNK_SEAL_BYTES} bytes each")
            }
            fn visit_bytes<E: Error>(self, bytes: &[u8]) -> Result<Self::Value, E> {
                if !bytes.len().is_multiple_of(CHUNK_SEAL_BYTES) {
                    return Err(E::invalid_length(bytes.len(), &self));
                }
                Ok(bytes
                    .chunks_exact(CHUNK_SEAL_BYTES)
                    .map(ChunkSeal::take)
                    .collect())
            }
        }
        d.deserialize_bytes(Seals)
    }
}

/// Lists of chunk seals with holes, as one byte string: per entry a byte, 0 for a hole or 1
/// for a seal, then the seal's [`CHUNK_SEAL_BYTES`].
mod seal_options {
    use super::{ChunkSeal, CHUNK_SEAL_BYTES};
    use serde::de::{Error, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(seals: &[Option<ChunkSeal>], s: S) -> Result<S::Ok, S::Error> {
        let mut out = Vec::with_capacity(seals.len() * (1 + CHUNK_SEAL_BYTES));
        for seal in seals {
            match seal {
                Some(seal) => {
                    out.push(1);
                    seal.put(&mut out);
                }
                None => out.push(0),
            }
        }
        s.serialize_bytes(&out)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<Option<ChunkSeal>>, D::Error> {
        d.deserialize_bytes(SealOptions)
    }

    pub(super) struct SealOptions;

    impl Visitor<'_> for SealOptions {
        type Value = Vec<Option<ChunkSeal>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(
                f,
                "chunk seals or holes (a byte 0, or 1 and {CHUNK_SEAL_BYTES} bytes)"
            )
        }
        fn visit_bytes<E: Error>(self, mut bytes: &[u8]) -> Result<Self::Value, E> {
            let mut seals = Vec::new();
            while let Some((&kind, rest)) = bytes.split_first() {
                match kind {
                    0 => seals.push(None),
                    1 if rest.len() >= CHUNK_SEAL_BYTES => {
                        seals.push(Some(ChunkSeal::take(&rest[..CHUNK_SEAL_BYTES])));
                        bytes = &rest[CHUNK_SEAL_BYTES..];
                        continue;
                    }
                    _ => {
                        return Err(E::custom(format!(
                            "a chunk seal entry of kind {kind} with {} bytes after it",
                            rest.len()
                        )))
                    }
                }
                bytes = rest;
            }
            Ok(seals)
        }
    }
}

/// [`seal_options`] for a list that may be absent.
mod maybe_seal_options {
    use super::seal_options::{self, SealOptions};
    use super::ChunkSeal;
    use serde::de::Visitor;
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(
        seals: &Option<Vec<Option<ChunkSeal>>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match seals {
            Some(seals) => s.serialize_some(&Wrap(seals)),
            None => s.serialize_none(),
        }
    }

    struct Wrap<'a>(&'a [Option<ChunkSeal>]);

    impl serde::Serialize for Wrap<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            seal_options::serialize(self.0, s)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<Option<ChunkSeal>>>, D::Error> {
        struct Maybe;
        impl<'de> Visitor<'de> for Maybe {
            type Value = Option<Vec<Option<ChunkSeal>>>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "chunk seals or nothing")
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_bytes(SealOptions).map(Some)
            }
        }
        d.deserialize_option(Maybe)
    }
}

/// One operation on an object. The bytes of writes travel in the data segment, in order.
///
/// A write request may carry conditions (`Assert*`), checked under the PG's lock before any
/// of its ops: if one does not hold, nothing is applied and the reply says which failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObjectOp {
    /// Condition: the object exists (else the reply is `NotFound`).
    AssertExists,
    /// Condition: attribute `name` holds `value`, or is absent for `None` (else the reply
    /// is `Mismatch`).
    AssertAttr {
        name: String,
        value: Option<Vec<u8>>,
    },
    /// Creates the object if absent; with `exclusive`, fails if it exists.
    Create {
        exclusive: bool,
    },
    /// Replaces the whole content with `len` bytes.
    WriteFull {
        len: u64,
    },
    Write {
        offset: u64,
        len: u64,
    },
    Zero {
        offset: u64,
        len: u64,
    },
    Truncate {
        size: u64,
    },
    Remove,
    SetAttr {
        name: String,
        value: Vec<u8>,
    },
    RemoveAttr {
        name: String,
    },
    OmapSet {
        entries: Vec<(Vec<u8>, Vec<u8>)>,
    },
    OmapRemove {
        keys: Vec<Vec<u8>>,
    },
    OmapClear,
    /// Reads (not mixed with writes in one request); read bytes come back in the data
    /// segment, in order.
    Read {
        offset: u64,
        len: u64,
    },
    Stat,
    GetAttrs,
    OmapGet {
        keys: Vec<Vec<u8>>,
    },
    OmapList {
        after: Option<Vec<u8>>,
        limit: u32,
    },
    /// Condition: omap key `key` holds `value`, or is absent for `None` (else the reply is
    /// `Mismatch`): with an `OmapSet`, a compare-and-swap of one omap entry. (Added last, so
    /// that the other ops keep their numbers on the wire.)
    AssertOmap {
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    },
    /// Stores whole chunks sealed by the client (edge pools only), from chunk index `first`:
    /// `seals.len()` chunks of [`CHUNK_BYTES`] in the data segment. The object's size
    /// becomes at least `end`, the end of the written bytes (inside the last chunk).
    WriteChunks {
        first: u64,
        #[serde(with = "seal_list")]
        seals: Vec<ChunkSeal>,
        end: u64,
    },
    /// Reads `count` chunks from index `first` as stored, sealed, with their records and the
    /// object's size ([`OpResult::Chunks`]); a hole has no record and reads as zeros.
    ReadChunks {
        first: u64,
        count: u32,
    },
    /// Condition: chunk `index` is the one sealed with `seal` (`None`: no chunk there).
    AssertChunk {
        index: u64,
        seal: Option<ChunkSeal>,
    },
}

impl ObjectOp {
    /// Writes, and the conditions that go with them.
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            ObjectOp::Read { .. }
                | ObjectOp::Stat
                | ObjectOp::GetAttrs
                | ObjectOp::OmapGet { .. }
                | ObjectOp::OmapList { .. }
                | ObjectOp::ReadChunks { .. }
        )
    }

    /// Whether the op writes data, which takes blocks of a store's data area: what a full
    /// store refuses. Attributes and omap live in the store's metadata database, so
    /// metadata writes (a delete's bookkeeping among them) still go through.
    pub fn writes_data(&self) -> bool {
        matches!(
            self,
            ObjectOp::WriteFull { .. } | ObjectOp::Write { .. } | ObjectOp::WriteChunks { .. }
        )
    }

    /// Whether the op may add to a store's metadata database (objects, attributes, omap
    /// entries, extents), which grows on the file system under the store: what an OSD whose
    /// file system is short of room refuses. Removals and conditions take nothing.
    pub fn adds_metadata(&self) -> bool {
        self.is_write()
            && !self.is_condition()
            && !matches!(
                self,
                ObjectOp::Remove
                    | ObjectOp::RemoveAttr { .. }
                    | ObjectOp::OmapRemove { .. }
                    | ObjectOp::OmapClear
            )
    }

    pub fn is_condition(&self) -> bool {
        matches!(
            self,
            ObjectOp::AssertExists
                | ObjectOp::AssertAttr { .. }
                | ObjectOp::AssertOmap { .. }
                | ObjectOp::AssertChunk { .. }
        )
    }

    /// Bytes this op takes from the request's data segment.
    pub fn data_len(&self) -> u64 {
        match self {
            ObjectOp::WriteFull { len } | ObjectOp::Write { len, .. } => *len,
            ObjectOp::WriteChunks { seals, .. } => seals.len() as u64 * CHUNK_BYTES,
            _ => 0,
        }
    }
}

/// The result of one read op; `Read` bytes are in the reply's data segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpResult {
    Read {
        len: u64,
    },
    Stat {
        size: u64,
        mtime_ns: u64,
        version: Version,
    },
    Attrs(BTreeMap<String, Vec<u8>>),
    Omap(Vec<(Vec<u8>, Option<Vec<u8>>)>),
    /// A page of `OmapList`: entries in key order, as many as asked (1,000 at most) that
    /// fit half a frame's metadata (one at least), and whether more follow the last.
    OmapList {
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        more: bool,
    },
    /// Sealed chunks read (in the data segment, zeros for holes), with the object's size. On a
    /// secure link the segment is bound only by these records ([`Segment::Bound`]): its
    /// receiver opens every chunk before using a byte of it.
    Chunks {
        size: u64,
        #[serde(with = "seal_options")]
        seals: Vec<Option<ChunkSeal>>,
    },
}

/// A request to an OSD.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum OsdRequest {
    /// A client's operations on one object, to the primary of its PG. `epoch` is the map the
    /// client used.
    Op {
        pg: PgId,
        epoch: Epoch,
        object: ObjectName,
        reqid: ReqId,
        ops: Vec<ObjectOp>,
    },
    /// A page of a PG's object names, in (hash, name) order, to its primary.
    List {
        pg: PgId,
        epoch: Epoch,
        after: Option<ObjectName>,
        limit: u32,
    },
    /// From a PG's primary to the other OSDs of its acting set.
    Peer { pg: PgId, epoch: Epoch, op: PeerOp },
    /// An operator's scrub of one page of a PG, to its primary: every copy of the objects
    /// named after `after` is compared, and with `repair` the copies that differ from the
    /// majority are replaced by it. Answered with `Scrubbed`.
    Scrub {
        pg: PgId,
        epoch: Epoch,
        after: Option<ObjectName>,
        repair: bool,
    },
    /// Read repair, from a client that could not open what the primary read of `object` (a
    /// chunk sealed at the edge failed its tag): the primary compares every copy of it and,
    /// where they differ, counts its own as the bad one and replaces each bad copy with a
    /// good one, as scrub would. Answered with `Repaired`.
    Repair {
        pg: PgId,
        epoch: Epoch,
        object: ObjectName,
    },
}

impl OsdRequest {
    /// Whether the data segment is chunks sealed at the edge (and so travels open on a secure
    /// link, checked by its segment check): decided by what the request is, never by a free
    /// flag.
    pub fn data_is_sealed(&self) -> bool {
        let writes_chunks = |ops: &[ObjectOp]| {
            ops.iter()
                .any(|op| matches!(op, ObjectOp::WriteChunks { .. }))
        };
        match self {
            OsdRequest::Op { ops, .. } => writes_chunks(ops),
            OsdRequest::Peer {
                op: PeerOp::Replicate { writes },
                ..
            } => writes.iter().any(|write| writes_chunks(&write.ops)),
            OsdRequest::Peer {
                op: PeerOp::Push {
                    copy: Some(copy), ..
                },
                ..
            } => copy.chunks.is_some(),
            _ => false,
        }
    }
}

impl OsdReply {
    /// How the data segment crosses a secure link. Chunks read for a client
    /// ([`OpResult::Chunks`], whose records the reply's metadata carries) are bound by those
    /// records: the client opens every one. A recovery copy of an edge pool goes to a daemon
    /// that cannot open it, so the link checks it. Anything else is encrypted by the link.
    pub fn data_segment(&self) -> Segment {
        match self {
            OsdReply::Results(results)
                if results.iter().any(|r| matches!(r, OpResult::Chunks { .. })) =>
            {
                Segment::Bound
            }
            OsdReply::Copy(Some(copy)) if copy.chunks.is_some() => Segment::Open,
            _ => Segment::Inside,
        }
    }
}

/// One write of a group a primary replicates ([`PeerOp::Replicate`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Replicated {
    pub entry: LogEntry,
    pub ops: Vec<ObjectOp>,
    /// Its bytes of the data segment.
    pub len: u64,
}

/// Most names in one page of a listing.
pub const LIST_PAGE_MAX: u32 = 1000;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum PeerOp {
    /// What do you hold of this PG? Answered with `Info`. Peering's and recovery's queries
    /// carry a claim: from then on the OSD takes no push or activation under an older one.
    Query { claim: Claim },
    /// Apply these writes, which the primary ordered at consecutive versions, in one
    /// transaction: each takes the next `len` bytes of the data segment.
    Replicate { writes: Vec<Replicated> },
    /// A page of (name, version) of the PG's objects, in (hash, name) order. In an
    /// erasure-coded PG, a shard written for another position than `position` (the one
    /// the asker's map gives you) is listed at the default version: it is to be rebuilt.
    List {
        after: Option<ObjectName>,
        limit: u32,
        position: Option<u8>,
    },
    /// The piece of your copy of `object` that begins `at`: up to `len` bytes of its data,
    /// and a page of its omap.
    Pull {
        object: ObjectName,
        at: CopyAt,
        len: u64,
    },
    /// Take this piece of a copy of `object` (`None`: remove it), its data at `offset`. A
    /// copy comes in pieces in order: the `first` replaces the object, the `last` sets its
    /// version.
    Push {
        claim: Claim,
        object: ObjectName,
        copy: Option<ObjectCopy>,
        offset: u64,
        first: bool,
        last: bool,
    },
    /// You now hold all of the PG: take this log and join the acting set's writes. In an
    /// erasure-coded PG, drop the undo records of its entries up to `complete_to`, which
    /// min_size holders applied (as `Shard` says).
    Activate {
        claim: Claim,
        info: PgInfo,
        log: Vec<LogEntry>,
        complete_to: Version,
        /// In an erasure-coded PG, the position whose shards you now hold.
        position: Option<u8>,
        /// In an erasure-coded PG, the OSDs the log's writes were sent to, as far as the
        /// primary knows (`Writers`).
        writers: Writers,
    },
    /// The digest of your copy of each of `names`, in order. Answered with `Digests`.
    Digest { names: Vec<ObjectName> },
    /// Apply your shard of this write to an erasure-coded object, which the primary ordered
    /// as `entry`: `ops` on the shard (its bytes in the data segment), after which the
    /// object's logical size is `size`. The store keeps the way back (an undo record) under
    /// the entry's version, and drops those of the PG's entries up to `complete_to`, which
    /// min_size holders applied, so no peering can take it back (docs/design/erasure.md,
    /// §6).
    Shard {
        entry: LogEntry,
        shard: u8,
        size: u64,
        complete_to: Version,
        /// The OSDs this write goes to, by position (`Writers`).
        holders: Vec<Option<OsdId>>,
        ops: Vec<ObjectOp>,
    },
    /// Take back every write of this PG above `to` (an erasure-coded PG's writes that
    /// reached fewer than k holders) from your undo records, newest first, and end your log
    /// at `to`; under the claim of the peering that decided it.
    Rollback { claim: Claim, to: Version },
    /// Your shard of `object`: `(offset, len)` pieces of it, each `len` bytes in the data
    /// segment (zeros past the shard's end; in a pool sealed at the edge, whole blocks as
    /// stored, with their records). Answered with `ShardPieces`. With `device`,
    /// read from the data device, neither using nor filling the read cache (scrub).
    ReadShard {
        object: ObjectName,
        pieces: Vec<(u64, u64)>,
        device: bool,
    },
    /// Every write of this erasure-coded PG up to `to` is on min_size holders: sent once
    /// its writes pause (the next write says as much in `Shard::complete_to`), kept in
    /// memory and answered to the next peering's query, so a read-only PG led by another
    /// primary reads the objects those writes left (docs/design/erasure.md, §7).
    Complete { to: Version },
}

/// What a shard holder says of its shard of an object, with the pieces it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardHead {
    pub version: Version,
    /// The position the shard was written for.
    pub shard: u8,
    /// The object's logical size.
    pub size: u64,
}

/// Who may write copies of a PG's objects to an OSD: a recovery (or a repair) of the
/// primary, in the interval that began at `interval`, under `token`, which the primary draws
/// from a counter that only grows. Later claims compare greater. An OSD refuses pushes and
/// activations under a claim older than the newest it has seen, so a piece of a superseded
/// recovery that arrives late cannot overwrite what a newer one copied (F3 in
/// docs/design/pg-core.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Claim {
    pub interval: Epoch,
    pub token: u64,
}

/// What scrub compares of one copy of an object. In an edge-sealed pool the data digest is
/// over the chunks and their records as stored, so no OSD needs the pool's key to compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectDigest {
    pub version: Version,
    pub size: u64,
    /// XXH3-128 of the attributes and the omap.
    pub meta: u128,
    /// XXH3-128 of the data (plaintext, or sealed chunks with their records).
    pub data: u128,
}

/// One OSD's answer for one object: its digest, `Absent`, or why its copy cannot be read
/// (the store's integrity check failed, or a read error).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CopyDigest {
    Present(ObjectDigest),
    Absent,
    Unreadable(String),
}

/// An object whose copies disagree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubFinding {
    pub object: ObjectName,
    /// The OSDs whose copy differs from the majority (or every OSD, when there is none).
    pub osds: Vec<OsdId>,
    /// What differs, for the operator.
    pub what: String,
    /// A majority holds the newest version, so repair may replace the other copies.
    pub repairable: bool,
    /// The differing copies were replaced by the majority's.
    pub repaired: bool,
}

/// One page of a PG's scrub.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubPage {
    /// The OSDs compared: the primary and its clean replicas.
    pub osds: Vec<OsdId>,
    pub objects: u64,
    /// Data bytes read on the primary.
    pub bytes: u64,
    pub findings: Vec<ScrubFinding>,
    /// Where the next page starts (`None`: the PG is done).
    pub next: Option<ObjectName>,
}

/// Where a piece of an object's copy begins: its data at `offset`, its omap at `omap`.
/// The `first` piece carries the object's attributes, and replaces the object where it is
/// written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyAt {
    pub first: bool,
    pub offset: u64,
    pub omap: OmapAt,
}

impl CopyAt {
    pub const FIRST: CopyAt = CopyAt {
        first: true,
        offset: 0,
        omap: OmapAt::Start,
    };
}

/// Where a piece's page of an object's omap begins: at its first key, after a key, or
/// nowhere (the omap is copied, or not wanted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OmapAt {
    Start,
    After(Vec<u8>),
    Done,
}

/// One piece of an object's state as recovery copies it (`PeerOp::Pull`); data travels in
/// the data segment. The omap comes in pages, so a piece fits a frame's metadata however
/// large the omap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectCopy {
    pub version: Version,
    pub size: u64,
    /// In the first piece only (empty in the others).
    pub attrs: BTreeMap<String, Vec<u8>>,
    /// A page of the omap, in key order.
    pub omap: Vec<(Vec<u8>, Vec<u8>)>,
    /// Entries follow the page's last.
    pub omap_more: bool,
    /// In an edge-sealed pool, the records of the piece's chunks (the data segment holds
    /// the chunks as stored); `None` elsewhere, where the data is plaintext.
    #[serde(with = "maybe_seal_options")]
    pub chunks: Option<Vec<Option<ChunkSeal>>>,
}

/// One write in a PG's log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    pub version: Version,
    pub object: ObjectName,
    pub reqid: ReqId,
}

impl LogEntry {
    /// The most bytes the entry takes on the wire: the name with its length prefix, and
    /// the four numbers of its version and request id as varints.
    pub fn wire_bytes_max(&self) -> usize {
        self.object.as_str().len() + 2 + 4 * 10
    }
}

/// What an OSD holds of a PG: every write up to `last`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgInfo {
    pub last: Version,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum OsdReply {
    /// A write took effect (or had already, for a retried request id).
    Written {
        version: Version,
    },
    /// Read results, one per op; read bytes in the data segment.
    Results(Vec<OpResult>),
    Listing {
        names: Vec<ObjectName>,
        more: bool,
    },
    Info {
        info: PgInfo,
        log: Vec<LogEntry>,
        /// A catch-up of this copy was interrupted: its objects may be newer than its log,
        /// so it is recovered, never counted clean.
        unsettled: bool,
        /// In an erasure-coded PG, the position whose shards this OSD holds (`None` before
        /// its first shard): one that moved holds another position's shards.
        position: Option<u8>,
        /// In an erasure-coded PG whose copy here is catching up (unsettled, or of mixed
        /// positions): the shards it holds of writes above those it knows min_size holders
        /// applied (object, version, position), the newest 2,000 at most (a PG log's length).
        held: Vec<(ObjectName, Version, u8)>,
        /// In an erasure-coded PG, the OSDs its log's writes were sent to, for the epochs
        /// this OSD applied writes in.
        writers: Writers,
        /// In an erasure-coded PG, the newest version this OSD knows min_size holders
        /// applied (every write up to it), as far as it heard (`PeerOp::Complete`).
        complete: Version,
    },
    PeerListing {
        entries: Vec<(ObjectName, Version)>,
        more: bool,
    },
    Copy(Option<ObjectCopy>),
    Digests(Vec<CopyDigest>),
    Scrubbed(ScrubPage),
    /// What read repair found and did: `None` when every copy is alike.
    Repaired(Option<ScrubFinding>),
    Done,
    /// The OSD's map says another OSD leads this PG (or the client's map is older than
    /// `epoch`): get a map at least this new and send again.
    Retry {
        epoch: Epoch,
        why: String,
    },
    /// The PG cannot serve now (see the reason); the client waits and sends again.
    Busy(String),
    /// A write of data refused because a store that would take it is full; nothing was
    /// applied. Deletes and metadata writes are still taken.
    Full(String),
    NotFound,
    Exists,
    /// A condition of the request (`AssertAttr`, `AssertOmap`) did not hold; nothing was applied.
    Mismatch(String),
    Denied(String),
    Failed(String),
    /// What was read fails its integrity check on this OSD, and no good copy replaced it
    /// (every copy is damaged, or none could be read): the bytes are not returned.
    Integrity(String),
    /// The pieces of a shard read (`PeerOp::ReadShard`), in the data segment: `None` when
    /// this OSD holds no shard of the object. In a pool sealed at the edge, with the record
    /// kept beside each block of the pieces (`None` for a hole); otherwise no records.
    ShardPieces(Option<ShardHead>, Vec<Option<ChunkSeal>>),
}
