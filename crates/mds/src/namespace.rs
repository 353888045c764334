//! The namespace as the MDS holds it in memory: whole inode-table shards and whole
//! directories, loaded from the metadata pool on first use and changed only by journaled
//! [`Put`]s.
//!
//! Invariants (asserted in [`Namespace::apply`]):
//! - a put touches only shards and directories that are loaded, so a later load can never
//!   bring back a value older than one in memory;
//! - a shard or directory with puts not yet applied to the pool (dirty) is never evicted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;

use client::Pool;
use fs::proto::{Ino, ROOT_INO};

use crate::record::{self, Dentry, Inode, Names, Put, INODES_PER_SHARD};

/// Most inodes held in memory before clean shards are dropped.
pub const INODES_CACHED_MAX: usize = 1 << 20;
/// Most directory entries held in memory before clean directories are dropped.
pub const DENTRIES_CACHED_MAX: usize = 1 << 21;
/// Entries per page when a shard or a directory is loaded.
const LOAD_PAGE: u32 = 1000;

/// A loaded directory: its entries by (cookie, name), the order listings return them in.
#[derive(Default, Debug)]
pub struct Dir {
    pub entries: BTreeMap<(u64, Vec<u8>), Dentry>,
}

impl Dir {
    pub fn get(&self, name: &[u8]) -> Option<Dentry> {
        self.entries
            .get(&(record::cookie(name), name.to_vec()))
            .copied()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What an operation needs before it can decide: something loaded, or more inode numbers
/// reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    Shard(u64),
    Dir(Ino),
    /// Every reserved inode number is taken: reserve more, durably, before handing one out.
    Inos,
}

pub struct Namespace {
    pub names: Names,
    inodes: HashMap<Ino, Inode>,
    shards: HashSet<u64>,
    dirs: HashMap<Ino, Dir>,
    /// The next inode number to hand out, and the first one not reserved in the journal: an
    /// MDS that restarts starts at the reservation, so a number handed out in an answer the
    /// journal lost is never handed out again.
    pub next_ino: Ino,
    pub reserved_ino: Ino,
    /// The numbers the MDS this one replaced may have handed out in answers its journal
    /// lost (its last two reservations): a mount replaying such a create may claim its own.
    pub replayable: Range<Ino>,
    /// Unlinked inodes waiting to be purged.
    pub purge: HashSet<Ino>,
    /// The last journal entry that touched each dirty shard or directory.
    dirty_shards: HashMap<u64, u64>,
    dirty_dirs: HashMap<Ino, u64>,
    /// When each shard and directory was last used (a counter), for eviction.
    clock: u64,
    used_shards: HashMap<u64, u64>,
    used_dirs: HashMap<Ino, u64>,
    dentries: usize,
}

/// Inode numbers reserved (journaled) at a time.
pub const INOS_RESERVED: u64 = 4096;

pub fn shard_of(ino: Ino) -> u64 {
    ino / INODES_PER_SHARD
}

impl Namespace {
    pub fn new(names: Names, reserved_ino: Ino, purge: HashSet<Ino>) -> Namespace {
        Namespace {
            names,
            inodes: HashMap::new(),
            shards: HashSet::new(),
            dirs: HashMap::new(),
            next_ino: reserved_ino,
            reserved_ino,
            replayable: reserved_ino
                .saturating_sub(2 * INOS_RESERVED)
                .max(ROOT_INO + 1)..reserved_ino,
            purge,
            dirty_shards: HashMap::new(),
            dirty_dirs: HashMap::new(),
            clock: 0,
            used_shards: HashMap::new(),
            used_dirs: HashMap::new(),
            dentries: 0,
        }
    }

    /// Inode `ino`: `Ok(None)` if it does not exist, `Err` if its shard is not loaded.
    pub fn inode(&self, ino: Ino) -> Result<Option<&Inode>, Missing> {
        let shard = shard_of(ino);
        if !self.shards.contains(&shard) {
            return Err(Missing::Shard(shard));
        }
        Ok(self.inodes.get(&ino))
    }

    /// Directory `ino`'s entries, if loaded.
    pub fn dir(&self, ino: Ino) -> Result<&Dir, Missing> {
        self.dirs.get(&ino).ok_or(Missing::Dir(ino))
    }

    /// Whether the shard a new inode would take is loaded.
    pub fn shard_loaded(&self, ino: Ino) -> Result<(), Missing> {
        let shard = shard_of(ino);
        if self.shards.contains(&shard) {
            Ok(())
        } else {
            Err(Missing::Shard(shard))
        }
    }

    /// Loads what `missing` names from the metadata pool.
    pub async fn load(&mut self, missing: Missing, meta: &Pool) -> Result<(), String> {
        self.clock += 1;
        match missing {
            Missing::Shard(shard) => {
                let object = self.names.shard(shard * INODES_PER_SHARD);
                let entries = list_all(meta, &object).await?;
                for (key, value) in entries {
                    let ino = record::be_u64("inode key", &key)?;
                    let inode: Inode = record::decode("inode", &value)?;
                    self.inodes.insert(ino, inode);
                }
                self.shards.insert(shard);
                self.used_shards.insert(shard, self.clock);
            }
            Missing::Dir(ino) => {
                let object = self.names.dir(ino);
                let mut dir = Dir::default();
                for (name, value) in list_all(meta, &object).await? {
                    let dentry: Dentry = record::decode("directory entry", &value)?;
                    dir.entries.insert((record::cookie(&name), name), dentry);
                }
                self.dentries += dir.entries.len();
                self.dirs.insert(ino, dir);
                self.used_dirs.insert(ino, self.clock);
            }
            Missing::Inos => {
                return Err("inode numbers are reserved through the journal, not loaded".into())
            }
        }
        self.evict();
        Ok(())
    }

    /// Takes a shard as loaded and empty, as a test's namespace starts.
    #[cfg(test)]
    pub fn assume_empty_shard(&mut self, shard: u64) {
        self.shards.insert(shard);
    }

    /// Marks a directory created by this MDS as loaded and empty (it has no object yet).
    pub fn new_dir(&mut self, ino: Ino) {
        let previous = self.dirs.insert(ino, Dir::default());
        assert!(previous.is_none(), "directory {ino} created twice");
    }

    /// Applies the puts of journal entry `seq` to memory.
    pub fn apply(&mut self, puts: &[Put], seq: u64) {
        self.clock += 1;
        for put in puts {
            match put {
                Put::Inode { ino, inode } => {
                    let shard = shard_of(*ino);
                    assert!(
                        self.shards.contains(&shard),
                        "put to inode {ino} of unloaded shard {shard}"
                    );
                    match inode {
                        Some(inode) => {
                            assert_eq!(inode.attr.ino, *ino, "inode record under another number");
                            self.inodes.insert(*ino, inode.clone());
                            if *ino >= self.next_ino {
                                assert!(*ino < self.reserved_ino, "inode {ino} was not reserved");
                                self.next_ino = ino + 1;
                            }
                        }
                        None => {
                            self.inodes.remove(ino);
                        }
                    }
                    self.dirty_shards.insert(shard, seq);
                    self.used_shards.insert(shard, self.clock);
                }
                Put::Dentry { dir, name, dentry } => {
                    let loaded = self
                        .dirs
                        .get_mut(dir)
                        .unwrap_or_else(|| panic!("put to an entry of unloaded directory {dir}"));
                    let key = (record::cookie(name), name.clone());
                    let before = match dentry {
                        Some(dentry) => loaded.entries.insert(key, *dentry),
                        None => loaded.entries.remove(&key),
                    };
                    match (before.is_some(), dentry.is_some()) {
                        (false, true) => self.dentries += 1,
                        (true, false) => self.dentries -= 1,
                        _ => {}
                    }
                    self.dirty_dirs.insert(*dir, seq);
                    self.used_dirs.insert(*dir, self.clock);
                }
                Put::DirGone { dir } => {
                    if let Some(gone) = self.dirs.remove(dir) {
                        assert!(gone.is_empty(), "directory {dir} removed with entries");
                    }
                    self.used_dirs.remove(dir);
                    self.dirty_dirs.insert(*dir, seq);
                }
                Put::Purge { ino, queued } => {
                    if *queued {
                        self.purge.insert(*ino);
                    } else {
                        self.purge.remove(ino);
                    }
                }
                Put::NextIno(next) => {
                    assert!(*next >= self.reserved_ino, "reservations only grow");
                    self.reserved_ino = *next;
                }
            }
        }
    }

    /// Journal entries up to `seq` are in the pool: what they touched may be evicted.
    pub fn flushed(&mut self, seq: u64) {
        self.dirty_shards.retain(|_, last| *last > seq);
        self.dirty_dirs.retain(|_, last| *last > seq);
    }

    /// Drops the least recently used clean shards and directories while over the limits.
    fn evict(&mut self) {
        while self.inodes.len() > INODES_CACHED_MAX {
            let victim = self
                .used_shards
                .iter()
                .filter(|(shard, _)| !self.dirty_shards.contains_key(shard))
                .min_by_key(|(_, used)| **used)
                .map(|(shard, _)| *shard);
            let Some(shard) = victim else { break };
            self.used_shards.remove(&shard);
            self.shards.remove(&shard);
            self.inodes.retain(|ino, _| shard_of(*ino) != shard);
        }
        while self.dentries > DENTRIES_CACHED_MAX {
            let victim = self
                .used_dirs
                .iter()
                .filter(|(dir, _)| !self.dirty_dirs.contains_key(dir))
                .min_by_key(|(_, used)| **used)
                .map(|(dir, _)| *dir);
            let Some(dir) = victim else { break };
            self.used_dirs.remove(&dir);
            if let Some(gone) = self.dirs.remove(&dir) {
                self.dentries -= gone.entries.len();
            }
        }
    }
}

/// Every omap entry of `object` (none if it does not exist).
pub async fn list_all(pool: &Pool, object: &str) -> Result<Vec<(Vec<u8>, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let (page, more) = match pool.omap_list(object, after.clone(), LOAD_PAGE).await {
            Ok(listed) => listed,
            Err(client::Error::NotFound) => return Ok(out),
            Err(e) => return Err(format!("reading {object}: {e}")),
        };
        after = page.last().map(|(key, _)| key.clone());
        out.extend(page);
        if !more {
            return Ok(out);
        }
    }
}
