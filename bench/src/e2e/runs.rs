//! What every timed run shares: the modes, the servers, the datasets, the
//! replicas' config, a run's figures and CPU readings (the commit watcher
//! that ends a run is in `kafka`). The runs themselves are in `run_workers`
//! (the clean and the counting runs of the worker) and `run_others` (the
//! passthrough and the per-record baseline).
//!
//! Records/s end to end = records / (the first poll that returned records,
//! to the moment the harness sees the last offset committed). The watcher
//! polls every 50 ms, so the end is late by up to that much.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

pub(crate) use super::mode::Mode;

use super::baseline::BaselineReport;
use super::children::ChildProcess;
use super::kafka::Loaded;
use super::memory::Memory;
use super::passthrough::PassthroughReport;
use super::postgres::PgDisk;
use super::profile::Profile;
use super::scrape::Scraped;
use super::services::{cpu_seconds, machine_busy_seconds, status_bytes, Broker, Redis};
use super::timeline::Phases;
use crate::pg_server::PgServer;
use crate::proxy::{Counts, Snapshot};
use idemgate::store::FilterSizing;
use idemgate_testkit::counting::StoreTally;

/// The default key prefix, so key lengths are what a deployment pays.
pub(crate) const PREFIX: &str = "ig:";
pub(crate) const STREAM: &str = "bank";
/// Tiered streams: the filter covers a day; tier 1 holds an hour.
pub(crate) const HORIZON_S: u64 = 86_400;
/// `[batch] linger` of every replica (and the passthrough's).
pub(crate) const LINGER_MS: u64 = 20;

/// Where a replica's config names the replica (its transactional id).
pub(crate) const REPLICA: &str = "@REPLICA@";

/// What every run shares: the servers, the proxy, where files go.
pub(crate) struct Setup {
    pub broker: Broker,
    pub redis: Redis,
    /// Started when a PostgreSQL run is asked for.
    pub postgres: Option<PgServer>,
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

/// What a run was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    /// The worker with nothing of the bench in its path: the mode's figures.
    Clean,
    /// The worker through the round-trip proxy, the counting store and the
    /// timeline: round trips, commands, store rounds, phases.
    Counting,
    /// Consume, produce, commit; no store.
    Passthrough,
    /// One `SET NX PX` round trip per record.
    Baseline,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct RunResult {
    pub name: String,
    pub kind: Kind,
    pub mode: Option<Mode>,
    pub replicas: usize,
    pub dataset: String,
    pub records: u64,
    pub seconds: f64,
    pub records_per_s: f64,
    /// records/s over the passthrough's (set by the report).
    pub over_passthrough: Option<f64>,
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    /// Where the latency figures come from.
    pub latency_source: String,
    /// Wall seconds the CPU figures cover: from `go` (the group join
    /// included) to the moment every record is committed.
    pub cpu_window_s: f64,
    /// CPU seconds of the replicas (or the passthrough or baseline process).
    pub worker_cpu_s: f64,
    pub worker_cpu_s_per_million: f64,
    pub worker_peak_rss_mb: f64,
    /// Resident memory of the broker (its JVM) and of redis-server at the
    /// end.
    pub kafka_rss_mb: f64,
    pub redis_rss_mb: f64,
    pub kafka_cpu_s: f64,
    pub kafka_cpu_s_per_million: f64,
    pub redis_cpu_s: f64,
    pub redis_cpu_s_per_million: f64,
    /// The bench's PostgreSQL server (postmaster and every child), when
    /// one was started: idle but for the PostgreSQL runs.
    pub database_cpu_s: Option<f64>,
    pub database_cpu_s_per_million: Option<f64>,
    /// The harness itself (round-trip proxy, commit watcher, scrapes).
    pub harness_cpu_s: f64,
    /// Everything else on the machine over the run (other sessions, the
    /// kernel's own work): machine-wide busy time less the above.
    pub other_cpu_s: f64,
    /// A clean run: what its replicas' /metrics said at the end.
    pub scraped: Option<Scraped>,
    /// A counting run: round trips, commands, store rounds, phases.
    pub counting: Option<Counting>,
    pub passthrough: Option<PassthroughReport>,
    pub baseline: Option<BaselineReport>,
    /// A clean run: Redis memory per key after it.
    pub memory: Option<Memory>,
    /// A PostgreSQL run: the claims table on disk after it.
    pub postgres_disk: Option<PgDisk>,
    pub check: String,
    #[serde(skip)]
    pub profile: Option<Profile>,
}

/// A counting run's figures. A *batch* is a store round carrying claims
/// (up to `batch.max_records` records; the worker claims a poll's records
/// in one round, the records that wait on another's claim again later).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Counting {
    pub batches: u64,
    pub records_per_batch: f64,
    /// Every store round (with claims, or a publish only) per batch.
    pub store_rounds_per_batch: f64,
    /// Redis round trips of the claim protocol per batch (set-up and the
    /// stats watcher left out).
    pub round_trips_per_batch: f64,
    /// Redis commands of the claim protocol per batch: a pipeline of N
    /// commands is one round trip and N commands.
    pub commands_per_batch: f64,
    pub round_trips_per_store_round: f64,
    pub round_trips: Snapshot,
    pub tally: StoreTally,
    /// Wall time by phase of a round, µs summed over the replicas.
    pub phases: Phases,
    /// Heap allocations of the replicas' Rust code per record, start to
    /// stop (set-up, logs and metrics included; librdkafka's C code
    /// allocates with its own malloc and is not counted).
    pub allocations_per_record: f64,
}

impl Counting {
    pub fn new(rt: Snapshot, tally: StoreTally, phases: Phases) -> Counting {
        let b = tally.claim_rounds.max(1) as f64;
        Counting {
            batches: tally.claim_rounds,
            records_per_batch: tally.claimed as f64 / b,
            store_rounds_per_batch: tally.rounds as f64 / b,
            round_trips_per_batch: rt.protocol_round_trips() as f64 / b,
            commands_per_batch: rt.protocol_commands as f64 / b,
            round_trips_per_store_round: rt.protocol_round_trips() as f64
                / tally.rounds.max(1) as f64,
            round_trips: rt,
            tally,
            phases,
            allocations_per_record: 0.0,
        }
    }
}

pub(crate) fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

pub(crate) fn rss_mb(pid: u32) -> f64 {
    status_bytes(pid, "VmRSS").unwrap_or(0) as f64 / 1048576.0
}

pub(crate) struct Cpu {
    /// Unix µs of the reading.
    at_us: i64,
    children: Vec<f64>,
    /// The broker's JVM.
    kafka: f64,
    redis: f64,
    /// The PostgreSQL server's processes, when there is one.
    database: Option<f64>,
    harness: f64,
    machine: f64,
}

impl Cpu {
    /// Busy time of everything but the run's own processes since `before`.
    fn other_since(&self, before: &Cpu) -> f64 {
        let ours = (self.children.iter().sum::<f64>() - before.children.iter().sum::<f64>())
            + (self.kafka - before.kafka)
            + (self.redis - before.redis)
            + (self.database.unwrap_or(0.0) - before.database.unwrap_or(0.0))
            + (self.harness - before.harness);
        (self.machine - before.machine - ours).max(0.0)
    }
}

pub(crate) fn cpu_now(setup: &Setup, children: &[ChildProcess]) -> Cpu {
    Cpu {
        at_us: unix_us(),
        children: children
            .iter()
            .map(|c| cpu_seconds(c.pid).unwrap_or(0.0))
            .collect(),
        kafka: cpu_seconds(setup.broker.server.pid()).unwrap_or(0.0),
        redis: cpu_seconds(setup.redis.server.pid()).unwrap_or(0.0),
        database: setup.postgres.as_ref().map(PgServer::cpu_seconds),
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

/// Where a replica's config points: the broker, the store (redis-server,
/// the round-trip proxy, or the PostgreSQL server) and the batch size.
#[derive(Clone, Copy)]
pub(crate) struct Endpoints<'a> {
    pub brokers: &'a str,
    pub store_url: &'a str,
    pub batch: usize,
}

pub(crate) fn config(
    at: &Endpoints,
    dataset: &Dataset,
    mode: Mode,
    group: &str,
    out: &str,
) -> String {
    let brokers = at.brokers;
    let stream = match mode {
        Mode::Exact | Mode::ExactKeys | Mode::ExactlyOnce | Mode::Postgres => "mode = \"exact\"\nttl = { horizon = \"9h20m\", outage = \"2h\" }\n".to_string(),
        Mode::RedisBloom | Mode::Bitmap => format!(
            "mode = \"tiered\"\nttl = {{ explicit = \"{HORIZON_S}s\" }}\ntier1_ttl = \"1h\"\nfilter_slots = 2\nfp_rate = 0.001\npeak_rate = {}\n",
            sizing(dataset).0
        ),
    };
    let filter = match mode {
        Mode::RedisBloom => "redisbloom",
        _ => "bitmap",
    };
    let (top, transactional) = match mode {
        Mode::ExactlyOnce => (
            "guarantee = \"exactly-once\"\n".to_string(),
            format!("\"transactional.id\" = \"{group}-{REPLICA}\"\n"),
        ),
        _ => (String::new(), String::new()),
    };
    let store = match mode {
        Mode::Postgres => format!("kind = \"postgres\"\nurl = \"{}\"\n", at.store_url),
        _ => format!(
            "kind = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{PREFIX}\"\nfilter = \"{filter}\"\n{}",
            at.store_url,
            match mode {
                Mode::ExactKeys => "tier1_layout = \"keys\"\n",
                _ => "",
            }
        ),
    };
    format!(
        r#"{top}
[kafka]
"bootstrap.servers" = "{brokers}"
"group.id" = "{group}"
"session.timeout.ms" = "6000"
{transactional}
[store]
{store}
[metrics]
listen = "127.0.0.1:0"

[batch]
max_records = {batch}
linger = "{LINGER_MS}ms"

[[streams]]
name = "{STREAM}"
inputs = ["{raw}"]
clean = "{out}.clean"
audit = "{out}.audit"
profile = "bank-txn"
{stream}"#,
        batch = at.batch,
        raw = dataset.topic,
    )
}

impl Cpu {
    /// The common figures of a run of `records` over `seconds`, from CPU
    /// readings before and after it (`worker_cpu` from the children).
    pub fn result(
        &self,
        before: &Cpu,
        setup: &Setup,
        (name, kind): (String, Kind),
        (records, seconds): (u64, f64),
    ) -> RunResult {
        let worker_cpu: f64 = self
            .children
            .iter()
            .zip(&before.children)
            .map(|(a, b)| a - b)
            .sum();
        let per_million = |s: f64| s / records.max(1) as f64 * 1e6;
        let kafka = self.kafka - before.kafka;
        let redis = self.redis - before.redis;
        let database = self.database.zip(before.database).map(|(a, b)| a - b);
        RunResult {
            name,
            kind,
            mode: None,
            replicas: self.children.len(),
            dataset: String::new(),
            records,
            seconds,
            records_per_s: records as f64 / seconds.max(1e-9),
            over_passthrough: None,
            cpu_window_s: (self.at_us - before.at_us) as f64 / 1e6,
            latency_p50_ms: None,
            latency_p99_ms: None,
            latency_source: String::new(),
            worker_cpu_s: worker_cpu,
            worker_cpu_s_per_million: per_million(worker_cpu),
            worker_peak_rss_mb: 0.0,
            kafka_rss_mb: rss_mb(setup.broker.server.pid()),
            redis_rss_mb: rss_mb(setup.redis.server.pid()),
            kafka_cpu_s: kafka,
            kafka_cpu_s_per_million: per_million(kafka),
            redis_cpu_s: redis,
            redis_cpu_s_per_million: per_million(redis),
            database_cpu_s: database,
            database_cpu_s_per_million: database.map(per_million),
            harness_cpu_s: self.harness - before.harness,
            other_cpu_s: self.other_since(before),
            scraped: None,
            counting: None,
            passthrough: None,
            baseline: None,
            memory: None,
            postgres_disk: None,
            check: String::new(),
            profile: None,
        }
    }
}

/// The peak resident memory of the largest of the children, MiB.
pub(crate) fn peak_rss_mb(children: &[ChildProcess]) -> f64 {
    children
        .iter()
        .map(|c| status_bytes(c.pid, "VmHWM").unwrap_or(0))
        .max()
        .unwrap_or(0) as f64
        / 1048576.0
}

/// Every distinct event novel exactly once (exact mode); in tiered mode a
/// filter false positive turns an event (and its copies) into filter
/// duplicates instead. `problems`: conflicts, lost done flags, store
/// errors, records passed unverified.
pub(crate) fn check(
    mode: Mode,
    dataset: &Dataset,
    novel: u64,
    filter: u64,
    problems: &[(&str, u64)],
) -> String {
    let ok = match mode.is_exact() {
        true => novel == dataset.events && filter == 0,
        false => novel <= dataset.events && novel + filter >= dataset.events,
    } && problems.iter().all(|(_, n)| *n == 0);
    if ok {
        return "ok".into();
    }
    let mut text = format!(
        "CHECK: novel {novel} of {} events, filter dup {filter}",
        dataset.events
    );
    for (what, n) in problems {
        text.push_str(&format!(", {what} {n}"));
    }
    text
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
        for mode in [
            Mode::Exact,
            Mode::ExactKeys,
            Mode::ExactlyOnce,
            Mode::RedisBloom,
            Mode::Bitmap,
            Mode::Postgres,
        ] {
            let at = match mode {
                Mode::Postgres => Endpoints {
                    store_url: "postgres://idemgate@127.0.0.1:5432/idemgate?sslmode=disable",
                    ..at
                },
                _ => at,
            };
            let text = config(&at, &dataset, mode, "group", "bench.out").replace(REPLICA, "0");
            let parsed = idemgate::config::Config::parse(&text);
            assert!(parsed.is_ok(), "{mode:?}: {:?}\n{text}", parsed.err());
        }
    }
}
