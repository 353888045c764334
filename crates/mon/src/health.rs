//! OSD liveness and cluster health, kept by the leader: OSDs send beacons; one that stays
//! silent for `down_after` is marked down, and one down for `out_after` is marked out, so its
//! placement groups move to other OSDs. Beacons also carry the PG states and usage that
//! `coffer status` shows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use map::cluster::{Change, ClusterMap, PoolInfo, PoolUsage, Space, Usage};
use map::placement::{FailureDomain, OsdId, PgId};
use map::PoolId;
use messenger::message::{CacheFigures, Health, OsdBeacon, PgState, PoolStats};

/// How often the leader looks for silent OSDs.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// Most lines of inactive PGs, by pool and reason, that status lists.
const INACTIVE_LISTED_MAX: usize = 8;

#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// An up OSD with no beacon for this long is marked down.
    pub down_after: Duration,
    /// A down OSD is marked out after this long.
    pub out_after: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            down_after: Duration::from_secs(6),
            out_after: Duration::from_secs(600),
        }
    }
}

#[derive(Default)]
pub struct Liveness {
    inner: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    /// Last beacon of each OSD, as this monitor received it.
    beacons: HashMap<OsdId, (Instant, OsdBeacon)>,
    /// When this monitor first saw each OSD down (or became leader, whichever is later).
    down_since: HashMap<OsdId, Instant>,
    /// When this monitor last became leader: every OSD gets a full grace from then.
    leading_since: Option<Instant>,
}

impl Liveness {
    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn beacon(&self, osd: OsdId, beacon: OsdBeacon, at: Instant) {
        self.lock().beacons.insert(osd, (at, beacon));
    }

    /// Forgets leadership (a follower keeps no clocks: a new leader starts them afresh).
    pub fn follow(&self) {
        let mut seen = self.lock();
        seen.leading_since = None;
        seen.down_since.clear();
    }

    /// The changes due at `now` for `map`, as the leader sees them.
    pub fn due(&self, map: &ClusterMap, timeouts: Timeouts, now: Instant) -> Vec<Change> {
        let mut seen = self.lock();
        let since = *seen.leading_since.get_or_insert(now);
        let mut changes = Vec::new();
        for osd in map.osds.values() {
            if osd.up {
                seen.down_since.remove(&osd.id);
                let last = seen
                    .beacons
                    .get(&osd.id)
                    .map_or(since, |(at, _)| (*at).max(since));
                if now.duration_since(last) >= timeouts.down_after {
                    changes.push(Change::OsdDown { id: osd.id });
                }
                // Judged from the beacon, whatever its age: a full store stays full until
                // a beacon says otherwise.
                if let Some((_, beacon)) = seen.beacons.get(&osd.id) {
                    let space = map.space_ratios.judge(&beacon.usage);
                    if space != osd.space {
                        changes.push(Change::OsdSpace { id: osd.id, space });
                    }
                }
            } else {
                let down = *seen.down_since.entry(osd.id).or_insert(now);
                if osd.is_in && now.duration_since(down) >= timeouts.out_after {
                    changes.push(Change::OsdAutoOut { id: osd.id });
                }
            }
        }
        changes
    }

    /// PG states, usage and health for status, from the beacons of OSDs that are up.
    pub fn summary(&self, map: &ClusterMap) -> Summary {
        let seen = self.lock();
        let mut reported: HashMap<PgId, &PgState> = HashMap::new();
        let (mut used_bytes, mut total_bytes) = (0, 0);
        let mut read_repairs = Vec::new();
        let mut usage = BTreeMap::new();
        let mut copies: BTreeMap<PoolId, PoolUsage> = BTreeMap::new();
        let mut recovery_pending = 0;
        let mut cache = CacheFigures::default();
        for (osd, (_, beacon)) in &seen.beacons {
            if !map.osds.get(osd).is_some_and(|o| o.up) {
                continue;
            }
            cache.add(&beacon.cache);
            for (pool, held) in &beacon.pools {
                copies.entry(*pool).or_default().add(held);
            }
            recovery_pending += beacon.recovery_pending;
            used_bytes += beacon.usage.used_bytes;
            total_bytes += beacon.usage.total_bytes;
            usage.insert(*osd, beacon.usage);
            if beacon.read_repairs > 0 {
                read_repairs.push((*osd, beacon.read_repairs));
            }
            // PG states from an older map may predate the change: unknown until it reports.
            if beacon.epoch < map.epoch {
                continue;
            }
            for (pg, state) in &beacon.pgs {
                let Some(pool) = map.pools.get(&pg.pool) else {
                    continue;
                };
                // Only the current primary's word counts.
                if map.acting(pool, *pg).first() == Some(osd) {
                    reported.insert(*pg, state);
                }
            }
        }
        let mut pgs: BTreeMap<String, u64> = BTreeMap::new();
        let mut pool_pgs: BTreeMap<(PoolId, &'static str), u64> = BTreeMap::new();
        let mut inactive: BTreeMap<(PoolId, &str), Vec<u32>> = BTreeMap::new();
        for pool in map.pools.values() {
            for number in 0..pool.pg_num {
                let pg = PgId {
                    pool: pool.id,
                    number,
                };
                let name = match reported.get(&pg) {
                    Some(state) => {
                        if let Some(why) = state.not_writable() {
                            inactive.entry((pool.id, why)).or_default().push(number);
                        }
                        state.name()
                    }
                    None if map.acting(pool, pg).is_empty() => "down",
                    None => "unknown",
                };
                *pgs.entry(name.to_string()).or_default() += 1;
                *pool_pgs.entry((pool.id, name)).or_default() += 1;
            }
        }
        read_repairs.sort();
        let health = health(map, &pgs, &read_repairs, &usage);
        let pool_usage = map
            .pools
            .values()
            .map(|pool| {
                let held = copies.get(&pool.id).copied().unwrap_or_default();
                (pool.id, pool_stats(map, pool, &held, &usage))
            })
            .collect();
        Summary {
            pool_usage,
            recovery_pending,
            cache,
            pgs,
            pool_pgs,
            usage,
            inactive: inactive_lines(map, &inactive),
            used_bytes,
            total_bytes,
            read_repairs,
            health,
        }
    }
}

pub struct Summary {
    pub pgs: BTreeMap<String, u64>,
    /// The same, pool by pool.
    pub pool_pgs: BTreeMap<(PoolId, &'static str), u64>,
    /// Each up OSD's space, from its last beacon.
    pub usage: BTreeMap<OsdId, Usage>,
    pub inactive: Vec<String>,
    pub used_bytes: u64,
    pub total_bytes: u64,
    /// Copies each up OSD replaced on read since it started (OSDs with none left out).
    pub read_repairs: Vec<(OsdId, u64)>,
    pub health: Health,
    /// Each pool's usage.
    pub pool_usage: BTreeMap<PoolId, PoolStats>,
    /// Objects the up OSDs' recovery has yet to copy.
    pub recovery_pending: u64,
    /// The up OSDs' read caches, summed.
    pub cache: CacheFigures,
}

/// The inactive PGs as status lists them: one line per pool and reason, naming the first
/// few PGs (`pool cold: 16 PGs (3.0, 3.1, 3.2, 3.3, …): 4 of its OSDs up, min_size 5`), at
/// most [`INACTIVE_LISTED_MAX`] lines.
fn inactive_lines(map: &ClusterMap, inactive: &BTreeMap<(PoolId, &str), Vec<u32>>) -> Vec<String> {
    const NAMED_MAX: usize = 4;
    inactive
        .iter()
        .take(INACTIVE_LISTED_MAX)
        .map(|((pool, why), numbers)| {
            let name = map.pools.get(pool).map_or("?", |p| p.name.as_str());
            let mut named: Vec<String> = numbers
                .iter()
                .take(NAMED_MAX)
                .map(|n| format!("{pool}.{n}"))
                .collect();
            if numbers.len() > NAMED_MAX {
                named.push("…".into());
            }
            let pgs = match numbers.len() {
                1 => format!("pg {}", named.join("")),
                n => format!("{n} PGs ({})", named.join(", ")),
            };
            format!("pool {name}: {pgs}: {why}")
        })
        .collect()
}

/// `pool`'s usage from what the up OSDs hold of it (`held`, every copy or shard) and
/// their space.
fn pool_stats(
    map: &ClusterMap,
    pool: &PoolInfo,
    held: &PoolUsage,
    usage: &BTreeMap<OsdId, Usage>,
) -> PoolStats {
    let (raw, per) = pool.raw_per_byte();
    let scale = |bytes: u64| u64::try_from(u128::from(bytes) * u128::from(per) / u128::from(raw));
    PoolStats {
        objects: held.objects / u64::from(pool.size.max(1)),
        stored_bytes: scale(held.stored_bytes).unwrap_or(u64::MAX),
        used_bytes: held.allocated_bytes,
        max_avail_bytes: scale(max_raw_avail(map, usage)).unwrap_or(u64::MAX),
    }
}

/// What more the up and in OSDs can take, in raw bytes, before the first is full. Writes
/// spread over them by weight, so the OSD with the least room for its share bounds the
/// whole (Ceph's MAX AVAIL is this, over what a pool stores per byte). An OSD that has not
/// reported yet counts as having no room.
fn max_raw_avail(map: &ClusterMap, usage: &BTreeMap<OsdId, Usage>) -> u64 {
    let targets: Vec<_> = map
        .osds
        .values()
        .filter(|o| o.up && o.is_in && o.weight > 0)
        .collect();
    let total_weight: u128 = targets.iter().map(|o| u128::from(o.weight)).sum();
    let bound = targets
        .iter()
        .map(|o| {
            let room = usage.get(&o.id).map_or(0, |u| map.space_ratios.room(u));
            u128::from(room) * total_weight / u128::from(o.weight)
        })
        .min()
        .unwrap_or(0);
    u64::try_from(bound).unwrap_or(u64::MAX)
}

/// Read repairs by one OSD past which health warns that its disk may be failing (Ceph's
/// `mon_osd_warn_num_repaired`).
pub const READ_REPAIRS_WARN: u64 = 10;

/// `usage`: each up OSD's space, from its last beacon.
fn health(
    map: &ClusterMap,
    pgs: &BTreeMap<String, u64>,
    read_repairs: &[(OsdId, u64)],
    usage: &BTreeMap<OsdId, Usage>,
) -> Health {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let ratios = map.space_ratios;
    for osd in map.osds.values() {
        let why = usage
            .get(&osd.id)
            .map_or("no report yet".to_string(), |usage| ratios.explain(usage));
        match osd.space {
            Space::Ok => {}
            Space::NearFull => warnings.push(format!("osd.{} is nearfull: {why}", osd.id.0)),
            Space::Full => errors.push(format!(
                "osd.{} is full: {why}; writes to pools {} are refused until space is freed \
                 (deletes still work)",
                osd.id.0,
                map.pools_on(osd.id).join(", ")
            )),
        }
    }
    for (osd, count) in read_repairs {
        if *count > READ_REPAIRS_WARN {
            warnings.push(format!(
                "osd.{} replaced {count} damaged copies on read since it started: check its disk",
                osd.0
            ));
        }
    }
    for (state, count) in pgs {
        match state.as_str() {
            "active+clean" => {}
            "inactive" | "down" => errors.push(format!("{count} PGs {state}: I/O to them waits")),
            "readonly" => errors.push(format!("{count} PGs {state}: writes to them wait")),
            _ => warnings.push(format!("{count} PGs {state}")),
        }
    }
    for pool in map.pools.values() {
        let places = map.domains_in(pool.domain);
        if usize::from(pool.size) > places && places > 0 {
            let what = match pool.domain {
                FailureDomain::Osd => "OSDs are in",
                FailureDomain::Host => "hosts have OSDs in",
            };
            let held = if pool.erasure.is_some() {
                "shards"
            } else {
                "copies"
            };
            warnings.push(format!(
                "pool {} wants {} {held} but only {places} {what}: its PGs stay undersized",
                pool.name, pool.size
            ));
        }
    }
    let down = map.osds.values().filter(|o| !o.up).count();
    if down > 0 {
        warnings.push(format!("{down} of {} OSDs down", map.osds.len()));
    }
    if map.osds.is_empty() {
        warnings.push("no OSDs".into());
    }
    if !errors.is_empty() {
        errors.extend(warnings);
        Health::Err(errors)
    } else if !warnings.is_empty() {
        Health::Warn(warnings)
    } else {
        Health::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_with(osds: u32) -> ClusterMap {
        let mut map = ClusterMap::default();
        for id in 0..osds {
            let id = OsdId(id);
            map.apply(&Change::AddOsd {
                id,
                host: "h".into(),
                weight: map::cluster::WEIGHT_ONE,
            })
            .expect("add");
            map.apply(&Change::OsdBoot {
                id,
                addr: "127.0.0.1:1".into(),
            })
            .expect("boot");
        }
        map
    }

    /// Adds pool `name` of 4 PGs, with `size` copies of which `min_size` must be written.
    fn add_pool(map: &mut ClusterMap, name: &str, size: u8, min_size: u8) {
        map.apply(&Change::CreatePool {
            name: name.into(),
            size,
            min_size,
            pg_num: 4,
            domain: FailureDomain::Osd,
            erasure: None,
        })
        .expect("pool");
    }

    #[test]
    fn silent_osds_go_down_after_grace_then_out() {
        let timeouts = Timeouts {
            down_after: Duration::from_secs(5),
            out_after: Duration::from_secs(60),
        };
        let live = Liveness::default();
        let mut map = map_with(2);
        let t0 = Instant::now();
        assert!(
            live.due(&map, timeouts, t0).is_empty(),
            "grace starts at leadership"
        );
        let later = t0 + Duration::from_secs(6);
        live.beacon(
            OsdId(0),
            OsdBeacon::default(),
            later - Duration::from_secs(1),
        );
        let due = live.due(&map, timeouts, later);
        assert_eq!(due, vec![Change::OsdDown { id: OsdId(1) }]);
        map.apply(&due[0]).expect("down");
        assert!(live
            .due(&map, timeouts, later)
            .iter()
            .all(|c| matches!(c, Change::OsdDown { id } if *id == OsdId(0))));
        let much_later = later + Duration::from_secs(61);
        assert!(live
            .due(&map, timeouts, much_later)
            .contains(&Change::OsdAutoOut { id: OsdId(1) }));
    }

    #[test]
    fn a_new_leader_gives_every_osd_a_full_grace() {
        let timeouts = Timeouts::default();
        let live = Liveness::default();
        let map = map_with(1);
        let t0 = Instant::now();
        live.due(&map, timeouts, t0);
        live.follow();
        let t1 = t0 + timeouts.down_after * 2;
        assert!(live.due(&map, timeouts, t1).is_empty());
        assert_eq!(
            live.due(&map, timeouts, t1 + timeouts.down_after),
            vec![Change::OsdDown { id: OsdId(0) }]
        );
    }

    #[test]
    fn status_counts_pgs_by_the_primarys_report() {
        let mut map = map_with(3);
        add_pool(&mut map, "p", 3, 2);
        let live = Liveness::default();
        let pool = map.pool_by_name("p").expect("pool").clone();
        for number in 0..4 {
            let pg = PgId {
                pool: pool.id,
                number,
            };
            let primary = map.acting(&pool, pg)[0];
            let state = match number {
                0 => PgState::Inactive("1 of min_size 2".into()),
                1 => PgState::ReadOnly("4 of its OSDs up, min_size 5; reads are served".into()),
                _ => PgState::Clean,
            };
            let mut beacon = live
                .lock()
                .beacons
                .get(&primary)
                .map(|(_, b)| b.clone())
                .unwrap_or_default();
            beacon.epoch = map.epoch;
            beacon.pgs.push((pg, state));
            live.beacon(primary, beacon, Instant::now());
        }
        let summary = live.summary(&map);
        assert_eq!(summary.pgs.get("active+clean"), Some(&2));
        assert_eq!(summary.pgs.get("inactive"), Some(&1));
        assert_eq!(summary.pgs.get("readonly"), Some(&1));
        let Health::Err(errors) = &summary.health else {
            panic!("{:?}", summary.health);
        };
        assert!(errors.contains(&"1 PGs readonly: writes to them wait".to_string()));
        assert_eq!(
            summary.inactive,
            [
                "pool p: pg 1.0: 1 of min_size 2",
                "pool p: pg 1.1: 4 of its OSDs up, min_size 5; reads are served"
            ]
        );

        // Reports from before the latest map change do not count.
        let primary = map.acting(
            &pool,
            PgId {
                pool: pool.id,
                number: 1,
            },
        )[0];
        let mut stale = live.lock().beacons[&primary].1.clone();
        stale.epoch = map.epoch - 1;
        live.beacon(primary, stale, Instant::now());
        let summary = live.summary(&map);
        assert!(
            summary.pgs.get("unknown").is_some_and(|n| *n >= 1),
            "{:?}",
            summary.pgs
        );
    }

    #[test]
    fn a_pool_wanting_more_copies_than_places_is_named() {
        let mut map = map_with(3);
        add_pool(&mut map, "wide", 5, 3);
        match health(&map, &BTreeMap::new(), &[], &BTreeMap::new()) {
            Health::Warn(reasons) => assert_eq!(
                reasons,
                vec!["pool wide wants 5 copies but only 3 OSDs are in: its PGs stay undersized"]
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stores_past_the_ratios_are_marked_and_named() {
        let mut map = map_with(3);
        add_pool(&mut map, "p", 3, 2);
        let live = Liveness::default();
        let now = Instant::now();
        // osd.0's store has room, the file system under it has not.
        for (osd, used, host_free_bytes) in
            [(0, 100, 10 << 20), (1, 860, u64::MAX), (2, 960, 1 << 30)]
        {
            let beacon = OsdBeacon {
                epoch: map.epoch,
                usage: Usage {
                    used_bytes: used,
                    total_bytes: 1000,
                    host_free_bytes,
                },
                ..OsdBeacon::default()
            };
            live.beacon(OsdId(osd), beacon, now);
        }
        let changes = live.due(&map, Timeouts::default(), now);
        assert_eq!(
            changes,
            vec![
                Change::OsdSpace {
                    id: OsdId(0),
                    space: Space::Full
                },
                Change::OsdSpace {
                    id: OsdId(1),
                    space: Space::NearFull
                },
                Change::OsdSpace {
                    id: OsdId(2),
                    space: Space::Full
                },
            ]
        );
        for change in &changes {
            map.apply(change).expect("apply");
        }
        assert!(live.due(&map, Timeouts::default(), now).is_empty());
        let pool = map.pool_by_name("p").expect("pool").clone();
        let pg = PgId {
            pool: pool.id,
            number: 0,
        };
        let refusal = map.full_refusal(&pool, pg).expect("refused");
        assert!(
            refusal.starts_with("pool p is full: osd.0, osd.2 of pg 1.0 are full"),
            "{refusal}"
        );
        match live.summary(&map).health {
            Health::Err(reasons) => {
                assert!(
                    reasons[0].starts_with("osd.0 is full: 10.0 % of its store used; the file system under its store has 10 MiB free (full below 64 MiB); writes to pools p are refused"),
                    "{reasons:?}"
                );
                assert!(
                    reasons[1].starts_with("osd.2 is full: 96.0 % of its store used (full at 95.0 %); writes to pools p are refused"),
                    "{reasons:?}"
                );
                assert!(
                    reasons[2].starts_with(
                        "osd.1 is nearfull: 86.0 % of its store used (nearfull at 85.0 %)"
                    ),
                    "{reasons:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Space freed: the marks go, and writes are taken again.
        for osd in [0, 2] {
            let usage = Usage {
                used_bytes: 500,
                total_bytes: 1000,
                host_free_bytes: 1 << 30,
            };
            let beacon = OsdBeacon {
                epoch: map.epoch,
                usage,
                ..OsdBeacon::default()
            };
            live.beacon(OsdId(osd), beacon, now);
        }
        let changes = live.due(&map, Timeouts::default(), now);
        let ok = |id| Change::OsdSpace {
            id: OsdId(id),
            space: Space::Ok,
        };
        assert_eq!(changes, vec![ok(0), ok(2)]);
        for change in &changes {
            map.apply(change).expect("apply");
        }
        assert_eq!(map.full_refusal(&pool, pg), None);
    }

    #[test]
    fn read_repairs_are_listed_and_warn_past_the_limit() {
        let map = map_with(3);
        let live = Liveness::default();
        for (osd, repairs) in [(0, 0), (1, READ_REPAIRS_WARN), (2, READ_REPAIRS_WARN + 1)] {
            let beacon = OsdBeacon {
                epoch: map.epoch,
                read_repairs: repairs,
                ..OsdBeacon::default()
            };
            live.beacon(OsdId(osd), beacon, Instant::now());
        }
        let summary = live.summary(&map);
        assert_eq!(
            summary.read_repairs,
            vec![
                (OsdId(1), READ_REPAIRS_WARN),
                (OsdId(2), READ_REPAIRS_WARN + 1)
            ]
        );
        match summary.health {
            Health::Warn(reasons) => {
                assert_eq!(reasons.len(), 1, "{reasons:?}");
                assert!(reasons[0].starts_with("osd.2 replaced 11 damaged copies"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pool_usage_is_one_copy_of_what_the_up_osds_hold_and_room_is_bounded_by_the_fullest() {
        let mut map = map_with(3);
        add_pool(&mut map, "p", 3, 2);
        add_pool(&mut map, "q", 2, 1);
        let (p, q) = (
            map.pools.keys().copied().min(),
            map.pools.keys().copied().max(),
        );
        let (p, q) = (p.expect("p"), q.expect("q"));
        let live = Liveness::default();
        let held = PoolUsage {
            objects: 10,
            stored_bytes: 1000,
            allocated_bytes: 4096 * 10,
        };
        // Room below the 95 % full ratio: 850, 450 and 850 bytes; osd.1 has the least.
        for (osd, used) in [(0, 100), (1, 500), (2, 100)] {
            let beacon = OsdBeacon {
                epoch: map.epoch,
                usage: Usage {
                    used_bytes: used,
                    total_bytes: 1000,
                    host_free_bytes: u64::MAX,
                },
                pools: vec![(p, held)],
                ..OsdBeacon::default()
            };
            live.beacon(OsdId(osd), beacon, Instant::now());
        }
        let usage = live.summary(&map).pool_usage;
        assert_eq!(
            usage[&p],
            PoolStats {
                objects: 10,
                stored_bytes: 1000,
                used_bytes: 3 * 4096 * 10,
                max_avail_bytes: 450,
            }
        );
        assert_eq!(
            usage[&q],
            PoolStats {
                max_avail_bytes: 450 * 3 / 2,
                ..PoolStats::default()
            },
            "a pool with nothing stored still has room"
        );
        // A down OSD's copies and room no longer count.
        map.apply(&Change::OsdDown { id: OsdId(1) }).expect("down");
        let usage = live.summary(&map).pool_usage;
        assert_eq!(
            usage[&p].objects, 6,
            "two copies of ten objects over size 3"
        );
        assert_eq!(usage[&p].max_avail_bytes, 850 * 2 / 3);
    }

    #[test]
    fn an_erasure_coded_pool_stores_and_has_room_for_k_bytes_of_every_k_plus_m() {
        let mut map = map_with(3);
        let code: map::cluster::Erasure =
            serde_json::from_str(r#"{"k":4,"m":2,"unit_bytes":4096}"#).expect("a 4+2 code");
        map.apply(&Change::CreatePool {
            name: "wide".into(),
            size: 6,
            min_size: 5,
            pg_num: 4,
            domain: FailureDomain::Osd,
            erasure: Some(code),
        })
        .expect("pool");
        let pool = map.pools.keys().copied().max().expect("wide");
        let live = Liveness::default();
        // Two objects of 16 KiB (one stripe each): six shards of 4 KiB, four on each OSD.
        let held = PoolUsage {
            objects: 4,
            stored_bytes: 4 * 4096,
            allocated_bytes: 4 * 4096,
        };
        for osd in 0..3 {
            let beacon = OsdBeacon {
                epoch: map.epoch,
                usage: Usage {
                    used_bytes: 100,
                    total_bytes: 1000,
                    host_free_bytes: u64::MAX,
                },
                pools: vec![(pool, held)],
                ..OsdBeacon::default()
            };
            live.beacon(OsdId(osd), beacon, Instant::now());
        }
        let usage = live.summary(&map).pool_usage;
        assert_eq!(
            usage[&pool],
            PoolStats {
                objects: 2,
                stored_bytes: 2 * 16_384,
                used_bytes: 3 * 4 * 4096,
                max_avail_bytes: 850 * 3 * 4 / 6,
            }
        );
    }
}
