//! Metrics as an operator's monitoring sees them: every daemon of a `coffer up` cluster
//! passes `promtool check metrics`, Debian's Prometheus scrapes them all with the
//! configuration `coffer up` writes, and after a bounded load of object and NBD writes and
//! reads its queries move as that load says, as does `coffer df`; the OSDs' counts of
//! operations show what an S3 PUT and GET ask of the cluster.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, run_ok, LocalCluster};

/// Objects the load writes, and the size of each.
const OBJECTS: u64 = 8;
const OBJECT_BYTES: u64 = 1 << 20;
/// Bytes the load writes to the NBD export, then reads back.
const NBD_BYTES: u64 = 8 << 20;
/// S3 objects of 64 KiB the gateway's requests are counted over.
const S3_OBJECTS: u32 = 50;
/// How long Prometheus has to show what the load did (it scrapes every 5 s).
const SCRAPED_WITHIN: Duration = Duration::from_secs(60);

/// The body of `GET path` from an HTTP server on loopback.
fn http_get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request sent");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer read");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "{addr}{path}: {head}"
    );
    body.to_string()
}

fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prometheus, as Debian packages it, on the configuration `coffer up` wrote.
struct Prometheus {
    child: Child,
    addr: String,
}

impl Prometheus {
    fn start(config: &Path, data: &Path) -> Prometheus {
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(data.with_extension("log")).expect("prometheus log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus (scripts/setup.sh installs it)");
        Prometheus { child, addr }
    }

    /// The value of instant query `query`, summed over its series; `None` while it has none.
    fn value(&self, query: &str) -> Option<f64> {
        let path = format!("/api/v1/query?query={}", percent_encoded(query));
        let answer = TcpStream::connect(&self.addr)
            .ok()
            .map(|_| http_get(&self.addr, &path))?;
        let answer: serde_json::Value = serde_json::from_str(&answer).expect("query JSON");
        assert_eq!(answer["status"], "success", "{query}: {answer}");
        let series = answer["data"]["result"].as_array()?;
        if series.is_empty() {
            return None;
        }
        Some(
            series
                .iter()
                .map(|s| {
                    s["value"][1]
                        .as_str()
                        .and_then(|v| v.parse::<f64>().ok())
                        .unwrap_or(0.0)
                })
                .sum(),
        )
    }

    /// Waits until `query`'s value satisfies `holds`; returns it.
    fn wait(&self, query: &str, what: &str, holds: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + SCRAPED_WITHIN;
        let mut last = None;
        while Instant::now() < deadline {
            last = self.value(query);
            if let Some(value) = last.filter(|v| holds(*v)) {
                return value;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("{what}: `{query}` is {last:?} after {SCRAPED_WITHIN:?}");
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn prometheus_scrapes_every_daemon_and_the_figures_follow_a_bounded_load() {
    let cluster = LocalCluster::start(3, &["--fs", "fs", "--image-size", "64M"]);
    let conf = cluster.conf();
    let names: Vec<&str> = conf.metrics.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["gw", "mds.a", "mon.a", "nbd", "osd.0", "osd.1", "osd.2"],
        "every daemon coffer up runs has a metrics address"
    );
    cluster.wait_nbd();
    cluster.wait_s3();
    for (name, addr) in &conf.metrics {
        cluster.wait_listening(addr);
        let text = http_get(addr, "/metrics");
        assert!(
            text.contains("process_cpu_seconds_total"),
            "{name}:\n{text}"
        );
        let mut promtool = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool (scripts/setup.sh installs it)");
        promtool
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("metrics to promtool");
        let checked = promtool.wait_with_output().expect("promtool ran");
        assert!(
            checked.status.success(),
            "promtool check metrics on {name}: {}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
    }

    let config = cluster.dir.path().join("prometheus").join("prometheus.yml");
    let prometheus = Prometheus::start(&config, &cluster.dir.path().join("prometheus-data"));
    prometheus.wait("up == 1", "every daemon scraped", |up| up == 7.0);
    prometheus.wait(
        "coffer_cluster_osd_up",
        "the leader reports three OSDs up",
        |up| up == 3.0,
    );
    let clean = prometheus.wait(
        r#"coffer_cluster_pgs{state="active+clean"}"#,
        "the leader reports PGs",
        |pgs| pgs > 0.0,
    );
    let pgs: u64 = cluster.status()["pgs"]
        .as_object()
        .expect("pgs by state")
        .values()
        .filter_map(serde_json::Value::as_u64)
        .sum();
    assert_eq!(
        clean, pgs as f64,
        "every PG of status is clean in the metrics"
    );
    prometheus.wait("coffer_cluster_health_status", "health", |status| {
        status == 0.0
    });

    // Pools by name, as a dashboard names them: joined to the leader's pool_info.
    let in_data = r#"* on(pool) group_left coffer_cluster_pool_info{name="data"}"#;
    let written = format!(r#"sum(coffer_osd_op_bytes_total{{kind="write"}} {in_data})"#);
    let writes = format!(r#"sum(coffer_osd_ops_total{{kind="write"}} {in_data})"#);
    let replicated = "sum(coffer_osd_replica_bytes_total)";
    let nbd_written = r#"sum(coffer_nbd_request_bytes_total{kind="write"}) or vector(0)"#;
    let nbd_read = r#"sum(coffer_nbd_request_bytes_total{kind="read"}) or vector(0)"#;
    let edge = r#"sum(coffer_crypto_sealed_bytes_total{kind="edge",daemon="nbd"})"#;
    let before: Vec<f64> = [
        written.as_str(),
        writes.as_str(),
        replicated,
        nbd_written,
        nbd_read,
        edge,
    ]
    .iter()
    .map(|q| prometheus.value(q).unwrap_or(0.0))
    .collect();

    let pool = |df: &serde_json::Value, name: &str| -> serde_json::Value {
        df["pools"]
            .as_array()
            .expect("pools")
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("pool {name} in df: {df}"))
            .clone()
    };
    let data_pool = |df: &serde_json::Value| pool(df, "data");
    let df = || -> serde_json::Value {
        serde_json::from_str(&cluster.ok(&["df", "--json"])).expect("df json")
    };
    let before_df = data_pool(&df());
    let figure = |pool: &serde_json::Value, name: &str| pool[name].as_u64().expect(name);
    let stored = r#"coffer_cluster_pool_stored_bytes * on(pool) group_left coffer_cluster_pool_info{name="data"}"#;
    let stored_before = prometheus.value(stored).unwrap_or(0.0);

    let file = cluster.dir.path().join("object");
    std::fs::write(&file, vec![0x5au8; OBJECT_BYTES as usize]).expect("object file");
    for i in 0..OBJECTS {
        cluster.ok(&[
            "obj",
            "put",
            "data",
            &format!("load-{i}"),
            &file.display().to_string(),
        ]);
    }
    let uri = cluster.nbd_uri();
    run_ok(
        "qemu-io write",
        Command::new("qemu-io").args([
            "-f",
            "raw",
            "-c",
            &format!("write -P 0x77 0 {NBD_BYTES}"),
            &uri,
        ]),
    );
    run_ok(
        "qemu-io read",
        Command::new("qemu-io").args([
            "-f",
            "raw",
            "-c",
            &format!("read -P 0x77 0 {NBD_BYTES}"),
            &uri,
        ]),
    );

    let loaded = (OBJECTS * OBJECT_BYTES + NBD_BYTES) as f64;
    let after_written = prometheus.wait(&written, "bytes written to pool data", |v| {
        v - before[0] >= loaded
    });
    assert!(
        after_written - before[0] < 2.0 * loaded,
        "pool data took {} bytes for a load of {loaded}",
        after_written - before[0]
    );
    prometheus.wait(&writes, "writes to pool data", |v| {
        v - before[1] >= OBJECTS as f64
    });
    prometheus.wait(replicated, "bytes replicated (two more copies)", |v| {
        v - before[2] >= 2.0 * loaded
    });
    prometheus.wait(nbd_written, "NBD bytes written", |v| {
        v - before[3] == NBD_BYTES as f64
    });
    prometheus.wait(nbd_read, "NBD bytes read", |v| {
        v - before[4] >= NBD_BYTES as f64
    });
    prometheus.wait(edge, "bytes the NBD server sealed at the edge", |v| {
        v - before[5] >= NBD_BYTES as f64
    });
    prometheus.wait(
        r#"sum(coffer_nbd_request_duration_seconds_count{kind="write"})"#,
        "NBD write latencies observed",
        |count| count > 0.0,
    );
    prometheus.wait(
        r#"sum(coffer_messenger_links{mode="secure",daemon="nbd"})"#,
        "the NBD server's secure links",
        |links| links > 0.0,
    );

    // The pool's usage, as the stores count it: one copy of what was written, and three
    // copies' worth of space.
    prometheus.wait(stored, "the pool's stored bytes", |v| {
        v - stored_before >= loaded
    });
    let deadline = Instant::now() + SCRAPED_WITHIN;
    let grown = loop {
        let now = data_pool(&df());
        if figure(&now, "stored_bytes") >= figure(&before_df, "stored_bytes") + loaded as u64 {
            break now;
        }
        assert!(Instant::now() < deadline, "df never showed the load: {now}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let grew = |name: &str| figure(&grown, name) - figure(&before_df, name);
    assert!(grew("objects") >= OBJECTS, "df: {before_df} then {grown}");
    assert!(
        (grew("stored_bytes") as f64) < 1.5 * loaded,
        "stored bytes count one copy: {before_df} then {grown}"
    );
    assert!(
        grew("used_bytes") as f64 >= 3.0 * loaded,
        "used bytes count all three copies: {before_df} then {grown}"
    );
    assert!(
        figure(&grown, "max_avail_bytes") > 0,
        "room is left: {grown}"
    );
    let table = cluster.ok(&["df"]);
    assert!(
        table.starts_with("raw: ") && table.lines().any(|l| l.starts_with("data ")),
        "coffer df:\n{table}"
    );

    // What S3 requests ask of the cluster, as the OSDs count them in the gateway's pool: a
    // PUT of a new key reads the signer's record and, in one request, the bucket with the
    // key's index entries, then writes the data and the index's commit; a GET reads the
    // signer's record, the bucket with the entries, and the data (docs/design/gateway.md,
    // "Bucket policies"). A little room is left for the gateway's own upkeep.
    let s3_pool = pool(&df(), "s3")["id"].as_u64().expect("pool id");
    let ops = |kind: &str| {
        cluster.osds_labelled(
            "coffer_osd_ops_total",
            &format!(r#"pool="{s3_pool}",kind="{kind}""#),
        )
    };
    let user = cluster.s3_user("counted");
    let step = |args: &[&str]| {
        run_ok(
            &format!("requests.py {}", args.join(" ")),
            &mut cluster.s3_script(&user, "requests.py", args),
        );
    };
    step(&["bucket", "counted"]);
    let count = S3_OBJECTS.to_string();
    let per_request = |args: &[&str]| -> (f64, f64) {
        let before = (ops("read"), ops("write"));
        step(args);
        let n = f64::from(S3_OBJECTS);
        ((ops("read") - before.0) / n, (ops("write") - before.1) / n)
    };
    let put = per_request(&["put", "counted", &count]);
    assert!(
        put.0 <= 2.2 && put.1 <= 2.2,
        "a PUT of a new key made {:.2} reads and {:.2} writes, not 2 of each",
        put.0,
        put.1
    );
    let get = per_request(&["get", "counted", &count]);
    assert!(
        get.0 <= 3.2 && get.1 <= 0.2,
        "a GET made {:.2} reads and {:.2} writes, not 3 reads",
        get.0,
        get.1
    );
}
