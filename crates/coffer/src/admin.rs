//! The operator's commands: `status`, `osd`, `pool`, `obj` and `auth`, each a client of the
//! cluster named by `--conf` (or `COFFER_CONF`, or the default data directory).

use std::io::{Read, Write};
use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use client::conf::Conf;
use client::{load_identity, Cluster};
use map::auth::Caps;
use map::cluster::{Change, Erasure, Space};
use map::placement::FailureDomain;
use messenger::message::{CacheFigures, Command as MonCommand, Health, MonReply, MonStatus};
use messenger::EntityName;

/// PGs of a new pool (`pool create`, and the pool `coffer up` makes). A PG orders its writes
/// one at a time, so the PGs an OSD serves bound the writes it has in flight and the group
/// commits it can gather: with 32, many clients' 4 KiB writes were held to a quarter of
/// their queue depth (docs/benchmarks.md, "Placement groups and small writes").
pub const DEFAULT_PG_NUM: u32 = 128;

#[derive(clap::Subcommand)]
pub enum OsdCommand {
    /// Every OSD: up or down, in or out, how full, host, address.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Makes a new OSD: its number and its keyring (written beside the configuration, in
    /// DIR/osd.N/keyring); then `coffer osd --id N --listen IP` runs it (docs/deploy.md).
    Create {
        /// The host it runs on, its failure domain (default: this machine's host name).
        #[arg(long)]
        host: Option<String>,
    },
    /// Marks an OSD out: its data moves to others.
    Out { id: u32 },
    /// Marks an OSD in again: it takes its share of the data back.
    In { id: u32 },
    /// The share of a store past which it counts as full, and the PGs it holds refuse
    /// writes (deletes still work) until space is freed (default 0.95).
    SetFullRatio { ratio: f64 },
    /// The share of a store past which health warns that it is filling (default 0.85).
    SetNearfullRatio { ratio: f64 },
}

#[derive(clap::Subcommand)]
pub enum PoolCommand {
    /// Creates a pool: replicated (three copies by default), or erasure-coded with --ec.
    Create {
        name: String,
        /// Copies of each object (replicated pools; default 3).
        #[arg(long, conflicts_with = "ec")]
        size: Option<u8>,
        /// Copies (or, erasure-coded, shards) that must be written before a write is
        /// acknowledged, and that must be up for the pool to take writes (default: a
        /// majority of size; erasure-coded, k + 1).
        #[arg(long)]
        min_size: Option<u8>,
        /// Erasure-coded: K data shards and M parity shards per object, on K + M distinct
        /// OSDs (or hosts), any M of which can be lost (4+2 stores 1.5 bytes per byte,
        /// 8+3 1.375). Object data only: omap is refused, metadata stays in replicated
        /// pools. Sealed by the OSDs.
        #[arg(long, value_name = "K+M")]
        ec: Option<String>,
        /// Erasure-coded: the bytes of one shard's piece of a stripe, a multiple of 4 KiB
        /// up to 1 MiB (default 4K: small objects and 4 KiB overwrites cost least).
        #[arg(long, requires = "ec", value_name = "SIZE")]
        stripe_unit: Option<String>,
        /// Placement groups.
        #[arg(long, default_value_t = DEFAULT_PG_NUM)]
        pg_num: u32,
        /// Failure domain: osd (copies or shards on different OSDs) or host.
        #[arg(long, alias = "failure-domain", default_value = "osd")]
        domain: String,
        /// Where data is sealed: edge (clients seal 4 KiB chunks under the pool's data key
        /// from the KMS; OSDs never hold it) or osd (clients send plaintext, each OSD's store
        /// seals it). Default: edge where the monitor links are secure (the KMS releases
        /// pool keys over those only), else osd; osd for erasure-coded pools. Fixed once the
        /// pool exists.
        #[arg(long)]
        seal: Option<String>,
    },
    /// Gives a pool sealed at the edge a new data key for new writes; chunks under older
    /// keys stay readable, and the older keys are rewrapped by a new KMS key version.
    RotateKey { name: String },
    /// Every pool: copies, placement groups, failure domain and where it is sealed.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Compares every copy of every object in the pool (or in one PG): a copy that differs
    /// from the majority, or that its store cannot read, is reported (exit status 1), and
    /// with --repair replaced by the majority's.
    Scrub {
        name: String,
        /// Only this placement group.
        #[arg(long)]
        pg: Option<u32>,
        /// Replace each bad copy with the majority's.
        #[arg(long)]
        repair: bool,
        /// A line for every PG, not only for those with findings.
        #[arg(long)]
        verbose: bool,
    },
    /// Removes a pool and every object in it.
    Rm {
        name: String,
        /// Required: removing a pool loses its objects.
        #[arg(long)]
        yes_i_really_mean_it: bool,
    },
}

#[derive(clap::Subcommand)]
pub enum ObjCommand {
    /// Stores FILE (or standard input) as object NAME.
    Put {
        pool: String,
        object: String,
        file: Option<PathBuf>,
    },
    /// Writes object NAME to FILE (or standard output).
    Get {
        pool: String,
        object: String,
        file: Option<PathBuf>,
    },
    Rm {
        pool: String,
        object: String,
    },
    /// Lists the pool's object names, one per line.
    Ls {
        pool: String,
    },
    /// Size, modification time and version.
    Stat {
        pool: String,
        object: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Subcommand)]
pub enum AuthCommand {
    /// Creates client.NAME with a new key and writes its keyring.
    Add {
        entity: String,
        /// For example "mon=r osd=rw pool=data".
        #[arg(long)]
        caps: String,
        /// Where to write the keyring (default: beside the configuration file).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    Ls,
    /// Removes an entity: its key stops working on every daemon.
    Rm {
        entity: String,
    },
}

#[derive(clap::Subcommand)]
pub enum BlocklistCommand {
    /// The fenced client instances.
    Ls,
    /// Lets a client instance write again.
    Rm {
        /// The instance, in hex, as `ls` and `image lock break` print it.
        instance: String,
    },
}

/// Creates pool `name` with `pg_num` PGs, replicated over up to three of the cluster's OSDs,
/// sealed at the edge if `edge`.
pub async fn create_pool(
    cluster: &Cluster,
    name: &str,
    pg_num: u32,
    edge: bool,
) -> Result<(), String> {
    let size = (cluster.map().osds.len() as u8).clamp(1, 3);
    let change =
        PoolShape::new(Some(size), None, None, None)?.change(name, pg_num, FailureDomain::Osd);
    let command = if edge {
        MonCommand::PoolCreateEdge { change }
    } else {
        MonCommand::Change(change)
    };
    cluster
        .command(command)
        .await
        .map(|_| ())
        .map_err(|e| format!("creating pool {name}: {e}"))
}

/// Who runs a command and how to reach the cluster.
pub struct Who {
    pub conf: Option<PathBuf>,
    pub name: String,
    pub keyring: Option<PathBuf>,
}

type Connected = (Conf, tokio::runtime::Runtime, Cluster);

/// Connects for a command a person runs: when no cluster answers, it says so at once.
pub fn connect(who: &Who) -> Result<Connected, String> {
    connect_as(who, true)
}

/// Makes OSD entity and number for `host` in the monitors, and writes its keyring beside
/// the configuration; returns its number.
pub async fn create_osd(cluster: &Cluster, conf: &Conf, host: &str) -> Result<u32, String> {
    let command = MonCommand::OsdCreate {
        host: host.into(),
        weight: map::cluster::WEIGHT_ONE,
    };
    match cluster
        .command(command)
        .await
        .map_err(|e| format!("creating an OSD: {e}"))?
    {
        MonReply::OsdCreated { id, pem } => {
            let dir = crate::daemon::osd_dir(conf, id.0);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            crate::up::write_private(&dir.join("keyring"), &pem)?;
            Ok(id.0)
        }
        other => Err(format!("creating an OSD: unexpected reply {other:?}")),
    }
}

/// This machine's host name.
fn hostname() -> Result<String, String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_err(|e| format!("reading this machine's host name: {e} (give --host)"))?;
    Ok(name.trim().to_string())
}

/// Connects for a server that runs for long (`nbd serve`, `gw serve`): it waits for the
/// monitors, as a service started before them must.
pub fn connect_waiting(who: &Who) -> Result<Connected, String> {
    connect_as(who, false)
}

fn connect_as(who: &Who, fail_fast: bool) -> Result<Connected, String> {
    let path = Conf::locate(who.conf.as_deref());
    let conf = Conf::load(&path).map_err(|e| e.to_string())?;
    let entity: EntityName = who.name.parse().map_err(|e| format!("--name: {e}"))?;
    let keyring = who
        .keyring
        .clone()
        .unwrap_or_else(|| conf.keyring_path(&entity));
    let identity = load_identity(&keyring, &entity).map_err(|e| e.to_string())?;
    if fail_fast {
        no_monitor_refuses(&conf, &path)?;
    }
    let runtime = crate::daemon::runtime()?;
    let cluster = runtime
        .block_on(Cluster::connect(&conf, &identity))
        .map_err(|e| e.to_string())?;
    Ok((conf, runtime, cluster))
}

/// Fails at once, saying how to start one, when every monitor's address refuses a
/// connection (no cluster runs there); a monitor that is slow or unreachable is left to
/// the client's usual retries.
fn no_monitor_refuses(conf: &Conf, path: &Path) -> Result<(), String> {
    let refused = |addr: &str| {
        let Ok(Some(addr)) = addr.to_socket_addrs().map(|mut a| a.next()) else {
            return false;
        };
        matches!(
            std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1)),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
        )
    };
    if conf.mons.iter().all(|mon| refused(&mon.addr)) {
        let addrs: Vec<&str> = conf.mons.iter().map(|mon| mon.addr.as_str()).collect();
        return Err(format!(
            "no cluster answers: every monitor of {} refuses connections ({}); start the \
             cluster with `coffer up`",
            path.display(),
            addrs.join(", ")
        ));
    }
    Ok(())
}

pub fn json<T: serde::Serialize>(value: &T) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(())
}

pub fn status(who: &Who, as_json: bool) -> Result<(), String> {
    let (conf, runtime, cluster) = connect(who)?;
    let status = runtime
        .block_on(cluster.status())
        .map_err(|e| e.to_string())?;
    let supervised = crate::supervise::status(&conf.dir);
    let (health, reasons) = verdict(&status, supervised.as_ref().map(|(_, w, _)| &w[..]));
    if as_json {
        let mut value = status_json(&status);
        value["health"]["status"] = health.into();
        value["health"]["checks"] = reasons.into();
        value["daemons"] = serde_json::to_value(supervised.map(|(_, _, daemons)| daemons))
            .map_err(|e| e.to_string())?;
        return json(&value);
    }
    let map = &status.map;
    println!("cluster:");
    println!("  health:   {health}");
    for reason in reasons {
        println!("            {reason}");
    }
    for line in &status.inactive {
        println!("            {line}");
    }
    println!("services:");
    println!(
        "  mon:      {}, leader {}",
        crate::text::count(status.monitors.len() as u64, "monitor", "monitors"),
        status.leader.as_deref().unwrap_or("none")
    );
    let up = map.osds.values().filter(|o| o.up).count();
    let is_in = map.osds.values().filter(|o| o.is_in).count();
    println!("  osd:      {} OSDs: {up} up, {is_in} in", map.osds.len());
    if !map.filesystems.is_empty() {
        let filesystems: Vec<String> = map
            .filesystems
            .values()
            .map(|fs| match &fs.mds {
                Some(mds) => format!("{} ({})", fs.name, mds.name),
                None => format!("{} (no metadata daemon)", fs.name),
            })
            .collect();
        println!("  fs:       {}", filesystems.join(", "));
    }
    if let Some((line, _, _)) = &supervised {
        println!("  daemons:  {line}");
    }
    println!("data:");
    let pg_total: u64 = status.pgs.values().sum();
    println!("  map:      epoch {}", map.epoch);
    let coded: Vec<String> = map
        .pools
        .values()
        .filter_map(|p| {
            p.erasure
                .map(|code| format!("{} {}", p.name, code.profile()))
        })
        .collect();
    let coded = match coded.len() {
        0 => String::new(),
        n => format!(" ({n} erasure-coded: {})", coded.join(", ")),
    };
    println!(
        "  pools:    {}{coded}, {pg_total} pgs",
        crate::text::count(map.pools.len() as u64, "pool", "pools")
    );
    let objects: u64 = status.pool_usage.iter().map(|(_, u)| u.objects).sum();
    let stored: u64 = status.pool_usage.iter().map(|(_, u)| u.stored_bytes).sum();
    println!(
        "  objects:  {}, {}",
        crate::text::count(objects, "object", "objects"),
        crate::text::approximate(stored)
    );
    println!(
        "  usage:    {} used of {}",
        crate::text::approximate(status.used_bytes),
        crate::text::approximate(status.total_bytes)
    );
    let states: Vec<String> = status
        .pgs
        .iter()
        .map(|(state, count)| format!("{count} {state}"))
        .collect();
    println!("  pgs:      {}", states.join(", "));
    if status.recovery_pending > 0 {
        println!(
            "  recovery: {} to copy",
            crate::text::count(status.recovery_pending, "object", "objects")
        );
    }
    if let Some(line) = cache_line(&status.cache) {
        println!("  cache:    {line}");
    }
    if !status.read_repairs.is_empty() {
        let total: u64 = status.read_repairs.iter().map(|(_, n)| n).sum();
        let each: Vec<String> = status
            .read_repairs
            .iter()
            .map(|(osd, n)| format!("osd.{} {n}", osd.0))
            .collect();
        println!(
            "  repairs:  {total} damaged {} replaced on read ({})",
            if total == 1 { "copy" } else { "copies" },
            each.join(", ")
        );
    }
    Ok(())
}

/// `coffer df`: the raw space of the up OSDs, then each pool's objects, stored bytes (one
/// copy, or the data shards), use (every copy or shard) and the room left before its first
/// OSD is full.
pub fn df(who: &Who, as_json: bool) -> Result<(), String> {
    let (_, runtime, cluster) = connect(who)?;
    let status = runtime
        .block_on(cluster.status())
        .map_err(|e| e.to_string())?;
    let pools: Vec<_> = status
        .pool_usage
        .iter()
        .filter_map(|(id, usage)| status.map.pools.get(id).map(|pool| (pool, usage)))
        .collect();
    if as_json {
        return json(&serde_json::json!({
            "raw": { "used_bytes": status.used_bytes, "total_bytes": status.total_bytes },
            "pools": pools.iter().map(|(pool, u)| serde_json::json!({
                "name": pool.name,
                "id": pool.id.0,
                "size": pool.size,
                "erasure": pool.erasure.map(|code| code.profile().to_string()),
                "objects": u.objects,
                "stored_bytes": u.stored_bytes,
                "used_bytes": u.used_bytes,
                "max_avail_bytes": u.max_avail_bytes,
            })).collect::<Vec<_>>(),
        }));
    }
    let up = status.map.osds.values().filter(|o| o.up).count();
    println!(
        "raw: {} used of {} ({}), {up} of {} OSDs up",
        crate::text::approximate(status.used_bytes),
        crate::text::approximate(status.total_bytes),
        crate::text::percent(status.used_bytes, status.total_bytes),
        status.map.osds.len()
    );
    println!(
        "{:<16} {:>4} {:>9} {:>11} {:>11} {:>7} {:>11}",
        "POOL", "ID", "OBJECTS", "STORED", "USED", "%USED", "MAX AVAIL"
    );
    for (pool, u) in pools {
        let (raw, per) = pool.raw_per_byte();
        let room = u.max_avail_bytes.saturating_mul(raw) / per;
        println!(
            "{:<16} {:>4} {:>9} {:>11} {:>11} {:>7} {:>11}",
            pool.name,
            pool.id.0,
            u.objects,
            crate::text::approximate(u.stored_bytes),
            crate::text::approximate(u.used_bytes),
            crate::text::percent(u.used_bytes, u.used_bytes.saturating_add(room)),
            crate::text::approximate(u.max_avail_bytes)
        );
    }
    Ok(())
}

/// `coffer wait clean`: returns once every PG is active+clean, showing how many of those
/// that were not have become so and what recovery has left to copy; fails after `timeout`
/// saying what is left.
pub fn wait_clean(who: &Who, timeout: std::time::Duration) -> Result<(), String> {
    let (_, runtime, cluster) = connect(who)?;
    let started = std::time::Instant::now();
    let mut progress: Option<crate::progress::Progress> = None;
    let mut most_left = 0;
    loop {
        let status = runtime
            .block_on(cluster.status())
            .map_err(|e| e.to_string())?;
        let pgs: u64 = status.pgs.values().sum();
        let left = pgs - status.pgs.get("active+clean").copied().unwrap_or(0);
        if left == 0 {
            if let Some(bar) = &progress {
                bar.finish();
            }
            println!(
                "{} active+clean after {:.0} s",
                crate::text::count(pgs, "PG", "PGs"),
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        most_left = most_left.max(left);
        let bar =
            progress.get_or_insert_with(|| crate::progress::Progress::new("recovery", left, "PGs"));
        bar.reached(most_left - left, most_left);
        bar.set_message(&format!(
            "clean; {} to copy",
            crate::text::count(status.recovery_pending, "object", "objects")
        ));
        if started.elapsed() >= timeout {
            bar.finish();
            let states: Vec<String> = status
                .pgs
                .iter()
                .filter(|(state, _)| state.as_str() != "active+clean")
                .map(|(state, n)| format!("{n} {state}"))
                .collect();
            return Err(format!(
                "after {} s, {left} of {pgs} PGs are not active+clean ({}); recovery has {} \
                 to copy",
                timeout.as_secs(),
                states.join(", "),
                crate::text::count(status.recovery_pending, "object", "objects")
            ));
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// The cluster's health word and its reasons, as `coffer status` gives them: the
/// monitors' verdict, warned by the crashes `coffer up` saw (`supervised`).
pub fn verdict(status: &MonStatus, supervised: Option<&[String]>) -> (&'static str, Vec<String>) {
    let (mut health, mut reasons) = health(&status.health);
    if let Some(warnings) = supervised {
        if health == "HEALTH_OK" && !warnings.is_empty() {
            health = "HEALTH_WARN";
        }
        reasons.extend(warnings.iter().cloned());
    }
    (health, reasons)
}

/// The health word and its reasons.
fn health(health: &Health) -> (&'static str, Vec<String>) {
    match health {
        Health::Ok => ("HEALTH_OK", Vec::new()),
        Health::Warn(reasons) => ("HEALTH_WARN", reasons.clone()),
        Health::Err(reasons) => ("HEALTH_ERR", reasons.clone()),
    }
}

fn status_json(status: &MonStatus) -> serde_json::Value {
    let (health, reasons) = health(&status.health);
    let map = &status.map;
    serde_json::json!({
        "health": { "status": health, "checks": reasons, "inactive": status.inactive },
        "monitors": status.monitors.iter().map(|m| serde_json::json!({"name": m.name, "addr": m.addr})).collect::<Vec<_>>(),
        "leader": status.leader,
        "epoch": map.epoch,
        "osds": {
            "total": map.osds.len(),
            "up": map.osds.values().filter(|o| o.up).count(),
            "in": map.osds.values().filter(|o| o.is_in).count(),
        },
        "pools": map.pools.len(),
        "filesystems": map.filesystems.values().map(|fs| serde_json::json!({
            "name": fs.name,
            "mds": fs.mds.as_ref().map(|m| m.name.clone()),
        })).collect::<Vec<_>>(),
        "pgs": status.pgs,
        "usage": { "used_bytes": status.used_bytes, "total_bytes": status.total_bytes },
        "objects": status.pool_usage.iter().map(|(_, u)| u.objects).sum::<u64>(),
        "recovery_pending_objects": status.recovery_pending,
        "stored_bytes": status.pool_usage.iter().map(|(_, u)| u.stored_bytes).sum::<u64>(),
        "read_repairs": status.read_repairs.iter().map(|(osd, n)| serde_json::json!({"osd": osd.0, "copies": n})).collect::<Vec<_>>(),
        "cache": {
            "limit_bytes": status.cache.limit_bytes,
            "held_bytes": status.cache.held_bytes,
            "hit_bytes": status.cache.hit_bytes,
            "miss_bytes": status.cache.miss_bytes,
        },
    })
}

/// The OSDs' read caches in one line: what they hold, and the share of the bytes read
/// since they started that came from memory (none configured: no line).
fn cache_line(cache: &CacheFigures) -> Option<String> {
    (cache.limit_bytes > 0).then(|| {
        let read = cache.hit_bytes + cache.miss_bytes;
        format!(
            "{} held of {}; {} of {} read from memory",
            crate::text::approximate(cache.held_bytes),
            crate::text::approximate(cache.limit_bytes),
            crate::text::percent(cache.hit_bytes, read),
            crate::text::approximate(read),
        )
    })
}

pub fn osd(who: &Who, command: OsdCommand) -> Result<(), String> {
    let (conf, runtime, cluster) = connect(who)?;
    match command {
        OsdCommand::Create { host } => {
            let host = match host {
                Some(host) => host,
                None => hostname()?,
            };
            let id = runtime.block_on(create_osd(&cluster, &conf, &host))?;
            println!(
                "osd.{id} made on host {host}, its keyring in {}; run it with: coffer osd \
                 --id {id} --listen IP (the address the other hosts reach it at)",
                conf.keyring_path(&EntityName::osd(id)).display()
            );
            Ok(())
        }
        OsdCommand::Ls { json: as_json } => {
            let map = cluster.map();
            if as_json {
                return json(&map.osds.values().collect::<Vec<_>>());
            }
            println!(
                "{:<8} {:<6} {:<5} {:<9} {:<12} ADDRESS",
                "OSD", "STATE", "IN", "SPACE", "HOST"
            );
            for osd in map.osds.values() {
                println!(
                    "{:<8} {:<6} {:<5} {:<9} {:<12} {}",
                    format!("osd.{}", osd.id.0),
                    if osd.up { "up" } else { "down" },
                    if osd.is_in { "in" } else { "out" },
                    match osd.space {
                        Space::Ok => "ok",
                        Space::NearFull => "nearfull",
                        Space::Full => "full",
                    },
                    osd.host,
                    osd.addr.as_deref().unwrap_or("-")
                );
            }
            Ok(())
        }
        OsdCommand::SetFullRatio { ratio } | OsdCommand::SetNearfullRatio { ratio } => {
            if !(ratio > 0.0 && ratio <= 1.0) {
                return Err(format!(
                    "ratio {ratio}: give a share of a store, above 0 and at most 1"
                ));
            }
            let permille = (ratio * 1000.0).round() as u16;
            let mut ratios = cluster.map().space_ratios;
            match command {
                OsdCommand::SetFullRatio { .. } => ratios.full_permille = permille,
                _ => ratios.nearfull_permille = permille,
            }
            let change = Change::SetSpaceRatios { ratios };
            runtime
                .block_on(cluster.command(MonCommand::Change(change)))
                .map_err(|e| e.to_string())?;
            println!(
                "stores count as nearfull at {:.1} % and full at {:.1} %",
                f64::from(ratios.nearfull_permille) / 10.0,
                f64::from(ratios.full_permille) / 10.0
            );
            Ok(())
        }
        OsdCommand::Out { id } | OsdCommand::In { id } => {
            let id = map::placement::OsdId(id);
            let change = match command {
                OsdCommand::Out { .. } => Change::OsdOut { id },
                _ => Change::OsdIn { id },
            };
            runtime
                .block_on(cluster.command(MonCommand::Change(change)))
                .map_err(|e| e.to_string())?;
            Ok(())
        }
    }
}

const EDGE_NEEDS_SECURE_MON_LINKS: &str =
    "--seal edge needs secure monitor links (the KMS releases pool keys over secure links only)";

/// Whether a new pool is sealed at the edge: `--seal` (osd or edge) if given, else wherever
/// the monitor links are secure. Edge needs them secure: the KMS releases pool keys over
/// secure links only.
pub fn seal_at_edge(seal: Option<&str>, mon_links_secure: bool) -> Result<bool, String> {
    match seal {
        None => Ok(mon_links_secure),
        Some("osd") => Ok(false),
        Some("edge") if mon_links_secure => Ok(true),
        Some("edge") => Err(EDGE_NEEDS_SECURE_MON_LINKS.into()),
        Some(other) => Err(format!("--seal {other}: use osd or edge")),
    }
}

/// A new pool's size, min_size and code, from `pool create`'s options.
#[derive(Debug, PartialEq, Eq)]
pub struct PoolShape {
    pub size: u8,
    pub min_size: u8,
    pub erasure: Option<Erasure>,
}

impl PoolShape {
    /// Replicated: `size` copies (3 by default), `min_size` a majority unless given.
    /// Erasure-coded (`ec` as `K+M`, with its stripe unit, 4 KiB by default): k + m shards,
    /// min_size k + 1 unless given (Ceph's default: one shard lost still leaves a write
    /// one more than it needs to be read back). The map checks the numbers again.
    pub fn new(
        size: Option<u8>,
        min_size: Option<u8>,
        ec: Option<&str>,
        stripe_unit: Option<&str>,
    ) -> Result<PoolShape, String> {
        let Some(ec) = ec else {
            let size = size.unwrap_or(3);
            return Ok(PoolShape {
                size,
                min_size: min_size.unwrap_or(size - size / 2),
                erasure: None,
            });
        };
        if size.is_some() {
            return Err("--size is for replicated pools: an erasure-coded pool's is k + m".into());
        }
        let unit = match stripe_unit {
            Some(text) => {
                crate::text::parse_size(text).map_err(|e| format!("--stripe-unit {e}"))?
            }
            None => u64::from(ec::UNIT_BYTES_DEFAULT),
        };
        let profile = ec::Profile::parse(ec, unit).map_err(|e| format!("--ec {ec}: {e}"))?;
        let shards = u8::try_from(profile.shards()).expect("a profile has at most 32 shards");
        let k = u8::try_from(profile.k()).expect("k is below k + m");
        Ok(PoolShape {
            size: shards,
            min_size: min_size.unwrap_or((k + 1).min(shards)),
            erasure: Some(Erasure::new(profile)),
        })
    }

    /// The map change that creates pool `name` of this shape.
    pub fn change(&self, name: &str, pg_num: u32, domain: FailureDomain) -> Change {
        Change::CreatePool {
            name: name.into(),
            size: self.size,
            min_size: self.min_size,
            pg_num,
            domain,
            erasure: self.erasure,
        }
    }

    /// `3 copies`, or `erasure-coded 4+2 (stripe unit 4 KiB)`.
    pub fn describe(&self) -> String {
        match self.erasure {
            None => crate::text::count(u64::from(self.size), "copy", "copies"),
            Some(code) => describe_code(code),
        }
    }
}

/// `erasure-coded 4+2 (stripe unit 4 KiB)`.
pub fn describe_code(code: Erasure) -> String {
    let profile = code.profile();
    format!(
        "erasure-coded {profile} (stripe unit {})",
        crate::text::size(profile.unit_bytes())
    )
}

/// Whether `conf`'s links to the monitors are secure.
pub fn mon_links_secure(conf: &Conf) -> Result<bool, String> {
    Ok(conf.mon_modes().map_err(|e| e.to_string())? == [messenger::Mode::Secure])
}

pub fn pool(who: &Who, command: PoolCommand) -> Result<(), String> {
    let (conf, runtime, cluster) = connect(who)?;
    match command {
        PoolCommand::Create {
            name,
            size,
            min_size,
            ec,
            stripe_unit,
            pg_num,
            domain,
            seal,
        } => {
            let domain = match domain.as_str() {
                "osd" => FailureDomain::Osd,
                "host" => FailureDomain::Host,
                other => return Err(format!("--domain {other}: use osd or host")),
            };
            let shape = PoolShape::new(size, min_size, ec.as_deref(), stripe_unit.as_deref())?;
            let change = shape.change(&name, pg_num, domain);
            let (command, seal) = if seal_at_edge(seal.as_deref(), mon_links_secure(&conf)?)? {
                (MonCommand::PoolCreateEdge { change }, "edge")
            } else {
                (MonCommand::Change(change), "osd")
            };
            runtime
                .block_on(cluster.command(command))
                .map_err(|e| e.to_string())?;
            println!(
                "pool {name} created: {}, min_size {}, {pg_num} pgs, sealed at the {seal}",
                shape.describe(),
                shape.min_size
            );
            let places = cluster.map().domains_in(domain);
            if usize::from(shape.size) > places {
                eprintln!(
                    "warning: pool {name} wants {} {}, but the cluster has {places} {} to hold \
                     them: its PGs stay undersized until there are more",
                    shape.size,
                    if shape.erasure.is_some() {
                        "shards"
                    } else {
                        "copies"
                    },
                    match domain {
                        FailureDomain::Osd => "OSDs in",
                        FailureDomain::Host => "hosts with OSDs in",
                    }
                );
            }
            Ok(())
        }
        PoolCommand::RotateKey { name } => {
            runtime
                .block_on(cluster.command(MonCommand::PoolRotateKey { name: name.clone() }))
                .map_err(|e| e.to_string())?;
            let map = runtime
                .block_on(cluster.wait_for_epoch(cluster.map().epoch + 1))
                .map_err(|e| e.to_string())?;
            if let Some(map::cluster::Seal::Edge { key }) = map.pool_by_name(&name).map(|p| p.seal)
            {
                println!("pool {name}: new writes are sealed under data key {key}");
            }
            Ok(())
        }
        PoolCommand::Ls { json: as_json } => {
            let map = cluster.map();
            if as_json {
                return json(&map.pools.values().collect::<Vec<_>>());
            }
            for pool in map.pools.values() {
                let seal = match pool.seal {
                    map::cluster::Seal::Osd => "osd".to_string(),
                    map::cluster::Seal::Edge { key } => format!("edge (data key {key})"),
                };
                let kind = match pool.erasure {
                    Some(code) => describe_code(code),
                    None => "replicated".into(),
                };
                println!(
                    "{} (id {}): {kind}, size {}, min_size {}, {} pgs, domain {:?}, sealed at \
                     {seal}",
                    pool.name, pool.id, pool.size, pool.min_size, pool.pg_num, pool.domain
                );
            }
            Ok(())
        }
        PoolCommand::Scrub {
            name,
            pg,
            repair,
            verbose,
        } => {
            let pool = runtime
                .block_on(cluster.pool(&name))
                .map_err(|e| e.to_string())?;
            scrub(&runtime, &pool, pg, repair, verbose)
        }
        PoolCommand::Rm {
            name,
            yes_i_really_mean_it,
        } => {
            if !yes_i_really_mean_it {
                return Err(format!(
                    "removing pool {name} loses every object in it; add --yes-i-really-mean-it"
                ));
            }
            let change = Change::RemovePool { name: name.clone() };
            runtime
                .block_on(cluster.command(MonCommand::Change(change)))
                .map_err(|e| e.to_string())?;
            println!("pool {name} removed");
            Ok(())
        }
    }
}

/// Scrubs the pool's PGs (or one), printing each inconsistent object under its PG (every
/// PG with `verbose`) and one summary line; fails while any inconsistency remains
/// unrepaired.
fn scrub(
    runtime: &tokio::runtime::Runtime,
    pool: &client::Pool,
    only: Option<u32>,
    repair: bool,
    verbose: bool,
) -> Result<(), String> {
    let pg_num = pool.pg_num().map_err(|e| e.to_string())?;
    let numbers = match only {
        Some(number) if number >= pg_num => {
            return Err(format!(
                "pool {} has {pg_num} PGs (0 to {})",
                pool.name(),
                pg_num - 1
            ))
        }
        Some(number) => number..number + 1,
        None => 0..pg_num,
    };
    let (mut objects, mut bytes, mut found, mut left, mut stuck) = (0, 0, 0, 0, 0);
    let pgs = numbers.len() as u64;
    let what = format!("scrub of pool {}", pool.name());
    let progress = crate::progress::Progress::new(&what, pgs, "PGs");
    for number in numbers {
        progress.set_message(&format!("pg {}.{number}", pool.id()));
        let result = runtime
            .block_on(pool.scrub_pg(number, repair))
            .map_err(|e| {
                progress.finish();
                format!("pg {}.{number}: {e}", pool.id())
            })?;
        let osds: Vec<String> = result.osds.iter().map(|o| format!("osd.{}", o.0)).collect();
        let verdict = match result.findings.len() {
            0 => "consistent".to_string(),
            n => format!("{} inconsistent", objects_text(n as u64)),
        };
        if verbose || !result.findings.is_empty() {
            progress.println(&format!(
                "pg {}.{number}: {} on {} ({} read): {verdict}",
                pool.id(),
                objects_text(result.objects),
                osds.join(", "),
                crate::text::approximate(result.bytes)
            ));
        }
        for finding in &result.findings {
            let state = match (finding.repaired, finding.repairable) {
                (true, _) => " [repaired]",
                (false, false) => " [not repairable by scrub]",
                (false, true) => "",
            };
            progress.println(&format!("  {}: {}{state}", finding.object, finding.what));
        }
        progress.inc(1);
        objects += result.objects;
        bytes += result.bytes;
        found += result.findings.len();
        left += result.findings.iter().filter(|f| !f.repaired).count();
        stuck += result.findings.iter().filter(|f| !f.repairable).count();
    }
    progress.finish();
    println!(
        "pool {}: {} scrubbed, {found} inconsistent, {} repaired ({}, {} read on the \
         primaries)",
        pool.name(),
        objects_text(objects),
        found - left,
        crate::text::count(pgs, "PG", "PGs"),
        crate::text::approximate(bytes)
    );
    let pg = only.map(|n| format!(" --pg {n}")).unwrap_or_default();
    match (left, repair) {
        (0, _) => Ok(()),
        (n, false) if stuck < n => Err(format!(
            "{} inconsistent; coffer pool scrub {}{pg} --repair replaces the bad copies where \
             a majority holds the newest version",
            objects_text(n as u64),
            pool.name()
        )),
        (n, _) => Err(format!(
            "{} inconsistent and not repaired (see above)",
            objects_text(n as u64)
        )),
    }
}

fn objects_text(n: u64) -> String {
    crate::text::count(n, "object", "objects")
}

fn read_input(file: Option<&Path>) -> Result<Vec<u8>, String> {
    match file {
        Some(path) => std::fs::read(path).map_err(|e| format!("{}: {e}", path.display())),
        None => {
            let mut data = Vec::new();
            std::io::stdin()
                .read_to_end(&mut data)
                .map_err(|e| format!("standard input: {e}"))?;
            Ok(data)
        }
    }
}

pub fn obj(who: &Who, command: ObjCommand) -> Result<(), String> {
    let (_, runtime, cluster) = connect(who)?;
    let open = |name: &str| {
        runtime
            .block_on(cluster.pool(name))
            .map_err(|e| e.to_string())
    };
    match command {
        ObjCommand::Put {
            pool,
            object: name,
            file,
        } => {
            let data = read_input(file.as_deref())?;
            let pool = open(&pool)?;
            runtime
                .block_on(pool.put(&name, Bytes::from(data)))
                .map_err(|e| format!("{name}: {e}"))
        }
        ObjCommand::Get {
            pool,
            object: name,
            file,
        } => {
            let pool = open(&pool)?;
            let data = runtime
                .block_on(pool.get(&name))
                .map_err(|e| format!("{name}: {e}"))?;
            match file {
                Some(path) => {
                    std::fs::write(&path, &data).map_err(|e| format!("{}: {e}", path.display()))
                }
                None => std::io::stdout()
                    .write_all(&data)
                    .map_err(|e| format!("standard output: {e}")),
            }
        }
        ObjCommand::Rm { pool, object: name } => {
            let pool = open(&pool)?;
            runtime
                .block_on(pool.remove(&name))
                .map_err(|e| format!("{name}: {e}"))
        }
        ObjCommand::Ls { pool } => {
            let pool = open(&pool)?;
            let mut names = runtime.block_on(pool.list()).map_err(|e| e.to_string())?;
            names.sort();
            let mut out = std::io::stdout().lock();
            for name in names {
                writeln!(out, "{name}").map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        ObjCommand::Stat {
            pool,
            object: name,
            json: as_json,
        } => {
            let pool = open(&pool)?;
            let stat = runtime
                .block_on(pool.stat(&name))
                .map_err(|e| format!("{name}: {e}"))?;
            if as_json {
                return json(&serde_json::json!({
                    "name": name,
                    "size": stat.size,
                    "mtime_ns": stat.mtime_ns,
                    "version": format!("{}.{}", stat.version.epoch, stat.version.seq),
                }));
            }
            println!(
                "{name}: {}, modified {}, version {}.{}",
                crate::text::size(stat.size),
                crate::text::date(stat.mtime_ns.into()),
                stat.version.epoch,
                stat.version.seq
            );
            Ok(())
        }
    }
}

/// Gives `entity` a key with `caps` (or replaces its caps); returns its keyring (PEM).
pub async fn new_key(cluster: &Cluster, entity: &str, caps: Caps) -> Result<String, String> {
    entity.parse::<EntityName>().map_err(|e| format!("{e}"))?;
    let command = MonCommand::AuthAdd {
        entity: entity.into(),
        caps,
    };
    match cluster.command(command).await.map_err(|e| e.to_string())? {
        MonReply::Keyring { pem, .. } => Ok(pem),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// Gives `entity` a key with `caps` (or replaces its caps) and writes its keyring to
/// `output`, or beside the configuration; returns where it went.
pub fn add_key(
    conf: &Conf,
    runtime: &tokio::runtime::Runtime,
    cluster: &Cluster,
    entity: &str,
    caps: Caps,
    output: Option<PathBuf>,
) -> Result<PathBuf, String> {
    let parsed: EntityName = entity.parse().map_err(|e| format!("{e}"))?;
    let pem = runtime.block_on(new_key(cluster, entity, caps))?;
    let path = output.unwrap_or_else(|| conf.keyring_path(&parsed));
    crate::up::write_private(&path, &pem)?;
    Ok(path)
}

pub fn auth(who: &Who, command: AuthCommand) -> Result<(), String> {
    let (conf, runtime, cluster) = connect(who)?;
    match command {
        AuthCommand::Add {
            entity,
            caps,
            output,
        } => {
            let caps = Caps::parse(&caps).map_err(|e| format!("--caps: {e}"))?;
            let path = add_key(&conf, &runtime, &cluster, &entity, caps, output)?;
            println!("{entity}: keyring written to {}", path.display());
            Ok(())
        }
        AuthCommand::Ls => {
            match runtime
                .block_on(cluster.command(MonCommand::AuthList))
                .map_err(|e| e.to_string())?
            {
                MonReply::AuthList(entries) => {
                    for entry in entries {
                        println!("{}\t{}", entry.entity, entry.caps);
                    }
                    Ok(())
                }
                other => Err(format!("unexpected reply {other:?}")),
            }
        }
        AuthCommand::Rm { entity } => {
            runtime
                .block_on(cluster.command(MonCommand::AuthRemove {
                    entity: entity.clone(),
                }))
                .map_err(|e| e.to_string())?;
            println!("{entity} removed");
            Ok(())
        }
    }
}

pub fn blocklist(who: &Who, command: BlocklistCommand) -> Result<(), String> {
    let (_, runtime, cluster) = connect(who)?;
    match command {
        BlocklistCommand::Ls => {
            for instance in &cluster.map().blocklist {
                println!("{instance:016x}");
            }
            Ok(())
        }
        BlocklistCommand::Rm { instance } => {
            let client = u64::from_str_radix(&instance, 16)
                .map_err(|e| format!("{instance:?} is not a hex instance: {e}"))?;
            let change = Change::Unblocklist { client };
            runtime
                .block_on(cluster.command(MonCommand::Change(change)))
                .map_err(|e| e.to_string())?;
            println!("{instance} may write again");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_pools_are_sealed_at_the_edge_unless_the_monitor_links_are_crc() {
        assert_eq!(seal_at_edge(None, true), Ok(true));
        assert_eq!(seal_at_edge(None, false), Ok(false));
        assert_eq!(seal_at_edge(Some("osd"), true), Ok(false));
        assert_eq!(seal_at_edge(Some("edge"), true), Ok(true));
        let refused = seal_at_edge(Some("edge"), false).expect_err("crc monitor links");
        assert!(refused.contains("secure monitor links"), "{refused}");
        assert!(seal_at_edge(Some("client"), true).is_err());
    }

    #[test]
    fn a_pool_is_replicated_three_times_unless_an_erasure_code_is_given() {
        let replicated = PoolShape::new(None, None, None, None).expect("replicated");
        assert_eq!((replicated.size, replicated.min_size), (3, 2));
        assert_eq!(replicated.describe(), "3 copies");
        let two = PoolShape::new(Some(2), Some(1), None, None).expect("two copies");
        assert_eq!((two.size, two.min_size, two.erasure), (2, 1, None));

        let coded = PoolShape::new(None, None, Some("4+2"), None).expect("4+2");
        assert_eq!((coded.size, coded.min_size), (6, 5), "min_size k + 1");
        assert_eq!(coded.describe(), "erasure-coded 4+2 (stripe unit 4 KiB)");
        let wide = PoolShape::new(None, Some(9), Some("8+3"), Some("64K")).expect("8+3");
        let profile = wide.erasure.expect("coded").profile();
        assert_eq!(
            (wide.size, wide.min_size, profile.unit_bytes()),
            (11, 9, 65_536)
        );

        for (size, ec, unit, why) in [
            (Some(3), "4+2", None, "--size is for replicated pools"),
            (None, "4", None, "is not an erasure-code profile"),
            (None, "4+0", None, "k ≥ 1 and m ≥ 1"),
            (None, "4+2", Some("5000"), "multiple of 4 KiB"),
            (None, "4+2", Some("lots"), "--stripe-unit"),
        ] {
            let refused = PoolShape::new(size, None, Some(ec), unit).expect_err(ec);
            assert!(refused.contains(why), "{ec} {unit:?}: {refused}");
        }
    }
}
