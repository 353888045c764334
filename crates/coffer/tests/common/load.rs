//! A write load for failure tests: writers putting numbered objects whose contents follow
//! from their number, and the check that every acknowledged one reads back as written.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;

/// The objects whose put was acknowledged: name → (number, when).
pub type Acked = Arc<Mutex<BTreeMap<String, (u64, Instant)>>>;

/// Object `n`'s contents: 1 to 64 KiB, different for each `n`.
pub fn content(n: u64) -> Bytes {
    let len = 1 + (n * 7919 % 65_536) as usize;
    Bytes::from((0..len).map(|i| (i as u64 ^ n) as u8).collect::<Vec<u8>>())
}

/// `writers` writers putting objects `obj-N` until `stop`, noting each acknowledged put in
/// `acked`; a put that fails fails the test.
pub fn start_writers(
    runtime: &tokio::runtime::Runtime,
    pool: client::Pool,
    writers: u64,
    stop: Arc<AtomicBool>,
    acked: Acked,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..writers)
        .map(|w| {
            let pool = pool.clone();
            let stop = stop.clone();
            let acked = acked.clone();
            runtime.spawn(async move {
                let mut n = w;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("obj-{n}");
                    pool.put(&name, content(n)).await.expect("put must succeed");
                    acked
                        .lock()
                        .expect("acked")
                        .insert(name, (n, Instant::now()));
                    n += writers;
                }
            })
        })
        .collect()
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
