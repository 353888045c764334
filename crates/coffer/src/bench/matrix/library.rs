//! The library engine of `coffer bench matrix`: each client is a `coffer bench worker`
//! process driving its own image through the block library, exactly as `coffer nbd serve`
//! does, so the "many" shape is several processes with their own connections.

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use block::image::{self, Access, OBJECT_SIZE_DEFAULT};
use block::Image;

use super::worker::WorkerReport;
use super::Measured;
use crate::bench::fresh::connect_admin;
use crate::bench::image::prefill;
use crate::bench::report::{histogram, LatencyUs};

/// The image that the client of the "one" and "sync" shapes drives.
pub const IMAGE_ONE: &str = "bench";

/// The image of client `i` of the "many" shape.
pub fn image_many(i: usize) -> String {
    format!("bench-{i}")
}

/// Creates and fills the images the cells drive, their headers in the default pool and
/// their data in pool `data`: with `one`, the single client's image (`size_bytes`); and
/// one image per client of the "many" shape (`size_bytes / many` each, at least one
/// object). Returns the bytes written.
pub async fn prepare_images(
    conf: &client::Conf,
    size_bytes: u64,
    one: bool,
    many: usize,
    data: &str,
) -> Result<u64, String> {
    let admin = connect_admin(conf).await?;
    let pool = admin
        .pool(crate::up::DEFAULT_POOL)
        .await
        .map_err(|e| e.to_string())?;
    let data = admin.pool(data).await.map_err(|e| e.to_string())?;
    let share = (size_bytes / many.max(1) as u64)
        .div_ceil(OBJECT_SIZE_DEFAULT)
        .max(1)
        * OBJECT_SIZE_DEFAULT;
    let images = one
        .then(|| (IMAGE_ONE.to_string(), size_bytes))
        .into_iter()
        .chain((0..many).map(|i| (image_many(i), share)));
    let mut filled = 0;
    for (name, size) in images {
        image::create_with_data(&pool, &name, size, OBJECT_SIZE_DEFAULT, Some(&data))
            .await
            .map_err(|e| format!("creating image {name}: {e}"))?;
        filled += size;
        let writer = Access::Write {
            purpose: "bench prefill",
            wait_stale: false,
        };
        let disk = Image::open(&pool, &name, writer)
            .await
            .map_err(|e| e.to_string())?;
        prefill(&disk).await?;
        disk.close().await.map_err(|e| e.to_string())?;
    }
    Ok(filled)
}

/// A started worker: its process and the lines it prints.
struct Worker {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A worker still running here is one whose cell failed: it must not outlive the bench.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Worker {
    fn next_line(&mut self, what: &str) -> Result<String, String> {
        match self.lines.next() {
            Some(Ok(line)) => Ok(line),
            _ => Err(format!(
                "a bench worker ended before {what}; its error is above"
            )),
        }
    }
}

/// One cell: one worker process per image in `images`, each with `qd` IOs of `io_size` in
/// flight, started together once all are connected, for `seconds`. The cluster's CPU time
/// (`cluster_cpu_s`) is read just before the start signal and once every worker reported.
pub fn run_cell(
    cluster_cpu_s: &dyn Fn() -> Option<f64>,
    conf_path: &Path,
    images: &[String],
    write: bool,
    io_size: u64,
    qd: usize,
    seconds: f64,
) -> Result<Measured, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut workers = Vec::with_capacity(images.len());
    for image in images {
        let mut command = Command::new(&exe);
        command
            .args(["bench", "worker", "--cluster"])
            .arg(conf_path)
            .args(["--image", image, "--io-size", &io_size.to_string()])
            .args(["--qd", &qd.to_string(), "--seconds", &seconds.to_string()]);
        if write {
            command.arg("--write");
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting a bench worker: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout from a bench worker")?;
        workers.push(Worker {
            child,
            lines: BufReader::new(stdout).lines(),
        });
    }
    for worker in &mut workers {
        let line = worker.next_line("it was ready")?;
        if line != "ready" {
            return Err(format!("a bench worker said {line:?} instead of ready"));
        }
    }
    let cluster_cpu_started = cluster_cpu_s();
    for worker in &mut workers {
        let stdin = worker.child.stdin.as_mut().ok_or("no stdin to a worker")?;
        stdin
            .write_all(b"go\n")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("starting a bench worker: {e}"))?;
    }
    let mut merged = histogram();
    let mut measured = Measured {
        ops: 0,
        seconds: 0.0,
        lat_us: LatencyUs::of(&merged),
        client_cpu_s: 0.0,
        cluster_cpu_s: None,
    };
    for worker in &mut workers {
        let line = worker.next_line("it reported")?;
        let report: WorkerReport =
            serde_json::from_str(&line).map_err(|e| format!("a worker's report: {e}"))?;
        for (value, count) in report.latency_ns {
            merged
                .record_n(value, count)
                .map_err(|e| format!("a worker's latency: {e}"))?;
        }
        measured.ops += report.ops;
        measured.seconds = measured.seconds.max(report.seconds);
        measured.client_cpu_s += report.cpu_s;
    }
    measured.cluster_cpu_s = cluster_cpu_s()
        .zip(cluster_cpu_started)
        .map(|(ended, started)| ended - started);
    for mut worker in workers {
        let status = worker.child.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!(
                "a bench worker failed ({status}); its error is above"
            ));
        }
    }
    measured.lat_us = LatencyUs::of(&merged);
    Ok(measured)
}
