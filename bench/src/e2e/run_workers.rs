//! The worker's runs over a dataset in a mode.
//!
//! - The *clean* run gives the mode's figures: its replicas connect to
//!   redis-server (or the PostgreSQL server) directly, run on the plain store with the product's own
//!   Prometheus recorder, and the harness only reads `/proc` and, at the
//!   start and the end, their /metrics. Its first poll is seen on /metrics
//!   (the first store round's batch-size sample, scraped every 10 ms until
//!   it shows); its decision latency is the worker's
//!   `idemgate_decision_latency_seconds` histogram, scraped once every
//!   record is committed, before the replicas stop.
//! - The *counting* run is the same config with the Redis connection through
//!   the round-trip proxy, the counting store and the timeline: round trips,
//!   commands and store rounds per batch, and the phases of a round. Its
//!   throughput is its own, never the mode's.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::children::ChildProcess;
use super::kafka::{create_topics, delete_topics, watch};
use super::memory;
use super::postgres;
use super::profile;
use super::replica::{Report, Role, CONNECTED, GO, STOP};
use super::runs::{
    check, config, cpu_now, peak_rss_mb, sizing, unix_us, Counting, Dataset, Endpoints, Kind, Mode,
    RunResult, Setup, HORIZON_S, PREFIX, REPLICA, STREAM,
};
use super::scrape::{self, Sample, Scraped};
use super::timeline::Phases;
use idemgate_testkit::counting::StoreTally;

/// Which run of a mode this is: the table's, the counting one, the one
/// under perf, or one of the alternated pairs (`pairs.rs`). Each has its
/// own name, group and output topics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Run {
    Table,
    Counting,
    Profiled,
    Pair(usize),
}

impl Run {
    /// What its name and its progress label carry after the mode's.
    fn suffix(self) -> (String, String) {
        match self {
            Run::Table => (String::new(), String::new()),
            Run::Counting => ("-counting".into(), " (counting)".into()),
            Run::Profiled => ("-perf".into(), " (under perf)".into()),
            Run::Pair(i) => (format!("-pair{i}"), format!(" (pair {i})")),
        }
    }
}

/// The names of a run: (its name, its progress label, group and output
/// prefix).
fn names(setup: &Setup, mode: Mode, replicas: usize, run: Run) -> (String, String, String) {
    let (suffix, note) = run.suffix();
    let name = format!("{}-x{replicas}{suffix}", mode.short());
    let label = format!("{} x{replicas}{note}", mode.label());
    let group = format!("{}.{name}", setup.run_id);
    (name, label, group)
}

/// Spawns the replicas and waits until each one's store answers.
async fn spawn(
    setup: &Setup,
    name: &str,
    replicas: usize,
    role: impl Fn(usize) -> Role,
) -> Result<Vec<ChildProcess>> {
    let mut children = Vec::new();
    for r in 0..replicas {
        let child = ChildProcess::spawn(&setup.exe, &setup.dir, &format!("{name}-r{r}"), &role(r))?;
        children.push(child);
    }
    for child in &mut children {
        child.expect(CONNECTED, Duration::from_secs(60)).await?;
    }
    Ok(children)
}

/// Scrapes the replicas every 10 ms until one of them has started a store
/// round (its first poll returned records); the unix µs it was seen.
async fn first_round(children: &mut [ChildProcess], label: &str) -> Result<i64> {
    let mut addresses: Vec<Option<String>> = vec![None; children.len()];
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        for (child, address) in children.iter().zip(addresses.iter_mut()) {
            if address.is_none() {
                *address = scrape::metrics_address(&child.log, Duration::ZERO)
                    .await
                    .ok();
            }
        }
        for address in addresses.iter().flatten() {
            if let Ok(samples) = scrape::scrape(address).await {
                if Scraped::of(&[samples]).store_rounds > 0 {
                    return Ok(unix_us());
                }
            }
        }
        for child in children.iter_mut() {
            if child.exited() {
                bail!("{label}: a replica exited\n{}", child.tail());
            }
        }
        if Instant::now() > until {
            bail!("{label}: no replica started a store round within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The clean run of `replicas` worker processes over the dataset in `mode`
/// (under perf for [`Run::Profiled`], an extra run for the closing note).
pub(crate) async fn clean(
    setup: &Setup,
    dataset: &Dataset,
    mode: Mode,
    replicas: usize,
    run: Run,
) -> Result<RunResult> {
    let (name, label, group) = names(setup, mode, replicas, run);
    let out = group.clone();
    create_topics(
        &setup.broker.brokers,
        &[&format!("{out}.clean"), &format!("{out}.audit")],
        setup.partitions,
    )
    .await?;
    let mut conn = super::services::connect(&setup.redis.url).await?;
    let before = memory::reset(&mut conn).await?;
    let store_url = match mode {
        Mode::Postgres => {
            postgres::reset(setup)?;
            setup.postgres.as_ref().map_or("", |pg| pg.url.as_str())
        }
        _ => &setup.redis.url,
    };
    let endpoints = Endpoints {
        brokers: &setup.broker.brokers,
        store_url,
        batch: setup.batch,
    };
    let config = config(&endpoints, dataset, mode, &group, &out);
    let mut children = spawn(setup, &name, replicas, |r| Role::Worker {
        config: config.replace(REPLICA, &r.to_string()),
    })
    .await?;
    let cpu_before = cpu_now(setup, &children);
    for child in &mut children {
        child.send(GO).await?;
    }
    let first_us = first_round(&mut children, &label).await?;
    // Once the replicas run: the profile is of their steady state.
    let recorder = if run == Run::Profiled {
        let mut pids: Vec<u32> = children.iter().map(|c| c.pid).collect();
        pids.push(setup.broker.server.pid());
        pids.push(setup.redis.server.pid());
        Some(profile::Recorder::start(&setup.dir, &name, &pids).await?)
    } else {
        None
    };
    let end_us = watch(
        &setup.broker.brokers,
        &group,
        &dataset.loaded,
        &label,
        &mut children,
    )
    .await?;
    let cpu_after = cpu_now(setup, &children);
    let peak = peak_rss_mb(&children);
    let profile = match recorder {
        Some(recorder) => {
            let roles: Vec<(u32, String)> = children
                .iter()
                .map(|c| (c.pid, "worker".to_string()))
                .chain([
                    (setup.broker.server.pid(), "kafka".to_string()),
                    (setup.redis.server.pid(), "redis-server".to_string()),
                ])
                .collect();
            Some(recorder.finish(&roles).await?)
        }
        None => None,
    };
    // Every record is committed: the replicas' own /metrics, before they stop.
    let mut scrapes: Vec<Vec<Sample>> = Vec::new();
    for child in &children {
        let address = scrape::metrics_address(&child.log, Duration::from_secs(10)).await?;
        scrapes.push(scrape::scrape(&address).await?);
    }
    let scraped = Scraped::of(&scrapes);
    for child in &mut children {
        child.send(STOP).await?;
    }
    for child in &mut children {
        let Report::Worker = child.report(Duration::from_secs(60)).await? else {
            bail!("a clean replica sent another report");
        };
    }
    // Client buffers go with the clients: let the server settle.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let filter = match mode.is_exact() {
        true => None,
        false => {
            let (peak, sizing) = sizing(dataset);
            Some((peak * HORIZON_S, sizing.bits_per_key()))
        }
    };
    let (memory, disk) = match mode {
        Mode::Postgres => (None, Some(postgres::disk(setup)?)),
        _ => (
            Some(memory::measure(&mut conn, before, PREFIX, STREAM, filter).await?),
            None,
        ),
    };
    let seconds = (end_us - first_us) as f64 / 1e6;
    let mut r = cpu_after.result(
        &cpu_before,
        setup,
        (name, Kind::Clean),
        (dataset.records, seconds),
    );
    r.mode = Some(mode);
    r.dataset = dataset.topic.clone();
    r.worker_peak_rss_mb = peak;
    r.latency_p50_ms = scraped.latency_p50_ms;
    r.latency_p99_ms = scraped.latency_p99_ms;
    r.latency_source =
        "the replicas' idemgate_decision_latency_seconds histogram (/metrics)".into();
    r.check = check(
        mode,
        dataset,
        scraped.novel,
        scraped.duplicate_filter,
        &[
            ("conflicts", scraped.conflict),
            ("unverified", scraped.unverified),
            ("invalid", scraped.invalid),
            ("store errors", scraped.store_errors),
        ],
    );
    r.scraped = Some(scraped);
    r.memory = memory;
    r.postgres_disk = disk;
    r.profile = profile;
    delete_topics(
        &setup.broker.brokers,
        &[format!("{out}.clean"), format!("{out}.audit")],
    )
    .await?;
    Ok(r)
}

/// The counting run: the same config through the proxy, the counting store
/// and the timeline.
pub(crate) async fn counting(
    setup: &Setup,
    dataset: &Dataset,
    mode: Mode,
    replicas: usize,
) -> Result<RunResult> {
    let (name, label, group) = names(setup, mode, replicas, Run::Counting);
    let out = group.clone();
    create_topics(
        &setup.broker.brokers,
        &[&format!("{out}.clean"), &format!("{out}.audit")],
        setup.partitions,
    )
    .await?;
    let mut conn = super::services::connect(&setup.redis.url).await?;
    memory::reset(&mut conn).await?;
    let endpoints = Endpoints {
        brokers: &setup.broker.brokers,
        store_url: &setup.proxy_url,
        batch: setup.batch,
    };
    let config = config(&endpoints, dataset, mode, &group, &out);
    let mut children = spawn(setup, &name, replicas, |r| Role::Counting {
        config: config.replace(REPLICA, &r.to_string()),
    })
    .await?;
    let rt_before = setup.proxy.snapshot();
    let cpu_before = cpu_now(setup, &children);
    for child in &mut children {
        child.send(GO).await?;
    }
    let end_us = watch(
        &setup.broker.brokers,
        &group,
        &dataset.loaded,
        &label,
        &mut children,
    )
    .await?;
    let cpu_after = cpu_now(setup, &children);
    let peak = peak_rss_mb(&children);
    for child in &mut children {
        child.send(STOP).await?;
    }
    let mut tally = StoreTally::default();
    let mut phases = Phases::default();
    let mut first: Option<i64> = None;
    let mut scrapes = Vec::new();
    let mut allocations = 0;
    for child in &mut children {
        let Report::Counting {
            tally: t,
            timeline,
            metrics,
            allocations: a,
        } = child.report(Duration::from_secs(60)).await?
        else {
            bail!("a counting replica sent another report");
        };
        first = match (first, timeline.first_batch_us) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        phases.add(&timeline.phases);
        tally.add(&t);
        allocations += a;
        scrapes.push(scrape::parse(&metrics));
    }
    // After the replicas stopped, as their tallies: the same store rounds
    // (the last ones at the stop included) on both sides.
    let rt = setup.proxy.snapshot() - rt_before;
    let scraped = Scraped::of(&scrapes);
    let seconds = first.map_or(0.0, |f| (end_us - f) as f64 / 1e6);
    let mut r = cpu_after.result(
        &cpu_before,
        setup,
        (name, Kind::Counting),
        (dataset.records, seconds),
    );
    r.mode = Some(mode);
    r.dataset = dataset.topic.clone();
    r.worker_peak_rss_mb = peak;
    r.latency_p50_ms = scraped.latency_p50_ms;
    r.latency_p99_ms = scraped.latency_p99_ms;
    r.latency_source =
        "the replicas' idemgate_decision_latency_seconds histogram (reported at the end)".into();
    r.check = check(
        mode,
        dataset,
        tally.won,
        tally.duplicate_filter,
        &[
            ("conflicts", tally.conflict),
            ("done flags lost", tally.done_lost),
            ("store errors", tally.store_errors),
        ],
    );
    let mut counted = Counting::new(rt, tally, phases);
    counted.allocations_per_record = allocations as f64 / dataset.records.max(1) as f64;
    r.counting = Some(counted);
    delete_topics(
        &setup.broker.brokers,
        &[format!("{out}.clean"), format!("{out}.audit")],
    )
    .await?;
    Ok(r)
}
