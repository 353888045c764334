//! File systems: `coffer fs` (create, ls, status, rm, authorize), `coffer mount` (a FUSE
//! mount, in the background unless `--foreground`) and `coffer mds` (the metadata daemon,
//! which `coffer up` starts).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use client::conf::Conf;
use client::{load_identity, Cluster};
use fs::proto::{Cred, Op, Reply, Request, SessionInfo};
use fs::readahead::Readahead;
use map::auth::Caps;
use map::cluster::Change;
use messenger::message::Command as MonCommand;
use messenger::EntityName;

use crate::admin::{connect, Who};

/// Placement groups of a file system's metadata pool (it holds few, small objects).
pub const META_PG_NUM: u32 = 32;
/// How long `coffer mount` waits for its background mount to be ready.
const MOUNT_WAIT: Duration = Duration::from_secs(120);

#[derive(clap::Subcommand)]
pub enum FsCommand {
    /// Creates a file system with its own metadata and data pools (or existing ones).
    Create {
        name: String,
        /// An existing pool for the namespace (default: a new pool NAME.meta).
        #[arg(long)]
        meta_pool: Option<String>,
        /// An existing pool for file contents (default: a new pool NAME.data).
        #[arg(long)]
        data_pool: Option<String>,
        /// Where a new data pool seals file contents: edge (the mounts seal them; no daemon
        /// sees them) or osd. Default: edge where the monitor links are secure.
        #[arg(long)]
        seal: Option<String>,
    },
    /// The file systems: pools and metadata daemon.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// One file system's metadata daemon and the mounts it serves.
    Status { name: String },
    /// Removes a file system (refused while it is mounted) and the pools `fs create` made.
    Rm {
        name: String,
        /// Keep the pools (and so the files' objects).
        #[arg(long)]
        keep_pools: bool,
        /// Required: removing a file system loses its files.
        #[arg(long)]
        yes_i_really_mean_it: bool,
    },
    /// Creates client ENTITY allowed to mount file system NAME at PATH (and below), reading
    /// (r) or reading and writing (rw), and writes its keyring.
    Authorize {
        name: String,
        entity: String,
        /// The path it may mount, then the access; or just the access (the whole file
        /// system): `/projects rw`, `r`.
        #[arg(num_args = 1..=2, required = true)]
        grant: Vec<String>,
        /// Where to write the keyring (default: beside the configuration file).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
pub struct MountArgs {
    /// The file system.
    pub fs: String,
    pub mountpoint: PathBuf,
    /// The directory of the file system to mount (the whole file system by default).
    #[arg(long, default_value = "/")]
    pub path: String,
    /// Readahead: auto (follows each file's access pattern), 0 (none), or a fixed SIZE
    /// fetched with every read (for example 8M).
    #[arg(long, default_value = "auto")]
    pub readahead: String,
    /// Stay in the foreground (logs to standard error) until unmounted.
    #[arg(long)]
    pub foreground: bool,
    /// Mount options, as mount.ceph takes them: ro, rw, allow_other, rasize=BYTES (the fixed
    /// readahead; 0 for none).
    #[arg(short = 'o')]
    pub options: Option<String>,
}

#[derive(clap::Args)]
pub struct MdsArgs {
    /// The daemon's name: it runs as mds.ID, with its keyring in DIR/mds.ID.
    #[arg(long)]
    pub id: String,
    /// Where it serves mounts.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
}

/// Creates file system `name`, making its pools unless given; returns the pools' names.
pub async fn create(
    cluster: &Cluster,
    name: &str,
    meta_pool: Option<String>,
    data_pool: Option<String>,
    edge: bool,
) -> Result<(String, String), String> {
    map::filesystem::check_name(name).map_err(|e| e.to_string())?;
    if cluster.map().filesystems.contains_key(name) {
        return Err(format!("file system {name} already exists"));
    }
    let owns_pools = meta_pool.is_none() && data_pool.is_none();
    let mut made = Vec::new();
    let meta = match meta_pool {
        Some(pool) => pool,
        None => {
            let pool = format!("{name}.meta");
            // The MDS writes the namespace in the clear over secure links; each OSD's store
            // seals it at rest.
            crate::admin::create_pool(cluster, &pool, META_PG_NUM, false).await?;
            made.push(pool.clone());
            pool
        }
    };
    let data = match data_pool {
        Some(pool) => pool,
        None => {
            let pool = format!("{name}.data");
            if let Err(e) =
                crate::admin::create_pool(cluster, &pool, crate::admin::DEFAULT_PG_NUM, edge).await
            {
                remove_pools(cluster, &made).await;
                return Err(e);
            }
            made.push(pool.clone());
            pool
        }
    };
    let change = Change::CreateFs {
        name: name.into(),
        meta_pool: meta.clone(),
        data_pool: data.clone(),
        owns_pools,
    };
    if let Err(e) = cluster.command(MonCommand::Change(change)).await {
        remove_pools(cluster, &made).await;
        return Err(format!("creating file system {name}: {e}"));
    }
    Ok((meta, data))
}

async fn remove_pools(cluster: &Cluster, pools: &[String]) {
    for pool in pools {
        let change = Change::RemovePool { name: pool.clone() };
        if let Err(e) = cluster.command(MonCommand::Change(change)).await {
            eprintln!("coffer: removing pool {pool}: {e}");
        }
    }
}

/// The mounts of file system `name`, as its MDS knows them.
pub async fn sessions(cluster: &Cluster, name: &str) -> Result<Vec<SessionInfo>, String> {
    let map = cluster.map();
    let fs = map
        .filesystems
        .get(name)
        .ok_or_else(|| format!("there is no file system {name}"))?;
    let mds = fs.mds.as_ref().ok_or_else(|| {
        format!("file system {name} has no metadata daemon (is coffer mds running?)")
    })?;
    let request = Request {
        fs: name.into(),
        session: cluster.instance(),
        seq: 1,
        cred: Cred::default(),
        op: Op::Sessions,
    };
    match cluster
        .call_daemon::<Request, Reply>(&mds.name, &mds.addr, &request, Bytes::new())
        .await
        .map_err(|e| format!("asking {}: {e}", mds.name))?
        .0
    {
        Reply::Sessions(sessions) => Ok(sessions),
        Reply::Failed { why, .. } => Err(why),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

pub fn command(who: &Who, command: FsCommand) -> Result<(), String> {
    let (conf, runtime, cluster) = connect(who)?;
    match command {
        FsCommand::Create {
            name,
            meta_pool,
            data_pool,
            seal,
        } => {
            let edge = crate::admin::seal_at_edge(
                seal.as_deref(),
                crate::admin::mon_links_secure(&conf)?,
            )?;
            let (meta, data) =
                runtime.block_on(create(&cluster, &name, meta_pool, data_pool, edge))?;
            let sealed = match cluster.map().pool_by_name(&data).map(|p| p.seal) {
                Some(map::cluster::Seal::Edge { .. }) => "sealed at the edge",
                _ => "sealed by the OSDs",
            };
            println!("file system {name} created: metadata in pool {meta}, files in pool {data} ({sealed})");
            println!("mount it with: coffer mount {name} /mnt/{name}");
            Ok(())
        }
        FsCommand::Ls { json } => {
            let map = cluster.map();
            if json {
                return crate::admin::json(&map.filesystems.values().collect::<Vec<_>>());
            }
            if map.filesystems.is_empty() {
                println!("no file systems (coffer fs create NAME)");
            }
            let pool = |id| {
                map.pools
                    .get(&id)
                    .map_or("?".to_string(), |p| p.name.clone())
            };
            for fs in map.filesystems.values() {
                let mds = fs
                    .mds
                    .as_ref()
                    .map_or("no metadata daemon".to_string(), |m| {
                        format!("{} at {}", m.name, m.addr)
                    });
                println!(
                    "{}: metadata pool {}, data pool {}, {mds}",
                    fs.name,
                    pool(fs.meta_pool),
                    pool(fs.data_pool)
                );
            }
            Ok(())
        }
        FsCommand::Status { name } => {
            let sessions = runtime.block_on(sessions(&cluster, &name))?;
            let map = cluster.map();
            let mds = map.filesystems.get(&name).and_then(|f| f.mds.clone());
            if let Some(mds) = mds {
                println!(
                    "{name}: served by {} at {} since epoch {}",
                    mds.name, mds.addr, mds.since
                );
            }
            println!("{} mounted", plural(sessions.len() as u64, "client"));
            for s in sessions {
                println!(
                    "  {:016x} {} at {}: {} open, idle {:.1} s",
                    s.session,
                    s.entity,
                    s.root,
                    plural(s.opens, "file"),
                    s.idle_ms as f64 / 1000.0
                );
            }
            Ok(())
        }
        FsCommand::Rm {
            name,
            keep_pools,
            yes_i_really_mean_it,
        } => {
            if !yes_i_really_mean_it {
                return Err(format!(
                    "removing file system {name} loses its files; add --yes-i-really-mean-it"
                ));
            }
            let map = cluster.map();
            let fs = map
                .filesystems
                .get(&name)
                .ok_or_else(|| format!("there is no file system {name}"))?
                .clone();
            if fs.mds.is_some() {
                let mounted = runtime.block_on(sessions(&cluster, &name))?;
                if !mounted.is_empty() {
                    let who: Vec<String> = mounted
                        .iter()
                        .map(|s| format!("{} at {}", s.entity, s.root))
                        .collect();
                    return Err(format!(
                        "file system {name} is mounted ({}); unmount it first",
                        who.join(", ")
                    ));
                }
            }
            runtime
                .block_on(
                    cluster.command(MonCommand::Change(Change::RemoveFs { name: name.clone() })),
                )
                .map_err(|e| e.to_string())?;
            let pools: Vec<String> = [fs.meta_pool, fs.data_pool]
                .iter()
                .filter_map(|id| map.pools.get(id).map(|p| p.name.clone()))
                .collect();
            if fs.owns_pools && !keep_pools {
                runtime.block_on(remove_pools(&cluster, &pools));
                println!(
                    "file system {name} removed, with its pools {}",
                    pools.join(" and ")
                );
            } else {
                println!(
                    "file system {name} removed; its pools {} stay",
                    pools.join(" and ")
                );
            }
            Ok(())
        }
        FsCommand::Authorize {
            name,
            entity,
            grant,
            output,
        } => authorize(&conf, &runtime, &cluster, &name, &entity, &grant, output),
    }
}

fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn authorize(
    conf: &Conf,
    runtime: &tokio::runtime::Runtime,
    cluster: &Cluster,
    name: &str,
    entity: &str,
    grant: &[String],
    output: Option<PathBuf>,
) -> Result<(), String> {
    let (path, access) = match grant {
        [access] => ("/".to_string(), access.clone()),
        [path, access] => (path.clone(), access.clone()),
        _ => return Err("give [PATH] r|rw".into()),
    };
    let (caps_text, caps, path) = grant_caps(cluster, name, entity, &path, &access)?;
    let keyring = crate::admin::add_key(conf, runtime, cluster, entity, caps, output)?;
    println!("{entity}: {caps_text}");
    println!("keyring written to {}", keyring.display());
    let at = if path == "/" {
        String::new()
    } else {
        format!(" --path {path}")
    };
    println!(
        "mount with: {} --name {entity} --keyring {} mount {name} MOUNTPOINT{at}",
        crate::up::command_name(),
        keyring.display()
    );
    Ok(())
}

/// The capabilities that let client `entity` mount file system `name` at `path` (and below)
/// with `access` (r or rw): as text, parsed, and the path made normal.
pub fn grant_caps(
    cluster: &Cluster,
    name: &str,
    entity: &str,
    path: &str,
    access: &str,
) -> Result<(String, Caps, String), String> {
    if access != "r" && access != "rw" {
        return Err(format!("{access:?}: the access is r or rw"));
    }
    let path = map::auth::normal_path(path).map_err(|e| e.to_string())?;
    let map = cluster.map();
    let fs = map
        .filesystems
        .get(name)
        .ok_or_else(|| format!("there is no file system {name}"))?;
    let data_pool = map
        .pools
        .get(&fs.data_pool)
        .ok_or("the file system's data pool is gone")?
        .name
        .clone();
    let parsed: EntityName = entity.parse().map_err(|e| format!("{e}"))?;
    if parsed.kind() != messenger::EntityKind::Client {
        return Err(format!(
            "{entity}: file systems are mounted by client.* entities"
        ));
    }
    let caps_text = format!("mon=r osd={access} pool={data_pool} fs={name}:{path}:{access}");
    let caps = Caps::parse(&caps_text).map_err(|e| e.to_string())?;
    Ok((caps_text, caps, path))
}

/// What `-o` and `--readahead` ask for.
struct Asked {
    read_only: bool,
    allow_other: bool,
    readahead: Readahead,
}

pub fn parse_readahead(text: &str) -> Result<Readahead, String> {
    match text {
        "auto" => Ok(Readahead::Auto),
        "0" => Ok(Readahead::Off),
        size => match crate::text::parse_size(size)? {
            0 => Ok(Readahead::Off),
            bytes => Ok(Readahead::Fixed(bytes)),
        },
    }
}

fn parse_options(args: &MountArgs) -> Result<Asked, String> {
    let mut asked = Asked {
        read_only: false,
        allow_other: false,
        readahead: parse_readahead(&args.readahead).map_err(|e| format!("--readahead: {e}"))?,
    };
    for option in args
        .options
        .iter()
        .flat_map(|o| o.split(','))
        .filter(|o| !o.is_empty())
    {
        match option.split_once('=') {
            None if option == "ro" => asked.read_only = true,
            None if option == "rw" => asked.read_only = false,
            None if option == "allow_other" => asked.allow_other = true,
            None if [
                "defaults", "noatime", "relatime", "nodev", "nosuid", "_netdev",
            ]
            .contains(&option) => {}
            Some(("rasize", size)) => {
                asked.readahead = parse_readahead(size).map_err(|e| format!("-o rasize: {e}"))?
            }
            _ => {
                return Err(format!(
                    "-o {option}: coffer mount takes ro, rw, allow_other and rasize=BYTES"
                ))
            }
        }
    }
    Ok(asked)
}

pub fn mount(who: &Who, args: MountArgs) -> Result<(), String> {
    let asked = parse_options(&args)?;
    let mountpoint = std::fs::canonicalize(&args.mountpoint)
        .map_err(|e| format!("{}: {e}", args.mountpoint.display()))?;
    if !mountpoint.is_dir() {
        return Err(format!("{} is not a directory", mountpoint.display()));
    }
    if !args.foreground {
        return mount_in_background(who, &args, &mountpoint);
    }
    let conf = Conf::load(&Conf::locate(who.conf.as_deref())).map_err(|e| e.to_string())?;
    let entity: EntityName = who.name.parse().map_err(|e| format!("--name: {e}"))?;
    let keyring = who
        .keyring
        .clone()
        .unwrap_or_else(|| conf.keyring_path(&entity));
    let identity = load_identity(&keyring, &entity).map_err(|e| e.to_string())?;
    let runtime = crate::daemon::runtime()?;
    let mount = runtime.block_on(async {
        let cluster = Cluster::connect(&conf, &identity)
            .await
            .map_err(|e| e.to_string())?;
        fs::mount::Mount::start(
            cluster,
            &args.fs,
            &args.path,
            asked.read_only,
            asked.readahead,
        )
        .await
    })?;
    let options = fs::fuse::Options {
        fs: args.fs.clone(),
        read_only: asked.read_only,
        allow_other: asked.allow_other,
        readahead: asked.readahead,
    };
    stop_on_signal(&mountpoint);
    let shown = mountpoint.clone();
    let fs_name = args.fs.clone();
    fs::fuse::serve(
        &runtime,
        Arc::new(mount),
        &mountpoint,
        &options,
        move || {
            println!("coffer: mounted {fs_name} at {}", shown.display());
            tracing::info!(fs = %fs_name, mountpoint = %shown.display(), "mounted");
        },
    )?;
    tracing::info!(mountpoint = %mountpoint.display(), "unmounted");
    Ok(())
}

/// SIGINT or SIGTERM unmounts, so that the session ends with everything flushed.
fn stop_on_signal(mountpoint: &Path) {
    let mountpoint = mountpoint.to_path_buf();
    std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        if runtime.block_on(crate::daemon::stop_signal()).is_ok() {
            tracing::info!(mountpoint = %mountpoint.display(), "stopping: unmounting");
            unmount(&mountpoint);
        }
    });
}

/// Unmounts `mountpoint` (lazily, so a busy mount goes once its users leave).
pub fn unmount(mountpoint: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: umount2 on a NUL-terminated path this function owns.
    let done = unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } == 0;
    if !done {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg("-z")
            .arg(mountpoint)
            .status();
    }
}

/// Starts the mount as a child in its own session and returns once it serves (or says why
/// it could not); its log goes to DIR/mounts/.
fn mount_in_background(who: &Who, args: &MountArgs, mountpoint: &Path) -> Result<(), String> {
    let conf = Conf::load(&Conf::locate(who.conf.as_deref())).map_err(|e| e.to_string())?;
    let logs = conf.dir.join("mounts");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let tag: String = mountpoint
        .display()
        .to_string()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let log_path = logs.join(format!("{}{tag}.log", args.fs));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("{}: {e}", log_path.display()))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = Command::new(exe);
    command.arg("--conf").arg(Conf::locate(who.conf.as_deref()));
    command.arg("--name").arg(&who.name);
    if let Some(keyring) = &who.keyring {
        command.arg("--keyring").arg(keyring);
    }
    command
        .arg("mount")
        .arg(&args.fs)
        .arg(mountpoint)
        .arg("--path")
        .arg(&args.path)
        .arg("--readahead")
        .arg(&args.readahead)
        .arg("--foreground");
    if let Some(options) = &args.options {
        command.arg("-o").arg(options);
    }
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid in the child before exec: it leaves this terminal's session, so the
    // shell's hangup does not reach the mount.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    match spawn_mount(&mut command, log) {
        Ok((_child, line)) => {
            print!("{line}");
            println!(
                "(log: {}; unmount with: umount {})",
                log_path.display(),
                mountpoint.display()
            );
            Ok(())
        }
        Err(_) => {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let last = text
                .lines()
                .rev()
                .find(|l| l.starts_with("coffer:"))
                .unwrap_or("the mount did not start in time");
            Err(format!(
                "{} (log: {})",
                last.trim_start_matches("coffer: "),
                log_path.display()
            ))
        }
    }
}

/// Starts `command` (a `coffer mount ... --foreground`) with its log in `log`, and waits
/// until it says it serves: the child and what it said, or why not (it was stopped then).
pub fn spawn_mount(command: &mut Command, log: std::fs::File) -> Result<(Child, String), String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting the mount: {e}"))?;
    let stdout = child.stdout.take().ok_or("the mount's output")?;
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = send.send(line);
    });
    match receive.recv_timeout(MOUNT_WAIT) {
        Ok(line) if line.starts_with("coffer: mounted") => Ok((child, line)),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            Err("the mount did not start".into())
        }
    }
}

/// `coffer mds`: serves every file system in the map until SIGINT or SIGTERM, or until a
/// file system's journal fails (then it exits with the reason; a restart replays it).
pub fn run_mds(conf_path: &Path, args: MdsArgs) -> Result<(), String> {
    let conf = Conf::load(conf_path).map_err(|e| e.to_string())?;
    let entity: EntityName = format!("mds.{}", args.id)
        .parse()
        .map_err(|e| format!("--id: {e}"))?;
    let identity =
        load_identity(&conf.keyring_path(&entity), &entity).map_err(|e| e.to_string())?;
    let dir = conf.dir.join(entity.as_str());
    crate::daemon::runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| format!("{entity} cannot listen on {}: {e}", args.listen))?;
        let daemon = mds::Mds::start(&conf, &identity, listener).await?;
        crate::scrape::start(conf.metrics.get(entity.as_str()), |registry| {
            messenger::metrics::register(registry);
            mds::metrics::register(registry);
        });
        crate::daemon::write_pid(&dir)?;
        tokio::select! {
            stopped = crate::daemon::stop_signal() => {
                stopped?;
                tracing::info!(%entity, "stopping");
                daemon.shutdown().await;
                Ok(())
            }
            why = daemon.failed() => Err(format!("{entity}: {why}")),
        }
    })
}
