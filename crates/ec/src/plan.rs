//! Planning a write to an erasure-coded object: which shard bytes to read first, and which
//! to write, for `len` bytes at `offset` of an object of `old_size` bytes
//! (docs/design/erasure.md, §6).
//!
//! For each stripe the write touches, its parity changes only at the unit offsets the
//! written bytes lie at (the code works position by position): those offsets rounded out to
//! whole 64-byte blocks, in one or two segments (the tail of one unit and the head of the
//! next are two; a write over whole units makes the whole unit one), each a *hull*. Parity
//! there is brought up to date one of two ways:
//! - **Delta**: read the old bytes the write replaces and the m parity shards over the hull;
//!   new parity = old parity ⊕ parity(old ⊕ new).
//! - **Rewrite**: read the stripe's other data over the hull and encode it anew with the
//!   written bytes.
//!
//! whichever reads fewer bytes, rewrite on a tie. Shard bytes past the old object's end
//! are zeros and are never read: a data unit's bytes past the old size (the padding of the
//! last stripe, and whatever lies past the shards' end), and parity where every data unit
//! is past it. So a stripe the write adds is a rewrite that reads nothing, and an append
//! reads only the stripe's units that hold data. This relies on the padding being zeros:
//! whatever shortens an object must zero its last stripe past the new size.

use std::fmt;

use crate::{CodeError, Coder, Profile, BLOCK_BYTES};

/// Largest object a plan takes (the store's limit too).
pub const OBJECT_BYTES_MAX: u64 = 1 << 40;

/// `len` bytes at `offset` of shard `shard` (data shards 0 to k - 1, then parity).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub shard: usize,
    pub offset: u64,
    pub len: u64,
}

/// How a stripe's parity is brought up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    Delta,
    Rewrite,
}

/// One hull of one stripe of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripePlan {
    pub stripe: u64,
    pub way: Way,
    /// The hull: the unit offsets `[lo, hi)` where parity changes.
    pub lo: u64,
    pub hi: u64,
    /// The data units written: (unit, unit offsets `[from, to)`, where they start in the
    /// write's bytes).
    written: Vec<(usize, u64, u64, u64)>,
}

/// Why a write cannot be planned, or a plan applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// The object would end past [`OBJECT_BYTES_MAX`].
    TooLarge {
        end: u64,
    },
    /// `apply` was given bytes of another length than a piece or the write.
    Length {
        what: &'static str,
        expected: u64,
        got: u64,
    },
    /// `apply` was given another number of reads than the plan asked for.
    Reads {
        expected: usize,
        got: usize,
    },
    Code(CodeError),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::TooLarge { end } => write!(
                f,
                "a write ending at byte {end} is past the largest object ({OBJECT_BYTES_MAX} bytes)"
            ),
            PlanError::Length {
                what,
                expected,
                got,
            } => write!(f, "{what} of {got} bytes where the plan has {expected}"),
            PlanError::Reads { expected, got } => {
                write!(f, "{got} reads given where the plan asked for {expected}")
            }
            PlanError::Code(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PlanError {}

impl From<CodeError> for PlanError {
    fn from(e: CodeError) -> PlanError {
        PlanError::Code(e)
    }
}

/// The plan of a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    profile: Profile,
    old_size: u64,
    offset: u64,
    len: u64,
    stripes: Vec<StripePlan>,
}

/// Plans a write of `len` bytes at `offset` to an object of `old_size` bytes.
pub fn plan(profile: Profile, old_size: u64, offset: u64, len: u64) -> Result<Plan, PlanError> {
    let end = offset
        .checked_add(len)
        .filter(|end| *end <= OBJECT_BYTES_MAX && old_size <= OBJECT_BYTES_MAX)
        .filter(|end| profile.shard_bytes(old_size.max(*end)) <= OBJECT_BYTES_MAX)
        .ok_or(PlanError::TooLarge {
            end: offset.saturating_add(len).max(old_size),
        })?;
    let (k, unit, width) = (profile.k(), profile.unit_bytes(), profile.width_bytes());
    let touched = match len {
        0 => 0..0,
        _ => offset / width..(end - 1) / width + 1,
    };
    let mut stripes = Vec::new();
    for stripe in touched {
        let written: Vec<(usize, u64, u64, u64)> = (0..k)
            .filter_map(|i| {
                let start = stripe * width + i as u64 * unit;
                let (from, to) = (offset.max(start), end.min(start + unit));
                (from < to).then(|| (i, from - start, to - start, from - offset))
            })
            .collect();
        for (lo, hi, written) in segments(written) {
            let limit = |shard: usize| old_limit(profile, old_size, stripe, shard);
            let below = |shard: usize, from: u64, to: u64| {
                to.min(limit(shard)).saturating_sub(from.min(limit(shard)))
            };
            let replaced: u64 = written
                .iter()
                .map(|&(shard, from, to, _)| below(shard, from, to))
                .sum();
            let others: u64 = (0..k).map(|shard| below(shard, lo, hi)).sum::<u64>() - replaced;
            let parity = profile.m() as u64 * below(k, lo, hi);
            let way = match replaced + parity < others {
                true => Way::Delta,
                false => Way::Rewrite,
            };
            stripes.push(StripePlan {
                stripe,
                way,
                lo,
                hi,
                written,
            });
        }
    }
    Ok(Plan {
        profile,
        old_size,
        offset,
        len,
        stripes,
    })
}

/// The written units of one stripe grouped by where parity changes: each unit's offsets
/// rounded out to whole blocks, overlapping ones merged. A write inside one unit is one
/// segment; one over whole units makes the whole unit one; the tail of a unit and the head
/// of the next, two. Each segment is (lo, hi, its units).
#[allow(clippy::type_complexity)]
fn segments(written: Vec<(usize, u64, u64, u64)>) -> Vec<(u64, u64, Vec<(usize, u64, u64, u64)>)> {
    let mut rounded: Vec<(u64, u64, (usize, u64, u64, u64))> = written
        .into_iter()
        .map(|w| {
            (
                w.1 / BLOCK_BYTES * BLOCK_BYTES,
                w.2.next_multiple_of(BLOCK_BYTES),
                w,
            )
        })
        .collect();
    rounded.sort_by_key(|r| (r.0, r.2 .0));
    let mut segments: Vec<(u64, u64, Vec<(usize, u64, u64, u64)>)> = Vec::new();
    for (lo, hi, w) in rounded {
        match segments.last_mut() {
            Some(last) if lo < last.1 => {
                last.1 = last.1.max(hi);
                last.2.push(w);
            }
            _ => segments.push((lo, hi, vec![w])),
        }
    }
    segments
}

/// How far, in unit offsets, `shard`'s unit of `stripe` holds old bytes: past it, up to the
/// unit's end, it holds zeros (the object's bytes there are past its old size, and parity
/// is zero where every data unit is). Only bytes below it are read.
fn old_limit(profile: Profile, old_size: u64, stripe: u64, shard: usize) -> u64 {
    let unit_index = match shard < profile.k() {
        true => shard as u64,
        false => 0,
    };
    let start = stripe * profile.width_bytes() + unit_index * profile.unit_bytes();
    old_size.saturating_sub(start).min(profile.unit_bytes())
}

impl Plan {
    pub fn stripes(&self) -> &[StripePlan] {
        &self.stripes
    }

    /// The object's size after the write.
    pub fn new_size(&self) -> u64 {
        self.old_size.max(self.offset + self.len)
    }

    /// Every shard's length after the write.
    pub fn new_shard_bytes(&self) -> u64 {
        self.profile.shard_bytes(self.new_size())
    }

    /// The old shard bytes to read before `apply`, in the order `apply` takes them. None
    /// lies past the old object's end.
    pub fn reads(&self) -> Vec<Piece> {
        let mut reads = Vec::new();
        self.each_read(|piece, _| reads.push(piece));
        reads
    }

    /// The bytes read by [`Plan::reads`], counted.
    pub fn read_bytes(&self) -> u64 {
        self.reads().iter().map(|p| p.len).sum()
    }

    /// The shard bytes the write changes, in the order of `apply`'s result: per stripe, the
    /// data written, then the m parity shards over the hull.
    pub fn writes(&self) -> Vec<Piece> {
        let (k, m, unit) = (
            self.profile.k(),
            self.profile.m(),
            self.profile.unit_bytes(),
        );
        let mut writes = Vec::new();
        for s in &self.stripes {
            let base = s.stripe * unit;
            for &(shard, from, to, _) in &s.written {
                writes.push(Piece {
                    shard,
                    offset: base + from,
                    len: to - from,
                });
            }
            writes.extend((k..k + m).map(|shard| Piece {
                shard,
                offset: base + s.lo,
                len: s.hi - s.lo,
            }));
        }
        writes
    }

    /// Calls `f` with each read, in order, and the stripe it serves.
    fn each_read(&self, mut f: impl FnMut(Piece, usize)) {
        let (k, m, unit) = (
            self.profile.k(),
            self.profile.m(),
            self.profile.unit_bytes(),
        );
        for (index, s) in self.stripes.iter().enumerate() {
            let base = s.stripe * unit;
            let mut read = |shard: usize, from: u64, to: u64| {
                let to = to.min(old_limit(self.profile, self.old_size, s.stripe, shard));
                let (from, to) = (base + from, base + to);
                if from < to {
                    f(
                        Piece {
                            shard,
                            offset: from,
                            len: to - from,
                        },
                        index,
                    );
                }
            };
            match s.way {
                Way::Delta => {
                    for &(shard, from, to, _) in &s.written {
                        read(shard, from, to);
                    }
                    for shard in k..k + m {
                        read(shard, s.lo, s.hi);
                    }
                }
                Way::Rewrite => {
                    for shard in 0..k {
                        match s.written.iter().find(|w| w.0 == shard) {
                            Some(&(_, from, to, _)) => {
                                read(shard, s.lo, from);
                                read(shard, to, s.hi);
                            }
                            None => read(shard, s.lo, s.hi),
                        }
                    }
                }
            }
        }
    }

    /// The bytes of each of [`Plan::writes`], from the write's `data` and the bytes of
    /// [`Plan::reads`], in order. Refused, computing nothing, if a length differs.
    pub fn apply(
        &self,
        coder: &mut Coder,
        data: &[u8],
        reads: &[Vec<u8>],
    ) -> Result<Vec<Vec<u8>>, PlanError> {
        assert_eq!(
            coder.profile(),
            self.profile,
            "a plan is applied with its own profile's coder"
        );
        if data.len() as u64 != self.len {
            return Err(PlanError::Length {
                what: "the write",
                expected: self.len,
                got: data.len() as u64,
            });
        }
        let pieces = self.reads();
        if pieces.len() != reads.len() {
            return Err(PlanError::Reads {
                expected: pieces.len(),
                got: reads.len(),
            });
        }
        if let Some((piece, bytes)) = pieces
            .iter()
            .zip(reads)
            .find(|(p, r)| r.len() as u64 != p.len)
        {
            return Err(PlanError::Length {
                what: "a read",
                expected: piece.len,
                got: bytes.len() as u64,
            });
        }
        let (k, m, unit) = (
            self.profile.k(),
            self.profile.m(),
            self.profile.unit_bytes(),
        );
        // Each stripe's hull of every shard, as read (zeros where nothing was read).
        let mut hulls: Vec<Vec<Vec<u8>>> = self
            .stripes
            .iter()
            .map(|s| vec![vec![0u8; (s.hi - s.lo) as usize]; k + m])
            .collect();
        let mut old: Vec<Vec<Vec<u8>>> = self
            .stripes
            .iter()
            .map(|s| {
                s.written
                    .iter()
                    .map(|(_, from, to, _)| vec![0u8; (to - from) as usize])
                    .collect()
            })
            .collect();
        let mut next = reads.iter();
        self.each_read(|piece, index| {
            let s = &self.stripes[index];
            let bytes = next.next().expect("as many reads as pieces, checked");
            let at = piece.offset - s.stripe * unit;
            let written = s.written.iter().position(|w| w.0 == piece.shard);
            match (s.way, written) {
                (Way::Delta, Some(w)) => {
                    let from = (at - s.written[w].1) as usize;
                    old[index][w][from..from + bytes.len()].copy_from_slice(bytes);
                }
                _ => {
                    let from = (at - s.lo) as usize;
                    hulls[index][piece.shard][from..from + bytes.len()].copy_from_slice(bytes);
                }
            }
        });
        let mut out = Vec::new();
        for ((s, mut hull), old) in self.stripes.iter().zip(hulls).zip(old) {
            let (data_hull, parity_hull) = hull.split_at_mut(k);
            for (w, &(shard, from, to, at)) in s.written.iter().enumerate() {
                let new = &data[at as usize..(at + to - from) as usize];
                let span = (from - s.lo) as usize..(to - s.lo) as usize;
                match s.way {
                    Way::Rewrite => data_hull[shard][span].copy_from_slice(new),
                    Way::Delta => {
                        let mut delta = vec![0u8; (s.hi - s.lo) as usize];
                        for ((d, o), n) in delta[span].iter_mut().zip(&old[w]).zip(new) {
                            *d = o ^ n;
                        }
                        let mut parity: Vec<&mut [u8]> =
                            parity_hull.iter_mut().map(Vec::as_mut_slice).collect();
                        coder.add_parity_delta(shard, &delta, &mut parity)?;
                    }
                }
                out.push(new.to_vec());
            }
            if s.way == Way::Rewrite {
                let data_refs: Vec<&[u8]> = data_hull.iter().map(Vec::as_slice).collect();
                let mut parity: Vec<&mut [u8]> =
                    parity_hull.iter_mut().map(Vec::as_mut_slice).collect();
                coder.encode(&data_refs, &mut parity)?;
            }
            out.extend(hull.drain(k..));
        }
        Ok(out)
    }
}
