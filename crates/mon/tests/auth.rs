//! Entities, capabilities and key release: a read-only client reads but cannot change, a
//! removed entity is refused, an OSD gets its store key only over a secure link, the map is
//! served by epoch as it changes, and all of it survives a monitor restart.

mod common;

use std::time::Duration;

use map::auth::Caps;
use map::placement::OsdId;
use messenger::message::{Command, MonReply, MonRequest};
use messenger::{Mode, MonError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_are_enforced_and_store_keys_reach_only_their_osd() {
    let mut harness = common::Harness::start(1).await;
    let admin = harness.admin();

    let added = admin
        .command(Command::AuthAdd {
            entity: "client.ro".into(),
            caps: Caps::parse("mon=r").expect("caps"),
        })
        .await;
    let Ok(MonReply::Keyring { pem: ro_pem, .. }) = added else {
        panic!("{added:?}");
    };
    let readonly = harness.client("client.ro", &ro_pem, vec![Mode::Secure]);
    readonly
        .map()
        .await
        .expect("a read-only client reads the map");
    let denied = readonly.command(common::pool("nope")).await;
    assert!(matches!(denied, Err(MonError::Denied(_))), "{denied:?}");
    let again = admin
        .command(Command::AuthAdd {
            entity: "client.ro".into(),
            caps: Caps::admin(),
        })
        .await;
    assert!(
        matches!(again, Err(MonError::Failed(ref m)) if m.contains("already exists")),
        "{again:?}"
    );
    let mon_entity = admin
        .command(Command::AuthAdd {
            entity: "mon.z".into(),
            caps: Caps::admin(),
        })
        .await;
    assert!(
        matches!(mon_entity, Err(MonError::Failed(_))),
        "{mon_entity:?}"
    );

    let created = admin
        .command(Command::OsdCreate {
            host: "host-a".into(),
            weight: map::cluster::WEIGHT_ONE,
        })
        .await;
    let Ok(MonReply::OsdCreated { id, pem: osd_pem }) = created else {
        panic!("{created:?}");
    };
    assert_eq!(id, OsdId(0));
    let osd = harness.client("osd.0", &osd_pem, vec![Mode::Secure]);
    let Ok(MonReply::StoreKek(kek)) = osd.call(&MonRequest::GetStoreKek).await else {
        panic!("the OSD gets its store key");
    };
    assert_eq!(kek.len(), 32);
    let osd_crc = harness.client("osd.0", &osd_pem, vec![Mode::Crc]);
    let over_crc = osd_crc.call(&MonRequest::GetStoreKek).await;
    assert!(
        matches!(over_crc, Ok(MonReply::Denied(ref m)) if m.contains("secure")),
        "{over_crc:?}"
    );
    let by_admin = admin.call(&MonRequest::GetStoreKek).await;
    assert!(matches!(by_admin, Ok(MonReply::Denied(_))), "{by_admin:?}");
    let by_reader = readonly.call(&MonRequest::GetStoreKek).await;
    assert!(
        matches!(by_reader, Ok(MonReply::Denied(_))),
        "{by_reader:?}"
    );

    let booted = osd
        .command(Command::OsdBoot {
            addr: "127.0.0.1:6800".into(),
        })
        .await;
    assert!(matches!(booted, Ok(MonReply::Done { .. })), "{booted:?}");
    let fake_boot = admin.command(Command::OsdBoot { addr: "x".into() }).await;
    assert!(
        matches!(fake_boot, Err(MonError::Denied(_))),
        "{fake_boot:?}"
    );

    // A subscriber waiting on the current epoch hears of the next change at once.
    let epoch = admin.map().await.expect("map").epoch;
    let subscriber = tokio::spawn(async move { readonly.map_after(epoch).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    admin
        .command(common::pool("watched"))
        .await
        .expect("create pool");
    let seen = tokio::time::timeout(Duration::from_secs(5), subscriber)
        .await
        .expect("the subscriber is answered when the map changes, not at its timeout")
        .expect("task")
        .expect("map");
    assert_eq!(seen.epoch, epoch + 1);
    assert!(seen.pool_by_name("watched").is_some());

    let removed = admin
        .command(Command::AuthRemove {
            entity: "client.ro".into(),
        })
        .await;
    assert!(matches!(removed, Ok(MonReply::Done { .. })), "{removed:?}");
    let gone = harness.client("client.ro", &ro_pem, vec![Mode::Secure]);
    let refused = gone.map().await;
    assert!(
        matches!(refused, Err(MonError::Denied(ref m)) if m.contains("not a known entity")),
        "{refused:?}"
    );

    harness.stop(0).await;
    harness.restart(0).await;
    let map = admin.map().await.expect("map after restart");
    assert!(map.pool_by_name("watched").is_some());
    assert_eq!(map.osds.get(&OsdId(0)).map(|o| o.up), Some(true));
    let again = osd.call(&MonRequest::GetStoreKek).await;
    assert!(
        matches!(again, Ok(MonReply::StoreKek(ref k)) if *k == kek),
        "the key survives a restart"
    );
    let still_gone = harness
        .client("client.ro", &ro_pem, vec![Mode::Secure])
        .map()
        .await;
    assert!(matches!(still_gone, Err(MonError::Denied(_))));
}
