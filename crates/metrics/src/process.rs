//! The process's own figures under the names every Prometheus exporter gives them
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...), read from /proc on
//! each scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

#[derive(Debug)]
pub(crate) struct Process;

/// What /proc/self/stat says, in its own units (clock ticks, pages).
#[derive(Debug, PartialEq)]
struct Stat {
    cpu_ticks: u64,
    threads: u64,
    start_ticks: u64,
    virtual_bytes: u64,
    resident_pages: u64,
}

/// Parses /proc/self/stat. The command name, in parentheses, may hold spaces and
/// parentheses itself, so fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 of proc(5), the state.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: field(14)? + field(15)?,
        threads: field(20)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// Seconds since the epoch at which the system booted (`btime` in /proc/stat).
fn boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

fn open_fds() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

fn max_fds() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given and nothing else.
    let done = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (done == 0).then_some(limit.rlim_cur)
}

fn sysconf(name: libc::c_int) -> Option<u64> {
    // SAFETY: sysconf reads a system constant.
    let value = unsafe { libc::sysconf(name) };
    u64::try_from(value).ok().filter(|v| *v > 0)
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: f64,
) -> std::fmt::Result {
    let metric = encoder.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let stat = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|text| parse_stat(&text));
        let ticks = sysconf(libc::_SC_CLK_TCK);
        let page = sysconf(libc::_SC_PAGESIZE);
        if let (Some(stat), Some(ticks), Some(page)) = (stat, ticks, page) {
            let per_tick = 1.0 / ticks as f64;
            let cpu = encoder.encode_descriptor(
                "process_cpu",
                "CPU time the process has used, user and system",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?;
            ConstCounter::new(stat.cpu_ticks as f64 * per_tick).encode(cpu)?;
            let memory = [
                (
                    "process_resident_memory",
                    "Resident memory",
                    stat.resident_pages * page,
                ),
                (
                    "process_virtual_memory",
                    "Virtual memory",
                    stat.virtual_bytes,
                ),
            ];
            for (name, help, bytes) in memory {
                gauge(&mut encoder, name, help, Some(&Unit::Bytes), bytes as f64)?;
            }
            gauge(
                &mut encoder,
                "process_threads",
                "Threads of the process",
                None,
                stat.threads as f64,
            )?;
            let boot = std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|text| boot_time(&text));
            if let Some(boot) = boot {
                let start = boot as f64 + stat.start_ticks as f64 * per_tick;
                gauge(
                    &mut encoder,
                    "process_start_time",
                    "When the process started, in seconds since the Unix epoch",
                    Some(&Unit::Seconds),
                    start,
                )?;
            }
        }
        let fds = [
            ("process_open_fds", "Open file descriptors", open_fds()),
            (
                "process_max_fds",
                "Most file descriptors the process may open",
                max_fds(),
            ),
        ];
        for (name, help, value) in fds {
            if let Some(value) = value {
                gauge(&mut encoder, name, help, None, value as f64)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let text = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194304 100 0 0 0 30 12 0 0 20 0 \
                    7 0 5000 123456789 2500 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 \
                    1 0 0 0 0 0";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                cpu_ticks: 42,
                threads: 7,
                start_ticks: 5000,
                virtual_bytes: 123_456_789,
                resident_pages: 2500,
            })
        );
        assert_eq!(parse_stat("12 (truncated"), None);
    }

    #[test]
    fn boot_time_is_read_from_its_line() {
        assert_eq!(
            boot_time("cpu 1 2 3\nbtime 1764000000\nprocesses 9\n"),
            Some(1_764_000_000)
        );
        assert_eq!(boot_time("cpu 1 2 3\n"), None);
    }
}
