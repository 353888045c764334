//! What an entity may do: its capabilities, written like Ceph's (`mon=r osd=rw pool=images`).

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Access {
    None,
    Read,
    ReadWrite,
}

impl Access {
    fn allows(self, write: bool) -> bool {
        match self {
            Access::None => false,
            Access::Read => !write,
            Access::ReadWrite => true,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Access::None => "",
            Access::Read => "r",
            Access::ReadWrite => "rw",
        }
    }
}

/// `mon`: reading the map and status (r), changing the cluster and managing entities (rw).
/// `osd`: reading objects (r), writing them (rw), in every pool or only those in `pools`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caps {
    pub mon: Access,
    pub osd: Access,
    pub pools: Option<BTreeSet<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapsError(pub String);

impl fmt::Display for CapsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}; capabilities look like \"mon=r osd=rw pool=NAME[,NAME]\" (mon and osd: r or rw)",
            self.0
        )
    }
}

impl std::error::Error for CapsError {}

impl Caps {
    /// Everything: the admin's capabilities.
    pub fn admin() -> Self {
        Caps {
            mon: Access::ReadWrite,
            osd: Access::ReadWrite,
            pools: None,
        }
    }

    pub fn parse(text: &str) -> Result<Self, CapsError> {
        let mut caps = Caps {
            mon: Access::None,
            osd: Access::None,
            pools: None,
        };
        for token in text.split_whitespace() {
            let (key, value) = token
                .split_once('=')
                .ok_or_else(|| CapsError(format!("{token:?} is not key=value")))?;
            let access = || match value {
                "r" => Ok(Access::Read),
                "rw" => Ok(Access::ReadWrite),
                _ => Err(CapsError(format!("{value:?} is not r or rw"))),
            };
            match key {
                "mon" => caps.mon = access()?,
                "osd" => caps.osd = access()?,
                "pool" => {
                    let pools: BTreeSet<String> = value
                        .split(',')
                        .filter(|p| !p.is_empty())
                        .map(str::to_owned)
                        .collect();
                    if pools.is_empty() {
                        return Err(CapsError("pool= names no pool".into()));
                    }
                    caps.pools = Some(pools);
                }
                _ => return Err(CapsError(format!("unknown capability {key:?}"))),
            }
        }
        Ok(caps)
    }

    pub fn mon_allows(&self, write: bool) -> bool {
        self.mon.allows(write)
    }

    pub fn osd_allows(&self, pool: &str, write: bool) -> bool {
        self.osd.allows(write) && self.pools.as_ref().is_none_or(|pools| pools.contains(pool))
    }
}

impl fmt::Display for Caps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut tokens = Vec::new();
        for (key, access) in [("mon", self.mon), ("osd", self.osd)] {
            if access != Access::None {
                tokens.push(format!("{key}={}", access.as_str()));
            }
        }
        if let Some(pools) = &self.pools {
            let names: Vec<&str> = pools.iter().map(String::as_str).collect();
            tokens.push(format!("pool={}", names.join(",")));
        }
        f.write_str(&tokens.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_parse_and_enforce() {
        let caps = Caps::parse("mon=r osd=rw pool=images,logs").expect("parse");
        assert!(caps.mon_allows(false) && !caps.mon_allows(true));
        assert!(caps.osd_allows("images", true) && caps.osd_allows("logs", false));
        assert!(!caps.osd_allows("other", false));
        let reader = Caps::parse("osd=r").expect("parse");
        assert!(reader.osd_allows("any", false) && !reader.osd_allows("any", true));
        assert!(!reader.mon_allows(false));
        for bad in ["mon=x", "osd", "pool=", "disk=rw"] {
            assert!(Caps::parse(bad).is_err(), "{bad} accepted");
        }
        for caps in [caps, reader, Caps::admin()] {
            assert_eq!(Caps::parse(&caps.to_string()), Ok(caps));
        }
    }
}
