//! `coffer bench fs`: the public file-system study's shape on Coffer's own mount, through
//! sysbench's `fileio` test itself (Debian's sysbench): one thread, sequential 1 MiB and
//! random 4 KiB reads and writes of one file, with O_DIRECT so every read reaches the mount
//! (not the kernel's page cache) and the mount's readahead is what is measured. Reads run
//! with each readahead setting (`auto` against the extremes `0` and a fixed 8 MiB, and 4 KiB),
//! on a fresh cluster per encryption configuration (none/crc against the default:
//! edge-sealed data, gcm at rest, secure links). A fresh mount per cell, so no cell reads
//! what the one before fetched.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde::Serialize;

use super::fresh::{connect_admin, pid_cpu_seconds, wait_clean, FreshArgs, FreshCluster, EDGE};
use super::report::{mean_and_stddev, percent_of, print_header, size_label, write_json};

const MIB: u64 = 1 << 20;

#[derive(clap::Args)]
pub struct FsArgs {
    /// A reduced run (5 s cells, a 256 MiB file).
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    fresh: FreshArgs,
    /// The test file's size [default: 2G, or 256M with --quick].
    #[arg(long, value_parser = crate::text::parse_size)]
    file_size: Option<u64>,
    /// Readahead settings for the read cells, as `coffer mount --readahead` takes them.
    #[arg(long, value_delimiter = ',', default_value = "auto,0,4k,8m")]
    readahead: Vec<String>,
    /// Configurations as AT-REST/IN-TRANSIT (AT-REST edge: the default, the data pool sealed
    /// by the mount), comma-separated; the first is the baseline [default:
    /// none/crc,edge/secure].
    #[arg(long, value_delimiter = ',')]
    configs: Option<Vec<String>>,
    /// Runs of every cell, for means and spread.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
}

/// One sysbench test: its mode, block size, and whether it reads.
#[derive(Clone, Copy)]
struct Test {
    mode: &'static str,
    block: u64,
    read: bool,
}

const TESTS: [Test; 4] = [
    Test {
        mode: "seqrd",
        block: MIB,
        read: true,
    },
    Test {
        mode: "rndrd",
        block: 4096,
        read: true,
    },
    Test {
        mode: "seqwr",
        block: MIB,
        read: false,
    },
    Test {
        mode: "rndwr",
        block: 4096,
        read: false,
    },
];

#[derive(Clone, Debug, Serialize)]
struct Cell {
    at_rest: String,
    in_transit: String,
    test: &'static str,
    block: u64,
    readahead: String,
    runs: Vec<Run>,
    ops_s: f64,
    ops_s_stddev: f64,
    mib_s: f64,
    /// Percent of the better of the readahead extremes (0 and the largest fixed size) in
    /// the same configuration.
    pct_of_best_extreme: f64,
    /// Percent of the baseline configuration's same cell.
    pct_of_baseline: f64,
}

/// What sysbench printed for one run, and the CPU it cost.
#[derive(Clone, Debug, Default, Serialize)]
struct Run {
    ops_s: f64,
    mib_s: f64,
    lat_avg_ms: f64,
    lat_p99_ms: f64,
    /// CPU milliseconds per operation of the monitor, OSDs and metadata daemon, and of the
    /// mount.
    cluster_cpu_ms_per_op: f64,
    mount_cpu_ms_per_op: f64,
}

fn configs(args: &FsArgs) -> Result<Vec<(String, String)>, String> {
    let list = args
        .configs
        .clone()
        .unwrap_or_else(|| vec!["none/crc".into(), format!("{EDGE}/secure")]);
    list.iter()
        .map(|config| match config.split_once('/') {
            Some((at_rest, in_transit)) => Ok((at_rest.to_string(), in_transit.to_string())),
            None => Err(format!(
                "--configs {config:?}: write AT-REST/IN-TRANSIT, edge/secure"
            )),
        })
        .collect()
}

/// A mount of the cluster's file system for one cell, unmounted when dropped.
struct CellMount {
    dir: PathBuf,
    child: Child,
}

impl CellMount {
    fn start(cluster: &FreshCluster, dir: &Path, readahead: &str) -> Result<CellMount, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let log =
            std::fs::File::create(cluster.dir().join("mount.log")).map_err(|e| e.to_string())?;
        let mut command = Command::new(exe);
        cluster.pin(&mut command);
        command
            .arg("--conf")
            .arg(cluster.conf_path())
            .args(["mount", crate::up::DEFAULT_FS])
            .arg(dir)
            .args(["--foreground", "--readahead", readahead]);
        match crate::files::spawn_mount(&mut command, log) {
            Ok((child, _)) => Ok(CellMount {
                dir: dir.to_path_buf(),
                child,
            }),
            Err(why) => Err(format!(
                "{why}; see {}",
                cluster.dir().join("mount.log").display()
            )),
        }
    }

    fn cpu_seconds(&self) -> f64 {
        pid_cpu_seconds(self.child.id())
    }
}

impl Drop for CellMount {
    fn drop(&mut self) {
        crate::files::unmount(&self.dir);
        let _ = self.child.wait();
    }
}

/// `sysbench fileio` with `args` in `dir`; its standard output.
fn sysbench(dir: &Path, args: &[String]) -> Result<String, String> {
    let output = Command::new("sysbench")
        .arg("fileio")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("sysbench (scripts/setup.sh installs it): {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "sysbench fileio {}: {}{}",
            args.join(" "),
            text,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(text)
}

/// The figure after `label` in sysbench's report.
fn figure(report: &str, label: &str) -> f64 {
    report
        .lines()
        .find_map(|line| line.trim().strip_prefix(label))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or(0.0)
}

fn common_args(file_size: u64) -> Vec<String> {
    vec![
        "--file-num=1".into(),
        format!("--file-total-size={file_size}"),
        "--file-io-mode=sync".into(),
        "--file-extra-flags=direct".into(),
        "--threads=1".into(),
        "--percentile=99".into(),
    ]
}

pub fn run(args: FsArgs) -> Result<(), String> {
    args.fresh.place()?;
    let configs = configs(&args)?;
    let seconds = args
        .fresh
        .seconds
        .unwrap_or(if args.quick { 5.0 } else { 15.0 });
    let file_size = args
        .file_size
        .unwrap_or(if args.quick { 256 * MIB } else { 2048 * MIB });
    print_header(
        "coffer bench fs",
        &[
            (
                "configurations",
                configs.iter().map(|(r, t)| format!("{r}/{t}")).collect::<Vec<_>>().join(", "),
            ),
            (
                "workload",
                format!(
                    "sysbench fileio, 1 thread, one {} file, O_DIRECT, sequential 1M and random 4K \
                     reads (readahead {}) and writes (readahead auto; fsync every 100), {seconds} s \
                     per cell, {} run(s)",
                    size_label(file_size),
                    args.readahead.join(", "),
                    args.repeat
                ),
            ),
        ],
    );
    for readahead in &args.readahead {
        crate::files::parse_readahead(readahead).map_err(|e| format!("--readahead: {e}"))?;
    }
    let runtime = crate::daemon::runtime()?;
    let mut cells: Vec<Cell> = Vec::new();
    for (at_rest, in_transit) in &configs {
        let dir = args
            .fresh
            .dir
            .join(format!("fs-{}-{at_rest}-{in_transit}", std::process::id()));
        let cluster =
            FreshCluster::start(&dir, &args.fresh, at_rest, in_transit, None, None, true)?;
        let conf = cluster.conf()?;
        runtime.block_on(async {
            let admin = connect_admin(&conf).await?;
            wait_clean(&admin).await
        })?;
        let mountpoint = dir.join("mnt");
        {
            let mount = CellMount::start(&cluster, &mountpoint, "auto")?;
            let mut prepare = common_args(file_size);
            prepare.push("prepare".into());
            sysbench(&mount.dir, &prepare)?;
        }
        let mut plan: Vec<(Test, String)> = Vec::new();
        for test in TESTS {
            if test.read {
                plan.extend(args.readahead.iter().map(|ra| (test, ra.clone())));
            } else {
                plan.push((test, "auto".into()));
            }
        }
        for (test, readahead) in plan {
            let mut runs = Vec::new();
            for _ in 0..args.repeat {
                let mount = CellMount::start(&cluster, &mountpoint, &readahead)?;
                let mds_cpu = cluster.daemon_cpu_seconds("mds.a");
                let (cluster_cpu, mount_cpu) =
                    (cluster.cpu_seconds() + mds_cpu, mount.cpu_seconds());
                let mut run = common_args(file_size);
                run.extend([
                    format!("--file-test-mode={}", test.mode),
                    format!("--file-block-size={}", test.block),
                    format!("--time={seconds}"),
                    "--events=0".into(),
                    "run".into(),
                ]);
                let report = sysbench(&mount.dir, &run)?;
                let ops_s = figure(&report, if test.read { "reads/s:" } else { "writes/s:" });
                let mib_s = figure(
                    &report,
                    if test.read {
                        "read, MiB/s:"
                    } else {
                        "written, MiB/s:"
                    },
                );
                let ops = (ops_s * seconds).max(1.0);
                let cluster_used =
                    cluster.cpu_seconds() + cluster.daemon_cpu_seconds("mds.a") - cluster_cpu;
                let one = Run {
                    ops_s,
                    mib_s,
                    lat_avg_ms: figure(&report, "avg:"),
                    lat_p99_ms: figure(&report, "99th percentile:"),
                    cluster_cpu_ms_per_op: 1000.0 * cluster_used / ops,
                    mount_cpu_ms_per_op: 1000.0 * (mount.cpu_seconds() - mount_cpu) / ops,
                };
                eprintln!(
                    "{at_rest:>4}/{in_transit:<6} {} {:>3} readahead {readahead:<5}: {:>8.0} ops/s {:>8.1} MiB/s",
                    test.mode,
                    size_label(test.block),
                    one.ops_s,
                    one.mib_s
                );
                runs.push(one);
            }
            let (ops_s, ops_s_stddev) =
                mean_and_stddev(&runs.iter().map(|r| r.ops_s).collect::<Vec<_>>());
            let mib_s = mean_and_stddev(&runs.iter().map(|r| r.mib_s).collect::<Vec<_>>()).0;
            cells.push(Cell {
                at_rest: at_rest.clone(),
                in_transit: in_transit.clone(),
                test: test.mode,
                block: test.block,
                readahead,
                runs,
                ops_s,
                ops_s_stddev,
                mib_s,
                pct_of_best_extreme: 0.0,
                pct_of_baseline: 0.0,
            });
        }
        drop(cluster);
    }
    compare(&mut cells, &configs[0], &args.readahead);
    print_table(&cells);
    print_verdict(&cells, &configs);
    if let Some(path) = &args.fresh.json {
        let config = serde_json::json!({
            "seconds_per_cell": seconds,
            "file_size": file_size,
            "repeat": args.repeat,
            "readahead": args.readahead,
        });
        write_json(path, "fs", config, &cells)?;
    }
    Ok(())
}

/// The extremes of the readahead settings given: none, and the largest fixed size.
fn extremes(readahead: &[String]) -> Vec<String> {
    let fixed = readahead
        .iter()
        .filter_map(|ra| match crate::files::parse_readahead(ra) {
            Ok(fs::readahead::Readahead::Fixed(bytes)) => Some((bytes, ra.clone())),
            _ => None,
        })
        .max();
    let none = readahead.iter().find(|ra| ra.as_str() == "0").cloned();
    none.into_iter().chain(fixed.map(|(_, ra)| ra)).collect()
}

fn compare(cells: &mut [Cell], baseline: &(String, String), readahead: &[String]) {
    let extremes = extremes(readahead);
    let snapshot = cells.to_vec();
    for cell in cells.iter_mut() {
        let best = snapshot
            .iter()
            .filter(|c| {
                (&c.at_rest, &c.in_transit, c.test) == (&cell.at_rest, &cell.in_transit, cell.test)
            })
            .filter(|c| extremes.contains(&c.readahead))
            .map(|c| c.ops_s)
            .fold(0.0, f64::max);
        cell.pct_of_best_extreme = percent_of(cell.ops_s, best);
        let base = snapshot
            .iter()
            .find(|c| {
                (&c.at_rest, &c.in_transit) == (&baseline.0, &baseline.1)
                    && (c.test, &c.readahead) == (cell.test, &cell.readahead)
            })
            .map_or(0.0, |c| c.ops_s);
        cell.pct_of_baseline = percent_of(cell.ops_s, base);
    }
}

fn print_table(cells: &[Cell]) {
    println!();
    println!(
        "{:<6} {:>3} {:<6} {:<12} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "test",
        "bs",
        "ra",
        "at-rest/wire",
        "ops/s",
        "±",
        "MiB/s",
        "avg ms",
        "p99 ms",
        "% extreme",
        "% base",
        "CPU ms/op"
    );
    for c in cells {
        let mean =
            |f: fn(&Run) -> f64| c.runs.iter().map(f).sum::<f64>() / c.runs.len().max(1) as f64;
        println!(
            "{:<6} {:>3} {:<6} {:<12} {:>9.0} {:>8.0} {:>9.1} {:>9.2} {:>9.2} {:>9} {:>9.0}% {:>10.3}",
            c.test,
            size_label(c.block),
            c.readahead,
            format!("{}/{}", c.at_rest, c.in_transit),
            c.ops_s,
            c.ops_s_stddev,
            c.mib_s,
            mean(|r| r.lat_avg_ms),
            mean(|r| r.lat_p99_ms),
            // Without the extremes measured there is nothing to compare against.
            if c.pct_of_best_extreme > 0.0 {
                format!("{:.0}%", c.pct_of_best_extreme)
            } else {
                "-".into()
            },
            c.pct_of_baseline,
            mean(|r| r.cluster_cpu_ms_per_op + r.mount_cpu_ms_per_op),
        );
    }
}

/// One line per configuration: the default readahead against the best extreme, for both
/// read patterns; and the default configuration against the baseline.
fn print_verdict(cells: &[Cell], configs: &[(String, String)]) {
    println!();
    for (at_rest, in_transit) in configs {
        let find = |test: &str| {
            cells.iter().find(|c| {
                (&c.at_rest, &c.in_transit, c.test, c.readahead.as_str())
                    == (at_rest, in_transit, test, "auto")
            })
        };
        let Some((seq, rnd)) = find("seqrd").zip(find("rndrd")) else {
            continue;
        };
        let against = format!(
            "against {}/{}: {:.0} % and {:.0} %",
            configs[0].0, configs[0].1, seq.pct_of_baseline, rnd.pct_of_baseline
        );
        if seq.pct_of_best_extreme > 0.0 {
            println!(
                "{at_rest}/{in_transit}, readahead auto: sequential 1M reads at {:.0} % and random \
                 4K reads at {:.0} % of the best extreme (goal: 90 % or more, both); {against}",
                seq.pct_of_best_extreme, rnd.pct_of_best_extreme
            );
        } else {
            println!("{at_rest}/{in_transit}, readahead auto: sequential 1M and random 4K reads {against}");
        }
    }
}
