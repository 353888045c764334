//! A fresh `coffer up` cluster per bench configuration: started in its own directory,
//! measured (the CPU time of its daemons), stopped and removed when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use client::{Cluster, Conf};
use messenger::EntityName;

use super::cpus::{self, CpuList};

/// Options of every bench that runs on fresh clusters.
#[derive(clap::Args)]
pub struct FreshArgs {
    /// Also write every cell to this file as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Where the clusters are made; each is removed once its configuration is measured.
    #[arg(long, default_value = "/var/tmp/coffer-bench")]
    pub dir: PathBuf,
    /// Seconds per cell [default: 5, or 2 with --quick].
    #[arg(long)]
    pub seconds: Option<f64>,
    /// OSDs per cluster (the pool's size is min(3, OSDs)).
    #[arg(long, default_value_t = 3)]
    pub osds: u32,
    /// Store size of each OSD, in GiB (`coffer up --store-gib`): the disk needs this much
    /// free per OSD.
    #[arg(long, default_value_t = 16)]
    pub store_gib: u32,
    /// Each OSD's read cache, in MiB (`coffer up --osd-cache-mib`; 0: none) [default: the
    /// OSDs' own, from the machine's memory].
    #[arg(long)]
    pub osd_cache_mib: Option<u64>,
    /// CPUs the cluster's daemons run on, as `taskset -c` takes them (0, 0-1, 0,2); with
    /// --client-cpus, the clients and the cluster as on hosts of their own [default: any].
    #[arg(long, value_parser = cpus::parse_cpus)]
    pub cluster_cpus: Option<CpuList>,
    /// CPUs the clients run on: this process, and the workers and fio it starts
    /// [default: any].
    #[arg(long, value_parser = cpus::parse_cpus)]
    pub client_cpus: Option<CpuList>,
}

impl FreshArgs {
    /// Pins the clients (this process from now on) and records where each side runs; the
    /// first thing a bench does, before it starts any thread.
    pub fn place(&self) -> Result<(), String> {
        cpus::place(
            self.cluster_cpus.as_ref().map(|c| &c.0[..]),
            self.client_cpus.as_ref().map(|c| &c.0[..]),
        )
    }

    /// Each OSD's read cache, for the report: `read cache 1.5 GiB per OSD`.
    pub fn cache(&self) -> String {
        let bytes = self.osd_cache_mib.map_or_else(
            || store::default_cache_bytes(store::memory_bytes()),
            |mib| mib.saturating_mul(1 << 20),
        );
        match bytes {
            0 => "no read cache".into(),
            _ => format!("read cache {} per OSD", crate::text::approximate(bytes)),
        }
    }

    pub fn seconds(&self, quick: bool) -> f64 {
        self.seconds.unwrap_or(if quick { 2.0 } else { 5.0 })
    }
}

/// How long a fresh cluster may take to be up with every PG clean.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The four corners of at-rest by in-transit encryption, the baseline (none at rest, crc in
/// transit) first.
pub const CORNERS: [(&str, &str); 4] = [
    ("none", "crc"),
    ("none", "secure"),
    ("gcm", "crc"),
    ("gcm", "secure"),
];

/// The at-rest label of a configuration whose default pool is sealed at the edge: clients
/// seal the data chunks (`coffer up --seal edge`), and each OSD's store (`gcm`) seals what
/// is left to it, object names and metadata.
pub const EDGE: &str = "edge";

/// A configuration as `--configs` gives it, AT-REST/IN-TRANSIT (`gcm/secure`, `edge/secure`),
/// checked: AT-REST a store mode or [`EDGE`], IN-TRANSIT `crc` or `secure`.
pub fn fresh_config(config: &str) -> Result<(String, String), String> {
    let (at_rest, in_transit) = config
        .split_once('/')
        .ok_or_else(|| format!("--configs {config:?}: write AT-REST/IN-TRANSIT, gcm/secure"))?;
    if at_rest == EDGE {
        if in_transit != "secure" {
            return Err(format!(
                "--configs {EDGE}/{in_transit}: a pool sealed at the edge takes its key \
                 over secure links; use {EDGE}/secure"
            ));
        }
    } else {
        at_rest
            .parse::<store::Mode>()
            .map_err(|e| format!("--configs {at_rest}/{in_transit}: {e}"))?;
        if !matches!(in_transit, "crc" | "secure") {
            return Err(format!(
                "--configs {at_rest}/{in_transit}: in transit is crc or secure"
            ));
        }
    }
    Ok((at_rest.to_string(), in_transit.to_string()))
}

/// A `coffer up` cluster for one configuration, stopped and removed when dropped.
pub struct FreshCluster {
    dir: PathBuf,
    up: Child,
    cpus: Option<CpuList>,
}

impl Drop for FreshCluster {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child, which has not been reaped.
        unsafe { libc::kill(self.up.id() as libc::pid_t, libc::SIGINT) };
        let _ = self.up.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl FreshCluster {
    /// Starts `coffer up` in `dir`; with `nbd` (an address and an image size) the cluster
    /// exports its default image there, with `gw` (an address) it runs its S3 gateway there,
    /// and with `fs` its file system `fs` and metadata daemon, as `coffer up` does outside
    /// the benches. `at_rest` is a store mode, or [`EDGE`].
    pub fn start(
        dir: &Path,
        fresh: &FreshArgs,
        at_rest: &str,
        in_transit: &str,
        nbd: Option<(&str, u64)>,
        gw: Option<&str>,
        fs: bool,
    ) -> Result<Self, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let (store_mode, seal) = if at_rest == EDGE {
            ("gcm", "edge")
        } else {
            (at_rest, "osd")
        };
        let log = std::fs::File::create(dir.join("up.log")).map_err(|e| e.to_string())?;
        let mut command = Command::new(exe);
        if let Some(cpus) = &fresh.cluster_cpus {
            cpus::pin(&mut command, &cpus.0);
        }
        let mut up = command
            .args(["up", "--store-gib", &fresh.store_gib.to_string()])
            .args(["--osds", &fresh.osds.to_string()])
            .args(
                fresh
                    .osd_cache_mib
                    .map(|mib| vec!["--osd-cache-mib".to_string(), mib.to_string()])
                    .unwrap_or_default(),
            )
            .args(match nbd {
                Some((addr, size)) => vec![
                    "--nbd".to_string(),
                    addr.to_string(),
                    "--image-size".to_string(),
                    size.to_string(),
                ],
                None => vec!["--nbd".to_string(), "none".to_string()],
            })
            .args(["--gw", gw.unwrap_or("none")])
            .args(["--fs", if fs { crate::up::DEFAULT_FS } else { "none" }])
            .args(["--dashboard", "none"])
            .args(["--at-rest", store_mode, "--in-transit", in_transit])
            .args(["--seal", seal, "--data"])
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting coffer up: {e}"))?;
        let stdout = up.stdout.take().ok_or("no stdout from coffer up")?;
        let cluster = FreshCluster {
            dir: dir.to_path_buf(),
            up,
            cpus: fresh.cluster_cpus.clone(),
        };
        if let Some(cpus) = &fresh.cluster_cpus {
            cpus::check(cluster.up.id(), &cpus.0)?;
        }
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        let started = lines.any(|line| line.starts_with("coffer: cluster"));
        // The rest of what `coffer up` says is read and dropped, so its pipe never fills
        // or closes under it while the cluster runs.
        std::thread::spawn(move || lines.for_each(drop));
        if !started {
            return Err(format!(
                "coffer up did not start; see {}",
                dir.join("up.log").display()
            ));
        }
        Ok(cluster)
    }

    /// A cluster with no front end for `bench` (`cluster`, `image`, ...), in a directory of
    /// its own under `--dir`.
    pub fn for_bench(
        bench: &str,
        fresh: &FreshArgs,
        at_rest: &str,
        in_transit: &str,
    ) -> Result<Self, String> {
        let dir = fresh.dir.join(format!(
            "{bench}-{}-{at_rest}-{in_transit}",
            std::process::id()
        ));
        FreshCluster::start(&dir, fresh, at_rest, in_transit, None, None, false)
    }

    /// Makes `command`, a server the bench starts beside the cluster, run on the cluster's
    /// CPUs (`--cluster-cpus`).
    pub fn pin(&self, command: &mut Command) {
        if let Some(cpus) = &self.cpus {
            cpus::pin(command, &cpus.0);
        }
    }

    pub fn conf_path(&self) -> PathBuf {
        self.dir.join(client::conf::CONF_FILE)
    }

    pub fn conf(&self) -> Result<Conf, String> {
        Conf::load(&self.conf_path()).map_err(|e| e.to_string())
    }

    /// CPU seconds used so far by the monitor and OSD processes.
    pub fn cpu_seconds(&self) -> f64 {
        std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                name.starts_with("mon.") || name.starts_with("osd.")
            })
            .map(|entry| pid_file_cpu_seconds(&entry.path().join("pid")))
            .sum()
    }

    /// CPU seconds used so far by the daemon whose directory is `name` (`gw`, `nbd`).
    pub fn daemon_cpu_seconds(&self, name: &str) -> f64 {
        pid_file_cpu_seconds(&self.dir.join(name).join("pid"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// CPU seconds (user and system) used so far by the process whose pid is in `pid_file`;
/// 0 if there is none.
pub fn pid_file_cpu_seconds(pid_file: &Path) -> f64 {
    std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|pid| pid.trim().parse().ok())
        .map_or(0.0, pid_cpu_seconds)
}

/// CPU seconds (user and system) used so far by process `pid`; 0 if it is gone.
pub fn pid_cpu_seconds(pid: u32) -> f64 {
    // SAFETY: sysconf with a valid name has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name: state is the 3rd field, utime the 14th.
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |i: usize| fields.get(i - 3).and_then(|v| v.parse::<f64>().ok());
    (field(14).unwrap_or(0.0) + field(15).unwrap_or(0.0)) / ticks
}

/// A connection to the cluster as client.admin.
pub async fn connect_admin(conf: &Conf) -> Result<Cluster, String> {
    let name: EntityName = "client.admin".parse().map_err(|e| format!("{e}"))?;
    let identity =
        client::load_identity(&conf.keyring_path(&name), &name).map_err(|e| e.to_string())?;
    Cluster::connect(conf, &identity)
        .await
        .map_err(|e| e.to_string())
}

/// `count` connections as client.admin, each with a handle on pool `pool`.
pub async fn connect_clients(
    conf: &Conf,
    count: usize,
    pool: &str,
) -> Result<Vec<client::Pool>, String> {
    let mut pools = Vec::new();
    for _ in 0..count {
        let cluster = connect_admin(conf).await?;
        pools.push(cluster.pool(pool).await.map_err(|e| e.to_string())?);
    }
    Ok(pools)
}

/// The default pool, as client.admin, once every PG is clean.
pub async fn clean_default_pool(conf: &Conf) -> Result<client::Pool, String> {
    let admin = connect_admin(conf).await?;
    wait_clean(&admin).await?;
    admin
        .pool(crate::up::DEFAULT_POOL)
        .await
        .map_err(|e| e.to_string())
}

pub async fn wait_clean(admin: &Cluster) -> Result<(), String> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let status = admin.status().await.map_err(|e| e.to_string())?;
        let total: u64 = status.pgs.values().sum();
        if total > 0 && status.pgs.get("active+clean") == Some(&total) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "PGs not clean after {START_TIMEOUT:?}: {:?}",
                status.pgs
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
