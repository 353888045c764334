//! `coffer bench cluster`: N clients putting, then getting, 4 KiB and 4 MiB objects for a
//! fixed time against a fresh `coffer up` cluster, in the four corners of at-rest (none,
//! gcm) by in-transit (crc, secure) encryption. Each cell is a percent of none/crc from the
//! same run, with the CPU seconds per GiB of all cluster processes (monitor and OSDs).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use serde::Serialize;

use super::fresh::{connect_admin, connect_clients, wait_clean, FreshCluster, CORNERS};
use super::report::{cpu_seconds, histogram, print_header, LatencyUs};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

#[derive(clap::Args)]
pub struct ClusterArgs {
    /// A reduced run (2 s cells) that finishes in about a minute.
    #[arg(long)]
    quick: bool,
    /// Also write every cell to this file as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where the clusters are made; each is removed after its corner.
    #[arg(long, default_value = "/var/tmp/coffer-bench")]
    dir: PathBuf,
    /// Seconds per cell [default: 5, or 2 with --quick].
    #[arg(long)]
    seconds: Option<f64>,
    /// Clients, each with its own connection and one operation in flight.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// OSDs per cluster (the pool's size is min(3, OSDs)).
    #[arg(long, default_value_t = 3)]
    osds: u32,
    /// Object sizes, comma-separated (4k, 4m).
    #[arg(long, value_delimiter = ',', default_value = "4k,4m", value_parser = parse_size)]
    io_sizes: Vec<u64>,
}

fn parse_size(text: &str) -> Result<u64, String> {
    match text.to_ascii_lowercase().as_str() {
        "4k" => Ok(4 * KIB),
        "4m" => Ok(4 * MIB),
        other => Err(format!("unknown object size {other:?}; expected 4k or 4m")),
    }
}

fn size_label(bytes: u64) -> String {
    if bytes >= MIB {
        format!("{}M", bytes / MIB)
    } else {
        format!("{}K", bytes / KIB)
    }
}

#[derive(Debug, Serialize)]
struct Cell {
    at_rest: String,
    in_transit: String,
    object_size: u64,
    op: String,
    clients: usize,
    ops: u64,
    seconds: f64,
    ops_s: f64,
    mib_s: f64,
    lat_us: LatencyUs,
    /// CPU seconds of the monitor and every OSD during the cell.
    cluster_cpu_s: f64,
    cluster_cpu_s_per_gib: f64,
    /// CPU seconds of the clients (this process) during the cell.
    client_cpu_s: f64,
    pct_of_baseline: f64,
}

/// One phase: every client runs `op` back to back for `seconds`.
async fn phase(
    pools: &[client::Pool],
    put: bool,
    size: u64,
    seconds: f64,
    written: &[u64],
) -> Result<(u64, Histogram<u64>, Vec<u64>), String> {
    let data = Bytes::from(
        (0..size)
            .map(|i| (i * 131 % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for (c, pool) in pools.iter().enumerate() {
        let pool = pool.clone();
        let data = data.clone();
        let have = written.get(c).copied().unwrap_or(0);
        tasks.spawn(async move {
            let mut hist = histogram();
            let mut done = 0u64;
            while Instant::now() < deadline {
                let started = Instant::now();
                if put {
                    let name = format!("b{size}-{c}-{done}");
                    pool.put(&name, data.clone())
                        .await
                        .map_err(|e| e.to_string())?;
                } else {
                    let name = format!("b{size}-{c}-{}", done % have.max(1));
                    let got = pool.get(&name).await.map_err(|e| e.to_string())?;
                    if got.len() as u64 != size {
                        return Err(format!("{name}: {} bytes, expected {size}", got.len()));
                    }
                }
                hist.record(started.elapsed().as_nanos() as u64)
                    .map_err(|e| e.to_string())?;
                done += 1;
            }
            Ok::<_, String>((c, done, hist))
        });
    }
    let mut total = 0;
    let mut merged = histogram();
    let mut per_client = vec![0; pools.len()];
    while let Some(joined) = tasks.join_next().await {
        let (c, done, hist) = joined.map_err(|e| e.to_string())??;
        total += done;
        per_client[c] = done;
        merged.add(&hist).map_err(|e| e.to_string())?;
    }
    Ok((total, merged, per_client))
}

pub fn run(args: ClusterArgs) -> Result<(), String> {
    let seconds = args.seconds.unwrap_or(if args.quick { 2.0 } else { 5.0 });
    let clients = args.clients.max(1);
    print_header(
        "coffer bench cluster",
        &[
            (
                "corners",
                "at rest none|gcm x in transit crc|secure; baseline none/crc".into(),
            ),
            (
                "cluster",
                format!(
                    "fresh `coffer up` per corner: 1 monitor, {} OSDs (pool size {}), under {}",
                    args.osds,
                    args.osds.clamp(1, 3),
                    args.dir.display()
                ),
            ),
            (
                "load",
                format!(
                    "{clients} clients, one op in flight each; put then get of {:?}; {seconds} s per cell",
                    args.io_sizes.iter().map(|s| size_label(*s)).collect::<Vec<_>>()
                ),
            ),
        ],
    );
    let runtime = crate::daemon::runtime()?;
    let mut cells: Vec<Cell> = Vec::new();
    for (at_rest, in_transit) in CORNERS {
        let dir = args.dir.join(format!(
            "cluster-{}-{at_rest}-{in_transit}",
            std::process::id()
        ));
        let cluster = FreshCluster::start(&dir, args.osds, at_rest, in_transit)?;
        let conf = cluster.conf()?;
        runtime.block_on(async {
            let pools = connect_clients(&conf, clients).await?;
            let admin = connect_admin(&conf).await?;
            wait_clean(&admin).await?;
            for size in &args.io_sizes {
                let mut written = Vec::new();
                for put in [true, false] {
                    let (cpu_cluster, cpu_client) = (cluster.cpu_seconds(), cpu_seconds());
                    let started = Instant::now();
                    let (ops, hist, per_client) =
                        phase(&pools, put, *size, seconds, &written).await?;
                    let elapsed = started.elapsed().as_secs_f64();
                    if put {
                        written = per_client;
                    }
                    let cluster_cpu_s = cluster.cpu_seconds() - cpu_cluster;
                    let gib = (ops * size) as f64 / (1u64 << 30) as f64;
                    let cell = Cell {
                        at_rest: at_rest.into(),
                        in_transit: in_transit.into(),
                        object_size: *size,
                        op: if put { "put" } else { "get" }.into(),
                        clients,
                        ops,
                        seconds: elapsed,
                        ops_s: ops as f64 / elapsed,
                        mib_s: (ops * size) as f64 / elapsed / MIB as f64,
                        lat_us: LatencyUs::of(&hist),
                        cluster_cpu_s,
                        cluster_cpu_s_per_gib: if gib > 0.0 { cluster_cpu_s / gib } else { 0.0 },
                        client_cpu_s: cpu_seconds() - cpu_client,
                        pct_of_baseline: 0.0,
                    };
                    eprintln!(
                        "{at_rest:>4}/{in_transit:<6} {:>3} {}: {:>8.0} ops/s {:>8.1} MiB/s, cluster CPU {:.1} s/GiB",
                        size_label(*size),
                        cell.op,
                        cell.ops_s,
                        cell.mib_s,
                        cell.cluster_cpu_s_per_gib
                    );
                    cells.push(cell);
                }
            }
            Ok::<_, String>(())
        })?;
        drop(cluster);
    }
    for i in 0..cells.len() {
        let baseline = cells
            .iter()
            .find(|c| {
                c.at_rest == "none"
                    && c.in_transit == "crc"
                    && c.object_size == cells[i].object_size
                    && c.op == cells[i].op
            })
            .map_or(0.0, |c| c.ops_s);
        cells[i].pct_of_baseline = if baseline > 0.0 {
            100.0 * cells[i].ops_s / baseline
        } else {
            0.0
        };
    }
    print_table(&cells);
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "bench": "cluster",
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "machine": super::report::machine(),
            "config": { "seconds_per_cell": seconds, "clients": clients, "osds": args.osds },
            "cells": cells,
        });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| format!("encoding JSON: {e}"))?;
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
        println!("cells written to {}", path.display());
    }
    Ok(())
}

fn print_table(cells: &[Cell]) {
    println!();
    println!(
        "{:<5} {:<4} {:<13} {:>9} {:>9} {:>8} {:>9} {:>9} {:>11}",
        "size", "op", "at-rest/wire", "ops/s", "MiB/s", "% base", "p50 us", "p99 us", "CPU s/GiB"
    );
    for c in cells {
        println!(
            "{:<5} {:<4} {:<13} {:>9.0} {:>9.1} {:>7.0}% {:>9.0} {:>9.0} {:>11.2}",
            size_label(c.object_size),
            c.op,
            format!("{}/{}", c.at_rest, c.in_transit),
            c.ops_s,
            c.mib_s,
            c.pct_of_baseline,
            c.lat_us.p50,
            c.lat_us.p99,
            c.cluster_cpu_s_per_gib
        );
    }
}
