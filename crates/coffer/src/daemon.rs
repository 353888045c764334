//! `coffer mon` and `coffer osd`: the daemons, each in the foreground until SIGINT or
//! SIGTERM, reading the cluster's configuration file and their keyring beside it.

use std::path::{Path, PathBuf};

use client::conf::Conf;
use client::load_identity;
use messenger::message::{AuthEntry, MonMember};
use messenger::{EntityName, Mode, ModePolicy};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

/// The seed a new cluster's first monitor bootstraps from; written by `coffer up`, removed
/// by the monitor once the cluster holds it (it contains the authority's key).
pub const SEED_FILE: &str = "seed.json";

#[derive(Serialize, Deserialize)]
pub struct SeedFile {
    pub fsid: String,
    pub ca_key_pem: String,
    pub ca_cert_pem: String,
    pub entities: Vec<(String, AuthEntry)>,
}

#[derive(clap::Args)]
pub struct MonArgs {
    /// This monitor's name in the configuration file, for example mon.a.
    #[arg(long)]
    pub name: String,
}

#[derive(clap::Args)]
pub struct OsdArgs {
    /// The OSD's number; its keyring and store are in DIR/osd.ID.
    #[arg(long, required = false)]
    pub id: u32,
    /// The address it serves clients and other OSDs on, IP[:PORT], as they reach it (any
    /// free port by default); the monitors publish it in the map.
    #[arg(long, default_value = "127.0.0.1")]
    pub listen: String,
}

/// An address other hosts reach a daemon at, from `option`'s value `text`: an IP address
/// with a port, `default_port` when none is given. The wildcard addresses are refused:
/// the map publishes what a daemon listens on.
pub fn reachable_addr(
    text: &str,
    default_port: u16,
    option: &str,
) -> Result<std::net::SocketAddr, String> {
    let addr = match text.parse::<std::net::IpAddr>() {
        Ok(ip) => std::net::SocketAddr::new(ip, default_port),
        Err(_) => text
            .parse::<std::net::SocketAddr>()
            .map_err(|e| format!("{option} {text}: {e} (give IP or IP:PORT)"))?,
    };
    if addr.ip().is_unspecified() {
        return Err(format!(
            "{option} {text}: give the address other hosts reach it at, not {}",
            addr.ip()
        ));
    }
    Ok(addr)
}

pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))
}

/// Writes `line` to stderr, which for a daemon (and `coffer up`) is its log, often on the
/// disk whose filling it reports: there the line is lost, not the process (`eprintln!`
/// panics when the write fails, and the exit would read as a crash, status 101).
pub fn tell(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Waits for SIGINT or SIGTERM.
pub async fn stop_signal() -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

pub fn write_pid(dir: &Path) -> Result<(), String> {
    let path = dir.join("pid");
    std::fs::write(&path, format!("{}\n", std::process::id()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

pub fn run_mon(conf_path: &Path, args: MonArgs) -> Result<(), String> {
    let conf = Conf::load(conf_path).map_err(|e| e.to_string())?;
    let entity: EntityName = args.name.parse().map_err(|e| format!("--name: {e}"))?;
    let rank = conf
        .mons
        .iter()
        .position(|m| m.name == args.name)
        .ok_or_else(|| format!("{} is not a monitor in {}", args.name, conf_path.display()))?;
    let identity =
        load_identity(&conf.keyring_path(&entity), &entity).map_err(|e| e.to_string())?;
    let data_dir = conf.dir.join(entity.as_str());
    let members: Vec<MonMember> = conf
        .mons
        .iter()
        .map(|m| MonMember {
            name: m.name.clone(),
            addr: m.addr.clone(),
        })
        .collect();
    let config = mon::MonConfig {
        rank: rank as u64,
        data_dir: data_dir.clone(),
        monitors: members,
        // Secure links are always accepted: OSDs fetch their store keys over nothing else.
        modes: dedup(
            [
                conf.mon_modes().map_err(|e| e.to_string())?,
                vec![Mode::Secure],
            ]
            .concat(),
        ),
        timeouts: mon::Timeouts {
            down_after: conf.down_after(),
            out_after: conf.out_after(),
        },
    };
    let addr = conf.mons[rank].addr.clone();
    runtime()?.block_on(async move {
        let listener = TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("{entity} cannot listen on {addr}: {e}"))?;
        let monitor = mon::Monitor::start(&identity, config, listener)
            .await
            .map_err(|e| e.to_string())?;
        crate::scrape::start(conf.metrics.get(entity.as_str()), |registry| {
            messenger::metrics::register(registry);
            monitor.register_metrics(registry);
        });
        write_pid(&data_dir)?;
        let seed_path = data_dir.join(SEED_FILE);
        if seed_path.exists() {
            bootstrap(&monitor, &seed_path).await?;
        }
        tracing::info!(%entity, %addr, "serving");
        stop_signal().await?;
        tracing::info!(%entity, "stopping");
        monitor.shutdown().await;
        Ok(())
    })
}

async fn bootstrap(monitor: &mon::Monitor, seed_path: &Path) -> Result<(), String> {
    let text =
        std::fs::read_to_string(seed_path).map_err(|e| format!("{}: {e}", seed_path.display()))?;
    let seed: SeedFile =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", seed_path.display()))?;
    monitor
        .bootstrap(mon::Seed {
            fsid: seed.fsid,
            ca_key_pem: seed.ca_key_pem,
            ca_cert_pem: seed.ca_cert_pem,
            entities: seed.entities,
        })
        .await
        .map_err(|e| format!("bootstrap: {e}"))?;
    std::fs::remove_file(seed_path).map_err(|e| format!("{}: {e}", seed_path.display()))?;
    tracing::info!("cluster bootstrapped; the seed file is removed");
    Ok(())
}

/// The store directory of OSD `id`.
pub fn osd_dir(conf: &Conf, id: u32) -> PathBuf {
    conf.dir.join(format!("osd.{id}"))
}

pub fn run_osd(conf_path: &Path, args: OsdArgs) -> Result<(), String> {
    let conf = Conf::load(conf_path).map_err(|e| e.to_string())?;
    let entity = EntityName::osd(args.id);
    let listen = reachable_addr(&args.listen, 0, "--listen")?;
    let identity =
        load_identity(&conf.keyring_path(&entity), &entity).map_err(|e| e.to_string())?;
    let dir = osd_dir(&conf, args.id);
    let store_dir = dir.join("store");
    let config = osd::OsdConfig {
        id: map::placement::OsdId(args.id),
        data_dir: store_dir.clone(),
        mons: conf.mon_addrs().map_err(|e| e.to_string())?,
        mon_modes: conf.mon_modes().map_err(|e| e.to_string())?,
        serve_modes: ModePolicy {
            clients: conf.client_modes().map_err(|e| e.to_string())?,
            daemons: conf.cluster_modes().map_err(|e| e.to_string())?,
        },
        cluster_modes: conf.cluster_modes().map_err(|e| e.to_string())?,
        cache_bytes: conf.osd.cache_mib.map(|mib| mib.saturating_mul(1 << 20)),
    };
    runtime()?.block_on(async move {
        if !store_dir.join("meta.redb").exists() {
            let mode: store::Mode = conf
                .osd
                .at_rest
                .parse()
                .map_err(|e| format!("osd.at_rest: {e}"))?;
            let options = store::MkfsOptions {
                mode,
                size_bytes: conf.osd.store_gib << 30,
                device: None,
            };
            osd::Osd::mkfs(
                &identity,
                config.mons.clone(),
                store_dir.clone(),
                options,
            )
            .await
            .map_err(|e| format!("creating the store in {}: {e}", store_dir.display()))?;
            tracing::info!(store = %store_dir.display(), at_rest = %conf.osd.at_rest, "store created");
        }
        // Before it waits: whoever signals it by its pid file reaches this process.
        write_pid(&dir)?;
        crate::scrape::start(conf.metrics.get(entity.as_str()), |registry| {
            messenger::metrics::register(registry);
            store::metrics::register(registry);
            osd::metrics::register(registry);
        });
        let stop = stop_signal();
        tokio::pin!(stop);
        tokio::select! {
            result = &mut stop => return result,
            () = wait_for_room(&store_dir) => {}
        }
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| format!("{entity} cannot listen on {listen}: {e}"))?;
        let daemon = tokio::select! {
            result = &mut stop => return result,
            started = osd::Osd::start(&identity, config, listener) => {
                started.map_err(|e| e.to_string())?
            }
        };
        tokio::select! {
            result = &mut stop => result?,
            cause = daemon.store_failed() => {
                daemon.shutdown().await;
                return Err(format!(
                    "{entity}: its store failed ({cause}); stopping so that it is opened \
                     again, as after a crash (coffer up starts it again unless run with \
                     --no-restart)"
                ));
            }
        }
        tracing::info!(%entity, "stopping");
        daemon.shutdown().await;
        Ok(())
    })
}

/// Waits until the file system under a store has the room an OSD needs to run
/// ([`map::cluster::HOST_FULL_BYTES`]): opening a store after a crash writes, and a store
/// whose file system filled under it must not fail again at once.
async fn wait_for_room(store_dir: &Path) {
    let mut said = false;
    loop {
        let free = store::host_free_bytes(store_dir).unwrap_or(u64::MAX);
        if free >= map::cluster::HOST_FULL_BYTES {
            if said {
                tracing::info!(free_mib = free >> 20, "room again; opening the store");
            }
            return;
        }
        if !said {
            tracing::warn!(
                "waiting for room: the file system under {} has {} MiB free, and the store \
                 opens once it has {} MiB",
                store_dir.display(),
                free >> 20,
                map::cluster::HOST_FULL_BYTES >> 20
            );
            said = true;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

fn dedup(modes: Vec<Mode>) -> Vec<Mode> {
    let mut out = Vec::new();
    for mode in modes {
        if !out.contains(&mode) {
            out.push(mode);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_take_a_default_port_and_must_be_reachable() {
        let addr = |text| reachable_addr(text, 6789, "--mon").map(|a| a.to_string());
        assert_eq!(addr("10.0.0.1"), Ok("10.0.0.1:6789".into()));
        assert_eq!(addr("10.0.0.1:3300"), Ok("10.0.0.1:3300".into()));
        assert_eq!(addr("::1"), Ok("[::1]:6789".into()));
        let refused = |text| addr(text).err().unwrap_or_default();
        assert!(refused("0.0.0.0").contains("reach it at"));
        assert!(refused("[::]:7000").contains("reach it at"));
        assert!(refused("mon-a.example").contains("IP:PORT"));
    }
}
