//! `coffer bench memcpy`: this process's memcpy (glibc's, as `crate::memcpy` set it up) by
//! the destination's place relative to the source modulo 64, one core. On AMD EPYC, glibc's
//! `rep movsb` copies ten times slower when the destination lies 1 to 15 bytes past; run it
//! as started and with `GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2048` (glibc's
//! `rep movsb` from 2 KiB, as it chooses by default) to see what the choice is worth here.

use std::hint::black_box;
use std::time::Instant;

use clap::Args;
use serde::Serialize;
use store::{AlignedBuf, BLOCK_SIZE_BYTES};

use super::report::{median, print_header, size_label};

#[derive(Args)]
pub struct MemcpyArgs {
    /// Copy sizes in KiB, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,16,256")]
    size_kib: Vec<u64>,
    /// MiB each cell copies (one cell per size and destination offset).
    #[arg(long, default_value_t = 64)]
    mib: u64,
    /// Rounds; the table shows medians.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Also write every cell to this file as JSON.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, Serialize)]
struct Cell {
    round: usize,
    size_bytes: u64,
    /// Bytes the destination lies past the source, modulo 64.
    ahead: usize,
    s_per_gib: f64,
}

/// The source the copies cycle through: larger than a core's L2, within a shared L3.
const SOURCE_BYTES: usize = 4 << 20;
/// The offset classes the table shows: where the destination lies past the source.
const CLASSES: [(&str, std::ops::Range<usize>); 3] =
    [("0", 0..1), ("1-15", 1..16), ("16-63", 16..64)];

pub fn run(args: MemcpyArgs) -> Result<(), String> {
    if args.rounds == 0
        || args.mib == 0
        || args
            .size_kib
            .iter()
            .any(|&k| k == 0 || (k << 10) as usize > SOURCE_BYTES)
    {
        return Err(format!(
            "--size-kib takes sizes from 1 to {}; --mib and --rounds at least 1",
            SOURCE_BYTES >> 10
        ));
    }
    print_header(
        "coffer bench memcpy",
        &[(
            "cells",
            format!(
                "copies of {:?} KiB from a page-aligned {} MiB source, the destination 0 to 63 bytes past it modulo 64; {} MiB per cell; {} round(s); one core",
                args.size_kib,
                SOURCE_BYTES >> 20,
                args.mib,
                args.rounds
            ),
        )],
    );
    let source = aligned(SOURCE_BYTES);
    let mut cells = Vec::new();
    for round in 1..=args.rounds {
        for &kib in &args.size_kib {
            let size = (kib << 10) as usize;
            let mut destination = aligned(size + 64);
            for ahead in 0..64 {
                cells.push(Cell {
                    round,
                    size_bytes: size as u64,
                    ahead,
                    s_per_gib: measure(&source, &mut destination, size, ahead, args.mib),
                });
            }
        }
    }
    println!();
    println!(
        "{:>6} {:>22} {:>22} {:>22}",
        "size", "s/GiB, 0 past", "1-15 past (worst)", "16-63 past (worst)"
    );
    for &kib in &args.size_kib {
        let of = |ahead: &std::ops::Range<usize>| {
            let mut each: Vec<f64> = ahead
                .clone()
                .map(|a| {
                    let mut rates: Vec<f64> = cells
                        .iter()
                        .filter(|c| c.size_bytes == kib << 10 && c.ahead == a)
                        .map(|c| c.s_per_gib)
                        .collect();
                    rates.sort_by(f64::total_cmp);
                    median(&rates)
                })
                .collect();
            each.sort_by(f64::total_cmp);
            format!(
                "{:.3} ({:.3})",
                median(&each),
                each.last().copied().unwrap_or(0.0)
            )
        };
        println!(
            "{:>6} {:>22} {:>22} {:>22}",
            size_label(kib << 10),
            of(&CLASSES[0].1),
            of(&CLASSES[1].1),
            of(&CLASSES[2].1)
        );
    }
    println!(
        "CPU seconds per GiB copied: medians over each class's offsets (of {} round(s)), the slowest offset in brackets",
        args.rounds
    );
    if let Some(path) = &args.json {
        let config = serde_json::json!({
            "size_kib": args.size_kib,
            "mib": args.mib,
            "rounds": args.rounds,
            "classes": CLASSES.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        });
        super::report::write_json(path, "memcpy", config, &cells)?;
    }
    Ok(())
}

/// A page-aligned buffer of at least `len` bytes, its pages in memory (all ones).
fn aligned(len: usize) -> AlignedBuf {
    let mut buffer = AlignedBuf::for_overwrite(len.div_ceil(BLOCK_SIZE_BYTES as usize));
    buffer.fill(1);
    buffer
}

/// Seconds per GiB to copy `mib` MiB in copies of `size` bytes, cycling through the source,
/// each to `ahead` bytes past the destination's page.
fn measure(
    source: &AlignedBuf,
    destination: &mut AlignedBuf,
    size: usize,
    ahead: usize,
    mib: u64,
) -> f64 {
    let target = &mut destination[ahead..ahead + size];
    let copies = ((mib << 20) / size as u64).max(1);
    let starts = SOURCE_BYTES / size;
    let begun = Instant::now();
    for i in 0..copies as usize {
        let at = (i % starts) * size;
        black_box(&mut *target).copy_from_slice(black_box(&source[at..at + size]));
    }
    let bytes = (copies * size as u64) as f64;
    begun.elapsed().as_secs_f64() / (bytes / f64::from(1u32 << 30))
}
