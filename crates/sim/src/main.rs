//! `coffer-sim`: runs seeds of the simulator and prints one line per seed; exits non-zero on
//! the first failing seed, which `--seed N` replays exactly.

use clap::Parser;

#[derive(Parser)]
#[command(about = "Runs Coffer's OSDs under the deterministic simulator")]
struct Args {
    /// Replay this one seed.
    #[arg(long, conflicts_with_all = ["seeds", "from"])]
    seed: Option<u64>,
    /// How many seeds to run, from --from.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Run without the nemesis (no crashes, partitions, lost or slow messages).
    #[arg(long)]
    no_faults: bool,
    /// OSDs in the cluster.
    #[arg(long, default_value_t = coffer_sim::Config::default().osds)]
    osds: u32,
    /// PGs in the pool.
    #[arg(long, default_value_t = coffer_sim::Config::default().pg_num)]
    pg_num: u32,
    /// Clients, each writing its own objects.
    #[arg(long, default_value_t = coffer_sim::Config::default().clients)]
    clients: u64,
    /// Objects each client writes in turn.
    #[arg(long, default_value_t = coffer_sim::Config::default().objects_per_client)]
    objects: u64,
    /// Writes each client makes.
    #[arg(long, default_value_t = coffer_sim::Config::default().writes_per_client)]
    writes: u64,
    /// An erasure-coded pool of this code, `K+M` (for example `4+2`), rather than a
    /// replicated one (min_size k + 1, stripe unit 4 KiB).
    #[arg(long, value_parser = parse_code)]
    ec: Option<(u8, u8)>,
    /// Print the OSDs' warnings (and their info with -vv) as a replayed seed runs.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

fn parse_code(text: &str) -> Result<(u8, u8), String> {
    let profile = ec::Profile::parse(text, 4096).map_err(|e| e.to_string())?;
    let narrow = |n: usize| u8::try_from(n).map_err(|e| e.to_string());
    Ok((narrow(profile.k())?, narrow(profile.m())?))
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.verbose > 0 {
        let level = if args.verbose > 1 {
            tracing::Level::INFO
        } else {
            tracing::Level::WARN
        };
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::stderr)
            .init();
    }
    let config = coffer_sim::Config {
        osds: args.osds,
        pg_num: args.pg_num,
        clients: args.clients,
        objects_per_client: args.objects,
        writes_per_client: args.writes,
        faults: !args.no_faults,
        erasure: args.ec,
    };
    let seeds = match args.seed {
        Some(seed) => seed..seed + 1,
        None => args.from..args.from + args.seeds,
    };
    let count = seeds.end - seeds.start;
    let started = std::time::Instant::now();
    for seed in seeds {
        let took = std::time::Instant::now();
        match coffer_sim::run(seed, &config) {
            Ok(report) => println!("{report} (in {:.1} s)", took.elapsed().as_secs_f64()),
            Err(failure) => {
                eprintln!("{failure}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    println!(
        "{count} seeds passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    std::process::ExitCode::SUCCESS
}
