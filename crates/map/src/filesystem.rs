//! File systems in the cluster map: each names its metadata pool and its data pool, and the
//! metadata daemon (MDS) that serves it, as Ceph's FSMap does. The map is where clients find
//! a file system's MDS, and where a new MDS fences the one it replaces: the epoch that makes
//! it active also blocklists the previous MDS's client instance, so every OSD that has seen
//! that epoch refuses the old daemon's writes (docs/design/fs.md, "Replacing the MDS").

use serde::{Deserialize, Serialize};

use crate::cluster::{ChangeError, Epoch};
use crate::PoolId;

/// Most file systems in one cluster.
pub const FILESYSTEMS_MAX: usize = 64;
/// Longest file system name, in bytes.
pub const FS_NAME_BYTES_MAX: usize = 64;

/// A file system's number, unique in the cluster (never reused); object names in its pools
/// carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FsId(pub u32);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsInfo {
    pub id: FsId,
    pub name: String,
    /// Where the namespace lives (directories, inodes, the journal): written by the MDS only.
    pub meta_pool: PoolId,
    /// Where file contents live, written by the clients directly.
    pub data_pool: PoolId,
    /// The pools were made for this file system (`coffer fs create`) and go with it.
    pub owns_pools: bool,
    /// The metadata daemon serving it, once one has booted.
    pub mds: Option<MdsInfo>,
}

/// The active metadata daemon of a file system.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsInfo {
    /// Its entity (`mds.a`).
    pub name: String,
    /// Where it serves clients.
    pub addr: String,
    /// Its client instance: the `client` half of the request ids of its writes, which the
    /// next MDS blocklists.
    pub instance: u64,
    /// The epoch it became active in.
    pub since: Epoch,
}

/// Checks a new file system's name.
pub fn check_name(name: &str) -> Result<(), ChangeError> {
    let invalid = |why: String| Err(ChangeError::InvalidFs(why));
    if name.is_empty() || name.len() > FS_NAME_BYTES_MAX {
        return invalid(format!("a name must be 1 to {FS_NAME_BYTES_MAX} bytes"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
    {
        return invalid(format!("{name:?}: use letters, digits, '-' and '_'"));
    }
    Ok(())
}
