//! The bench's child processes, one per worker replica (and one for the
//! passthrough and one for the per-record baseline), so each one's CPU time
//! is its own (`/proc/<pid>/stat`).
//!
//! A clean worker replica is exactly `idemgate run`:
//! `idemgate::app::run_with_store` on the plain `idemgate::app::open_store`
//! store, connected straight to redis-server, with the Prometheus recorder
//! the product's /metrics listener installs itself. Nothing of the bench is
//! in its path; the harness reads its /metrics.
//!
//! A counting replica is the same worker with its Redis connection through
//! the round-trip proxy (in the config), its store wrapped in the counting
//! decorator and its recorder (the product's, with the product's buckets)
//! tapped by the timeline: it tells round trips, commands, store rounds and
//! the phases of a round, never a mode's throughput.
//!
//! The protocol with the harness is line-based: the child prints
//! `connected` once its store (or clients) are ready, waits for `go` on
//! stdin (so every replica starts together and the counters can be read
//! before any batch), runs until `stop` (or stdin closes), then prints
//! `report <json>` and exits.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};

use super::baseline::{self, BaselineReport, BaselineSpec};
use super::passthrough::{self, PassthroughReport, PassthroughSpec};
use super::timeline::{self, Event, TimelineReport};
use idemgate::config::Config;
use idemgate_testkit::counting::{Call, CountingStore, StoreTally};

#[derive(Serialize, Deserialize)]
pub(crate) enum Role {
    /// A clean worker replica: the TOML config it runs.
    Worker {
        config: String,
    },
    /// A counting worker replica: the TOML config (its store URL the
    /// proxy's).
    Counting {
        config: String,
    },
    Passthrough(PassthroughSpec),
    Baseline(BaselineSpec),
}

#[derive(Serialize, Deserialize)]
pub(crate) enum Report {
    /// A clean replica reports nothing: the harness scraped its /metrics.
    Worker,
    Counting {
        tally: Box<StoreTally>,
        timeline: Box<TimelineReport>,
        /// Its recorder's exposition at the end, as /metrics would serve it.
        metrics: String,
        /// Heap allocations (Rust's; librdkafka's C code allocates with
        /// its own malloc) from `go` to `stop`.
        allocations: u64,
    },
    Passthrough(Box<PassthroughReport>),
    Baseline(BaselineReport),
}

pub(crate) const CONNECTED: &str = "connected";
pub(crate) const GO: &str = "go";
pub(crate) const STOP: &str = "stop";
pub(crate) const REPORT: &str = "report ";

/// Runs the child side of a replica from its spec file.
pub(crate) async fn run(spec: &Path) -> Result<()> {
    let text = std::fs::read_to_string(spec)
        .with_context(|| format!("reading replica spec {}", spec.display()))?;
    let role: Role = serde_json::from_str(&text).context("parsing replica spec")?;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let report = match role {
        Role::Worker { config } => {
            worker(&config, &mut stdin).await?;
            Report::Worker
        }
        Role::Counting { config } => {
            let (tally, metrics, allocations) = counting(&config, &mut stdin).await?;
            Report::Counting {
                tally: Box::new(tally),
                timeline: Box::new(timeline::global().report()),
                metrics,
                allocations,
            }
        }
        Role::Passthrough(spec) => {
            Report::Passthrough(Box::new(passthrough::run(&spec, &mut stdin).await?))
        }
        Role::Baseline(spec) => Report::Baseline(baseline::run(&spec, &mut stdin).await?),
    };
    println!("{REPORT}{}", serde_json::to_string(&report)?);
    Ok(())
}

/// Waits for `word` on stdin; `false` if stdin closed first.
pub(crate) async fn wait_for(stdin: &mut Lines<BufReader<Stdin>>, word: &str) -> Result<bool> {
    while let Some(line) = stdin.next_line().await? {
        if line.trim() == word {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `idemgate run` on the plain store, until `stop` or SIGTERM (the
/// handover run's signal: `idemgate run`'s own shutdown).
async fn worker(config: &str, stdin: &mut Lines<BufReader<Stdin>>) -> Result<()> {
    let config = Config::parse(config).context("the replica's config")?;
    let store = idemgate::app::open_store(&config).await?;
    println!("{CONNECTED}");
    if !wait_for(stdin, GO).await? {
        bail!("the harness went away before go");
    }
    let stop = async {
        tokio::select! {
            _ = wait_for(stdin, STOP) => {}
            _ = idemgate::app::shutdown_signal() => {}
        }
    };
    idemgate::app::run_with_store(&config, store, stop).await
}

/// The same worker on the counting store with the tapped recorder, its
/// heap allocations counted; its tally, its recorder's exposition and the
/// allocations at the end.
async fn counting(
    config: &str,
    stdin: &mut Lines<BufReader<Stdin>>,
) -> Result<(StoreTally, String, u64)> {
    let handle = super::recorder::install()?;
    let config = Config::parse(config).context("the replica's config")?;
    let inner = idemgate::app::open_store(&config).await?;
    let store = Arc::new(
        CountingStore::new(inner).with_observer(Box::new(|call, start| {
            timeline::global().event(match (call, start) {
                (Call::Claim, true) => Event::ClaimStart,
                (Call::Claim, false) => Event::ClaimEnd,
                (Call::Settle, true) => Event::SettleStart,
                (Call::Settle, false) => Event::SettleEnd,
            })
        })),
    );
    println!("{CONNECTED}");
    if !wait_for(stdin, GO).await? {
        bail!("the harness went away before go");
    }
    let stop = async {
        let _ = wait_for(stdin, STOP).await;
    };
    use std::sync::atomic::Ordering;
    crate::alloc::ALLOCATIONS.store(0, Ordering::SeqCst);
    crate::alloc::COUNTING.store(true, Ordering::SeqCst);
    let run = idemgate::app::run_with_store(&config, store.clone(), stop).await;
    crate::alloc::COUNTING.store(false, Ordering::SeqCst);
    run?;
    let allocations = crate::alloc::ALLOCATIONS.load(Ordering::SeqCst);
    Ok((store.tally(), handle.render(), allocations))
}
