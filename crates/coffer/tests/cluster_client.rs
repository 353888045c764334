//! The client library against a real cluster: range reads and writes, truncate, attributes,
//! omap, exclusive create; and at the protocol level, a retried write takes effect once and
//! malformed or misdirected requests get clear errors without harming the OSD.

mod common;

use bytes::Bytes;
use client::Error;
use common::{serial, LocalCluster};
use messenger::message::{ObjectOp, OsdReply, OsdRequest, ReqId};
use messenger::{Endpoint, EntityName, Limits};

#[test]
fn object_operations_through_the_library() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("data").await.expect("pool");
        pool.write("r", 0, Bytes::from_static(b"hello world"))
            .await
            .expect("write");
        pool.write("r", 6, Bytes::from_static(b"WORLD"))
            .await
            .expect("write");
        assert_eq!(
            &pool.read("r", 0, 100).await.expect("read")[..],
            b"hello WORLD"
        );
        assert_eq!(&pool.read("r", 3, 4).await.expect("read")[..], b"lo W");
        pool.truncate("r", 5).await.expect("truncate");
        assert_eq!(&pool.get("r").await.expect("get")[..], b"hello");
        assert_eq!(pool.stat("r").await.expect("stat").size, 5);

        pool.set_attr("r", "color", b"blue")
            .await
            .expect("set attr");
        let attrs = pool.attrs("r").await.expect("attrs");
        assert_eq!(attrs.len(), 1, "internal attributes stay hidden: {attrs:?}");
        assert_eq!(attrs.get("color").map(Vec::as_slice), Some(&b"blue"[..]));
        let reserved = pool.set_attr("r", ".v", b"x").await;
        assert!(
            matches!(reserved, Err(Error::Failed(ref why)) if why.contains("reserved")),
            "{reserved:?}"
        );
        pool.remove_attr("r", "color").await.expect("remove attr");
        assert!(pool.attrs("r").await.expect("attrs").is_empty());

        let entries = vec![
            (b"k1".to_vec(), b"v1".to_vec()),
            (b"k2".to_vec(), b"v2".to_vec()),
        ];
        pool.omap_set("r", entries.clone()).await.expect("omap set");
        let found = pool
            .omap_get("r", vec![b"k1".to_vec(), b"k3".to_vec()])
            .await
            .expect("omap get");
        assert_eq!(
            found,
            vec![
                (b"k1".to_vec(), Some(b"v1".to_vec())),
                (b"k3".to_vec(), None)
            ]
        );
        assert_eq!(
            pool.omap_list("r", None, 10).await.expect("omap list"),
            (entries.clone(), false)
        );
        pool.omap_remove("r", vec![b"k1".to_vec()])
            .await
            .expect("omap remove");
        assert_eq!(
            pool.omap_list("r", None, 10).await.expect("omap list"),
            (entries[1..].to_vec(), false)
        );

        assert!(matches!(pool.create("r", true).await, Err(Error::Exists)));
        pool.remove("r").await.expect("remove");
        assert!(matches!(pool.stat("r").await, Err(Error::NotFound)));
        assert!(matches!(pool.remove("r").await, Err(Error::NotFound)));
        assert!(matches!(
            admin.pool("nosuch").await,
            Err(Error::NoSuchPool(_))
        ));
    });
}

/// Writes queued in a PG are applied as one store transaction. A write that passed the
/// OSD's own checks but not the store's (an omap key over its size, more operations than a
/// transaction takes) used to fail its group's commit: the PG went back to peering and every
/// write of the group was answered Busy, again on each retry. Each is now refused alone,
/// and the writes grouped with it are applied.
#[test]
fn a_write_the_store_would_refuse_is_refused_alone_beside_the_writes_grouped_with_it() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &[]);
    // One PG: the writes below queue in it and go as groups.
    cluster.ok(&["pool", "create", "one", "--pg-num", "1"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("one").await.expect("pool");
        let key_over_the_limit = vec![(vec![b'k'; store::OMAP_KEY_BYTES_MAX + 1], b"v".to_vec())];
        let too_many_keys: Vec<_> = (0..store::TRANSACTION_OPS_MAX / 2 + 1)
            .map(|n: usize| (n.to_be_bytes().to_vec(), b"v".to_vec()))
            .collect();
        for (round, (bad, why)) in [
            (&key_over_the_limit, "omap keys"),
            (&too_many_keys, "store operations"),
        ]
        .into_iter()
        .cycle()
        .take(4)
        .enumerate()
        {
            let good = (0..12).map(|i| {
                let pool = pool.clone();
                async move {
                    let name = format!("good-{round}-{i}");
                    pool.omap_set(&name, vec![(b"k".to_vec(), b"v".to_vec())])
                        .await
                        .map(|()| name)
                }
            });
            let bad_name = format!("bad-{round}");
            let bad = pool.omap_set(&bad_name, bad.clone());
            let (good, bad) = futures::join!(futures::future::join_all(good), bad);
            assert!(
                matches!(bad, Err(Error::Failed(ref reason)) if reason.contains(why)),
                "{bad:?}"
            );
            for name in good {
                let name = name.expect("a write grouped with the refused one");
                let found = pool.omap_get(&name, vec![b"k".to_vec()]).await;
                assert_eq!(
                    found.expect("omap get"),
                    vec![(b"k".to_vec(), Some(b"v".to_vec()))]
                );
            }
            assert!(matches!(pool.stat(&bad_name).await, Err(Error::NotFound)));
        }
    });
    let groups = cluster.osds_counter("coffer_osd_write_groups_total");
    let grouped = cluster.osds_counter("coffer_osd_write_group_writes_total");
    assert!(
        grouped > groups,
        "{grouped} writes in {groups} groups: thirteen writers on one PG make a group of several"
    );
    let sent = cluster.osds_counter("coffer_osd_replication_duration_seconds_count");
    let applied = cluster.osds_counter("coffer_osd_replica_duration_seconds_count");
    assert!(
        sent > 0.0 && sent == applied,
        "{sent} groups answered by replicas, {applied} applied by them: each is timed on both sides"
    );
}

/// Many writers committing to one object's omap, as S3 PUTs commit to their bucket's
/// index: each a compare-and-swap of its own key. Those that judge no key another changes
/// share a group, so the index takes them several at a time; two racing on one key never
/// do, so exactly one of them wins and the other is told.
#[test]
fn racing_commits_to_one_index_share_groups_and_one_racer_per_key_wins() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &["--nbd", "none"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (groups, grouped) = runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("data").await.expect("pool");
        pool.create("index", false).await.expect("create");
        let counters = || {
            (
                cluster.osds_counter("coffer_osd_write_groups_total"),
                cluster.osds_counter("coffer_osd_write_group_writes_total"),
            )
        };
        let before = counters();
        for round in 0..4 {
            let racers = (0..32).flat_map(|k| {
                let key = format!("key-{round}-{k}").into_bytes();
                [b'x', b'y'].map(|racer| {
                    let (pool, key) = (pool.clone(), key.clone());
                    async move {
                        let ops = vec![
                            ObjectOp::AssertExists,
                            ObjectOp::AssertOmap {
                                key: key.clone(),
                                value: None,
                            },
                            ObjectOp::OmapSet {
                                entries: vec![(key, vec![racer])],
                            },
                        ];
                        pool.operate("index", ops, Bytes::new())
                            .await
                            .map(|_| racer)
                    }
                })
            });
            let answers = futures::future::join_all(racers).await;
            for (k, pair) in answers.chunks(2).enumerate() {
                let key = format!("key-{round}-{k}").into_bytes();
                let won: Vec<u8> = pair
                    .iter()
                    .filter_map(|a| a.as_ref().ok())
                    .copied()
                    .collect();
                assert_eq!(won.len(), 1, "two racers for one key, one winner: {pair:?}");
                assert!(
                    pair.iter().any(|a| matches!(a, Err(Error::Mismatch(_)))),
                    "the loser is told: {pair:?}"
                );
                let stored = pool
                    .omap_get("index", vec![key.clone()])
                    .await
                    .expect("get");
                assert_eq!(stored, vec![(key, Some(won))]);
            }
        }
        let after = counters();
        (after.0 - before.0, after.1 - before.1)
    });
    assert!(
        grouped >= 2.0 * groups,
        "{grouped} writes in {groups} groups: 64 commits at once to one object make groups of several"
    );
}

#[test]
fn conditional_writes_apply_only_when_their_conditions_hold() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &["--nbd", "none"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("data").await.expect("pool");
        let set = |value: &[u8]| ObjectOp::SetAttr {
            name: "owner".into(),
            value: value.to_vec(),
        };
        let expect = |value: Option<&[u8]>| ObjectOp::AssertAttr {
            name: "owner".into(),
            value: value.map(<[u8]>::to_vec),
        };
        // A condition on a missing object: nothing is created.
        let missing = pool
            .operate("c", vec![ObjectOp::AssertExists, set(b"a")], Bytes::new())
            .await;
        assert!(matches!(missing, Err(Error::NotFound)), "{missing:?}");
        assert!(matches!(pool.stat("c").await, Err(Error::NotFound)));

        // Compare and swap: the first taker wins, the second is told, nothing changes.
        pool.create("c", false).await.expect("create");
        pool.operate("c", vec![expect(None), set(b"a")], Bytes::new())
            .await
            .expect("take when absent");
        let lost = pool
            .operate("c", vec![expect(None), set(b"b")], Bytes::new())
            .await;
        assert!(matches!(lost, Err(Error::Mismatch(_))), "{lost:?}");
        let attrs = pool.attrs("c").await.expect("attrs");
        assert_eq!(attrs.get("owner").map(Vec::as_slice), Some(&b"a"[..]));
        pool.operate("c", vec![expect(Some(b"a")), set(b"b")], Bytes::new())
            .await
            .expect("swap when it matches");

        // The same on one omap entry: absent, then swapped only from the value it holds.
        let put = |value: &[u8]| ObjectOp::OmapSet {
            entries: vec![(b"k".to_vec(), value.to_vec())],
        };
        let holds = |value: Option<&[u8]>| ObjectOp::AssertOmap {
            key: b"k".to_vec(),
            value: value.map(<[u8]>::to_vec),
        };
        pool.operate("c", vec![holds(None), put(b"1")], Bytes::new())
            .await
            .expect("set when absent");
        for stale in [None, Some(&b"0"[..])] {
            let lost = pool
                .operate("c", vec![holds(stale), put(b"2")], Bytes::new())
                .await;
            assert!(matches!(lost, Err(Error::Mismatch(_))), "{lost:?}");
        }
        pool.operate("c", vec![holds(Some(b"1")), put(b"2")], Bytes::new())
            .await
            .expect("swap when it matches");
        let entry = pool.omap_get("c", vec![b"k".to_vec()]).await.expect("get");
        assert_eq!(entry, vec![(b"k".to_vec(), Some(b"2".to_vec()))]);

        // Conditions alone, or on Coffer's own attributes, are refused.
        let alone = pool
            .operate("c", vec![expect(Some(b"b"))], Bytes::new())
            .await;
        assert!(matches!(alone, Err(Error::Failed(_))), "{alone:?}");
        let reserved = pool
            .operate(
                "c",
                vec![
                    ObjectOp::AssertAttr {
                        name: ".v".into(),
                        value: None,
                    },
                    set(b"c"),
                ],
                Bytes::new(),
            )
            .await;
        assert!(matches!(reserved, Err(Error::Failed(_))), "{reserved:?}");

        // A blocklisted client may read but not write, until it is removed from the list.
        let fenced = cluster.admin().await;
        let fenced_pool = fenced.pool("data").await.expect("pool");
        admin.blocklist(fenced.instance()).await.expect("blocklist");
        let refused = fenced_pool.write("c", 0, Bytes::from_static(b"late")).await;
        assert!(
            matches!(refused, Err(Error::Denied(ref why)) if why.contains("blocklisted")),
            "{refused:?}"
        );
        assert_eq!(fenced_pool.stat("c").await.expect("stat").size, 0);
        pool.write("c", 0, Bytes::from_static(b"mine"))
            .await
            .expect("others still write");
        let listed = cluster.ok(&["blocklist", "ls"]);
        assert_eq!(listed.trim(), format!("{:016x}", fenced.instance()));
        cluster.ok(&["blocklist", "rm", listed.trim()]);
        fenced
            .wait_for_epoch(admin.map().epoch + 1)
            .await
            .expect("map");
        fenced_pool
            .write("c", 4, Bytes::from_static(b"back"))
            .await
            .expect("writes again once removed");
        assert_eq!(&pool.get("c").await.expect("get")[..], b"mineback");
    });
}

#[test]
fn a_retried_write_takes_effect_once_and_bad_requests_are_refused() {
    let _serial = serial();
    // Plaintext ops, spoken to the OSD directly: a pool the OSDs seal (an edge pool refuses
    // them, tests/edge_seal.rs).
    let cluster = LocalCluster::start(3, &["--seal", "osd"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let map = admin.map();
        let pool = map.pool_by_name("data").expect("pool").clone();
        let object = map::ObjectName::new("once").expect("name");
        let pg = map.pg_of(&pool, &object);
        let primary = map.acting(&pool, pg)[0];
        let addr = map.osds[&primary].addr.clone().expect("addr");
        let conf = cluster.conf();
        let name: EntityName = "client.admin".parse().expect("name");
        let identity = client::load_identity(&conf.keyring_path(&name), &name).expect("keyring");
        let endpoint = Endpoint::new(&identity, Limits::default()).expect("endpoint");
        let conn = endpoint
            .connect(
                addr.parse().expect("addr"),
                &EntityName::osd(primary.0),
                &conf.client_modes().expect("modes"),
            )
            .await
            .expect("connect");
        let create = |reqid: ReqId| OsdRequest::Op {
            pg,
            epoch: map.epoch,
            object: object.clone(),
            reqid,
            ops: vec![ObjectOp::Create { exclusive: true }],
        };
        let first = ReqId { client: 7, seq: 1 };
        let send = |request: OsdRequest| {
            let conn = conn.clone();
            async move {
                conn.request::<_, OsdReply>(&request, Bytes::new())
                    .await
                    .expect("reply")
                    .0
            }
        };
        let once = send(create(first)).await;
        assert!(matches!(once, OsdReply::Written { .. }), "{once:?}");
        // The same request again (a client retrying after a lost reply): the same answer.
        let again = send(create(first)).await;
        assert!(matches!(again, OsdReply::Written { .. }), "{again:?}");
        // A new request to create it exclusively: it exists.
        let other = send(create(ReqId { client: 7, seq: 2 })).await;
        assert!(matches!(other, OsdReply::Exists), "{other:?}");

        // An undecodable request, and an object sent to the wrong PG.
        let garbage = conn
            .call(Bytes::from_static(b"\xff\xfe not a request"), Bytes::new())
            .await
            .expect("reply");
        let garbage: OsdReply = garbage.decode().expect("decodable reply");
        assert!(
            matches!(garbage, OsdReply::Failed(ref why) if why.contains("undecodable")),
            "{garbage:?}"
        );
        let misplaced = OsdRequest::Op {
            pg: map::placement::PgId {
                pool: pool.id,
                number: (pg.number + 1) % pool.pg_num,
            },
            epoch: map.epoch,
            object: object.clone(),
            reqid: ReqId { client: 7, seq: 3 },
            ops: vec![ObjectOp::Stat],
        };
        let misplaced = send(misplaced).await;
        assert!(
            matches!(misplaced, OsdReply::Failed(_) | OsdReply::Retry { .. }),
            "{misplaced:?}"
        );
        // Write bytes that do not match the ops.
        let short = OsdRequest::Op {
            pg,
            epoch: map.epoch,
            object: object.clone(),
            reqid: ReqId { client: 7, seq: 4 },
            ops: vec![ObjectOp::Write {
                offset: 0,
                len: 100,
            }],
        };
        let short = conn
            .request::<_, OsdReply>(&short, Bytes::from_static(b"ten bytes!"))
            .await
            .expect("reply")
            .0;
        assert!(
            matches!(short, OsdReply::Failed(ref why) if why.contains("data bytes")),
            "{short:?}"
        );
        // Reads asking for more than one reply can carry are refused before any is done.
        let greedy = OsdRequest::Op {
            pg,
            epoch: map.epoch,
            object: object.clone(),
            reqid: ReqId { client: 7, seq: 5 },
            ops: vec![
                ObjectOp::Read {
                    offset: 0,
                    len: 48 << 20
                };
                2
            ],
        };
        let greedy = send(greedy).await;
        assert!(
            matches!(greedy, OsdReply::Failed(ref why) if why.contains("at most")),
            "{greedy:?}"
        );
        // The OSD still serves, and the object is as the first request left it.
        let pool_handle = admin.pool("data").await.expect("pool");
        assert_eq!(pool_handle.stat("once").await.expect("stat").size, 0);
    });
}

#[test]
fn hostile_peers_get_clear_errors_and_hurt_no_daemon() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &[]);
    cluster.ok(&["obj", "put", "data", "kept", "/etc/hostname"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let conf = cluster.conf();
        let admin = cluster.admin().await;
        let map = admin.map();
        let osd_addr: std::net::SocketAddr = map
            .osds
            .values()
            .next()
            .and_then(|o| o.addr.clone())
            .expect("osd addr")
            .parse()
            .expect("addr");
        let mon_addr = conf.mon_addrs().expect("mons")[0].addr;

        // A key from another cluster's authority, under a known entity's name.
        let stranger = messenger::ClusterCa::generate("another-cluster").expect("authority");
        let name: EntityName = "client.admin".parse().expect("name");
        let forged = stranger.issue(&name).expect("issue");
        let refused =
            client::Cluster::connect_with(&conf, &forged, std::time::Duration::from_secs(5)).await;
        let error = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            error.contains("permission denied"),
            "a foreign key must not connect: {error}"
        );

        // Garbage, a truncated handshake, and idle (too slow) connections, to OSD and monitor.
        use tokio::io::AsyncWriteExt;
        let mut idle = Vec::new();
        for addr in [osd_addr, mon_addr] {
            let mut garbage = tokio::net::TcpStream::connect(addr).await.expect("connect");
            garbage.write_all(&[0xff; 4096]).await.expect("write");
            drop(garbage);
            let mut truncated = tokio::net::TcpStream::connect(addr).await.expect("connect");
            truncated
                .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
                .await
                .expect("write");
            drop(truncated);
            for _ in 0..8 {
                idle.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
            }
        }
        // Meanwhile everyone else is served.
        let pool = admin.pool("data").await.expect("pool");
        pool.put("during", Bytes::from_static(b"served"))
            .await
            .expect("put");
        assert_eq!(
            &pool.get("kept").await.expect("get")[..],
            std::fs::read("/etc/hostname").expect("hostname")
        );
        drop(idle);
    });
    for daemon in ["mon.a", "osd.0", "osd.1", "osd.2"] {
        let pid = cluster.pid_of(daemon);
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{daemon} died"
        );
    }
    let status = cluster.status();
    assert_eq!(status["health"]["status"], "HEALTH_OK", "{status:#}");
}
