//! `coffer bench cluster`: N clients putting, then getting, 4 KiB and 4 MiB objects for a
//! fixed time against a fresh `coffer up` cluster, in the four corners of at-rest (none,
//! gcm) by in-transit (crc, secure) encryption, in a replicated pool and in the
//! erasure-coded pools `--pool-types` names (`ec:4+2`). Each cell is a percent of the
//! first pool type in none/crc from the same run, with the CPU seconds per GiB of all
//! cluster processes (monitor and OSDs) and, for puts, the raw space used per byte stored.

use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use serde::Serialize;

use super::fresh::{connect_admin, connect_clients, wait_clean, FreshArgs, FreshCluster, CORNERS};
use super::pool_type::{parse_pool_type, settled_usage, PoolType};
use super::report::{
    cpu_seconds, histogram, percent_of, print_header, size_label, write_json, Rates,
};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

#[derive(clap::Args)]
pub struct ClusterArgs {
    /// A reduced run (2 s cells) that finishes in about a minute.
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    fresh: FreshArgs,
    /// Clients, each with its own connection and one operation in flight.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Object sizes, comma-separated (4k, 4m).
    #[arg(long, value_delimiter = ',', default_value = "4k,4m", value_parser = parse_size)]
    io_sizes: Vec<u64>,
    /// Pools, comma-separated: replicated (the cluster's default pool, min(3, OSDs)
    /// copies), or ec:K+M (an erasure-coded pool made for the run; needs K + M OSDs).
    #[arg(long, value_delimiter = ',', default_value = "replicated", value_parser = parse_pool_type)]
    pool_types: Vec<PoolType>,
}

fn parse_size(text: &str) -> Result<u64, String> {
    match text.to_ascii_lowercase().as_str() {
        "4k" => Ok(4 * KIB),
        "4m" => Ok(4 * MIB),
        other => Err(format!("unknown object size {other:?}; expected 4k or 4m")),
    }
}

#[derive(Debug, Serialize)]
struct Cell {
    at_rest: String,
    in_transit: String,
    pool_type: String,
    object_size: u64,
    op: String,
    clients: usize,
    #[serde(flatten)]
    rates: Rates,
    pct_of_baseline: f64,
    /// Puts: the raw bytes the OSDs' stores allocated for the cell's objects, per byte put.
    used_per_byte: Option<f64>,
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
    args.fresh.place()?;
    for pool_type in &args.pool_types {
        pool_type.check_osds(args.fresh.osds)?;
    }
    let seconds = args.fresh.seconds(args.quick);
    let clients = args.clients.max(1);
    print_header(
        "coffer bench cluster",
        &[
            (
                "corners",
                "at rest none|gcm x in transit crc|secure; baseline none/crc, first pool".into(),
            ),
            (
                "cluster",
                format!(
                    "fresh `coffer up` per corner: 1 monitor, {} OSDs ({}), under {}",
                    args.fresh.osds,
                    args.fresh.cache(),
                    args.fresh.dir.display()
                ),
            ),
            (
                "pools",
                args.pool_types
                    .iter()
                    .map(|t| t.describe(args.fresh.osds))
                    .collect::<Result<Vec<_>, _>>()?
                    .join("; "),
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
        let cluster = FreshCluster::for_bench("cluster", &args.fresh, at_rest, in_transit)?;
        let conf = cluster.conf()?;
        runtime.block_on(async {
            let admin = connect_admin(&conf).await?;
            wait_clean(&admin).await?;
            for pool_type in &args.pool_types {
                let pool = pool_type.pool(&admin, false).await?;
                let pools = connect_clients(&conf, clients, &pool).await?;
                let mut objects = 0;
                for size in &args.io_sizes {
                    let mut written = Vec::new();
                    for put in [true, false] {
                        let used_before = settled_usage(&admin, &pool, objects).await?.used_bytes;
                        let (cpu_cluster, cpu_client) = (cluster.cpu_seconds(), cpu_seconds());
                        let started = Instant::now();
                        let (ops, hist, per_client) =
                            phase(&pools, put, *size, seconds, &written).await?;
                        let elapsed = started.elapsed().as_secs_f64();
                        let rates = Rates::new(
                            ops,
                            *size,
                            elapsed,
                            &hist,
                            cluster.cpu_seconds() - cpu_cluster,
                            cpu_seconds() - cpu_client,
                        );
                        let mut used_per_byte = None;
                        if put {
                            written = per_client;
                            objects += ops;
                            let used = settled_usage(&admin, &pool, objects).await?.used_bytes;
                            let put_bytes = (ops * size).max(1) as f64;
                            used_per_byte = Some(used.saturating_sub(used_before) as f64 / put_bytes);
                        }
                        let cell = Cell {
                            at_rest: at_rest.into(),
                            in_transit: in_transit.into(),
                            pool_type: pool_type.label(),
                            object_size: *size,
                            op: if put { "put" } else { "get" }.into(),
                            clients,
                            rates,
                            pct_of_baseline: 0.0,
                            used_per_byte,
                        };
                        eprintln!(
                            "{at_rest:>4}/{in_transit:<6} {:<10} {:>3} {}: {:>8.0} ops/s {:>8.1} MiB/s, cluster CPU {:.1} s/GiB",
                            cell.pool_type,
                            size_label(*size),
                            cell.op,
                            cell.rates.ops_s,
                            cell.rates.mib_s,
                            cell.rates.cluster_cpu_s_per_gib
                        );
                        cells.push(cell);
                    }
                }
            }
            Ok::<_, String>(())
        })?;
        drop(cluster);
    }
    let first_type = args.pool_types[0].label();
    for i in 0..cells.len() {
        let baseline = cells
            .iter()
            .find(|c| {
                (c.at_rest.as_str(), c.in_transit.as_str()) == CORNERS[0]
                    && c.pool_type == first_type
                    && c.object_size == cells[i].object_size
                    && c.op == cells[i].op
            })
            .map_or(0.0, |c| c.rates.ops_s);
        cells[i].pct_of_baseline = percent_of(cells[i].rates.ops_s, baseline);
    }
    print_table(&cells);
    if let Some(path) = &args.fresh.json {
        let config = serde_json::json!({
            "seconds_per_cell": seconds,
            "clients": clients,
            "osds": args.fresh.osds,
            "pool_types": args.pool_types.iter().map(PoolType::label).collect::<Vec<_>>(),
        });
        write_json(path, "cluster", config, &cells)?;
    }
    Ok(())
}

fn print_table(cells: &[Cell]) {
    println!();
    println!(
        "{:<5} {:<4} {:<13} {:<10} {:>9} {:>9} {:>8} {:>9} {:>9} {:>11} {:>10}",
        "size",
        "op",
        "at-rest/wire",
        "pool",
        "ops/s",
        "MiB/s",
        "% base",
        "p50 us",
        "p99 us",
        "CPU s/GiB",
        "raw/byte"
    );
    for c in cells {
        println!(
            "{:<5} {:<4} {:<13} {:<10} {:>9.0} {:>9.1} {:>7.0}% {:>9.0} {:>9.0} {:>11.2} {:>10}",
            size_label(c.object_size),
            c.op,
            format!("{}/{}", c.at_rest, c.in_transit),
            c.pool_type,
            c.rates.ops_s,
            c.rates.mib_s,
            c.pct_of_baseline,
            c.rates.lat_us.p50,
            c.rates.lat_us.p99,
            c.rates.cluster_cpu_s_per_gib,
            c.used_per_byte.map_or("-".into(), |u| format!("{u:.2}"))
        );
    }
}
