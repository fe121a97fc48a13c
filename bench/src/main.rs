//! `idemgate-bench`: the figures idemgate's claims about its cost rest on.
//!
//! # Layout
//!
//! - `e2e`: the end-to-end bench (`idemgate-bench e2e`, run by
//!   `scripts/bench.sh`): an Apache Kafka broker and a redis-server of its own, the
//!   worker as child processes in every mode, a per-record baseline;
//!   writes BENCHMARKS.md and BENCHMARKS.json.
//! - `claims`: the claims bench (`idemgate-bench claims`): fingerprints per
//!   second, claim batches per backend, round trips, bytes per key; writes
//!   BENCHMARKS-claims.md.
//! - `proxy`: counts Redis round trips on the wire, for both.
//! - `pg_server`: a PostgreSQL server of the bench's own, for the e2e
//!   bench's PostgreSQL runs and the soak's `--store postgres`.
//! - `soak`: the fault soak (`idemgate-bench soak`, run by
//!   `scripts/soak.sh`): three replicas, a mixed workload, replicas killed
//!   and terminated, Redis frozen and restarted, the broker restarted, in
//!   both guarantees; writes SOAK.md and SOAK.json.

mod alloc;
mod claims;
mod e2e;
mod pg_server;
mod proxy;
mod soak;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "idemgate-bench", about = "idemgate's benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// End to end against an Apache Kafka broker and a redis-server of its own:
    /// writes BENCHMARKS.md and BENCHMARKS.json.
    E2e(Box<e2e::BenchArgs>),
    /// Fingerprints/s, claim batches per backend, round trips and bytes
    /// per key against the test services' Redis servers.
    Claims {
        /// Tiny sizes: every figure computed and checked, none meaningful.
        #[arg(long)]
        smoke: bool,
        /// Run one section only: `fingerprints` (needs no Redis server;
        /// times the fast path and the reference side by side), `live`
        /// (bytes and server CPU per live tier-1 claim in each layout, on
        /// scratch servers of its own and the test cluster), `runs` (what a
        /// commit's record of finished runs costs on each backend), or `postgres`
        /// (bytes per claim of a PostgreSQL claims table over generations,
        /// fresh and settled by done flags, on a PostgreSQL server of the
        /// bench's own).
        #[arg(long, value_parser = ["fingerprints", "live", "runs", "postgres"])]
        only: Option<String>,
    },
    /// One of the e2e bench's child processes (started by the bench).
    #[command(hide = true)]
    Replica { spec: PathBuf },
    /// The fault soak: writes SOAK.md and SOAK.json; fails if a
    /// must-be-zero figure is not, or if the run does not drain in time.
    Soak(Box<soak::SoakArgs>),
    /// One replica of the soak: exactly `idemgate run --config F`.
    #[command(hide = true)]
    SoakReplica {
        #[arg(long)]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("idemgate-bench: no tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match Cli::parse().command {
            Command::E2e(args) => e2e::run(*args).await,
            Command::Replica { spec } => e2e::replica(&spec).await,
            Command::Soak(args) => soak::run(*args).await,
            Command::SoakReplica { config } => soak::replica(&config).await,
            Command::Claims { smoke, only } => match claims::run(!smoke, only.as_deref()).await? {
                true => Ok(()),
                false => anyhow::bail!("some figures were NOT measured (see above)"),
            },
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("idemgate-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs on stderr (the replicas' go to their log files) exactly as
/// `idemgate run` writes them by default: text, `info` unless `RUST_LOG`
/// says otherwise, colour only on a terminal.
fn tracing_init() {
    idemgate::logging::init(idemgate::logging::LogFormat::Text);
}
