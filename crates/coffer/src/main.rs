//! `coffer`: the one binary: the daemons (`coffer mon`, `coffer osd`, `coffer mds`), a whole
//! local cluster (`coffer up`), the operator's commands, file system mounts and the
//! benchmarks.

#![deny(clippy::unwrap_used)]

mod admin;
mod bench;
mod daemon;
mod dashboard;
mod files;
mod gw;
mod image;
mod init;
mod memcpy;
mod progress;
mod prometheus;
mod scrape;
mod supervise;
mod text;
mod transfer;
mod up;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Every daemon allocates and frees per request (frames, transactions, redb's pages); glibc's
/// malloc and free took about a tenth of a cluster's CPU under 4 KiB writes
/// (docs/benchmarks.md, "The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "coffer",
    version,
    about = "Coffer: encrypted distributed storage"
)]
struct Cli {
    /// The cluster's configuration file (default: $COFFER_CONF, else
    /// /var/tmp/coffer/coffer.toml).
    #[arg(long, global = true)]
    conf: Option<PathBuf>,
    /// Who the command runs as.
    #[arg(
        id = "run_as",
        long = "name",
        global = true,
        default_value = "client.admin"
    )]
    name: String,
    /// The keyring of --name (default: beside the configuration file).
    #[arg(long, global = true)]
    keyring: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a whole cluster on this machine (one monitor, N OSDs) in the foreground; creates
    /// it the first time, resumes it after.
    Up(up::UpArgs),
    /// Makes a new cluster's configuration and keys for monitors on several hosts, to copy
    /// to them (docs/deploy.md); `coffer up` does this itself on one machine.
    Init(init::InitArgs),
    /// Health, monitors, OSDs, placement groups by state, usage.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Space: the OSDs' raw use, and each pool's objects, stored bytes, use and room.
    Df {
        #[arg(long)]
        json: bool,
    },
    /// Waits for the cluster: `coffer wait clean` returns once every PG is active+clean.
    #[command(subcommand)]
    Wait(WaitCommand),
    /// `coffer osd --id N` runs OSD N (coffer up starts these); `coffer osd ls|in|out`
    /// manage them.
    #[command(args_conflicts_with_subcommands = true)]
    Osd(OsdArgs),
    /// Pools: create, ls, scrub, rotate-key, rm.
    #[command(subcommand)]
    Pool(admin::PoolCommand),
    /// Objects: put, get, rm, ls, stat.
    #[command(subcommand)]
    Obj(admin::ObjCommand),
    /// Entities, their keys and capabilities.
    #[command(subcommand)]
    Auth(admin::AuthCommand),
    /// Block images: create, ls, info, du, resize, rm, lock break.
    #[command(subcommand)]
    Image(image::ImageCommand),
    /// Exports an image over NBD.
    #[command(subcommand)]
    Nbd(image::NbdCommand),
    /// Runs the S3 gateway (coffer up starts one), or collects its garbage (gc).
    Gw(gw::GwCli),
    /// Users of the S3 gateway: create (prints their keys), ls, rm.
    User(gw::UserCli),
    /// Accounts of the S3 gateway, as IAM's: create (prints the root's keys), ls, rm.
    Account(gw::AccountCli),
    /// The monitors' KMS: keys for the gateway's server-side encryption.
    #[command(subcommand)]
    Kms(gw::KmsCommand),
    /// Client instances whose writes the OSDs refuse (fenced writers).
    #[command(subcommand)]
    Blocklist(admin::BlocklistCommand),
    /// File systems: create, ls, status, rm, authorize.
    #[command(subcommand)]
    Fs(files::FsCommand),
    /// Mounts a file system with FUSE (unmount with umount or fusermount -u).
    Mount(files::MountArgs),
    /// Runs a metadata daemon, which serves every file system (coffer up starts one).
    Mds(files::MdsArgs),
    /// Runs a monitor daemon (coffer up starts these).
    Mon(daemon::MonArgs),
    /// The web dashboard: serve (coffer up runs it), and its users (user add, ls, rm).
    Dashboard(dashboard::DashboardCli),
    /// The daemons a running `coffer up` looks after: ls, restart, stop, start.
    #[command(subcommand)]
    Daemon(supervise::DaemonCommand),
    /// Measure Coffer itself; every figure is printed with the command and configuration.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

#[derive(clap::Subcommand)]
enum WaitCommand {
    /// Until every placement group is active+clean (recovery done), with its progress.
    Clean {
        /// Give up after this many seconds, saying what is left.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
}

#[derive(clap::Args)]
struct OsdArgs {
    #[command(flatten)]
    daemon: Option<daemon::OsdArgs>,
    #[command(subcommand)]
    command: Option<admin::OsdCommand>,
}

/// Logs go to standard error; COFFER_LOG sets the level (error, warn, info, debug, trace).
fn init_logging(default: tracing::Level) {
    let level = std::env::var("COFFER_LOG")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(default);
    // openraft narrates every election at info; its warnings are what an operator needs.
    // s3s logs every refused S3 request as an error: those are the clients' errors, and the
    // gateway logs its own failures; below debug, s3s stays quiet.
    let s3s = if level >= tracing::Level::DEBUG {
        tracing_subscriber::filter::LevelFilter::from_level(level)
    } else {
        tracing_subscriber::filter::LevelFilter::OFF
    };
    let filter = tracing_subscriber::filter::Targets::new()
        .with_default(level)
        .with_target("openraft", level.min(tracing::Level::WARN))
        .with_target("s3s", s3s);
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false),
        )
        .init();
}

fn main() -> ExitCode {
    memcpy::start();
    let cli = Cli::parse();
    let who = admin::Who {
        conf: cli.conf.clone(),
        name: cli.name.clone(),
        keyring: cli.keyring.clone(),
    };
    let daemon_conf = || client::Conf::locate(cli.conf.as_deref());
    let result = match cli.command {
        Command::Mon(args) => {
            init_logging(tracing::Level::INFO);
            daemon::run_mon(&daemon_conf(), args)
        }
        Command::Osd(OsdArgs {
            daemon: Some(args),
            command: None,
        }) => {
            init_logging(tracing::Level::INFO);
            daemon::run_osd(&daemon_conf(), args)
        }
        Command::Nbd(command) => {
            init_logging(tracing::Level::INFO);
            image::nbd(&who, command)
        }
        Command::Mds(args) => {
            init_logging(tracing::Level::INFO);
            files::run_mds(&daemon_conf(), args)
        }
        Command::Dashboard(cli) => {
            init_logging(tracing::Level::INFO);
            dashboard::command(&who, cli)
        }
        Command::Mount(args) if args.foreground => {
            init_logging(tracing::Level::INFO);
            files::mount(&who, args)
        }
        Command::Gw(gw::GwCli {
            serve,
            command: None,
        }) => {
            init_logging(tracing::Level::INFO);
            gw::serve(&who, serve)
        }
        command => {
            init_logging(tracing::Level::WARN);
            match command {
                Command::Up(args) => up::run(args),
                Command::Init(args) => init::run(args),
                Command::Status { json } => admin::status(&who, json),
                Command::Df { json } => admin::df(&who, json),
                Command::Wait(WaitCommand::Clean { timeout }) => {
                    admin::wait_clean(&who, std::time::Duration::from_secs(timeout))
                }
                Command::Osd(OsdArgs {
                    command: Some(command),
                    ..
                }) => admin::osd(&who, command),
                Command::Osd(_) => Err("coffer osd: give --id N to run an OSD, or a command \
                     (ls, in, out); see coffer osd --help"
                    .into()),
                Command::Pool(command) => admin::pool(&who, command),
                Command::Obj(command) => admin::obj(&who, command),
                Command::Auth(command) => admin::auth(&who, command),
                Command::Image(command) => image::image(&who, command),
                Command::Blocklist(command) => admin::blocklist(&who, command),
                Command::Fs(command) => files::command(&who, command),
                Command::Mount(args) => files::mount(&who, args),
                Command::User(command) => gw::user(&who, command),
                Command::Account(command) => gw::account(&who, command),
                Command::Kms(command) => gw::kms(&who, command),
                Command::Gw(gw::GwCli {
                    command: Some(command),
                    ..
                }) => gw::command(&who, command),
                Command::Bench(command) => bench::run(command),
                Command::Daemon(command) => supervise::command(&daemon_conf(), command),
                Command::Mon(_)
                | Command::Nbd(_)
                | Command::Gw(_)
                | Command::Mds(_)
                | Command::Dashboard(_) => {
                    unreachable!("matched above")
                }
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            daemon::tell(&format!("coffer: {message}"));
            ExitCode::FAILURE
        }
    }
}
