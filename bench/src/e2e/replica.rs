//! The bench's child processes, one per worker replica (and one for the
//! per-record baseline), so each one's CPU time is its own
//! (`/proc/<pid>/stat`).
//!
//! A worker replica is `idemgate run` (`idemgate::app::run_with_store`)
//! with the store wrapped in the counting decorator and the Prometheus
//! recorder wrapped by the timeline's tap: the same worker, /metrics
//! listener and store watcher. The protocol with the harness is
//! line-based: the child prints `connected` once its store answers, waits
//! for `go` on stdin (so every replica starts together and the round-trip
//! counter can be read before any batch), runs until `stop` (or stdin
//! closes), then prints `report <json>` and exits.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};

use super::baseline::{self, BaselineReport, BaselineSpec};
use super::timeline::{self, Event, TimelineReport};
use idemgate::config::Config;
use idemgate_testkit::counting::{Call, CountingStore, StoreTally};

#[derive(Serialize, Deserialize)]
pub(crate) enum Role {
    /// A worker replica: the TOML config it runs.
    Worker {
        config: String,
    },
    Baseline(BaselineSpec),
}

#[derive(Serialize, Deserialize)]
pub(crate) enum Report {
    Worker {
        tally: Box<StoreTally>,
        timeline: Box<TimelineReport>,
    },
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
            let tally = worker(&config, &mut stdin).await?;
            Report::Worker {
                tally: Box::new(tally),
                timeline: Box::new(timeline::global().report()),
            }
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

async fn worker(config: &str, stdin: &mut Lines<BufReader<Stdin>>) -> Result<StoreTally> {
    super::recorder::install()?;
    let config = Config::parse(config).context("the replica's config")?;
    let inner = idemgate::store::open(&config).await?;
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
    // As `idemgate run` does, on the counting store, until `stop`.
    let stop = async {
        let _ = wait_for(stdin, STOP).await;
    };
    idemgate::app::run_with_store(&config, store.clone(), stop).await?;
    Ok(store.tally())
}
