//! `ec`: erasure coding's arithmetic. A [`Profile`] (k data shards, m parity shards, a
//! stripe unit) says where each byte of an object lies among its k + m shards; a [`Coder`]
//! computes the parity shards and rebuilds lost ones, by Reed-Solomon over GF(2^16)
//! (reed-solomon-simd, which picks AVX2, SSSE3 or NEON code at run time).
//!
//! Pure and synchronous: no IO, no clock, no randomness. It must never depend on tokio, on
//! any IO crate, or on any other Coffer crate; the OSD and the benches build on it
//! ([design/erasure.md](../../../docs/design/erasure.md)).
//!
//! # Layout
//!
//! An object is cut into stripes of k units. Unit i of stripe s holds the object's bytes
//! `[s·width + i·unit, s·width + (i + 1)·unit)` (width = k·unit) and lives in data shard i
//! at `[s·unit, (s + 1)·unit)`. Parity shard j holds parity j of stripe s at the same place.
//! Every shard of an object of `size` bytes is `stripes(size)·unit` bytes long: the last
//! stripe is padded with zeros, which the code covers as it covers data.
//!
//! # The two properties the rest of Coffer relies on
//!
//! - **Position by position.** Parity bytes at shard offsets `[a, b)` depend only on the data
//!   shards' bytes at `[a, b)`, for `a` and `b` multiples of [`BLOCK_BYTES`] (the library
//!   works in 64-byte blocks; every unit is a multiple of it). So the parity of a run of
//!   stripes is one call over the run, and a write inside a unit touches parity only under
//!   it.
//! - **Linear.** parity(a ⊕ b) = parity(a) ⊕ parity(b). A partial overwrite therefore
//!   updates parity from the change alone ([`Coder::add_parity_delta`]), without reading the
//!   stripe's other data units.
//!
//! Both are tested here (`tests`), against the library as built. A write is planned on
//! them ([`plan`]): which shard bytes to read and which to write, by parity delta or by
//! encoding the touched part of a stripe again.

mod code;
mod plan;

pub use code::{CodeError, Coder};
pub use plan::{plan, Piece, Plan, PlanError, StripePlan, Way, OBJECT_BYTES_MAX};

use std::fmt;

/// Most shards a profile may have: k + m ≤ 32 (Ceph's jerasure allows up to 32 too).
pub const SHARDS_MAX: usize = 32;
/// The code works in blocks of this many bytes: parity at a block depends only on the data
/// at the same block.
pub const BLOCK_BYTES: u64 = 64;
/// Smallest stripe unit: one sealed chunk of an edge pool, one store block.
pub const UNIT_BYTES_MIN: u32 = 4096;
/// Largest stripe unit.
pub const UNIT_BYTES_MAX: u32 = 1 << 20;
/// The default stripe unit (as Ceph's): a 4 KiB write touches one data unit, and a small
/// object is padded to k·4 KiB, not to k units of a larger size.
pub const UNIT_BYTES_DEFAULT: u32 = 4096;

/// A validated erasure-code profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    k: u8,
    m: u8,
    unit_bytes: u32,
}

/// Why a profile was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileError {
    /// Not of the form `K+M` with decimal numbers.
    Syntax(String),
    /// k or m is zero.
    Zero,
    /// k + m is beyond [`SHARDS_MAX`].
    TooManyShards(usize),
    /// The unit is not a multiple of 4 KiB between 4 KiB and 1 MiB.
    Unit(u64),
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::Syntax(text) => {
                write!(
                    f,
                    "{text:?} is not an erasure-code profile: write K+M, as 4+2 or 8+3"
                )
            }
            ProfileError::Zero => write!(f, "an erasure-code profile needs k ≥ 1 and m ≥ 1"),
            ProfileError::TooManyShards(n) => {
                write!(
                    f,
                    "k + m = {n} is more shards than the {SHARDS_MAX} a profile may have"
                )
            }
            ProfileError::Unit(bytes) => write!(
                f,
                "a stripe unit of {bytes} bytes is refused: it must be a multiple of 4 KiB from \
                 4 KiB to 1 MiB"
            ),
        }
    }
}

impl std::error::Error for ProfileError {}

impl Profile {
    pub fn new(k: usize, m: usize, unit_bytes: u64) -> Result<Profile, ProfileError> {
        if k == 0 || m == 0 {
            return Err(ProfileError::Zero);
        }
        if k + m > SHARDS_MAX {
            return Err(ProfileError::TooManyShards(k + m));
        }
        let unit_ok = (u64::from(UNIT_BYTES_MIN)..=u64::from(UNIT_BYTES_MAX)).contains(&unit_bytes)
            && unit_bytes.is_multiple_of(u64::from(UNIT_BYTES_MIN));
        if !unit_ok {
            return Err(ProfileError::Unit(unit_bytes));
        }
        // Checked above: k + m ≤ 32 and the unit ≤ 1 MiB.
        Ok(Profile {
            k: k as u8,
            m: m as u8,
            unit_bytes: unit_bytes as u32,
        })
    }

    /// `K+M` (as an operator writes it: `4+2`, `8+3`) with the given unit.
    pub fn parse(text: &str, unit_bytes: u64) -> Result<Profile, ProfileError> {
        let syntax = || ProfileError::Syntax(text.to_owned());
        let (k, m) = text.trim().split_once('+').ok_or_else(syntax)?;
        let number = |s: &str| {
            let s = s.trim();
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            s.parse::<usize>().map_err(|_| syntax())
        };
        Profile::new(number(k)?, number(m)?, unit_bytes)
    }

    pub fn k(&self) -> usize {
        usize::from(self.k)
    }

    pub fn m(&self) -> usize {
        usize::from(self.m)
    }

    /// k + m.
    pub fn shards(&self) -> usize {
        self.k() + self.m()
    }

    pub fn unit_bytes(&self) -> u64 {
        u64::from(self.unit_bytes)
    }

    /// Bytes of object data per stripe: k units.
    pub fn width_bytes(&self) -> u64 {
        self.k() as u64 * self.unit_bytes()
    }

    /// Stripes an object of `size` bytes spans.
    pub fn stripes(&self, size: u64) -> u64 {
        size.div_ceil(self.width_bytes())
    }

    /// Bytes of each of the shards of an object of `size` bytes.
    pub fn shard_bytes(&self, size: u64) -> u64 {
        self.stripes(size) * self.unit_bytes()
    }

    /// Bytes stored for an object of `size` bytes, over all its shards.
    pub fn stored_bytes(&self, size: u64) -> u64 {
        self.shard_bytes(size) * self.shards() as u64
    }

    /// Where the object's byte at `offset` lives: (data shard, offset in that shard).
    pub fn locate(&self, offset: u64) -> (usize, u64) {
        let stripe = offset / self.width_bytes();
        let within = offset % self.width_bytes();
        let shard = (within / self.unit_bytes()) as usize;
        debug_assert!(shard < self.k());
        (
            shard,
            stripe * self.unit_bytes() + within % self.unit_bytes(),
        )
    }

    /// Cuts `data` (an object's bytes from its start) into its k data shards, each
    /// `shard_bytes(data.len())` long, zero-padded.
    pub fn split(&self, data: &[u8]) -> Vec<Vec<u8>> {
        let shard_bytes = self.shard_bytes(data.len() as u64) as usize;
        let unit = self.unit_bytes() as usize;
        let mut shards = vec![vec![0u8; shard_bytes]; self.k()];
        for (index, piece) in data.chunks(unit).enumerate() {
            let (stripe, shard) = (index / self.k(), index % self.k());
            shards[shard][stripe * unit..stripe * unit + piece.len()].copy_from_slice(piece);
        }
        shards
    }

    /// The object's first `size` bytes, gathered from its k data shards (the inverse of
    /// [`Profile::split`]).
    ///
    /// # Panics
    /// If there are not k shards or one is shorter than `shard_bytes(size)`.
    pub fn join(&self, data_shards: &[&[u8]], size: u64) -> Vec<u8> {
        assert_eq!(data_shards.len(), self.k(), "join takes the k data shards");
        let unit = self.unit_bytes() as usize;
        let mut object = Vec::with_capacity(size as usize);
        let mut index = 0;
        while object.len() < size as usize {
            let (stripe, shard) = (index / self.k(), index % self.k());
            let take = unit.min(size as usize - object.len());
            object.extend_from_slice(&data_shards[shard][stripe * unit..stripe * unit + take]);
            index += 1;
        }
        object
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.k, self.m)
    }
}

#[cfg(test)]
mod tests;
