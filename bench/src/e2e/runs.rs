//! One timed run: start the replicas (or the baseline), say `go`, watch the
//! group's committed offsets until every record is committed, then gather
//! CPU times, round trips, the replicas' reports and the store's memory.
//!
//! Records/s end to end = records / (the first poll of any replica that
//! returned records, to the moment the harness sees the last offset
//! committed). The watcher polls every 50 ms, so the end is late by up to
//! that much.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use serde::Serialize;

use super::baseline::{BaselineReport, BaselineSpec};
use super::children::ChildProcess;
use super::histogram::Histogram;
use super::kafka::{create_topics, CommitWatch, Loaded, Progress};
use super::memory::{self, Memory};
use super::profile::{self, Profile};
use super::replica::{Report, Role, CONNECTED, GO, STOP};
use super::services::{cpu_seconds, machine_busy_seconds, status_bytes, Redis};
use super::timeline::Phases;
use crate::proxy::{Counts, Snapshot};
use idemgate::store::FilterSizing;
use idemgate_testkit::counting::StoreTally;
use idemgate_testkit::servers::Tansu;

/// The default key prefix, so key lengths are what a deployment pays.
pub(crate) const PREFIX: &str = "ig:";
pub(crate) const STREAM: &str = "bank";
/// Tiered streams: the filter covers a day; tier 1 holds an hour.
const HORIZON_S: u64 = 86_400;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    Exact,
    RedisBloom,
    Bitmap,
}

impl Mode {
    pub fn parse(text: &str) -> Result<Mode> {
        Ok(match text {
            "exact" => Mode::Exact,
            "redisbloom" | "bloom" => Mode::RedisBloom,
            "bitmap" | "bitmaps" => Mode::Bitmap,
            other => bail!("--modes: {other} is not exact, redisbloom or bitmap"),
        })
    }

    pub fn label(self) -> &'static str {
        match self {
            Mode::Exact => "exact",
            Mode::RedisBloom => "tiered, RedisBloom",
            Mode::Bitmap => "tiered, bitmaps",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Mode::Exact => "exact",
            Mode::RedisBloom => "bloom",
            Mode::Bitmap => "bitmap",
        }
    }
}

/// What every run shares: the servers, the proxy, where files go.
pub(crate) struct Setup {
    pub tansu: Tansu,
    pub redis: Redis,
    pub proxy_url: String,
    pub proxy: Arc<Counts>,
    pub dir: PathBuf,
    pub exe: PathBuf,
    pub run_id: String,
    pub batch: usize,
    pub partitions: i32,
}

/// One dataset loaded in the raw topic.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Dataset {
    pub topic: String,
    pub records: u64,
    pub events: u64,
    pub copies: u64,
    /// Copies per rung of the retry ladder.
    pub per_rung: Vec<u64>,
    pub load_seconds: f64,
    #[serde(skip)]
    pub loaded: Loaded,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct RunResult {
    pub name: String,
    pub mode: Option<Mode>,
    pub replicas: usize,
    pub dataset: String,
    pub records: u64,
    pub seconds: f64,
    pub records_per_s: f64,
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    pub batch_cycle_p50_ms: Option<f64>,
    pub batch_cycle_p99_ms: Option<f64>,
    /// CPU seconds of the replicas (or the baseline process).
    pub worker_cpu_s: f64,
    pub worker_cpu_s_per_million: f64,
    pub worker_peak_rss_mb: f64,
    /// Resident memory of the broker and of redis-server at the end.
    pub tansu_rss_mb: f64,
    pub redis_rss_mb: f64,
    pub tansu_cpu_s: f64,
    pub redis_cpu_s: f64,
    /// The harness itself (round-trip proxy, commit watcher).
    pub harness_cpu_s: f64,
    /// Everything else on the machine over the run (other sessions, the
    /// kernel's own work): machine-wide busy time less the above.
    pub other_cpu_s: f64,
    /// Polls that returned records (batches), and the records in them.
    pub batches: u64,
    pub batch_records: u64,
    pub round_trips: Option<Snapshot>,
    pub round_trips_per_batch: Option<f64>,
    pub tally: Option<StoreTally>,
    pub baseline: Option<BaselineReport>,
    pub memory: Option<Memory>,
    /// Wall time of the replicas by phase of a batch, µs summed over them.
    pub phases: Option<Phases>,
    pub check: String,
    #[serde(skip)]
    pub profile: Option<Profile>,
}

fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

fn rss_mb(pid: u32) -> f64 {
    status_bytes(pid, "VmRSS").unwrap_or(0) as f64 / 1048576.0
}

struct Cpu {
    children: Vec<f64>,
    tansu: f64,
    redis: f64,
    harness: f64,
    machine: f64,
}

impl Cpu {
    /// Busy time of everything but the run's own processes since `before`.
    fn other_since(&self, before: &Cpu) -> f64 {
        let ours = (self.children.iter().sum::<f64>() - before.children.iter().sum::<f64>())
            + (self.tansu - before.tansu)
            + (self.redis - before.redis)
            + (self.harness - before.harness);
        (self.machine - before.machine - ours).max(0.0)
    }
}

fn cpu_now(setup: &Setup, children: &[ChildProcess]) -> Cpu {
    Cpu {
        children: children
            .iter()
            .map(|c| cpu_seconds(c.pid).unwrap_or(0.0))
            .collect(),
        tansu: cpu_seconds(setup.tansu.pid()).unwrap_or(0.0),
        redis: cpu_seconds(setup.redis.server.pid()).unwrap_or(0.0),
        harness: cpu_seconds(std::process::id()).unwrap_or(0.0),
        machine: machine_busy_seconds().unwrap_or(0.0),
    }
}

/// The filter a tiered run is sized with: capacity for every distinct
/// event of the dataset within one horizon.
pub(crate) fn sizing(dataset: &Dataset) -> (u64, FilterSizing) {
    let peak = dataset.events.div_ceil(HORIZON_S).max(1);
    (
        peak,
        FilterSizing::for_rate(peak, std::time::Duration::from_secs(HORIZON_S), 1e-3),
    )
}

/// Where a replica's config points: the broker, the store (the
/// round-trip proxy) and the batch size.
struct Endpoints<'a> {
    brokers: &'a str,
    store_url: &'a str,
    batch: usize,
}

fn config(at: &Endpoints, dataset: &Dataset, mode: Mode, group: &str, out: &str) -> String {
    let brokers = at.brokers;
    let stream = match mode {
        Mode::Exact => "mode = \"exact\"\nttl = { horizon = \"9h20m\", outage = \"2h\" }\n".to_string(),
        Mode::RedisBloom | Mode::Bitmap => format!(
            "mode = \"tiered\"\nttl = {{ explicit = \"{HORIZON_S}s\" }}\ntier1_ttl = \"1h\"\nfilter_slots = 2\nfp_rate = 0.001\npeak_rate = {}\n",
            sizing(dataset).0
        ),
    };
    let filter = match mode {
        Mode::RedisBloom => "redisbloom",
        _ => "bitmap",
    };
    format!(
        r#"[kafka]
"bootstrap.servers" = "{brokers}"
"group.id" = "{group}"
"session.timeout.ms" = "6000"

[store]
kind = "redis"
url = "{url}"
key_prefix = "{PREFIX}"
filter = "{filter}"

[metrics]
listen = "127.0.0.1:0"

[batch]
max_records = {batch}
linger = "20ms"

[[streams]]
name = "{STREAM}"
inputs = ["{raw}"]
clean = "{out}.clean"
audit = "{out}.audit"
profile = "bank-txn"
{stream}"#,
        url = at.store_url,
        batch = at.batch,
        raw = dataset.topic,
    )
}

/// Watches the group until every record is committed; returns the unix µs
/// it saw the last one.
async fn watch(
    setup: &Setup,
    group: &str,
    dataset: &Dataset,
    label: &str,
    children: &mut [ChildProcess],
) -> Result<i64> {
    let watcher = CommitWatch::new(&setup.tansu.brokers, group, &dataset.loaded)?;
    let mut progress = Progress::new(label, dataset.records);
    let mut last = (0u64, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (done, complete) = tokio::task::block_in_place(|| watcher.committed())?;
        if complete {
            let at = unix_us();
            progress.finish(done);
            return Ok(at);
        }
        progress.update(done);
        if done != last.0 {
            last = (done, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(90) {
            eprintln!();
            let tails: Vec<String> = children.iter().map(|c| c.tail()).collect();
            bail!(
                "{label}: no offset committed for 90s at {done} of {}\n{}",
                dataset.records,
                tails.join("\n")
            );
        }
        for child in children.iter_mut() {
            if child.exited() {
                eprintln!();
                bail!("{label}: a replica exited\n{}", child.tail());
            }
        }
    }
}

/// `replicas` worker processes over the dataset in `mode`.
pub(crate) async fn workers(
    setup: &Setup,
    dataset: &Dataset,
    mode: Mode,
    replicas: usize,
    record_profile: bool,
) -> Result<RunResult> {
    let name = format!(
        "{}-x{replicas}{}",
        mode.short(),
        if record_profile { "-perf" } else { "" }
    );
    let label = format!("{} x{replicas}", mode.label());
    let group = format!("{}.{name}", setup.run_id);
    let out = format!("{}.{name}", setup.run_id);
    let clean = format!("{out}.clean");
    let audit = format!("{out}.audit");
    create_topics(&setup.tansu.brokers, &[&clean, &audit], setup.partitions).await?;
    let mut conn = super::services::connect(&setup.redis.url).await?;
    let before = memory::reset(&mut conn).await?;

    let endpoints = Endpoints {
        brokers: &setup.tansu.brokers,
        store_url: &setup.proxy_url,
        batch: setup.batch,
    };
    let config = config(&endpoints, dataset, mode, &group, &out);
    let mut children = Vec::new();
    for r in 0..replicas {
        let role = Role::Worker {
            config: config.clone(),
        };
        children.push(ChildProcess::spawn(
            &setup.exe,
            &setup.dir,
            &format!("{name}-r{r}"),
            &role,
        )?);
    }
    for child in &mut children {
        child.expect(CONNECTED, Duration::from_secs(60)).await?;
    }
    let rt_before = setup.proxy.snapshot();
    let cpu_before = cpu_now(setup, &children);
    let recorder = if record_profile {
        let mut pids: Vec<u32> = children.iter().map(|c| c.pid).collect();
        pids.push(setup.tansu.pid());
        pids.push(setup.redis.server.pid());
        Some(profile::Recorder::start(&setup.dir, &name, &pids)?)
    } else {
        None
    };
    for child in &mut children {
        child.send(GO).await?;
    }
    let end_us = watch(setup, &group, dataset, &label, &mut children).await?;
    let cpu_after = cpu_now(setup, &children);
    let rt = setup.proxy.snapshot() - rt_before;
    let rss: u64 = children
        .iter()
        .map(|c| status_bytes(c.pid, "VmHWM").unwrap_or(0))
        .max()
        .unwrap_or(0);
    let profile = match recorder {
        Some(recorder) => {
            let roles: Vec<(u32, String)> = children
                .iter()
                .map(|c| (c.pid, "worker".to_string()))
                .chain([
                    (setup.tansu.pid(), "tansu".to_string()),
                    (setup.redis.server.pid(), "redis-server".to_string()),
                ])
                .collect();
            Some(recorder.finish(&roles).await?)
        }
        None => None,
    };
    let mut tally = StoreTally::default();
    let mut first_batch: Option<i64> = None;
    let mut latency = Histogram::default();
    let mut cycle = Histogram::default();
    let mut phases = Phases::default();
    let (mut batches, mut batch_records) = (0, 0);
    for child in &mut children {
        child.send(STOP).await?;
    }
    for child in &mut children {
        let Report::Worker { tally: t, timeline } = child.report(Duration::from_secs(60)).await?
        else {
            bail!("a worker replica sent a baseline report");
        };
        first_batch = match (first_batch, timeline.first_batch_us) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        latency.merge(&timeline.latency);
        cycle.merge(&timeline.batch_cycle);
        phases.add(&timeline.phases);
        batches += timeline.batches;
        batch_records += timeline.batch_records;
        tally.add(&t);
    }
    // Client buffers go with the clients: let the server settle.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let filter = match mode {
        Mode::Exact => None,
        _ => {
            let (peak, sizing) = self::sizing(dataset);
            Some((peak * HORIZON_S, sizing.bits_per_key()))
        }
    };
    let memory = memory::measure(&mut conn, before, PREFIX, STREAM, filter).await?;

    let seconds = first_batch.map_or(0.0, |f| (end_us - f) as f64 / 1e6);
    let worker_cpu: f64 = cpu_after
        .children
        .iter()
        .zip(&cpu_before.children)
        .map(|(a, b)| a - b)
        .sum();
    let check = check(mode, dataset, &tally);
    Ok(RunResult {
        name,
        mode: Some(mode),
        replicas,
        dataset: dataset.topic.clone(),
        records: dataset.records,
        seconds,
        records_per_s: dataset.records as f64 / seconds.max(1e-9),
        latency_p50_ms: latency.quantile(0.5).map(|us| us / 1000.0),
        latency_p99_ms: latency.quantile(0.99).map(|us| us / 1000.0),
        batch_cycle_p50_ms: cycle.quantile(0.5).map(|us| us / 1000.0),
        batch_cycle_p99_ms: cycle.quantile(0.99).map(|us| us / 1000.0),
        worker_cpu_s: worker_cpu,
        worker_cpu_s_per_million: worker_cpu / dataset.records as f64 * 1e6,
        worker_peak_rss_mb: rss as f64 / 1048576.0,
        tansu_rss_mb: rss_mb(setup.tansu.pid()),
        redis_rss_mb: rss_mb(setup.redis.server.pid()),
        tansu_cpu_s: cpu_after.tansu - cpu_before.tansu,
        redis_cpu_s: cpu_after.redis - cpu_before.redis,
        harness_cpu_s: cpu_after.harness - cpu_before.harness,
        other_cpu_s: cpu_after.other_since(&cpu_before),
        batches,
        batch_records,
        round_trips_per_batch: Some(rt.protocol_round_trips() as f64 / batches.max(1) as f64),
        round_trips: Some(rt),
        phases: Some(phases),
        tally: Some(tally),
        baseline: None,
        memory: Some(memory),
        check,
        profile,
    })
}

/// Every distinct event novel exactly once (exact mode); in tiered mode a
/// filter false positive turns an event (and its copies) into filter
/// duplicates instead.
fn check(mode: Mode, dataset: &Dataset, t: &StoreTally) -> String {
    let problems = t.conflict + t.done_lost + t.store_errors;
    let ok = match mode {
        Mode::Exact => t.won == dataset.events && t.duplicate_filter == 0,
        _ => t.won <= dataset.events && t.won + t.duplicate_filter >= dataset.events,
    } && problems == 0;
    if ok {
        "ok".into()
    } else {
        format!(
            "CHECK: novel {} of {} events, filter dup {}, conflicts {}, done flags lost {}, store errors {}",
            t.won, dataset.events, t.duplicate_filter, t.conflict, t.done_lost, t.store_errors
        )
    }
}

/// The per-record baseline over the first `records` records of the dataset.
pub(crate) async fn baseline(setup: &Setup, dataset: &Dataset, records: u64) -> Result<RunResult> {
    let name = "baseline".to_string();
    let group = format!("{}.{name}", setup.run_id);
    let out = format!("{}.{name}", setup.run_id);
    let spec = BaselineSpec {
        brokers: setup.tansu.brokers.clone(),
        group: group.clone(),
        topic: dataset.topic.clone(),
        clean: format!("{out}.clean"),
        audit: format!("{out}.audit"),
        redis_url: setup.redis.url.clone(),
        key_prefix: format!("{PREFIX}baseline:c:"),
        ttl_ms: 11 * 3_600_000 + 20 * 60_000,
        records,
    };
    create_topics(
        &setup.tansu.brokers,
        &[&spec.clean, &spec.audit],
        setup.partitions,
    )
    .await?;
    let mut conn = super::services::connect(&setup.redis.url).await?;
    memory::reset(&mut conn).await?;
    let mut child = ChildProcess::spawn(&setup.exe, &setup.dir, &name, &Role::Baseline(spec))?;
    child.expect(CONNECTED, Duration::from_secs(60)).await?;
    let cpu_before = cpu_now(setup, std::slice::from_ref(&child));
    child.send(GO).await?;
    let watcher = CommitWatch::new(&setup.tansu.brokers, &group, &dataset.loaded)?;
    let mut progress = Progress::new("per-record baseline", records);
    let report = loop {
        let read = child.expect(super::replica::REPORT, Duration::from_millis(250));
        if let Ok(text) = read.await {
            break serde_json::from_str::<Report>(&text)?;
        }
        if child.exited() {
            bail!("the baseline exited without a report\n{}", child.tail());
        }
        if let Ok((done, _)) = tokio::task::block_in_place(|| watcher.committed()) {
            progress.update(done.min(records));
        }
    };
    let cpu_after = cpu_now(setup, std::slice::from_ref(&child));
    let Report::Baseline(report) = report else {
        bail!("the baseline sent a worker report");
    };
    progress.finish(report.processed);
    let seconds = match (report.first_consumed_us, report.last_committed_us) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e6,
        _ => 0.0,
    };
    let worker_cpu = cpu_after.children[0] - cpu_before.children[0];
    let check = if report.processed == records {
        "ok".to_string()
    } else {
        format!("CHECK: processed {} of {records}", report.processed)
    };
    Ok(RunResult {
        name,
        mode: None,
        replicas: 1,
        dataset: dataset.topic.clone(),
        records: report.processed,
        seconds,
        records_per_s: report.processed as f64 / seconds.max(1e-9),
        latency_p50_ms: report.latency.quantile(0.5).map(|us| us / 1000.0),
        latency_p99_ms: report.latency.quantile(0.99).map(|us| us / 1000.0),
        batch_cycle_p50_ms: None,
        batch_cycle_p99_ms: None,
        worker_cpu_s: worker_cpu,
        worker_cpu_s_per_million: worker_cpu / report.processed.max(1) as f64 * 1e6,
        worker_peak_rss_mb: report.peak_rss_bytes as f64 / 1048576.0,
        tansu_rss_mb: rss_mb(setup.tansu.pid()),
        redis_rss_mb: rss_mb(setup.redis.server.pid()),
        tansu_cpu_s: cpu_after.tansu - cpu_before.tansu,
        redis_cpu_s: cpu_after.redis - cpu_before.redis,
        harness_cpu_s: cpu_after.harness - cpu_before.harness,
        other_cpu_s: cpu_after.other_since(&cpu_before),
        batches: 0,
        batch_records: 0,
        round_trips: None,
        round_trips_per_batch: None,
        tally: None,
        baseline: Some(report),
        memory: None,
        phases: None,
        check,
        profile: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::kafka::Loaded;
    use super::*;

    #[test]
    fn every_mode_gives_a_config_the_worker_accepts() {
        let dataset = Dataset {
            topic: "bench.raw".into(),
            records: 1000,
            events: 900,
            copies: 100,
            per_rung: vec![100],
            load_seconds: 1.0,
            loaded: Loaded {
                topic: "bench.raw".into(),
                ends: vec![1000],
                records: 1000,
                seconds: 1.0,
            },
        };
        let at = Endpoints {
            brokers: "127.0.0.1:9092",
            store_url: "redis://127.0.0.1:6379",
            batch: 1000,
        };
        for mode in [Mode::Exact, Mode::RedisBloom, Mode::Bitmap] {
            let text = config(&at, &dataset, mode, "group", "bench.out");
            let parsed = idemgate::config::Config::parse(&text);
            assert!(parsed.is_ok(), "{mode:?}: {:?}\n{text}", parsed.err());
        }
    }
}
