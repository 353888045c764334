//! One simulated run: OSDs on real stores in a scratch directory, the monitors' map kept
//! here, clients writing, and a nemesis that crashes OSDs, cuts them off and brings them
//! back; then every fault heals and the checks run. Everything happens on one thread under
//! tokio's paused clock, so the seed alone decides the run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use map::cluster::{Change, ClusterMap, WEIGHT_ONE};
use map::placement::{FailureDomain, OsdId, PgId};
use map::ObjectName;
use messenger::message::{
    ObjectOp, OpResult, OsdReply, OsdRequest, PeerOp, PgState, ReqId, ShardHead, Version,
};
use osd::Node;
use store::{MkfsOptions, Store};

use crate::lock;
use crate::net::{Dice, Link, Net};
use crate::oracle::Oracle;

/// The one pool every client writes to.
const POOL: &str = "sim";
const POOL_SIZE: u8 = 3;
const POOL_MIN_SIZE: u8 = 2;
/// Each OSD's store (the smallest a store may be is 256 KiB).
const STORE_BYTES: u64 = 16 << 20;
/// How long the nemesis acts after the clients start.
const FAULT_WINDOW: Duration = Duration::from_secs(90);
/// Longest pause between two of the nemesis's actions.
const NEMESIS_PAUSE_MS_MAX: u64 = 6_000;
/// OSDs down or cut off at once, at most.
const FAULTS_AT_ONCE_MAX: usize = 2;
/// How long the monitors take to mark a silent OSD down, and then out.
const DOWN_AFTER: Duration = Duration::from_secs(6);
const OUT_AFTER: Duration = Duration::from_secs(30);
/// Longest delay of a new map on its way to one OSD.
const MAP_DELAY_MS_MAX: u64 = 50;
/// Longest a client thinks between two writes, and waits before resending one.
const THINK_MS_MAX: u64 = 3_000;
const RESEND_MS_MAX: u64 = 1_000;
/// Once faults heal: how long the clients may take to finish, and the PGs to be clean.
const SETTLE_LIMIT: Duration = Duration::from_secs(600);
/// Largest object a client writes.
const OBJECT_BYTES_MAX: u64 = 8192;

pub struct Config {
    pub osds: u32,
    pub pg_num: u32,
    pub clients: u64,
    pub objects_per_client: u64,
    pub writes_per_client: u64,
    /// Whether the nemesis runs (crashes, partitions, lost messages).
    pub faults: bool,
    /// The pool is erasure-coded with this (k, m), min_size k + 1, stripe unit 4 KiB,
    /// rather than replicated (size 3, min_size 2).
    pub erasure: Option<(u8, u8)>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            osds: 4,
            pg_num: 4,
            clients: 3,
            objects_per_client: 4,
            writes_per_client: 25,
            faults: true,
            erasure: None,
        }
    }
}

/// What a run did, for its summary line.
#[derive(Debug, Default, PartialEq)]
pub struct Report {
    pub seed: u64,
    pub writes: usize,
    pub objects: usize,
    pub crashes: u32,
    pub isolations: u32,
    pub loss: f64,
    pub slow: f64,
    pub epoch: u64,
    /// Reads a client made during the run, each right after its write was acknowledged,
    /// that a primary served: each returned that write.
    pub reads: usize,
    pub virtual_time: Duration,
    /// The network's trace ([`Net::trace`]): equal for two runs that took the same course.
    pub trace: u64,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {}: {} writes acknowledged to {} objects, all read back, {} read during the \
             faults; {} crashes, {} OSDs cut off, {:.0}% of messages lost and {:.1}% slow; map epoch {}; {:.0} s of \
             virtual time; \
             trace {:016x}",
            self.seed,
            self.writes,
            self.objects,
            self.reads,
            self.crashes,
            self.isolations,
            self.loss * 100.0,
            self.slow * 100.0,
            self.epoch,
            self.virtual_time.as_secs_f64(),
            self.trace
        )
    }
}

/// A simulated cluster: its OSDs, network, monitors' map, and what its clients were told.
pub struct World {
    dir: PathBuf,
    dice: Dice,
    net: Arc<Net>,
    /// The monitors' map.
    map: Mutex<ClusterMap>,
    /// OSDs crashed and not restarted.
    crashed: Mutex<BTreeSet<OsdId>>,
    oracle: Mutex<Oracle>,
    report: Mutex<Report>,
    started: tokio::time::Instant,
}

fn kek() -> keys::KeyEncryptionKey {
    keys::KeyEncryptionKey::from_bytes([7; 32])
}

/// The clients' writes and the nemesis's faults of one run, then the heal and the checks;
/// the report, or what broke.
pub async fn workload(world: Arc<World>, config: &Config) -> Result<Report, String> {
    let clients: Vec<_> = (0..config.clients)
        .map(|c| {
            tokio::spawn(client(
                world.clone(),
                c,
                config.objects_per_client,
                config.writes_per_client,
            ))
        })
        .collect();
    if config.faults {
        nemesis(&world, world.started + FAULT_WINDOW).await;
    }
    world.heal()?;
    let settled = tokio::time::Instant::now() + SETTLE_LIMIT;
    for (c, task) in clients.into_iter().enumerate() {
        match tokio::time::timeout_at(settled, task).await {
            Ok(Ok(result)) => result?,
            Ok(Err(e)) => return Err(format!("client {c}: {e}")),
            Err(_) => {
                return Err(format!(
                    "client {c} still had a write unacknowledged {SETTLE_LIMIT:?} after every \
                     fault healed; {}",
                    world.unclean()?.join("; ")
                ))
            }
        }
    }
    world.settle().await?;
    let mut report = std::mem::take(&mut *lock(&world.report));
    let oracle = lock(&world.oracle);
    report.writes = oracle.writes();
    report.objects = oracle.objects().count();
    report.epoch = lock(&world.map).epoch;
    report.virtual_time = world.started.elapsed();
    report.trace = world.net.trace();
    Ok(report)
}

impl World {
    /// A cluster of `config.osds` OSDs on stores under `scratch`, every one up and in, with
    /// one pool; with `config.faults`, the seed also draws how lossy and slow the network is.
    pub fn start(seed: u64, config: &Config, scratch: &Path) -> Result<Arc<World>, String> {
        let dice = Dice::new(rand::SeedableRng::seed_from_u64(seed));
        let (loss, slow) = if config.faults {
            let loss = [0.0, 0.01, 0.05][dice.below(3) as usize];
            let slow = [0.0, 0.005, 0.02][dice.below(3) as usize];
            (loss, slow)
        } else {
            (0.0, 0.0)
        };
        let world = Arc::new(World {
            dir: scratch.to_path_buf(),
            net: Net::new(dice.clone(), loss, slow),
            dice,
            map: Mutex::default(),
            crashed: Mutex::default(),
            oracle: Mutex::default(),
            report: Mutex::new(Report {
                seed,
                loss,
                slow,
                ..Report::default()
            }),
            started: tokio::time::Instant::now(),
        });
        world.create(config)?;
        for id in 0..config.osds {
            world.start_osd(OsdId(id))?;
        }
        Ok(world)
    }

    pub fn net(&self) -> &Arc<Net> {
        &self.net
    }

    /// Stops every OSD, closing their stores.
    pub async fn stop(&self) {
        let ids: Vec<OsdId> = lock(&self.map).osds.keys().copied().collect();
        for id in ids {
            if let Some(node) = self.net.detach(id) {
                node.stop().await;
            }
        }
    }

    /// Once every fault has healed: waits for every PG to be clean, then checks that every
    /// object reads back as its last acknowledged write and that scrub finds every copy alike.
    pub async fn settle(&self) -> Result<(), String> {
        self.wait_clean(tokio::time::Instant::now() + SETTLE_LIMIT)
            .await?;
        self.check_objects().await?;
        self.check_logs().await?;
        if self.pool()?.1.erasure.is_some() {
            let names: Vec<String> = lock(&self.oracle).objects().map(str::to_owned).collect();
            self.check_shards(&names).await
        } else {
            self.check_replicas().await
        }
    }

    /// Each of `names` in the erasure-coded pool has every shard, each at the version, size
    /// and position of the others, and its parity shards are what its data shards encode
    /// to: read from each holder itself, as its primary reads them.
    pub async fn check_shards(&self, names: &[String]) -> Result<(), String> {
        let (map, pool) = self.pool()?;
        let profile = pool.erasure.ok_or("the pool is replicated")?.profile();
        for name in names {
            let object = object_name(name)?;
            let pg = map.pg_of(&pool, &object);
            let holders = map.shards(&pool, pg);
            let primary = *map.acting(&pool, pg).first().ok_or("a PG with no OSD up")?;
            let read = |holder: Option<OsdId>, pieces: Vec<(u64, u64)>| {
                let request = OsdRequest::Peer {
                    pg,
                    epoch: map.epoch,
                    op: PeerOp::ReadShard {
                        object: object.clone(),
                        pieces,
                        device: false,
                    },
                };
                async move {
                    let holder = holder.ok_or("a shard's OSD is down")?;
                    match self
                        .net
                        .call(Some(primary), holder, request, Bytes::new())
                        .await?
                    {
                        (OsdReply::ShardPieces(head, _), data) => Ok((head, data)),
                        (other, _) => Err(format!("osd.{}: {other:?}", holder.0)),
                    }
                }
            };
            let (first, _) = read(holders[0], Vec::new()).await?;
            let first = first.ok_or(format!("{name}: shard 0 is missing"))?;
            let whole = vec![(0, profile.shard_bytes(first.size))];
            let mut shards = Vec::new();
            for (position, holder) in holders.iter().enumerate() {
                let (head, data) = read(*holder, whole.clone()).await?;
                let expected = ShardHead {
                    shard: position as u8,
                    ..first
                };
                if head != Some(expected) {
                    return Err(format!(
                        "{name}: shard {position} on {holder:?} is {head:?}, not {expected:?}"
                    ));
                }
                shards.push(data.to_vec());
            }
            let data: Vec<&[u8]> = shards[..profile.k()].iter().map(Vec::as_slice).collect();
            let parity = ec::Coder::new(profile)
                .parity(&data)
                .map_err(|e| format!("{name}: {e}"))?;
            if parity[..] != shards[profile.k()..] {
                return Err(format!("{name}: its parity shards are not its data's"));
            }
            // Each write's undo records are dropped with the PG's next write: only those of
            // the PG's last write may remain.
            for holder in holders.iter().flatten() {
                let node = self
                    .net
                    .node(*holder)
                    .ok_or("a shard's OSD is not running")?;
                let (info, log) = node.log(pg).await?;
                let last = log.last().map(|e| (&e.object, e.version.seq));
                for version in node.undo_versions(pg, &object).await? {
                    if last != Some((&object, version)) || version != info.last.seq {
                        return Err(format!(
                            "{name}: osd.{} still keeps the undo record of version {version}, \
                             below its PG's last write ({}.{})",
                            holder.0, info.last.epoch, info.last.seq
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Where `id`'s store lives (its data file is `data` in it).
    pub fn store_dir(&self, id: OsdId) -> PathBuf {
        self.dir.join(format!("osd.{}", id.0))
    }

    /// Makes every OSD's store and the first map: every OSD up and in, one pool.
    fn create(&self, config: &Config) -> Result<(), String> {
        let (size, min_size, erasure) = match config.erasure {
            Some((k, m)) => {
                let profile = ec::Profile::new(k.into(), m.into(), 4096)
                    .map_err(|e| format!("the pool's code: {e}"))?;
                (k + m, k + 1, Some(map::cluster::Erasure::new(profile)))
            }
            None => (POOL_SIZE, POOL_MIN_SIZE, None),
        };
        if config.osds < u32::from(size) || config.pg_num == 0 || config.objects_per_client == 0 {
            return Err(format!(
                "a run needs at least {size} OSDs (the pool's size), a PG and an object"
            ));
        }
        let mut map = lock(&self.map);
        for id in (0..config.osds).map(OsdId) {
            let options = MkfsOptions {
                mode: store::Mode::Gcm,
                size_bytes: STORE_BYTES,
                device: None,
            };
            Store::mkfs(&self.store_dir(id), &options, &kek())
                .map_err(|e| format!("mkfs osd.{}: {e}", id.0))?;
            apply(
                &mut map,
                &Change::AddOsd {
                    id,
                    host: format!("host{}", id.0),
                    weight: WEIGHT_ONE,
                },
            )?;
            apply(&mut map, &boot(id))?;
        }
        apply(
            &mut map,
            &Change::CreatePool {
                name: POOL.into(),
                size,
                min_size,
                pg_num: config.pg_num,
                domain: FailureDomain::Osd,
                erasure,
            },
        )
    }

    /// Opens `id`'s store and starts its OSD at the monitors' map, as a daemon starts.
    fn start_osd(&self, id: OsdId) -> Result<(), String> {
        let store = Store::open(&self.store_dir(id), &kek())
            .map_err(|e| format!("opening osd.{}: {e}", id.0))?;
        let map = lock(&self.map).clone();
        let link = Arc::new(Link {
            from: id,
            net: self.net.clone(),
        });
        self.net
            .attach(Node::new(id, store, link, map, self.started.elapsed()));
        Ok(())
    }

    /// Changes the monitors' map and sends it to every OSD that can hear them, each copy
    /// delayed on its own (so an OSD may get them out of order, or skip one).
    pub fn change(&self, change: &Change) -> Result<(), String> {
        let map = {
            let mut map = lock(&self.map);
            apply(&mut map, change)?;
            map.clone()
        };
        let osds: Vec<OsdId> = map.osds.keys().copied().collect();
        for id in osds {
            if self.net.is_isolated(id) {
                continue;
            }
            let Some(node) = self.net.node(id) else {
                continue;
            };
            let delay = Duration::from_millis(self.dice.below(MAP_DELAY_MS_MAX + 1));
            let map = map.clone();
            let receiver = node.clone();
            node.spawn(async move {
                tokio::time::sleep(delay).await;
                receiver.set_map(map);
            });
        }
        Ok(())
    }

    fn is_down(&self, id: OsdId) -> bool {
        lock(&self.crashed).contains(&id) || self.net.is_isolated(id)
    }

    /// The monitors mark `id` down once it has been silent [`DOWN_AFTER`], and out after
    /// [`OUT_AFTER`], unless it is back by then.
    fn watch_silence(self: &Arc<Self>, id: OsdId) {
        let world = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(DOWN_AFTER).await;
            if world.is_down(id) && lock(&world.map).osds.get(&id).is_some_and(|o| o.up) {
                world
                    .change(&Change::OsdDown { id })
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            tokio::time::sleep(OUT_AFTER - DOWN_AFTER).await;
            let down = lock(&world.map)
                .osds
                .get(&id)
                .is_some_and(|o| !o.up && o.is_in);
            if world.is_down(id) && down {
                world
                    .change(&Change::OsdAutoOut { id })
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        });
    }

    pub async fn crash(self: &Arc<Self>, id: OsdId) {
        if let Some(node) = self.net.detach(id) {
            node.stop().await;
            lock(&self.crashed).insert(id);
            lock(&self.report).crashes += 1;
            self.watch_silence(id);
        }
    }

    pub fn restart(self: &Arc<Self>, id: OsdId) -> Result<(), String> {
        if lock(&self.crashed).remove(&id) {
            self.start_osd(id)?;
            self.change(&boot(id))?;
        }
        Ok(())
    }

    fn isolate(self: &Arc<Self>, id: OsdId) {
        self.net.set_isolated(id, true);
        lock(&self.report).isolations += 1;
        self.watch_silence(id);
    }

    /// Joins `id` to the network again; it hears the monitors' map, and boots again if
    /// they marked it down meanwhile.
    fn reconnect(self: &Arc<Self>, id: OsdId) -> Result<(), String> {
        self.net.set_isolated(id, false);
        if let Some(node) = self.net.node(id) {
            node.set_map(lock(&self.map).clone());
        }
        if lock(&self.map)
            .osds
            .get(&id)
            .is_some_and(|o| !o.up || !o.is_in)
        {
            self.change(&boot(id))?;
        }
        Ok(())
    }

    /// Ends every fault: crashed OSDs start again, cut-off ones reconnect, messages arrive
    /// without loss or long delays.
    pub fn heal(self: &Arc<Self>) -> Result<(), String> {
        self.net.calm();
        let ids: Vec<OsdId> = lock(&self.map).osds.keys().copied().collect();
        for id in ids {
            self.restart(id)?;
            self.reconnect(id)?;
        }
        Ok(())
    }

    fn pool(&self) -> Result<(ClusterMap, map::cluster::PoolInfo), String> {
        let map = lock(&self.map).clone();
        let pool = map.pool_by_name(POOL).cloned().ok_or("the pool is gone")?;
        Ok((map, pool))
    }

    /// Waits until the primary of every PG reports it clean, with every OSD of the map in
    /// its acting set.
    async fn wait_clean(&self, deadline: tokio::time::Instant) -> Result<(), String> {
        loop {
            let unclean = self.unclean()?;
            if unclean.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "PGs not clean {SETTLE_LIMIT:?} after every fault healed: {}",
                    unclean.join("; ")
                ));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The PGs whose primary does not report them clean, with every OSD of the map in its
    /// acting set: each with its acting set and state.
    fn unclean(&self) -> Result<Vec<String>, String> {
        let (map, pool) = self.pool()?;
        let mut unclean = Vec::new();
        for number in 0..pool.pg_num {
            let pg = PgId {
                pool: pool.id,
                number,
            };
            let acting = map.acting(&pool, pg);
            let state = acting
                .first()
                .and_then(|p| self.net.node(*p))
                .and_then(|node| node.led().into_iter().find(|(id, _)| *id == pg))
                .map(|(_, state)| state);
            if acting.len() < usize::from(pool.size) || state != Some(PgState::Clean) {
                unclean.push(format!(
                    "pg {}.{} on {acting:?}: {state:?}",
                    pg.pool, pg.number
                ));
            }
        }
        Ok(unclean)
    }

    /// Writes `content` as the whole of object `name`, as a client does: sent to the primary
    /// of the monitors' map and resent with the same request id until it is acknowledged,
    /// which the oracle notes. The version it was acknowledged at.
    pub async fn write(
        &self,
        reqid: ReqId,
        name: &str,
        content: Vec<u8>,
    ) -> Result<Version, String> {
        let data = Bytes::from(content.clone());
        let version = loop {
            match self.send_write(reqid, name, data.clone()).await {
                Ok(OsdReply::Written { version }) => break version,
                Ok(OsdReply::Busy(_) | OsdReply::Retry { .. }) | Err(_) => {}
                Ok(other) => return Err(format!("writing {name}: {other:?}")),
            }
            let pause = Duration::from_millis(self.dice.below(RESEND_MS_MAX) + 1);
            tokio::time::sleep(pause).await;
        };
        lock(&self.oracle).acked(name, content, version)?;
        Ok(version)
    }

    /// Sends one write of `data` as the whole of object `name` to its primary in the
    /// monitors' map; the reply, or why there is none (no OSD of its PG is up, the network).
    /// Not noted in the oracle: a script that uses it checks what it needs itself.
    pub async fn send_write(
        &self,
        reqid: ReqId,
        name: &str,
        data: Bytes,
    ) -> Result<OsdReply, String> {
        let ops = vec![ObjectOp::WriteFull {
            len: data.len() as u64,
        }];
        self.send_ops(reqid, name, ops, data)
            .await
            .map(|(reply, _)| reply)
    }

    /// Sends `ops` on object `name`, with `data`, to its primary in the monitors' map; the
    /// reply and its data, or why there is none. Not noted in the oracle.
    pub async fn send_ops(
        &self,
        reqid: ReqId,
        name: &str,
        ops: Vec<ObjectOp>,
        data: Bytes,
    ) -> Result<(OsdReply, Bytes), String> {
        let object = object_name(name)?;
        let (map, pool) = self.pool()?;
        let pg = map.pg_of(&pool, &object);
        let primary = *map
            .acting(&pool, pg)
            .first()
            .ok_or("no OSD of its PG is up")?;
        let request = OsdRequest::Op {
            pg,
            epoch: map.epoch,
            object,
            reqid,
            ops,
        };
        self.net.call(None, primary, request, data).await
    }

    /// Waits until the primary of object `name`'s PG in the monitors' map serves it.
    pub async fn wait_serving(&self, name: &str) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + SETTLE_LIMIT;
        loop {
            let (map, pool) = self.pool()?;
            let pg = map.pg_of(&pool, &object_name(name)?);
            let state = map
                .acting(&pool, pg)
                .first()
                .and_then(|p| self.net.node(*p))
                .and_then(|node| node.led().into_iter().find(|(id, _)| *id == pg))
                .map(|(_, state)| state);
            if state.as_ref().is_some_and(PgState::is_active) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "{name}'s PG did not serve within {SETTLE_LIMIT:?}: {state:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The acting set of the PG that holds object `name`, in the monitors' map.
    pub fn acting(&self, name: &str) -> Result<Vec<OsdId>, String> {
        let (map, pool) = self.pool()?;
        Ok(map.acting(&pool, map.pg_of(&pool, &object_name(name)?)))
    }

    /// Asks `pg`'s primary, as a client would.
    async fn ask(
        &self,
        pg: PgId,
        request: impl Fn(u64) -> OsdRequest,
    ) -> Result<(OsdReply, Bytes), String> {
        let (map, pool) = self.pool()?;
        let primary = *map.acting(&pool, pg).first().ok_or("a PG with no OSD up")?;
        self.net
            .call(None, primary, request(map.epoch), Bytes::new())
            .await
    }

    /// Reads object `name` from its primary in the monitors' map, as its client does right
    /// after its write was acknowledged: a read served must return that write (the client
    /// is the object's only writer). One not served (busy, a map to catch up with, the
    /// network) is not judged: it says nothing of what the cluster holds.
    pub async fn read_during(&self, name: &str) -> Result<(), String> {
        let object = object_name(name)?;
        let (map, pool) = self.pool()?;
        let pg = map.pg_of(&pool, &object);
        let Some(primary) = map.acting(&pool, pg).first().copied() else {
            return Ok(());
        };
        let request = read_whole(pg, map.epoch, object);
        let read = match self.net.call(None, primary, request, Bytes::new()).await {
            Ok((OsdReply::Results(results), data))
                if matches!(results[..], [OpResult::Read { .. }]) =>
            {
                Some(data)
            }
            Ok((OsdReply::NotFound, _)) => None,
            Ok((OsdReply::Busy(_) | OsdReply::Retry { .. }, _)) | Err(_) => return Ok(()),
            Ok((other, _)) => return Err(format!("reading {name} during the faults: {other:?}")),
        };
        lock(&self.oracle)
            .check(name, read.as_deref())
            .map_err(|e| format!("a read during the faults: {e}"))?;
        lock(&self.report).reads += 1;
        Ok(())
    }

    /// Every object reads back, from its primary, as its last acknowledged write.
    async fn check_objects(&self) -> Result<(), String> {
        let names: Vec<String> = lock(&self.oracle).objects().map(str::to_owned).collect();
        let (map, pool) = self.pool()?;
        for name in names {
            let object = object_name(&name)?;
            let pg = map.pg_of(&pool, &object);
            let (reply, data) = self
                .ask(pg, |epoch| read_whole(pg, epoch, object.clone()))
                .await?;
            let read = match reply {
                OsdReply::Results(results) if matches!(results[..], [OpResult::Read { .. }]) => {
                    Some(data)
                }
                OsdReply::NotFound => None,
                other => return Err(format!("reading {name}: {other:?}")),
            };
            lock(&self.oracle).check(&name, read.as_deref())?;
        }
        Ok(())
    }

    /// Every OSD of each PG's acting set holds the same log, read from each OSD itself rather
    /// than trusted to the primary's report: the same last version, and the same writes
    /// (version and request id) over the entries all of them still keep.
    async fn check_logs(&self) -> Result<(), String> {
        let (map, pool) = self.pool()?;
        for number in 0..pool.pg_num {
            let pg = PgId {
                pool: pool.id,
                number,
            };
            let mut logs = Vec::new();
            for osd in map.acting(&pool, pg) {
                let node = self.net.node(osd).ok_or(format!(
                    "osd.{} of pg {}.{} is not running",
                    osd.0, pg.pool, pg.number
                ))?;
                logs.push((osd, node.log(pg).await?));
            }
            if let Some(divergence) = crate::oracle::diverged(&logs) {
                return Err(format!("pg {}.{}: {divergence}", pg.pool, pg.number));
            }
        }
        Ok(())
    }

    /// Scrub finds every PG's copies alike on every OSD of its acting set.
    pub async fn check_replicas(&self) -> Result<(), String> {
        let (map, pool) = self.pool()?;
        for number in 0..pool.pg_num {
            let pg = PgId {
                pool: pool.id,
                number,
            };
            let mut after = None;
            loop {
                let from = after.clone();
                let (reply, _) = self
                    .ask(pg, |epoch| OsdRequest::Scrub {
                        pg,
                        epoch,
                        after: from.clone(),
                        repair: false,
                    })
                    .await?;
                let OsdReply::Scrubbed(page) = reply else {
                    return Err(format!("scrubbing pg {}.{}: {reply:?}", pg.pool, pg.number));
                };
                let acting = map.acting(&pool, pg).len();
                if page.osds.len() < acting || !page.findings.is_empty() {
                    return Err(format!(
                        "scrub of pg {}.{} compared {:?} and found {:?}",
                        pg.pool, pg.number, page.osds, page.findings
                    ));
                }
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
        }
        Ok(())
    }
}

fn apply(map: &mut ClusterMap, change: &Change) -> Result<(), String> {
    map.apply(change).map_err(|e| format!("{change:?}: {e}"))
}

/// The change an OSD's boot makes: up, at its address, and in again if the monitors had
/// marked it out.
pub fn boot(id: OsdId) -> Change {
    Change::OsdBoot {
        id,
        addr: format!("sim:{}", id.0),
    }
}

/// A client's read of the whole of `object`.
fn read_whole(pg: PgId, epoch: u64, object: ObjectName) -> OsdRequest {
    OsdRequest::Op {
        pg,
        epoch,
        object,
        reqid: ReqId { client: 0, seq: 0 },
        ops: vec![ObjectOp::Read {
            offset: 0,
            len: OBJECT_BYTES_MAX,
        }],
    }
}

fn object_name(name: &str) -> Result<ObjectName, String> {
    ObjectName::new(name).map_err(|e| format!("{name}: {e}"))
}

/// Crashes, cuts off and brings back OSDs at random until `until`.
async fn nemesis(world: &Arc<World>, until: tokio::time::Instant) {
    while tokio::time::Instant::now() < until {
        let pause = Duration::from_millis(world.dice.below(NEMESIS_PAUSE_MS_MAX) + 1);
        tokio::time::sleep(pause).await;
        let ids: Vec<OsdId> = lock(&world.map).osds.keys().copied().collect();
        let faulty: Vec<OsdId> = ids
            .iter()
            .copied()
            .filter(|id| world.is_down(*id))
            .collect();
        let healthy: Vec<OsdId> = ids
            .iter()
            .copied()
            .filter(|id| !world.is_down(*id))
            .collect();
        let pick = |from: &[OsdId]| from[world.dice.below(from.len() as u64) as usize];
        match world.dice.below(4) {
            0 | 1 if faulty.len() < FAULTS_AT_ONCE_MAX => {
                let id = pick(&healthy);
                if world.dice.chance(0.5) {
                    world.crash(id).await;
                } else {
                    world.isolate(id);
                }
            }
            2 | 3 if !faulty.is_empty() => {
                let id = pick(&faulty);
                let healed = world.restart(id).and_then(|()| world.reconnect(id));
                healed.unwrap_or_else(|e| panic!("bringing osd.{} back: {e}", id.0));
            }
            _ => {}
        }
    }
}

/// Client `c`: writes its objects in turn, each write resent with the same request id
/// until the cluster acknowledges it.
async fn client(world: Arc<World>, c: u64, objects: u64, writes: u64) -> Result<(), String> {
    for w in 0..writes {
        let name = format!("client{c}-object{}", w % objects);
        let len = world.dice.below(OBJECT_BYTES_MAX) + 1;
        let fill = world.dice.with(rand::Rng::random::<u8>);
        let content: Vec<u8> = (0..len)
            .map(|i| fill.wrapping_add(i as u8) ^ (w as u8))
            .collect();
        let reqid = ReqId {
            client: c + 1,
            seq: w + 1,
        };
        world.write(reqid, &name, content).await?;
        world.read_during(&name).await?;
        tokio::time::sleep(Duration::from_millis(world.dice.below(THINK_MS_MAX))).await;
    }
    Ok(())
}
