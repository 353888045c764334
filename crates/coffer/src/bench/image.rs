//! `coffer bench image`: an image on a fresh `coffer up` cluster per configuration, driven
//! through the block library exactly as the NBD server drives it: random reads and writes of
//! 4 KiB and 4 MiB at queue depth 1 and 128. Each cell is a percent of the first
//! configuration (none/crc by default) in the same run, with the CPU seconds per GiB of the
//! cluster's daemons and of this process (the image client).

use std::sync::Arc;
use std::time::{Duration, Instant};

use block::image::{self, Access, OBJECT_SIZE_DEFAULT};
use block::Image;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::fresh::{clean_default_pool, FreshArgs, FreshCluster, CORNERS};
use super::report::{
    cpu_seconds, histogram, percent_of, print_header, size_label, write_json, Rates,
};

const MIB: u64 = 1 << 20;
/// The bench's image in the default pool.
const IMAGE: &str = "bench";
/// Writes in flight while the image is filled before the cells.
const PREFILL_QD: usize = 16;

#[derive(clap::Args)]
pub struct ImageArgs {
    /// A reduced run (2 s cells, 256 MiB image, queue depths 1 and 16).
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    fresh: FreshArgs,
    /// Image size; it is filled before the cells, so reads find data [default: 1G, or
    /// 256M with --quick].
    #[arg(long, value_parser = crate::text::parse_size)]
    image_size: Option<u64>,
    /// IO sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4k,4m", value_parser = crate::text::parse_size)]
    io_sizes: Vec<u64>,
    /// Queue depths, comma-separated [default: 1,128, or 1,16 with --quick].
    #[arg(long, value_delimiter = ',')]
    qd: Option<Vec<usize>>,
    /// Configurations as AT-REST/IN-TRANSIT, comma-separated; the first is the baseline
    /// [default: none/crc,none/secure,gcm/crc,gcm/secure].
    #[arg(long, value_delimiter = ',')]
    configs: Option<Vec<String>>,
}

#[derive(Debug, Serialize)]
struct Cell {
    at_rest: String,
    in_transit: String,
    io_size: u64,
    op: &'static str,
    qd: usize,
    #[serde(flatten)]
    rates: Rates,
    pct_of_baseline: f64,
}

fn configs(args: &ImageArgs) -> Result<Vec<(String, String)>, String> {
    let Some(list) = &args.configs else {
        return Ok(CORNERS
            .iter()
            .map(|(r, t)| (r.to_string(), t.to_string()))
            .collect());
    };
    list.iter()
        .map(|config| match config.split_once('/') {
            Some((at_rest, in_transit)) => Ok((at_rest.to_string(), in_transit.to_string())),
            None => Err(format!(
                "--configs {config:?}: write AT-REST/IN-TRANSIT, gcm/secure"
            )),
        })
        .collect()
}

/// Fills the whole image with 4 MiB writes, so every read of a cell finds stored data.
pub(super) async fn prefill(disk: &Image) -> Result<(), String> {
    let chunk = OBJECT_SIZE_DEFAULT;
    let data = Bytes::from(vec![0xa5u8; chunk as usize]);
    futures::stream::iter((0..disk.size()).step_by(chunk as usize))
        .map(|offset| {
            let len = chunk.min(disk.size() - offset) as usize;
            disk.write(offset, data.slice(..len))
        })
        .buffer_unordered(PREFILL_QD)
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
        .map_err(|e| format!("filling the image: {e}"))
}

/// One cell: `qd` workers, each with one random aligned IO of `io_size` in flight, for
/// `seconds`.
pub(super) async fn run_cell(
    disk: &Arc<Image>,
    write: bool,
    io_size: u64,
    qd: usize,
    seconds: f64,
) -> Result<(u64, Histogram<u64>), String> {
    let slots = (disk.size() / io_size).max(1);
    let data = Bytes::from(
        (0..io_size)
            .map(|i| (i * 131 % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..qd {
        let disk = disk.clone();
        let data = data.clone();
        workers.spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(worker as u64);
            let mut hist = histogram();
            let mut done = 0u64;
            while Instant::now() < deadline {
                let offset = rng.random_range(0..slots) * io_size;
                let started = Instant::now();
                if write {
                    disk.write(offset, data.clone()).await
                } else {
                    disk.read(offset, io_size).await.map(|_| ())
                }
                .map_err(|e| e.to_string())?;
                hist.record(started.elapsed().as_nanos() as u64)
                    .map_err(|e| e.to_string())?;
                done += 1;
            }
            Ok::<_, String>((done, hist))
        });
    }
    let mut total = 0;
    let mut merged = histogram();
    while let Some(joined) = workers.join_next().await {
        let (done, hist) = joined.map_err(|e| e.to_string())??;
        total += done;
        merged.add(&hist).map_err(|e| e.to_string())?;
    }
    Ok((total, merged))
}

pub fn run(args: ImageArgs) -> Result<(), String> {
    args.fresh.place()?;
    let seconds = args.fresh.seconds(args.quick);
    let image_size = args
        .image_size
        .unwrap_or(if args.quick { 256 * MIB } else { 1024 * MIB });
    let depths = args.qd.clone().unwrap_or_else(|| {
        if args.quick {
            vec![1, 16]
        } else {
            vec![1, 128]
        }
    });
    let configs = configs(&args)?;
    print_header(
        "coffer bench image",
        &[
            (
                "configurations",
                format!(
                    "{}; baseline {}/{}",
                    configs
                        .iter()
                        .map(|(r, t)| format!("{r}/{t}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    configs[0].0,
                    configs[0].1
                ),
            ),
            (
                "cluster",
                format!(
                    "fresh `coffer up` per configuration: 1 monitor, {} OSDs (pool size {}, {}), under {}",
                    args.fresh.osds,
                    args.fresh.osds.clamp(1, 3),
                    args.fresh.cache(),
                    args.fresh.dir.display()
                ),
            ),
            (
                "load",
                format!(
                    "one client (the block library, as `coffer nbd serve` uses it) on a {} image \
                     of {} objects, filled first; random {:?} reads and writes at queue depths \
                     {depths:?}; {seconds} s per cell",
                    size_label(image_size),
                    size_label(OBJECT_SIZE_DEFAULT),
                    args.io_sizes.iter().map(|s| size_label(*s)).collect::<Vec<_>>()
                ),
            ),
        ],
    );
    let runtime = crate::daemon::runtime()?;
    let mut cells: Vec<Cell> = Vec::new();
    for (at_rest, in_transit) in &configs {
        let cluster = FreshCluster::for_bench("image", &args.fresh, at_rest, in_transit)?;
        let conf = cluster.conf()?;
        runtime.block_on(async {
            let pool = clean_default_pool(&conf).await?;
            image::create(&pool, IMAGE, image_size, OBJECT_SIZE_DEFAULT)
                .await
                .map_err(|e| e.to_string())?;
            let writer = Access::Write {
                purpose: "bench",
                wait_stale: false,
            };
            let disk = Image::open(&pool, IMAGE, writer)
                .await
                .map_err(|e| e.to_string())?;
            prefill(&disk).await?;
            for io_size in &args.io_sizes {
                for write in [true, false] {
                    for qd in &depths {
                        let (cpu_cluster, cpu_client) = (cluster.cpu_seconds(), cpu_seconds());
                        let started = Instant::now();
                        let (ops, hist) = run_cell(&disk, write, *io_size, *qd, seconds).await?;
                        let cell = Cell {
                            at_rest: at_rest.clone(),
                            in_transit: in_transit.clone(),
                            io_size: *io_size,
                            op: if write { "write" } else { "read" },
                            qd: *qd,
                            rates: Rates::new(
                                ops,
                                *io_size,
                                started.elapsed().as_secs_f64(),
                                &hist,
                                cluster.cpu_seconds() - cpu_cluster,
                                cpu_seconds() - cpu_client,
                            ),
                            pct_of_baseline: 0.0,
                        };
                        eprintln!(
                            "{at_rest:>4}/{in_transit:<6} {:>3} {:<5} qd {:<3}: {:>8.0} IOPS {:>8.1} MiB/s, cluster CPU {:.2} s/GiB",
                            size_label(*io_size),
                            cell.op,
                            qd,
                            cell.rates.ops_s,
                            cell.rates.mib_s,
                            cell.rates.cluster_cpu_s_per_gib
                        );
                        cells.push(cell);
                    }
                }
            }
            disk.close().await.map_err(|e| e.to_string())
        })?;
        drop(cluster);
    }
    let baseline = &configs[0];
    let base_ops_s: Vec<f64> = cells
        .iter()
        .map(|cell| {
            cells
                .iter()
                .find(|b| {
                    (&b.at_rest, &b.in_transit) == (&baseline.0, &baseline.1)
                        && (b.io_size, b.op, b.qd) == (cell.io_size, cell.op, cell.qd)
                })
                .map_or(0.0, |b| b.rates.ops_s)
        })
        .collect();
    for (cell, base) in cells.iter_mut().zip(base_ops_s) {
        cell.pct_of_baseline = percent_of(cell.rates.ops_s, base);
    }
    print_table(&cells);
    if let Some(path) = &args.fresh.json {
        let config = serde_json::json!({
            "seconds_per_cell": seconds,
            "image_size": image_size,
            "object_size": OBJECT_SIZE_DEFAULT,
            "osds": args.fresh.osds,
        });
        write_json(path, "image", config, &cells)?;
    }
    Ok(())
}

fn print_table(cells: &[Cell]) {
    println!();
    println!(
        "{:<5} {:<6} {:>4} {:<13} {:>9} {:>9} {:>8} {:>9} {:>9} {:>11} {:>11}",
        "size",
        "op",
        "qd",
        "at-rest/wire",
        "IOPS",
        "MiB/s",
        "% base",
        "p50 us",
        "p99 us",
        "CPU s/GiB",
        "client s/GiB"
    );
    for c in cells {
        println!(
            "{:<5} {:<6} {:>4} {:<13} {:>9.0} {:>9.1} {:>7.0}% {:>9.0} {:>9.0} {:>11.2} {:>11.2}",
            size_label(c.io_size),
            c.op,
            c.qd,
            format!("{}/{}", c.at_rest, c.in_transit),
            c.rates.ops_s,
            c.rates.mib_s,
            c.pct_of_baseline,
            c.rates.lat_us.p50,
            c.rates.lat_us.p99,
            c.rates.cluster_cpu_s_per_gib,
            c.rates.client_cpu_s_per_gib()
        );
    }
}
