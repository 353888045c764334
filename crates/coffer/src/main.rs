//! `coffer`: the one binary. Today it carries the benchmark harness; the daemons (`coffer
//! mon`, `coffer osd`), `coffer up` and the front ends join it as they are built.

#![deny(clippy::unwrap_used)]

mod bench;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "coffer",
    version,
    about = "Coffer: encrypted distributed storage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure Coffer itself; every figure is printed with the command and configuration.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(command) => bench::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("coffer: {message}");
            ExitCode::FAILURE
        }
    }
}
