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
}

/// CPU seconds (user + system) this process has used so far, all threads.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct we pass; RUSAGE_SELF is always valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_gib: f64,
    pub cpu: String,
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
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_gib: memory_kib / (1024.0 * 1024.0),
        cpu,
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
        "machine: {} cores, {:.1} GiB, {}; commit {}; {} UTC",
        m.cores, m.memory_gib, m.cpu, m.commit, m.date_utc
    );
    for (key, value) in config {
        println!("{key}: {value}");
    }
}
