//! `coffer bench ec`: the erasure code as an OSD would run it (crates/ec), on one core: a
//! 4 MiB object cut into shards and encoded, rebuilt with one and with m data shards lost,
//! a 4 KiB overwrite's parity delta, and a whole planned 4 KiB overwrite (`ec::plan`: the
//! shard pieces it reads, the bytes and parity it writes), per profile and stripe unit, with
//! the shard bytes each reads and writes. Objects cycle through a working set larger than
//! the caches, as a write's buffers do.

use std::time::Instant;

use clap::Args;
use ec::{Coder, Profile};
use serde::Serialize;

use super::report::{median, print_header, size_label, OneCoreArgs};

#[derive(Args)]
pub struct EcArgs {
    /// Profiles to measure, comma-separated, as K+M.
    #[arg(long, value_delimiter = ',', default_value = "4+2,8+3")]
    profiles: Vec<String>,
    /// Stripe units in KiB, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,64")]
    unit_kib: Vec<u64>,
    #[command(flatten)]
    cells: OneCoreArgs,
}

/// The object size of the encode and rebuild cells: the client library's stripe object.
const OBJECT_BYTES: usize = 4 << 20;
/// The overwrite of the delta cells: one sealed chunk, one block of an image.
const OVERWRITE_BYTES: usize = 4096;

#[derive(Clone, Serialize)]
struct Cell {
    round: usize,
    profile: String,
    unit_bytes: u64,
    op: &'static str,
    /// Object bytes (or overwritten bytes) per second, in GB/s.
    gb_s: f64,
    /// Microseconds per object (or per overwrite).
    us_per_op: f64,
    /// Bytes stored per byte of object data.
    stored_per_byte: f64,
    /// Shard bytes read and written per op (the data a client sends is not counted read).
    read_per_op: f64,
    written_per_op: f64,
}

/// One op's figures in one round.
struct Measured {
    op: &'static str,
    gb_s: f64,
    us_per_op: f64,
    read_per_op: f64,
    written_per_op: f64,
}

const OPS: [(&str, &str); 5] = [
    (
        "encode",
        "a 4 MiB object cut into k shards, m parity shards computed",
    ),
    (
        "rebuild-1",
        "one data shard of a 4 MiB object rebuilt from the others",
    ),
    (
        "rebuild-m",
        "m data shards of a 4 MiB object rebuilt from the others",
    ),
    (
        "delta-4K",
        "a 4 KiB overwrite: old ⊕ new, its parity added to m parity pieces",
    ),
    (
        "overwrite-4K",
        "a 4 KiB overwrite as planned (ec::plan): by delta or by encoding again, whichever \
         reads less; the pieces read gathered, the bytes and parity written placed",
    ),
];

pub fn run(args: EcArgs) -> Result<(), String> {
    if args.cells.rounds == 0 || args.cells.mib == 0 || args.cells.working_set_mib < 4 {
        return Err("--rounds and --mib take at least 1, --working-set-mib at least 4".into());
    }
    let mut profiles = Vec::new();
    for text in &args.profiles {
        for &kib in &args.unit_kib {
            profiles.push(Profile::parse(text, kib << 10).map_err(|e| e.to_string())?);
        }
    }
    print_header(
        "coffer bench ec",
        &[
            (
                "code",
                format!(
                    "Reed-Solomon over GF(2^16), reed-solomon-simd, which runs {} code on this CPU",
                    simd_engine()
                ),
            ),
            (
                "cells",
                format!(
                    "profiles {:?} x units {:?} KiB; {} MiB per cell over a {} MiB working \
                     set; {} round(s); one core",
                    args.profiles,
                    args.unit_kib,
                    args.cells.mib,
                    args.cells.working_set_mib,
                    args.cells.rounds
                ),
            ),
            (
                "ops",
                OPS.iter()
                    .map(|(op, what)| format!("{op}: {what}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
        ],
    );
    let mut cells = Vec::new();
    for round in 1..=args.cells.rounds {
        for &profile in &profiles {
            for m in measure(profile, &args)? {
                cells.push(Cell {
                    round,
                    profile: profile.to_string(),
                    unit_bytes: profile.unit_bytes(),
                    op: m.op,
                    gb_s: m.gb_s,
                    us_per_op: m.us_per_op,
                    stored_per_byte: profile.stored_bytes(OBJECT_BYTES as u64) as f64
                        / OBJECT_BYTES as f64,
                    read_per_op: m.read_per_op,
                    written_per_op: m.written_per_op,
                });
            }
        }
    }
    println!();
    println!(
        "{:>7} {:>5} {:>12} {:>8} {:>10} {:>8} {:>8} {:>14}",
        "profile", "unit", "op", "GB/s", "us per op", "read", "written", "stored per GiB"
    );
    for profile in &profiles {
        for (op, _) in OPS {
            let of = |value: fn(&Cell) -> f64| {
                let mut values: Vec<f64> = cells
                    .iter()
                    .filter(|c| {
                        c.profile == profile.to_string()
                            && c.unit_bytes == profile.unit_bytes()
                            && c.op == op
                    })
                    .map(value)
                    .collect();
                values.sort_by(f64::total_cmp);
                median(&values)
            };
            println!(
                "{:>7} {:>5} {:>12} {:>8.2} {:>10.1} {:>8} {:>8} {:>10.2} GiB",
                profile.to_string(),
                size_label(profile.unit_bytes()),
                op,
                of(|c| c.gb_s),
                of(|c| c.us_per_op),
                size_label(of(|c| c.read_per_op) as u64),
                size_label(of(|c| c.written_per_op) as u64),
                of(|c| c.stored_per_byte),
            );
        }
    }
    println!(
        "medians of {} round(s); GB/s counts object bytes (overwritten bytes for the 4K \
         overwrites); read and written count shard bytes per op",
        args.cells.rounds
    );
    if let Some(path) = &args.cells.json {
        let config = serde_json::json!({
            "simd": simd_engine(),
            "profiles": args.profiles,
            "unit_kib": args.unit_kib,
            "mib": args.cells.mib,
            "working_set_mib": args.cells.working_set_mib,
            "rounds": args.cells.rounds,
        });
        super::report::write_json(path, "ec", config, &cells)?;
    }
    Ok(())
}

/// One profile's cells. Every rebuild is checked against the shards it replaces, and every
/// delta and planned overwrite against a full encode at the end.
fn measure(profile: Profile, args: &EcArgs) -> Result<Vec<Measured>, String> {
    let (k, m) = (profile.k(), profile.m());
    let mut coder = Coder::new(profile);
    let objects = ((args.cells.working_set_mib << 20) as usize / OBJECT_BYTES).max(1);
    let passes = ((args.cells.mib << 20) as usize / OBJECT_BYTES).max(1);
    let mut set = vec![0u8; objects * OBJECT_BYTES];
    rand::fill(&mut set[..]);
    let shard_bytes = profile.shard_bytes(OBJECT_BYTES as u64) as usize;
    // Each object's shards, data then parity, filled by the encode cell.
    let mut stored: Vec<Vec<Vec<u8>>> = vec![vec![vec![0u8; shard_bytes]; k + m]; objects];
    let code_error = |e: ec::CodeError| format!("{profile}: {e}");
    let mut results = Vec::new();

    let start = Instant::now();
    for pass in 0..passes {
        let i = pass % objects;
        let data = profile.split(&set[i * OBJECT_BYTES..(i + 1) * OBJECT_BYTES]);
        let (data_out, parity_out) = stored[i].split_at_mut(k);
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut outs: Vec<&mut [u8]> = parity_out.iter_mut().map(Vec::as_mut_slice).collect();
        coder.encode(&refs, &mut outs).map_err(code_error)?;
        for (slot, shard) in data_out.iter_mut().zip(data) {
            *slot = shard;
        }
    }
    let shards_of = |count: usize| (count * shard_bytes) as f64;
    results.push(rate(
        (
            "encode",
            passes,
            OBJECT_BYTES,
            start.elapsed().as_secs_f64(),
        ),
        (0.0, shards_of(k + m)),
    ));

    for (op, lost) in [("rebuild-1", 1), ("rebuild-m", m)] {
        let mut seconds = 0.0;
        for pass in 0..passes {
            let i = pass % objects;
            let mut shards: Vec<Option<Vec<u8>>> = stored[i].iter().cloned().map(Some).collect();
            // Lose data shards first, starting at a different one each pass, then parity
            // shards when m is more than k.
            for j in 0..lost {
                shards[if j < k { (pass + j) % k } else { j }] = None;
            }
            let start = Instant::now();
            coder.reconstruct(&mut shards).map_err(code_error)?;
            seconds += start.elapsed().as_secs_f64();
            for (rebuilt, kept) in shards.iter().zip(&stored[i]) {
                if rebuilt.as_ref() != Some(kept) {
                    return Err(format!("{profile}: {op} rebuilt a shard that differs"));
                }
            }
        }
        results.push(rate(
            (op, passes, OBJECT_BYTES, seconds),
            (shards_of(k), shards_of(lost)),
        ));
    }

    let overwrites = (passes * OBJECT_BYTES / OVERWRITE_BYTES / 16).max(1);
    // Each overwrite writes other bytes, so that no delta is zero on a second pass.
    let mut new = vec![0u8; OVERWRITE_BYTES];
    let mut delta = vec![0u8; OVERWRITE_BYTES];
    let start = Instant::now();
    for n in 0..overwrites {
        new.fill(n as u8 | 1);
        let i = n % objects;
        let at = (n * 7919 * OVERWRITE_BYTES) % OBJECT_BYTES;
        let (shard, offset) = profile.locate(at as u64);
        let range = offset as usize..offset as usize + OVERWRITE_BYTES;
        let (data, parity) = stored[i].split_at_mut(k);
        for ((d, old), new) in delta
            .iter_mut()
            .zip(&mut data[shard][range.clone()])
            .zip(&new)
        {
            *d = *old ^ new;
            *old = *new;
        }
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[range.clone()]).collect();
        coder
            .add_parity_delta(shard, &delta, &mut outs)
            .map_err(code_error)?;
    }
    let pieces = ((1 + m) * OVERWRITE_BYTES) as f64;
    results.push(rate(
        (
            "delta-4K",
            overwrites,
            OVERWRITE_BYTES,
            start.elapsed().as_secs_f64(),
        ),
        (pieces, pieces),
    ));

    // The whole overwrite a primary computes: its plan, the pieces it reads gathered from
    // the shards, the bytes and parity it writes placed back.
    let plan_error = |e: ec::PlanError| format!("{profile}: {e}");
    let (mut read, mut written) = (0u64, 0u64);
    let start = Instant::now();
    for n in 0..overwrites {
        new.fill(n as u8 | 0x80);
        let i = n % objects;
        let at = ((n * 7919 + 5) * OVERWRITE_BYTES) % OBJECT_BYTES;
        let plan = ec::plan(profile, OBJECT_BYTES as u64, at as u64, new.len() as u64)
            .map_err(plan_error)?;
        let gathered: Vec<Vec<u8>> = plan
            .reads()
            .iter()
            .map(|p| stored[i][p.shard][p.offset as usize..(p.offset + p.len) as usize].to_vec())
            .collect();
        let bytes = plan
            .apply(&mut coder, &new, &gathered)
            .map_err(plan_error)?;
        for (p, bytes) in plan.writes().iter().zip(bytes) {
            stored[i][p.shard][p.offset as usize..(p.offset + p.len) as usize]
                .copy_from_slice(&bytes);
            written += p.len;
        }
        read += plan.read_bytes();
    }
    results.push(rate(
        (
            "overwrite-4K",
            overwrites,
            OVERWRITE_BYTES,
            start.elapsed().as_secs_f64(),
        ),
        (
            read as f64 / overwrites as f64,
            written as f64 / overwrites as f64,
        ),
    ));

    for (i, shards) in stored.iter().enumerate() {
        let refs: Vec<&[u8]> = shards[..k].iter().map(Vec::as_slice).collect();
        let parity = coder.parity(&refs).map_err(code_error)?;
        if parity[..] != shards[k..] {
            return Err(format!(
                "{profile}: object {i}'s parity after deltas differs from an encode"
            ));
        }
    }
    Ok(results)
}

/// The code reed-solomon-simd picks at run time on this CPU (it takes the widest it finds).
fn simd_engine() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            return "AVX2";
        }
        if std::arch::is_x86_feature_detected!("ssse3") {
            return "SSSE3";
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            return "NEON";
        }
    }
    "portable"
}

/// An op's figures from (op, ops done, bytes per op, seconds) and the shard bytes (read,
/// written) per op.
fn rate(
    (op, ops, bytes, seconds): (&'static str, usize, usize, f64),
    (read_per_op, written_per_op): (f64, f64),
) -> Measured {
    let seconds = seconds.max(1e-9);
    Measured {
        op,
        gb_s: (ops * bytes) as f64 / seconds / 1e9,
        us_per_op: seconds * 1e6 / ops as f64,
        read_per_op,
        written_per_op,
    }
}
