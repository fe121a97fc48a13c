//! `idemgate-bench e2e`: the end-to-end benchmark an operator sizes a
//! deployment with.
//!
//! On one machine, against an Apache Kafka broker (one KRaft node, from
//! the jars the test services cached) and a redis-server the bench starts
//! for itself on spare loopback ports:
//!
//! 1. loads, before anything is timed, a raw topic of N bank-txn records
//!    (200 bytes, a tenth of them redeliveries along a retry ladder);
//! 2. runs the passthrough (consume, produce, commit with the worker's own
//!    librdkafka settings and no store): the ceiling here;
//! 3. runs the worker as child processes (one replica, then two) in exact
//!    mode and in tiered mode on both tier-2 backends, and in exact mode on
//!    a PostgreSQL server of its own, each *clean*: nothing of the bench in
//!    its path (direct store connection, plain store, the product's
//!    recorder); records/s end to end, decision latency from the worker's
//!    own histogram on /metrics, CPU of the worker, Kafka, Redis and
//!    PostgreSQL per million records, Redis memory per key, PostgreSQL
//!    disk per claim;
//! 4. runs each Redis mode once more as a *counting* run (one replica by default):
//!    through the round-trip proxy and the counting store, for Redis round
//!    trips, commands and store rounds per batch and the phases of a round;
//! 5. runs `--pairs` alternated pairs of exact mode (one replica) and the
//!    passthrough on the main topic, for the ratios the targets speak of
//!    (each pair's, and their medians);
//! 6. runs a per-record baseline (one `SET NX PX` round trip per record,
//!    then produce, then commit) on the same topic;
//! 7. runs the handover: two replicas on a steady stream, one SIGTERMed,
//!    in exact mode in each guarantee; how long each partition it gave
//!    up is unserved;
//! 8. prints the table (with each run over the passthrough, and exact mode
//!    over the baseline) and writes it to `BENCHMARKS.md` and
//!    `BENCHMARKS.json` with the machine and versions.
//!
//! Layout: `idemgate_testkit::feed` (the records), `kafka` (topics, loader,
//! commit watcher), `services` (the servers it owns), `replica` and
//! `children` (the child processes and their line protocol), `runs` (what
//! the runs share), `run_workers` (clean and counting runs), `run_others`
//! (passthrough and baseline runs), `passthrough` and `baseline` (those
//! children), `pairs` (the alternated pairs), `mode` (the modes), `scrape` (a replica's /metrics), `idemgate_testkit::counting`
//! (the store decorator), `postgres` (the PostgreSQL runs' reset, disk
//! figures and report parts), `recorder` (the metrics tap) and `timeline`
//! (phases of a round), `proxy` (round trips on the wire), `memory`,
//! `profile` (perf), `handover` and `unserved` (the handover run and its
//! arithmetic), and `report`, `report_details`, `report_handover`,
//! `definitions` (the table, BENCHMARKS.md and .json).

mod baseline;
mod children;
mod definitions;
mod handover;
mod histogram;
mod kafka;
mod memory;
mod mode;
mod pairs;
mod passthrough;
mod postgres;
mod profile;
mod recorder;
mod replica;
mod report;
mod report_details;
mod report_handover;
mod report_txn;
mod run_others;
mod run_workers;
mod runs;
mod scrape;
mod services;
mod timeline;
mod unserved;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use crate::proxy;
use idemgate_testkit::feed::Workload;
use run_workers::Run;
use runs::{Dataset, Mode, Setup};
pub(crate) use services::{kafka_libs, kafka_version, on_path};
use services::{Broker, Redis};

/// `idemgate-bench e2e` options.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// Raw records to load (200-byte bank-txn JSON).
    #[arg(long, default_value_t = 2_000_000)]
    pub records: u64,
    /// Fraction of the records that are redeliveries of earlier ones.
    #[arg(long, default_value_t = 0.10)]
    pub duplicates: f64,
    /// Simulated arrival rate of first attempts, a second: how far apart
    /// in the topic an event's copies are (the first rung, 1 min, is 60 x
    /// this many records later).
    #[arg(long, default_value_t = 1000.0)]
    pub feed_rate: f64,
    /// Records for every run but exact mode with one replica (a second raw
    /// topic, generated the same way); default: the same topic as that run.
    #[arg(long)]
    pub matrix_records: Option<u64>,
    /// Partitions of the raw topic and of the outputs.
    #[arg(long, default_value_t = 8)]
    pub partitions: i32,
    /// Modes to run: exact, exact-keys (exact with tier 1 as a key per
    /// claim, the layout before grouped), exactly-once (exact with transactions),
    /// redisbloom, bitmap (all on Redis), postgres (exact on the bench's own
    /// PostgreSQL server). `--modes exact,postgres` runs those two alone
    /// (the passthrough runs unless `--no-passthrough`); `--modes=` none.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "exact,exact-keys,exactly-once,redisbloom,bitmap,postgres"
    )]
    pub modes: Vec<String>,
    /// Replica counts to run each mode with (clean runs).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub replicas: Vec<usize>,
    /// Replica counts of each Redis mode's counting run (through the proxy
    /// and the counting store, for round trips and commands); 0: skip.
    /// PostgreSQL runs have none (the proxy speaks RESP).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub counting_replicas: Vec<usize>,
    /// Guarantees of the handover run, exact mode: `exact` (at least
    /// once), `exactly-once`. Two replicas on a steady stream, one gets
    /// SIGTERM; how long each partition it gave up is unserved. Empty
    /// (`--handover=`) skips it.
    #[arg(long, value_delimiter = ',', default_value = "exact,exactly-once")]
    pub handover: Vec<String>,
    /// Skip the passthrough run (and the ratios over it).
    #[arg(long)]
    pub no_passthrough: bool,
    /// Alternated pairs of exact mode (one replica) and the passthrough on
    /// the main topic, for the ratios the targets speak of (`pairs.rs`); 0
    /// skips them (so does `--no-passthrough`).
    #[arg(long, default_value_t = 5)]
    pub pairs: usize,
    /// Records the per-record baseline processes (the first ones of the
    /// exact run's topic); 0 skips it.
    #[arg(long, default_value_t = 100_000)]
    pub baseline_records: u64,
    /// Records per batch (the worker's `batch.max_records`).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// The folder of Apache Kafka's jars, broker and tools
    /// [default: IDEMGATE_TEST_KAFKA_LIBS, from the environment or from
    /// target/test-services/env].
    #[arg(long)]
    pub kafka_libs: Option<PathBuf>,
    /// The redis-server binary [default: `redis-server` on PATH].
    #[arg(long)]
    pub redis_server: Option<PathBuf>,
    /// The RedisBloom module [default: IDEMGATE_REDISBLOOM_SO, else the
    /// module loaded by the test services' RedisBloom server].
    #[arg(long)]
    pub redisbloom_module: Option<PathBuf>,
    /// The folder of PostgreSQL's server binaries (`initdb`, `pg_ctl`)
    /// [default: where `pg_ctl` on PATH is, else the newest
    /// /usr/lib/postgresql/<version>/bin].
    #[arg(long)]
    pub postgres_bin: Option<PathBuf>,
    /// Also profile exact mode with one replica under `perf` (an extra run,
    /// not in the table) for the closing note.
    #[arg(long)]
    pub perf: bool,
    /// Where BENCHMARKS.md and BENCHMARKS.json go.
    #[arg(long, default_value = ".")]
    pub out_dir: PathBuf,
    /// Print the table only; write no files.
    #[arg(long)]
    pub no_write: bool,
    /// Where logs, specs and profiles of the run go.
    #[arg(long, default_value = "target/bench")]
    pub work_dir: PathBuf,
}

/// Runs one of the bench's child processes from its spec file.
pub async fn replica(spec: &std::path::Path) -> Result<()> {
    replica::run(spec).await
}

/// Runs the bench.
pub async fn run(args: BenchArgs) -> Result<()> {
    // Dropping the bench future on a signal kills every process it owns.
    tokio::select! {
        result = bench(args) => result,
        _ = idemgate::app::shutdown_signal() => bail!("interrupted: the servers and replicas of this run were stopped"),
    }
}

async fn redisbloom_module(args: &BenchArgs) -> Option<PathBuf> {
    if let Some(path) = &args.redisbloom_module {
        return Some(path.clone());
    }
    if let Ok(path) = std::env::var("IDEMGATE_REDISBLOOM_SO") {
        return Some(PathBuf::from(path));
    }
    let url = services::test_services_env("IDEMGATE_TEST_REDISBLOOM_URL")?;
    services::module_field(&url, "bf", "path")
        .await
        .ok()
        .flatten()
        .map(PathBuf::from)
}

fn unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn load(setup: &Setup, name: &str, records: u64, args: &BenchArgs) -> Result<Dataset> {
    let end_ms = idemgate::worker::wall_ms();
    let workload = Workload::generate(records, args.duplicates, args.feed_rate, end_ms);
    let topic = format!("{}.{name}", setup.run_id);
    kafka::create_topics(&setup.broker.brokers, &[&topic], setup.partitions).await?;
    let loaded = kafka::load(&setup.broker.brokers, &topic, setup.partitions, &workload).await?;
    if loaded.records != workload.records.len() as u64 {
        bail!(
            "loaded {} of {} records",
            loaded.records,
            workload.records.len()
        );
    }
    Ok(Dataset {
        topic,
        records: loaded.records,
        events: workload.events,
        copies: workload.copies,
        per_rung: workload.per_rung.to_vec(),
        load_seconds: loaded.seconds,
        loaded,
    })
}

async fn bench(args: BenchArgs) -> Result<()> {
    let started = std::time::Instant::now();
    if args.records == 0 || args.partitions <= 0 || args.batch == 0 || args.feed_rate <= 0.0 {
        bail!("--records, --partitions, --batch and --feed-rate must be above zero");
    }
    let modes: Vec<Mode> = args
        .modes
        .iter()
        .filter(|m| !m.is_empty())
        .map(|m| Mode::parse(m))
        .collect::<Result<_>>()?;
    let handovers = handover::modes(&args.handover)?;
    let kafka_libs = kafka_libs(args.kafka_libs.as_deref())?;
    let redis_bin = args
        .redis_server
        .clone()
        .or_else(|| on_path("redis-server"))
        .context("no redis-server on PATH: pass --redis-server")?;
    let pg_bin = match modes.contains(&Mode::Postgres) {
        true => Some(crate::pg_server::bin_dir(args.postgres_bin.as_deref())?),
        false => None,
    };
    let module = redisbloom_module(&args).await;
    if module.is_none() && modes.contains(&Mode::RedisBloom) {
        bail!("tiered mode on RedisBloom needs the module: pass --redisbloom-module, or leave redisbloom out of --modes");
    }

    let run_id = format!("bench-{}", unix_s());
    let dir = std::path::absolute(args.work_dir.join(&run_id))?;
    std::fs::create_dir_all(&dir)?;
    eprintln!("bench {run_id}: logs in {}", dir.display());
    let broker = Broker::start(&kafka_libs, &dir).await?;
    let redis = Redis::start(&redis_bin, module.as_deref(), &dir).await?;
    let postgres = match pg_bin {
        Some(bin) => {
            let dir = dir.clone();
            Some(
                tokio::task::spawn_blocking(move || crate::pg_server::PgServer::start(&bin, &dir))
                    .await
                    .context("starting PostgreSQL")??,
            )
        }
        None => None,
    };
    let upstream = format!("127.0.0.1:{}", redis.server.port).parse()?;
    let (proxy_address, proxy) = proxy::start(upstream).await?;
    let setup = Setup {
        broker,
        redis,
        postgres,
        proxy_url: format!("redis://{proxy_address}"),
        proxy,
        dir,
        exe: std::env::current_exe()?,
        run_id,
        batch: args.batch,
        partitions: args.partitions,
    };

    let main = load(&setup, "raw", args.records, &args).await?;
    let matrix = match args.matrix_records {
        Some(m) if m != args.records => Some(load(&setup, "raw-matrix", m, &args).await?),
        _ => None,
    };
    let passthrough = match args.no_passthrough {
        false => Some(run_others::passthrough(&setup, &main, "").await?),
        true => None,
    };
    let dataset_of = |mode: Mode, replicas: usize| match &matrix {
        Some(smaller) if !(mode == Mode::Exact && replicas == 1) => smaller,
        _ => &main,
    };
    let mut results = Vec::new();
    let mut counting = Vec::new();
    for &mode in &modes {
        for &replicas in &args.replicas {
            let dataset = dataset_of(mode, replicas);
            results.push(run_workers::clean(&setup, dataset, mode, replicas, Run::Table).await?);
        }
        // The counting runs count Redis round trips through the RESP proxy.
        let counted = match mode {
            Mode::Postgres => &[][..],
            _ => &args.counting_replicas[..],
        };
        for &replicas in counted.iter().filter(|r| **r > 0) {
            let dataset = dataset_of(mode, replicas);
            counting.push(run_workers::counting(&setup, dataset, mode, replicas).await?);
        }
    }
    let pairs = match args.no_passthrough {
        false => pairs::run(&setup, &main, args.pairs).await?,
        true => None,
    };
    let baseline = if args.baseline_records > 0 {
        let records = args.baseline_records.min(main.records);
        Some(run_others::baseline(&setup, &main, records).await?)
    } else {
        None
    };
    let mut handover_runs = Vec::new();
    for &mode in &handovers {
        handover_runs.push(handover::run(&setup, mode, args.duplicates).await?);
    }
    let profiled = if args.perf {
        let dataset = matrix.as_ref().unwrap_or(&main);
        Some(run_workers::clean(&setup, dataset, Mode::Exact, 1, Run::Profiled).await?)
    } else {
        None
    };
    let mut datasets = vec![main.clone()];
    datasets.extend(matrix.clone());
    // The raw topics too: a bench leaves no gigabytes of log behind.
    let raw: Vec<String> = datasets.iter().map(|d| d.topic.clone()).collect();
    kafka::delete_topics(&setup.broker.brokers, &raw).await?;
    let report = report::Report::new(
        &args,
        &setup,
        datasets,
        report::Runs {
            clean: results,
            counting,
            passthrough,
            baseline,
            profiled,
            pairs,
            handovers: handover_runs,
        },
        started.elapsed().as_secs_f64(),
    );
    println!("{}", report.table());
    if let Some(pairs) = &report.pairs {
        println!("{}", pairs.table());
    }
    println!("{}", report.handover_table());
    if !args.no_write {
        std::fs::create_dir_all(&args.out_dir)?;
        let md = args.out_dir.join("BENCHMARKS.md");
        let json = args.out_dir.join("BENCHMARKS.json");
        // What the file keeps by hand (its history) survives the run.
        let previous = std::fs::read_to_string(&md).unwrap_or_default();
        std::fs::write(&md, definitions::with_history(report.markdown(), &previous))?;
        std::fs::write(&json, serde_json::to_string_pretty(&report)?)?;
        eprintln!("wrote {} and {}", md.display(), json.display());
    }
    // Gigabytes of topic data otherwise stay in the run's folder.
    setup.broker.server.stop_and_remove_data()?;
    Ok(())
}
