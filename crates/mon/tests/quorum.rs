//! Three monitors agree on the map through raft: with one down, changes still commit; with
//! two down, changes stop rather than diverge, and resume when one returns.

mod common;

use map::cluster::ClusterMap;
use messenger::message::{MonReply, MonRequest};
use messenger::{MonClient, MonError};

async fn leader_rank(admin: &MonClient, harness: &common::Harness) -> usize {
    let Ok(MonReply::Status(status)) = admin.call(&MonRequest::Status).await else {
        panic!("status");
    };
    let leader = status.leader.expect("a leader");
    harness
        .members
        .iter()
        .position(|m| m.name == leader)
        .expect("leader is a member")
}

fn has_pool(map: &ClusterMap, name: &str) -> bool {
    map.pool_by_name(name).is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_commit_with_a_majority_and_stop_without_one() {
    let mut harness = common::Harness::start(3).await;
    let admin = harness.admin();
    assert!(matches!(
        admin.command(common::pool("one")).await,
        Ok(MonReply::Done { .. })
    ));

    let leader = leader_rank(&admin, &harness).await;
    harness.stop(leader).await;
    let after_one_down = admin.command(common::pool("two")).await;
    assert!(
        matches!(after_one_down, Ok(MonReply::Done { .. })),
        "{after_one_down:?}"
    );
    let map = admin.map().await.expect("map");
    assert!(has_pool(&map, "one") && has_pool(&map, "two"));

    let second = (0..3)
        .find(|r| harness.mons[*r].is_some())
        .expect("a live monitor");
    harness.stop(second).await;
    let survivor = (0..3)
        .find(|r| harness.mons[*r].is_some())
        .expect("the last monitor");
    let epoch_before = harness.mons[survivor].as_ref().expect("live").epoch();
    let without_quorum = admin.command(common::pool("three")).await;
    assert!(
        matches!(
            without_quorum,
            Err(MonError::Failed(_)) | Err(MonError::Unreachable { .. })
        ),
        "a change without a quorum must fail: {without_quorum:?}"
    );
    assert_eq!(
        harness.mons[survivor].as_ref().expect("live").epoch(),
        epoch_before,
        "the lone monitor changed the map"
    );
    let map = admin
        .map()
        .await
        .expect("the lone monitor still serves the map");
    assert!(!has_pool(&map, "three"));

    harness.restart(leader).await;
    let resumed = admin.command(common::pool("four")).await;
    assert!(matches!(resumed, Ok(MonReply::Done { .. })), "{resumed:?}");
    harness.restart(second).await;
    let last = admin.command(common::pool("five")).await;
    let Ok(MonReply::Done { epoch }) = last else {
        panic!("{last:?}");
    };
    // Every monitor, including the two that were down, reaches the same map.
    for _ in 0..100 {
        if harness.mons.iter().flatten().all(|m| m.epoch() == epoch) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let epochs: Vec<u64> = harness.mons.iter().flatten().map(|m| m.epoch()).collect();
    assert_eq!(epochs, vec![epoch; 3]);
    let map = admin.map().await.expect("map");
    for name in ["one", "two", "four", "five"] {
        assert!(has_pool(&map, name), "pool {name} lost");
    }
}
