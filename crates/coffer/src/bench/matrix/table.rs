//! The matrix as a terminal table shaped like the published one (MISSION.md): rows are client
//! shape x IO size, columns are configurations, each cell is "percent read / percent write"
//! of the baseline; then every cell's absolute figures.

use super::Cell;
use crate::bench::report::size_label;

fn find<'a>(
    cells: &'a [Cell],
    config: &str,
    shape: &str,
    io_size: u64,
    op: &str,
) -> Option<&'a Cell> {
    cells
        .iter()
        .find(|c| c.config == config && c.shape == shape && c.io_size == io_size && c.op == op)
}

fn pct(cell: Option<&Cell>) -> String {
    match cell {
        Some(c) if c.repeats > 1 => {
            format!("{:.1}±{:.1}", c.pct_of_baseline, c.pct_of_baseline_stddev)
        }
        Some(c) => format!("{:.1}", c.pct_of_baseline),
        None => "-".into(),
    }
}

/// Rows in the order they were measured: (shape, clients, qd, IO size).
fn rows(cells: &[Cell]) -> Vec<(&'static str, usize, usize, u64)> {
    let mut rows = Vec::new();
    for c in cells {
        let row = (c.shape, c.clients, c.qd, c.io_size);
        if !rows.contains(&row) {
            rows.push(row);
        }
    }
    rows
}

pub fn print(cells: &[Cell], configs: &[&str]) {
    let Some((baseline, others)) = configs.split_first() else {
        return;
    };
    let repeats = cells.first().map_or(1, |c| c.repeats);
    println!();
    println!(
        "Percent of {baseline} measured in the same run, read / write{}:",
        if repeats > 1 {
            format!(" (mean±stddev of {repeats} repetitions)")
        } else {
            String::new()
        }
    );
    let width = others
        .iter()
        .map(|c| c.len())
        .max()
        .unwrap_or(0)
        .max(if repeats > 1 { 25 } else { 15 });
    print!("{:<26}", "clients / IO");
    for config in others {
        print!(" {config:>width$}");
    }
    println!();
    for (shape, clients, qd, io_size) in rows(cells) {
        print!(
            "{:<26}",
            format!("{shape} ({clients}x QD {qd}) {}", size_label(io_size))
        );
        for config in others {
            let read = pct(find(cells, config, shape, io_size, "read"));
            let write = pct(find(cells, config, shape, io_size, "write"));
            print!(" {:>width$}", format!("{read} / {write}"));
        }
        println!();
    }
    println!();
    let cw = cells
        .iter()
        .map(|c| c.config.len())
        .max()
        .unwrap_or(0)
        .max(16);
    println!(
        "{:<cw$} {:<5} {:>3} {:<5} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7} {:>7}",
        "config", "shape", "IO", "op", "IOPS", "MiB/s", "mean us", "p50 us", "p99 us",
        "p99.9 us", "max us", "CPU s/GiB", "s/kIO", "client", "% base"
    );
    for c in cells {
        let cpu = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        println!(
            "{:<cw$} {:<5} {:>3} {:<5} {:>9.0} {:>8.1} {:>8.0} {:>8.0} {:>9.0} {:>9.0} {:>9.0} {:>9} {:>8} {:>6.0}% {:>6.1}%",
            c.config,
            c.shape,
            size_label(c.io_size),
            c.op,
            c.iops,
            c.mib_s,
            c.lat_us.mean,
            c.lat_us.p50,
            c.lat_us.p99,
            c.lat_us.p999,
            c.lat_us.max,
            cpu(c.cpu_s_per_gib),
            cpu(c.cpu_s_per_kio),
            c.client_cpu_pct_of_machine,
            c.pct_of_baseline
        );
    }
    println!(
        "CPU s/GiB and s/kIO: the cluster's daemons per GiB moved and per 1,000 IOs; \
         client: the load generator's CPU as a share of all cores."
    );
    let mut spaces: Vec<(&str, f64)> = Vec::new();
    for c in cells {
        if let Some(space) = c.space_raw_per_byte {
            if !spaces.iter().any(|(config, _)| *config == c.config) {
                spaces.push((&c.config, space));
            }
        }
    }
    for (config, space) in spaces {
        println!("space: {config}: {space:.2} raw bytes per byte of image data");
    }
}
