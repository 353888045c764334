//! The fio engine of `coffer bench matrix`: the same cells through an NBD export, driven by
//! fio's nbd engine (libnbd), an independent client. It measures a fresh cluster's export or
//! any other NBD export (`--target`), so another system can be run side by side.

use std::process::Command;

use serde_json::Value;

use super::{Measured, Shape};
use crate::bench::report::{children_cpu_seconds, LatencyUs};

/// Large writes in flight while the export is filled before the cells.
const PREFILL_QD: usize = 16;
const PREFILL_BLOCK_BYTES: u64 = 4 << 20;

fn fio(uri: &str, size_bytes: u64, args: &[String]) -> Result<Value, String> {
    let output = Command::new("fio")
        .args([
            "--name=coffer".to_string(),
            "--ioengine=nbd".into(),
            format!("--uri={uri}"),
            format!("--size={size_bytes}"),
            "--output-format=json".into(),
            "--group_reporting".into(),
        ])
        .args(args)
        .output()
        .map_err(|e| format!("running fio (is it installed? apt-get install fio): {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "fio on {uri} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    // fio may print notes before its JSON document.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = stdout.find('{').map_or("", |start| &stdout[start..]);
    serde_json::from_str(json).map_err(|e| format!("fio's JSON output: {e}"))
}

/// Writes the first `size_bytes` of the export with large sequential writes, so every read
/// of a cell finds stored data.
pub fn prefill(uri: &str, size_bytes: u64) -> Result<(), String> {
    fio(
        uri,
        size_bytes,
        &[
            "--rw=write".into(),
            format!("--bs={PREFILL_BLOCK_BYTES}"),
            format!("--iodepth={PREFILL_QD}"),
        ],
    )
    .map(drop)
}

/// One cell: one fio job (each its own NBD connection) per client of `shape`, each with the
/// shape's queue depth of random IOs of `io_size` in flight over the first `size_bytes` of
/// the export, for `seconds`.
pub fn run_cell(
    cluster_cpu_s: &dyn Fn() -> Option<f64>,
    uri: &str,
    write: bool,
    io_size: u64,
    shape: Shape,
    seconds: f64,
    size_bytes: u64,
) -> Result<Measured, String> {
    let (cpu_started, cluster_cpu_started) = (children_cpu_seconds(), cluster_cpu_s());
    let doc = fio(
        uri,
        size_bytes,
        &[
            format!("--rw={}", if write { "randwrite" } else { "randread" }),
            format!("--bs={io_size}"),
            format!("--iodepth={}", shape.qd),
            format!("--numjobs={}", shape.clients),
            "--time_based".into(),
            format!("--runtime={}ms", (seconds * 1000.0).round().max(1.0) as u64),
            "--lat_percentiles=1".into(),
            "--percentile_list=50:99:99.9".into(),
        ],
    )?;
    let client_cpu_s = children_cpu_seconds() - cpu_started;
    let mut measured = parse_cell(&doc, write, client_cpu_s)?;
    measured.cluster_cpu_s = cluster_cpu_s()
        .zip(cluster_cpu_started)
        .map(|(ended, started)| ended - started);
    Ok(measured)
}

fn parse_cell(doc: &Value, write: bool, client_cpu_s: f64) -> Result<Measured, String> {
    let side = &doc["jobs"][0][if write { "write" } else { "read" }];
    let number = |value: &Value, what: &str| {
        value
            .as_f64()
            .ok_or_else(|| format!("fio's JSON has no {what}"))
    };
    let lat = &side["lat_ns"];
    let percentile = |key: &str| number(&lat["percentile"][key], &format!("lat_ns p{key}"));
    let us = 1e-3;
    Ok(Measured {
        ops: number(&side["total_ios"], "total_ios")? as u64,
        seconds: number(&side["runtime"], "runtime")? / 1000.0,
        lat_us: LatencyUs {
            mean: number(&lat["mean"], "lat_ns mean")? * us,
            p50: percentile("50.000000")? * us,
            p99: percentile("99.000000")? * us,
            p999: percentile("99.900000")? * us,
            max: number(&lat["max"], "lat_ns max")? * us,
        },
        client_cpu_s,
        cluster_cpu_s: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_read_from_fio_json_and_missing_fields_are_named() {
        let doc: Value = serde_json::from_str(
            r#"{"jobs":[{"write":{"total_ios":1000,"runtime":2000,
                "lat_ns":{"mean":1500.0,"max":90000,
                "percentile":{"50.000000":1400,"99.000000":5000,"99.900000":8000}}}}]}"#,
        )
        .expect("json");
        let cell = parse_cell(&doc, true, 0.5).expect("cell");
        assert_eq!(cell.ops, 1000);
        assert!((cell.seconds - 2.0).abs() < 1e-9);
        assert!((cell.lat_us.p999 - 8.0).abs() < 1e-9);
        assert!((cell.lat_us.max - 90.0).abs() < 1e-9);
        let error = parse_cell(&doc, false, 0.5).expect_err("no read side");
        assert!(error.contains("total_ios"), "{error}");
    }
}
