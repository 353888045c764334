//! The cluster's configuration file (`coffer.toml`), which every command and daemon reads to
//! find the monitors, the link modes and the keyrings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use messenger::{EntityName, Mode, MonAddr};
use serde::{Deserialize, Serialize};

use crate::Error;

/// The data directory when neither `--conf` nor `COFFER_CONF` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/var/tmp/coffer";
/// The configuration file's name in a data directory.
pub const CONF_FILE: &str = "coffer.toml";

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conf {
    pub fsid: String,
    #[serde(rename = "mon")]
    pub mons: Vec<MonEntry>,
    #[serde(default)]
    pub transit: Transit,
    #[serde(default)]
    pub osd: OsdSection,
    /// The NBD export `coffer up` runs (none without this section).
    #[serde(default)]
    pub nbd: Option<NbdSection>,
    /// The S3 gateway `coffer up` runs (none without this section).
    #[serde(default)]
    pub gw: Option<GwSection>,
    /// The web dashboard `coffer up` runs (none without this section).
    #[serde(default)]
    pub dashboard: Option<DashboardSection>,
    /// The KMS of the gateway's server-side encryption when it is not the monitors' (no
    /// section: the monitors' KMS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms: Option<KmsSection>,
    /// Where each daemon serves its Prometheus metrics (`osd.0 = "127.0.0.1:9283"`; a
    /// daemon without an entry serves none). docs/metrics.md.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, String>,
    /// Where this file was read from; keyrings and daemon directories are beside it.
    #[serde(skip)]
    pub dir: PathBuf,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonEntry {
    pub name: String,
    pub addr: String,
}

/// Link modes, as Ceph's ms_mon_client_mode / ms_client_mode / ms_cluster_mode: `secure`
/// (every byte encrypted and authenticated) or `crc` (authenticated peers, checksummed but
/// readable frames).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transit {
    /// Links to the monitors.
    #[serde(default = "secure")]
    pub mon: String,
    /// Links from clients to OSDs.
    #[serde(default = "secure")]
    pub client: String,
    /// Links between OSDs.
    #[serde(default = "secure")]
    pub cluster: String,
}

fn secure() -> String {
    "secure".into()
}

impl Default for Transit {
    fn default() -> Self {
        Transit {
            mon: secure(),
            client: secure(),
            cluster: secure(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OsdSection {
    /// At-rest mode of new OSD stores: gcm, xts-4096, xts-512 or none.
    #[serde(default = "gcm")]
    pub at_rest: String,
    /// Size of a new OSD's data file, in GiB (sparse: space is used as data arrives).
    #[serde(default = "store_gib")]
    pub store_gib: u64,
    /// An OSD silent for this long is marked down.
    #[serde(default = "down_after")]
    pub down_after_secs: u64,
    /// A down OSD is marked out (its data moves elsewhere) after this long.
    #[serde(default = "out_after")]
    pub out_after_secs: u64,
    /// Each OSD's read cache, in MiB (0: none). Unset: a sixteenth of the machine's
    /// memory, from 64 MiB to 2 GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_mib: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NbdSection {
    /// The image it serves, as POOL/NAME.
    pub image: String,
    /// The address it listens on.
    pub listen: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GwSection {
    /// The address it listens on.
    pub listen: String,
    /// The pool that holds its users, buckets and objects.
    #[serde(default = "gw_pool")]
    pub pool: String,
    /// How long a lifecycle day lasts, in seconds (86,400): shorter only to test lifecycle
    /// rules, as Ceph's rgw_lc_debug_interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle_day_seconds: Option<u64>,
    /// How long access log lines wait before a request to their bucket delivers them, in
    /// seconds (300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_log_roll_seconds: Option<u64>,
    /// The region it answers as (us-east-1): every bucket's location.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The least size of every part of a multipart upload but the last, in bytes (S3's
    /// 5 MiB): smaller only to test uploads of many parts, as Ceph's
    /// rgw_multipart_min_part_size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_min_bytes: Option<u64>,
}

/// An external KMS: the transit engine of Vault or OpenBao (`vault`, `token_file`), or a
/// KMIP server (`kmip`, `certificate`, `key`). Paths are relative to this file's directory.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KmsSection {
    /// Vault's or OpenBao's address (`https://127.0.0.1:8200`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vault: Option<String>,
    /// Where its transit engine is mounted.
    #[serde(default = "transit_mount")]
    pub mount: String,
    /// The file that holds the token the gateway presents to Vault; the token needs the
    /// transit paths the README names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// A KMIP server's address (`127.0.0.1:5696`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kmip: Option<String>,
    /// The PEM client certificate the gateway presents to the KMIP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<PathBuf>,
    /// The certificate's PEM private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<PathBuf>,
    /// The PEM CA certificate the server's certificate is checked against: beside the
    /// system's for Vault, the only one for KMIP (where it is required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
}

/// Which external KMS a `[kms]` section names, with what it needs to reach it.
#[derive(Debug, PartialEq, Eq)]
pub enum KmsBackend<'a> {
    /// Vault's or OpenBao's transit engine.
    Vault {
        address: &'a str,
        mount: &'a str,
        token_file: &'a Path,
        ca: Option<&'a Path>,
    },
    /// A KMIP server.
    Kmip {
        address: &'a str,
        certificate: &'a Path,
        private_key: &'a Path,
        ca: &'a Path,
    },
}

impl KmsSection {
    /// The KMS this section names; an error says which setting is missing or misplaced.
    pub fn backend(&self) -> Result<KmsBackend<'_>, String> {
        fn needs<'a>(
            setting: &'a Option<PathBuf>,
            name: &str,
            of: &str,
        ) -> Result<&'a Path, String> {
            setting
                .as_deref()
                .ok_or_else(|| format!("[kms]: {of} needs {name}"))
        }
        match (&self.vault, &self.kmip) {
            (Some(address), None) => {
                if self.certificate.is_some() || self.private_key.is_some() {
                    return Err("[kms]: certificate and private_key are for kmip, not vault".into());
                }
                Ok(KmsBackend::Vault {
                    address,
                    mount: &self.mount,
                    token_file: needs(&self.token_file, "token_file", "vault")?,
                    ca: self.ca.as_deref(),
                })
            }
            (None, Some(address)) => {
                if self.token_file.is_some() {
                    return Err("[kms]: token_file is for vault, not kmip".into());
                }
                Ok(KmsBackend::Kmip {
                    address,
                    certificate: needs(&self.certificate, "certificate", "kmip")?,
                    private_key: needs(&self.private_key, "private_key", "kmip")?,
                    ca: needs(&self.ca, "ca", "kmip")?,
                })
            }
            (Some(_), Some(_)) => Err("[kms]: give vault or kmip, not both".into()),
            (None, None) => {
                Err("[kms]: give vault = \"https://HOST:PORT\" or kmip = \"HOST:PORT\"".into())
            }
        }
    }
}

fn transit_mount() -> String {
    "transit".into()
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DashboardSection {
    /// The address it listens on (HTTPS).
    pub listen: String,
}

/// The pool of the S3 gateway when nothing names another.
pub const GW_POOL_DEFAULT: &str = "s3";

/// The lowest port `free_loopback_port` hands out: above the well-known defaults of
/// Coffer's services (NBD's 10809, the gateway's 7480, the dashboard's 8443).
const CHOSEN_PORTS_FROM: u16 = 20_000;
/// Where the kernel's ephemeral ports start when it does not say (Linux's default).
const EPHEMERAL_FROM_DEFAULT: u16 = 32_768;
/// Random ports `free_loopback_port` tries before it asks the kernel for any.
const CHOSEN_PORT_TRIES: usize = 256;

/// A loopback port nothing listens on now, for an address written into a configuration
/// before its daemon starts. It is drawn below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`), where the ports of listeners bound to port 0 (the
/// OSDs') and of outgoing connections come from: a port from that range could go to one
/// of them between this choice and the daemon's bind, and a client would then reach the
/// wrong server. A process is never handed the same port twice.
pub fn free_loopback_port() -> std::io::Result<u16> {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(EPHEMERAL_FROM_DEFAULT);
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    if ephemeral_from > CHOSEN_PORTS_FROM {
        for _ in 0..CHOSEN_PORT_TRIES {
            let port = rand::random_range(CHOSEN_PORTS_FROM..ephemeral_from);
            if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.insert(port);
                return Ok(port);
            }
        }
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    given.insert(port);
    Ok(port)
}

impl Conf {
    /// The ports of every address this configuration names: its monitors', its front ends'
    /// and its metrics'. A port chosen for another address must not be one of these: the
    /// daemon named with it may not have bound it yet.
    pub fn named_ports(&self) -> std::collections::BTreeSet<u16> {
        let front_ends = [
            self.nbd.as_ref().map(|s| &s.listen),
            self.gw.as_ref().map(|s| &s.listen),
            self.dashboard.as_ref().map(|s| &s.listen),
        ];
        self.mons
            .iter()
            .map(|m| &m.addr)
            .chain(front_ends.into_iter().flatten())
            .chain(self.metrics.values())
            .filter_map(|addr| addr.parse::<std::net::SocketAddr>().ok())
            .map(|addr| addr.port())
            .collect()
    }
}

fn gw_pool() -> String {
    GW_POOL_DEFAULT.into()
}

fn gcm() -> String {
    "gcm".into()
}
fn store_gib() -> u64 {
    8
}
fn down_after() -> u64 {
    6
}
fn out_after() -> u64 {
    600
}

impl Default for OsdSection {
    fn default() -> Self {
        OsdSection {
            at_rest: gcm(),
            store_gib: store_gib(),
            down_after_secs: down_after(),
            out_after_secs: out_after(),
            cache_mib: None,
        }
    }
}

fn parse_mode(what: &str, text: &str) -> Result<Mode, Error> {
    text.parse()
        .map_err(|_| Error::Conf(format!("transit.{what} = {text:?}: use secure or crc")))
}

impl Conf {
    /// The configuration file named by `explicit`, else `COFFER_CONF`, else the default data
    /// directory's.
    pub fn locate(explicit: Option<&Path>) -> PathBuf {
        if let Some(path) = explicit {
            return path.to_path_buf();
        }
        match std::env::var_os("COFFER_CONF") {
            Some(path) if !path.is_empty() => PathBuf::from(path),
            _ => Path::new(DEFAULT_DATA_DIR).join(CONF_FILE),
        }
    }

    pub fn load(path: &Path) -> Result<Conf, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Conf(format!(
                "{}: {e} (start a cluster with `coffer up`, or point --conf or COFFER_CONF \
                 at its coffer.toml)",
                path.display()
            ))
        })?;
        let mut conf: Conf =
            toml::from_str(&text).map_err(|e| Error::Conf(format!("{}: {e}", path.display())))?;
        conf.dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        conf.check()?;
        Ok(conf)
    }

    pub fn save(&self, path: &Path) -> Result<(), Error> {
        let text = toml::to_string(self).map_err(|e| Error::Conf(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| Error::Conf(format!("{}: {e}", path.display())))
    }

    fn check(&self) -> Result<(), Error> {
        if self.mons.is_empty() {
            return Err(Error::Conf("no [[mon]] entries".into()));
        }
        self.mon_addrs()?;
        self.mon_modes()?;
        self.client_modes()?;
        self.cluster_modes()?;
        Ok(())
    }

    pub fn mon_addrs(&self) -> Result<Vec<MonAddr>, Error> {
        self.mons
            .iter()
            .map(|mon| {
                let entity: EntityName = mon
                    .name
                    .parse()
                    .map_err(|e| Error::Conf(format!("mon {:?}: {e}", mon.name)))?;
                let addr = mon.addr.parse().map_err(|e| {
                    Error::Conf(format!("mon {} addr {:?}: {e}", mon.name, mon.addr))
                })?;
                Ok(MonAddr { entity, addr })
            })
            .collect()
    }

    pub fn mon_modes(&self) -> Result<Vec<Mode>, Error> {
        Ok(vec![parse_mode("mon", &self.transit.mon)?])
    }

    pub fn client_modes(&self) -> Result<Vec<Mode>, Error> {
        Ok(vec![parse_mode("client", &self.transit.client)?])
    }

    pub fn cluster_modes(&self) -> Result<Vec<Mode>, Error> {
        Ok(vec![parse_mode("cluster", &self.transit.cluster)?])
    }

    /// The keyring of `entity`: `<dir>/<entity>.keyring` for clients, the daemon's own
    /// directory for monitors and OSDs.
    pub fn keyring_path(&self, entity: &EntityName) -> PathBuf {
        match entity.kind() {
            messenger::EntityKind::Client => self.dir.join(format!("{entity}.keyring")),
            _ => self.dir.join(entity.as_str()).join("keyring"),
        }
    }

    pub fn down_after(&self) -> Duration {
        Duration::from_secs(self.osd.down_after_secs)
    }

    pub fn out_after(&self) -> Duration {
        Duration::from_secs(self.osd.out_after_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chosen_ports_are_free_and_below_the_ephemeral_range() {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .expect("the ephemeral range");
        let ephemeral_from: u16 = range
            .split_whitespace()
            .next()
            .and_then(|low| low.parse().ok())
            .expect("its first port");
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let port = free_loopback_port().expect("a port");
            if ephemeral_from > CHOSEN_PORTS_FROM {
                assert!(
                    (CHOSEN_PORTS_FROM..ephemeral_from).contains(&port),
                    "{port}"
                );
            }
            assert!(seen.insert(port), "{port} handed out twice");
            std::net::TcpListener::bind(("127.0.0.1", port)).expect("it is free");
        }
    }

    #[test]
    fn a_kms_section_names_one_backend_with_what_it_needs() {
        let section = |text: &str| toml::from_str::<KmsSection>(text).expect("a [kms] section");
        let vault = section("vault = \"https://v:8200\"\ntoken_file = \"t\"");
        assert_eq!(
            vault.backend(),
            Ok(KmsBackend::Vault {
                address: "https://v:8200",
                mount: "transit",
                token_file: Path::new("t"),
                ca: None,
            })
        );
        let kmip =
            section("kmip = \"k:5696\"\ncertificate = \"c\"\nprivate_key = \"k\"\nca = \"a\"");
        assert_eq!(
            kmip.backend(),
            Ok(KmsBackend::Kmip {
                address: "k:5696",
                certificate: Path::new("c"),
                private_key: Path::new("k"),
                ca: Path::new("a"),
            })
        );
        for (text, says) in [
            ("vault = \"https://v\"", "vault needs token_file"),
            (
                "kmip = \"k:1\"\ncertificate = \"c\"\nprivate_key = \"k\"",
                "kmip needs ca",
            ),
            (
                "kmip = \"k:1\"\nprivate_key = \"k\"\nca = \"a\"",
                "kmip needs certificate",
            ),
            (
                "kmip = \"k:1\"\ntoken_file = \"t\"",
                "token_file is for vault",
            ),
            (
                "vault = \"https://v\"\ntoken_file = \"t\"\nprivate_key = \"k\"",
                "are for kmip",
            ),
            ("vault = \"https://v\"\nkmip = \"k:1\"", "not both"),
            ("mount = \"m\"", "give vault"),
        ] {
            let said = section(text).backend().err().unwrap_or_default();
            assert!(said.contains(says), "{text}: {said}");
        }
    }
}
