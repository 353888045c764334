//! A write load for failure tests: writers putting numbered objects whose contents follow
//! from their number, and the check that every acknowledged one reads back as written.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::LocalCluster;

/// The objects whose put was acknowledged: name → (number, when).
type Acked = Arc<Mutex<BTreeMap<String, (u64, Instant)>>>;

/// Object `n`'s contents: 1 to 64 KiB, different for each `n`.
pub fn content(n: u64) -> Bytes {
    let len = 1 + (n * 7919 % 65_536) as usize;
    Bytes::from((0..len).map(|i| (i as u64 ^ n) as u8).collect::<Vec<u8>>())
}

/// Kills `osd` with SIGKILL under `writers` writers putting objects `obj-N` to `pool`,
/// waits until the monitors mark it down (`up` OSDs left), lets the writers go on for 2 s
/// more, and stops them: what they had acknowledged, some of it after the kill. A put that
/// fails fails the test.
pub fn kill_under_writers(
    cluster: &mut LocalCluster,
    runtime: &tokio::runtime::Runtime,
    pool: &client::Pool,
    writers: u64,
    osd: u32,
    up: u64,
) -> BTreeMap<String, (u64, Instant)> {
    kill_under_writers_of(cluster, runtime, pool, (writers, None), osd, up)
}

/// [`kill_under_writers`], with the writers' objects `obj-N` taken modulo `names` if
/// given (a multiple of `writers`, so each object has one writer): each writer rewrites
/// its objects in turn, and the load stays within a small store however fast it goes.
pub fn kill_under_writers_of(
    cluster: &mut LocalCluster,
    runtime: &tokio::runtime::Runtime,
    pool: &client::Pool,
    (writers, names): (u64, Option<u64>),
    osd: u32,
    up: u64,
) -> BTreeMap<String, (u64, Instant)> {
    assert!(
        names.is_none_or(|names| names % writers == 0),
        "each object has one writer"
    );
    let writes = pool.clone();
    kill_under_load(cluster, runtime, writers, osd, up, move |n| {
        let pool = writes.clone();
        async move {
            let name = format!("obj-{}", names.map_or(n, |names| n % names));
            pool.put(&name, content(n)).await.expect("put must succeed");
            name
        }
    })
}

/// Kills `osd` with SIGKILL under `writers` writers, each making write after write with
/// `write(n)` (writer w's n are w, w + writers, w + 2 writers, ...: each n once), which
/// returns the name it wrote once acknowledged; waits until the monitors mark the OSD down
/// (`up` OSDs left), lets the writers go on for 2 s more, and stops them: the last number
/// acknowledged for each name, and when, some of them after the kill.
pub fn kill_under_load<F, W>(
    cluster: &mut LocalCluster,
    runtime: &tokio::runtime::Runtime,
    writers: u64,
    osd: u32,
    up: u64,
    write: W,
) -> BTreeMap<String, (u64, Instant)>
where
    W: Fn(u64) -> F + Clone + Send + 'static,
    F: std::future::Future<Output = String> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Acked = Arc::new(Mutex::new(BTreeMap::new()));
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (write, stop, acked) = (write.clone(), stop.clone(), acked.clone());
            runtime.spawn(async move {
                let mut n = w;
                while !stop.load(Ordering::Relaxed) {
                    let name = write(n).await;
                    acked
                        .lock()
                        .expect("acked")
                        .insert(name, (n, Instant::now()));
                    n += writers;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let killed_at = Instant::now();
    cluster.kill(osd, libc::SIGKILL);
    cluster.wait_for(
        &format!("osd.{osd} marked down"),
        Duration::from_secs(30),
        |s| s["osds"]["up"].as_u64() == Some(up),
    );
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        runtime.block_on(task).expect("writer");
    }
    let acked = acked.lock().expect("acked").clone();
    let after_kill = acked.values().filter(|(_, at)| *at > killed_at).count();
    assert!(after_kill > 0, "writes must go on with osd.{osd} down");
    acked
}

/// Every acknowledged object reads back as it was written.
pub async fn check_all(pool: &client::Pool, acked: &BTreeMap<String, (u64, Instant)>) {
    for (name, (n, _)) in acked {
        let got = pool.get(name).await.expect("acknowledged object readable");
        assert!(
            got == content(*n),
            "{name} differs from what was acknowledged"
        );
    }
}

/// Puts `during-outage` (with object 999's contents), which must not be acknowledged
/// within 3 s: `unacked` says what it cannot be acknowledged with. The put's task, to
/// join once the cluster can take the write.
pub fn paused_put(
    runtime: &tokio::runtime::Runtime,
    pool: &client::Pool,
    unacked: &str,
) -> tokio::task::JoinHandle<Result<(), client::Error>> {
    let paused = {
        let pool = pool.clone();
        runtime.spawn(async move { pool.put("during-outage", content(999)).await })
    };
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(
        !paused.is_finished(),
        "a write must not be acknowledged {unacked}"
    );
    paused
}
