//! The code against the library as built: profiles parsed and refused, sizes counted in
//! whole stripes, bad shapes refused, and the properties the rest of Coffer relies on (any k
//! shards rebuild the rest; parity is computed block by block and is linear).

use proptest::prelude::*;

use super::*;

fn profiles() -> impl Strategy<Value = Profile> {
    (1usize..=8, 1usize..=4, 1u64..=4)
        .prop_map(|(k, m, units)| Profile::new(k, m, units * 4096).expect("valid profile"))
}

fn parity_of(coder: &mut Coder, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    coder.parity(&refs).expect("encode")
}

#[test]
fn profiles_are_parsed_as_operators_write_them() {
    let profile = Profile::parse("8+3", 4096).expect("8+3");
    assert_eq!((profile.k(), profile.m(), profile.shards()), (8, 3, 11));
    assert_eq!(profile.to_string(), "8+3");
    assert_eq!(
        Profile::parse(" 4 + 2 ", 65536)
            .expect("spaces")
            .width_bytes(),
        4 * 65536
    );
    for bad in ["4", "4+", "+2", "4-2", "a+2", "4+2+1", "-4+2", ""] {
        assert_eq!(
            Profile::parse(bad, 4096),
            Err(ProfileError::Syntax(bad.to_owned())),
            "{bad:?}"
        );
    }
    assert_eq!(Profile::parse("0+2", 4096), Err(ProfileError::Zero));
    assert_eq!(Profile::parse("4+0", 4096), Err(ProfileError::Zero));
    assert_eq!(
        Profile::parse("30+3", 4096),
        Err(ProfileError::TooManyShards(33))
    );
    for unit in [0, 512, 6144, 2 << 20] {
        assert_eq!(Profile::parse("4+2", unit), Err(ProfileError::Unit(unit)));
    }
    let message = Profile::parse("4x2", 4096)
        .expect_err("refused")
        .to_string();
    assert!(message.contains("write K+M"), "{message}");
}

#[test]
fn sizes_are_counted_in_whole_stripes() {
    let profile = Profile::new(4, 2, 4096).expect("4+2");
    assert_eq!(profile.width_bytes(), 16384);
    assert_eq!(profile.stripes(0), 0);
    assert_eq!(profile.stripes(1), 1);
    assert_eq!(profile.stripes(16384), 1);
    assert_eq!(profile.stripes(16385), 2);
    assert_eq!(profile.shard_bytes(4 << 20), 1 << 20);
    // 4 MiB stored as 6 shards of 1 MiB: 1.5 times the data.
    assert_eq!(profile.stored_bytes(4 << 20), 6 << 20);
    // One byte still costs a unit on every shard.
    assert_eq!(profile.stored_bytes(1), 6 * 4096);
    assert_eq!(profile.locate(0), (0, 0));
    assert_eq!(profile.locate(4096 + 5), (1, 5));
    assert_eq!(profile.locate(16384 * 3 + 4096 * 3 + 7), (3, 4096 * 3 + 7));
}

#[test]
fn shards_of_the_wrong_shape_are_refused() {
    let mut coder = Coder::new(Profile::new(2, 1, 4096).expect("2+1"));
    let a = vec![0u8; 128];
    let odd = vec![0u8; 100];
    let mut p = vec![0u8; 128];
    assert_eq!(
        coder.encode(&[&a], &mut [&mut p]),
        Err(CodeError::Count {
            expected: 2,
            got: 1
        })
    );
    assert_eq!(
        coder.encode(&[&a, &odd], &mut [&mut p]),
        Err(CodeError::Length {
            expected: 128,
            got: 100
        })
    );
    assert_eq!(
        coder.encode(&[&odd, &odd], &mut [&mut odd.clone()]),
        Err(CodeError::Length {
            expected: 128,
            got: 100
        })
    );
    let mut shards = vec![Some(a.clone()), None, None];
    assert_eq!(
        coder.reconstruct(&mut shards),
        Err(CodeError::TooFew {
            present: 1,
            needed: 2
        })
    );
    assert_eq!(shards, vec![Some(a.clone()), None, None], "nothing changed");
    assert_eq!(
        coder.add_parity_delta(2, &a, &mut [&mut p]),
        Err(CodeError::NotData { shard: 2, k: 2 })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Split then join gives the object back, every shard is `shard_bytes` long, and each
    /// byte is where `locate` says.
    #[test]
    fn split_places_each_byte_where_locate_says(
        profile in profiles(),
        size in 1usize..200_000,
        seed in any::<u8>(),
    ) {
        let object: Vec<u8> = (0..size).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
        let shards = profile.split(&object);
        prop_assert_eq!(shards.len(), profile.k());
        for shard in &shards {
            prop_assert_eq!(shard.len() as u64, profile.shard_bytes(size as u64));
        }
        for offset in (0..size).step_by(997) {
            let (shard, at) = profile.locate(offset as u64);
            prop_assert_eq!(shards[shard][at as usize], object[offset]);
        }
        let refs: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
        prop_assert_eq!(profile.join(&refs, size as u64), object);
    }

    /// Words of 36 bytes (a chunk's seal record): any k of a code word's k + m rebuild the
    /// others, zero words have zero parity, and the code is linear, so a parity word
    /// changes by the parity of a data word's change.
    #[test]
    fn any_k_words_rebuild_the_rest(
        profile in profiles(),
        seed in any::<u64>(),
        lost_seed in any::<u64>(),
    ) {
        let (k, m) = (profile.k(), profile.m());
        let mut coder = Coder::new(profile);
        let word = |i: u64| -> [u8; 36] {
            std::array::from_fn(|b| (seed.wrapping_mul(i + 7) >> (b % 56)) as u8 ^ b as u8)
        };
        let data: Vec<[u8; 36]> = (0..k as u64).map(word).collect();
        let parity = coder.word_parity(&data).expect("encoded");
        prop_assert_eq!(parity.len(), m);
        let mut words: Vec<Option<[u8; 36]>> =
            data.iter().chain(&parity).copied().map(Some).collect();
        let mut lost = 0;
        let mut at = lost_seed;
        while lost < m {
            let index = (at % (k + m) as u64) as usize;
            if words[index].take().is_some() {
                lost += 1;
            }
            at = at.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) >> 3;
        }
        coder.reconstruct_words(&mut words).expect("rebuilt");
        let all: Vec<[u8; 36]> = data.iter().chain(&parity).copied().collect();
        prop_assert_eq!(words.into_iter().map(Option::unwrap).collect::<Vec<_>>(), all);
        prop_assert_eq!(coder.word_parity(&vec![[0u8; 36]; k]).expect("zeros"), vec![[0u8; 36]; m]);
        let mut changed = data.clone();
        changed[0][3] ^= 0x5a;
        let mut delta = vec![[0u8; 36]; k];
        delta[0][3] = 0x5a;
        let moved = coder.word_parity(&changed).expect("encoded");
        let by_delta = coder.word_parity(&delta).expect("encoded");
        for ((new, old), d) in moved.iter().zip(&parity).zip(&by_delta) {
            let xored: Vec<u8> = old.iter().zip(d).map(|(a, b)| a ^ b).collect();
            prop_assert_eq!(new.to_vec(), xored);
        }
    }

    /// Any k of the k + m shards rebuild the others exactly.
    #[test]
    fn any_k_shards_rebuild_the_rest(
        profile in profiles(),
        size in 1usize..100_000,
        lost_seed in any::<u64>(),
        fill in any::<u8>(),
    ) {
        let object: Vec<u8> = (0..size).map(|i| (i as u8) ^ fill ^ (i >> 8) as u8).collect();
        let mut coder = Coder::new(profile);
        let all = coder.encode_object(&object).expect("encoded");
        // Lose m shards chosen by the seed (a permutation's first m).
        let mut order: Vec<usize> = (0..profile.shards()).collect();
        let mut state = lost_seed;
        for i in (1..order.len()).rev() {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            order.swap(i, (state >> 33) as usize % (i + 1));
        }
        let mut shards: Vec<Option<Vec<u8>>> = all.iter().cloned().map(Some).collect();
        for &lost in &order[..profile.m()] {
            shards[lost] = None;
        }
        coder.reconstruct(&mut shards).expect("k shards left");
        let rebuilt: Vec<Vec<u8>> = shards.into_iter().map(|s| s.expect("rebuilt")).collect();
        prop_assert_eq!(&rebuilt, &all);
        let refs: Vec<&[u8]> = rebuilt[..profile.k()].iter().map(Vec::as_slice).collect();
        prop_assert_eq!(profile.join(&refs, size as u64), object);
    }

    /// Parity of a run of stripes is the run of each stripe's parity: the code works block by
    /// block, so one call covers a whole object and a partial write touches parity only
    /// under it.
    #[test]
    fn parity_is_computed_block_by_block(
        k in 1usize..=8,
        m in 1usize..=4,
        blocks in 1usize..=96,
        cut_seed in any::<usize>(),
        fill in any::<u8>(),
    ) {
        let profile = Profile::new(k, m, 4096).expect("profile");
        let mut coder = Coder::new(profile);
        let len = blocks * BLOCK_BYTES as usize;
        let data: Vec<Vec<u8>> = (0..k)
            .map(|s| (0..len).map(|i| (i * 7 + s * 13) as u8 ^ fill).collect())
            .collect();
        let whole = parity_of(&mut coder, &data);
        let cut = (cut_seed % blocks) * BLOCK_BYTES as usize;
        for range in [0..cut, cut..len] {
            if range.is_empty() {
                continue;
            }
            let piece: Vec<Vec<u8>> = data.iter().map(|s| s[range.clone()].to_vec()).collect();
            let parity = parity_of(&mut coder, &piece);
            for (j, p) in parity.iter().enumerate() {
                prop_assert_eq!(&p[..], &whole[j][range.clone()]);
            }
        }
    }

    /// Changing one data shard over a range and adding the parity of old ⊕ new gives the
    /// parity a full encode of the new data gives.
    #[test]
    fn a_parity_delta_equals_encoding_again(
        profile in profiles(),
        stripes in 1u64..=3,
        shard_seed in any::<usize>(),
        range_seed in any::<(u16, u16)>(),
        fill in any::<u8>(),
    ) {
        let mut coder = Coder::new(profile);
        let len = (stripes * profile.unit_bytes()) as usize;
        let old: Vec<Vec<u8>> = (0..profile.k())
            .map(|s| (0..len).map(|i| (i * 5 + s) as u8 ^ fill).collect())
            .collect();
        let mut parity = parity_of(&mut coder, &old);
        let shard = shard_seed % profile.k();
        let blocks = len / BLOCK_BYTES as usize;
        let (a, b) = (range_seed.0 as usize % blocks, range_seed.1 as usize % blocks);
        let range = a.min(b) * BLOCK_BYTES as usize..(a.max(b) + 1) * BLOCK_BYTES as usize;
        let mut new = old.clone();
        for byte in &mut new[shard][range.clone()] {
            *byte = byte.wrapping_add(fill | 1);
        }
        let delta: Vec<u8> = old[shard][range.clone()]
            .iter()
            .zip(&new[shard][range.clone()])
            .map(|(o, n)| o ^ n)
            .collect();
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[range.clone()]).collect();
        coder.add_parity_delta(shard, &delta, &mut outs).expect("delta");
        prop_assert_eq!(parity, parity_of(&mut coder, &new));
    }
}

/// (k, m, the first 8 bytes of each parity shard) for `parity_bytes_are_those_of_the_code_stored_on_disk`.
#[allow(clippy::type_complexity)]
const KNOWN_PARITY: &[(usize, usize, &[&[u8]])] = &[
    (
        4,
        2,
        &[
            &[18, 5, 35, 232, 220, 5, 9, 18],
            &[14, 37, 71, 200, 56, 37, 117, 34],
        ],
    ),
    (
        8,
        3,
        &[
            &[111, 220, 247, 112, 139, 147, 28, 185],
            &[182, 232, 83, 162, 160, 125, 33, 111],
            &[146, 174, 11, 59, 51, 241, 221, 119],
        ],
    ),
];

/// Parity is about to be stored on disk: these bytes pin the code (reed-solomon-simd 3's
/// GF(2^16) Leopard construction) so that a library upgrade that changed it fails here, not
/// on a cluster's shards. Data shard s of one 64-byte block holds byte i·31 + s·7.
#[test]
fn parity_bytes_are_those_of_the_code_stored_on_disk() {
    for (k, m, expected) in KNOWN_PARITY {
        let profile = Profile::new(*k, *m, 4096).expect("profile");
        let mut coder = Coder::new(profile);
        let data: Vec<Vec<u8>> = (0..*k)
            .map(|s| (0..64).map(|i| (i * 31 + s * 7) as u8).collect())
            .collect();
        let parity = parity_of(&mut coder, &data);
        let heads: Vec<Vec<u8>> = parity.iter().map(|p| p[..8].to_vec()).collect();
        assert_eq!(&heads, expected, "{profile}");
    }
}

/// An object's k + m shards, as a fresh encode makes them.
fn shards_of(coder: &mut Coder, object: &[u8]) -> Vec<Vec<u8>> {
    coder.encode_object(object).expect("encoded")
}

/// Plans and applies a write to `old`'s shards the way an OSD will: read the planned
/// pieces, apply, write the results, every shard at the new length. Returns the shards and
/// the bytes read.
fn write_through_plan(
    coder: &mut Coder,
    old: &[u8],
    offset: u64,
    data: &[u8],
) -> (Vec<Vec<u8>>, Plan) {
    let mut shards = shards_of(coder, old);
    let p = plan(coder.profile(), old.len() as u64, offset, data.len() as u64).expect("plan");
    let reads: Vec<Vec<u8>> = p
        .reads()
        .iter()
        .map(|r| {
            let shard = &shards[r.shard];
            assert!(
                r.offset + r.len <= shard.len() as u64,
                "a read past the old shard's end: {r:?} of {}",
                shard.len()
            );
            shard[r.offset as usize..(r.offset + r.len) as usize].to_vec()
        })
        .collect();
    let written = p.apply(coder, data, &reads).expect("apply");
    let new_len = p.new_shard_bytes() as usize;
    for shard in shards.iter_mut() {
        shard.resize(new_len, 0);
    }
    let pieces = p.writes();
    assert_eq!(pieces.len(), written.len());
    for (piece, bytes) in pieces.iter().zip(written) {
        assert_eq!(piece.len, bytes.len() as u64, "{piece:?}");
        shards[piece.shard][piece.offset as usize..(piece.offset + piece.len) as usize]
            .copy_from_slice(&bytes);
    }
    (shards, p)
}

/// Bytes that do not repeat at any period a unit or block could hide: a byte taken from the
/// wrong shard, stripe or offset differs.
fn unrepeating(len: usize, seed: u8) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = (i ^ u64::from(seed) << 40).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            (x >> 56) as u8
        })
        .collect()
}

fn overwritten(old: &[u8], offset: u64, data: &[u8]) -> Vec<u8> {
    let mut new = old.to_vec();
    let end = offset as usize + data.len();
    if new.len() < end {
        new.resize(end, 0);
    }
    new[offset as usize..end].copy_from_slice(data);
    new
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Whatever the object and the write, the shards after a planned write are those of a
    /// fresh encode of the new object.
    #[test]
    fn a_planned_write_leaves_the_shards_a_fresh_encode_makes(
        profile in profiles(),
        old_len in 0usize..60_000,
        offset in 0u64..70_000,
        len in 0usize..40_000,
        seed in any::<u8>(),
    ) {
        let mut coder = Coder::new(profile);
        let old = unrepeating(old_len, seed);
        let data = unrepeating(len, seed ^ 0x5a);
        let (shards, p) = write_through_plan(&mut coder, &old, offset, &data);
        let new = overwritten(&old, offset, &data);
        prop_assert_eq!(p.new_size(), new.len() as u64);
        let fresh = shards_of(&mut coder, &new);
        prop_assert!(shards == fresh, "{} write of {} at {} to {} bytes", profile, len, offset, old_len);
    }
}

/// A 4 KiB overwrite inside a large object: at 8+3 a delta (its unit and three parity
/// pieces, 16 KiB) reads less than a rewrite (the seven other units, 28 KiB); at 4+2 they
/// read 12 KiB each and the tie goes to the rewrite.
#[test]
fn a_4k_overwrite_reads_what_the_design_says() {
    for (k, m, way, read) in [(8, 3, Way::Delta, 16), (4, 2, Way::Rewrite, 12)] {
        let profile = Profile::new(k, m, 4096).expect("profile");
        let size = 4 << 20;
        let p = plan(profile, size, 1 << 20, 4096).expect("plan");
        assert_eq!(p.stripes().len(), 1);
        assert_eq!(p.stripes()[0].way, way, "{profile}");
        assert_eq!(p.read_bytes(), read << 10, "{profile}");
        assert_eq!(
            p.writes().iter().map(|w| w.len).sum::<u64>(),
            (1 + m as u64) << 12
        );
        let mut coder = Coder::new(profile);
        let old: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let (shards, _) = write_through_plan(&mut coder, &old, 1 << 20, &[7; 4096]);
        assert!(shards == shards_of(&mut coder, &overwritten(&old, 1 << 20, &[7; 4096])));
    }
}

/// An append reads only what the object holds: at 4+2, the next 4 KiB of a 4 KiB object is
/// its stripe encoded again from the one unit with data (4 KiB), not from the padding.
/// The tail of one 64 KiB unit and the head of the next change parity in two 4 KiB hulls,
/// not over the whole unit.
#[test]
fn a_plan_reads_no_padding_and_splits_a_write_across_two_units() {
    let small = Profile::new(4, 2, 4096).expect("profile");
    let p = plan(small, 4096, 4096, 4096).expect("plan");
    assert_eq!(p.stripes()[0].way, Way::Rewrite);
    assert_eq!(
        p.reads(),
        vec![Piece {
            shard: 0,
            offset: 0,
            len: 4096
        }]
    );
    let large = Profile::new(4, 2, 65536).expect("profile");
    let p = plan(large, 1 << 20, 61440, 8192).expect("plan");
    let hulls: Vec<(u64, u64)> = p.stripes().iter().map(|s| (s.lo, s.hi)).collect();
    assert_eq!(hulls, vec![(0, 4096), (61440, 65536)]);
    assert_eq!(
        p.writes().iter().map(|w| w.len).sum::<u64>(),
        8192 + 2 * 8192
    );
    let mut coder = Coder::new(large);
    let old = unrepeating(1 << 20, 3);
    let data = unrepeating(8192, 4);
    let (shards, _) = write_through_plan(&mut coder, &old, 61440, &data);
    assert!(shards == shards_of(&mut coder, &overwritten(&old, 61440, &data)));
}

/// A small write at 64 KiB units touches parity only over its own 64-byte blocks, and a
/// write that adds stripes past the old end reads nothing there.
#[test]
fn a_plan_reads_and_writes_only_what_the_write_touches() {
    let profile = Profile::new(4, 2, 65536).expect("profile");
    let p = plan(profile, 1 << 20, 100, 10).expect("plan");
    let s = &p.stripes()[0];
    assert_eq!((s.lo, s.hi), (64, 128));
    assert!(p.writes()[1..].iter().all(|w| w.len == 64));
    let grown = plan(profile, 1000, 1 << 20, 4096).expect("plan");
    assert!(grown.reads().is_empty(), "{:?}", grown.reads());
    assert_eq!(grown.new_size(), (1 << 20) + 4096);
    assert_eq!(grown.new_shard_bytes(), 5 * 65536);
}

#[test]
fn a_plan_refuses_what_it_cannot_do() {
    let profile = Profile::new(4, 2, 4096).expect("profile");
    assert_eq!(
        plan(profile, 0, OBJECT_BYTES_MAX, 1),
        Err(PlanError::TooLarge {
            end: OBJECT_BYTES_MAX + 1
        })
    );
    assert!(plan(profile, 0, u64::MAX, 2).is_err());
    // Shards are rounded up to whole units: with k = 1 a shard may pass the store's limit
    // before the object does.
    let narrow = Profile::new(1, 1, 12288).expect("profile");
    assert!(matches!(
        plan(narrow, 0, OBJECT_BYTES_MAX - 1, 1),
        Err(PlanError::TooLarge { .. })
    ));
    let p = plan(profile, 8192, 0, 100).expect("plan");
    let mut coder = Coder::new(profile);
    assert_eq!(
        p.apply(&mut coder, &[0; 99], &[]),
        Err(PlanError::Length {
            what: "the write",
            expected: 100,
            got: 99
        })
    );
    assert!(matches!(
        p.apply(&mut coder, &[0; 100], &[]),
        Err(PlanError::Reads { .. })
    ));
    let short: Vec<Vec<u8>> = p
        .reads()
        .iter()
        .map(|r| vec![0; r.len as usize - 1])
        .collect();
    assert!(matches!(
        p.apply(&mut coder, &[0; 100], &short),
        Err(PlanError::Length { what: "a read", .. })
    ));
}
