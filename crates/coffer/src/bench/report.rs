//! What every bench reports: latency percentiles, CPU time of this process, and a
//! description of the machine and the build, so a figure can be traced to where it came
//! from.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies from 1 ns to 100 s with 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("static histogram bounds are valid")
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct LatencyUs {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl LatencyUs {
    pub fn of(h: &Histogram<u64>) -> LatencyUs {
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencyUs {
            mean: h.mean() / 1000.0,
            p50: us(h.value_at_quantile(0.50)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }

    /// Repetitions of one cell merged: the mean of each percentile, and the largest maximum.
    pub fn merge<'a>(all: impl IntoIterator<Item = &'a LatencyUs>) -> LatencyUs {
        let all: Vec<&LatencyUs> = all.into_iter().collect();
        let mean = |f: fn(&LatencyUs) -> f64| {
            mean_and_stddev(&all.iter().map(|l| f(l)).collect::<Vec<f64>>()).0
        };
        LatencyUs {
            mean: mean(|l| l.mean),
            p50: mean(|l| l.p50),
            p99: mean(|l| l.p99),
            p999: mean(|l| l.p999),
            max: all.iter().map(|l| l.max).fold(0.0, f64::max),
        }
    }
}

/// CPU seconds (user + system) this process has used so far, all threads.
pub fn cpu_seconds() -> f64 {
    rusage_seconds(libc::RUSAGE_SELF)
}

/// CPU seconds (user + system) of this process's children and their descendants that have
/// ended and been waited for.
pub fn children_cpu_seconds() -> f64 {
    rusage_seconds(libc::RUSAGE_CHILDREN)
}

fn rusage_seconds(who: libc::c_int) -> f64 {
    // SAFETY: getrusage writes into the struct we pass; both callers pass a valid `who`.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The mean and the sample standard deviation (0 for a single value).
pub fn mean_and_stddev(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = if values.len() > 1 {
        values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, variance.sqrt())
}

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_gib: f64,
    pub cpu: String,
    /// The library the data path's AES-256-GCM runs in on this CPU (`keys::gcm`).
    pub aes_gcm: String,
    /// How glibc's memcpy copies in this process (`crate::memcpy`).
    pub memcpy: String,
    pub commit: String,
    pub date_utc: String,
}

pub fn machine() -> Machine {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_kib: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or_else(|| "unknown".to_string(), |s| s.trim().to_string());
    let run = |cmd: &str, args: &[&str]| {
        std::process::Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    Machine {
        cores: machine_cores(),
        memory_gib: memory_kib / (1024.0 * 1024.0),
        cpu,
        aes_gcm: keys::gcm::Implementation::fastest().to_string(),
        memcpy: match crate::memcpy::tuned() {
            true => "without rep movsb".into(),
            false => "as glibc chooses".into(),
        },
        commit: option_env!("COFFER_COMMIT")
            .map(str::to_string)
            .or_else(|| run("git", &["rev-parse", "--short", "HEAD"]))
            .unwrap_or_else(|| "unknown".into()),
        date_utc: run("date", &["-u", "+%Y-%m-%d %H:%M"]).unwrap_or_else(|| "unknown".into()),
    }
}

pub fn print_header(title: &str, config: &[(&str, String)]) {
    let m = machine();
    println!("== {title}");
    println!(
        "command: {}",
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    println!(
        "machine: {} cores, {:.1} GiB, {}; AES-GCM in {}; memcpy {}; commit {}; {} UTC",
        m.cores, m.memory_gib, m.cpu, m.aes_gcm, m.memcpy, m.commit, m.date_utc
    );
    for (key, value) in config {
        println!("{key}: {value}");
    }
    if let Some(placement) = super::cpus::placement() {
        println!("cpus: {placement}");
    }
}

/// A size as the tables print it: 4K, 4M, 5.5M.
pub fn size_label(bytes: u64) -> String {
    if bytes >= 1 << 20 && !bytes.is_multiple_of(1 << 20) {
        format!("{:.1}M", bytes as f64 / f64::from(1 << 20))
    } else if bytes >= 1 << 20 {
        format!("{}M", bytes >> 20)
    } else {
        format!("{}K", bytes >> 10)
    }
}

/// The machine's online CPUs, wherever this process is pinned (`--client-cpus`).
pub fn machine_cores() -> usize {
    // SAFETY: sysconf(3) with a valid name has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(online).unwrap_or(1).max(1)
}

/// Writes a bench's cells, with the command, machine and configuration, as JSON.
pub fn write_json<T: Serialize>(
    path: &std::path::Path,
    bench: &str,
    config: serde_json::Value,
    cells: &[T],
) -> Result<(), String> {
    let doc = serde_json::json!({
        "bench": bench,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "machine": machine(),
        "cpus": super::cpus::placement(),
        "config": config,
        "cells": cells,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| format!("encoding JSON: {e}"))?;
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("cells written to {}", path.display());
    Ok(())
}

/// What one cell of a cluster bench measured: operations, rates, latency, and the CPU time
/// of the cluster's daemons and of the client (this process).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Rates {
    pub ops: u64,
    pub seconds: f64,
    pub ops_s: f64,
    pub mib_s: f64,
    pub lat_us: LatencyUs,
    /// CPU seconds of the monitor and every OSD during the cell.
    pub cluster_cpu_s: f64,
    pub cluster_cpu_s_per_gib: f64,
    /// CPU seconds of the clients (this process) during the cell.
    pub client_cpu_s: f64,
}

impl Rates {
    pub fn new(
        ops: u64,
        bytes_per_op: u64,
        seconds: f64,
        hist: &Histogram<u64>,
        cluster_cpu_s: f64,
        client_cpu_s: f64,
    ) -> Rates {
        let bytes = (ops * bytes_per_op) as f64;
        let gib = bytes / (1u64 << 30) as f64;
        Rates {
            ops,
            seconds,
            ops_s: ops as f64 / seconds,
            mib_s: bytes / seconds / (1u64 << 20) as f64,
            lat_us: LatencyUs::of(hist),
            cluster_cpu_s,
            cluster_cpu_s_per_gib: if gib > 0.0 { cluster_cpu_s / gib } else { 0.0 },
            client_cpu_s,
        }
    }

    pub fn client_cpu_s_per_gib(&self) -> f64 {
        let gib = self.mib_s * self.seconds / 1024.0;
        if gib > 0.0 {
            self.client_cpu_s / gib
        } else {
            0.0
        }
    }
}

/// `value` as a percent of `baseline` (0 without a baseline).
pub fn percent_of(value: f64, baseline: f64) -> f64 {
    if baseline > 0.0 {
        100.0 * value / baseline
    } else {
        0.0
    }
}

/// The options every one-core bench (`aead`, `ec`) takes: how much each cell processes, the
/// working set it cycles through, the rounds, and where the JSON goes.
#[derive(clap::Args)]
pub struct OneCoreArgs {
    /// MiB each cell processes.
    #[arg(long, default_value_t = 512)]
    pub mib: u64,
    /// MiB of buffers a cell cycles through (larger than the caches, as a write's buffers are).
    #[arg(long, default_value_t = 64)]
    pub working_set_mib: u64,
    /// Rounds; each measures every cell once, and the tables show medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Also write every cell to this file as JSON.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// The median of sorted values (0 for none).
pub fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}
