//! `coffer bench store`: the local store in each at-rest mode, 4 KiB and 4 MiB random
//! writes and reads at queue depth 1 and high.
//!
//! One store per mode is made and prefilled (half its size in 4 MiB objects), and all stay
//! open; then each cell runs for every mode back to back, so that the percent of `none` is
//! a ratio measured minutes, not hours, apart on this noisy machine. Queue depth N is N
//! threads each with one operation in flight (the store's API is synchronous). A 4 KiB op
//! picks a random object and a random aligned 4 KiB inside it; a 4 MiB op a whole object.
//! CPU is this process's user + system time during the cell, per GiB moved.
//!
//! The mode `edge` is what an OSD's store does for a pool sealed at the edge: a `gcm` store
//! (names and metadata sealed) given chunks a client sealed, with their records, which it
//! stores and returns as they are. The bench seals its data once, as a client would, and
//! writes those chunks at every place: the store never opens them.

use super::report::{cpu_seconds, histogram, mean_and_stddev, print_header, size_label, LatencyUs};
use bytes::Bytes;
use keys::gcm::ChunkCipher;
use keys::KeyEncryptionKey;
use map::{ObjectName, ObjectRef, PoolId};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};
use store::{ChunkRecord, MkfsOptions, Mode, Store, Transaction, BLOCK_SIZE_BYTES};

const OBJECT_SIZE_BYTES: u64 = 4 << 20;
const CHUNK: usize = BLOCK_SIZE_BYTES as usize;

/// What a bench store holds: data it seals itself in its at-rest mode, or chunks sealed by
/// a client (`edge`, in a `gcm` store).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    At(Mode),
    Edge,
}

impl Kind {
    const NONE: Kind = Kind::At(Mode::None);

    fn as_str(self) -> &'static str {
        match self {
            Kind::At(mode) => mode.as_str(),
            Kind::Edge => "edge",
        }
    }

    /// The mode the store is made in.
    fn store_mode(self) -> Mode {
        match self {
            Kind::At(mode) => mode,
            Kind::Edge => Mode::Gcm,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(text: &str) -> Result<Kind, String> {
        if text == "edge" {
            return Ok(Kind::Edge);
        }
        text.parse().map(Kind::At).map_err(|e: store::UnknownMode| {
            format!("{e}, or edge (a gcm store given chunks a client sealed)")
        })
    }
}

#[derive(clap::Args)]
pub struct StoreArgs {
    /// A reduced run (1 GiB stores, 1 s cells) that finishes in about a minute.
    #[arg(long)]
    quick: bool,
    /// Also write every cell to this file as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where the stores are made; they are removed afterwards. Needs size x modes free.
    #[arg(long, default_value = "/var/tmp/coffer-bench")]
    dir: PathBuf,
    /// Size of each store's data file in GiB [default: 4, or 1 with --quick].
    #[arg(long)]
    size_gib: Option<f64>,
    /// Seconds per cell [default: 5, or 1 with --quick].
    #[arg(long)]
    seconds: Option<f64>,
    /// The high queue depth: operations in flight at once.
    #[arg(long, default_value_t = 32)]
    qd: usize,
    /// IO sizes to measure, comma-separated (4k, 4m).
    #[arg(long, value_delimiter = ',', default_value = "4k,4m", value_parser = parse_io_size)]
    io_sizes: Vec<u64>,
    /// Operations to measure, comma-separated (write, read).
    #[arg(long, value_delimiter = ',', default_value = "write,read")]
    ops: Vec<Op>,
    /// Runs every cell this many times (each repetition measures all modes back to back) and
    /// reports the mean and the standard deviation across repetitions.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// At-rest modes to measure, comma-separated: none, gcm, xts-4096, xts-512, or edge (a
    /// gcm store given chunks a client sealed, as an OSD of a pool sealed at the edge is);
    /// `none` is always measured as the baseline.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,gcm,edge,xts-4096,xts-512"
    )]
    modes: Vec<Kind>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
enum Op {
    Write,
    Read,
}

#[derive(Debug, Serialize)]
struct Cell {
    mode: String,
    io_size: u64,
    op: Op,
    qd: usize,
    ops: u64,
    seconds: f64,
    iops: f64,
    mib_s: f64,
    lat_us: LatencyUs,
    cpu_s: f64,
    cpu_s_per_gib: f64,
    pct_of_none: f64,
    /// Repetitions merged into this cell (means above; spreads below).
    repeats: usize,
    iops_stddev: f64,
    pct_of_none_stddev: f64,
}

/// Removes the bench's stores however the run ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn parse_io_size(text: &str) -> Result<u64, String> {
    match text.to_ascii_lowercase().as_str() {
        "4k" => Ok(4 << 10),
        "4m" => Ok(OBJECT_SIZE_BYTES),
        other => Err(format!("unknown IO size {other:?}; expected 4k or 4m")),
    }
}

fn object(i: usize) -> ObjectRef {
    ObjectRef::new(
        PoolId(1),
        ObjectName::new(format!("bench-{i}")).expect("a short ascii name is valid"),
    )
}

fn random_buffer(seed: u64) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..OBJECT_SIZE_BYTES).map(|_| rng.random()).collect()
}

/// One object's worth of bytes to write: plaintext for the store to seal, and the same
/// bytes sealed by a client, chunk by chunk, with their records.
struct Payload {
    plain: Vec<u8>,
    /// Starts on a chunk boundary in memory, as the messenger receives large segments.
    sealed: Bytes,
    records: Vec<ChunkRecord>,
}

impl Payload {
    /// Seals `plain` under a new key as a client does: one key id, one nonce run counting up
    /// per chunk, the chunk's index as its additional data.
    fn new(plain: Vec<u8>) -> Payload {
        let mut rng = rand::rng();
        let cipher = ChunkCipher::new(&rng.random());
        let key_id: u64 = rng.random();
        let prefix: [u8; 8] = rng.random();
        let mut buffer = vec![0u8; plain.len() + CHUNK];
        let skip = buffer.as_ptr().align_offset(CHUNK);
        let sealed = &mut buffer[skip..skip + plain.len()];
        sealed.copy_from_slice(&plain);
        let records = sealed
            .chunks_mut(CHUNK)
            .enumerate()
            .map(|(index, chunk)| {
                let mut nonce = [0u8; store::NONCE_BYTES];
                nonce[..8].copy_from_slice(&prefix);
                nonce[8..].copy_from_slice(&(index as u32).to_be_bytes());
                let tag = cipher.seal(nonce, &(index as u64).to_be_bytes(), chunk);
                ChunkRecord { key_id, nonce, tag }
            })
            .collect();
        let sealed = Bytes::from(buffer).slice(skip..skip + plain.len());
        Payload {
            plain,
            sealed,
            records,
        }
    }

    /// Adds to `txn` the write of `len` bytes at `offset` (whole chunks), in `kind`'s form.
    fn write(&self, txn: &mut Transaction, kind: Kind, object: &ObjectRef, offset: u64, len: u64) {
        let (offset, len) = (offset as usize, len as usize);
        match kind {
            Kind::At(_) => {
                txn.write(object, offset as u64, &self.plain[..len]);
            }
            Kind::Edge => {
                let first = offset / CHUNK;
                txn.write_sealed(
                    object,
                    first as u64,
                    self.sealed.slice(offset..offset + len),
                    self.records[first..(offset + len) / CHUNK].to_vec(),
                );
            }
        }
    }
}

pub fn run(args: StoreArgs) -> Result<(), String> {
    let size_gib = args.size_gib.unwrap_or(if args.quick { 1.0 } else { 4.0 });
    let seconds = args.seconds.unwrap_or(if args.quick { 1.0 } else { 5.0 });
    let mut modes = vec![Kind::NONE];
    modes.extend(args.modes.iter().copied().filter(|m| *m != Kind::NONE));
    let size_bytes = (size_gib * (1u64 << 30) as f64) as u64;
    let objects = ((size_bytes / 2) / OBJECT_SIZE_BYTES).max(4) as usize;
    let mut queue_depths = vec![1, args.qd.max(1)];
    queue_depths.dedup();

    let scratch = Scratch(args.dir.join(format!("store-{}", std::process::id())));
    let kek = KeyEncryptionKey::generate();
    let mut stores = Vec::new();
    for mode in &modes {
        let dir = scratch.0.join(mode.as_str());
        Store::mkfs(
            &dir,
            &MkfsOptions {
                mode: mode.store_mode(),
                size_bytes,
                device: None,
            },
            &kek,
        )
        .map_err(|e| format!("mkfs {}: {e}", dir.display()))?;
        let mut store =
            Store::open(&dir, &kek).map_err(|e| format!("open {}: {e}", dir.display()))?;
        // The reads measure the device and the crypto, not memory.
        store.set_cache_limit(0);
        stores.push((*mode, store));
    }
    let direct_io = stores.iter().all(|(_, s)| s.direct_io());
    print_header(
        "coffer bench store",
        &[
            (
                "modes",
                modes
                    .iter()
                    .map(|m| m.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            (
                "store",
                format!(
                    "{size_gib} GiB data file per mode under {}, direct IO: {direct_io}, no read cache",
                    args.dir.display()
                ),
            ),
            ("objects", format!("{objects} x 4 MiB, prefilled")),
            (
                "cells",
                format!(
                    "IO sizes {:?} x {:?} x QD {queue_depths:?}; {seconds} s each, repeated {} time(s)",
                    args.io_sizes,
                    args.ops,
                    args.repeat.max(1)
                ),
            ),
        ],
    );

    for (mode, store) in &stores {
        let started = Instant::now();
        prefill(store, *mode, objects, args.qd.max(1))?;
        eprintln!(
            "prefilled {mode}: {objects} objects in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }

    let repeats = args.repeat.max(1);
    let total = repeats * args.io_sizes.len() * args.ops.len() * queue_depths.len() * stores.len();
    let data = Payload::new(random_buffer(1));
    let mut runs: Vec<Vec<Cell>> = Vec::with_capacity(repeats);
    let mut done = 0;
    for _ in 0..repeats {
        let mut cells: Vec<Cell> = Vec::new();
        for io_size in args.io_sizes.iter().copied() {
            for op in args.ops.iter().copied() {
                for qd in queue_depths.iter().copied() {
                    for (mode, store) in &stores {
                        let duration = Duration::from_secs_f64(seconds);
                        let cell =
                            measure(store, *mode, op, io_size, qd, objects, &data, duration)?;
                        done += 1;
                        eprintln!(
                            "[{done}/{total}] {:>8} {:>5} {:<5} qd {:>3}: {:>9.0} IOPS {:>8.1} MiB/s",
                            mode.as_str(),
                            size_label(io_size),
                            format!("{:?}", op).to_lowercase(),
                            qd,
                            cell.iops,
                            cell.mib_s
                        );
                        cells.push(cell);
                    }
                }
            }
        }
        set_pct_of_none(&mut cells);
        runs.push(cells);
    }
    let cells = merge_repeats(runs);
    print_table(&cells);
    print_comparisons(&cells);
    if let Some(path) = &args.json {
        let config = serde_json::json!({
            "size_gib": size_gib,
            "seconds_per_cell": seconds,
            "repeat": repeats,
            "objects": objects,
            "direct_io": direct_io,
        });
        super::report::write_json(path, "store", config, &cells)?;
    }
    Ok(())
}

fn prefill(store: &Store, kind: Kind, objects: usize, threads: usize) -> Result<(), String> {
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(objects))
            .map(|t| {
                scope.spawn(move || -> Result<(), String> {
                    let data = Payload::new(random_buffer(t as u64));
                    for i in (t..objects).step_by(threads) {
                        let mut txn = Transaction::new();
                        data.write(&mut txn, kind, &object(i), 0, OBJECT_SIZE_BYTES);
                        store.apply(txn).map_err(|e| format!("prefill: {e}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .map_err(|_| "a prefill thread panicked".to_string())?
        })
    })
}

/// Reads `len` bytes at `offset` in `kind`'s form (plaintext, or the client's sealed
/// chunks as they are); how many came back.
fn read(
    store: &Store,
    kind: Kind,
    object: &ObjectRef,
    offset: u64,
    len: u64,
) -> Result<usize, store::ReadError> {
    match kind {
        Kind::At(_) => store.read(object, offset, len).map(|r| r.len()),
        Kind::Edge => store
            .read_sealed(object, offset / BLOCK_SIZE_BYTES, len / BLOCK_SIZE_BYTES)
            .map(|r| r.data.iter().map(|piece| piece.len()).sum()),
    }
}

/// Runs one cell. `data` is the bytes writers write (made before the clock starts).
#[allow(clippy::too_many_arguments)]
fn measure(
    store: &Store,
    mode: Kind,
    op: Op,
    io_size: u64,
    qd: usize,
    objects: usize,
    data: &Payload,
    duration: Duration,
) -> Result<Cell, String> {
    let targets: Vec<ObjectRef> = (0..objects).map(object).collect();
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let deadline = started + duration;
    let results: Vec<Result<(u64, hdrhistogram::Histogram<u64>), String>> =
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..qd)
                .map(|t| {
                    let targets = &targets;
                    scope.spawn(move || {
                        let mut rng = SmallRng::seed_from_u64(0x5eed ^ t as u64);
                        let mut latencies = histogram();
                        let mut ops = 0u64;
                        while Instant::now() < deadline {
                            let target = &targets[rng.random_range(0..targets.len())];
                            let offset = if io_size == OBJECT_SIZE_BYTES {
                                0
                            } else {
                                rng.random_range(0..OBJECT_SIZE_BYTES / io_size) * io_size
                            };
                            let op_started = Instant::now();
                            match op {
                                Op::Write => {
                                    let mut txn = Transaction::new();
                                    data.write(&mut txn, mode, target, offset, io_size);
                                    store.apply(txn).map_err(|e| format!("{mode} write: {e}"))?;
                                }
                                Op::Read => {
                                    let got = read(store, mode, target, offset, io_size)
                                        .map_err(|e| format!("{mode} read: {e}"))?;
                                    if got as u64 != io_size {
                                        return Err(format!(
                                            "{mode} read returned {got} bytes, not {io_size}"
                                        ));
                                    }
                                }
                            }
                            latencies.saturating_record(op_started.elapsed().as_nanos() as u64);
                            ops += 1;
                        }
                        Ok((ops, latencies))
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err("a load thread panicked".into()))
                })
                .collect()
        });
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_s = cpu_seconds() - cpu_before;
    let mut latencies = histogram();
    let mut ops = 0;
    for result in results {
        let (n, h) = result?;
        ops += n;
        latencies
            .add(&h)
            .map_err(|e| format!("merging latencies: {e}"))?;
    }
    let bytes = ops * io_size;
    let gib = bytes as f64 / (1u64 << 30) as f64;
    Ok(Cell {
        mode: mode.as_str().to_string(),
        io_size,
        op,
        qd,
        ops,
        seconds: elapsed,
        iops: ops as f64 / elapsed,
        mib_s: bytes as f64 / elapsed / (1 << 20) as f64,
        lat_us: LatencyUs::of(&latencies),
        cpu_s,
        cpu_s_per_gib: if gib > 0.0 { cpu_s / gib } else { 0.0 },
        pct_of_none: 0.0,
        repeats: 1,
        iops_stddev: 0.0,
        pct_of_none_stddev: 0.0,
    })
}

/// Each cell as a percent of `none` for the same IO size, op and queue depth, within one
/// repetition (so the ratio compares runs made seconds apart).
fn set_pct_of_none(cells: &mut [Cell]) {
    let baseline: Vec<(u64, Op, usize, f64)> = cells
        .iter()
        .filter(|c| c.mode == "none")
        .map(|c| (c.io_size, c.op, c.qd, c.iops))
        .collect();
    for cell in cells.iter_mut() {
        let none = baseline
            .iter()
            .find(|b| (b.0, b.1, b.2) == (cell.io_size, cell.op, cell.qd))
            .map_or(0.0, |b| b.3);
        cell.pct_of_none = if none > 0.0 {
            100.0 * cell.iops / none
        } else {
            0.0
        };
    }
}

/// One cell per (mode, IO size, op, queue depth): means over the repetitions, with the
/// spread of IOPS and of the percent of `none`. Every repetition has the same cells in the
/// same order.
fn merge_repeats(runs: Vec<Vec<Cell>>) -> Vec<Cell> {
    let mut runs = runs.into_iter();
    let first = runs.next().expect("at least one repetition");
    let rest: Vec<Vec<Cell>> = runs.collect();
    first
        .into_iter()
        .enumerate()
        .map(|(i, cell)| {
            let all: Vec<&Cell> = std::iter::once(&cell)
                .chain(rest.iter().map(|run| &run[i]))
                .collect();
            let field = |f: &dyn Fn(&Cell) -> f64| all.iter().map(|c| f(c)).collect::<Vec<f64>>();
            let mean = |f: &dyn Fn(&Cell) -> f64| mean_and_stddev(&field(f)).0;
            let (iops, iops_stddev) = mean_and_stddev(&field(&|c| c.iops));
            let (pct, pct_stddev) = mean_and_stddev(&field(&|c| c.pct_of_none));
            Cell {
                mode: cell.mode.clone(),
                io_size: cell.io_size,
                op: cell.op,
                qd: cell.qd,
                ops: all.iter().map(|c| c.ops).sum(),
                seconds: all.iter().map(|c| c.seconds).sum(),
                iops,
                mib_s: mean(&|c| c.mib_s),
                lat_us: LatencyUs::merge(all.iter().map(|c| &c.lat_us)),
                cpu_s: mean(&|c| c.cpu_s),
                cpu_s_per_gib: mean(&|c| c.cpu_s_per_gib),
                pct_of_none: pct,
                repeats: all.len(),
                iops_stddev,
                pct_of_none_stddev: pct_stddev,
            }
        })
        .collect()
}

fn print_table(cells: &[Cell]) {
    let repeated = cells.iter().any(|c| c.repeats > 1);
    println!();
    if repeated {
        println!(
            "means of {} repetitions; ± is one standard deviation across them",
            cells[0].repeats
        );
    }
    println!(
        "{:<9} {:>4} {:<5} {:>3} {:>16} {:>9} {:>10} {:>10} {:>10} {:>15}",
        "mode", "io", "op", "qd", "IOPS", "MiB/s", "mean us", "p99 us", "CPU s/GiB", "% none"
    );
    for c in cells {
        let (iops, pct) = if repeated {
            (
                format!("{:.0} ± {:.0}", c.iops, c.iops_stddev),
                format!("{:.1} ± {:.1}%", c.pct_of_none, c.pct_of_none_stddev),
            )
        } else {
            (format!("{:.0}", c.iops), format!("{:.1}%", c.pct_of_none))
        };
        println!(
            "{:<9} {:>4} {:<5} {:>3} {:>16} {:>9.1} {:>10.1} {:>10.1} {:>10.2} {:>15}",
            c.mode,
            size_label(c.io_size),
            format!("{:?}", c.op).to_lowercase(),
            c.qd,
            iops,
            c.mib_s,
            c.lat_us.mean,
            c.lat_us.p99,
            c.cpu_s_per_gib,
            pct
        );
    }
}

/// Two modes on the same path, cell by cell: the LUKS lesson (512-byte XTS sectors against
/// 4096-byte ones), and chunks a client sealed against the same `gcm` store sealing them.
fn print_comparisons(cells: &[Cell]) {
    print_comparison(
        cells,
        "xts-4096",
        "xts-512",
        "same code path, smaller crypto unit",
    );
    print_comparison(
        cells,
        "gcm",
        "edge",
        "the same gcm store, the chunks sealed by a client instead of by the store",
    );
}

/// `mode` as a percent of `base` in each cell both have.
fn print_comparison(cells: &[Cell], base: &str, mode: &str, what: &str) {
    let find = |mode: &str, c: &Cell| {
        cells
            .iter()
            .find(|x| x.mode == mode && (x.io_size, x.op, x.qd) == (c.io_size, c.op, c.qd))
    };
    let pairs: Vec<(&Cell, &Cell)> = cells
        .iter()
        .filter(|c| c.mode == base)
        .filter_map(|c| find(mode, c).map(|other| (c, other)))
        .collect();
    if pairs.is_empty() {
        return;
    }
    println!("\n{mode} as a percent of {base} ({what}):");
    for (base, other) in pairs {
        println!(
            "  {:>4} {:<5} qd {:>3}: {:>6.1}%   (CPU s/GiB {:.2} vs {:.2})",
            size_label(base.io_size),
            format!("{:?}", base.op).to_lowercase(),
            base.qd,
            100.0 * other.iops / base.iops.max(f64::MIN_POSITIVE),
            other.cpu_s_per_gib,
            base.cpu_s_per_gib
        );
    }
}
