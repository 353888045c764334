//! `coffer bench matrix`: the published encryption matrix (MISSION.md, "The numbers to
//! beat") reproduced on Coffer in one command. For each configuration (at rest x in transit,
//! `edge/secure` for a pool sealed by its clients, or an NBD export given with `--target`),
//! a fresh cluster with images filled by large writes, then random reads and writes of
//! 4 MiB and 4 KiB in three client shapes: "many" (several client processes, each with many
//! IOs in flight), "one" (one client, queue depth 128) and "sync" (one client at queue depth
//! one). `--pool-types ec:4+2` measures each configuration again with the images' data in
//! an erasure-coded pool. Every cell is a percent of the first configuration measured in
//! the same repetition, with latency percentiles and the CPU time of the cluster per GiB
//! and per 1,000 IOs.

mod fio;
mod library;
mod plot;
mod table;
pub mod worker;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::progress::Progress;

use super::fresh::{
    connect_admin, fresh_config, wait_clean, FreshArgs, FreshCluster, CORNERS, EDGE,
};
use super::pool_type::{parse_pool_type, settled_usage, PoolType};
use super::report::{
    machine_cores, mean_and_stddev, percent_of, print_header, size_label, write_json, LatencyUs,
};

const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;
/// Queue depth of the "one" shape, as in the published study.
const ONE_QD: usize = 128;
/// How long an NBD export may take to accept connections after `coffer up` says it is up.
const NBD_LISTEN_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// Client processes driving images through the block library, as `coffer nbd serve` does.
    Library,
    /// fio's nbd engine through the cluster's NBD export: an independent client.
    Fio,
}

#[derive(clap::Args)]
pub struct MatrixArgs {
    /// A reduced run of about three minutes: 2 s cells over 128 MiB.
    #[arg(long)]
    quick: bool,
    /// Adds the LUKS-like at-rest modes xts-4096 and xts-512 to the four corners and edge.
    #[arg(long)]
    all: bool,
    /// Configurations as AT-REST/IN-TRANSIT, comma-separated; the first is the baseline.
    /// AT-REST is a store mode (none, gcm, xts-4096, xts-512) or edge: the data sealed by
    /// the clients, the stores in gcm for names and metadata, secure links only
    /// [default: none/crc,none/secure,gcm/crc,gcm/secure,edge/secure].
    #[arg(long, value_delimiter = ',', conflicts_with = "all")]
    configs: Option<Vec<String>>,
    #[command(flatten)]
    fresh: FreshArgs,
    /// Runs the whole matrix N times (each on fresh clusters) and reports mean and spread.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Draws the percent of baseline per cell as grouped bars (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// What drives the IO.
    #[arg(long, value_enum, default_value = "library")]
    engine: Engine,
    /// Measures an NBD export instead of fresh clusters (LABEL=nbd://HOST:PORT/NAME, or the
    /// URI alone); repeat it to compare exports, the first is the baseline. Uses fio, and
    /// WRITES OVER the first --image-size bytes of every export.
    #[arg(long, conflicts_with_all = ["configs", "all"])]
    target: Vec<String>,
    /// Bytes each configuration's clients spread their IO over (the "many" clients share it)
    /// [default: 1G, or 128M with --quick].
    #[arg(long, value_parser = crate::text::parse_size)]
    image_size: Option<u64>,
    /// Client processes of the "many" shape [default: 2 per core].
    #[arg(long)]
    clients: Option<usize>,
    /// IOs in flight per client of the "many" shape.
    #[arg(long, default_value_t = 32)]
    many_qd: usize,
    /// IO sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4m,4k", value_parser = crate::text::parse_size)]
    io_sizes: Vec<u64>,
    /// Client shapes, comma-separated: many, one, sync.
    #[arg(long, value_delimiter = ',', default_value = "many,one,sync")]
    shapes: Vec<String>,
    /// Where the images keep their data, comma-separated: replicated (the default pool,
    /// min(3, OSDs) copies) or ec:K+M (an erasure-coded data pool made for the run, the
    /// images' headers staying in the default pool; needs K + M OSDs and the library
    /// engine). Each configuration is measured in each.
    #[arg(long, value_delimiter = ',', default_value = "replicated", value_parser = parse_pool_type, conflicts_with = "target")]
    pool_types: Vec<PoolType>,
}

/// What one cell measured, whichever engine drove it.
#[derive(Debug)]
pub struct Measured {
    pub ops: u64,
    pub seconds: f64,
    pub lat_us: LatencyUs,
    /// CPU seconds of the load generator (client processes or fio).
    pub client_cpu_s: f64,
    /// CPU seconds of the cluster's daemons (monitor, OSDs, and the NBD server under fio);
    /// unknown for an external target.
    pub cluster_cpu_s: Option<f64>,
}

enum Source {
    Fresh {
        at_rest: String,
        in_transit: String,
        pool_type: PoolType,
    },
    Target {
        uri: String,
    },
}

struct Config {
    label: String,
    source: Source,
}

#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    clients: usize,
    qd: usize,
}

#[derive(Clone, Debug, Serialize)]
struct Cell {
    config: String,
    at_rest: Option<String>,
    in_transit: Option<String>,
    /// Where the images keep their data (`replicated`, `ec:4+2`; null for a target).
    pool_type: Option<String>,
    /// The raw bytes the OSDs' stores took for the filled images, per byte of image data
    /// (null for a target or fio).
    space_raw_per_byte: Option<f64>,
    engine: &'static str,
    shape: &'static str,
    clients: usize,
    qd: usize,
    io_size: u64,
    op: &'static str,
    ops: u64,
    seconds: f64,
    iops: f64,
    mib_s: f64,
    lat_us: LatencyUs,
    /// Cluster CPU seconds per GiB moved and per 1,000 IOs (null for an external target).
    cpu_s_per_gib: Option<f64>,
    cpu_s_per_kio: Option<f64>,
    /// The load generator's CPU per GiB, and its share of all the machine's cores.
    client_cpu_s_per_gib: f64,
    client_cpu_pct_of_machine: f64,
    pct_of_baseline: f64,
    repeats: usize,
    iops_stddev: f64,
    pct_of_baseline_stddev: f64,
    cpu_s_per_gib_stddev: Option<f64>,
}

fn configs(args: &MatrixArgs) -> Result<Vec<Config>, String> {
    if !args.target.is_empty() {
        return args
            .target
            .iter()
            .map(|target| {
                let (label, uri) = target.split_once('=').unwrap_or((target, target));
                if !uri.starts_with("nbd://") && !uri.starts_with("nbd+unix://") {
                    return Err(format!(
                        "--target {target}: give an NBD URI, nbd://HOST:PORT/NAME"
                    ));
                }
                Ok(Config {
                    label: label.to_string(),
                    source: Source::Target {
                        uri: uri.to_string(),
                    },
                })
            })
            .collect();
    }
    let mut pairs: Vec<(String, String)> = match &args.configs {
        Some(list) => list
            .iter()
            .map(|config| fresh_config(config))
            .collect::<Result<_, _>>()?,
        None => CORNERS
            .iter()
            .chain([&(EDGE, "secure")])
            .map(|(r, t)| (r.to_string(), t.to_string()))
            .collect(),
    };
    if args.all {
        for at_rest in ["xts-4096", "xts-512"] {
            for in_transit in ["crc", "secure"] {
                pairs.push((at_rest.into(), in_transit.into()));
            }
        }
    }
    for pool_type in &args.pool_types {
        pool_type.check_osds(args.fresh.osds)?;
        if *pool_type != PoolType::Replicated && args.engine == Engine::Fio {
            return Err(format!(
                "--pool-types {}: use --engine library (the NBD export `coffer up` makes \
                 keeps its data in the replicated default pool)",
                pool_type.label()
            ));
        }
    }
    let mut configs = Vec::new();
    for pool_type in &args.pool_types {
        for (at_rest, in_transit) in &pairs {
            let label = match pool_type {
                PoolType::Replicated => format!("{at_rest}/{in_transit}"),
                other => format!("{at_rest}/{in_transit} {}", other.label()),
            };
            configs.push(Config {
                label,
                source: Source::Fresh {
                    at_rest: at_rest.clone(),
                    in_transit: in_transit.clone(),
                    pool_type: *pool_type,
                },
            });
        }
    }
    Ok(configs)
}

fn shapes(args: &MatrixArgs) -> Result<Vec<Shape>, String> {
    let cores = machine_cores();
    let clients = args.clients.unwrap_or(2 * cores).max(1);
    args.shapes
        .iter()
        .map(|name| match name.as_str() {
            "many" => Ok(Shape {
                name: "many",
                clients,
                qd: args.many_qd.max(1),
            }),
            "one" => Ok(Shape {
                name: "one",
                clients: 1,
                qd: ONE_QD,
            }),
            "sync" => Ok(Shape {
                name: "sync",
                clients: 1,
                qd: 1,
            }),
            other => Err(format!("--shapes {other}: use many, one or sync")),
        })
        .collect()
}

pub fn run(args: MatrixArgs) -> Result<(), String> {
    args.fresh.place()?;
    let engine = if args.target.is_empty() {
        args.engine
    } else {
        Engine::Fio
    };
    let configs = configs(&args)?;
    let shapes = shapes(&args)?;
    let seconds = args.fresh.seconds(args.quick);
    let image_size = args
        .image_size
        .unwrap_or(if args.quick { 128 * MIB } else { 1024 * MIB });
    let repeats = args.repeat.max(1);
    if let Some(plot) = &args.plot {
        plot::check_path(plot)?;
    }
    print_header(
        "coffer bench matrix",
        &[
            (
                "configurations",
                format!(
                    "{}; baseline {}",
                    configs
                        .iter()
                        .map(|c| c.label.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    configs[0].label
                ),
            ),
            ("engine", describe_engine(engine, &configs, &args)),
            (
                "shapes",
                shapes
                    .iter()
                    .map(|s| format!("{} ({} client(s) x QD {})", s.name, s.clients, s.qd))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            (
                "load",
                format!(
                    "random {:?} reads and writes over {} filled first; {seconds} s per cell; \
                     {repeats} repetition(s), each starting one configuration later",
                    args.io_sizes
                        .iter()
                        .map(|s| size_label(*s))
                        .collect::<Vec<_>>(),
                    size_label(image_size)
                ),
            ),
        ],
    );
    let cells_per_config = shapes.len() * args.io_sizes.len() * 2;
    let cells_total = (repeats * configs.len() * cells_per_config) as u64;
    // Each finished cell also prints one line, above the bar (or alone, without one).
    let progress = Progress::new("bench matrix", cells_total, "cells");
    let runtime = crate::daemon::runtime()?;
    let mut runs = Vec::with_capacity(repeats);
    for repeat in 0..repeats {
        // Each repetition starts one configuration later, so that none is always measured
        // first or last: on these machines the place in the order alone moved a
        // configuration's CPU per GiB by 15 % (docs/benchmarks.md).
        let mut by_config: Vec<Vec<Cell>> = vec![Vec::new(); configs.len()];
        for turn in 0..configs.len() {
            let index = (turn + repeat) % configs.len();
            let plan = Plan {
                args: &args,
                engine,
                shapes: &shapes,
                seconds,
                image_size,
                repeat,
            };
            by_config[index] = plan.measure(&configs[index], &runtime, &progress)?;
        }
        let mut cells: Vec<Cell> = by_config.into_iter().flatten().collect();
        set_pct_of_baseline(&mut cells, &configs[0].label);
        runs.push(cells);
    }
    progress.finish();
    let cells = merge_repeats(runs);
    let labels: Vec<&str> = configs.iter().map(|c| c.label.as_str()).collect();
    table::print(&cells, &labels);
    if let Some(path) = &args.fresh.json {
        let config = serde_json::json!({
            "engine": format!("{engine:?}").to_lowercase(),
            "seconds_per_cell": seconds,
            "image_size": image_size,
            "osds": args.fresh.osds,
            "repeat": repeats,
            "shapes": shapes.iter().map(|s| serde_json::json!({
                "shape": s.name, "clients": s.clients, "qd": s.qd,
            })).collect::<Vec<_>>(),
        });
        write_json(path, "matrix", config, &cells)?;
    }
    if let Some(path) = &args.plot {
        plot::write(path, &cells, &labels)?;
        println!("plot written to {}", path.display());
    }
    Ok(())
}

fn describe_engine(engine: Engine, configs: &[Config], args: &MatrixArgs) -> String {
    match (engine, &configs[0].source) {
        (_, Source::Target { .. }) => {
            "fio's nbd engine on the given NBD exports (cluster CPU not measured)".into()
        }
        (Engine::Fio, Source::Fresh { .. }) => format!(
            "fio's nbd engine through the NBD export of a fresh `coffer up` per configuration \
             (1 monitor, {} OSDs, {}); the \"many\" clients are fio jobs, one NBD connection each",
            args.fresh.osds,
            args.fresh.cache()
        ),
        (Engine::Library, Source::Fresh { .. }) => format!(
            "one `coffer bench worker` process per client, each on its own image through the \
             block library, on a fresh `coffer up` per configuration (1 monitor, {} OSDs, {}) \
             under {}; the images' data in {}",
            args.fresh.osds,
            args.fresh.cache(),
            args.fresh.dir.display(),
            args.pool_types
                .iter()
                .map(|t| t
                    .describe(args.fresh.osds)
                    .map(|d| format!("{} ({d})", t.label())))
                .collect::<Result<Vec<_>, _>>()
                .unwrap_or_default()
                .join(", ")
        ),
    }
}

/// What every configuration of one repetition is measured with.
struct Plan<'a> {
    args: &'a MatrixArgs,
    engine: Engine,
    shapes: &'a [Shape],
    seconds: f64,
    image_size: u64,
    repeat: usize,
}

impl Plan<'_> {
    fn measure(
        &self,
        config: &Config,
        runtime: &tokio::runtime::Runtime,
        progress: &Progress,
    ) -> Result<Vec<Cell>, String> {
        progress.set_message(&format!("{}: starting", config.label));
        match &config.source {
            Source::Target { uri } => {
                fio::prefill(uri, self.image_size)?;
                self.cells(config, progress, &|shape, io_size, write| {
                    fio::run_cell(
                        &|| None,
                        uri,
                        write,
                        io_size,
                        shape,
                        self.seconds,
                        self.image_size,
                    )
                })
            }
            Source::Fresh {
                at_rest,
                in_transit,
                pool_type,
            } => {
                let dir = self.args.fresh.dir.join(format!(
                    "matrix-{}-{}-{at_rest}-{in_transit}-{}",
                    std::process::id(),
                    self.repeat,
                    pool_type.slug()
                ));
                let nbd = match self.engine {
                    Engine::Fio => Some(crate::up::free_loopback_port()?),
                    Engine::Library => None,
                };
                let export = nbd.map(|port| (format!("127.0.0.1:{port}"), self.image_size));
                let cluster = FreshCluster::start(
                    &dir,
                    &self.args.fresh,
                    at_rest,
                    in_transit,
                    export.as_ref().map(|(addr, size)| (addr.as_str(), *size)),
                    None,
                    false,
                )?;
                let conf = cluster.conf()?;
                let many = self
                    .shapes
                    .iter()
                    .find(|s| s.name == "many")
                    .map_or(0, |s| s.clients);
                let one = self.shapes.iter().any(|s| s.name != "many");
                let space = runtime.block_on(async {
                    let admin = connect_admin(&conf).await?;
                    wait_clean(&admin).await?;
                    if self.engine != Engine::Library {
                        return Ok(None);
                    }
                    let edge = matches!(
                        &config.source,
                        Source::Fresh { at_rest, .. } if at_rest == EDGE
                    );
                    let data = pool_type.pool(&admin, edge).await?;
                    progress.set_message(&format!("{}: filling images", config.label));
                    let filled =
                        library::prepare_images(&conf, self.image_size, one, many, &data).await?;
                    let objects = filled / block::image::OBJECT_SIZE_DEFAULT;
                    let used = settled_usage(&admin, &data, objects).await?.used_bytes;
                    let per_byte = used as f64 / filled.max(1) as f64;
                    progress.eprintln(&format!(
                        "{}: {} of images take {} in pool {data}: {per_byte:.2} bytes per byte",
                        config.label,
                        crate::text::approximate(filled),
                        crate::text::approximate(used)
                    ));
                    Ok::<_, String>(Some(per_byte))
                })?;
                let cluster_cpu = || Some(cluster.cpu_seconds());
                match export {
                    Some((addr, _)) => {
                        wait_listening(&addr)?;
                        let uri = format!("nbd://{addr}/{}", crate::up::DEFAULT_IMAGE);
                        progress.set_message(&format!("{}: filling the image", config.label));
                        fio::prefill(&uri, self.image_size)?;
                        self.cells(config, progress, &|shape, io_size, write| {
                            fio::run_cell(
                                &cluster_cpu,
                                &uri,
                                write,
                                io_size,
                                shape,
                                self.seconds,
                                self.image_size,
                            )
                        })
                    }
                    None => {
                        let conf_path = cluster.conf_path();
                        let mut cells =
                            self.cells(config, progress, &|shape, io_size, write| {
                                let images: Vec<String> = if shape.name == "many" {
                                    (0..shape.clients).map(library::image_many).collect()
                                } else {
                                    vec![library::IMAGE_ONE.to_string()]
                                };
                                library::run_cell(
                                    &cluster_cpu,
                                    &conf_path,
                                    &images,
                                    write,
                                    io_size,
                                    shape.qd,
                                    self.seconds,
                                )
                            })?;
                        for cell in &mut cells {
                            cell.space_raw_per_byte = space;
                        }
                        Ok(cells)
                    }
                }
            }
        }
    }

    /// Every cell of one configuration, writes before reads, each driven by `drive`.
    fn cells(
        &self,
        config: &Config,
        progress: &Progress,
        drive: &dyn Fn(Shape, u64, bool) -> Result<Measured, String>,
    ) -> Result<Vec<Cell>, String> {
        let labels = match &config.source {
            Source::Fresh {
                at_rest,
                in_transit,
                pool_type,
            } => (
                Some(at_rest.clone()),
                Some(in_transit.clone()),
                Some(pool_type.label()),
            ),
            Source::Target { .. } => (None, None, None),
        };
        let mut cells = Vec::new();
        for shape in self.shapes {
            for &io_size in &self.args.io_sizes {
                for write in [true, false] {
                    let op = if write { "write" } else { "read" };
                    let name = format!(
                        "{} {} {} {op}",
                        config.label,
                        shape.name,
                        size_label(io_size)
                    );
                    progress.set_message(&name);
                    let measured = drive(*shape, io_size, write)?;
                    let cell = cell_of(
                        config,
                        labels.clone(),
                        self.engine,
                        *shape,
                        io_size,
                        op,
                        &measured,
                    );
                    progress.eprintln(&format!(
                        "{name:<28}: {:>8.0} IOPS {:>8.1} MiB/s  p99 {:>8.0} us  cluster CPU {}",
                        cell.iops,
                        cell.mib_s,
                        cell.lat_us.p99,
                        cell.cpu_s_per_gib
                            .map_or("-".into(), |v| format!("{v:.2} s/GiB"))
                    ));
                    progress.inc(1);
                    cells.push(cell);
                }
            }
        }
        Ok(cells)
    }
}

fn cell_of(
    config: &Config,
    (at_rest, in_transit, pool_type): (Option<String>, Option<String>, Option<String>),
    engine: Engine,
    shape: Shape,
    io_size: u64,
    op: &'static str,
    measured: &Measured,
) -> Cell {
    let seconds = measured.seconds.max(1e-9);
    let bytes = (measured.ops * io_size) as f64;
    let gib = bytes / GIB;
    let per_gib = |cpu: f64| if gib > 0.0 { cpu / gib } else { 0.0 };
    let kio = measured.ops as f64 / 1000.0;
    let cores = machine_cores() as f64;
    Cell {
        config: config.label.clone(),
        at_rest,
        in_transit,
        pool_type,
        space_raw_per_byte: None,
        engine: match engine {
            Engine::Library => "library",
            Engine::Fio => "fio",
        },
        shape: shape.name,
        clients: shape.clients,
        qd: shape.qd,
        io_size,
        op,
        ops: measured.ops,
        seconds: measured.seconds,
        iops: measured.ops as f64 / seconds,
        mib_s: bytes / seconds / MIB as f64,
        lat_us: measured.lat_us,
        cpu_s_per_gib: measured.cluster_cpu_s.map(per_gib),
        cpu_s_per_kio: measured
            .cluster_cpu_s
            .map(|cpu| if kio > 0.0 { cpu / kio } else { 0.0 }),
        client_cpu_s_per_gib: per_gib(measured.client_cpu_s),
        client_cpu_pct_of_machine: 100.0 * measured.client_cpu_s / seconds / cores,
        pct_of_baseline: 0.0,
        repeats: 1,
        iops_stddev: 0.0,
        pct_of_baseline_stddev: 0.0,
        cpu_s_per_gib_stddev: measured.cluster_cpu_s.map(|_| 0.0),
    }
}

fn set_pct_of_baseline(cells: &mut [Cell], baseline: &str) {
    let base: Vec<f64> = cells
        .iter()
        .map(|cell| {
            cells
                .iter()
                .find(|b| {
                    b.config == baseline
                        && (b.shape, b.io_size, b.op) == (cell.shape, cell.io_size, cell.op)
                })
                .map_or(0.0, |b| b.iops)
        })
        .collect();
    for (cell, base) in cells.iter_mut().zip(base) {
        cell.pct_of_baseline = percent_of(cell.iops, base);
    }
}

/// One cell per (configuration, shape, IO size, op): means over the repetitions, with the
/// spread of IOPS, of the percent of baseline and of the cluster's CPU per GiB. Every
/// repetition has the same cells in the same order.
fn merge_repeats(runs: Vec<Vec<Cell>>) -> Vec<Cell> {
    let count = runs.len();
    let first = runs.first().cloned().unwrap_or_default();
    first
        .into_iter()
        .enumerate()
        .map(|(i, cell)| {
            let all: Vec<&Cell> = runs.iter().map(|run| &run[i]).collect();
            let spread = |f: &dyn Fn(&Cell) -> f64| {
                mean_and_stddev(&all.iter().map(|c| f(c)).collect::<Vec<f64>>())
            };
            let mean = |f: &dyn Fn(&Cell) -> f64| spread(f).0;
            let (iops, iops_stddev) = spread(&|c| c.iops);
            let (pct, pct_stddev) = spread(&|c| c.pct_of_baseline);
            let cpu = cell
                .cpu_s_per_gib
                .map(|_| spread(&|c| c.cpu_s_per_gib.unwrap_or(0.0)));
            Cell {
                ops: all.iter().map(|c| c.ops).sum(),
                seconds: all.iter().map(|c| c.seconds).sum(),
                iops,
                mib_s: mean(&|c| c.mib_s),
                lat_us: LatencyUs::merge(all.iter().map(|c| &c.lat_us)),
                cpu_s_per_gib: cpu.map(|(m, _)| m),
                cpu_s_per_kio: cell
                    .cpu_s_per_kio
                    .map(|_| mean(&|c| c.cpu_s_per_kio.unwrap_or(0.0))),
                client_cpu_s_per_gib: mean(&|c| c.client_cpu_s_per_gib),
                client_cpu_pct_of_machine: mean(&|c| c.client_cpu_pct_of_machine),
                pct_of_baseline: pct,
                repeats: count,
                iops_stddev,
                pct_of_baseline_stddev: pct_stddev,
                cpu_s_per_gib_stddev: cpu.map(|(_, s)| s),
                ..cell
            }
        })
        .collect()
}

/// Waits until `addr` accepts TCP connections.
fn wait_listening(addr: &str) -> Result<(), String> {
    let deadline = Instant::now() + NBD_LISTEN_TIMEOUT;
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            return Err(format!(
                "the NBD export at {addr} did not accept connections within {NBD_LISTEN_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(config: &str, op: &'static str, ops: u64) -> Cell {
        let shape = Shape {
            name: "one",
            clients: 1,
            qd: ONE_QD,
        };
        let measured = Measured {
            ops,
            seconds: 1.0,
            lat_us: LatencyUs {
                mean: 1.0,
                p50: 1.0,
                p99: 2.0,
                p999: 3.0,
                max: 4.0,
            },
            client_cpu_s: 0.1,
            cluster_cpu_s: Some(0.5),
        };
        let config = Config {
            label: config.into(),
            source: Source::Target { uri: String::new() },
        };
        cell_of(
            &config,
            (None, None, None),
            Engine::Library,
            shape,
            4096,
            op,
            &measured,
        )
    }

    /// Each repetition is a percent of its own baseline; the merge gives their mean and
    /// spread, and the baseline stays at exactly 100 %.
    #[test]
    fn percents_are_taken_per_repetition_then_averaged() {
        let mut runs = Vec::new();
        for (base, other) in [(1000, 900), (2000, 2000)] {
            let mut cells = vec![
                cell("base", "read", base),
                cell("base", "write", base / 2),
                cell("other", "read", other),
                cell("other", "write", base / 2),
            ];
            set_pct_of_baseline(&mut cells, "base");
            runs.push(cells);
        }
        let merged = merge_repeats(runs);
        assert_eq!(merged.len(), 4);
        assert!(merged.iter().all(|c| c.repeats == 2));
        assert_eq!(merged[0].pct_of_baseline, 100.0);
        assert_eq!(merged[0].pct_of_baseline_stddev, 0.0);
        let read = &merged[2];
        assert!((read.pct_of_baseline - 95.0).abs() < 1e-9, "{read:?}");
        assert!((read.pct_of_baseline_stddev - 50f64.sqrt()).abs() < 1e-9);
        assert!((read.iops - 1450.0).abs() < 1e-9);
        assert_eq!(merged[3].pct_of_baseline, 100.0);
    }

    #[test]
    fn the_plot_has_a_bar_per_cell_of_each_configuration_after_the_baseline() {
        let mut cells = vec![
            cell("base", "read", 100),
            cell("a&b", "read", 90),
            cell("c", "read", 120),
        ];
        set_pct_of_baseline(&mut cells, "base");
        let svg = plot::svg(&cells, &["base", "a&b", "c"]);
        assert_eq!(svg.matches("<title>").count(), 2, "{svg}");
        assert!(svg.contains("a&amp;b one 4K read: 90.0 %"), "{svg}");
        assert!(svg.contains("goal 95 %"));
        assert!(plot::check_path(std::path::Path::new("m.svg")).is_ok());
        assert!(plot::check_path(std::path::Path::new("m.jpg")).is_err());
    }
}
