//! Placement: object → placement group (PG) → ordered set of OSDs.
//!
//! Pure functions of their inputs; every client and daemon computes the same answer from the
//! same map, so nothing here may depend on the platform: no floating point (libm `ln` may
//! differ in the last bit between machines), no randomness, no iteration order of hash maps.
//!
//! - **Object → PG**: Ceph's `stable_mod` of the object's 32-bit hash by `pg_num`, so that
//!   raising `pg_num` splits PGs rather than reshuffling every object.
//! - **PG → OSDs**: straw2 (weighted rendezvous hashing). Each candidate draws
//!   `log2(u) / weight` for a hash `u` of (pool, PG, candidate, attempt), and the largest
//!   draw wins. The winner of each draw is independent of the other candidates' weights
//!   (the "exponential race"), so changing one OSD's weight moves only PGs to or from that
//!   OSD: about its share, no more. log2 is computed in fixed point with integers only.
//! - **Failure domains**: with `FailureDomain::Host`, replica r first picks a host by straw2
//!   over host weights (the sum of its OSDs' weights, in or out), then an OSD that is in
//!   within it; a host already used, or with no OSD in, is retried with the next attempt
//!   number, at most `PLACEMENT_TRIES_MAX` times.
//!
//! See docs/design/placement.md.

use crate::PoolId;
use serde::{Deserialize, Serialize};

/// Draws per replica before placement gives up finding a new failure domain.
pub const PLACEMENT_TRIES_MAX: u32 = 50;

/// An OSD's number, unique in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OsdId(pub u32);

/// A placement group: a pool and its number within the pool (below `pg_num`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PgId {
    pub pool: PoolId,
    pub number: u32,
}

/// Which replicas must not share: a host (the default in a real deployment) or only an OSD
/// (a single machine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailureDomain {
    Host,
    Osd,
}

/// What placement needs to know of an OSD. `weight` is its relative capacity and sets its
/// host's weight whether or not it is in; `is_in` says whether it may hold data. As in
/// Ceph (crush weight against reweight), marking an OSD out leaves its host's weight alone,
/// so only the PGs that had that OSD move, to other OSDs of the same host where possible.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    pub osd: OsdId,
    pub host: String,
    pub weight: u32,
    pub is_in: bool,
}

impl Candidate {
    fn eligible_weight(&self) -> u64 {
        if self.is_in {
            u64::from(self.weight)
        } else {
            0
        }
    }
}

/// The PG number of an object hash: `hash mod pg_num`, computed so that growing `pg_num`
/// splits PGs (an object either stays or moves to a new PG, never between old ones).
pub fn pg_of(hash: u32, pg_num: u32) -> u32 {
    assert!(pg_num > 0, "a pool has at least one PG");
    let mask = pg_num.next_power_of_two() - 1;
    if hash & mask < pg_num {
        hash & mask
    } else {
        hash & (mask >> 1)
    }
}

/// The ordered OSDs (primary first) that hold `pg`: `size` of them where the candidates
/// allow, fewer when there are not enough failure domains with weight.
pub fn place(pg: PgId, candidates: &[Candidate], size: usize, domain: FailureDomain) -> Vec<OsdId> {
    place_positions(pg, candidates, size, domain)
        .into_iter()
        .flatten()
        .collect()
}

/// The OSD at each of `size` positions of `pg` (an erasure-coded pool's shard i lives at
/// position i), None where no failure domain with weight is left for it. Position r is
/// drawn with attempt numbers r, r + size, ... among the candidates the positions before it
/// did not take, so a position's OSD changes only when its own draw or an earlier
/// position's choice does: marking one OSD out moves its own position and none before it.
/// By host, while another OSD of its host is in, no later one moves either (the position
/// keeps its host); by OSD, or when the host has no other OSD in, a later one moves where
/// its draws met the OSD or its replacement. [`place`] is these, closed up.
pub fn place_positions(
    pg: PgId,
    candidates: &[Candidate],
    size: usize,
    domain: FailureDomain,
) -> Vec<Option<OsdId>> {
    let mut positions: Vec<Option<OsdId>> = Vec::with_capacity(size);
    let mut chosen: Vec<OsdId> = Vec::with_capacity(size);
    let mut used_hosts: Vec<&str> = Vec::with_capacity(size);
    let mut hosts: Vec<(&str, u64)> = Vec::new();
    for c in candidates.iter().filter(|c| c.weight > 0) {
        match hosts.iter_mut().find(|(h, _)| *h == c.host) {
            Some((_, w)) => *w += u64::from(c.weight),
            None => hosts.push((&c.host, u64::from(c.weight))),
        }
    }
    for replica in 0..size as u32 {
        let mut placed = None;
        for attempt in 0..PLACEMENT_TRIES_MAX {
            let r = replica + attempt * size as u32;
            let pick = match domain {
                FailureDomain::Osd => straw2(
                    pg,
                    r,
                    candidates
                        .iter()
                        .map(|c| (item_key_osd(c.osd), c.eligible_weight(), c)),
                )
                .filter(|c| !chosen.contains(&c.osd)),
                FailureDomain::Host => {
                    let host = straw2(pg, r, hosts.iter().map(|(h, w)| (item_key_host(h), *w, *h)))
                        .filter(|h| !used_hosts.contains(h));
                    host.and_then(|host| {
                        let inside = candidates.iter().filter(|c| c.host == host);
                        straw2(
                            pg,
                            r,
                            inside.map(|c| (item_key_osd(c.osd), c.eligible_weight(), c)),
                        )
                    })
                }
            };
            if let Some(c) = pick {
                chosen.push(c.osd);
                used_hosts.push(&c.host);
                placed = Some(c.osd);
                break;
            }
        }
        positions.push(placed);
    }
    positions
}

fn item_key_osd(osd: OsdId) -> u64 {
    u64::from(osd.0)
}

fn item_key_host(host: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(host.as_bytes()) | 1 << 63
}

/// The straw2 winner among `(key, weight, item)`: the largest `log2(u) / weight`, where `u`
/// in (0, 1] is a hash of the PG, the attempt and the item's key. Weight 0 never wins; ties
/// (astronomically rare) go to the larger key, so the result never depends on input order.
fn straw2<T>(pg: PgId, r: u32, items: impl Iterator<Item = (u64, u64, T)>) -> Option<T> {
    let mut best: Option<(i128, u64, T)> = None;
    for (key, weight, item) in items.filter(|(_, w, _)| *w > 0) {
        let u = draw_hash(pg, r, key);
        // log2(u / 2^32) in Q32.32 is <= 0; dividing by the weight brings heavier items
        // nearer zero, so they win more often, in proportion to their weight.
        let draw = (i128::from(log2_q32(u)) - (32i128 << 32)) * (1 << 16) / i128::from(weight);
        let better = match &best {
            None => true,
            Some((b, bkey, _)) => draw > *b || (draw == *b && key > *bkey),
        };
        if better {
            best = Some((draw, key, item));
        }
    }
    best.map(|(_, _, item)| item)
}

/// A 32-bit hash in 1..=2^32 of (pool, PG, attempt, item).
fn draw_hash(pg: PgId, r: u32, key: u64) -> u64 {
    let mut bytes = [0u8; 24];
    bytes[..8].copy_from_slice(&pg.pool.0.to_le_bytes());
    bytes[8..12].copy_from_slice(&pg.number.to_le_bytes());
    bytes[12..16].copy_from_slice(&r.to_le_bytes());
    bytes[16..].copy_from_slice(&key.to_le_bytes());
    (xxhash_rust::xxh3::xxh3_64(&bytes) & 0xffff_ffff) + 1
}

/// log2(x) for x >= 1, in fixed point with 32 fractional bits, from integers only: the
/// integer part from the leading zeros, then one fractional bit per squaring of the
/// normalised mantissa. Exact to the last bit on every platform.
fn log2_q32(x: u64) -> u64 {
    assert!(x > 0, "log2 of zero");
    let integer = 63 - u64::from(x.leading_zeros());
    // Mantissa in [1, 2) as Q1.63.
    let mut m: u128 = u128::from(x) << (63 - integer);
    let mut fraction: u64 = 0;
    for bit in (0..32).rev() {
        m = (m * m) >> 63;
        if m >= 1u128 << 64 {
            m >>= 1;
            fraction |= 1 << bit;
        }
    }
    integer << 32 | fraction
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cluster(hosts: u32, per_host: u32) -> Vec<Candidate> {
        (0..hosts * per_host)
            .map(|i| Candidate {
                osd: OsdId(i),
                host: format!("host-{}", i / per_host),
                weight: 1 << 16,
                is_in: true,
            })
            .collect()
    }

    fn pg(number: u32) -> PgId {
        PgId {
            pool: PoolId(1),
            number,
        }
    }

    #[test]
    fn log2_is_exact_on_powers_of_two_and_close_elsewhere() {
        for k in 0..63 {
            assert_eq!(log2_q32(1 << k), (k as u64) << 32);
        }
        for x in [3u64, 10, 1000, 123_456_789, u32::MAX as u64] {
            let got = log2_q32(x) as f64 / (1u64 << 32) as f64;
            assert!((got - (x as f64).log2()).abs() < 1e-8, "log2({x}) = {got}");
        }
    }

    #[test]
    fn stable_mod_splits_pgs_when_pg_num_grows() {
        for hash in (0..100_000u32).map(|i| i.wrapping_mul(2_654_435_761)) {
            let before = pg_of(hash, 12);
            let after = pg_of(hash, 16);
            assert!(before < 12 && after < 16);
            assert!(
                after == before || after >= 12 || before >= 8,
                "hash {hash} moved between old PGs"
            );
        }
    }

    #[test]
    fn replicas_land_on_distinct_hosts_and_placement_is_deterministic() {
        let osds = cluster(5, 3);
        for n in 0..512 {
            let set = place(pg(n), &osds, 3, FailureDomain::Host);
            assert_eq!(set.len(), 3);
            let hosts: Vec<u32> = set.iter().map(|o| o.0 / 3).collect();
            assert!(
                hosts[0] != hosts[1] && hosts[1] != hosts[2] && hosts[0] != hosts[2],
                "{set:?}"
            );
            assert_eq!(set, place(pg(n), &osds, 3, FailureDomain::Host));
            let mut reversed = osds.clone();
            reversed.reverse();
            assert_eq!(
                set,
                place(pg(n), &reversed, 3, FailureDomain::Host),
                "independent of input order"
            );
        }
    }

    #[test]
    fn too_few_failure_domains_give_fewer_replicas_never_two_on_one_host() {
        let osds = cluster(2, 4);
        let set = place(pg(7), &osds, 3, FailureDomain::Host);
        assert_eq!(set.len(), 2);
        let on_osds = place(pg(7), &osds, 3, FailureDomain::Osd);
        assert_eq!(
            on_osds.len(),
            3,
            "with OSDs as the domain, one host can hold all three"
        );
    }

    #[test]
    fn load_follows_weight() {
        let mut osds = cluster(8, 1);
        osds[0].weight = 2 << 16;
        let mut primaries: HashMap<OsdId, u32> = HashMap::new();
        let pgs = 20_000;
        for n in 0..pgs {
            *primaries
                .entry(place(pg(n), &osds, 1, FailureDomain::Osd)[0])
                .or_default() += 1;
        }
        let heavy = primaries[&OsdId(0)] as f64 / pgs as f64;
        let light = primaries[&OsdId(1)] as f64 / pgs as f64;
        assert!(
            (heavy - 2.0 / 9.0).abs() < 0.02,
            "double weight takes 2/9: {heavy}"
        );
        assert!(
            (light - 1.0 / 9.0).abs() < 0.015,
            "unit weight takes 1/9: {light}"
        );
    }

    /// `place` is the positions closed up. Marking an OSD out moves its own position and
    /// none before it; by host, no later one either (its position keeps the host), and by
    /// OSD, a later one only now and then (where its draws met the OSD or its replacement).
    #[test]
    fn positions_move_only_from_the_one_marked_out() {
        let shards = 6;
        for domain in [FailureDomain::Host, FailureDomain::Osd] {
            let osds = cluster(8, 2);
            let mut out = osds.clone();
            out[5].is_in = false;
            let (mut had, mut later_moved) = (0, 0);
            for n in 0..2048 {
                let before = place_positions(pg(n), &osds, shards, domain);
                let closed: Vec<OsdId> = before.iter().flatten().copied().collect();
                assert_eq!(place(pg(n), &osds, shards, domain), closed);
                assert_eq!(
                    closed.len(),
                    shards,
                    "{domain:?}: 16 OSDs on 8 hosts hold 6"
                );
                let after = place_positions(pg(n), &out, shards, domain);
                let Some(at) = before.iter().position(|p| *p == Some(OsdId(5))) else {
                    assert_eq!(after, before, "{domain:?}: PG {n} moved without osd.5");
                    continue;
                };
                had += 1;
                assert_eq!(after[..at], before[..at], "{domain:?}: PG {n}");
                assert!(after[at].is_some_and(|osd| osd != OsdId(5)));
                later_moved += (at + 1..shards).filter(|i| after[*i] != before[*i]).count();
            }
            match domain {
                FailureDomain::Host => assert_eq!(later_moved, 0),
                FailureDomain::Osd => assert!(
                    later_moved * 2 < had,
                    "{later_moved} later positions moved in {had} PGs"
                ),
            }
        }
    }

    /// Marking one OSD out moves only PGs that had it; adding one moves only PGs that gain
    /// it; and in both cases about its share (issue #3: "moves only about its share").
    #[test]
    fn moving_one_osd_in_or_out_moves_about_its_share() {
        let pgs = 4096;
        for domain in [FailureDomain::Host, FailureDomain::Osd] {
            let before_osds = cluster(10, 2);
            let before: Vec<Vec<OsdId>> = (0..pgs)
                .map(|n| place(pg(n), &before_osds, 3, domain))
                .collect();

            let mut out = before_osds.clone();
            out[5].is_in = false;
            let mut moved = 0;
            for n in 0..pgs {
                let after = place(pg(n), &out, 3, domain);
                assert!(!after.contains(&OsdId(5)));
                if after != before[n as usize] {
                    assert!(
                        before[n as usize].contains(&OsdId(5)),
                        "{domain:?}: PG {n} moved without losing osd.5"
                    );
                    moved += 1;
                }
            }
            let share = 3.0 * pgs as f64 / 20.0;
            assert!(
                (moved as f64) < share * 1.25,
                "{domain:?}: {moved} PGs moved for a share of {share}"
            );

            let mut grown = before_osds.clone();
            grown.push(Candidate {
                osd: OsdId(20),
                host: "host-10".into(),
                weight: 1 << 16,
                is_in: true,
            });
            let mut gained = 0;
            for n in 0..pgs {
                let after = place(pg(n), &grown, 3, domain);
                if after != before[n as usize] {
                    assert!(
                        after.contains(&OsdId(20)),
                        "{domain:?}: PG {n} moved without gaining osd.20"
                    );
                    gained += 1;
                }
            }
            let share = 3.0 * pgs as f64 / 21.0;
            assert!(
                (gained as f64) < share * 1.25 && (gained as f64) > share * 0.75,
                "{domain:?}: {gained} for {share}"
            );
        }
    }
}
