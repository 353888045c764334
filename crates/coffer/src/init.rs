//! `coffer init`: a new cluster's configuration and keys, for monitors on several hosts.
//! It writes what `coffer up` writes for one machine (docs/deploy.md): the configuration
//! with every monitor's address, each monitor's keyring, the admin's keyring, and the seed
//! the first monitor bootstraps the cluster from. The operator copies them to the hosts.

use std::path::{Path, PathBuf};

use client::conf::{Conf, MonEntry, OsdSection, Transit, CONF_FILE, DEFAULT_DATA_DIR};
use map::auth::Caps;
use messenger::message::AuthEntry;
use messenger::{ClusterCa, EntityName};

use crate::daemon::{reachable_addr, SeedFile, SEED_FILE};
use crate::up::{write_private, MONS_MAX};

/// The port a monitor address without one gets (Ceph's v1 monitor port).
pub const MON_PORT: u16 = 6789;

/// The settings of a new cluster that `coffer up` and `coffer init` share.
#[derive(clap::Args)]
pub struct ClusterArgs {
    /// At-rest encryption of new OSD stores: gcm, xts-4096, xts-512 or none.
    #[arg(long, default_value = "gcm")]
    pub at_rest: String,
    /// Link mode for every link of a new cluster: secure or crc.
    #[arg(long, default_value = "secure")]
    pub in_transit: String,
    /// Link mode to the monitors of a new cluster, if not --in-transit's (like Ceph's
    /// ms_mon_client_mode). The KMS releases data keys over secure links only, so the S3
    /// gateway's server-side encryption needs secure monitor links.
    #[arg(long)]
    pub mon_transit: Option<String>,
    /// Size of each new OSD's data file, in GiB, allocated on the disk in full when the OSD
    /// is made (so a disk too small is found then, not by a write).
    #[arg(long, default_value_t = 8)]
    pub store_gib: u64,
    /// Each OSD's read cache, in MiB (0: none) [default: a sixteenth of the machine's
    /// memory, from 64 MiB to 2 GiB].
    #[arg(long)]
    pub osd_cache_mib: Option<u64>,
}

impl ClusterArgs {
    /// The link mode to the monitors.
    pub fn mon_transit(&self) -> &str {
        self.mon_transit.as_deref().unwrap_or(&self.in_transit)
    }

    /// Refuses modes that do not exist, before anything is written.
    pub fn check(&self) -> Result<(), String> {
        let mode_ok = |m: &str| matches!(m, "secure" | "crc");
        if let Some(mode) = self.mon_transit.as_deref().filter(|m| !mode_ok(m)) {
            return Err(format!("--mon-transit {mode}: use secure or crc"));
        }
        if !mode_ok(&self.in_transit) {
            return Err(format!(
                "--in-transit {}: use secure or crc",
                self.in_transit
            ));
        }
        self.at_rest
            .parse::<store::Mode>()
            .map_err(|e| format!("--at-rest: {e}"))?;
        Ok(())
    }
}

#[derive(clap::Args)]
pub struct InitArgs {
    /// Where to write the new cluster's configuration and keys.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data: PathBuf,
    /// A monitor's address, IP[:PORT] (port 6789 by default), once per monitor: the
    /// addresses the other hosts reach them at. The first bootstraps the cluster.
    #[arg(long = "mon", required = true, value_name = "ADDR")]
    pub mons: Vec<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `coffer init`: writes a new cluster in `args.data`, and says what goes to which host.
pub fn run(args: InitArgs) -> Result<(), String> {
    args.cluster.check()?;
    if args.mons.len() > usize::from(MONS_MAX) {
        return Err(format!(
            "{} monitors: use 1 to {MONS_MAX} (an odd number survives the most failures)",
            args.mons.len()
        ));
    }
    let addrs = args
        .mons
        .iter()
        .map(|text| reachable_addr(text, MON_PORT, "--mon").map(|addr| addr.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(twice) = (1..addrs.len()).find(|&i| addrs[..i].contains(&addrs[i])) {
        return Err(format!("--mon {}: given twice", addrs[twice]));
    }
    let conf_path = args.data.join(CONF_FILE);
    if conf_path.exists() {
        return Err(format!(
            "{} exists: a cluster was made there already (remove it, or give another --data)",
            conf_path.display()
        ));
    }
    std::fs::create_dir_all(&args.data).map_err(|e| format!("{}: {e}", args.data.display()))?;
    let conf = new_cluster(&args.data, &args.cluster, &addrs)?;
    conf.save(&conf_path).map_err(|e| e.to_string())?;
    let dir = args.data.display();
    println!("cluster {} made in {dir}", conf.fsid);
    for (i, mon) in conf.mons.iter().enumerate() {
        let seed = if i == 0 {
            format!(" and {dir}/{}/{SEED_FILE}", mon.name)
        } else {
            String::new()
        };
        println!(
            "  {} at {}: copy {dir}/{CONF_FILE}, {dir}/{}/keyring{seed}; run coffer --conf \
             {dir}/{CONF_FILE} mon --name {}",
            mon.name, mon.addr, mon.name, mon.name
        );
    }
    println!(
        "  admin: {dir}/client.admin.keyring with {dir}/{CONF_FILE}; OSDs: coffer osd create \
         --host HOST on their hosts (docs/deploy.md)"
    );
    Ok(())
}

fn random_fsid() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Makes a new cluster's identity in `dir`: the monitors (mon.a, mon.b, … at `addrs`) and
/// their keyrings, the admin's keyring, and the seed the first monitor bootstraps from.
/// Returns its configuration, not yet saved.
pub fn new_cluster(dir: &Path, cluster: &ClusterArgs, addrs: &[String]) -> Result<Conf, String> {
    assert!(
        (1..=usize::from(MONS_MAX)).contains(&addrs.len()),
        "1 to {MONS_MAX} monitors"
    );
    let fsid = random_fsid();
    let ca = ClusterCa::generate(&fsid).map_err(|e| e.to_string())?;
    let mons = addrs
        .iter()
        .zip(b'a'..)
        .map(|(addr, letter)| MonEntry {
            name: format!("mon.{}", char::from(letter)),
            addr: addr.clone(),
        })
        .collect();
    let admin_name: EntityName = "client.admin".parse().map_err(|e| format!("{e}"))?;
    let conf = Conf {
        fsid: fsid.clone(),
        mons,
        transit: Transit {
            mon: cluster.mon_transit().to_string(),
            client: cluster.in_transit.clone(),
            cluster: cluster.in_transit.clone(),
        },
        osd: OsdSection {
            at_rest: cluster.at_rest.clone(),
            store_gib: cluster.store_gib,
            cache_mib: cluster.osd_cache_mib,
            ..OsdSection::default()
        },
        nbd: None,
        gw: None,
        dashboard: None,
        kms: None,
        metrics: Default::default(),
        dir: dir.to_path_buf(),
    };
    for mon in &conf.mons {
        let name: EntityName = mon.name.parse().map_err(|e| format!("{e}"))?;
        let mon_dir = dir.join(name.as_str());
        std::fs::create_dir_all(&mon_dir).map_err(|e| format!("{}: {e}", mon_dir.display()))?;
        let identity = ca.issue(&name).map_err(|e| e.to_string())?;
        write_private(&conf.keyring_path(&name), &identity.to_pem())?;
    }
    let admin = ca.issue(&admin_name).map_err(|e| e.to_string())?;
    write_private(&conf.keyring_path(&admin_name), &admin.to_pem())?;
    let seed = SeedFile {
        fsid,
        ca_key_pem: ca.key_pem(),
        ca_cert_pem: ca.cert_pem(),
        entities: vec![(
            admin_name.to_string(),
            AuthEntry {
                cert_der: admin.cert().to_vec(),
                caps: Caps::admin(),
            },
        )],
    };
    let seed_text = serde_json::to_string(&seed).map_err(|e| e.to_string())?;
    // The first monitor bootstraps the cluster (raft membership of all, then the seed).
    write_private(&dir.join(&conf.mons[0].name).join(SEED_FILE), &seed_text)?;
    Ok(conf)
}
