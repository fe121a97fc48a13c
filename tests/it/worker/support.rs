//! What the worker tests keep of their own: a mock cluster with one test's
//! topics and group, a config for it, and waits on replicas and
//! on the group's committed offsets. Workloads, producing, reading back and
//! the exactly-once check are the test kit's.
//!
//! Debugging: a failed test prints its workers' logs (`idemgate=info`;
//! `RUST_LOG` sets another level), and
//! `IT_KAFKA_DEBUG=cgrp,eos` (with `RUST_LOG=librdkafka=debug`) librdkafka's.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use idemgate::app::Replica;
use idemgate::config::Config;
use idemgate::demo::mock::MockKafka;
use idemgate::store::memory::MemoryStore;
use idemgate_testkit::check::Summary;
use idemgate_testkit::counting::CountingStore;
use idemgate_testkit::faulty::FaultyStore;
use idemgate_testkit::kafka::{Landed, Out, Producer, Reader, Topics};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{unique, BOUND};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tokio::task::JoinHandle;

/// One test's mock cluster and names. The cluster lives as long as this.
pub struct Setup {
    pub kafka: MockKafka,
    pub brokers: String,
    /// The payments stream's input, clean and audit topics.
    pub topics: Topics,
    /// The streams' names start with this: `-0` the payments stream, `-1`
    /// and on those of `Options::more`.
    pub stream: String,
    pub group: String,
}

/// What a test changes in the config.
pub struct Options<'a> {
    /// Extra librdkafka properties (both worker clients).
    pub kafka: &'a [(&'a str, &'a str)],
    /// The payments stream's lines after name/inputs/clean/audit.
    pub stream: &'a str,
    /// More streams: their topics and their lines after
    /// name/inputs/clean/audit.
    pub more: &'a [(&'a Topics, &'a str)],
    pub max_records: usize,
    /// Top-level lines (`guarantee = "exactly-once"`).
    pub top: &'a str,
    /// More `[batch]` lines (`handover_drain = "1s"`).
    pub batch: &'a str,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            kafka: &[],
            stream: BANK_STREAM,
            more: &[],
            max_records: 200,
            top: "",
            batch: "",
        }
    }
}

/// For a test that injects Produce errors on the mock cluster: one Produce
/// request in flight per broker connection (librdkafka allows an idempotent
/// producer 5). With more, the mock can report a record delivered that it
/// never wrote: `faults.rs` shows how, and that one in flight holds.
pub const ONE_PRODUCE_IN_FLIGHT: (&str, &str) = ("max.in.flight.requests.per.connection", "1");

/// The payments stream: bank-txn preset, exact keys, failing closed.
pub const BANK_STREAM: &str = r#"profile = "bank-txn"
mode = "exact"
ttl = { explicit = "1h" }
fail_mode = "closed""#;

/// The bank workload of these tests: 23 accounts, about one redelivery per
/// event, spread up to 150 records behind their original (the same batch,
/// later ones, across a rebalance), and one event in seventeen reused with
/// another payload (a conflict).
pub fn bank(test: &str) -> Bank {
    let mut bank = Bank::new(test, 23);
    bank.copy_rate = (0.6, 0.4);
    bank.conflict_rate = 1.0 / 17.0;
    bank.copy_spread = 1_500;
    bank
}

/// How many outputs got one of `decisions`.
pub fn count(summary: &Summary, decisions: &[&str]) -> usize {
    decisions
        .iter()
        .filter_map(|decision| summary.decisions.get(*decision))
        .sum()
}

impl Setup {
    /// Three mock brokers (groups rebalance after 100 ms) and this test's
    /// input, clean and audit topics, `partitions` each; the workers' logs
    /// (see `logs`).
    pub fn new(test: &str, partitions: i32) -> Setup {
        logs();
        let kafka = MockKafka::start(3, 100).expect("starting the mock cluster");
        let brokers = kafka.bootstrap_servers().expect("mock bootstrap servers");
        let topics = Topics::create_on_mock(&kafka, test, partitions, partitions);
        let base = unique(test);
        Setup {
            kafka,
            brokers,
            topics,
            stream: format!("{base}-stream"),
            group: format!("{base}-group"),
        }
    }

    pub fn config(&self, options: &Options<'_>) -> Config {
        let mut properties: BTreeMap<&str, String> = BTreeMap::from([
            ("bootstrap.servers", self.brokers.clone()),
            ("group.id", self.group.clone()),
            ("session.timeout.ms", "6000".into()),
            ("heartbeat.interval.ms", "500".into()),
        ]);
        for (key, value) in options.kafka {
            properties.insert(key, value.to_string());
        }
        let mut kafka = String::new();
        for (key, value) in properties {
            kafka.push_str(&format!("{key:?} = {value:?}\n"));
        }
        // librdkafka's own debug contexts (e.g. `cgrp,eos`), logged under
        // the `librdkafka` target (RUST_LOG=librdkafka=debug).
        if let Ok(contexts) = std::env::var("IT_KAFKA_DEBUG") {
            kafka.push_str(&format!(
                "\"debug\" = {contexts:?}\n\"log_level\" = \"7\"\n"
            ));
        }
        let mut text = format!(
            r#"{top}
[kafka]
{kafka}
[store]
kind = "memory"

[metrics]
listen = "127.0.0.1:0"

[batch]
max_records = {max}
linger = "20ms"
{batch}
"#,
            top = options.top,
            batch = options.batch,
            max = options.max_records,
        );
        let payments = (&self.topics, options.stream);
        for (n, (topics, lines)) in std::iter::once(payments)
            .chain(options.more.iter().copied())
            .enumerate()
        {
            text.push_str(&format!(
                r#"
[[streams]]
name = "{stream}-{n}"
inputs = ["{input}"]
clean = "{clean}"
audit = "{audit}"
{lines}
"#,
                stream = self.stream,
                input = topics.input,
                clean = topics.clean,
                audit = topics.audit,
            ));
        }
        Config::parse(&text).unwrap_or_else(|e| panic!("test config refused: {e}\n{text}"))
    }

    /// A memory store (wall time) for this config's streams, counted.
    pub fn store(&self, config: &Config) -> Arc<CountingStore> {
        Arc::new(CountingStore::new(Arc::new(memory_store(config))))
    }

    /// A memory store (wall time) for this config's streams, whose faults
    /// the test injects.
    pub fn faulty_store(&self, config: &Config) -> Arc<FaultyStore> {
        Arc::new(FaultyStore::new(Arc::new(memory_store(config))))
    }

    /// Produces `records` to `topic` on a blocking thread, `chunk` at a time
    /// with `pause` between chunks; the handle yields where each landed.
    pub fn produce(
        &self,
        topic: &str,
        records: &[Planned],
        chunk: usize,
        pause: Duration,
    ) -> JoinHandle<HashMap<String, Landed>> {
        let (brokers, topic, records) = (self.brokers.clone(), topic.to_string(), records.to_vec());
        tokio::task::spawn_blocking(move || {
            Producer::new(&brokers).send(&topic, &records, chunk, pause)
        })
    }

    /// Reads `topics`' clean and audit outputs until each of `inputs` inputs
    /// has one, then for `SETTLE` longer: a doubled output arrives then or
    /// not at all.
    pub async fn read(&self, topics: &Topics, inputs: usize) -> anyhow::Result<Vec<Out>> {
        let (brokers, topics) = (self.brokers.clone(), topics.clone());
        let outputs = tokio::task::spawn_blocking(move || {
            let mut reader = Reader::new(&brokers, &topics.outputs());
            let what = format!("in {} and {}", topics.clean, topics.audit);
            reader.read_every_input(inputs, BOUND, &what, || {});
            reader.records
        })
        .await?;
        Ok(outputs)
    }

    /// As `read`, for the inputs `landed` lists: a failure names the
    /// inputs without an output.
    pub async fn read_landed(
        &self,
        topics: &Topics,
        landed: &HashMap<String, Landed>,
    ) -> anyhow::Result<Vec<Out>> {
        let (brokers, topics, landed) = (self.brokers.clone(), topics.clone(), landed.clone());
        let outputs = tokio::task::spawn_blocking(move || {
            let mut reader = Reader::new(&brokers, &topics.outputs());
            let what = format!("in {} and {}", topics.clean, topics.audit);
            reader.read_every_landed(&landed, BOUND, &what, || {});
            reader.records
        })
        .await?;
        Ok(outputs)
    }

    /// The group's committed offset per partition of `topics`' input
    /// (`None` where nothing is committed).
    pub async fn committed(&self, topics: &Topics) -> anyhow::Result<Vec<Option<i64>>> {
        let (brokers, group, topic, partitions) = (
            self.brokers.clone(),
            self.group.clone(),
            topics.input.clone(),
            topics.input_partitions,
        );
        tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<Option<i64>>> {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &brokers)
                .set("group.id", &group)
                .set("enable.auto.commit", "false")
                .create()?;
            let mut list = TopicPartitionList::new();
            for partition in 0..partitions {
                list.add_partition(&topic, partition);
            }
            let committed = consumer.committed_offsets(list, BOUND)?;
            Ok((0..partitions)
                .map(
                    |p| match committed.find_partition(&topic, p).map(|e| e.offset()) {
                        Some(Offset::Offset(offset)) => Some(offset),
                        _ => None,
                    },
                )
                .collect())
        })
        .await?
    }
}

fn memory_store(config: &Config) -> MemoryStore {
    MemoryStore::new(config.streams.iter().map(|s| s.spec.clone()).collect())
}

/// Per partition, the offset after the last record that landed there
/// (`None` where none did): what the group commits once it is all done.
pub fn ends(landed: &HashMap<String, Landed>, partitions: i32) -> Vec<Option<i64>> {
    (0..partitions)
        .map(|p| {
            landed
                .values()
                .filter(|at| at.partition == p)
                .map(|at| at.offset + 1)
                .max()
        })
        .collect()
}

/// Starts a replica and waits until the group gave it partitions.
pub async fn start_assigned(
    config: &Config,
    store: &Arc<CountingStore>,
) -> anyhow::Result<Replica> {
    let replica = Replica::start(config, store.clone()).await?;
    wait_until("a replica gets partitions", || replica.assigned()).await;
    Ok(replica)
}

/// Stops a replica gracefully (the batch in flight finishes, the finished
/// work is committed, it leaves the group), within `BOUND`.
pub async fn stop(replica: Replica) -> anyhow::Result<()> {
    tokio::time::timeout(BOUND, replica.stop())
        .await
        .context("the replica did not stop in time")?
        .context("the replica failed")
}

pub async fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "timed out after {BOUND:?}: {what}"
        );
        // The poll of a bounded wait on a condition, not a wait for time.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the group has committed the end of every partition of the
/// stream's input that the records went to.
pub async fn wait_committed(setup: &Setup, landed: &HashMap<String, Landed>) -> anyhow::Result<()> {
    let deadline = Instant::now() + BOUND;
    let ends = ends(landed, setup.topics.input_partitions);
    loop {
        let committed = setup.committed(&setup.topics).await?;
        let behind: Vec<usize> = (0..ends.len())
            .filter(|&p| ends[p].is_some() && committed[p] < ends[p])
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        assert!(
            Instant::now() < deadline,
            "partitions {behind:?} not committed within {BOUND:?}"
        );
        // The poll of a bounded wait on the broker's committed offsets.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Worker logs go to the test's captured output, which libtest prints
/// only for a test that failed: `idemgate=info` unless `RUST_LOG` says
/// otherwise, so a failure on CI comes with its workers' rebalances,
/// refusals and retries.
pub fn logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("idemgate=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .with_ansi(false)
        .try_init();
}
