//! Figure 3b: what a live claim costs in Redis memory and CPU, per tier-1
//! layout (docs/design.md §4.1), in one run.
//!
//! Each layout gets a scratch `redis-server` of its own and the same load
//! (and, where `IDEMGATE_TEST_REDIS_CLUSTER` names one, the test cluster
//! under a prefix of the run's own, every master's memory and CPU summed,
//! its keys deleted after):
//! an exact stream with a short TTL written at a steady rate (a batch every
//! 100 ms, each claimed and published) for `ttls` TTLs, so expiry runs at
//! the rate claims arrive, as in production. Bytes per live claim are the
//! growth of `used_memory` over the tier-1 data alone (the reading before
//! is taken after a warm-up round wrote the stream's watermarks and loaded
//! the scripts) divided by the claims written within the last TTL, which
//! are the ones still alive; expired claims the server has not removed yet
//! (keys the active expiry has not reached, fields no sweep has) count
//! against their layout. Server CPU per claim is the server's user+system
//! CPU over the paced phase divided by the claims written in it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use idemgate::store::redis::{RedisOptions, RedisStore, RedisTarget, Tier1Layout};
use idemgate::store::{Mode, StreamId, StreamSpec};
use idemgate_testkit::servers::{RedisServer, ServerOptions};

use super::footprint::claim_and_publish;
use super::servers;

const PREFIX: &str = "ig:";
const STREAM: &str = "payments";
/// How often a batch goes out.
const TICK: Duration = Duration::from_millis(100);

/// The paced load.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Claims per second (also the stream's `peak_rate`).
    pub rate: u64,
    pub ttl: Duration,
    /// How many TTLs the paced phase lasts (at least two).
    pub ttls: u32,
}

pub struct Live {
    pub layout: Tier1Layout,
    /// `standalone` (a scratch server) or `cluster` (the test cluster).
    pub server: &'static str,
    pub pace: Pace,
    pub written: u64,
    /// Claims written within the last TTL at the reading.
    pub live: u64,
    pub used_before: i64,
    pub used_after: i64,
    pub bytes_per_live_claim: f64,
    pub server_us_per_claim: f64,
    /// Keys on the server at the end: claims (keys) or hashes (grouped).
    pub keys: u64,
}

/// Where a layout is measured.
enum Place {
    /// A scratch `redis-server`, started for the figure.
    Scratch,
    /// The test cluster's seed URLs.
    Cluster(Vec<String>),
}

/// Measures each layout under the same paced load, one after the other.
pub async fn run(pace: Pace) -> anyhow::Result<Vec<Live>> {
    let mut places = vec![Place::Scratch];
    match std::env::var("IDEMGATE_TEST_REDIS_CLUSTER") {
        Ok(nodes) if !nodes.trim().is_empty() => places.push(Place::Cluster(
            nodes.split(',').map(|s| s.trim().to_string()).collect(),
        )),
        _ => eprintln!(
            "[claims] live tier-1 memory: no IDEMGATE_TEST_REDIS_CLUSTER, standalone only"
        ),
    }
    let mut out = Vec::new();
    for place in &places {
        for layout in [Tier1Layout::Keys, Tier1Layout::Grouped] {
            eprintln!(
                "[claims] live tier-1 memory, {layout:?}: {} claims/s, ttl {:?}, {} ttls",
                pace.rate, pace.ttl, pace.ttls
            );
            out.push(
                one(layout, pace, place)
                    .await
                    .with_context(|| format!("{layout:?}"))?,
            );
        }
    }
    Ok(out)
}

/// Every master's `used_memory`, summed.
async fn used_memory(target: &RedisTarget) -> anyhow::Result<i64> {
    let mut total = 0;
    for url in servers::masters(target).await? {
        total += servers::used_memory(&url).await?;
    }
    Ok(total)
}

async fn one(layout: Tier1Layout, pace: Pace, place: &Place) -> anyhow::Result<Live> {
    ensure!(pace.ttls >= 2, "at least two TTLs at a steady rate");
    let (target, prefix, _scratch) = match place {
        Place::Scratch => {
            let scratch = tokio::task::spawn_blocking(|| {
                RedisServer::start("claims-live", ServerOptions::default())
            })
            .await
            .context("starting a scratch redis-server")?;
            (
                RedisTarget::Standalone(scratch.url()),
                PREFIX.to_string(),
                Some(scratch),
            )
        }
        Place::Cluster(nodes) => (
            RedisTarget::Cluster(nodes.clone()),
            super::run_prefix(),
            None,
        ),
    };
    let measured = measure(layout, pace, &target, &prefix).await;
    if matches!(place, Place::Cluster(_)) {
        // The test cluster is shared: its keys go, whatever happened.
        servers::delete_prefix(&target, &prefix).await?;
    }
    measured
}

async fn measure(
    layout: Tier1Layout,
    pace: Pace,
    target: &RedisTarget,
    prefix: &str,
) -> anyhow::Result<Live> {
    let spec = StreamSpec {
        peak_rate: Some(pace.rate),
        ..StreamSpec::new(STREAM, Mode::Exact, pace.ttl, None)
    };
    let options = RedisOptions {
        tier1_layout: Some(layout),
        ..RedisOptions::new(target.clone(), prefix)
    };
    let store = RedisStore::connect(&options, vec![spec]).await?;
    ensure!(store.tier1_layout(StreamId(0))? == layout, "layout");
    let per_tick = (pace.rate as usize / 10).max(1);
    // Warm-up: the watermark hash and the scripts, before the reading.
    let mut next = 0u64;
    claim_and_publish(&store, "live", next, per_tick).await?;
    next += per_tick as u64;
    let before = used_memory(target).await?;
    let cpu0 = servers::cpu_seconds(target).await?;

    let started = Instant::now();
    let run_for = pace.ttl * pace.ttls;
    let mut written: VecDeque<(Instant, u64)> = VecDeque::new();
    let mut total = 0u64;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while started.elapsed() < run_for {
        tick.tick().await;
        claim_and_publish(&store, "live", next, per_tick).await?;
        next += per_tick as u64;
        written.push_back((Instant::now(), per_tick as u64));
        total += per_tick as u64;
    }
    let cpu1 = servers::cpu_seconds(target).await?;
    let after = used_memory(target).await?;
    let now = Instant::now();
    // A claim written within the last TTL is alive; the one being written
    // at the edge is counted from when its round answered, which errs
    // toward fewer live claims, so toward more bytes per claim.
    let live: u64 = written
        .iter()
        .filter(|(at, _)| now.duration_since(*at) < pace.ttl)
        .map(|(_, n)| n)
        .sum();
    let mut keys = 0u64;
    for url in servers::masters(target).await? {
        keys += servers::keys_under(&url, &format!("{prefix}*"))
            .await?
            .len() as u64;
    }
    ensure!(live > 0, "no live claims");
    Ok(Live {
        layout,
        server: match target {
            RedisTarget::Cluster(_) => "cluster",
            _ => "standalone",
        },
        pace,
        written: total,
        live,
        used_before: before,
        used_after: after,
        bytes_per_live_claim: (after - before) as f64 / live as f64,
        server_us_per_claim: (cpu1 - cpu0) * 1e6 / total as f64,
        keys,
    })
}
