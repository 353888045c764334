//! `coffer bench worker`: one client process of `coffer bench matrix`, so that the "many"
//! shape is several processes, each with its own connections, as the published study ran
//! several fio jobs. It connects, opens its image, says `ready`, waits for `go` on standard
//! input, drives one cell, prints what it measured as one JSON line, and closes the image.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

use block::image::Access;
use block::Image;
use client::Conf;
use serde::{Deserialize, Serialize};

use crate::bench::fresh::connect_admin;
use crate::bench::image::run_cell;
use crate::bench::report::cpu_seconds;

#[derive(clap::Args)]
pub struct WorkerArgs {
    /// The cluster's configuration file.
    #[arg(long)]
    pub cluster: PathBuf,
    /// The image to drive, in the default pool.
    #[arg(long)]
    pub image: String,
    /// Random writes (else random reads).
    #[arg(long)]
    pub write: bool,
    #[arg(long)]
    pub io_size: u64,
    #[arg(long)]
    pub qd: usize,
    #[arg(long)]
    pub seconds: f64,
}

/// What one worker measured between `go` and its last completion.
#[derive(Debug, Serialize, Deserialize)]
pub struct WorkerReport {
    pub ops: u64,
    pub seconds: f64,
    /// This process's CPU seconds over the same time.
    pub cpu_s: f64,
    /// The latency histogram as (nanoseconds, count) pairs, lossless at its precision.
    pub latency_ns: Vec<(u64, u64)>,
}

pub fn run(args: WorkerArgs) -> Result<(), String> {
    let conf = Conf::load(&args.cluster).map_err(|e| e.to_string())?;
    let runtime = crate::daemon::runtime()?;
    runtime.block_on(async {
        let admin = connect_admin(&conf).await?;
        let pool = admin
            .pool(crate::up::DEFAULT_POOL)
            .await
            .map_err(|e| e.to_string())?;
        let access = if args.write {
            Access::Write {
                purpose: "bench worker",
                wait_stale: false,
            }
        } else {
            Access::ReadOnly
        };
        let disk = Image::open(&pool, &args.image, access)
            .await
            .map_err(|e| format!("opening {}: {e}", args.image))?;
        say("ready")?;
        let go = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).map(|_| line)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("reading the start signal: {e}"))?;
        if go.trim() != "go" {
            disk.close().await.map_err(|e| e.to_string())?;
            return Err("the bench stopped before this cell started".into());
        }
        let (cpu_started, started) = (cpu_seconds(), Instant::now());
        let (ops, hist) = run_cell(&disk, args.write, args.io_size, args.qd, args.seconds).await?;
        let report = WorkerReport {
            ops,
            seconds: started.elapsed().as_secs_f64(),
            cpu_s: cpu_seconds() - cpu_started,
            latency_ns: hist
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
        };
        say(&serde_json::to_string(&report).map_err(|e| e.to_string())?)?;
        disk.close().await.map_err(|e| e.to_string())
    })
}

fn say(line: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing to the bench: {e}"))
}
