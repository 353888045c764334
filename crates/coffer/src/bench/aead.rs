//! `coffer bench aead`: AES-256-GCM as the data path runs it (`keys::gcm`), in both libraries
//! this build carries, one core, so the choice made for this CPU can be checked on it. Each
//! round measures every library back to back; ratios are taken within a round.

use std::time::Instant;

use clap::Args;
use keys::gcm::{ChunkCipher, Implementation, NONCE_BYTES, TAG_BYTES};
use serde::Serialize;

use super::report::{median, print_header, size_label, OneCoreArgs};

#[derive(Args)]
pub struct AeadArgs {
    /// Chunk sizes in KiB, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,64")]
    chunk_kib: Vec<u64>,
    #[command(flatten)]
    cells: OneCoreArgs,
}

#[derive(Clone, Copy, Serialize)]
struct Cell {
    round: usize,
    chunk_bytes: u64,
    op: &'static str,
    implementation: &'static str,
    gb_s: f64,
}

/// Additional data as long as an edge chunk's (label, pool, index, a short object name).
const AAD_BYTES: usize = 36;

pub fn run(args: AeadArgs) -> Result<(), String> {
    if args.chunk_kib.iter().any(|&k| k == 0 || k > 64 << 10) || args.cells.rounds == 0 {
        return Err("--chunk-kib takes sizes from 1 to 65536; --rounds at least 1".into());
    }
    let chosen = Implementation::fastest();
    print_header(
        "coffer bench aead",
        &[
            ("cipher", format!("AES-256-GCM in place, tag apart, {AAD_BYTES} bytes of additional data")),
            (
                "cells",
                format!(
                    "chunks of {:?} KiB; {} MiB sealed then opened per cell over a {} MiB working set; {} round(s); one core",
                    args.chunk_kib, args.cells.mib, args.cells.working_set_mib, args.cells.rounds
                ),
            ),
            ("chosen for this CPU", chosen.to_string()),
        ],
    );
    let mut cells = Vec::new();
    for round in 1..=args.cells.rounds {
        for &kib in &args.chunk_kib {
            let chunk_bytes = kib << 10;
            for implementation in Implementation::ALL {
                let [seal, open] = measure(implementation, chunk_bytes, &args)?;
                for (op, gb_s) in [("seal", seal), ("open", open)] {
                    cells.push(Cell {
                        round,
                        chunk_bytes,
                        op,
                        implementation: implementation.name(),
                        gb_s,
                    });
                }
            }
        }
    }
    println!();
    println!(
        "{:>6} {:>5} {:>16} {:>11} {:>12}",
        "chunk", "op", "aws-lc-rs GB/s", "ring GB/s", "ring/aws-lc"
    );
    for &kib in &args.chunk_kib {
        for op in ["seal", "open"] {
            let rate = |library: &str| {
                let mut rates: Vec<f64> = cells
                    .iter()
                    .filter(|c| {
                        c.chunk_bytes == kib << 10 && c.op == op && c.implementation == library
                    })
                    .map(|c| c.gb_s)
                    .collect();
                rates.sort_by(f64::total_cmp);
                rates
            };
            let (aws, ring) = (
                rate(Implementation::AwsLc.name()),
                rate(Implementation::Ring.name()),
            );
            let mut ratios: Vec<f64> = ring.iter().zip(&aws).map(|(r, a)| r / a).collect();
            ratios.sort_by(f64::total_cmp);
            println!(
                "{:>6} {:>5} {:>16.2} {:>11.2} {:>11.2}x",
                size_label(kib << 10),
                op,
                median(&aws),
                median(&ring),
                median(&ratios)
            );
        }
    }
    println!(
        "medians of {} round(s); the ratio is the median of each round's",
        args.cells.rounds
    );
    if let Some(path) = &args.cells.json {
        let config = serde_json::json!({
            "chunk_kib": args.chunk_kib,
            "mib": args.cells.mib,
            "working_set_mib": args.cells.working_set_mib,
            "rounds": args.cells.rounds,
            "chosen": chosen.to_string(),
        });
        super::report::write_json(path, "aead", config, &cells)?;
    }
    Ok(())
}

/// Seal then open rates in GB/s: `args.cells.mib` MiB in chunks of `chunk_bytes`, cycling
/// through the working set. Opening restores each chunk afterwards (untimed) so that the
/// next pass opens a valid chunk again. The key is random and dropped afterwards, so sealing
/// each chunk again under its nonce reveals nothing.
fn measure(
    implementation: Implementation,
    chunk_bytes: u64,
    args: &AeadArgs,
) -> Result<[f64; 2], String> {
    let cipher = ChunkCipher::with(implementation, &rand::random());
    let aad = [0x5au8; AAD_BYTES];
    let chunks = ((args.cells.working_set_mib << 20) / chunk_bytes).max(1) as usize;
    let mut set = vec![0u8; chunks * chunk_bytes as usize];
    rand::fill(&mut set[..]);
    let nonce = |i: usize| {
        let mut n = [0u8; NONCE_BYTES];
        n[4..].copy_from_slice(&(i as u64).to_be_bytes());
        n
    };
    let passes = ((args.cells.mib << 20) / (chunks as u64 * chunk_bytes)).max(1);
    let bytes = (passes * chunks as u64 * chunk_bytes) as f64;
    let mut tags = vec![[0u8; TAG_BYTES]; chunks];

    let start = Instant::now();
    for _ in 0..passes {
        for (i, chunk) in set.chunks_exact_mut(chunk_bytes as usize).enumerate() {
            tags[i] = cipher.seal(nonce(i), &aad, chunk);
        }
    }
    let seal = bytes / start.elapsed().as_secs_f64() / 1e9;

    let mut opening = 0.0;
    for _ in 0..passes {
        let start = Instant::now();
        for (i, chunk) in set.chunks_exact_mut(chunk_bytes as usize).enumerate() {
            cipher
                .open(nonce(i), &aad, &tags[i], chunk)
                .map_err(|_| format!("{implementation}: a chunk it sealed failed its tag"))?;
        }
        opening += start.elapsed().as_secs_f64();
        for (i, chunk) in set.chunks_exact_mut(chunk_bytes as usize).enumerate() {
            tags[i] = cipher.seal(nonce(i), &aad, chunk);
        }
    }
    Ok([seal, bytes / opening / 1e9])
}
