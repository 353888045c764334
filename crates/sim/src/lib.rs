//! Coffer's deterministic simulator (issue #32). It runs the OSD's own code (the service,
//! replication, peering, recovery and scrub of `osd::Node`) for several OSDs on real stores,
//! on one thread under tokio's paused clock, with a simulated network ([`net`]) and a
//! monitor kept by the run ([`world`]); clients write, a nemesis crashes OSDs and cuts them
//! off, then every fault heals and the run checks what the clients were told ([`oracle`]).
//! A seed decides every choice, so a failing seed replays exactly:
//! `scripts/sim --seed N`.
//!
//! Never a dependency of a shipped crate (checked by scripts/check-deps.py).

#[cfg(not(tokio_unstable))]
compile_error!(
    "the simulator seeds tokio's runtime, which needs `--cfg tokio_unstable`: \
     .cargo/config.toml sets it, unless RUSTFLAGS overrides it"
);

pub mod net;
pub mod oracle;
pub mod world;

use std::future::Future;
use std::sync::{Arc, Mutex, Once};
use std::thread::ThreadId;

pub use world::{Config, Report, World};

/// Panics of any task, by the thread it ran on: a task's panic is caught by tokio and
/// would otherwise pass unseen, and every simulated task runs on the thread of its run.
static PANICS: Mutex<Vec<(ThreadId, String)>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

/// A simulation's locks are never held across a panic that matters: a poisoned one is
/// used as it is.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn note_panics() {
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let mut panics = lock(&PANICS);
            panics.push((std::thread::current().id(), info.to_string()));
            drop(panics);
            default(info);
        }));
    });
}

fn panics_here() -> Vec<String> {
    let me = std::thread::current().id();
    let mut panics = lock(&PANICS);
    let (here, others) = std::mem::take(&mut *panics)
        .into_iter()
        .partition(|(t, _)| *t == me);
    *panics = others;
    here.into_iter().map(|(_, what)| what).collect()
}

/// Runs one seed of the workload ([`world::workload`]) on this thread; the report, or what
/// broke, with the seed and how to replay it.
pub fn run(seed: u64, config: &Config) -> Result<Report, String> {
    simulate(seed, config, |world| world::workload(world, config))
        .map_err(|failure| format!("{failure}\n  replay: scripts/sim --seed {seed}"))
}

/// Runs `script` on a new cluster of `config` on this thread, seeded by `seed`, its stores
/// in a scratch directory removed afterwards (under /dev/shm where there is one: the runs
/// sync every write); what the script returns, or what broke, with the seed.
pub fn simulate<T, F, Fut>(seed: u64, config: &Config, script: F) -> Result<T, String>
where
    F: FnOnce(Arc<World>) -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    note_panics();
    panics_here();
    let scratch = tempfile::Builder::new()
        .prefix("coffer-sim-")
        .tempdir_in(scratch_root())
        .map_err(|e| format!("scratch directory: {e}"))?;
    // tokio draws from its own generator to order a watch channel's waiters and to pick a
    // select! branch: seeded too, or a seed would not replay (.cargo/config.toml enables the
    // unstable API this needs).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()))
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let outcome = runtime.block_on(async {
        let world = World::start(seed, config, scratch.path())?;
        let outcome = script(world.clone()).await;
        world.stop().await;
        outcome
    });
    drop(runtime);
    let panics = panics_here();
    match (outcome, panics.is_empty()) {
        (Ok(value), true) => Ok(value),
        (outcome, _) => {
            let mut why: Vec<String> = panics
                .into_iter()
                .map(|p| format!("a task panicked: {p}"))
                .collect();
            if let Err(e) = outcome {
                why.insert(0, e);
            }
            Err(format!("seed {seed} failed: {}", why.join("; ")))
        }
    }
}

fn scratch_root() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}
