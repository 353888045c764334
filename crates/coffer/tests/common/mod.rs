//! A whole cluster for a test: `coffer up` in a temporary directory, as separate processes,
//! with helpers to run the CLI against it, kill and restart OSDs, wait for a state, compare
//! what every OSD holds, and reach its NBD export.

#![allow(dead_code)]

pub mod load;
pub mod mounts;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use client::{Cluster, Conf};
use messenger::message::{MonReply, MonRequest};
use messenger::{Endpoint, EntityName, Limits, MonClient};

pub const COFFER: &str = env!("CARGO_BIN_EXE_coffer");

pub struct LocalCluster {
    pub dir: tempfile::TempDir,
    pub conf: PathBuf,
    up: Child,
    /// Whether `coffer up` restarts daemons that exit (tests that kill daemons themselves
    /// want them left down).
    supervised: bool,
    /// Daemons started by the test (OSDs after a kill, extra NBD servers), stopped when the
    /// cluster is dropped.
    restarted: Vec<Child>,
}

impl LocalCluster {
    /// `coffer up` with `osds` OSDs and extra arguments, once it says the cluster is up.
    /// `coffer up --no-restart`: a daemon the test kills stays down until it starts it.
    pub fn start(osds: u32, extra: &[&str]) -> LocalCluster {
        LocalCluster::start_as(osds, extra, false)
    }

    /// `coffer up` as a person runs it, restarting daemons that crash.
    pub fn start_supervised(osds: u32, extra: &[&str]) -> LocalCluster {
        LocalCluster::start_as(osds, extra, true)
    }

    fn start_as(osds: u32, extra: &[&str], supervised: bool) -> LocalCluster {
        LocalCluster::start_in(
            tempfile::tempdir().expect("tempdir"),
            osds,
            extra,
            supervised,
        )
    }

    /// `coffer up` in `dir`, which the test may have prepared (a daemon's directory on a
    /// file system of its own).
    pub fn start_in(
        dir: tempfile::TempDir,
        osds: u32,
        extra: &[&str],
        supervised: bool,
    ) -> LocalCluster {
        let conf = dir.path().join("coffer.toml");
        let up = spawn_up(dir.path(), osds, extra, supervised);
        let mut cluster = LocalCluster {
            dir,
            conf,
            up,
            supervised,
            restarted: Vec::new(),
        };
        cluster.wait_up();
        cluster
    }

    fn wait_up(&mut self) {
        let stdout = self.up.stdout.take().expect("up's stdout");
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let _ = send.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match receive.recv_timeout(left) {
                Ok(line) if line.starts_with("coffer: cluster") => break,
                Ok(_) => {}
                Err(_) => panic!("coffer up did not come up:\n{}", self.logs()),
            }
        }
        self.wait_for("every PG active+clean", Duration::from_secs(60), |s| {
            all_clean(s)
        });
    }

    /// Every daemon's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let log = entry.path().join("log");
            if let Ok(text) = std::fs::read_to_string(&log) {
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                out.push_str(&format!("== {}\n", log.display()));
                for line in tail.into_iter().rev() {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        out
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(COFFER)
            .arg("--conf")
            .arg(&self.conf)
            .args(args)
            .output()
            .expect("run coffer")
    }

    /// Runs the CLI and returns its standard output; panics with its error if it fails.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.cli(args);
        assert!(
            output.status.success(),
            "coffer {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    pub fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["status", "--json"])).expect("status json")
    }

    /// Polls `coffer status --json` until `done` holds.
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&serde_json::Value) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        let mut last = serde_json::Value::Null;
        while Instant::now() < deadline {
            let output = self.cli(&["status", "--json"]);
            if output.status.success() {
                if let Ok(status) = serde_json::from_slice::<serde_json::Value>(&output.stdout) {
                    if done(&status) {
                        return;
                    }
                    last = status;
                }
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        panic!(
            "timed out waiting for {what}; last status {last:#}\n{}",
            self.logs()
        );
    }

    pub fn pid(&self, osd: u32) -> i32 {
        self.pid_of(&format!("osd.{osd}"))
    }

    /// The pid a daemon (`mon.a`, `osd.0`) wrote in its directory.
    pub fn pid_of(&self, daemon: &str) -> i32 {
        let path = self.dir.path().join(daemon).join("pid");
        std::fs::read_to_string(&path)
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid")
    }

    pub fn kill(&self, osd: u32, signal: i32) {
        self.kill_daemon(&format!("osd.{osd}"), signal);
    }

    /// Sends `signal` to a daemon (`SIGSTOP`, `SIGCONT`); returns its pid.
    pub fn signal(&self, daemon: &str, signal: i32) -> i32 {
        let pid = self.pid_of(daemon);
        // SAFETY: kill(2) on the pid a daemon of this test's cluster wrote.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(sent, 0, "kill -{signal} {daemon} (pid {pid})");
        pid
    }

    /// Sends `signal` to a daemon and waits until its process is gone.
    pub fn kill_daemon(&self, daemon: &str, signal: i32) {
        let pid = self.signal(daemon, signal);
        // Wait until the process is gone (it is `coffer up`'s child or ours).
        let deadline = Instant::now() + Duration::from_secs(20);
        while Path::new(&format!("/proc/{pid}/stat")).exists()
            && !is_zombie(pid)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The NBD export `coffer up` runs (of data/disk), as a URI for libnbd clients.
    pub fn nbd_uri(&self) -> String {
        let conf = self.conf();
        let nbd = conf.nbd.expect("the cluster has an NBD export");
        let name = nbd.image.split_once('/').expect("POOL/NAME").1.to_string();
        format!("nbd://{}/{name}", nbd.listen)
    }

    /// Waits until something accepts connections at `addr`.
    pub fn wait_listening(&self, addr: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "nothing listens on {addr}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Where `coffer up`'s S3 gateway serves, as an HTTPS URL.
    pub fn s3_endpoint(&self) -> String {
        let gw = self.conf().gw.expect("the cluster has a gateway");
        format!("https://{}", gw.listen)
    }

    /// The authority S3 clients of this cluster's gateway trust.
    pub fn s3_ca(&self) -> PathBuf {
        self.dir.path().join("gw").join("ca.pem")
    }

    /// Waits until `coffer up`'s S3 gateway accepts connections.
    pub fn wait_s3(&self) {
        let listen = self.conf().gw.expect("a gateway").listen;
        self.wait_listening(&listen);
    }

    /// Waits until `coffer up`'s NBD export accepts connections.
    pub fn wait_nbd(&self) {
        let listen = self.conf().nbd.expect("an NBD export").listen;
        self.wait_listening(&listen);
    }

    /// Runs `coffer nbd serve IMAGE` with `extra` arguments on a free loopback port as a
    /// process of its own (stopped with the cluster); returns its pid and its address.
    pub fn serve_nbd(&mut self, image: &str, extra: &[&str]) -> (i32, String) {
        let addr = format!("127.0.0.1:{}", free_port());
        let pid = self.spawn_extra(
            "nbd-extra.log",
            &["nbd", "serve", image, "--listen", &addr],
            extra,
        );
        (pid, addr)
    }

    /// Runs `coffer gw` with `extra` arguments on a free loopback port as a process of its
    /// own (stopped with the cluster), with `coffer up`'s certificate; once it listens,
    /// returns its HTTPS endpoint.
    pub fn serve_gw(&mut self, extra: &[&str]) -> String {
        let addr = format!("127.0.0.1:{}", free_port());
        self.spawn_extra("gw-extra.log", &["gw", "--listen", &addr], extra);
        self.wait_listening(&addr);
        format!("https://{addr}")
    }

    /// Runs `coffer ARGS EXTRA` as a process of its own, stopped with the cluster, logging
    /// to `log` in the cluster's directory; its pid.
    fn spawn_extra(&mut self, log: &str, args: &[&str], extra: &[&str]) -> i32 {
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.dir.path().join(log))
            .expect("log");
        let child = Command::new(COFFER)
            .arg("--conf")
            .arg(&self.conf)
            .args(args)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start coffer {args:?}: {e}"));
        let pid = child.id() as i32;
        self.restarted.push(child);
        pid
    }

    /// Starts OSD `osd` again, as its own process.
    pub fn restart_osd(&mut self, osd: u32) {
        self.restart_daemon(&format!("osd.{osd}"), &["osd", "--id", &osd.to_string()]);
    }

    /// Starts `coffer up`'s metadata daemon again, as its own process.
    pub fn restart_mds(&mut self) {
        self.restart_daemon("mds.a", &["mds", "--id", "a"]);
    }

    /// Starts `coffer up`'s S3 gateway again, as its own process.
    pub fn restart_gw(&mut self) {
        let pid_file = self.dir.path().join("gw/pid");
        let pid_file = pid_file.to_str().expect("UTF-8 path");
        self.restart_daemon("gw", &["gw", "--pid-file", pid_file]);
    }

    /// Runs `coffer ARGS` as daemon `name`, logging to its log file.
    fn restart_daemon(&mut self, name: &str, args: &[&str]) {
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.dir.path().join(name).join("log"))
            .expect("daemon log");
        let child = Command::new(COFFER)
            .arg("--conf")
            .arg(&self.conf)
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.restarted.push(child);
    }

    /// `name`'s entry in `coffer daemon ls --json` (a supervised cluster).
    pub fn daemon(&self, name: &str) -> serde_json::Value {
        let text = self.ok(&["daemon", "ls", "--json"]);
        let all: serde_json::Value = serde_json::from_str(&text).expect("daemon ls --json");
        all.as_array()
            .expect("a list")
            .iter()
            .find(|d| d["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} is not in {text}"))
    }

    /// Waits until `name`'s entry in `coffer daemon ls --json` satisfies `done`.
    pub fn wait_daemon(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let entry = self.daemon(name);
            if done(&entry) {
                return entry;
            }
            assert!(
                Instant::now() < deadline,
                "{name} {what}: not within {timeout:?}: {entry:#}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn conf(&self) -> Conf {
        Conf::load(&self.conf).expect("conf")
    }

    /// The sum over the cluster's OSDs of the counter `name` in their metrics.
    pub fn osds_counter(&self, name: &str) -> f64 {
        self.osds_sum(|line| line.strip_prefix(name)?.strip_prefix(' '))
    }

    /// The sum over the cluster's OSDs of the series of counter `family` whose labels
    /// include `label` (`kind="read"`), over every other label.
    pub fn osds_labelled(&self, family: &str, label: &str) -> f64 {
        self.osds_sum(|line| {
            let labelled = line.strip_prefix(family)?.strip_prefix('{')?;
            let (labels, value) = labelled.split_once("} ")?;
            labels.contains(label).then_some(value)
        })
    }

    /// The sum over the cluster's OSDs of the values `value` finds in their metrics'
    /// lines.
    fn osds_sum(&self, value: impl Fn(&str) -> Option<&str>) -> f64 {
        let conf = self.conf();
        conf.metrics
            .iter()
            .filter(|(daemon, _)| daemon.starts_with("osd."))
            .map(|(daemon, addr)| {
                let mut stream = std::net::TcpStream::connect(addr)
                    .unwrap_or_else(|e| panic!("{daemon}'s metrics at {addr}: {e}"));
                std::io::Write::write_all(&mut stream, b"GET /metrics HTTP/1.0\r\n\r\n")
                    .expect("request sent");
                let mut text = String::new();
                std::io::Read::read_to_string(&mut stream, &mut text).expect("metrics read");
                text.lines()
                    .filter_map(&value)
                    .map(|v| v.trim().parse::<f64>().expect("a number"))
                    .sum::<f64>()
            })
            .sum()
    }

    /// A client library connection as client.admin.
    pub async fn admin(&self) -> Cluster {
        let conf = self.conf();
        let name: EntityName = "client.admin".parse().expect("name");
        let identity = client::load_identity(&conf.keyring_path(&name), &name).expect("keyring");
        Cluster::connect(&conf, &identity).await.expect("connect")
    }

    /// Every segment the S3 gateway's records in pool `s3` name, by bucket: the segments of
    /// each object, then those of the parts of each upload in progress.
    pub async fn s3_segments(&self) -> BTreeMap<String, Vec<gateway::layout::Segment>> {
        use gateway::layout;
        let admin = self.admin().await;
        let pool = admin.pool("s3").await.expect("pool");
        let omap = |object: String| {
            let pool = pool.clone();
            async move {
                let (entries, more) = pool.omap_list(&object, None, 1000).await.expect("omap");
                assert!(!more, "{object}: more entries than a test makes");
                entries
            }
        };
        let mut out = BTreeMap::new();
        for name in pool.list().await.expect("list") {
            let Some(bucket) = name.as_str().strip_prefix("gw.index.") else {
                continue;
            };
            let mut segments = Vec::new();
            for (entry_key, value) in omap(name.as_str().to_string()).await {
                match layout::parse_index_key(&entry_key) {
                    layout::IndexKey::Upload => {
                        let (_, id) = layout::parse_upload_key(&entry_key).expect("an upload");
                        for (_, part) in omap(layout::upload_object(&id)).await {
                            let part: layout::PartRecord = layout::decode(&part).expect("part");
                            segments.push(part.segment);
                        }
                    }
                    layout::IndexKey::Object(_) => {
                        let entry: layout::ObjectEntry = layout::decode(&value).expect("entry");
                        segments.extend(entry.segments);
                    }
                    layout::IndexKey::Version(..) => {
                        if let layout::Version::Object(entry) =
                            layout::decode(&value).expect("version")
                        {
                            segments.extend(entry.segments);
                        }
                    }
                    layout::IndexKey::Head(_) | layout::IndexKey::Unknown => {}
                }
            }
            out.insert(bucket.to_string(), segments);
        }
        out
    }

    /// The segments of the gateway's objects and parts whose content is sealed (SSE).
    pub fn sse_segments(&self) -> Vec<gateway::layout::Segment> {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let all = runtime.block_on(self.s3_segments());
        all.into_values()
            .flatten()
            .filter(|segment| segment.sealed.is_some())
            .collect()
    }

    /// Every object of pool `pool` in OSD `osd`'s store, with its data and version attribute
    /// ([`LocalCluster::osd_objects`]).
    pub async fn osd_contents(
        &self,
        osd: u32,
        pool: map::PoolId,
    ) -> BTreeMap<String, (Vec<u8>, Vec<u8>)> {
        self.osd_objects(osd, pool)
            .await
            .into_iter()
            .map(|(name, (data, attrs))| {
                let version = attrs.get(".v").cloned().unwrap_or_default();
                (name, (data, version))
            })
            .collect()
    }

    /// Every object of pool `pool` in OSD `osd`'s store (in an erasure-coded pool, each
    /// shard it holds), with its data and attributes: the OSD must be stopped (the store is
    /// opened directly, with the key the monitors release to that OSD). In a pool sealed at
    /// the edge, whose key no store holds, the data is the copy as recovery moves it: the
    /// sealed chunks, then their records.
    pub async fn osd_objects(
        &self,
        osd: u32,
        pool: map::PoolId,
    ) -> BTreeMap<String, (Vec<u8>, BTreeMap<String, Vec<u8>>)> {
        let conf = self.conf();
        let entity = EntityName::osd(osd);
        let identity =
            client::load_identity(&conf.keyring_path(&entity), &entity).expect("keyring");
        let endpoint = Endpoint::new(&identity, Limits::default()).expect("endpoint");
        let monc = MonClient::new(
            endpoint,
            conf.mon_addrs().expect("mons"),
            conf.mon_modes().expect("modes"),
        );
        let Ok(MonReply::StoreKek(kek)) = monc.call(&MonRequest::GetStoreKek).await else {
            panic!("no store key for osd.{osd}");
        };
        let kek = keys::KeyEncryptionKey::from_bytes(kek.try_into().expect("32 bytes"));
        let dir = self.dir.path().join(format!("osd.{osd}/store"));
        let store = store::Store::open(&dir, &kek).expect("open store");
        let mut out = BTreeMap::new();
        let mut cursor = None;
        loop {
            let page = store
                .list(pool, 0..=u32::MAX, cursor.as_ref(), 1000)
                .expect("list");
            for entry in page.entries {
                let object = map::ObjectRef::new(pool, entry.name.clone());
                let size = store.stat(&object).expect("stat").size_bytes;
                let data = match store.read(&object, 0, size) {
                    Ok(data) => data.to_vec(),
                    Err(store::ReadError::EdgeSealed { .. }) => {
                        let sealed = store
                            .read_sealed(&object, 0, size.div_ceil(4096))
                            .expect("read sealed");
                        let mut copy = sealed.data.concat();
                        for record in sealed.chunks.iter().flatten() {
                            copy.extend_from_slice(&record.key_id.to_be_bytes());
                            copy.extend_from_slice(&record.nonce);
                            copy.extend_from_slice(&record.tag);
                        }
                        copy
                    }
                    Err(e) => panic!("reading {object} on osd.{osd}: {e}"),
                };
                let attrs = store.attrs(&object).expect("attrs");
                out.insert(entry.name.as_str().to_string(), (data, attrs));
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => return out,
            }
        }
    }

    /// Stops `coffer up` (as Ctrl-C does) and waits for it.
    pub fn stop(&mut self) {
        for child in &mut self.restarted {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
        self.restarted.clear();
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.up.id() as i32, libc::SIGINT) };
        let _ = self.up.wait();
    }

    /// `coffer up` again on the same directory.
    pub fn resume(&mut self, osds: u32) {
        self.up = spawn_up(self.dir.path(), osds, &[], self.supervised);
        self.wait_up();
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.split(") ")
                .nth(1)
                .is_some_and(|rest| rest.starts_with('Z'))
        })
        .unwrap_or(true)
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    client::conf::free_loopback_port().expect("a free port")
}

fn spawn_up(dir: &Path, osds: u32, extra: &[&str], supervised: bool) -> Child {
    let log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("up.log"))
        .expect("up log");
    Command::new(COFFER)
        .args([
            "up",
            "--store-gib",
            "1",
            "--osds",
            &osds.to_string(),
            "--data",
        ])
        .arg(dir)
        .args(extra)
        .args(port_default("--nbd", extra))
        .args(port_default("--gw", extra))
        .args(none_by_default(extra))
        .args((!supervised).then_some("--no-restart"))
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("start coffer up")
}

/// Each test cluster's NBD export and S3 gateway listen on ports of their own, not the
/// defaults (10809, 7480), unless the test names `option` itself.
fn port_default(option: &str, extra: &[&str]) -> Vec<String> {
    if extra.contains(&option) {
        return Vec::new();
    }
    vec![option.into(), format!("127.0.0.1:{}", free_port())]
}

/// Test clusters run no file system (its pools and metadata daemon) and no dashboard unless
/// the test names `--fs` or `--dashboard` itself.
fn none_by_default(extra: &[&str]) -> Vec<String> {
    let mut args = Vec::new();
    for option in ["--fs", "--dashboard"] {
        if !extra.contains(&option) {
            args.extend([option.to_string(), "none".to_string()]);
        }
    }
    args
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn all_clean(status: &serde_json::Value) -> bool {
    let pgs = &status["pgs"];
    let total: u64 = pgs
        .as_object()
        .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
        .unwrap_or(0);
    total > 0 && pgs["active+clean"].as_u64() == Some(total)
}

/// Cluster tests in one binary run one at a time: each is a handful of processes, and two
/// cores running several clusters at once would miss beacons and mark OSDs down.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// tcpdump recording the loopback's TCP traffic into a file, for tests that look for
/// plaintext on the wire.
pub struct Capture {
    tcpdump: Child,
    path: PathBuf,
}

impl Capture {
    /// Starts recording into `path`; returns once tcpdump listens.
    pub fn start(path: &Path) -> Capture {
        let mut tcpdump = Command::new("tcpdump")
            .args([
                "-i",
                "lo",
                "-U",
                "--immediate-mode",
                "-s",
                "0",
                "-Z",
                "root",
                "-w",
            ])
            .arg(path)
            .arg("tcp")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (scripts/setup.sh installs it)");
        let stderr = tcpdump.stderr.take().expect("tcpdump stderr");
        let listening = BufReader::new(stderr)
            .lines()
            .next()
            .and_then(Result::ok)
            .is_some_and(|line| line.contains("listening on"));
        assert!(listening, "tcpdump did not start");
        Capture {
            tcpdump,
            path: path.to_path_buf(),
        }
    }

    /// Stops recording; returns the capture file's bytes.
    pub fn stop(mut self) -> Vec<u8> {
        std::thread::sleep(Duration::from_millis(500));
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.tcpdump.id() as i32, libc::SIGINT) };
        self.tcpdump.wait().expect("tcpdump exits");
        std::fs::read(&self.path).expect("capture")
    }
}

/// A test that fails before `stop` must not leave tcpdump recording.
impl Drop for Capture {
    fn drop(&mut self) {
        if let Ok(None) = self.tcpdump.try_wait() {
            let _ = self.tcpdump.kill();
            let _ = self.tcpdump.wait();
        }
    }
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// A server a test started in a process group of its own, which is killed whole when it is
/// dropped: PyKMIP's server forks a process of its own (multiprocessing's manager), which
/// outlives a kill of the server alone.
pub struct Daemon(Child);

impl Daemon {
    pub fn start(command: &mut Command, what: &str) -> Daemon {
        use std::os::unix::process::CommandExt;
        Daemon(
            command
                .process_group(0)
                .spawn()
                .unwrap_or_else(|e| panic!("start {what}: {e}")),
        )
    }

    pub fn stop(&mut self) {
        let group = i32::try_from(self.0.id()).expect("a pid");
        // SAFETY: kill(2) on the process group this test made for its own server.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Keycloak, the OpenID Connect provider the web identity tests use, started in dev mode
/// from the copy `ensure_keycloak` (scripts/setup.sh) unpacks, at COFFER_KEYCLOAK: with its
/// database in the test's directory, on a loopback port, under `/auth` (as Ceph's s3-tests expect it), with a
/// bootstrap admin whose password is made here.
pub struct Keycloak {
    server: Daemon,
    /// Its base URL (`http://127.0.0.1:PORT/auth`).
    pub url: String,
    pub admin_password: String,
    log: PathBuf,
}

impl Keycloak {
    /// Starts one; [`Keycloak::wait`] waits for it to serve.
    pub fn start(dir: &Path) -> Keycloak {
        let home = std::env::var_os("COFFER_KEYCLOAK").unwrap_or_else(|| {
            panic!(
                "COFFER_KEYCLOAK is not set: run the tests through scripts/test (ensure_keycloak)"
            )
        });
        let kc = PathBuf::from(home).join("bin/kc.sh");
        std::fs::create_dir_all(dir).expect("keycloak dir");
        let port = free_port();
        let admin_password = format!("{:016x}", rand::random::<u64>());
        let log = dir.join("keycloak.log");
        let out = std::fs::File::create(&log).expect("keycloak log");
        let server = Daemon::start(
            Command::new(&kc)
                // Its own database in `dir`: dev-mem's loses its tables once its pool
                // has sat idle a while, as the suite's earlier steps let it.
                .args(["start-dev", "--db=dev-file", "--http-relative-path=/auth"])
                .arg(format!(
                    "--db-url=jdbc:h2:file:{}/keycloakdb;NON_KEYWORDS=VALUE",
                    dir.display()
                ))
                .arg("--http-host=127.0.0.1")
                .arg(format!("--http-port={port}"))
                .arg(format!("--http-management-port={}", free_port()))
                .env("KC_BOOTSTRAP_ADMIN_USERNAME", "admin")
                .env("KC_BOOTSTRAP_ADMIN_PASSWORD", &admin_password)
                .stdout(out.try_clone().expect("log"))
                .stderr(out),
            &format!("{} (did ensure_keycloak unpack it?)", kc.display()),
        );
        Keycloak {
            server,
            url: format!("http://127.0.0.1:{port}/auth"),
            admin_password,
            log,
        }
    }

    /// Waits until the master realm's discovery document is served.
    pub fn wait(&self) {
        use std::io::{Read, Write};
        let address = self.url["http://".len()..]
            .split('/')
            .next()
            .expect("host")
            .to_owned();
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let answer = std::net::TcpStream::connect(&address)
                .ok()
                .and_then(|mut stream| {
                    stream
                        .set_read_timeout(Some(Duration::from_secs(10)))
                        .ok()?;
                    let asked = format!(
                        "GET /auth/realms/master/.well-known/openid-configuration HTTP/1.0\r\n\
                     Host: {address}\r\n\r\n"
                    );
                    stream.write_all(asked.as_bytes()).ok()?;
                    let mut answer = String::new();
                    stream.read_to_string(&mut answer).ok()?;
                    Some(answer)
                });
            if answer
                .is_some_and(|a| a.starts_with("HTTP/1.1 200") || a.starts_with("HTTP/1.0 200"))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Keycloak did not come up:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Keycloak {
    fn drop(&mut self) {
        self.server.stop();
    }
}

/// The Python of the venv `scripts/test` makes for the S3 tests (COFFER_S3_VENV), with
/// boto3 in it.
pub fn s3_python() -> PathBuf {
    let venv = std::env::var_os("COFFER_S3_VENV").unwrap_or_else(|| {
        panic!("COFFER_S3_VENV is not set: run the S3 tests through scripts/test (ensure_s3_tools)")
    });
    let python = PathBuf::from(venv).join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/test (ensure_s3_tools makes the venv)",
        python.display()
    );
    python
}

impl LocalCluster {
    /// `coffer user create NAME --json`: the user's name and keys.
    pub fn s3_user(&self, name: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["user", "create", name, "--json"])).expect("user json")
    }

    /// Through the gateway, as a new user: objects full of `sse_marker` under every kind of
    /// SSE (SSE-KMS with the KMS key `marker-key`, made here) and one full of
    /// `plain_marker` without (tests/s3/encryption.py `markers`), each read back, while
    /// tcpdump records the loopback; returns the capture and the user. The gateway must be
    /// up.
    pub fn upload_markers(
        &self,
        sse_marker: &str,
        plain_marker: &str,
    ) -> (Vec<u8>, serde_json::Value) {
        self.ok(&["kms", "key", "create", "marker-key"]);
        let user = self.s3_user("marker");
        let capture = Capture::start(&self.dir.path().join("lo.pcap"));
        run_ok(
            "writing the markers",
            &mut self.s3_script(
                &user,
                "encryption.py",
                &["markers", "markers", sse_marker, plain_marker, "marker-key"],
            ),
        );
        (capture.stop(), user)
    }

    /// tests/s3/SCRIPT ARGS with boto3, as `user` of this cluster's gateway.
    pub fn s3_script(&self, user: &serde_json::Value, script: &str, args: &[&str]) -> Command {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/s3")
            .join(script);
        let mut command = Command::new(s3_python());
        command
            .arg(path)
            .args(args)
            .env("S3_ENDPOINT", self.s3_endpoint())
            .env("S3_CA", self.s3_ca())
            .env(
                "S3_ACCESS",
                user["access_key"].as_str().expect("access key"),
            )
            .env(
                "S3_SECRET",
                user["secret_key"].as_str().expect("secret key"),
            )
            .env_remove("AWS_CA_BUNDLE");
        command
    }
}

/// Three chunks of random bytes (`victim`) and an object `bystander` ("unharmed") in a new
/// pool `sealed` (seal = edge, 8 PGs) of a fresh 3-OSD cluster; returns the cluster, the
/// victim's bytes and its chunk 1 as every OSD holds it: sealed, all a disk can show.
pub fn sealed_victim() -> (LocalCluster, Vec<u8>, bytes::Bytes) {
    let cluster = LocalCluster::start(3, &[]);
    cluster.ok(&[
        "pool", "create", "sealed", "--seal", "edge", "--pg-num", "8",
    ]);
    cluster.wait_for("PGs clean", Duration::from_secs(60), all_clean);
    let victim: Vec<u8> = (0..3 * 4096).map(|_| rand::random::<u8>()).collect();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let sealed_chunk = runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("sealed").await.expect("pool");
        pool.put("victim", bytes::Bytes::from(victim.clone()))
            .await
            .expect("put");
        pool.put("bystander", bytes::Bytes::from_static(b"unharmed"))
            .await
            .expect("put");
        let (_, sealed) = pool
            .operate(
                "victim",
                vec![client::ObjectOp::ReadChunks { first: 1, count: 1 }],
                bytes::Bytes::new(),
            )
            .await
            .expect("read sealed");
        sealed
    });
    assert_eq!(sealed_chunk.len(), 4096);
    (cluster, victim, sealed_chunk)
}

/// Runs `command`; returns its standard output, or panics with both outputs if it fails.
pub fn run_ok(what: &str, command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Every file under `dir`, at any depth.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.is_file() {
                files.push(path);
            }
        }
    }
    files
}

/// Every file under `dir` that holds `needle`, with each of its offsets.
pub fn occurrences(dir: &Path, needle: &[u8]) -> Vec<(PathBuf, usize)> {
    files_under(dir)
        .into_iter()
        .flat_map(|path| {
            find_in(&path, needle, false)
                .into_iter()
                .map(move |at| (path.clone(), at as usize))
        })
        .collect()
}

/// The offsets of `needle` in the file at `path` (only the first with `first`; none if the
/// file cannot be opened). Only the parts that hold data are read: a store's device file
/// is mostly preallocated space.
fn find_in(path: &Path, needle: &[u8], first: bool) -> Vec<u64> {
    use std::os::unix::fs::FileExt;
    const PIECE: u64 = 16 << 20;
    let Ok(file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (start, end) in data_extents(&file) {
        let mut at = start;
        while at < end {
            let len = (PIECE + needle.len() as u64 - 1).min(end - at);
            let mut bytes = vec![0u8; len as usize];
            if file.read_exact_at(&mut bytes, at).is_err() {
                return found;
            }
            let mut from = 0;
            while let Some(i) = bytes[from..]
                .windows(needle.len())
                .position(|w| w == needle)
            {
                found.push(at + (from + i) as u64);
                if first {
                    return found;
                }
                from += i + 1;
            }
            at += PIECE.min(len);
        }
    }
    found
}

/// The `(start, end)` ranges of `file` that hold data: holes and unwritten preallocated
/// space are skipped where the file system tells them apart (else the whole file).
fn data_extents(file: &std::fs::File) -> Vec<(u64, u64)> {
    use std::os::unix::io::AsRawFd;
    let fd = file.as_raw_fd();
    let Ok(meta) = file.metadata() else {
        return Vec::new();
    };
    let len = meta.len() as i64;
    let mut extents = Vec::new();
    let mut at = 0;
    while at < len {
        // SAFETY: lseek(2) on a descriptor `file` keeps open.
        let start = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if start < 0 {
            break;
        }
        // SAFETY: as above.
        let end = unsafe { libc::lseek(fd, start, libc::SEEK_HOLE) };
        let end = if end < 0 { len } else { end.min(len) };
        extents.push((start as u64, end as u64));
        at = end;
    }
    extents
}

/// Where `needle` is in the files of `dir` that hold the copies an OSD serves: every file
/// but a store's write-ahead log (`wal`), which keeps its own copy of recent small writes
/// until the log comes round again and is read only to replay after a crash (a closed
/// store has nothing to replay).
pub fn stored_copies(dir: &Path, needle: &[u8]) -> Vec<(PathBuf, usize)> {
    occurrences(dir, needle)
        .into_iter()
        .filter(|(path, _)| path.file_name().is_none_or(|name| name != "wal"))
        .collect()
}

/// The OSD (`osd.N`) whose directory holds `path`, if any.
pub fn osd_of_path(path: &Path) -> Option<String> {
    path.ancestors()
        .filter_map(|a| a.file_name()?.to_str())
        .find(|name| name.starts_with("osd."))
        .map(String::from)
}

/// `coffer pool scrub POOL [more]`: its standard output and error, and whether it succeeded.
pub fn scrub(cluster: &LocalCluster, pool: &str, more: &[&str]) -> (String, String, bool) {
    let mut args = vec!["pool", "scrub", pool];
    args.extend_from_slice(more);
    let output = cluster.cli(&args);
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        output.status.success(),
    )
}

/// Inverts one bit of the byte at `offset` of the file at `path` (a disk's silent error).
pub fn flip_byte(path: &Path, offset: usize) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open store file");
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, offset as u64)
        .expect("read byte");
    byte[0] ^= 0x20;
    file.write_all_at(&byte, offset as u64).expect("write byte");
}

/// Whether any file under `dir` (but the capture) holds `marker`.
pub fn on_disk(dir: &Path, marker: &[u8]) -> Vec<String> {
    files_under(dir)
        .into_iter()
        .filter(|path| path.extension().is_none_or(|e| e != "pcap") && file_holds(path, marker))
        .map(|path| path.display().to_string())
        .collect()
}

/// Whether the file at `path` holds `marker`.
fn file_holds(path: &Path, marker: &[u8]) -> bool {
    !find_in(path, marker, true).is_empty()
}

/// Runs `program` with `args`, which must succeed; its standard output.
pub fn run(program: &str, args: &[&str]) -> String {
    run_ok(
        &format!("{program} {args:?} (scripts/test installs it)"),
        Command::new(program).args(args),
    )
}

/// fio with the nbd engine: random writes of `bs` over `size` bytes at queue depth `qd`,
/// each block carrying a crc32c that fio checks when it reads everything back.
pub fn fio_verify(uri: &str, bs: &str, qd: u32, size: &str, io_size: &str, offset: &str) {
    let output = run(
        "fio",
        &[
            "--name=verify",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randwrite",
            &format!("--bs={bs}"),
            &format!("--iodepth={qd}"),
            &format!("--offset={offset}"),
            &format!("--size={size}"),
            &format!("--io_size={io_size}"),
            "--verify=crc32c",
            "--verify_fatal=1",
            "--do_verify=1",
            "--randrepeat=0",
            "--verify_state_save=0",
            "--output-format=json",
        ],
    );
    // fio may print notes before its report.
    let json = &output[output.find('{').expect("fio's JSON report")..];
    let report: serde_json::Value = serde_json::from_str(json).expect("fio's JSON report");
    let job = &report["jobs"][0];
    assert_eq!(job["error"], 0, "fio reported an error: {job:#}");
    let written = job["write"]["io_bytes"].as_u64().unwrap_or(0);
    let read = job["read"]["io_bytes"].as_u64().unwrap_or(0);
    assert!(written > 0, "fio wrote nothing: {job:#}");
    assert_eq!(read, written, "fio must read back all it wrote: {job:#}");
}
