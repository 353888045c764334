//! Three hosts for real: network namespaces joined by a bridge, each with its own address,
//! a monitor and two OSDs, deployed as docs/deploy.md says (coffer init, copies of its files,
//! the daemons run by the systemd units' own command lines, coffer osd create). A client in a
//! fourth namespace writes objects to a pool whose copies are on three hosts through 20
//! trials of faults: one host cut off until marked down (first the host without the first
//! monitor, then the first monitor's), then faults drawn from a seed that is printed: hosts
//! cut off briefly, alone or two at once (below min_size and without a monitor majority,
//! where nothing may be acknowledged), hosts cut off until marked down, OSDs killed with
//! SIGKILL and started again. After each trial the cluster must be clean again and writes
//! must go on; at the end, with two hosts cut off for longer, nothing is acknowledged; every
//! acknowledged object must read back with its bytes, none that was not may be torn, and
//! scrub must find the copies identical.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{run_ok, COFFER};

const HOSTS: usize = 3;
const OSDS_PER_HOST: usize = 2;
const POOL: &str = "rep";
/// Faults injected per run (`schedule`).
const TRIALS: usize = 20;
/// The longest a client command may take before it counts as not acknowledged.
const CLIENT_TIMEOUT_SECS: u32 = 20;

/// The namespaces, the bridge between them, and the daemons in them; all removed on drop.
struct Hosts {
    tag: String,
    subnet: String,
    dir: tempfile::TempDir,
    daemons: Mutex<Vec<Daemon>>,
}

/// A daemon run by a unit's command line: what started it, to start it again.
struct Daemon {
    name: String,
    node: String,
    unit: String,
    instance: String,
    child: Child,
}

impl Hosts {
    /// Namespaces `tag-h1` to `tag-h3` and `tag-c` (the client), each with one veth to a
    /// bridge in `tag-sw`.
    fn new() -> Hosts {
        remove_orphans();
        let tag = format!("cf{}", std::process::id());
        let subnet = format!("10.{}.{}", 100 + std::process::id() % 100, 7);
        let hosts = Hosts {
            tag,
            subnet,
            dir: tempfile::tempdir().expect("tempdir"),
            daemons: Mutex::new(Vec::new()),
        };
        let switch = hosts.switch();
        ip(&["netns", "add", &switch]);
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &switch, "link", "set", "br0", "up"]);
        for (number, node) in hosts.nodes().into_iter().enumerate() {
            ip(&["netns", "add", &node]);
            let (inside, outside) = hosts.veth(&node);
            ip(&[
                "link", "add", &inside, "netns", &node, "type", "veth", "peer", "name", &outside,
                "netns", &switch,
            ]);
            let addr = format!("{}/24", hosts.addr_of(number));
            ip(&["-n", &node, "addr", "add", &addr, "dev", &inside]);
            ip(&["-n", &node, "link", "set", &inside, "up"]);
            ip(&["-n", &node, "link", "set", "lo", "up"]);
            ip(&[
                "-n", &switch, "link", "set", &outside, "master", "br0", "up",
            ]);
            std::fs::create_dir_all(hosts.data(&node)).expect("host dir");
        }
        hosts
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.tag)
    }

    /// The hosts, then the client.
    fn nodes(&self) -> Vec<String> {
        let mut nodes: Vec<String> = (1..=HOSTS).map(|h| self.host(h)).collect();
        nodes.push(self.client());
        nodes
    }

    fn host(&self, h: usize) -> String {
        format!("{}-h{h}", self.tag)
    }

    fn client(&self) -> String {
        format!("{}-c", self.tag)
    }

    /// The address of node `number` (0 for host 1, HOSTS for the client).
    fn addr_of(&self, number: usize) -> String {
        format!("{}.{}", self.subnet, number + 1)
    }

    /// The veth of `node`: its end inside, and the end on the bridge.
    fn veth(&self, node: &str) -> (String, String) {
        let short = node.rsplit('-').next().expect("a suffix");
        (
            format!("{}{short}", self.tag),
            format!("{}{short}s", self.tag),
        )
    }

    /// `/var/lib/coffer` of `node`.
    fn data(&self, node: &str) -> PathBuf {
        self.dir.path().join(node)
    }

    fn conf(&self, node: &str) -> PathBuf {
        self.data(node).join("coffer.toml")
    }

    /// Cuts `node` off the others (its link to the bridge down), or joins it again.
    fn link(&self, node: &str, up: bool) {
        let (_, outside) = self.veth(node);
        let state = if up { "up" } else { "down" };
        ip(&["-n", &self.switch(), "link", "set", &outside, state]);
    }

    /// `coffer --conf … ARGS` in `node`, with the client timeout.
    fn coffer(&self, node: &str, args: &[&str]) -> Command {
        let mut command = Command::new("ip");
        command
            .args([
                "netns",
                "exec",
                node,
                "timeout",
                &CLIENT_TIMEOUT_SECS.to_string(),
            ])
            .arg(COFFER)
            .arg("--conf")
            .arg(self.conf(node))
            .args(args);
        command
    }

    fn ok(&self, node: &str, args: &[&str]) -> String {
        run_ok(
            &format!("{node}: coffer {args:?}"),
            &mut self.coffer(node, args),
        )
    }

    /// Runs a systemd unit's `ExecStart` line in `node`, as systemd would with instance
    /// `instance` and the host's environment file: the same command, with this test's
    /// binary and data directory.
    fn start_unit(&self, node: &str, unit: &str, instance: &str, name: &str) {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../deploy/systemd")
                .join(unit),
        )
        .expect("the unit file");
        let line = text
            .lines()
            .find_map(|line| line.strip_prefix("ExecStart="))
            .expect("ExecStart");
        let host_addr = self.addr_of(self.nodes().iter().position(|n| n == node).expect("a node"));
        let data = self.data(node);
        let words: Vec<String> = line
            .split_whitespace()
            .map(|word| {
                word.replace("/usr/local/bin/coffer", COFFER)
                    .replace("/var/lib/coffer", &data.display().to_string())
                    .replace("%i", instance)
                    .replace("${COFFER_ADDR}", &host_addr)
            })
            .collect();
        // Appended to: a daemon started again keeps the log of the one before.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(data.join(format!("{name}.log")))
            .expect("log");
        let child = Command::new("ip")
            .args(["netns", "exec", node])
            .args(&words)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("a daemon");
        self.daemons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Daemon {
                name: name.to_string(),
                node: node.to_string(),
                unit: unit.to_string(),
                instance: instance.to_string(),
                child,
            });
    }

    /// Kills daemon `name` with SIGKILL (`ip netns exec` runs it in its own process).
    fn kill(&self, name: &str) -> Daemon {
        let mut daemons = self.daemons.lock().unwrap_or_else(|p| p.into_inner());
        let at = daemons
            .iter()
            .position(|d| d.name == name)
            .unwrap_or_else(|| panic!("no daemon {name}"));
        let mut daemon = daemons.remove(at);
        daemon.child.kill().expect("SIGKILL");
        daemon.child.wait().expect("reaped");
        daemon
    }

    /// Starts a killed daemon again, as systemd's `Restart=` would.
    fn restart(&self, killed: &Daemon) {
        self.start_unit(&killed.node, &killed.unit, &killed.instance, &killed.name);
    }

    /// The daemons' logs, for a failure's message.
    fn logs(&self) -> String {
        let mut out = String::new();
        for node in self.nodes() {
            for entry in std::fs::read_dir(self.data(&node))
                .into_iter()
                .flatten()
                .flatten()
            {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "log") {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(15).collect();
                    out.push_str(&format!("== {}\n", path.display()));
                    for line in tail.into_iter().rev() {
                        out.push_str(line);
                        out.push('\n');
                    }
                }
            }
        }
        out
    }

    /// Waits until `coffer status --json` from the client satisfies `done`.
    fn wait_status(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&serde_json::Value) -> bool,
    ) {
        let start = Instant::now();
        let mut last = serde_json::Value::Null;
        while start.elapsed() < timeout {
            let output = self
                .coffer(&self.client(), &["status", "--json"])
                .output()
                .expect("status");
            if output.status.success() {
                last = serde_json::from_slice(&output.stdout).unwrap_or_default();
                if done(&last) {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!(
            "{what}: not within {timeout:?}; last status {last}\n{}",
            self.logs()
        );
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for daemon in self.daemons.get_mut().unwrap_or_else(|p| p.into_inner()) {
            let _ = daemon.child.kill();
            let _ = daemon.child.wait();
        }
        for node in self.nodes() {
            let _ = Command::new("ip").args(["netns", "del", &node]).status();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.switch()])
            .status();
    }
}

/// Removes the namespaces (and kills the daemons in them) of an earlier run of this test
/// that was killed before it could: their names carry the pid of a process that is gone.
fn remove_orphans() {
    let listed = run_ok("ip netns list", Command::new("ip").args(["netns", "list"]));
    for name in listed
        .lines()
        .filter_map(|line| line.split_whitespace().next())
    {
        let Some(pid) = name
            .strip_prefix("cf")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Ok(pids) = Command::new("ip").args(["netns", "pids", name]).output() {
            for daemon in String::from_utf8_lossy(&pids.stdout).lines() {
                let _ = Command::new("kill").args(["-9", daemon]).status();
            }
        }
        let _ = Command::new("ip").args(["netns", "del", name]).status();
    }
}

fn ip(args: &[&str]) {
    run_ok(&format!("ip {args:?}"), Command::new("ip").args(args));
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().expect("a parent")).expect("dir");
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("{} -> {}: {e}", from.display(), to.display()));
}

/// The bytes of object `n`: distinct per object, 20 KiB.
fn content(n: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(20 << 10);
    while bytes.len() < 20 << 10 {
        bytes.extend_from_slice(format!("object {n} line {} ", bytes.len()).as_bytes());
    }
    bytes.truncate(20 << 10);
    bytes
}

/// One write of the load: object `n`, when it was sent and answered, and whether it was
/// acknowledged.
#[derive(Clone, Copy)]
struct Write {
    n: usize,
    sent: Instant,
    answered: Instant,
    acked: bool,
}

/// A client writing objects one after another until told to stop.
struct Load {
    stop: Arc<AtomicBool>,
    writes: Arc<Mutex<Vec<Write>>>,
    /// What the last write that failed said.
    last_error: Arc<Mutex<String>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(hosts: &Arc<Hosts>, first: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(Mutex::new(Vec::new()));
        let last_error = Arc::new(Mutex::new(String::new()));
        let thread = {
            let (hosts, stop, writes) = (hosts.clone(), stop.clone(), writes.clone());
            let last_error = last_error.clone();
            std::thread::spawn(move || {
                let client = hosts.client();
                let mut n = first;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("o{n}");
                    let sent = Instant::now();
                    let output = put(&hosts, &client, &name, &content(n));
                    let acked = output.status.success();
                    if !acked {
                        *last_error.lock().unwrap_or_else(|p| p.into_inner()) = format!(
                            "{name} after {:.1} s: {}",
                            sent.elapsed().as_secs_f64(),
                            String::from_utf8_lossy(&output.stderr)
                        );
                    }
                    writes
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(Write {
                            n,
                            sent,
                            answered: Instant::now(),
                            acked,
                        });
                    if !acked {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    n += 1;
                }
            })
        };
        Load {
            stop,
            writes,
            last_error,
            thread: Some(thread),
        }
    }

    /// Acknowledged so far.
    fn acked(&self) -> usize {
        let writes = self.writes.lock().unwrap_or_else(|p| p.into_inner());
        writes.iter().filter(|w| w.acked).count()
    }

    /// Stops it; returns every write it made.
    fn finish(mut self) -> Vec<Write> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the load");
        }
        self.writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A failed test stops its load too, so that the hosts (and their daemons) are dropped; a
/// load that panicked has already said why.
impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn put(hosts: &Hosts, node: &str, name: &str, bytes: &[u8]) -> Output {
    use std::io::Write;
    let mut child = hosts
        .coffer(node, &["obj", "put", POOL, name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("put");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(bytes)
        .expect("write");
    child.wait_with_output().expect("put")
}

/// Waits until at least `more` further writes than `from` are acknowledged.
fn wait_acked(hosts: &Hosts, load: &Load, from: usize, more: usize, what: &str) {
    let start = Instant::now();
    while load.acked() < from + more {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{what}: {} writes acknowledged in 90 s; the last refused: {}\n{}",
            load.acked() - from,
            load.last_error.lock().unwrap_or_else(|p| p.into_inner()),
            hosts.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What one trial does to the cluster while the load writes.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Host `host` cut off for less than the monitors' down grace (6 s): writes to its
    /// PGs pause, then go on.
    BriefCut { host: usize, millis: u64 },
    /// Two hosts cut off briefly: below min_size, and the monitors without a majority.
    BriefCutTwo { pair: [usize; 2], millis: u64 },
    /// A host cut off until the monitors mark its OSDs down; writes go on on the others.
    LongCut { host: usize },
    /// OSD number `osd` killed with SIGKILL, and started again after a pause.
    Kill { osd: usize, millis: u64 },
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::BriefCut { host, millis } => write!(f, "host {host} cut off for {millis} ms"),
            Fault::BriefCutTwo { pair, millis } => {
                write!(
                    f,
                    "hosts {} and {} cut off for {millis} ms",
                    pair[0], pair[1]
                )
            }
            Fault::LongCut { host } => write!(f, "host {host} cut off until marked down"),
            Fault::Kill { osd, millis } => write!(f, "osd.{osd} killed for {millis} ms"),
        }
    }
}

/// The trials of a run: the host that holds no first monitor, then the first monitor's
/// (a primary of some PGs), each cut off until marked down; then faults drawn from `seed`.
fn schedule(seed: u64, osds: usize) -> Vec<Fault> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut trials = vec![Fault::LongCut { host: 3 }, Fault::LongCut { host: 1 }];
    while trials.len() < TRIALS {
        let millis = rng.random_range(1500..3000);
        let host = rng.random_range(1..=HOSTS);
        trials.push(match rng.random_range(0..100) {
            0..35 => Fault::BriefCut { host, millis },
            35..70 => Fault::Kill {
                osd: rng.random_range(0..osds),
                millis: rng.random_range(200..3000),
            },
            70..85 => Fault::BriefCutTwo {
                pair: [host, host % HOSTS + 1],
                millis,
            },
            _ => Fault::LongCut { host },
        });
    }
    trials
}

fn clean(status: &serde_json::Value) -> bool {
    common::all_clean(status)
        && status["osds"]["up"].as_u64() == Some((HOSTS * OSDS_PER_HOST) as u64)
}

#[test]
fn three_hosts_keep_acknowledged_writes_through_host_failures() {
    let hosts = Hosts::new();
    let (h1, client) = (hosts.host(1), hosts.client());

    // docs/deploy.md, step 2: the configuration and keys, made on host 1.
    let mons: Vec<String> = (0..HOSTS).map(|i| hosts.addr_of(i)).collect();
    let mut init = vec![
        "init".to_string(),
        "--data".into(),
        hosts.data(&h1).display().to_string(),
    ];
    for addr in &mons {
        init.extend(["--mon".to_string(), addr.clone()]);
    }
    init.extend(["--store-gib".to_string(), "1".into()]);
    let made = run_ok("coffer init", Command::new(COFFER).args(&init));
    assert!(made.contains("mon.c at"), "{made}");
    let refused = Command::new(COFFER)
        .args(&init)
        .output()
        .expect("init again");
    assert!(
        !refused.status.success(),
        "a second init over the first must be refused"
    );
    // ... copied to the others: the configuration everywhere, each monitor's keyring to its
    // host, the admin's keyring to the hosts that make OSDs and to the client.
    let made_in = hosts.data(&h1);
    for (i, node) in hosts.nodes().into_iter().enumerate() {
        let to = hosts.data(&node);
        if node != h1 {
            copy(&made_in.join("coffer.toml"), &to.join("coffer.toml"));
            copy(
                &made_in.join("client.admin.keyring"),
                &to.join("client.admin.keyring"),
            );
            if i < HOSTS {
                let mon = format!("mon.{}", char::from(b'a' + i as u8));
                copy(
                    &made_in.join(&mon).join("keyring"),
                    &to.join(&mon).join("keyring"),
                );
            }
        }
    }
    // Step 3: the monitors, by the unit's command line.
    for i in 0..HOSTS {
        let letter = char::from(b'a' + i as u8).to_string();
        hosts.start_unit(
            &hosts.host(i + 1),
            "coffer-mon@.service",
            &letter,
            &format!("mon.{letter}"),
        );
    }
    hosts.wait_status("the monitors' quorum", Duration::from_secs(60), |s| {
        !s["leader"].is_null()
    });
    // Step 4: two OSDs per host, made there and run by the unit's command line.
    let mut osd_hosts = Vec::new();
    for h in 1..=HOSTS {
        let node = hosts.host(h);
        for _ in 0..OSDS_PER_HOST {
            let said = hosts.ok(&node, &["osd", "create", "--host", &format!("node{h}")]);
            let id: String = said
                .strip_prefix("osd.")
                .and_then(|rest| rest.split_whitespace().next())
                .unwrap_or_else(|| panic!("osd create said {said}"))
                .to_string();
            hosts.start_unit(&node, "coffer-osd@.service", &id, &format!("osd.{id}"));
            osd_hosts.push((id, h));
        }
    }
    hosts.wait_status("every OSD up", Duration::from_secs(60), |s| {
        s["osds"]["up"].as_u64() == Some((HOSTS * OSDS_PER_HOST) as u64)
    });
    let listing: serde_json::Value =
        serde_json::from_str(&hosts.ok(&client, &["osd", "ls", "--json"])).expect("osd ls");
    for osd in listing.as_array().expect("OSDs") {
        let id = osd["id"].as_u64().expect("id").to_string();
        let h = osd_hosts
            .iter()
            .find(|(i, _)| *i == id)
            .expect("an OSD made here")
            .1;
        assert_eq!(osd["host"], format!("node{h}"), "{osd}");
        let addr = osd["addr"].as_str().expect("an address");
        assert!(
            addr.starts_with(&format!("{}:", hosts.addr_of(h - 1))),
            "{osd}"
        );
    }
    // Step 5: a pool with its copies on three hosts.
    hosts.ok(
        &client,
        &[
            "pool", "create", POOL, "--size", "3", "--domain", "host", "--pg-num", "16",
        ],
    );
    hosts.wait_status("the pool clean", Duration::from_secs(90), clean);

    let hosts = Arc::new(hosts);
    let osds: Vec<String> = osd_hosts
        .iter()
        .map(|(id, _)| format!("osd.{id}"))
        .collect();
    for (i, name) in osds.iter().enumerate() {
        assert_eq!(
            *name,
            format!("osd.{i}"),
            "a new cluster numbers its OSDs from 0"
        );
    }
    let seed = std::env::var("COFFER_TRIALS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    let trials = schedule(seed, osds.len());
    eprintln!(
        "{} trials, seed {seed} (COFFER_TRIALS_SEED={seed} runs the same schedule)",
        trials.len()
    );
    let load = Load::start(&hosts, 0);
    wait_acked(&hosts, &load, 0, 5, "before the first trial");
    let mut below_min_size = Vec::new();
    for (i, fault) in trials.iter().enumerate() {
        let (began, before) = (Instant::now(), load.acked());
        match *fault {
            Fault::BriefCut { host, millis } => {
                hosts.link(&hosts.host(host), false);
                std::thread::sleep(Duration::from_millis(millis));
                hosts.link(&hosts.host(host), true);
            }
            Fault::BriefCutTwo { pair, millis } => {
                for h in pair {
                    hosts.link(&hosts.host(h), false);
                }
                let cut = Instant::now();
                std::thread::sleep(Duration::from_millis(millis));
                below_min_size.push((cut, Instant::now()));
                for h in pair {
                    hosts.link(&hosts.host(h), true);
                }
            }
            Fault::LongCut { host } => {
                hosts.link(&hosts.host(host), false);
                let up = (HOSTS - 1) * OSDS_PER_HOST;
                hosts.wait_status(
                    &format!("trial {}, {fault}: its OSDs seen down", i + 1),
                    Duration::from_secs(60),
                    |s| s["osds"]["up"].as_u64() == Some(up as u64),
                );
                wait_acked(&hosts, &load, load.acked(), 5, &fault.to_string());
                hosts.link(&hosts.host(host), true);
            }
            Fault::Kill { osd, millis } => {
                let killed = hosts.kill(&osds[osd]);
                std::thread::sleep(Duration::from_millis(millis));
                hosts.restart(&killed);
            }
        }
        let healed = Instant::now();
        hosts.wait_status(
            &format!("clean after trial {}, {fault}", i + 1),
            Duration::from_secs(120),
            clean,
        );
        wait_acked(
            &hosts,
            &load,
            load.acked(),
            3,
            &format!("after trial {}", i + 1),
        );
        eprintln!(
            "trial {}/{}: {fault}: {} writes acknowledged in {:.1} s, clean {:.1} s after the fault ended",
            i + 1,
            trials.len(),
            load.acked() - before,
            began.elapsed().as_secs_f64(),
            (healed.elapsed()).as_secs_f64()
        );
    }
    let writes = load.finish();
    // Below min_size nothing is acknowledged: no write sent while two hosts were cut off
    // and answered before they returned.
    for w in &writes {
        for (cut, healed) in &below_min_size {
            assert!(
                !(w.acked && w.sent >= *cut && w.answered <= *healed),
                "o{} was acknowledged while two hosts of three were cut off",
                w.n
            );
        }
    }
    let mut acknowledged: Vec<usize> = writes.iter().filter(|w| w.acked).map(|w| w.n).collect();
    let mut unacknowledged: Vec<usize> = writes.iter().filter(|w| !w.acked).map(|w| w.n).collect();
    let mut next = writes.iter().map(|w| w.n).max().expect("writes") + 1;

    // Two hosts of three for longer: no monitor majority, one copy of each PG. Nothing is
    // acknowledged.
    hosts.link(&hosts.host(2), false);
    hosts.link(&hosts.host(3), false);
    std::thread::sleep(Duration::from_secs(2));
    let lone = hosts.host(1);
    for n in next..next + 2 {
        let output = put(&hosts, &lone, &format!("o{n}"), &content(n));
        assert!(
            !output.status.success(),
            "a write was acknowledged with one host of three:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
        unacknowledged.push(n);
    }
    next += 2;
    hosts.link(&hosts.host(2), true);
    hosts.link(&hosts.host(3), true);
    hosts.wait_status(
        "clean after two hosts returned",
        Duration::from_secs(120),
        clean,
    );
    let load = Load::start(&hosts, next);
    wait_acked(&hosts, &load, 0, 5, "after two hosts returned");
    for w in load.finish() {
        if w.acked {
            acknowledged.push(w.n);
        } else {
            unacknowledged.push(w.n);
        }
    }

    // Every acknowledged write reads back with its bytes; one that was not is whole or
    // absent, never torn; and every copy agrees.
    for n in &acknowledged {
        let got = hosts
            .coffer(&client, &["obj", "get", POOL, &format!("o{n}")])
            .output()
            .expect("get");
        assert!(
            got.status.success(),
            "o{n}: {}",
            String::from_utf8_lossy(&got.stderr)
        );
        assert!(got.stdout == content(*n), "o{n} read back other bytes");
    }
    for n in &unacknowledged {
        let got = hosts
            .coffer(&client, &["obj", "get", POOL, &format!("o{n}")])
            .output()
            .expect("get");
        let said = String::from_utf8_lossy(&got.stderr);
        assert!(
            (got.status.success() && got.stdout == content(*n))
                || (!got.status.success() && said.contains("no such object")),
            "o{n}, not acknowledged, reads back {} bytes: {said}",
            got.stdout.len()
        );
    }
    let scrub = hosts.ok(&client, &["pool", "scrub", POOL]);
    assert!(scrub.contains(" 0 inconsistent, 0 repaired"), "{scrub}");
    let scrubbed: usize = scrub
        .split_once(": ")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("a count of objects in {scrub}"));
    assert!(scrubbed >= acknowledged.len(), "{scrub}");
    eprintln!(
        "{} trials: {} writes acknowledged, all read back, 0 lost; {} not acknowledged, none \
         torn; scrub: {scrubbed} objects, 0 inconsistent",
        trials.len(),
        acknowledged.len(),
        unacknowledged.len()
    );
}
