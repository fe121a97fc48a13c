//! One guarantee's soak run: its own broker, store server and topics; the replicas
//! started; the producer writing the workload paced over the window on a
//! thread while the faults are applied on this one; the drain (bounded);
//! a graceful stop; the inputs read back; the verdict.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use idemgate_testkit::kafka::{create_topics, Producer};
use idemgate_testkit::link::Link;
use serde::Serialize;

use super::collect::{Collector, Seen};
use super::config::{replica_toml, Common, Guarantee, Topics};
use super::faults::{self, Applied, Lengths, Targets};
use super::pauses;
use super::plan::{Plan, Shape, BANK, TELEMETRY};
use super::store::{Binaries, SoakStore, StoreKind};
use super::verdict::{judge, Figures, Keeping};
use super::world::{Broker, Replicas};
use super::SoakArgs;

pub(crate) struct Setup<'a> {
    pub args: &'a SoakArgs,
    pub guarantee: Guarantee,
    pub kafka_libs: &'a Path,
    pub store: StoreKind,
    pub bins: &'a Binaries<'a>,
    pub dir: &'a Path,
    pub exe: &'a Path,
    pub seed: u64,
}

/// What one guarantee's run found.
#[derive(Debug, Serialize)]
pub(crate) struct RunResult {
    pub guarantee: Guarantee,
    pub store: StoreKind,
    pub started_utc: String,
    pub broker_version: String,
    pub store_version: String,
    /// The server settings the report names (PostgreSQL's).
    pub store_settings: Vec<(String, String)>,
    /// Where the server keeps its data, on which file system (PostgreSQL).
    pub store_data: String,
    pub read_committed: bool,
    pub faults: Vec<Applied>,
    pub unexpected_exits: Vec<String>,
    pub stops: Vec<String>,
    pub produce_seconds: f64,
    pub drain_seconds: f64,
    /// Why the run did not drain in time, if it did not.
    pub not_drained: Option<String>,
    pub total_seconds: f64,
    /// Claims not settled after the graceful stop (must be 0).
    pub unsettled_claims: usize,
    pub unsettled_examples: Vec<String>,
    pub streams: Vec<Figures>,
}

pub(crate) fn run(s: &Setup<'_>) -> Result<RunResult> {
    let args = s.args;
    let started = Instant::now();
    let started_utc = faults::utc_now();
    let name = s.guarantee.name();
    eprintln!(
        "soak {name}: starting the broker and {} in {}",
        s.store.name(),
        s.dir.display()
    );
    let mut broker = Broker::start(s.kafka_libs, s.dir)?;
    let mut store = SoakStore::start(s.store, s.bins, s.dir)?;
    let run_id = format!("soak-{}", &name[..5]);
    let topics = Topics::named(&run_id, args.partitions);
    let all: Vec<(String, i32)> = topics
        .inputs()
        .into_iter()
        .chain(topics.outputs())
        .collect();
    let refs: Vec<(&str, i32)> = all.iter().map(|(t, p)| (t.as_str(), *p)).collect();
    create_topics(&broker.brokers, &refs);
    // The replicas reach the store through a link the faults can cut; the
    // soak's own checks (the unsettled claims) go to it directly.
    let (link, store_url) = Link::for_url(&store.url());
    let common = Common {
        guarantee: s.guarantee,
        brokers: &broker.brokers,
        group: &format!("{run_id}-group"),
        store: s.store,
        store_url: &store_url,
        key_prefix: &format!("{run_id}:"),
        topics: &topics,
        tier1_ttl_s: args.tier1_ttl,
        batch: args.batch,
    };
    let configs = (0..args.replicas)
        .map(|n| replica_toml(&common, n))
        .collect();
    let mut replicas = Replicas::start(s.exe, s.dir, configs)?;
    let read_committed = s.guarantee == Guarantee::ExactlyOnce;
    let collector = Collector::start(
        &broker.brokers,
        &topics.outputs(),
        topics.input.clone(),
        read_committed,
    );

    // The producer: the workload paced over the window, chunk by chunk.
    let shape = Shape {
        records: args.records,
        bank_share: args.bank_share,
        chunk: ((args.records as f64 / args.window.max(1.0)) as usize).clamp(500, 20_000),
        vehicles: 200,
        accounts: 500,
    };
    let gate = Arc::new(Mutex::new(()));
    let producer = {
        let (brokers, topics, gate) = (broker.brokers.clone(), topics.clone(), gate.clone());
        let (window, seed, tag) = (args.window, s.seed, run_id.clone());
        std::thread::spawn(move || produce(&brokers, &topics, &gate, shape, window, seed, &tag))
    };

    // Faults start once the group has formed and split every partition,
    // so the first one meets replicas at work.
    let formed = Instant::now();
    while replicas.assigned() < 2 * args.partitions as usize {
        replicas.watch(started.elapsed().as_secs_f64());
        if formed.elapsed() > Duration::from_secs(120) {
            bail!(
                "soak {name}: the group did not form within 120 s ({} of {} partitions assigned); logs in {}",
                replicas.assigned(),
                2 * args.partitions,
                s.dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let offset = started.elapsed().as_secs_f64();
    eprintln!("soak {name}: the group formed at +{offset:.1}s; faults from now on");
    let lengths = Lengths {
        freeze: args.freeze,
        store_down: args.redis_down,
        link_cut: args.link_cut,
    };
    let schedule = faults::schedule(args.window, lengths, s.store, s.guarantee);
    let mut applied = Vec::new();
    let mut next_free = 0.0f64;
    {
        let mut targets = Targets {
            replicas: &mut replicas,
            store: &mut store,
            broker: &mut broker,
            link: &link,
            producer_gate: gate.clone(),
            start: started,
        };
        for (at, fault) in &schedule {
            // At its planned second, or once the one before has ended
            // (`--gap` seconds ago, none by default).
            let at = (offset + at).max(next_free);
            while started.elapsed().as_secs_f64() < at {
                targets.replicas.watch(started.elapsed().as_secs_f64());
                std::thread::sleep(Duration::from_millis(100));
            }
            let done = faults::apply(fault, &mut targets)?;
            eprintln!(
                "soak {name}: +{:.1}s {} ({:.1}s): {}",
                done.at_s, done.fault, done.took_s, done.note
            );
            next_free = started.elapsed().as_secs_f64() + args.gap;
            applied.push(done);
        }
    }
    while !producer.is_finished() {
        replicas.watch(started.elapsed().as_secs_f64());
        std::thread::sleep(Duration::from_millis(200));
    }
    let plan = match producer.join() {
        Ok(plan) => plan?,
        Err(_) => bail!("the soak's producer panicked (see above)"),
    };
    let produce_seconds = started.elapsed().as_secs_f64();
    let produced_at_ms = faults::unix_ms();
    let produced = [plan.expected[BANK].len(), plan.expected[TELEMETRY].len()];
    eprintln!("soak {name}: produced {produced:?} in {produce_seconds:.1}s; draining");

    // The drain: every input has an output, within the bound.
    let drain_start = Instant::now();
    let mut last = Instant::now();
    let mut drained: Option<String> = None;
    loop {
        replicas.watch(started.elapsed().as_secs_f64());
        let seen = collector.inputs_seen();
        if seen[0] >= produced[0] && seen[1] >= produced[1] {
            break;
        }
        if drain_start.elapsed().as_secs_f64() > args.drain_timeout {
            drained = Some(format!(
                "did NOT drain within {:.0} s: inputs with an output {seen:?} of {produced:?}",
                args.drain_timeout
            ));
            eprintln!("soak {name}: {}", drained.as_deref().unwrap_or_default());
            break;
        }
        if last.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "soak {name}: drained {seen:?} of {produced:?} ({} outputs)",
                collector.records()
            );
            last = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let drain_seconds = drain_start.elapsed().as_secs_f64();
    // A doubled output arrives now or not at all; then the graceful stop
    // publishes what is finished.
    std::thread::sleep(Duration::from_secs(5));
    let stops = replicas.stop_all(Duration::from_secs(90));
    // What the stops published (acknowledged before each replica exited)
    // reaches the collector, which polls every 100 ms, within this.
    std::thread::sleep(Duration::from_secs(2));
    let unexpected_exits = std::mem::take(&mut replicas.unexpected_exits);
    let outputs = collector.finish();
    eprintln!(
        "soak {name}: {} outputs; reading the inputs back",
        outputs.len()
    );
    note_pauses(&mut applied, produced_at_ms, &outputs);
    let coords = read_back(&broker.brokers, &topics, &produced, read_committed)?;
    let unsettled = store.unsettled(&format!("{run_id}:"))?;

    let mut streams = Vec::new();
    for stream in [BANK, TELEMETRY] {
        let outs: Vec<(bool, &Seen)> = outputs
            .iter()
            .filter(|o| o.topic as usize / 2 == stream)
            .map(|o| (o.topic % 2 == 0, o))
            .collect();
        let fail_open = stream == TELEMETRY;
        // Telemetry on PostgreSQL: exact, its TTL the short tier-1 one.
        let tiered = fail_open && s.store == StoreKind::Redis;
        let keeping = Keeping {
            fail_open,
            expiring: fail_open && !tiered,
        };
        let mut figures = judge(
            stream,
            &plan.expected[stream],
            &coords[stream].0,
            &outs,
            keeping,
        );
        figures.read_back = coords[stream].1;
        figures.inputs_written_twice = coords[stream].2;
        figures.mode = if tiered { "tiered" } else { "exact" }.into();
        figures.fail_mode = if fail_open { "open" } else { "closed" }.into();
        streams.push(figures);
    }
    Ok(RunResult {
        guarantee: s.guarantee,
        store: s.store,
        started_utc,
        broker_version: broker.version.clone(),
        store_version: store.version(),
        store_settings: store.settings(),
        store_data: store.data_dir(),
        read_committed,
        faults: applied,
        unexpected_exits,
        stops,
        produce_seconds,
        drain_seconds,
        not_drained: drained,
        total_seconds: started.elapsed().as_secs_f64(),
        unsettled_claims: unsettled.len(),
        unsettled_examples: unsettled.into_iter().take(5).collect(),
        streams,
    })
}

/// Sets on each fault the longest stop of decisions that began in its
/// window (`pauses.rs`), from the outputs read.
fn note_pauses(applied: &mut [Applied], produced_at_ms: i64, outputs: &[Seen]) {
    let mut decisions = pauses::Decisions::new();
    for o in outputs {
        if let (Some(at), Some(p)) = (o.decided_at, o.input_partition) {
            decisions
                .entry((o.topic as usize / 2, p))
                .or_default()
                .push(at);
        }
    }
    let starts: Vec<i64> = applied.iter().map(|f| f.at_unix_ms).collect();
    for (fault, pause) in applied.iter_mut().zip(pauses::longest(
        &starts,
        produced_at_ms,
        &decisions,
        &super::plan::STREAMS,
    )) {
        fault.pause = pause;
    }
}

/// Writes the workload, paced so it spans `window` seconds; returns the
/// plan (the oracle). Holds `gate` for each chunk, so a broker restart
/// never meets a chunk in flight.
fn produce(
    brokers: &str,
    topics: &Topics,
    gate: &Mutex<()>,
    shape: Shape,
    window: f64,
    seed: u64,
    tag: &str,
) -> Result<Plan> {
    let producer = Producer::new(brokers);
    let mut plan = Plan::new(tag, shape, seed);
    let start = Instant::now();
    let rate = shape.records as f64 / window.max(1.0);
    while !plan.done() {
        let due = Duration::from_secs_f64(plan.produced() as f64 / rate);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        let _held = gate.lock().expect("producer gate");
        let chunk = plan.next_chunk(plan.only_late_left());
        for (stream, records) in chunk.iter().enumerate() {
            if !records.is_empty() {
                producer.send(
                    &topics.input[stream],
                    records,
                    records.len(),
                    Duration::ZERO,
                );
            }
        }
    }
    Ok(plan)
}

/// By stream: where each input is in the log (by its number), how many
/// were read back, and how many the log holds twice.
type Coords = (Vec<Option<(i32, i64)>>, usize, usize);

fn read_back(
    brokers: &str,
    topics: &Topics,
    produced: &[usize; 2],
    read_committed: bool,
) -> Result<[Coords; 2]> {
    let reader = Collector::start(
        brokers,
        &topics.inputs(),
        topics.input.clone(),
        read_committed,
    );
    let until = Instant::now() + Duration::from_secs(300);
    loop {
        let seen = reader.inputs_seen();
        if (seen[0] >= produced[0] && seen[1] >= produced[1]) || Instant::now() > until {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // Every input has been read once: a second copy in the log (the
    // producer's own retry) comes after it, within this.
    std::thread::sleep(Duration::from_secs(1));
    let records = reader.finish();
    let mut out: [Coords; 2] = [
        (vec![None; produced[0]], 0, 0),
        (vec![None; produced[1]], 0, 0),
    ];
    let mut count: HashMap<(u8, u32), usize> = HashMap::new();
    for record in &records {
        let Some((stream, n)) = record.input else {
            continue;
        };
        let entry = count.entry((stream, n)).or_default();
        *entry += 1;
        let slot = &mut out[stream as usize];
        if *entry == 1 {
            slot.1 += 1;
            if let Some(at) = slot.0.get_mut(n as usize) {
                *at = Some((record.partition, record.offset));
            }
        } else if *entry == 2 {
            slot.2 += 1;
        }
    }
    if out[0].1 < produced[0] || out[1].1 < produced[1] {
        eprintln!(
            "soak: WARNING: read back {} and {} of {produced:?} inputs",
            out[0].1, out[1].1
        );
    }
    Ok(out)
}
