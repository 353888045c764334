//! Who is at the end of a link: `mon.NAME`, `osd.N`, `mds.NAME` or `client.NAME`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Longest id after the kind (`osd.` / `mon.` / `client.`), in bytes.
pub const ENTITY_ID_BYTES_MAX: usize = 63;

/// The kinds of entity, as in Ceph. (`Mds` added last, so the others keep their numbers on
/// the wire.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EntityKind {
    Mon,
    Osd,
    Client,
    /// A metadata daemon of the file systems.
    Mds,
}

impl EntityKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::Mon => "mon",
            EntityKind::Osd => "osd",
            EntityKind::Client => "client",
            EntityKind::Mds => "mds",
        }
    }
}

/// A validated entity name. Its certificate carries it as the DNS name `NAME.coffer`, so the
/// id is limited to what a DNS label allows: lower-case letters, digits and inner hyphens.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EntityName {
    text: String,
    kind: EntityKind,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EntityNameError {
    #[error("entity name {0:?} must start with mon., osd., mds. or client.")]
    Kind(String),
    #[error(
        "entity id in {0:?} must be 1 to {ENTITY_ID_BYTES_MAX} lower-case letters, digits or \
         inner hyphens (osd ids: digits only)"
    )]
    Id(String),
}

impl EntityName {
    pub fn kind(&self) -> EntityKind {
        self.kind
    }

    /// The part after the kind: `3` for `osd.3`.
    pub fn id(&self) -> &str {
        &self.text[self.kind.as_str().len() + 1..]
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn osd(id: u32) -> Self {
        EntityName {
            text: format!("osd.{id}"),
            kind: EntityKind::Osd,
        }
    }

    /// The DNS name its certificate is issued for.
    pub(crate) fn dns_name(&self) -> String {
        format!("{}.coffer", self.text)
    }
}

impl FromStr for EntityName {
    type Err = EntityNameError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (kind, id) = match text.split_once('.') {
            Some(("mon", id)) => (EntityKind::Mon, id),
            Some(("osd", id)) => (EntityKind::Osd, id),
            Some(("client", id)) => (EntityKind::Client, id),
            Some(("mds", id)) => (EntityKind::Mds, id),
            _ => return Err(EntityNameError::Kind(text.to_owned())),
        };
        let label_ok = !id.is_empty()
            && id.len() <= ENTITY_ID_BYTES_MAX
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !id.starts_with('-')
            && !id.ends_with('-');
        let osd_ok = kind != EntityKind::Osd || id.bytes().all(|b| b.is_ascii_digit());
        if !label_ok || !osd_ok {
            return Err(EntityNameError::Id(text.to_owned()));
        }
        Ok(EntityName {
            text: text.to_owned(),
            kind,
        })
    }
}

impl TryFrom<String> for EntityName {
    type Error = EntityNameError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<EntityName> for String {
    fn from(name: EntityName) -> String {
        name.text
    }
}

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// How a link protects its frames once both ends are authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// Every byte inside TLS 1.3 (AES-256-GCM records).
    Secure,
    /// TLS 1.3 authenticates both ends, then frames travel in the clear with CRC32C checks.
    Crc,
}

/// The link modes a server accepts, by the kind of peer, each list in order of preference:
/// clients (`client.*`, and `mds.*`, which use the client library) and the cluster's own daemons (`mon.*`, `osd.*`) may be held to
/// different modes, as Ceph's `ms_client_mode` and `ms_cluster_mode` do. A peer that offers
/// none of its kind's modes is refused during the handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModePolicy {
    pub clients: Vec<Mode>,
    pub daemons: Vec<Mode>,
}

impl ModePolicy {
    /// The same modes for every peer.
    pub fn same(modes: Vec<Mode>) -> ModePolicy {
        ModePolicy {
            clients: modes.clone(),
            daemons: modes,
        }
    }

    pub fn for_peer(&self, entity: &EntityName) -> &[Mode] {
        match entity.kind() {
            // A metadata daemon reaches the OSDs through the client library, as a client.
            EntityKind::Client | EntityKind::Mds => &self.clients,
            EntityKind::Mon | EntityKind::Osd => &self.daemons,
        }
    }
}

impl From<Vec<Mode>> for ModePolicy {
    fn from(modes: Vec<Mode>) -> ModePolicy {
        ModePolicy::same(modes)
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "secure" => Ok(Mode::Secure),
            "crc" => Ok(Mode::Crc),
            other => Err(format!(
                "unknown link mode {other:?} (expected secure or crc)"
            )),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Secure => "secure",
            Mode::Crc => "crc",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_reject() {
        let osd: EntityName = "osd.12".parse().expect("valid");
        assert_eq!((osd.kind(), osd.id()), (EntityKind::Osd, "12"));
        assert_eq!(osd, EntityName::osd(12));
        let client: EntityName = "client.admin".parse().expect("valid");
        assert_eq!(client.dns_name(), "client.admin.coffer");
        for bad in [
            "osd.x",
            "client.",
            "client.A",
            "client.-a",
            "host.a",
            "mon",
            "mon.a.b",
        ] {
            assert!(bad.parse::<EntityName>().is_err(), "{bad} accepted");
        }
        let long = format!("client.{}", "a".repeat(ENTITY_ID_BYTES_MAX + 1));
        assert!(long.parse::<EntityName>().is_err());
    }
}
