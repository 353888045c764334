//! `coffer up`: a whole cluster on this machine, from nothing or from where it stopped. It
//! creates the cluster's identity and keys, one monitor and N OSDs (each its own process),
//! a default pool with an image served over NBD, an S3 gateway, and a file system with its
//! metadata daemon, then stays in the foreground until Ctrl-C stops everything.

use std::path::{Path, PathBuf};
use std::time::Duration;

use client::conf::{
    Conf, DashboardSection, GwSection, NbdSection, CONF_FILE, DEFAULT_DATA_DIR, GW_POOL_DEFAULT,
};
use client::{load_identity, Cluster};
use map::auth::Caps;
use messenger::message::{Command as MonCommand, MonReply};
use messenger::EntityName;

use crate::daemon::{self, SEED_FILE};
use crate::supervise::Supervisor;

/// The pool `coffer up` creates in a new cluster.
pub const DEFAULT_POOL: &str = "data";
/// The image `coffer up` creates in the default pool and exports over NBD.
pub const DEFAULT_IMAGE: &str = "disk";
/// How long the first monitor may take to bootstrap a new cluster.
const BOOTSTRAP_WAIT: Duration = Duration::from_secs(60);
/// Most monitors a cluster is made with.
pub const MONS_MAX: u8 = 7;
/// The monitors' host name for OSDs made by `coffer up` (one machine).
const LOCAL_HOST: &str = "localhost";

#[derive(clap::Args)]
pub struct UpArgs {
    /// Where the cluster lives: configuration, keyrings, monitor and OSD data.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data: PathBuf,
    /// OSDs to run (a new cluster gets this many; an existing one gains any missing).
    #[arg(long, default_value_t = 3)]
    pub osds: u32,
    /// Monitors of a new cluster (1 to 7; an odd number survives the most failures).
    #[arg(long, default_value_t = 1)]
    pub mons: u8,
    #[command(flatten)]
    pub cluster: crate::init::ClusterArgs,
    /// Where the pools a new cluster starts with (the default pool and the S3 gateway's)
    /// seal their data: edge (clients, the NBD server and the gateway among them, seal 4 KiB
    /// chunks under the pool's data key; OSDs store them as they come and never hold the
    /// key) or osd (clients send plaintext over the links, each OSD's store seals it).
    /// Default: edge, the faster of the two (docs/benchmarks.md), unless the monitor links
    /// are crc: edge needs them secure.
    #[arg(long)]
    pub seal: Option<String>,
    /// Where a new cluster's NBD export of the default image listens, or `none`.
    #[arg(long, default_value = "127.0.0.1:10809")]
    pub nbd: String,
    /// Where a new cluster's S3 gateway listens (HTTPS), or `none`.
    #[arg(long, default_value = crate::gw::LISTEN_DEFAULT)]
    pub gw: String,
    /// Where a new cluster's web dashboard listens (HTTPS), or `none`.
    #[arg(long, default_value = crate::dashboard::LISTEN_DEFAULT)]
    pub dashboard: String,
    /// Size of the default image (data/disk), made when it does not exist.
    #[arg(long, default_value = "4G", value_parser = crate::text::parse_size)]
    pub image_size: u64,
    /// The file system a cluster gets when it has none (with its metadata daemon, mds.a),
    /// or `none`.
    #[arg(long, default_value = DEFAULT_FS)]
    pub fs: String,
    /// Leave a daemon that exits stopped (`coffer daemon start NAME` starts it again), for
    /// tests and debugging; by default coffer up restarts it after a pause.
    #[arg(long)]
    pub no_restart: bool,
}

/// The file system `coffer up` creates.
pub const DEFAULT_FS: &str = "fs";
/// The metadata daemon `coffer up` runs.
const MDS_ID: &str = "a";

pub fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    file.write_all(text.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// A loopback port for a daemon's address (`client::conf::free_loopback_port`).
pub fn free_loopback_port() -> Result<u16, String> {
    client::conf::free_loopback_port().map_err(|e| format!("choosing a loopback port: {e}"))
}

/// Writes the configuration, the monitor's and the admin's keyrings and the seed of a new
/// cluster in `dir`.
fn create(dir: &Path, args: &UpArgs) -> Result<Conf, String> {
    let listens = [
        ("--nbd", &args.nbd),
        ("--gw", &args.gw),
        ("--dashboard", &args.dashboard),
    ];
    for (option, value) in listens {
        if value != "none" {
            value
                .parse::<std::net::SocketAddr>()
                .map_err(|e| format!("{option} {value}: {e} (give an address, or none)"))?;
        }
    }
    args.cluster.check()?;
    crate::admin::seal_at_edge(args.seal.as_deref(), args.cluster.mon_transit() == "secure")?;
    if !(1..=MONS_MAX).contains(&args.mons) {
        return Err(format!("--mons {}: use 1 to {MONS_MAX}", args.mons));
    }
    let mut addrs = Vec::new();
    for _ in 0..args.mons {
        addrs.push(format!("127.0.0.1:{}", free_loopback_port()?));
    }
    let mut conf = crate::init::new_cluster(dir, &args.cluster, &addrs)?;
    conf.nbd = (args.nbd != "none").then(|| NbdSection {
        image: format!("{DEFAULT_POOL}/{DEFAULT_IMAGE}"),
        listen: args.nbd.clone(),
    });
    conf.gw = (args.gw != "none").then(|| GwSection {
        listen: args.gw.clone(),
        pool: GW_POOL_DEFAULT.into(),
        lifecycle_day_seconds: None,
        access_log_roll_seconds: None,
        region: None,
        part_min_bytes: None,
    });
    conf.dashboard = (args.dashboard != "none").then(|| DashboardSection {
        listen: args.dashboard.clone(),
    });
    conf.save(&dir.join(CONF_FILE)).map_err(|e| e.to_string())?;
    Ok(conf)
}

/// Holds an exclusive lock on the data directory while `up` runs.
fn lock(dir: &Path) -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd;
    let path = dir.join("up.lock");
    let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    // SAFETY: flock on a descriptor this function owns.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if locked != 0 {
        return Err(format!(
            "another `coffer up` is running on {} (it holds {})",
            dir.display(),
            path.display()
        ));
    }
    Ok(file)
}

/// OSD numbers that already have a directory (and keyring) in `dir`.
fn existing_osds(conf: &Conf) -> Vec<u32> {
    let mut ids: Vec<u32> = std::fs::read_dir(&conf.dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let id = name.strip_prefix("osd.")?.parse().ok()?;
            entry.path().join("keyring").exists().then_some(id)
        })
        .collect();
    ids.sort_unstable();
    ids
}

pub fn run(args: UpArgs) -> Result<(), String> {
    std::fs::create_dir_all(&args.data).map_err(|e| format!("{}: {e}", args.data.display()))?;
    let dir =
        std::fs::canonicalize(&args.data).map_err(|e| format!("{}: {e}", args.data.display()))?;
    let _lock = lock(&dir)?;
    crate::supervise::check_socket_path(&dir)?;
    let conf_path = dir.join(CONF_FILE);
    let fresh = !conf_path.exists();
    let mut conf = if fresh {
        create(&dir, &args)?
    } else {
        Conf::load(&conf_path).map_err(|e| e.to_string())?
    };
    let mon_names: Vec<String> = conf.mons.iter().map(|m| m.name.clone()).collect();
    crate::prometheus::assign(&mut conf, &conf_path, &mon_names)?;
    let edge =
        crate::admin::seal_at_edge(args.seal.as_deref(), crate::admin::mon_links_secure(&conf)?)?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut daemons = Supervisor::new(exe, conf_path.clone(), !args.no_restart);
    for mon in &conf.mons {
        let log = dir.join(&mon.name).join("log");
        daemons.spawn(
            &mon.name,
            vec!["mon".into(), "--name".into(), mon.name.clone()],
            &log,
        )?;
    }
    wait_bootstrap(&dir.join(&conf.mons[0].name).join(SEED_FILE), &mut daemons)?;
    let admin_name: EntityName = "client.admin".parse().map_err(|e| format!("{e}"))?;
    let admin =
        load_identity(&conf.keyring_path(&admin_name), &admin_name).map_err(|e| e.to_string())?;
    let runtime = daemon::runtime()?;
    let (cluster, ids) = runtime.block_on(async {
        let cluster = Cluster::connect(&conf, &admin)
            .await
            .map_err(|e| format!("reaching the monitor: {e}"))?;
        let mut ids = existing_osds(&conf);
        while (ids.len() as u32) < args.osds {
            ids.push(crate::admin::create_osd(&cluster, &conf, LOCAL_HOST).await?);
        }
        Ok::<_, String>((cluster, ids))
    })?;
    let mut others: Vec<String> = ids.iter().map(|id| format!("osd.{id}")).collect();
    others.extend(conf.nbd.is_some().then(|| "nbd".to_string()));
    others.extend(conf.gw.is_some().then(|| "gw".to_string()));
    if args.fs != "none" {
        others.push(format!("mds.{MDS_ID}"));
    }
    crate::prometheus::assign(&mut conf, &conf_path, &others)?;
    let conf = conf;
    let (pool_line, filesystems) = runtime.block_on(async {
        for id in &ids {
            let name = format!("osd.{id}");
            let log = daemon::osd_dir(&conf, *id).join("log");
            daemons.spawn(
                &name,
                vec!["osd".into(), "--id".into(), id.to_string()],
                &log,
            )?;
        }
        wait_osds_started(&cluster, &conf, &ids, &mut daemons).await?;
        if cluster.map().pools.is_empty() {
            crate::admin::create_pool(&cluster, DEFAULT_POOL, crate::admin::DEFAULT_PG_NUM, edge)
                .await?;
        }
        if let Some(nbd) = &conf.nbd {
            ensure_image(&cluster, &nbd.image, args.image_size).await?;
            let dir = conf.dir.join("nbd");
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            // libnbd's `tls-certificates` looks for the authority as ca-cert.pem.
            use crate::image::{NBD_TLS_CA, NBD_TLS_CERT, NBD_TLS_KEY};
            let names = [NBD_TLS_CA, NBD_TLS_KEY, NBD_TLS_CERT];
            ensure_certificate(&dir.join(NBD_TLS_DIR), &nbd.listen, "NBD", names)?;
            daemons.spawn("nbd", nbd_args(&conf, nbd, &dir), &dir.join("log"))?;
        }
        if let Some(gw) = &conf.gw {
            let pool_exists = cluster.map().pools.values().any(|p| p.name == gw.pool);
            if !pool_exists {
                crate::admin::create_pool(&cluster, &gw.pool, crate::admin::DEFAULT_PG_NUM, edge)
                    .await?;
            }
            let dir = conf.dir.join(crate::gw::GW_DIR);
            use gateway::tls::{CA_FILE, CERT_FILE, KEY_FILE};
            ensure_certificate(&dir, &gw.listen, "gateway", [CA_FILE, KEY_FILE, CERT_FILE])?;
            daemons.spawn("gw", gw_args(&conf, &dir), &dir.join("log"))?;
        }
        if let Some(dashboard) = &conf.dashboard {
            let dir = crate::dashboard::dir(&conf);
            use gateway::tls::{CA_FILE, CERT_FILE, KEY_FILE};
            let names = [CA_FILE, KEY_FILE, CERT_FILE];
            ensure_certificate(&dir, &dashboard.listen, "dashboard", names)?;
            crate::dashboard::ensure_admin(&dir)?;
            daemons.spawn("dashboard", dashboard_args(&dir), &dir.join("log"))?;
        }
        if args.fs != "none" {
            if cluster.map().filesystems.is_empty() {
                crate::files::create(&cluster, &args.fs, None, None, edge).await?;
            }
            let mds = ensure_mds(&cluster, &conf).await?;
            daemons.spawn(
                mds.as_str(),
                mds_args(),
                &conf.dir.join(mds.as_str()).join("log"),
            )?;
        }
        let pools: Vec<String> = cluster
            .map()
            .pools
            .values()
            .map(|p| p.name.clone())
            .collect();
        let filesystems: Vec<String> = cluster.map().filesystems.keys().cloned().collect();
        Ok::<_, String>((
            format!("{} OSDs, pools: {}", ids.len(), pools.join(", ")),
            filesystems,
        ))
    })?;
    let scrape_config = crate::prometheus::write(&conf)?;
    let verb = if fresh { "created" } else { "resumed" };
    say(&announcement(
        &conf,
        &dir,
        &admin_name,
        &format!("{verb} ({pool_line})"),
        &filesystems,
        &scrape_config,
    ));
    let supervised = runtime.block_on(supervise(&mut daemons, &dir));
    crate::supervise::unlisten(&dir);
    supervised?;
    say("coffer: stopping\n");
    daemons.stop();
    say("coffer: stopped\n");
    Ok(())
}

/// Looks after the daemons until SIGINT or SIGTERM: restarts those that crash, and answers
/// `coffer daemon` and `coffer status` on the control socket.
async fn supervise(daemons: &mut Supervisor, dir: &Path) -> Result<(), String> {
    let mut requests = crate::supervise::listen(dir)?;
    let stop = daemon::stop_signal();
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            result = &mut stop => return result,
            Some((request, reply)) = requests.recv() => {
                let _ = reply.send(daemons.handle(request).await);
            }
            _ = tick.tick() => {
                for news in daemons.tend() {
                    daemon::tell(&news);
                }
            }
        }
    }
}

/// What `coffer up` prints once the cluster is up: where it lives and how to reach it.
fn announcement(
    conf: &Conf,
    dir: &Path,
    admin_name: &EntityName,
    state: &str,
    filesystems: &[String],
    scrape_config: &Path,
) -> String {
    use std::fmt::Write;
    let conf_path = dir.join(CONF_FILE);
    let mut text = format!("coffer: cluster {} {state}\n", conf.fsid);
    let _ = writeln!(text, "  data:     {}", dir.display());
    let _ = writeln!(
        text,
        "  config:   {}   (export COFFER_CONF={})",
        conf_path.display(),
        conf_path.display()
    );
    for mon in &conf.mons {
        let _ = writeln!(text, "  monitor:  {} at {}", mon.name, mon.addr);
    }
    let _ = writeln!(
        text,
        "  admin:    {}",
        conf.keyring_path(admin_name).display()
    );
    if let Some(nbd) = &conf.nbd {
        let name = nbd.image.split_once('/').map_or("", |(_, name)| name);
        let tls = format!(
            "nbds://{}/{name}?tls-certificates={}",
            nbd.listen,
            dir.join("nbd").join(NBD_TLS_DIR).display()
        );
        let loopback = nbd
            .listen
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|addr| addr.ip().is_loopback());
        if loopback {
            let _ = writeln!(
                text,
                "  nbd:      nbd://{}/{name} (image {}; try: nbdinfo nbd://{}/{name})",
                nbd.listen, nbd.image, nbd.listen
            );
            let _ = writeln!(text, "            over TLS: {tls}");
        } else {
            let _ = writeln!(
                text,
                "  nbd:      {tls} (image {}; TLS only, beyond loopback)",
                nbd.image
            );
        }
    }
    if let Some(gw) = &conf.gw {
        let ca = dir.join(crate::gw::GW_DIR).join(gateway::tls::CA_FILE);
        let _ = writeln!(
            text,
            "  s3:       https://{} (trust {}; keys, and settings for aws-cli, s3cmd, rclone \
             and boto3: coffer user create NAME)",
            gw.listen,
            ca.display()
        );
    }
    if let Some(dashboard) = &conf.dashboard {
        let dir = crate::dashboard::dir(conf);
        let _ = writeln!(
            text,
            "  web:      https://{} (the dashboard; trust {}; log in as {} with the \
             password in {})",
            dashboard.listen,
            dir.join(gateway::tls::CA_FILE).display(),
            crate::dashboard::users::ADMIN,
            dir.join(crate::dashboard::users::ADMIN_PASSWORD_FILE)
                .display()
        );
    }
    let coffer = command_name();
    for fs in filesystems {
        let _ = writeln!(
            text,
            "  fs:       {fs} (try: mkdir -p /mnt/{fs} && {coffer} mount {fs} /mnt/{fs})"
        );
    }
    let first_mon = conf
        .mons
        .first()
        .and_then(|m| conf.metrics.get_key_value(&m.name));
    if let Some((name, addr)) = first_mon.or_else(|| conf.metrics.iter().next()) {
        let _ = writeln!(
            text,
            "  metrics:  {} daemons, Prometheus text at /metrics (try: curl http://{addr}/metrics \
             for {name}; scrape them all: prometheus --config.file={})",
            conf.metrics.len(),
            scrape_config.display()
        );
    }
    let _ = writeln!(
        text,
        "  try:      {coffer} status; {coffer} obj put {DEFAULT_POOL} hello /etc/hostname"
    );
    text.push_str("Ctrl-C stops the cluster; `coffer up` again resumes it with its data.\n");
    text
}

/// How a person runs this program from a shell: `coffer` when that name on the PATH is
/// this executable, else its full path (a build in a target directory), so that the
/// commands printed work as printed.
pub fn command_name() -> String {
    let Ok(this) = std::env::current_exe().and_then(std::fs::canonicalize) else {
        return "coffer".into();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("coffer"))
            .find(|candidate| candidate.is_file())
            .and_then(|found| std::fs::canonicalize(found).ok())
            .is_some_and(|found| found == this)
    });
    if on_path {
        "coffer".into()
    } else {
        this.display().to_string()
    }
}

/// Writes to standard output, ignoring a reader that went away: whoever started `coffer up`
/// and stopped reading its output must not stop the cluster with it.
fn say(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Waits until the first monitor has bootstrapped a new cluster (it removes the seed file
/// then); before that, the admin's key is not known to the monitors.
fn wait_bootstrap(seed: &Path, daemons: &mut Supervisor) -> Result<(), String> {
    let deadline = std::time::Instant::now() + BOOTSTRAP_WAIT;
    while seed.exists() {
        if let Some((name, exit)) = daemons.exited().into_iter().next() {
            return Err(format!(
                "{name} {} while bootstrapping: {}",
                exit.how, exit.log
            ));
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "the monitors did not bootstrap within {BOOTSTRAP_WAIT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Where `coffer up`'s NBD server keeps its TLS certificate, in its directory.
const NBD_TLS_DIR: &str = "tls";

/// The arguments of the NBD server `coffer up` runs: it waits out the lock of a server that
/// crashed (its own earlier run) instead of failing, and offers TLS.
fn nbd_args(conf: &Conf, nbd: &NbdSection, dir: &Path) -> Vec<String> {
    let mut args = vec![
        "nbd".into(),
        "serve".into(),
        nbd.image.clone(),
        "--listen".into(),
        nbd.listen.clone(),
        "--wait-lock".into(),
        "--pid-file".into(),
        dir.join("pid").display().to_string(),
        "--tls-dir".into(),
        dir.join(NBD_TLS_DIR).display().to_string(),
    ];
    args.extend(metrics_arg(conf, "nbd"));
    args
}

/// `--metrics ADDR` for a front end that has an address in the configuration.
fn metrics_arg(conf: &Conf, name: &str) -> Vec<String> {
    match conf.metrics.get(name) {
        Some(addr) => vec!["--metrics".into(), addr.clone()],
        None => Vec::new(),
    }
}

/// Makes a server's certificate for the address `listen` and `localhost` in `dir`, with
/// the authority that signed it, as the files `names` (authority, key, certificate chain),
/// unless there is one.
fn ensure_certificate(
    dir: &Path,
    listen: &str,
    what: &str,
    [ca, key, chain]: [&str; 3],
) -> Result<(), String> {
    if dir.join(chain).exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let ip = listen
        .parse::<std::net::SocketAddr>()
        .map_err(|e| format!("{what} address {listen}: {e}"))?
        .ip();
    let made = gateway::tls::generate(&[ip.to_string(), "localhost".into()])?;
    write_private(&dir.join(ca), &made.ca)?;
    write_private(&dir.join(key), &made.key)?;
    write_private(&dir.join(chain), &made.chain)
}

/// The arguments of the metadata daemon `coffer up` runs.
fn mds_args() -> Vec<String> {
    vec!["mds".into(), "--id".into(), MDS_ID.into()]
}

/// Makes the metadata daemon's entity and keyring unless they exist; returns its name.
async fn ensure_mds(cluster: &Cluster, conf: &Conf) -> Result<EntityName, String> {
    let name: EntityName = format!("mds.{MDS_ID}")
        .parse()
        .map_err(|e| format!("{e}"))?;
    let keyring = conf.keyring_path(&name);
    if keyring.exists() {
        return Ok(name);
    }
    let dir = conf.dir.join(name.as_str());
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let caps = Caps::parse("mon=r osd=rw").map_err(|e| e.to_string())?;
    let command = MonCommand::AuthAdd {
        entity: name.to_string(),
        caps,
    };
    match cluster
        .command(command)
        .await
        .map_err(|e| format!("creating {name}: {e}"))?
    {
        MonReply::Keyring { pem, .. } => {
            write_private(&keyring, &pem)?;
            Ok(name)
        }
        other => Err(format!("creating {name}: unexpected reply {other:?}")),
    }
}

/// The arguments of the S3 gateway `coffer up` runs (its address and pool are in the
/// configuration, its certificate in `dir`).
fn gw_args(conf: &Conf, dir: &Path) -> Vec<String> {
    let mut args = vec![
        "gw".into(),
        "--pid-file".into(),
        dir.join("pid").display().to_string(),
    ];
    args.extend(metrics_arg(conf, "gw"));
    args
}

/// The arguments of the dashboard `coffer up` runs (its address is in the configuration,
/// its certificate and users in `dir`).
fn dashboard_args(dir: &Path) -> Vec<String> {
    vec![
        "dashboard".into(),
        "serve".into(),
        "--pid-file".into(),
        dir.join("pid").display().to_string(),
    ]
}

/// Creates image `spec` (POOL/NAME) of `size` bytes unless it exists.
async fn ensure_image(cluster: &Cluster, spec: &str, size: u64) -> Result<(), String> {
    let (pool, name) = crate::image::split_spec(spec)?;
    let pool = cluster.pool(pool).await.map_err(|e| e.to_string())?;
    match block::image::info(&pool, name).await {
        Ok(_) => Ok(()),
        Err(block::Error::NoSuchImage { .. }) => {
            block::image::create(&pool, name, size, block::image::OBJECT_SIZE_DEFAULT)
                .await
                .map(|_| ())
                .map_err(|e| format!("creating image {spec}: {e}"))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// How long the OSDs have to boot before `coffer up` goes on without them.
const OSD_START_WAIT: Duration = Duration::from_secs(120);

/// Waits until each of the OSDs `ids` is up in the map, and fails with its reason (the last
/// line of its log) if one exits first: a store that cannot be made, on a full disk for
/// example, ends `coffer up` (which then stops what it started), instead of a cluster that
/// runs without its OSDs. One still starting after [`OSD_START_WAIT`] is left to start.
async fn wait_osds_started(
    cluster: &Cluster,
    conf: &Conf,
    ids: &[u32],
    daemons: &mut Supervisor,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + OSD_START_WAIT;
    loop {
        if let Some((name, exit)) = daemons.exited().into_iter().next() {
            let log = conf.dir.join(&name).join("log");
            return Err(format!(
                "{name} {} while starting: {} (its log: {})",
                exit.how,
                exit.log,
                log.display()
            ));
        }
        let map = cluster.map();
        let booted = ids.iter().all(|id| {
            map.osds
                .get(&map::placement::OsdId(*id))
                .is_some_and(|osd| osd.up)
        });
        if booted || tokio::time::Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
