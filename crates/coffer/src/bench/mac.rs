//! `coffer bench mac`: the check of a data segment that travels open (docs/design/
//! edge-sealing.md, "Why GMAC"), GMAC as the messenger makes it, against the other one-time
//! MACs of maintained libraries (Poly1305 from aws-lc, keyed BLAKE3 from blake3) and against
//! the CRC32C of a `crc` link, which no one on the path is kept from recomputing. One core;
//! every segment is hashed in the pieces a link receives it in, under a key drawn for it.
//! Each round measures every MAC back to back; ratios are taken within a round.

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use clap::Args;
use messenger::{Data, SegmentCheck, RECEIVE_PIECE_BYTES};
use serde::Serialize;

use super::report::{median, print_header, size_label, OneCoreArgs};

#[derive(Args)]
pub struct MacArgs {
    /// Segment sizes in KiB, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,64,4096")]
    segment_kib: Vec<u64>,
    #[command(flatten)]
    cells: OneCoreArgs,
}

#[derive(Clone, Copy, PartialEq)]
enum Mac {
    Gmac,
    Poly1305,
    Blake3,
    Crc32c,
}

impl Mac {
    const ALL: [Mac; 4] = [Mac::Gmac, Mac::Poly1305, Mac::Blake3, Mac::Crc32c];

    fn name(self) -> &'static str {
        match self {
            Mac::Gmac => "GMAC",
            Mac::Poly1305 => "Poly1305",
            Mac::Blake3 => "BLAKE3",
            Mac::Crc32c => "CRC32C",
        }
    }

    /// Hashes `segment`'s pieces in order under a key drawn for it, as a sender would.
    fn hash(self, segment: &Data) {
        match self {
            Mac::Gmac => {
                black_box(SegmentCheck::new(segment));
            }
            Mac::Poly1305 => {
                black_box(poly1305(&one_time_key(), segment));
            }
            Mac::Blake3 => {
                let mut hasher = blake3::Hasher::new_keyed(&one_time_key());
                for piece in segment.pieces() {
                    hasher.update(piece);
                }
                black_box(hasher.finalize());
            }
            Mac::Crc32c => {
                let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
                for piece in segment.pieces() {
                    digest.update(piece);
                }
                black_box(digest.finalize());
            }
        }
    }
}

fn one_time_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    aws_lc_rs::rand::fill(&mut key)
        .unwrap_or_else(|_| unreachable!("the system random source does not fail"));
    key
}

/// aws-lc's Poly1305 (the MAC of its ChaCha20-Poly1305), which aws-lc-rs does not offer
/// on its own.
fn poly1305(key: &[u8; 32], segment: &Data) -> [u8; 16] {
    let mut state: aws_lc_sys::poly1305_state = [0; 512];
    let mut tag = [0u8; 16];
    // SAFETY: the state is the 512 bytes aws-lc asks for, the key 32 bytes and the tag 16;
    // each piece is valid for its length.
    unsafe {
        aws_lc_sys::CRYPTO_poly1305_init(&mut state, key.as_ptr());
        for piece in segment.pieces() {
            aws_lc_sys::CRYPTO_poly1305_update(&mut state, piece.as_ptr(), piece.len());
        }
        aws_lc_sys::CRYPTO_poly1305_finish(&mut state, tag.as_mut_ptr());
    }
    tag
}

#[derive(Clone, Copy, Serialize)]
struct Cell {
    round: usize,
    segment_bytes: u64,
    mac: &'static str,
    gb_s: f64,
}

pub fn run(args: MacArgs) -> Result<(), String> {
    let largest_kib = args.cells.working_set_mib << 10;
    if args.segment_kib.iter().any(|&k| k == 0 || k > largest_kib) || args.cells.rounds == 0 {
        return Err(format!(
            "--segment-kib takes sizes from 1 to the working set ({largest_kib}); --rounds at least 1"
        ));
    }
    let masked = std::env::var("OPENSSL_ia32cap").map_or_else(
        |_| "OPENSSL_ia32cap not set".to_string(),
        |value| format!("OPENSSL_ia32cap={value} (aws-lc's GMAC and Poly1305 only)"),
    );
    print_header(
        "coffer bench mac",
        &[
            (
                "macs",
                "GMAC (aws-lc, the messenger's SegmentCheck), Poly1305 (aws-lc), keyed BLAKE3 (blake3), CRC32C (crc-fast, a crc link's)".into(),
            ),
            (
                "cells",
                format!(
                    "segments of {:?} KiB in pieces of {} KiB, a new key each; {} MiB per cell over a {} MiB working set; {} round(s); one core",
                    args.segment_kib,
                    RECEIVE_PIECE_BYTES >> 10,
                    args.cells.mib,
                    args.cells.working_set_mib,
                    args.cells.rounds
                ),
            ),
            ("CPU", format!("{}; {masked}", vector_units())),
        ],
    );
    let mut set = vec![0u8; (args.cells.working_set_mib << 20) as usize];
    rand::fill(&mut set[..]);
    let set = Bytes::from(set);
    // An untimed pass first: each library's first calls set it up (aws-lc's CPU detection
    // and random source), which the first cell of a short run would otherwise pay.
    let warm_up = segments(&set, (args.segment_kib[0] << 10) as usize);
    for mac in Mac::ALL {
        measure(mac, &warm_up, 16 << 20);
    }
    let mut cells = Vec::new();
    for round in 1..=args.cells.rounds {
        for &kib in &args.segment_kib {
            let segments = segments(&set, (kib << 10) as usize);
            for mac in Mac::ALL {
                cells.push(Cell {
                    round,
                    segment_bytes: kib << 10,
                    mac: mac.name(),
                    gb_s: measure(mac, &segments, args.cells.mib << 20),
                });
            }
        }
    }
    println!();
    print!("{:>8}", "segment");
    for mac in Mac::ALL {
        print!(" {:>14}", format!("{} GB/s", mac.name()));
    }
    println!(" {:>23}", "GMAC ÷ next fastest MAC");
    for &kib in &args.segment_kib {
        let rates = |mac: Mac| -> Vec<f64> {
            cells
                .iter()
                .filter(|c| c.segment_bytes == kib << 10 && c.mac == mac.name())
                .map(|c| c.gb_s)
                .collect()
        };
        print!("{:>8}", size_label(kib << 10));
        for mac in Mac::ALL {
            let mut sorted = rates(mac);
            sorted.sort_by(f64::total_cmp);
            print!(" {:>14.2}", median(&sorted));
        }
        let (gmac, poly1305, blake3) = (rates(Mac::Gmac), rates(Mac::Poly1305), rates(Mac::Blake3));
        let mut ratios: Vec<f64> = (0..gmac.len())
            .map(|i| gmac[i] / poly1305[i].max(blake3[i]))
            .collect();
        ratios.sort_by(f64::total_cmp);
        println!(" {:>22.2}x", median(&ratios));
    }
    println!(
        "medians of {} round(s); the ratio is the median of each round's",
        args.cells.rounds
    );
    if let Some(path) = &args.cells.json {
        let config = serde_json::json!({
            "segment_kib": args.segment_kib,
            "piece_bytes": RECEIVE_PIECE_BYTES,
            "mib": args.cells.mib,
            "working_set_mib": args.cells.working_set_mib,
            "rounds": args.cells.rounds,
            "openssl_ia32cap": std::env::var("OPENSSL_ia32cap").ok(),
        });
        super::report::write_json(path, "mac", config, &cells)?;
    }
    Ok(())
}

/// The vector units aws-lc's GHASH picks between: 512-bit with AVX-512F, VAES and
/// VPCLMULQDQ, 128-bit otherwise.
#[cfg(target_arch = "x86_64")]
fn vector_units() -> String {
    let has = |yes: bool| if yes { "yes" } else { "no" };
    format!(
        "AVX-512F {}, VAES {}, VPCLMULQDQ {}",
        has(std::arch::is_x86_feature_detected!("avx512f")),
        has(std::arch::is_x86_feature_detected!("vaes")),
        has(std::arch::is_x86_feature_detected!("vpclmulqdq")),
    )
}

#[cfg(not(target_arch = "x86_64"))]
fn vector_units() -> String {
    std::env::consts::ARCH.to_string()
}

/// The working set cut into segments of `segment_bytes` (no longer than the set), each in
/// the pieces a link reads it in.
fn segments(set: &Bytes, segment_bytes: usize) -> Vec<Data> {
    (0..set.len() / segment_bytes)
        .map(|i| {
            let segment = set.slice(i * segment_bytes..(i + 1) * segment_bytes);
            (0..segment.len())
                .step_by(RECEIVE_PIECE_BYTES)
                .map(|at| segment.slice(at..(at + RECEIVE_PIECE_BYTES).min(segment.len())))
                .collect()
        })
        .collect()
}

/// GB/s of `mac` over at least `bytes`, cycling through the segments.
fn measure(mac: Mac, segments: &[Data], bytes: u64) -> f64 {
    let segment_bytes: u64 = segments[0].pieces().iter().map(|p| p.len() as u64).sum();
    let count = bytes.div_ceil(segment_bytes).max(1);
    let start = Instant::now();
    for segment in segments.iter().cycle().take(count as usize) {
        mac.hash(segment);
    }
    (count * segment_bytes) as f64 / start.elapsed().as_secs_f64() / 1e9
}
