//! `idemgate demo`: the whole product on one machine with no external
//! service. An in-process Kafka cluster (librdkafka's mock brokers, real
//! wire protocol), the memory store on event time, two worker replicas in
//! one consumer group, a realistic at-least-once workload, and a check that
//! every distinct event reached the clean topic exactly once.

pub mod mock;
mod say;
pub(crate) use say::NEXT;
pub(crate) mod workload;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, Message, TopicPartitionList};

use crate::app::Replica;
use crate::config::Config;
use crate::decision::{DECISION, TIER};
use crate::store::memory::MemoryStore;
use crate::store::ClaimStore;
use mock::MockKafka;
use workload::{Kind, Raw};

const CONFIG: &str = include_str!("../../config/demo.toml");
const PARTITIONS: i32 = 4;
/// The mock cluster's brokers, and the replicas in the consumer group.
const BROKERS: u32 = 3;
const REPLICAS: usize = 2;

/// What the demo counted, per stream.
#[derive(Default, Debug)]
pub struct Tally {
    pub records_in: u64,
    pub novel: u64,
    pub duplicate_exact: u64,
    pub duplicate_filter: u64,
    pub conflict: u64,
    pub invalid: u64,
    pub unverified: u64,
    /// What the generator meant.
    pub expected_conflicts: u64,
    pub expected_invalid: u64,
    pub distinct_events: u64,
    /// Distinct events found in the clean topic exactly once, never, twice+.
    pub exactly_once: u64,
    pub missing: u64,
    pub doubled: u64,
}

pub struct Report {
    pub streams: BTreeMap<String, Tally>,
    pub(crate) took: Duration,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.streams.values().all(|t| {
            t.missing == 0
                && t.doubled == 0
                && t.conflict == t.expected_conflicts
                && t.invalid == t.expected_invalid
                && t.novel
                    + t.duplicate_exact
                    + t.duplicate_filter
                    + t.conflict
                    + t.invalid
                    + t.unverified
                    == t.records_in
        })
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "{:<10} {:>10} {:>7} {:>10} {:>11} {:>9} {:>8} {:>10}   {}\n",
            "stream",
            "records in",
            "novel",
            "dup exact",
            "dup filter",
            "conflict",
            "invalid",
            "unverified",
            "distinct events in clean exactly once"
        ));
        for (name, t) in &self.streams {
            out.push_str(&format!(
                "{:<10} {:>10} {:>7} {:>10} {:>11} {:>9} {:>8} {:>10}   {}/{} (missing {}, doubled {})\n",
                name, t.records_in, t.novel, t.duplicate_exact, t.duplicate_filter, t.conflict,
                t.invalid, t.unverified, t.exactly_once, t.distinct_events, t.missing, t.doubled
            ));
        }
        out.push_str(&format!(
            "check: {} ({:.1}s)\n",
            if self.ok() { "every distinct event reached its clean topic exactly once; conflicts and invalid records as generated" } else { "FAILED" },
            self.took.as_secs_f64()
        ));
        out
    }
}

/// Runs the demo: `transactions` bank transactions, `vehicles` x
/// `minutes` telemetry readings. `say` gets the line that says what runs,
/// before anything starts.
pub async fn run(
    transactions: u64,
    vehicles: u64,
    minutes: u64,
    say: impl FnOnce(&str),
) -> Result<Report> {
    let started = Instant::now();
    let kafka = MockKafka::start(BROKERS, 100)?;
    let brokers = kafka.bootstrap_servers()?;
    // The brokers go in before validation, as IDEMGATE_KAFKA_BROKERS would:
    // a config without brokers is refused.
    let config = Config::parse_with_vars(CONFIG, |name| {
        (name == crate::config::ENV_BROKERS).then(|| brokers.clone())
    })
    .context("the embedded demo config")?;
    say(&say::intro(&config, REPLICAS, BROKERS));
    for stream in &config.streams {
        for topic in stream.inputs.iter().chain([&stream.clean, &stream.audit]) {
            kafka.create_topic(topic, PARTITIONS)?;
        }
    }

    let streams = config.streams.iter().map(|s| s.spec.clone()).collect();
    // The demo's store runs on event time (its config says so), as
    // `idemgate run` would build it.
    let store: Arc<dyn ClaimStore> = Arc::new(MemoryStore::on_event_time(streams));
    let mut replicas = Vec::new();
    for _ in 0..REPLICAS {
        replicas.push(Replica::start(&config, store.clone()).await?);
    }
    wait_until(Duration::from_secs(30), || {
        replicas.iter().all(Replica::assigned)
    })
    .await
    .context("the two replicas did not both get partitions")?;

    let start_ms = crate::worker::wall_ms() - 12 * 3_600_000;
    let raws = workload::generate(start_ms, transactions, vehicles, minutes);
    produce(&brokers, &raws).await?;

    let mut streams: BTreeMap<String, Tally> = BTreeMap::new();
    let mut expected_events: HashMap<String, (String, u64)> = HashMap::new();
    for raw in &raws {
        let stream = stream_of(&config, raw.topic);
        let tally = streams.entry(stream.clone()).or_default();
        tally.records_in += 1;
        match raw.kind {
            Kind::Conflict => tally.expected_conflicts += 1,
            Kind::Malformed => tally.expected_invalid += 1,
            _ => {}
        }
        if let Some(event) = &raw.event {
            expected_events.entry(event.clone()).or_insert((stream, 0));
        }
    }
    let outputs = read_outputs(&brokers, &config, raws.len(), Duration::from_secs(120)).await?;
    for replica in replicas {
        replica.stop().await?;
    }

    for output in &outputs {
        let tally = streams.entry(output.stream.clone()).or_default();
        match (output.decision.as_str(), output.tier.as_deref()) {
            ("novel", _) => tally.novel += 1,
            ("duplicate", Some("filter")) => tally.duplicate_filter += 1,
            ("duplicate", _) => tally.duplicate_exact += 1,
            ("conflict", _) => tally.conflict += 1,
            ("invalid", _) => tally.invalid += 1,
            ("unverified", _) => tally.unverified += 1,
            (other, _) => bail!("unknown decision {other} on an output"),
        }
        if output.clean {
            if let Some(event) = &output.event {
                if let Some((_, seen)) = expected_events.get_mut(event) {
                    *seen += 1;
                }
            }
        }
    }
    for (stream, seen) in expected_events.values() {
        let tally = streams.entry(stream.clone()).or_default();
        tally.distinct_events += 1;
        match seen {
            0 => tally.missing += 1,
            1 => tally.exactly_once += 1,
            _ => tally.doubled += 1,
        }
    }
    Ok(Report {
        streams,
        took: started.elapsed(),
    })
}

fn stream_of(config: &Config, topic: &str) -> String {
    config
        .streams
        .iter()
        .find(|s| s.inputs.iter().any(|t| t == topic) || s.clean == topic || s.audit == topic)
        .map(|s| s.spec.name.clone())
        .unwrap_or_default()
}

async fn wait_until(limit: Duration, ready: impl Fn() -> bool) -> Result<()> {
    let deadline = Instant::now() + limit;
    while !ready() {
        if Instant::now() > deadline {
            bail!("timed out after {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

async fn produce(brokers: &str, raws: &[Raw]) -> Result<()> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()?;
    let sends = raws.iter().map(|raw| {
        let record = FutureRecord::to(raw.topic)
            .key(raw.key.as_bytes())
            .payload(&raw.payload)
            .timestamp(raw.timestamp_ms);
        producer.send(record, Timeout::After(Duration::from_secs(30)))
    });
    for result in futures::future::join_all(sends).await {
        result
            .map_err(|(error, _)| error)
            .context("producing the workload")?;
    }
    Ok(())
}

/// One output as read back from a clean or audit topic.
pub(crate) struct Seen {
    pub(crate) stream: String,
    pub(crate) clean: bool,
    pub(crate) decision: String,
    pub(crate) tier: Option<String>,
    pub(crate) event: Option<String>,
}

/// The event id a payload carries: account/txn for the bank feed,
/// vehicle/seq for telemetry.
fn event_of(payload: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    if let (Some(account), Some(txn)) =
        (value["account_id"].as_str(), value["bank_txn_id"].as_str())
    {
        return Some(format!("{account}/{txn}"));
    }
    let vehicle = value["vehicle_id"].as_str()?;
    Some(format!("{vehicle}/{}", value["seq"].as_u64()?))
}

async fn read_outputs(
    brokers: &str,
    config: &Config,
    expected: usize,
    limit: Duration,
) -> Result<Vec<Seen>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "idemgate-demo-reader")
        .set("enable.auto.commit", "false")
        .create()?;
    let mut assignment = TopicPartitionList::new();
    for stream in &config.streams {
        for topic in [&stream.clean, &stream.audit] {
            for partition in 0..PARTITIONS {
                assignment.add_partition_offset(topic, partition, rdkafka::Offset::Beginning)?;
            }
        }
    }
    consumer.assign(&assignment)?;
    let clean_topics: Vec<&str> = config.streams.iter().map(|s| s.clean.as_str()).collect();
    let deadline = Instant::now() + limit;
    let mut seen = Vec::with_capacity(expected);
    while seen.len() < expected && Instant::now() < deadline {
        let polled = tokio::task::block_in_place(|| consumer.poll(Duration::from_millis(200)));
        let Some(message) = polled else { continue };
        let message = message?;
        let header = |name: &str| {
            message.headers().and_then(|h| {
                h.iter()
                    .find(|x| x.key == name)
                    .and_then(|x| x.value.map(|v| String::from_utf8_lossy(v).into_owned()))
            })
        };
        seen.push(Seen {
            stream: stream_of(config, message.topic()),
            clean: clean_topics.contains(&message.topic()),
            decision: header(DECISION).unwrap_or_default(),
            tier: header(TIER),
            event: message.payload().and_then(event_of),
        });
    }
    // Anything beyond the expected count is a doubled output: look for it.
    let settle = Instant::now() + Duration::from_secs(1);
    while Instant::now() < settle {
        if let Some(Ok(message)) =
            tokio::task::block_in_place(|| consumer.poll(Duration::from_millis(100)))
        {
            let decision = message
                .headers()
                .and_then(|h| {
                    h.iter()
                        .find(|x| x.key == DECISION)
                        .and_then(|x| x.value.map(|v| String::from_utf8_lossy(v).into_owned()))
                })
                .unwrap_or_default();
            seen.push(Seen {
                stream: stream_of(config, message.topic()),
                clean: clean_topics.contains(&message.topic()),
                decision,
                tier: None,
                event: message.payload().and_then(event_of),
            });
        }
    }
    if seen.len() < expected {
        bail!(
            "only {} of {expected} outputs arrived within {limit:?}",
            seen.len()
        );
    }
    Ok(seen)
}
