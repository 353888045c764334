//! `coffer up`'s supervision of the daemons it runs: a daemon that exits without being asked
//! to is started again after a pause that doubles with each quick crash, and given up on
//! after [`GIVE_UP_AFTER`] quick crashes in a row. `coffer up` answers on a Unix socket in
//! the cluster's directory ([`SOCKET`]): `coffer daemon ls|restart|stop|start` and `coffer
//! status` ask it there for each daemon's state, crashes and last exit.
//!
//! The policy ([`after_crash`], [`recent_crashes`], [`warnings`]) is pure; [`Supervisor`] is
//! the shell that owns the processes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The socket `coffer up` answers on, in the cluster's directory.
pub const SOCKET: &str = "up.sock";
/// The pause before the first restart after a crash; it doubles with each quick crash.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest pause before a restart.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A daemon that ran this long before it exited counts as healthy: its next crash starts
/// the pauses again from [`FIRST_BACKOFF`].
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// Quick crashes in a row after which a daemon is left stopped (a store that cannot open,
/// a port taken): restarting it again would only fill its log.
const GIVE_UP_AFTER: u32 = 6;
/// Crashes within this long make `coffer status` warn.
const RECENT_NS: i128 = 3600 * 1_000_000_000;
/// How long a daemon has to stop after SIGTERM before it is killed.
const STOP_WAIT: Duration = Duration::from_secs(15);
/// How long `coffer daemon` and `coffer status` wait for `coffer up` to answer.
const ASK_WAIT: Duration = Duration::from_secs(30);

/// What to do after a daemon's crash, the `quick`th in a row (1 for the first): the pause
/// before starting it again, or `None` to leave it stopped.
pub fn after_crash(quick: u32) -> Option<Duration> {
    assert!(quick >= 1, "a crash is at least the first");
    if quick >= GIVE_UP_AFTER {
        return None;
    }
    Some(
        FIRST_BACKOFF
            .saturating_mul(1 << (quick - 1))
            .min(MAX_BACKOFF),
    )
}

/// How many of `crashes` (times in ns since 1970) fall within the hour before `now_ns`.
pub fn recent_crashes(crashes: &[i128], now_ns: i128) -> usize {
    crashes
        .iter()
        .filter(|&&at| now_ns - at < RECENT_NS)
        .count()
}

/// How a daemon exited, as `coffer up` saw it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Exit {
    pub at_ns: i128,
    /// `exited with status 1`, `killed by signal 9 (SIGKILL)`.
    pub how: String,
    /// The last line of its log, which usually says why; empty when it was killed by a
    /// signal that leaves no last word (SIGKILL, SIGTERM, SIGINT).
    pub log: String,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.how)?;
        if !self.log.is_empty() {
            write!(f, ": {}", self.log)?;
        }
        Ok(())
    }
}

/// Where a supervised daemon stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Running,
    /// Crashed; starts again after its pause.
    Restarting,
    /// Stopped by `coffer daemon stop`, or exited under `coffer up --no-restart`.
    Stopped,
    /// Crashed [`GIVE_UP_AFTER`] times in a row, each soon after starting.
    Failed,
}

impl Phase {
    fn word(self) -> &'static str {
        match self {
            Phase::Running => "running",
            Phase::Restarting => "restarting",
            Phase::Stopped => "stopped",
            Phase::Failed => "failed",
        }
    }
}

/// One daemon as `coffer daemon ls` and `coffer status` show it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DaemonInfo {
    pub name: String,
    pub phase: Phase,
    pub pid: Option<u32>,
    /// When it was last started (running) or last changed phase.
    pub since_ns: i128,
    /// Seconds until it is started again (restarting).
    pub restart_in_secs: Option<u64>,
    /// Exits nobody asked for since `coffer up` started, and their times.
    pub crashes: Vec<i128>,
    pub last_exit: Option<Exit>,
}

/// The health warnings of supervised daemons: each that crashed within the last hour, and
/// each given up on.
pub fn warnings(daemons: &[DaemonInfo], now_ns: i128) -> Vec<String> {
    let mut out = Vec::new();
    for daemon in daemons {
        let recent = recent_crashes(&daemon.crashes, now_ns);
        if recent == 0 && daemon.phase != Phase::Failed {
            continue;
        }
        let last = daemon
            .last_exit
            .as_ref()
            .map(|exit| format!("last at {}: {exit}", crate::text::date(exit.at_ns)))
            .unwrap_or_default();
        let times = crate::text::count(recent as u64, "time", "times");
        let line = match daemon.phase {
            Phase::Failed => format!(
                "{} failed: crashed {} in a row soon after starting ({last}); `coffer daemon \
                 start {}` once its log says why",
                daemon.name,
                crate::text::count(u64::from(GIVE_UP_AFTER), "time", "times"),
                daemon.name
            ),
            Phase::Running => format!(
                "{} crashed {times} in the last hour ({last}); coffer up restarted it",
                daemon.name
            ),
            Phase::Restarting => format!(
                "{} crashed {times} in the last hour ({last}); coffer up restarts it in {} s",
                daemon.name,
                daemon.restart_in_secs.unwrap_or_default()
            ),
            Phase::Stopped => format!(
                "{} crashed {times} in the last hour ({last}) and is stopped: `coffer daemon \
                 start {}` starts it",
                daemon.name, daemon.name
            ),
        };
        out.push(line);
    }
    out
}

/// What `coffer daemon` asks `coffer up`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    List,
    Restart(String),
    Stop(String),
    Start(String),
}

/// `coffer up`'s answer: every daemon after the request, or why it was refused.
pub type Reply = Result<Vec<DaemonInfo>, String>;

/// How to run one daemon.
struct Spec {
    name: String,
    args: Vec<String>,
    log: PathBuf,
}

struct Supervised {
    spec: Spec,
    child: Option<Child>,
    phase: Phase,
    started: Instant,
    since_ns: i128,
    /// Crashes in a row, each before [`HEALTHY_AFTER`].
    quick: u32,
    restart_at: Option<Instant>,
    crashes: Vec<i128>,
    last_exit: Option<Exit>,
}

/// The daemons `coffer up` started, by name, in the order started.
pub struct Supervisor {
    exe: PathBuf,
    conf: PathBuf,
    /// Whether a crashed daemon is started again (`coffer up --no-restart` says no).
    restart: bool,
    daemons: Vec<Supervised>,
}

impl Supervisor {
    pub fn new(exe: PathBuf, conf: PathBuf, restart: bool) -> Supervisor {
        Supervisor {
            exe,
            conf,
            restart,
            daemons: Vec::new(),
        }
    }

    /// Starts `coffer ARGS` as daemon `name`, its standard error appended to `log`.
    pub fn spawn(&mut self, name: &str, args: Vec<String>, log: &Path) -> Result<(), String> {
        let spec = Spec {
            name: name.to_string(),
            args,
            log: log.to_path_buf(),
        };
        let child = start(&self.exe, &self.conf, &spec)?;
        self.daemons.push(Supervised {
            spec,
            child: Some(child),
            phase: Phase::Running,
            started: Instant::now(),
            since_ns: now_ns(),
            quick: 0,
            restart_at: None,
            crashes: Vec::new(),
            last_exit: None,
        });
        Ok(())
    }

    /// Daemons that exited since the last look, by name; while `coffer up` starts the
    /// cluster, any exit ends it.
    pub fn exited(&mut self) -> Vec<(String, Exit)> {
        let mut gone = Vec::new();
        for daemon in &mut self.daemons {
            if let Some(exit) = daemon.reap() {
                gone.push((daemon.spec.name.clone(), exit));
            }
        }
        gone
    }

    /// Looks after every daemon once: records the ones that exited and decides when each
    /// starts again, and starts those whose pause is over. Returns what to tell the person
    /// running `coffer up`.
    pub fn tend(&mut self) -> Vec<String> {
        let mut news = Vec::new();
        let now = Instant::now();
        for daemon in &mut self.daemons {
            if let Some(exit) = daemon.reap() {
                let name = &daemon.spec.name;
                daemon.crashes.push(exit.at_ns);
                daemon.quick = if daemon.started.elapsed() < HEALTHY_AFTER {
                    daemon.quick + 1
                } else {
                    1
                };
                daemon.since_ns = exit.at_ns;
                let what = format!("coffer up: {name} {exit}");
                match (self.restart, after_crash(daemon.quick)) {
                    (false, _) => {
                        daemon.phase = Phase::Stopped;
                        news.push(format!(
                            "{what}; start it again with `{} --conf {} daemon start {name}`",
                            crate::up::command_name(),
                            self.conf.display()
                        ));
                    }
                    (true, Some(pause)) => {
                        daemon.phase = Phase::Restarting;
                        daemon.restart_at = Some(now + pause);
                        news.push(format!("{what}; restarting it in {} s", pause.as_secs()));
                    }
                    (true, None) => {
                        daemon.phase = Phase::Failed;
                        news.push(format!(
                            "{what}; it crashed {GIVE_UP_AFTER} times in a row soon after \
                             starting, so it stays stopped: `{} --conf {} daemon start {name}` \
                             once its log ({}) says why",
                            crate::up::command_name(),
                            self.conf.display(),
                            daemon.spec.log.display()
                        ));
                    }
                }
                daemon.last_exit = Some(exit);
            }
            if daemon.phase == Phase::Restarting && daemon.restart_at.is_some_and(|at| at <= now) {
                match start(&self.exe, &self.conf, &daemon.spec) {
                    Ok(child) => {
                        news.push(format!(
                            "coffer up: {} started again (pid {})",
                            daemon.spec.name,
                            child.id()
                        ));
                        daemon.running(child);
                    }
                    Err(why) => {
                        daemon.phase = Phase::Failed;
                        news.push(format!("coffer up: {why}"));
                    }
                }
            }
        }
        news
    }

    /// Carries out an operator's request.
    pub async fn handle(&mut self, request: Request) -> Reply {
        let (name, verb) = match &request {
            Request::List => return Ok(self.list()),
            Request::Restart(name) => (name, "restart"),
            Request::Stop(name) => (name, "stop"),
            Request::Start(name) => (name, "start"),
        };
        let known: Vec<&str> = self.daemons.iter().map(|d| d.spec.name.as_str()).collect();
        let Some(at) = self.daemons.iter().position(|d| &d.spec.name == name) else {
            return Err(format!(
                "no daemon {name} runs under this coffer up (it runs {})",
                known.join(", ")
            ));
        };
        let (exe, conf) = (self.exe.clone(), self.conf.clone());
        let daemon = &mut self.daemons[at];
        if matches!(request, Request::Restart(_) | Request::Stop(_)) {
            if let Some(child) = daemon.child.take() {
                stop_child(name, child).await;
            }
            daemon.phase = Phase::Stopped;
            daemon.restart_at = None;
            daemon.since_ns = now_ns();
        }
        if matches!(request, Request::Restart(_) | Request::Start(_)) && daemon.child.is_none() {
            let child =
                start(&exe, &conf, &daemon.spec).map_err(|why| format!("{verb} {name}: {why}"))?;
            daemon.running(child);
            daemon.quick = 0;
        }
        Ok(self.list())
    }

    fn list(&self) -> Vec<DaemonInfo> {
        let now = Instant::now();
        self.daemons
            .iter()
            .map(|d| DaemonInfo {
                name: d.spec.name.clone(),
                phase: d.phase,
                pid: d.child.as_ref().map(Child::id),
                since_ns: d.since_ns,
                restart_in_secs: d
                    .restart_at
                    .filter(|_| d.phase == Phase::Restarting)
                    .map(|at| at.saturating_duration_since(now).as_secs()),
                crashes: d.crashes.clone(),
                last_exit: d.last_exit.clone(),
            })
            .collect()
    }

    /// Stops every daemon: the front ends (the NBD server, the gateway, the metadata daemon)
    /// first, while the cluster can still take their last writes and lock release, then the
    /// OSDs and monitors together.
    pub fn stop(&mut self) {
        let (front, back): (Vec<_>, Vec<_>) = self
            .daemons
            .iter_mut()
            .filter_map(|d| Some((d.spec.name.clone(), d.child.take()?)))
            .partition(|(name, _)| name == "nbd" || name == "gw" || name.starts_with("mds."));
        stop_children(front);
        stop_children(back);
    }
}

impl Supervised {
    /// The daemon's exit, if it exited since the last look.
    fn reap(&mut self) -> Option<Exit> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        use std::os::unix::process::ExitStatusExt;
        let silent = matches!(
            status.signal(),
            Some(libc::SIGKILL | libc::SIGTERM | libc::SIGINT)
        );
        Some(Exit {
            at_ns: now_ns(),
            how: describe(status),
            log: if silent {
                String::new()
            } else {
                last_log_line(&self.spec.log)
            },
        })
    }

    fn running(&mut self, child: Child) {
        self.child = Some(child);
        self.phase = Phase::Running;
        self.started = Instant::now();
        self.since_ns = now_ns();
        self.restart_at = None;
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop();
    }
}

fn start(exe: &Path, conf: &Path, spec: &Spec) -> Result<Child, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .map_err(|e| format!("{}: {e}", spec.log.display()))?;
    Command::new(exe)
        .arg("--conf")
        .arg(conf)
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", spec.name))
}

/// `exited with status 1`, `killed by signal 9 (SIGKILL)`.
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => {
            let name = match signal {
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGINT => " (SIGINT)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGBUS => " (SIGBUS)",
                _ => "",
            };
            format!("killed by signal {signal}{name}")
        }
        (None, None) => status.to_string(),
    }
}

/// The last line of a daemon's log, read from its end (logs grow for as long as a cluster
/// lives).
pub fn last_log_line(log: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL_BYTES: u64 = 4096;
    let Ok(mut file) = std::fs::File::open(log) else {
        return format!("no log at {}", log.display());
    };
    let length = file.metadata().map_or(0, |m| m.len());
    let mut tail = Vec::new();
    let read = file
        .seek(SeekFrom::Start(length.saturating_sub(TAIL_BYTES)))
        .and_then(|_| file.read_to_end(&mut tail));
    if read.is_err() {
        return format!("its log {} cannot be read", log.display());
    }
    String::from_utf8_lossy(&tail)
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("its log is empty")
        .trim()
        .to_string()
}

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// Sends SIGTERM and waits for the daemon to exit, killing it after [`STOP_WAIT`].
async fn stop_child(name: &str, mut child: Child) {
    terminate(&child);
    let deadline = Instant::now() + STOP_WAIT;
    while matches!(child.try_wait(), Ok(None)) {
        if Instant::now() >= deadline {
            tracing::warn!("{name} did not stop in {STOP_WAIT:?}; killing it");
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn terminate(child: &Child) {
    // SAFETY: kill(2) on a child's pid that has not been reaped; it cannot name another
    // process.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
}

/// Sends SIGTERM to every child, then waits for each (killing any still running after
/// [`STOP_WAIT`]).
fn stop_children(mut children: Vec<(String, Child)>) {
    for (_, child) in children.iter().rev() {
        terminate(child);
    }
    let deadline = Instant::now() + STOP_WAIT;
    for (name, child) in children.iter_mut().rev() {
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    crate::daemon::tell(&format!(
                        "coffer up: {name} did not stop in {STOP_WAIT:?}; killing it"
                    ));
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
            }
        }
    }
}

/// Refuses, before anything starts, a data directory whose control socket's path is longer
/// than a Unix socket's address holds.
pub fn check_socket_path(dir: &Path) -> Result<(), String> {
    const SUN_PATH_BYTES: usize = 108;
    let path = dir.join(SOCKET);
    let length = path.as_os_str().len();
    if length >= SUN_PATH_BYTES {
        return Err(format!(
            "{} is {length} bytes long, and a Unix socket's path holds at most {}: give \
             --data a shorter directory",
            path.display(),
            SUN_PATH_BYTES - 1
        ));
    }
    Ok(())
}

/// Removes the control socket of a `coffer up` that is stopping.
pub fn unlisten(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(SOCKET));
}

/// Listens on [`SOCKET`] in `dir` and passes each request, with where to answer, to `up`'s
/// loop. A socket left by a `coffer up` that was killed is replaced (the data directory's
/// lock says no other one runs).
pub fn listen(
    dir: &Path,
) -> Result<tokio::sync::mpsc::Receiver<(Request, tokio::sync::oneshot::Sender<Reply>)>, String> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(SOCKET);
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)
        .map_err(|e| format!("listening on {}: {e}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let (send, receive) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, for example: the next connection may do.
                    tracing::warn!("{}: {e}", SOCKET);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let send = send.clone();
            tokio::spawn(async move {
                if let Err(why) = answer(stream, send).await {
                    tracing::debug!(%why, "a coffer daemon request failed");
                }
            });
        }
    });
    Ok(receive)
}

async fn answer(
    stream: tokio::net::UnixStream,
    up: tokio::sync::mpsc::Sender<(Request, tokio::sync::oneshot::Sender<Reply>)>,
) -> Result<(), String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    BufReader::new(read)
        .read_line(&mut line)
        .await
        .map_err(|e| e.to_string())?;
    let reply: Reply = match serde_json::from_str::<Request>(&line) {
        Ok(request) => {
            let (tell, told) = tokio::sync::oneshot::channel();
            up.send((request, tell))
                .await
                .map_err(|_| "coffer up is stopping".to_string())?;
            told.await
                .map_err(|_| "coffer up is stopping".to_string())?
        }
        Err(e) => Err(format!("not a request: {e}")),
    };
    let mut text = serde_json::to_string(&reply).map_err(|e| e.to_string())?;
    text.push('\n');
    write
        .write_all(text.as_bytes())
        .await
        .map_err(|e| e.to_string())
}

/// Asks the `coffer up` running the cluster in `dir`. `Ok(None)` when none runs it (no
/// socket, or nobody listening on it).
pub fn ask(dir: &Path, request: &Request) -> Result<Option<Vec<DaemonInfo>>, String> {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    let path = dir.join(SOCKET);
    let mut stream = match UnixStream::connect(&path) {
        Ok(stream) => stream,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let wire = |e: std::io::Error| format!("asking coffer up at {}: {e}", path.display());
    stream.set_read_timeout(Some(ASK_WAIT)).map_err(wire)?;
    let mut text = serde_json::to_string(request).map_err(|e| e.to_string())?;
    text.push('\n');
    stream.write_all(text.as_bytes()).map_err(wire)?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).map_err(wire)?;
    let reply: Reply = serde_json::from_str(&line)
        .map_err(|e| format!("coffer up at {} answered {line:?}: {e}", path.display()))?;
    reply.map(Some)
}

#[derive(clap::Subcommand)]
pub enum DaemonCommand {
    /// Every daemon `coffer up` runs: state, pid, since when, crashes, last exit.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Stops a daemon (SIGTERM) and starts it again, logging where it did.
    Restart { name: String },
    /// Stops a daemon and keeps it stopped until `coffer daemon start`.
    Stop { name: String },
    /// Starts a stopped or failed daemon.
    Start { name: String },
}

/// `coffer daemon ...`: asks the `coffer up` that runs the cluster of `conf`.
pub fn command(conf: &Path, command: DaemonCommand) -> Result<(), String> {
    let conf_data = client::Conf::load(conf).map_err(|e| e.to_string())?;
    let dir = &conf_data.dir;
    let (request, as_json) = match command {
        DaemonCommand::Ls { json } => (Request::List, json),
        DaemonCommand::Restart { name } => (Request::Restart(name), false),
        DaemonCommand::Stop { name } => (Request::Stop(name), false),
        DaemonCommand::Start { name } => (Request::Start(name), false),
    };
    let daemons = ask(dir, &request)?.ok_or_else(|| {
        format!(
            "no `coffer up` runs the cluster in {} (nothing answers on {}); daemons started \
             by hand are stopped and started by hand",
            dir.display(),
            dir.join(SOCKET).display()
        )
    })?;
    if as_json {
        return crate::admin::json(&daemons);
    }
    match &request {
        Request::List => print!("{}", table(&daemons)),
        Request::Restart(name) | Request::Start(name) => {
            let pid = daemons.iter().find(|d| &d.name == name).and_then(|d| d.pid);
            println!(
                "{name}: running (pid {})",
                pid.map_or("?".into(), |p| p.to_string())
            );
        }
        Request::Stop(name) => println!("{name}: stopped; `coffer daemon start {name}` starts it"),
    }
    Ok(())
}

/// `coffer daemon ls` as a table.
fn table(daemons: &[DaemonInfo]) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "{:<8} {:<11} {:<8} {:<24} {:<8} LAST EXIT\n",
        "DAEMON", "STATE", "PID", "SINCE", "CRASHES"
    );
    for d in daemons {
        let state = match d.restart_in_secs {
            Some(secs) => format!("{} in {secs} s", d.phase.word()),
            None => d.phase.word().to_string(),
        };
        let last = d.last_exit.as_ref().map_or("-".to_string(), |e| {
            format!("{} {e}", crate::text::date(e.at_ns))
        });
        let _ = writeln!(
            out,
            "{:<8} {:<11} {:<8} {:<24} {:<8} {last}",
            d.name,
            state,
            d.pid.map_or("-".into(), |p| p.to_string()),
            crate::text::date(d.since_ns),
            d.crashes.len(),
        );
    }
    out
}

/// The `daemons:` line of `coffer status`, with the health warnings of supervised daemons,
/// when a `coffer up` runs the cluster in `dir`.
pub fn status(dir: &Path) -> Option<(String, Vec<String>, Vec<DaemonInfo>)> {
    let daemons = ask(dir, &Request::List).ok()??;
    let now = now_ns();
    let running = daemons.iter().filter(|d| d.phase == Phase::Running).count();
    let mut line = format!("{running} of {} running under coffer up", daemons.len());
    for d in daemons.iter().filter(|d| d.phase != Phase::Running) {
        let _ =
            std::fmt::Write::write_fmt(&mut line, format_args!("; {} {}", d.name, d.phase.word()));
    }
    Some((line, warnings(&daemons, now), daemons))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_a_limit_then_give_up() {
        let pauses: Vec<Option<u64>> = (1..=GIVE_UP_AFTER)
            .map(|n| after_crash(n).map(|d| d.as_secs()))
            .collect();
        assert_eq!(pauses, [Some(1), Some(2), Some(4), Some(8), Some(16), None]);
        assert!(FIRST_BACKOFF.saturating_mul(1 << 10) > MAX_BACKOFF);
    }

    fn info(name: &str, phase: Phase, crashes: Vec<i128>) -> DaemonInfo {
        DaemonInfo {
            name: name.into(),
            phase,
            pid: None,
            since_ns: 0,
            restart_in_secs: None,
            last_exit: crashes.last().map(|&at_ns| Exit {
                at_ns,
                how: "killed by signal 9 (SIGKILL)".into(),
                log: "serving".into(),
            }),
            crashes,
        }
    }

    #[test]
    fn only_recent_crashes_and_failures_warn() {
        let hour = RECENT_NS;
        let now = 10 * hour;
        let daemons = [
            info("mon.a", Phase::Running, vec![]),
            info("osd.0", Phase::Running, vec![now - 2 * hour]),
            info(
                "osd.1",
                Phase::Running,
                vec![now - 2 * hour, now - 60, now - 1],
            ),
            info("osd.2", Phase::Failed, vec![now - 3 * hour]),
        ];
        let lines = warnings(&daemons, now);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("osd.1 crashed 2 times in the last hour"),
            "{lines:?}"
        );
        assert!(lines[0].contains("SIGKILL"), "{lines:?}");
        assert!(lines[1].starts_with("osd.2 failed"), "{lines:?}");
    }
}
