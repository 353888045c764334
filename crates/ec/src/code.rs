//! The Reed-Solomon coder of one profile: parity from the data shards, any lost shards from
//! any k others, and parity brought up to date by a change of one data shard.
//!
//! Every call takes shards (or pieces of shards at the same offsets) of one length, a
//! non-zero multiple of [`BLOCK_BYTES`]. The library's own errors cannot arise once these
//! checks pass, so they are asserted, not returned.

use std::fmt;

use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};

use crate::{Profile, BLOCK_BYTES};

/// Why a call was refused; nothing was computed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodeError {
    /// Not as many shards as the call takes.
    Count { expected: usize, got: usize },
    /// A shard whose length differs from the first's, or a length that is zero or not a
    /// multiple of [`BLOCK_BYTES`].
    Length { expected: u64, got: u64 },
    /// Fewer than k shards are present: the lost ones cannot be rebuilt.
    TooFew { present: usize, needed: usize },
    /// Not a data shard's index (0 to k - 1).
    NotData { shard: usize, k: usize },
}

impl fmt::Display for CodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodeError::Count { expected, got } => {
                write!(f, "{got} shards given where {expected} are needed")
            }
            CodeError::Length { expected, got } => write!(
                f,
                "a shard of {got} bytes where {expected} were expected (shards are of one \
                 length, a non-zero multiple of {BLOCK_BYTES} bytes)"
            ),
            CodeError::TooFew { present, needed } => write!(
                f,
                "only {present} shards left where {needed} are needed to rebuild the others"
            ),
            CodeError::NotData { shard, k } => {
                write!(f, "shard {shard} is not a data shard (there are {k})")
            }
        }
    }
}

impl std::error::Error for CodeError {}

/// A profile's encoder and decoder, with their working space kept between calls.
pub struct Coder {
    profile: Profile,
    encoder: ReedSolomonEncoder,
    decoder: ReedSolomonDecoder,
    /// Zeros standing for the data shards a parity delta leaves unchanged.
    zeros: Vec<u8>,
}

impl Coder {
    pub fn new(profile: Profile) -> Coder {
        let (k, m, unit) = (profile.k(), profile.m(), profile.unit_bytes() as usize);
        Coder {
            profile,
            encoder: ReedSolomonEncoder::new(k, m, unit).expect("a valid profile's code"),
            decoder: ReedSolomonDecoder::new(k, m, unit).expect("a valid profile's code"),
            zeros: Vec::new(),
        }
    }

    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// Computes the m parity shards of the k data shards into `parity`.
    pub fn encode(&mut self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError> {
        let (k, m) = (self.profile.k(), self.profile.m());
        count(data.len(), k)?;
        count(parity.len(), m)?;
        let len = common_length(
            data.iter()
                .map(|s| s.len())
                .chain(parity.iter().map(|s| s.len())),
        )?;
        let result = self.encoded(len, data.iter().copied());
        for (out, computed) in parity.iter_mut().zip(result.recovery_iter()) {
            out.copy_from_slice(computed);
        }
        Ok(())
    }

    /// The m parity shards of the k data shards `data`, new; empty ones for empty shards.
    pub fn parity(&mut self, data: &[&[u8]]) -> Result<Vec<Vec<u8>>, CodeError> {
        let len = data.first().map_or(0, |shard| shard.len());
        let mut parity = vec![vec![0u8; len]; self.profile.m()];
        if len > 0 || data.len() != self.profile.k() {
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            self.encode(data, &mut outs)?;
        }
        Ok(parity)
    }

    /// The k + m shards of an object of `data`: its bytes split into the data shards
    /// ([`Profile::split`]), then their parity.
    pub fn encode_object(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, CodeError> {
        let mut shards = self.profile.split(data);
        let refs: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
        let parity = self.parity(&refs)?;
        shards.extend(parity);
        Ok(shards)
    }

    /// Rebuilds every absent shard (`None`) of `shards`, the k data shards then the m parity
    /// shards, from the present ones; at least k must be present.
    pub fn reconstruct(&mut self, shards: &mut [Option<Vec<u8>>]) -> Result<(), CodeError> {
        let (k, m) = (self.profile.k(), self.profile.m());
        count(shards.len(), k + m)?;
        let present = shards.iter().filter(|s| s.is_some()).count();
        if present < k {
            return Err(CodeError::TooFew { present, needed: k });
        }
        let len = common_length(shards.iter().flatten().map(|s| s.len()))?;
        if shards[..k].iter().any(Option::is_none) {
            let present = shards
                .iter()
                .enumerate()
                .filter_map(|(index, shard)| Some((index, shard.as_deref()?)));
            for (index, restored) in self.decode(len, present) {
                debug_assert!(shards[index].is_none());
                shards[index] = Some(restored);
            }
        }
        if shards[k..].iter().any(Option::is_none) {
            let mut parity = vec![vec![0u8; len]; m];
            let data: Vec<&[u8]> = shards[..k].iter().flatten().map(Vec::as_slice).collect();
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            self.encode(&data, &mut outs)?;
            for (slot, computed) in shards[k..].iter_mut().zip(parity) {
                if slot.is_none() {
                    *slot = Some(computed);
                }
            }
        }
        Ok(())
    }

    /// Brings parity up to date after data shard `shard` changed: `delta` is its old bytes ⊕
    /// its new ones over a range, and `parity` the m parity shards' bytes over the same
    /// range, which receive ⊕ the parity of the delta (the code is linear, so the other
    /// data shards, unchanged, need not be read).
    pub fn add_parity_delta(
        &mut self,
        shard: usize,
        delta: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        let (k, m) = (self.profile.k(), self.profile.m());
        if shard >= k {
            return Err(CodeError::NotData { shard, k });
        }
        count(parity.len(), m)?;
        let len =
            common_length(std::iter::once(delta.len()).chain(parity.iter().map(|s| s.len())))?;
        if self.zeros.len() < len {
            self.zeros = vec![0u8; len];
        }
        self.encoder.reset(k, m, len).expect("checked lengths");
        for index in 0..k {
            let original = if index == shard {
                delta
            } else {
                &self.zeros[..len]
            };
            self.encoder
                .add_original_shard(original)
                .expect("checked shards");
        }
        let result = self.encoder.encode().expect("every original shard added");
        for (out, computed) in parity.iter_mut().zip(result.recovery_iter()) {
            for (byte, change) in out.iter_mut().zip(computed) {
                *byte ^= change;
            }
        }
        Ok(())
    }
}

impl Coder {
    /// The m parity words of the k data words `data`, each `W` bytes (even): a word is a
    /// code word of its own, so the parity of words kept one per block (the records of
    /// chunks sealed at the edge, docs/design/erasure.md §11) follows only the words of
    /// the same block in the other shards. Zero words have zero parity.
    pub fn word_parity<const W: usize>(
        &mut self,
        data: &[[u8; W]],
    ) -> Result<Vec<[u8; W]>, CodeError> {
        const {
            assert!(
                W > 0 && W.is_multiple_of(2),
                "a word is an even number of bytes"
            )
        };
        let (k, m) = (self.profile.k(), self.profile.m());
        count(data.len(), k)?;
        if data.iter().all(|word| word.iter().all(|b| *b == 0)) {
            return Ok(vec![[0u8; W]; m]);
        }
        let result = self.encoded(W, data.iter().map(|word| &word[..]));
        Ok(result
            .recovery_iter()
            .map(|word| word.try_into().expect("a word's length"))
            .collect())
    }

    /// Rebuilds every absent word (`None`) of `words`, the k data words then the m parity
    /// words of one code word of `W` bytes each ([`Coder::word_parity`]), from the present
    /// ones; at least k must be present.
    pub fn reconstruct_words<const W: usize>(
        &mut self,
        words: &mut [Option<[u8; W]>],
    ) -> Result<(), CodeError> {
        let (k, m) = (self.profile.k(), self.profile.m());
        count(words.len(), k + m)?;
        let present = words.iter().filter(|w| w.is_some()).count();
        if present < k {
            return Err(CodeError::TooFew { present, needed: k });
        }
        if words[..k].iter().any(Option::is_none) {
            let present = words
                .iter()
                .enumerate()
                .filter_map(|(index, word)| Some((index, &word.as_ref()?[..])));
            for (index, restored) in self.decode(W, present) {
                words[index] = Some(restored.try_into().expect("a word's length"));
            }
        }
        if words[k..].iter().any(Option::is_none) {
            let data: Vec<[u8; W]> = words[..k].iter().flatten().copied().collect();
            let parity = self.word_parity(&data)?;
            for (slot, computed) in words[k..].iter_mut().zip(parity) {
                slot.get_or_insert(computed);
            }
        }
        Ok(())
    }
}

impl Coder {
    /// The encoder's result for the k data shards `data`, of `len` bytes each (checked by
    /// the caller).
    fn encoded<'a>(
        &mut self,
        len: usize,
        data: impl Iterator<Item = &'a [u8]>,
    ) -> reed_solomon_simd::EncoderResult<'_> {
        let (k, m) = (self.profile.k(), self.profile.m());
        self.encoder.reset(k, m, len).expect("checked lengths");
        for shard in data {
            self.encoder
                .add_original_shard(shard)
                .expect("checked shards");
        }
        self.encoder.encode().expect("every original shard added")
    }

    /// The absent data shards, decoded from `present` (position, bytes of length `len`; at
    /// least k of them, checked by the caller), with their positions.
    fn decode<'a>(
        &mut self,
        len: usize,
        present: impl Iterator<Item = (usize, &'a [u8])>,
    ) -> Vec<(usize, Vec<u8>)> {
        let (k, m) = (self.profile.k(), self.profile.m());
        self.decoder.reset(k, m, len).expect("checked lengths");
        for (index, shard) in present {
            if index < k {
                self.decoder
                    .add_original_shard(index, shard)
                    .expect("checked shards");
            } else {
                self.decoder
                    .add_recovery_shard(index - k, shard)
                    .expect("checked shards");
            }
        }
        let result = self.decoder.decode().expect("at least k shards added");
        result
            .restored_original_iter()
            .map(|(index, restored)| (index, restored.to_vec()))
            .collect()
    }
}

fn count(got: usize, expected: usize) -> Result<(), CodeError> {
    if got == expected {
        Ok(())
    } else {
        Err(CodeError::Count { expected, got })
    }
}

/// The one length of all the shards given, checked to be a non-zero multiple of a block.
fn common_length(mut lengths: impl Iterator<Item = usize>) -> Result<usize, CodeError> {
    let first = lengths.next().unwrap_or(0);
    if first == 0 || !(first as u64).is_multiple_of(BLOCK_BYTES) {
        return Err(CodeError::Length {
            expected: first
                .next_multiple_of(BLOCK_BYTES as usize)
                .max(BLOCK_BYTES as usize) as u64,
            got: first as u64,
        });
    }
    match lengths.find(|&len| len != first) {
        Some(got) => Err(CodeError::Length {
            expected: first as u64,
            got: got as u64,
        }),
        None => Ok(first),
    }
}
