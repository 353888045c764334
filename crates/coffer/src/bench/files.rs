//! `coffer bench fs`: the public file-system study's shape on Coffer's own mount, through
//! sysbench's `fileio` test itself (Debian's sysbench): one thread, sequential 1 MiB and
//! random 4 KiB reads and writes of one file, with O_DIRECT so every read reaches the mount
//! (not the kernel's page cache) and the mount's readahead is what is measured. Reads run
//! with each readahead setting (`auto` against the extremes `0` and a fixed 8 MiB, and 4 KiB),
//! on a fresh cluster per encryption configuration (none/crc against the default:
//! edge-sealed data, gcm at rest, secure links). A fresh mount per cell, so no cell reads
//! what the one before fetched.
//!
//! With `--directory`, the same cells run in a file system mounted there instead (CephFS
//! through ceph-fuse from `scripts/peer-ceph up --cephfs`, another Coffer mount), with that
//! mount's own readahead and caches, and the CPU of the processes `--client-pid` and
//! `--cluster-pid` name; the bench's file is made in a directory of its own there and
//! removed at the end.

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
    /// Measures the file system mounted at this directory instead of a fresh cluster's
    /// (CephFS through ceph-fuse, another Coffer mount), as it is mounted: one
    /// configuration, the mount's own readahead.
    #[arg(long, conflicts_with_all = ["configs", "readahead"])]
    directory: Option<PathBuf>,
    /// The --directory configuration's name in the table [default: the directory].
    #[arg(long, requires = "directory")]
    label: Option<String>,
    /// The --directory mount's client processes (ceph-fuse), comma-separated pids: their
    /// CPU is the mount's part of "CPU ms/op".
    #[arg(long, value_delimiter = ',', requires = "directory")]
    client_pid: Vec<u32>,
    /// The processes of the cluster behind --directory (monitors, OSDs, metadata
    /// servers), comma-separated pids: the cluster's part of "CPU ms/op".
    #[arg(long, value_delimiter = ',', requires = "directory")]
    cluster_pid: Vec<u32>,
}

/// The readahead column of a --directory cell: whatever the mount does.
const AS_MOUNTED: &str = "mount";

/// One sysbench test: its mode, block size, and whether it reads.
#[derive(Clone, Copy)]
struct Test {
    mode: &'static str,
    block: u64,
    read: bool,
}

/// The sequential write last: sysbench's `seqwr` truncates the file and writes it again
/// from the start, so a cell after it would find the file only as long as that write got.
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
        mode: "rndwr",
        block: 4096,
        read: false,
    },
    Test {
        mode: "seqwr",
        block: MIB,
        read: false,
    },
];

#[derive(Clone, Debug, Serialize)]
struct Cell {
    /// AT-REST/IN-TRANSIT of a fresh cluster, or the --directory's label.
    config: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    at_rest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    in_transit: Option<String>,
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
    let seconds = args
        .fresh
        .seconds
        .unwrap_or(if args.quick { 5.0 } else { 15.0 });
    let file_size = args
        .file_size
        .unwrap_or(if args.quick { 256 * MIB } else { 2048 * MIB });
    let cells = match &args.directory {
        Some(directory) => run_directory(&args, directory, seconds, file_size)?,
        None => run_fresh(&args, seconds, file_size)?,
    };
    let configs: Vec<String> = cells.iter().fold(Vec::new(), |mut seen, cell| {
        if !seen.contains(&cell.config) {
            seen.push(cell.config.clone());
        }
        seen
    });
    let mut cells = cells;
    let readahead = match args.directory {
        Some(_) => vec![AS_MOUNTED.to_string()],
        None => args.readahead.clone(),
    };
    compare(&mut cells, &configs[0], &readahead);
    print_table(&cells);
    print_verdict(&cells, &configs, &readahead[0]);
    if let Some(path) = &args.fresh.json {
        let config = serde_json::json!({
            "seconds_per_cell": seconds,
            "file_size": file_size,
            "repeat": args.repeat,
            "readahead": readahead,
            "directory": args.directory,
            "client_pids": args.client_pid,
            "cluster_pids": args.cluster_pid,
        });
        write_json(path, "fs", config, &cells)?;
    }
    Ok(())
}

fn workload(file_size: u64, reads: &str, seconds: f64, repeat: usize) -> String {
    format!(
        "sysbench fileio, 1 thread, one {} file, O_DIRECT, sequential 1M and random 4K reads \
         ({reads}) and writes (fsync every 100), {seconds} s per cell, {repeat} run(s)",
        size_label(file_size)
    )
}

/// Every configuration's cells on a fresh cluster of its own, a fresh mount per cell.
fn run_fresh(args: &FsArgs, seconds: f64, file_size: u64) -> Result<Vec<Cell>, String> {
    let configs = configs(args)?;
    print_header(
        "coffer bench fs",
        &[
            (
                "configurations",
                configs
                    .iter()
                    .map(|(r, t)| format!("{r}/{t}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            (
                "workload",
                workload(
                    file_size,
                    &format!("readahead {}; writes with auto", args.readahead.join(", ")),
                    seconds,
                    args.repeat,
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
            prepare(&mount.dir, file_size)?;
        }
        let mut plan: Vec<(Test, String)> = Vec::new();
        for test in TESTS {
            if test.read {
                plan.extend(args.readahead.iter().map(|ra| (test, ra.clone())));
            } else {
                plan.push((test, "auto".into()));
            }
        }
        let config = format!("{at_rest}/{in_transit}");
        for (test, readahead) in plan {
            let mut runs = Vec::new();
            for _ in 0..args.repeat {
                let mount = CellMount::start(&cluster, &mountpoint, &readahead)?;
                let cpu = || {
                    (
                        cluster.cpu_seconds() + cluster.daemon_cpu_seconds("mds.a"),
                        mount.cpu_seconds(),
                    )
                };
                runs.push(measure(
                    &mount.dir, test, seconds, file_size, &cpu, &config, &readahead,
                )?);
            }
            cells.push(Cell::of(
                config.clone(),
                Some((at_rest.clone(), in_transit.clone())),
                test,
                readahead,
                runs,
            ));
        }
        drop(cluster);
    }
    Ok(cells)
}

/// A directory of the bench's own in the --directory file system, removed with what
/// sysbench made in it when dropped.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!(
                "coffer bench fs: could not remove {}: {e}",
                self.0.display()
            );
        }
    }
}

/// The cells in the file system mounted at `directory`, as it is mounted.
fn run_directory(
    args: &FsArgs,
    directory: &Path,
    seconds: f64,
    file_size: u64,
) -> Result<Vec<Cell>, String> {
    if !directory.is_dir() {
        return Err(format!(
            "--directory {}: not a directory (mount the file system there first)",
            directory.display()
        ));
    }
    if let Some(pid) = args
        .client_pid
        .iter()
        .chain(&args.cluster_pid)
        .find(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    {
        return Err(format!(
            "pid {pid}: no such process (--client-pid, --cluster-pid)"
        ));
    }
    let label = args
        .label
        .clone()
        .unwrap_or_else(|| directory.display().to_string());
    let counted = if args.client_pid.is_empty() && args.cluster_pid.is_empty() {
        "its CPU is not counted (--client-pid, --cluster-pid)".to_string()
    } else {
        format!(
            "CPU of its client (pids {:?}) and of its cluster (pids {:?})",
            args.client_pid, args.cluster_pid
        )
    };
    print_header(
        "coffer bench fs",
        &[
            (
                "configurations",
                format!(
                    "{label}: the file system mounted at {}; {counted}",
                    directory.display()
                ),
            ),
            (
                "workload",
                workload(file_size, "the mount's own readahead", seconds, args.repeat),
            ),
        ],
    );
    let path = directory.join(format!("coffer-bench-fs-{}", std::process::id()));
    std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let work = WorkDir(path);
    prepare(&work.0, file_size)?;
    let sum = |pids: &[u32]| pids.iter().map(|&pid| pid_cpu_seconds(pid)).sum::<f64>();
    let cpu = || (sum(&args.cluster_pid), sum(&args.client_pid));
    let mut cells = Vec::new();
    for test in TESTS {
        let runs = (0..args.repeat)
            .map(|_| measure(&work.0, test, seconds, file_size, &cpu, &label, AS_MOUNTED))
            .collect::<Result<Vec<_>, _>>()?;
        cells.push(Cell::of(label.clone(), None, test, AS_MOUNTED.into(), runs));
    }
    Ok(cells)
}

/// sysbench's test file, made in `dir`.
fn prepare(dir: &Path, file_size: u64) -> Result<(), String> {
    let mut prepare = common_args(file_size);
    prepare.push("prepare".into());
    sysbench(dir, &prepare).map(drop)
}

/// One sysbench run of `test` on the file prepared in `dir`; `cpu` gives the cluster's
/// and the mount's CPU seconds so far.
fn measure(
    dir: &Path,
    test: Test,
    seconds: f64,
    file_size: u64,
    cpu: &dyn Fn() -> (f64, f64),
    config: &str,
    readahead: &str,
) -> Result<Run, String> {
    let (cluster_cpu, mount_cpu) = cpu();
    let mut run = common_args(file_size);
    run.extend([
        format!("--file-test-mode={}", test.mode),
        format!("--file-block-size={}", test.block),
        format!("--time={seconds}"),
        "--events=0".into(),
        "run".into(),
    ]);
    let report = sysbench(dir, &run)?;
    let (cluster_used, mount_used) = {
        let (cluster_now, mount_now) = cpu();
        (cluster_now - cluster_cpu, mount_now - mount_cpu)
    };
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
    let one = Run {
        ops_s,
        mib_s,
        lat_avg_ms: figure(&report, "avg:"),
        lat_p99_ms: figure(&report, "99th percentile:"),
        cluster_cpu_ms_per_op: 1000.0 * cluster_used / ops,
        mount_cpu_ms_per_op: 1000.0 * mount_used / ops,
    };
    eprintln!(
        "{config:<12} {} {:>3} readahead {readahead:<5}: {:>8.0} ops/s {:>8.1} MiB/s",
        test.mode,
        size_label(test.block),
        one.ops_s,
        one.mib_s
    );
    Ok(one)
}

impl Cell {
    fn of(
        config: String,
        parts: Option<(String, String)>,
        test: Test,
        readahead: String,
        runs: Vec<Run>,
    ) -> Cell {
        let (ops_s, ops_s_stddev) =
            mean_and_stddev(&runs.iter().map(|r| r.ops_s).collect::<Vec<_>>());
        let mib_s = mean_and_stddev(&runs.iter().map(|r| r.mib_s).collect::<Vec<_>>()).0;
        let (at_rest, in_transit) = parts.unzip();
        Cell {
            config,
            at_rest,
            in_transit,
            test: test.mode,
            block: test.block,
            readahead,
            runs,
            ops_s,
            ops_s_stddev,
            mib_s,
            pct_of_best_extreme: 0.0,
            pct_of_baseline: 0.0,
        }
    }
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

fn compare(cells: &mut [Cell], baseline: &str, readahead: &[String]) {
    let extremes = extremes(readahead);
    let snapshot = cells.to_vec();
    for cell in cells.iter_mut() {
        let best = snapshot
            .iter()
            .filter(|c| (&c.config, c.test) == (&cell.config, cell.test))
            .filter(|c| extremes.contains(&c.readahead))
            .map(|c| c.ops_s)
            .fold(0.0, f64::max);
        cell.pct_of_best_extreme = percent_of(cell.ops_s, best);
        let base = snapshot
            .iter()
            .find(|c| {
                c.config == baseline && (c.test, &c.readahead) == (cell.test, &cell.readahead)
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
        "config",
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
            c.config,
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
/// read patterns; and each configuration against the baseline.
fn print_verdict(cells: &[Cell], configs: &[String], readahead: &str) {
    println!();
    for config in configs {
        let find = |test: &str| {
            cells
                .iter()
                .find(|c| (&c.config, c.test, c.readahead.as_str()) == (config, test, readahead))
        };
        let Some((seq, rnd)) = find("seqrd").zip(find("rndrd")) else {
            continue;
        };
        let against = format!(
            "against {}: {:.0} % and {:.0} %",
            configs[0], seq.pct_of_baseline, rnd.pct_of_baseline
        );
        if seq.pct_of_best_extreme > 0.0 {
            println!(
                "{config}, readahead {readahead}: sequential 1M reads at {:.0} % and random \
                 4K reads at {:.0} % of the best extreme (goal: 90 % or more, both); {against}",
                seq.pct_of_best_extreme, rnd.pct_of_best_extreme
            );
        } else {
            println!(
                "{config}, readahead {readahead}: sequential 1M and random 4K reads {against}"
            );
        }
    }
}
