//! `coffer bench latency`: where the time of one synchronous 4 KiB write, and of one 4 KiB
//! read, goes, against the disk's own.
//!
//! First the disk: 4 KiB O_DIRECT writes at random offsets of a file in the bench directory,
//! each followed by fdatasync, as fio's `--direct=1 --fdatasync=1` does, then 4 KiB O_DIRECT
//! reads of each of its blocks at most once, in a random order. Then, per configuration, a
//! fresh cluster and one client writing 4 KiB at random offsets of 4 MiB objects, one write
//! at a time (an image's synchronous writes); then the objects written whole and read 4 KiB
//! at a time, each block at most once in a random order, so that no read finds its block in
//! the OSD's read cache (as a random read of an image larger than the cache mostly does
//! not). The daemons' own histograms (docs/metrics.md), read before and after, split each
//! operation's time into
//! stages:
//!
//! ```text
//!  client round trip  ─┬─ client and messenger, both ways
//!                      └─ OSD write as primary (arrival to reply) ─┬─ store apply, its own copy
//!                                                                  └─ replicas: hop, their apply, hop
//!  store apply ── its group commit: small writes, write-ahead log record and sync, metadata
//!
//!  client round trip  ─┬─ client and messenger, both ways (and the chunk opened, if edge sealed)
//!                      └─ OSD read as primary (arrival to reply): metadata, the data device
//! ```
//!
//! The store's figures are over every OSD, primary and replicas alike.

use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use serde::Serialize;

use super::fresh::{clean_default_pool, fresh_config, FreshArgs, FreshCluster};
use super::report::{histogram, print_header, write_json, LatencyUs};

const BLOCK: u64 = 4096;
/// The file the disk is measured on, and each object the client writes into.
const SPAN_BYTES: u64 = 4 << 20;
/// Objects the client spreads its writes over.
const OBJECTS: u64 = 16;

#[derive(clap::Args)]
pub struct LatencyArgs {
    #[command(flatten)]
    fresh: FreshArgs,
    /// Configurations as AT-REST/IN-TRANSIT, comma-separated (as `coffer bench matrix`).
    #[arg(long, value_delimiter = ',', default_value = "none/crc,edge/secure")]
    configs: Vec<String>,
}

/// Mean time of one event of a histogram the daemons keep, from its sum and count.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Stage {
    events: f64,
    mean_us: f64,
}

#[derive(Debug, Serialize)]
struct Cell {
    config: String,
    writes: u64,
    client: LatencyUs,
    osd_write: Stage,
    /// As primary, a replicated group from its send to one replica until that replica's
    /// answer; and the replica's own part of it.
    replication: Stage,
    replica: Stage,
    store_apply: Stage,
    store_commit: Stage,
    disk_write_and_sync: LatencyUs,
    reads: u64,
    client_read: LatencyUs,
    osd_read: Stage,
    /// Bytes the OSDs' read caches served and did not, over the reads.
    cache_hit_bytes: f64,
    cache_miss_bytes: f64,
    disk_read: LatencyUs,
}

/// The disk's 4 KiB O_DIRECT write followed by fdatasync, for `seconds`, on a file laid out
/// first (so no write changes the file's extents); then its 4 KiB O_DIRECT read of every
/// block of a file as large as the cluster's objects once, for as long (or until done).
fn disk_anchor(dir: &Path, seconds: f64) -> Result<(Histogram<u64>, Histogram<u64>), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("latency-anchor-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let measured = (|| {
        let zeros = store::AlignedBuf::zeroed((OBJECTS * SPAN_BYTES / BLOCK) as usize);
        file.write_all_at(&zeros, 0)?;
        file.sync_all()?;
        let mut block = store::AlignedBuf::zeroed(1);
        let mut offsets = Offsets::new(0x9e37_79b9);
        // Times `op` until `seconds` pass or it says there is no more to do.
        let timed = |op: &mut dyn FnMut() -> std::io::Result<bool>| {
            let mut hist = histogram();
            let deadline = Instant::now() + Duration::from_secs_f64(seconds);
            while Instant::now() < deadline {
                let started = Instant::now();
                if !op()? {
                    break;
                }
                hist.record(started.elapsed().as_nanos() as u64)
                    .map_err(std::io::Error::other)?;
            }
            Ok::<_, std::io::Error>(hist)
        };
        let writes = timed(&mut || {
            block[0] = block[0].wrapping_add(1);
            file.write_all_at(&block, offsets.next_block())?;
            file.sync_data()?;
            Ok(true)
        })?;
        // Every block of the file once, as the cluster's reads below.
        let mut blocks = offsets.every_block_once().into_iter();
        let reads = timed(&mut || match blocks.next() {
            Some((n, offset)) => {
                file.read_exact_at(&mut block, n * SPAN_BYTES + offset)?;
                Ok(true)
            }
            None => Ok(false),
        })?;
        Ok::<_, std::io::Error>((writes, reads))
    })();
    let _ = std::fs::remove_file(&path);
    measured.map_err(|e| format!("measuring the disk on {}: {e}", path.display()))
}

/// Random 4 KiB-aligned offsets within `SPAN_BYTES` (xorshift: the bench needs no more).
struct Offsets(u64);

impl Offsets {
    fn new(seed: u64) -> Offsets {
        Offsets(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn next_block(&mut self) -> u64 {
        self.next() % (SPAN_BYTES / BLOCK) * BLOCK
    }

    /// Every block of `OBJECTS` objects once, as (object, offset), in a random order.
    fn every_block_once(&mut self) -> Vec<(u64, u64)> {
        let per_object = SPAN_BYTES / BLOCK;
        let mut blocks: Vec<(u64, u64)> = (0..OBJECTS * per_object)
            .map(|n| (n / per_object, n % per_object * BLOCK))
            .collect();
        for i in (1..blocks.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            blocks.swap(i, j);
        }
        blocks
    }
}

/// The text a daemon's metrics endpoint serves.
fn scrape(addr: &str) -> Result<String, String> {
    let fail = |e: std::io::Error| format!("reading metrics from {addr}: {e}");
    let mut stream = std::net::TcpStream::connect(addr).map_err(fail)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(fail)?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(fail)?;
    let mut text = String::new();
    stream.read_to_string(&mut text).map_err(fail)?;
    Ok(text)
}

/// The sum over every series of `name` (labels ignored, unless `label` is given and the
/// series must carry it) in a scrape.
fn series_sum(text: &str, name: &str, label: Option<&str>) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
            let wanted = metric == name && label.is_none_or(|l| labels.contains(l));
            wanted.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// Sum and count of one histogram over every OSD.
#[derive(Clone, Copy, Default)]
struct Totals {
    osd_write: (f64, f64),
    replication: (f64, f64),
    replica: (f64, f64),
    store_apply: (f64, f64),
    store_commit: (f64, f64),
    osd_read: (f64, f64),
    /// Bytes the read caches served, and did not.
    cache: (f64, f64),
}

fn totals(osds: &[String]) -> Result<Totals, String> {
    let mut totals = Totals::default();
    for addr in osds {
        let text = scrape(addr)?;
        let pair = |name: &str, label: Option<&str>| {
            (
                series_sum(&text, &format!("{name}_sum"), label),
                series_sum(&text, &format!("{name}_count"), label),
            )
        };
        let add = |to: &mut (f64, f64), (sum, count): (f64, f64)| {
            to.0 += sum;
            to.1 += count;
        };
        add(
            &mut totals.osd_write,
            pair("coffer_osd_op_duration_seconds", Some("kind=\"write\"")),
        );
        add(
            &mut totals.replication,
            pair("coffer_osd_replication_duration_seconds", None),
        );
        add(
            &mut totals.replica,
            pair("coffer_osd_replica_duration_seconds", None),
        );
        add(
            &mut totals.store_apply,
            pair("coffer_store_apply_duration_seconds", None),
        );
        add(
            &mut totals.store_commit,
            pair("coffer_store_commit_duration_seconds", None),
        );
        add(
            &mut totals.osd_read,
            pair("coffer_osd_op_duration_seconds", Some("kind=\"read\"")),
        );
        add(
            &mut totals.cache,
            (
                series_sum(&text, "coffer_store_cache_hit_bytes_total", None),
                series_sum(&text, "coffer_store_cache_miss_bytes_total", None),
            ),
        );
    }
    Ok(totals)
}

fn stage(before: (f64, f64), after: (f64, f64)) -> Stage {
    let events = after.1 - before.1;
    Stage {
        events,
        mean_us: if events > 0.0 {
            (after.0 - before.0) / events * 1e6
        } else {
            0.0
        },
    }
}

pub fn run(args: LatencyArgs) -> Result<(), String> {
    args.fresh.place()?;
    let seconds = args.fresh.seconds(false);
    let configs = args
        .configs
        .iter()
        .map(|c| fresh_config(c))
        .collect::<Result<Vec<_>, _>>()?;
    print_header(
        "coffer bench latency",
        &[
            (
                "disk",
                format!(
                    "4 KiB O_DIRECT writes at random offsets of a 4 MiB file in {}, each \
                     followed by fdatasync, for {seconds} s",
                    args.fresh.dir.display()
                ),
            ),
            (
                "cluster",
                format!(
                    "fresh `coffer up` per configuration: 1 monitor, {} OSDs (pool size {})",
                    args.fresh.osds,
                    args.fresh.osds.clamp(1, 3)
                ),
            ),
            (
                "load",
                format!(
                    "one client, one 4 KiB write at a time at random offsets of {OBJECTS} \
                     objects of 4 MiB, for {seconds} s; then the objects written whole and \
                     one 4 KiB read at a time, each block at most once in a random order, for \
                     {seconds} s; stages from the OSDs' histograms"
                ),
            ),
        ],
    );
    let (disk_writes, disk_reads) = disk_anchor(&args.fresh.dir, seconds)?;
    let (disk, disk_read) = (LatencyUs::of(&disk_writes), LatencyUs::of(&disk_reads));
    println!(
        "disk: a 4 KiB write and its fdatasync take {:.0} us (mean), {:.0} us (p50); a 4 KiB \
         read {:.0} us (mean), {:.0} us (p50)",
        disk.mean, disk.p50, disk_read.mean, disk_read.p50
    );
    let runtime = crate::daemon::runtime()?;
    let mut cells = Vec::new();
    for (at_rest, in_transit) in &configs {
        let label = format!("{at_rest}/{in_transit}");
        let cluster = FreshCluster::for_bench("latency", &args.fresh, at_rest, in_transit)?;
        let conf = cluster.conf()?;
        let osds: Vec<String> = conf
            .metrics
            .iter()
            .filter(|(entity, _)| entity.starts_with("osd."))
            .map(|(_, addr)| addr.clone())
            .collect();
        if osds.is_empty() {
            return Err(format!(
                "{}: the OSDs serve no metrics, so the stages cannot be read",
                cluster.conf_path().display()
            ));
        }
        let (writes, client, [before, after], (reads, client_read), [before_reads, after_reads]) =
            runtime.block_on(async {
                let pool = clean_default_pool(&conf).await?;
                let data = Bytes::from(vec![0x5a; BLOCK as usize]);
                let mut offsets = Offsets::new(0x2545_f491);
                for object in 0..OBJECTS {
                    pool.write(
                        &format!("latency-{object}"),
                        SPAN_BYTES - BLOCK,
                        data.clone(),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                }
                let before = totals(&osds)?;
                let mut hist = histogram();
                let mut writes = 0u64;
                let deadline = Instant::now() + Duration::from_secs_f64(seconds);
                while Instant::now() < deadline {
                    let object = format!("latency-{}", offsets.next() % OBJECTS);
                    let started = Instant::now();
                    pool.write(&object, offsets.next_block(), data.clone())
                        .await
                        .map_err(|e| e.to_string())?;
                    hist.record(started.elapsed().as_nanos() as u64)
                        .map_err(|e| e.to_string())?;
                    writes += 1;
                }
                let after = totals(&osds)?;
                let stamped: Vec<Bytes> = (0..OBJECTS).map(stamped).collect();
                for (object, bytes) in stamped.iter().enumerate() {
                    pool.write(&format!("latency-{object}"), 0, bytes.clone())
                        .await
                        .map_err(|e| e.to_string())?;
                }
                let before_reads = totals(&osds)?;
                let mut read_hist = histogram();
                let deadline = Instant::now() + Duration::from_secs_f64(seconds);
                for (object, offset) in offsets.every_block_once() {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let started = Instant::now();
                    let read = pool
                        .read(&format!("latency-{object}"), offset, BLOCK)
                        .await
                        .map_err(|e| e.to_string())?;
                    read_hist
                        .record(started.elapsed().as_nanos() as u64)
                        .map_err(|e| e.to_string())?;
                    let at = offset as usize;
                    if read[..] != stamped[object as usize][at..at + BLOCK as usize] {
                        return Err(format!("latency-{object} at {offset} read back altered"));
                    }
                }
                let after_reads = totals(&osds)?;
                Ok::<_, String>((
                    writes,
                    LatencyUs::of(&hist),
                    [before, after],
                    (read_hist.len(), LatencyUs::of(&read_hist)),
                    [before_reads, after_reads],
                ))
            })?;
        drop(cluster);
        let cell = Cell {
            config: label,
            writes,
            client,
            osd_write: stage(before.osd_write, after.osd_write),
            replication: stage(before.replication, after.replication),
            replica: stage(before.replica, after.replica),
            store_apply: stage(before.store_apply, after.store_apply),
            store_commit: stage(before.store_commit, after.store_commit),
            disk_write_and_sync: disk,
            reads,
            client_read,
            osd_read: stage(before_reads.osd_read, after_reads.osd_read),
            cache_hit_bytes: after_reads.cache.0 - before_reads.cache.0,
            cache_miss_bytes: after_reads.cache.1 - before_reads.cache.1,
            disk_read,
        };
        print_cell(&cell);
        cells.push(cell);
    }
    if let Some(path) = &args.fresh.json {
        write_json(
            path,
            "latency",
            serde_json::json!({ "seconds": seconds, "osds": args.fresh.osds }),
            &cells,
        )?;
    }
    Ok(())
}

fn print_cell(cell: &Cell) {
    let disk = cell.disk_write_and_sync.mean;
    println!(
        "\n{}: {} writes, one at a time; mean of each stage, and its multiple of the disk's write and fdatasync ({disk:.0} us)",
        cell.config, cell.writes
    );
    let rows = [
        (
            "client: the write's round trip",
            cell.client.mean,
            cell.writes as f64,
        ),
        (
            "OSD: a write as primary, arrival to reply",
            cell.osd_write.mean_us,
            cell.osd_write.events,
        ),
        (
            "OSD: a replica's answer, primary's send to it",
            cell.replication.mean_us,
            cell.replication.events,
        ),
        (
            "OSD: a replica's part, handling to reply",
            cell.replica.mean_us,
            cell.replica.events,
        ),
        (
            "store: a transaction applied (every OSD)",
            cell.store_apply.mean_us,
            cell.store_apply.events,
        ),
        (
            "store: a group commit (every OSD)",
            cell.store_commit.mean_us,
            cell.store_commit.events,
        ),
    ];
    print_stages(&rows, disk);
    println!(
        "client p50 {:.0} us, p99 {:.0} us",
        cell.client.p50, cell.client.p99
    );
    let disk_read = cell.disk_read.mean;
    println!(
        "\n{}: {} reads, one at a time, each block at most once; mean of each stage, and its multiple of the disk's read ({disk_read:.0} us)",
        cell.config, cell.reads
    );
    let rows = [
        (
            "client: the read's round trip",
            cell.client_read.mean,
            cell.reads as f64,
        ),
        (
            "OSD: a read as primary, arrival to reply",
            cell.osd_read.mean_us,
            cell.osd_read.events,
        ),
    ];
    print_stages(&rows, disk_read);
    let cached = cell.cache_hit_bytes + cell.cache_miss_bytes;
    println!(
        "client p50 {:.0} us, p99 {:.0} us; the OSDs' read caches served {:.0} % of the bytes read",
        cell.client_read.p50,
        cell.client_read.p99,
        if cached > 0.0 {
            cell.cache_hit_bytes / cached * 100.0
        } else {
            0.0
        }
    );
}

/// Object `object`'s bytes for the reads: each block begins with the object's number and
/// its own offset, so a read of the wrong block does not pass for the right one.
fn stamped(object: u64) -> Bytes {
    let mut bytes = vec![0xa5; SPAN_BYTES as usize];
    for (n, block) in bytes.chunks_exact_mut(BLOCK as usize).enumerate() {
        block[..8].copy_from_slice(&object.to_be_bytes());
        block[8..16].copy_from_slice(&(n as u64 * BLOCK).to_be_bytes());
    }
    Bytes::from(bytes)
}

/// One line per stage: its events, its mean and that mean as a multiple of the disk's.
fn print_stages(rows: &[(&str, f64, f64)], disk_us: f64) {
    let width = rows.iter().map(|(name, ..)| name.len()).max().unwrap_or(0);
    println!(
        "{:<width$} {:>9} {:>9} {:>8}",
        "stage", "events", "mean us", "x disk"
    );
    for (name, mean, events) in rows {
        println!(
            "{name:<width$} {events:>9.0} {mean:>9.0} {:>8.2}",
            mean / disk_us.max(1.0)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_summed_over_labels_and_filtered_by_one() {
        let text = "# HELP x\n\
                    coffer_osd_op_duration_seconds_sum{kind=\"write\"} 1.5\n\
                    coffer_osd_op_duration_seconds_sum{kind=\"read\"} 9\n\
                    coffer_store_apply_duration_seconds_count 4\n\
                    coffer_store_apply_duration_seconds_count_extra 7\n";
        let write = Some("kind=\"write\"");
        assert_eq!(
            series_sum(text, "coffer_osd_op_duration_seconds_sum", write),
            1.5
        );
        assert_eq!(
            series_sum(text, "coffer_osd_op_duration_seconds_sum", None),
            10.5
        );
        assert_eq!(
            series_sum(text, "coffer_store_apply_duration_seconds_count", None),
            4.0
        );
        let mean = stage((1.0, 10.0), (1.5, 20.0));
        assert!((mean.mean_us - 50_000.0).abs() < 1e-6 && mean.events == 10.0);
    }
}
