//! What an entity may do: its capabilities, written like Ceph's (`mon=r osd=rw pool=images`),
//! with file system grants (`fs=home:/alice:rw`) that the metadata daemon enforces.

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
/// `fs`: file systems the entity may mount, each under a path, read-only or read-write. An
/// entity with `mon=rw` may do anything anyway (it can create entities with any caps), so it
/// may mount every file system without a grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caps {
    pub mon: Access,
    pub osd: Access,
    pub pools: Option<BTreeSet<String>>,
    #[serde(default)]
    pub fs: Vec<FsGrant>,
}

/// Longest path in a file system grant, in bytes.
pub const GRANT_PATH_BYTES_MAX: usize = 1024;

/// Access to file system `fs` (`*`: every one) at `path` and below.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsGrant {
    pub fs: String,
    /// Absolute, normalised (`/` or `/a/b`, no `.`, `..` or empty components).
    pub path: String,
    pub access: Access,
}

impl FsGrant {
    /// Parses `NAME[:PATH]:r|rw`.
    fn parse(text: &str) -> Result<FsGrant, CapsError> {
        let (rest, access) = text
            .rsplit_once(':')
            .ok_or_else(|| CapsError(format!("fs grant {text:?} is not NAME[:PATH]:r|rw")))?;
        let access = match access {
            "r" => Access::Read,
            "rw" => Access::ReadWrite,
            _ => return Err(CapsError(format!("{access:?} is not r or rw"))),
        };
        let (fs, path) = rest.split_once(':').unwrap_or((rest, "/"));
        if fs.is_empty() {
            return Err(CapsError(format!("fs grant {text:?} names no file system")));
        }
        Ok(FsGrant {
            fs: fs.into(),
            path: normal_path(path)?,
            access,
        })
    }
}

/// `path` as a grant keeps it: absolute, without `.`, `..`, empty components or a trailing
/// slash.
pub fn normal_path(path: &str) -> Result<String, CapsError> {
    if !path.starts_with('/') || path.len() > GRANT_PATH_BYTES_MAX {
        return Err(CapsError(format!(
            "path {path:?} must be absolute and at most {GRANT_PATH_BYTES_MAX} bytes"
        )));
    }
    let mut parts = Vec::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if part == "."
            || part == ".."
            || part.contains([',', ':'])
            || part.contains(char::is_whitespace)
        {
            return Err(CapsError(format!(
                "path {path:?}: no '.', '..', ',', ':' or spaces in a grant's path"
            )));
        }
        parts.push(part);
    }
    Ok(format!("/{}", parts.join("/")))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapsError(pub String);

impl fmt::Display for CapsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}; capabilities look like \"mon=r osd=rw pool=NAME[,NAME] fs=NAME[:PATH]:rw\" \
             (mon, osd and each fs grant: r or rw)",
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
            fs: Vec::new(),
        }
    }

    pub fn parse(text: &str) -> Result<Self, CapsError> {
        let mut caps = Caps {
            mon: Access::None,
            osd: Access::None,
            pools: None,
            fs: Vec::new(),
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
                "fs" => {
                    for grant in value.split(',').filter(|g| !g.is_empty()) {
                        caps.fs.push(FsGrant::parse(grant)?);
                    }
                    if caps.fs.is_empty() {
                        return Err(CapsError("fs= names no file system".into()));
                    }
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

    /// What this entity may do on file system `fs`: the path it may reach and whether it may
    /// write there, or `None` if it may not mount it.
    pub fn fs_grant(&self, fs: &str) -> Option<(String, Access)> {
        if self.mon_allows(true) {
            return Some(("/".into(), Access::ReadWrite));
        }
        self.fs
            .iter()
            .find(|g| g.fs == fs || g.fs == "*")
            .map(|g| (g.path.clone(), g.access))
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
        if !self.fs.is_empty() {
            let grants: Vec<String> = self
                .fs
                .iter()
                .map(|g| match g.path.as_str() {
                    "/" => format!("{}:{}", g.fs, g.access.as_str()),
                    path => format!("{}:{path}:{}", g.fs, g.access.as_str()),
                })
                .collect();
            tokens.push(format!("fs={}", grants.join(",")));
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

    #[test]
    fn fs_grants_name_a_file_system_a_path_and_an_access() {
        let caps =
            Caps::parse("mon=r osd=rw pool=fs.data fs=home:/alice/:rw,pub:r").expect("parse");
        assert_eq!(
            caps.fs_grant("home"),
            Some(("/alice".into(), Access::ReadWrite))
        );
        assert_eq!(caps.fs_grant("pub"), Some(("/".into(), Access::Read)));
        assert_eq!(caps.fs_grant("other"), None);
        assert_eq!(Caps::parse(&caps.to_string()), Ok(caps));
        let any = Caps::parse("fs=*:/x:r").expect("parse");
        assert_eq!(any.fs_grant("every"), Some(("/x".into(), Access::Read)));
        assert_eq!(
            Caps::admin().fs_grant("fs"),
            Some(("/".into(), Access::ReadWrite))
        );
        for bad in [
            "fs=",
            "fs=a",
            "fs=a:x",
            "fs=a:rel/path:r",
            "fs=a:/../b:rw",
            ":/:r",
        ] {
            assert!(Caps::parse(bad).is_err(), "{bad} accepted");
        }
    }
}
