//! The handover run, per guarantee: how long a partition is unserved
//! while it moves from a replica that stops to the one that stays.
//!
//! Two clean replicas (exact mode, at least once or exactly once) read a
//! steady stream the harness produces at `RATE` records/s; each writes its
//! own clean and audit topics (`<group>.r<N>.clean`, their names alone
//! differ), so an output says which replica decided it. A reader in the
//! harness (`read_committed`, `fetch.wait.max.ms` 10; it sits in no
//! replica's path) notes every output: the replica, the input partition
//! its `idemgate-input` header names, and when it read it. Once the group
//! is steady (`STEADY`: every partition flowing from one replica, both
//! serving) replica 0 gets SIGTERM, what a rolling restart sends. For
//! each partition replica 0 was serving, the unserved time runs from that
//! signal to the first output of replica 1 on it that the reader saw
//! (`unserved.rs`). The signal, not the revoke: the stop's drain, its
//! commit and the group's rebalance are all inside it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde::Serialize;

use super::children::ChildProcess;
use super::kafka::{create_topics, Loaded};
use super::replica::{Report, Role, CONNECTED, GO, REPORT, STOP};
use super::runs::{config, unix_us, Dataset, Endpoints, Mode, Setup, REPLICA};
use super::unserved::{self, Figures, Moved, Seen};
use idemgate_testkit::feed::Workload;

/// The stream's records/s, over every partition.
pub(crate) const RATE: u64 = 2_000;
/// How long every partition must have flowed from one replica before the
/// signal.
const STEADY: Duration = Duration::from_secs(2);
/// After the steady window, before the signal: the window's outputs are
/// read in it.
const VISIBLE_GRACE: Duration = Duration::from_secs(1);
/// How long the new owner has to serve every moved partition.
const SERVE_BOUND: Duration = Duration::from_secs(30);

/// One guarantee's handover.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct HandoverResult {
    pub mode: Mode,
    pub partitions: i32,
    pub records_per_s: u64,
    /// From the signal to the leaving replica's report (its worker
    /// returned: committed, left the group), seconds.
    pub stop_s: f64,
    pub moved: Vec<Moved>,
    pub figures: Figures,
    /// `ok`, or which moved partitions were not served within the bound.
    pub check: String,
    /// The steady stream's visibility latency, over the `STEADY` before
    /// the signal.
    pub visible: unserved::Visible,
}

/// The modes `--handover` names: exact mode in either guarantee.
pub(crate) fn modes(names: &[String]) -> Result<Vec<Mode>> {
    names
        .iter()
        .filter(|n| !n.is_empty())
        .map(|n| match Mode::parse(n)? {
            mode @ (Mode::Exact | Mode::ExactlyOnce) => Ok(mode),
            _ => bail!("--handover: {n} is not exact or exactly-once"),
        })
        .collect()
}

/// The handover run of `mode`.
pub(crate) async fn run(setup: &Setup, mode: Mode, duplicates: f64) -> Result<HandoverResult> {
    let name = format!("handover-{}", mode.short());
    let label = format!("handover, {}", mode.label());
    let group = format!("{}.{name}", setup.run_id);
    let raw = format!("{group}.raw");
    let outputs: Vec<(String, usize)> = (0..2)
        .flat_map(|r| ["clean", "audit"].map(|kind| (format!("{group}.r{r}.{kind}"), r)))
        .collect();
    let mut topics = vec![raw.as_str()];
    topics.extend(outputs.iter().map(|(t, _)| t.as_str()));
    create_topics(&setup.broker.brokers, &topics, setup.partitions).await?;
    // Claims of earlier runs would make this stream's events duplicates.
    let mut conn = super::services::connect(&setup.redis.url).await?;
    super::memory::reset(&mut conn).await?;
    let dataset = Dataset {
        topic: raw.clone(),
        records: 0,
        events: 0,
        copies: 0,
        per_rung: Vec::new(),
        load_seconds: 0.0,
        loaded: Loaded {
            topic: raw.clone(),
            ends: Vec::new(),
            records: 0,
            seconds: 0.0,
        },
    };
    let endpoints = Endpoints {
        brokers: &setup.broker.brokers,
        store_url: &setup.redis.url,
        batch: setup.batch,
    };
    let text = config(
        &endpoints,
        &dataset,
        mode,
        &group,
        &format!("{group}.r{REPLICA}"),
    );
    coordinator(&setup.broker.brokers, &group, &raw).await?;
    let mut children = Vec::new();
    for r in 0..2 {
        let role = Role::Worker {
            config: text.replace(REPLICA, &r.to_string()),
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
    let done = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let reader = reader(&setup.broker.brokers, outputs, &seen, &done)?;
    let producer = stream(
        &setup.broker.brokers,
        &raw,
        setup.partitions,
        duplicates,
        &done,
    )?;
    for child in &mut children {
        child.send(GO).await?;
    }
    let result = measure(setup, mode, &label, &mut children, &seen).await;
    done.store(true, Ordering::SeqCst);
    let _ = tokio::task::spawn_blocking(move || (reader.join(), producer.join())).await;
    let survivor = &mut children[1];
    survivor.send(STOP).await?;
    let Report::Worker = survivor.report(Duration::from_secs(60)).await? else {
        bail!("{label}: the replica that stayed sent another report");
    };
    result
}

/// Waits for the steady state, signals replica 0 and waits until replica 1
/// served every partition it gave up (or the bound passed).
async fn measure(
    setup: &Setup,
    mode: Mode,
    label: &str,
    children: &mut [ChildProcess],
    seen: &Mutex<Vec<Seen>>,
) -> Result<HandoverResult> {
    let snapshot = || seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let until = Instant::now() + Duration::from_secs(90);
    // Polling the reader's notes: the group settles when the broker says.
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = unix_us();
        if unserved::steady(
            &snapshot(),
            now,
            STEADY.as_micros() as i64,
            setup.partitions,
            2,
        ) {
            break;
        }
        for child in children.iter_mut() {
            if child.exited() {
                bail!("{label}: a replica exited\n{}", child.tail());
            }
        }
        if Instant::now() > until {
            bail!("{label}: the two replicas did not settle to a steady stream within 90 s");
        }
    }
    // A wait on the broker, not on the worker's clock: the harness's
    // read_committed reader (its own thread) goes on fetching the steady
    // window's outputs for a grace second before the signal; a latency
    // above it would show as outputs missing.
    let steady_ms = unix_us() / 1000;
    tokio::time::sleep(VISIBLE_GRACE).await;
    let visible = unserved::visible(
        &snapshot(),
        steady_ms - STEADY.as_millis() as i64,
        steady_ms,
    );
    eprintln!(
        "{label}: steady (visible p50 {:?} ms, p99 {:?} ms over {} outputs); SIGTERM to replica 0",
        visible.p50_ms, visible.p99_ms, visible.outputs
    );
    let signal_us = unix_us();
    idemgate_testkit::servers::signal(children[0].pid, "TERM");
    // Its worker returned (committed, left the group) when it reports.
    children[0].expect(REPORT, Duration::from_secs(90)).await?;
    let stop_s = (unix_us() - signal_us) as f64 / 1e6;
    // The signal won over the read of its stdin, which a line lets go: the
    // process then exits.
    let _ = children[0].send(STOP).await;
    if !children[0].wait_exit(Duration::from_secs(30)).await {
        bail!(
            "{label}: the leaving replica did not exit\n{}",
            children[0].tail()
        );
    }
    let until = Instant::now() + SERVE_BOUND;
    let moved = loop {
        let moved = unserved::moved(&snapshot(), 0, signal_us);
        if moved.iter().all(|m| m.unserved_ms.is_some()) || Instant::now() > until {
            break moved;
        }
        // Polling the reader's notes for the new owner's first outputs.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let figures = unserved::figures(&moved);
    let missing: Vec<String> = moved
        .iter()
        .filter(|m| m.unserved_ms.is_none())
        .map(|m| m.partition.to_string())
        .collect();
    let check = match (moved.is_empty(), missing.is_empty()) {
        (true, _) => "CHECK: replica 0 served no partition at the signal".into(),
        (false, true) => "ok".into(),
        (false, false) => format!(
            "CHECK: partitions {} not served within {} s of the signal",
            missing.join(", "),
            SERVE_BOUND.as_secs()
        ),
    };
    eprintln!(
        "{label}: {} partitions moved, unserved median {:?} ms, max {:?} ms; the leaving replica stopped in {stop_s:.2} s",
        figures.moved, figures.median_ms, figures.max_ms
    );
    Ok(HandoverResult {
        mode,
        partitions: setup.partitions,
        records_per_s: RATE,
        stop_s,
        moved,
        figures,
        check,
        visible,
    })
}

/// Waits until the group's coordinator answers: a replica refuses to
/// start on `NotCoordinator` (a fresh broker creates `__consumer_offsets`
/// on the first group request, then loads it), and this run may be the
/// broker's first group.
async fn coordinator(brokers: &str, group: &str, topic: &str) -> Result<()> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()?;
    let mut list = TopicPartitionList::new();
    list.add_partition(topic, 0);
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let asked = list.clone();
        let answer = tokio::task::block_in_place(|| {
            consumer.committed_offsets(asked, Duration::from_secs(5))
        });
        match answer {
            Ok(_) => return Ok(()),
            Err(error) if Instant::now() > until => {
                return Err(error).context("the group's coordinator did not answer within 60 s")
            }
            // Polling the coordinator: it says nothing when it is loaded.
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Reads every output topic from its start until `done`, noting each
/// output (`outputs`: topic and the replica that writes it).
fn reader(
    brokers: &str,
    outputs: Vec<(String, usize)>,
    seen: &Arc<Mutex<Vec<Seen>>>,
    done: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "idemgate-bench-handover-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "10")
        .create()
        .context("creating the handover reader")?;
    let mut list = TopicPartitionList::new();
    let partitions = consumer
        .fetch_metadata(Some(&outputs[0].0), Duration::from_secs(10))?
        .topics()
        .first()
        .map_or(0, |t| t.partitions().len() as i32);
    for (topic, _) in &outputs {
        for p in 0..partitions {
            list.add_partition_offset(topic, p, Offset::Beginning)?;
        }
    }
    consumer.assign(&list)?;
    let (seen, done) = (seen.clone(), done.clone());
    Ok(std::thread::spawn(move || {
        while !done.load(Ordering::SeqCst) {
            let Some(Ok(message)) = consumer.poll(Duration::from_millis(50)) else {
                continue;
            };
            let at_us = unix_us();
            let replica = outputs
                .iter()
                .find(|(t, _)| t == message.topic())
                .map(|(_, r)| *r);
            let partition = message.headers().and_then(|h| {
                h.iter()
                    .find(|h| h.key == idemgate::decision::INPUT)
                    .and_then(|h| unserved::input_partition(h.value?))
            });
            if let (Some(replica), Some(partition)) = (replica, partition) {
                seen.lock().unwrap_or_else(|e| e.into_inner()).push(Seen {
                    replica,
                    partition,
                    at_us,
                    produced_ms: message.timestamp().to_millis(),
                });
            }
        }
    }))
}

/// Produces the stream to `topic` at `RATE` records/s, a slice every
/// 10 ms, until `done`.
fn stream(
    brokers: &str,
    topic: &str,
    partitions: i32,
    duplicates: f64,
    done: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "2")
        .create()
        .context("creating the handover stream's producer")?;
    // Enough for the longest run: the settling bound, the stop, the serve
    // bound.
    let workload = Workload::generate(
        RATE * 240,
        duplicates,
        RATE as f64,
        idemgate::worker::wall_ms(),
    );
    let (topic, done) = (topic.to_string(), done.clone());
    Ok(std::thread::spawn(move || {
        let started = Instant::now();
        let mut sent = 0usize;
        while !done.load(Ordering::SeqCst) && sent < workload.records.len() {
            let due = (started.elapsed().as_secs_f64() * RATE as f64) as usize;
            for planned in &workload.records[sent..due.min(workload.records.len())] {
                let (key, payload) = workload.render(planned);
                let attempt = planned.attempt.to_string();
                let record = BaseRecord::to(&topic)
                    .partition(workload.partition(planned.event, partitions))
                    .key(key.as_bytes())
                    .payload(&payload[..])
                    .headers(OwnedHeaders::new().insert(Header {
                        key: "x-delivery-attempt",
                        value: Some(attempt.as_bytes()),
                    }));
                if let Err((error, _)) = producer.send(record) {
                    eprintln!("handover stream: a record was not queued: {error}");
                }
            }
            sent = sent.max(due.min(workload.records.len()));
            producer.poll(Duration::ZERO);
            // The stream's pace: a slice every 10 ms.
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = producer.flush(Duration::from_secs(10));
    }))
}
