//! The simulator in CI: a thousand seeds of crashes, partitions and lost messages against
//! the OSD's own code (about a tenth of a second each), two hundred more with twelve
//! clients on one PG (writes in groups), two hundred on an erasure-coded pool, and proof
//! that a seed replays.
//! Longer searches: `scripts/sim --seeds 100000`.

use coffer_sim::{run, Config};

/// Seeds each CI run searches; a failure prints the seed and how to replay it.
const SEEDS: u64 = 1000;
/// Seeds each CI run searches on an erasure-coded pool (4+2 on seven OSDs).
const ERASURE_SEEDS: u64 = 200;

#[test]
fn acknowledged_writes_survive_crashes_partitions_and_lost_messages() {
    let config = Config::default();
    for seed in 0..SEEDS {
        if let Err(failure) = run(seed, &config) {
            panic!("{failure}");
        }
    }
}

/// Seeds each CI run searches with twelve clients on one PG, whose writes queue behind
/// each other and go to the replicas as groups.
const GROUPED_SEEDS: u64 = 200;

#[test]
fn writes_grouped_in_one_pg_survive_crashes_partitions_and_lost_messages() {
    let config = Config {
        pg_num: 1,
        clients: 12,
        ..Config::default()
    };
    for seed in 0..GROUPED_SEEDS {
        if let Err(failure) = run(seed, &config) {
            panic!("{failure}");
        }
    }
}

#[test]
fn a_seed_replays_exactly() -> Result<(), String> {
    let config = Config::default();
    for seed in [7, 1234] {
        let first = run(seed, &config)?;
        let again = run(seed, &config)?;
        assert_eq!(
            first, again,
            "seed {seed} took another course when run again"
        );
        assert!(
            first.crashes + first.isolations > 0,
            "seed {seed} had no faults: {first}"
        );
    }
    let other = run(8, &config)?;
    let seven = run(7, &config)?;
    assert_ne!(other.trace, seven.trace, "two seeds took the same course");
    Ok(())
}

#[test]
fn without_faults_every_write_is_acknowledged_and_every_copy_alike() -> Result<(), String> {
    let config = Config {
        faults: false,
        ..Config::default()
    };
    let report = run(1, &config)?;
    assert_eq!(report.crashes + report.isolations, 0);
    let expected = config.clients * config.writes_per_client;
    assert_eq!(report.writes as u64, expected, "{report}");
    Ok(())
}

#[test]
fn an_erasure_coded_pool_without_faults_keeps_every_write_in_consistent_shards(
) -> Result<(), String> {
    for (k, m, osds) in [(2, 1, 4), (4, 2, 6)] {
        let config = Config {
            osds,
            faults: false,
            erasure: Some((k, m)),
            ..Config::default()
        };
        let report = run(3, &config)?;
        let expected = config.clients * config.writes_per_client;
        assert_eq!(report.writes as u64, expected, "{k}+{m}: {report}");
        assert_eq!(report.reads as u64, expected, "{k}+{m}: {report}");
    }
    Ok(())
}

#[test]
fn acknowledged_writes_to_an_erasure_coded_pool_survive_crashes_partitions_and_lost_messages() {
    let config = Config {
        osds: 7,
        erasure: Some((4, 2)),
        ..Config::default()
    };
    for seed in 0..ERASURE_SEEDS {
        if let Err(failure) = run(seed, &config) {
            panic!("{failure} --ec 4+2 --osds 7");
        }
    }
}
