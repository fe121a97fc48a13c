//! What the worker tests share: a mock cluster with one test's topics, a
//! config for it, replicas run in-process, a bank workload with known
//! duplicates, a reader of the clean and audit topics, and the check that
//! every input got exactly one output and every event reached clean once.
//!
//! Every input record carries a header `x-test-seq` (its index in the
//! workload). Outputs keep their input's headers, so each output names the
//! input it stands for, and "one output per input offset" is a count.
//!
//! Debugging: `RUST_LOG=idemgate=info` prints the workers' logs, and
//! `IT_KAFKA_DEBUG=cgrp,eos` (with `RUST_LOG=librdkafka=debug`) librdkafka's.

mod outputs;
mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idemgate::config::Config;
use idemgate::demo::mock::MockKafka;
use idemgate::store::memory::MemoryStore;
use idemgate::store::{Claim, ClaimOutcome, ClaimStore, Millis, Settle, StoreError, StoreStats};
use idemgate::worker::{Group, Worker};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::support::unique;

pub use outputs::{check_exactly_once, read_outputs, Output};
pub use workload::{bank_workload, produce, Flow, Record, Sent};

/// The header naming an output's input record.
pub const SEQ: &str = "x-test-seq";
/// Every bounded wait in these tests.
pub const LIMIT: Duration = Duration::from_secs(60);

/// One test's mock cluster and names. The cluster lives as long as this.
pub struct Setup {
    pub kafka: MockKafka,
    pub brokers: String,
    pub partitions: i32,
    pub base: String,
    pub stream: String,
    pub topics: Topics,
    pub group: String,
    pub prefix: String,
}

/// A stream's three topics.
#[derive(Clone, Debug)]
pub struct Topics {
    pub raw: String,
    pub clean: String,
    pub audit: String,
}

/// What a test changes in the config.
pub struct Options<'a> {
    /// Extra librdkafka properties (both worker clients).
    pub kafka: &'a [(&'a str, &'a str)],
    /// The `[[streams]]` lines after name/inputs/clean/audit.
    pub stream: &'a str,
    /// More `[[streams]]` entries, whole.
    pub more: &'a str,
    pub max_records: usize,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            kafka: &[],
            stream: BANK_STREAM,
            more: "",
            max_records: 200,
        }
    }
}

/// The payments stream: bank-txn preset, exact keys, failing closed.
pub const BANK_STREAM: &str = r#"profile = "bank-txn"
mode = "exact"
ttl = { explicit = "1h" }
lease = "30s"
fail_mode = "closed""#;

impl Setup {
    /// Three mock brokers (groups rebalance after 100 ms) and this test's
    /// raw, clean and audit topics.
    pub fn new(test: &str, partitions: i32) -> Setup {
        let kafka = MockKafka::start(3, 100).expect("starting the mock cluster");
        let brokers = kafka.bootstrap_servers().expect("mock bootstrap servers");
        let base = unique(test);
        let mut setup = Setup {
            brokers,
            partitions,
            stream: format!("{base}-stream"),
            topics: Topics {
                raw: String::new(),
                clean: String::new(),
                audit: String::new(),
            },
            group: format!("{base}-group"),
            prefix: format!("{base}:"),
            base,
            kafka,
        };
        setup.topics = setup.more_topics("bank");
        setup
    }

    /// Another stream's topics on the same cluster.
    pub fn more_topics(&self, name: &str) -> Topics {
        let topics = Topics {
            raw: format!("{}-{name}-raw", self.base),
            clean: format!("{}-{name}-clean", self.base),
            audit: format!("{}-{name}-audit", self.base),
        };
        for topic in [&topics.raw, &topics.clean, &topics.audit] {
            self.kafka
                .create_topic(topic, self.partitions)
                .expect("creating a topic");
        }
        topics
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
        let text = format!(
            r#"
[kafka]
{kafka}
[store]
kind = "memory"
key_prefix = "{prefix}"

[metrics]
listen = "127.0.0.1:0"

[batch]
max_records = {max}
linger = "20ms"

[[streams]]
name = "{stream}"
inputs = ["{raw}"]
clean = "{clean}"
audit = "{audit}"
{extra}

{more}
"#,
            prefix = self.prefix,
            max = options.max_records,
            stream = self.stream,
            raw = self.topics.raw,
            clean = self.topics.clean,
            audit = self.topics.audit,
            extra = options.stream,
            more = options.more,
        );
        Config::parse(&text).unwrap_or_else(|e| panic!("test config refused: {e}\n{text}"))
    }

    /// A memory store (wall time) for this config's streams, counted.
    pub fn store(&self, config: &Config) -> Arc<Counted> {
        let streams = config.streams.iter().map(|s| s.spec.clone()).collect();
        Arc::new(Counted::new(MemoryStore::new(streams)))
    }

    /// Every output of the stream's clean and audit topics.
    pub async fn read(&self, expected: usize) -> Vec<Output> {
        self.read_topics(&self.topics, expected).await
    }

    pub async fn read_topics(&self, topics: &Topics, expected: usize) -> Vec<Output> {
        read_outputs(
            &self.brokers,
            &[&topics.clean, &topics.audit],
            self.partitions,
            expected,
        )
        .await
    }

    /// The group's committed offset per partition of `topic` (`None` where
    /// nothing is committed).
    pub async fn committed(&self, topic: &str) -> Vec<Option<i64>> {
        let (brokers, group, topic, partitions) = (
            self.brokers.clone(),
            self.group.clone(),
            topic.to_string(),
            self.partitions,
        );
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &brokers)
                .set("group.id", &group)
                .set("enable.auto.commit", "false")
                .create()
                .expect("creating the offset reader");
            let mut list = TopicPartitionList::new();
            for partition in 0..partitions {
                list.add_partition(&topic, partition);
            }
            let committed = consumer
                .committed_offsets(list, LIMIT)
                .expect("reading committed offsets");
            (0..partitions)
                .map(
                    |p| match committed.find_partition(&topic, p).map(|e| e.offset()) {
                        Some(Offset::Offset(offset)) => Some(offset),
                        _ => None,
                    },
                )
                .collect()
        })
        .await
        .expect("the offset reader panicked")
    }
}

/// A memory store that notes what the worker asked of it: the evidence,
/// seen from outside, that claims were released after failed deliveries,
/// and which records a worker claimed.
pub struct Counted {
    inner: MemoryStore,
    /// (partition, offset) of every record that asked for a claim.
    holders: Mutex<BTreeSet<(i32, i64)>>,
    /// Finalize requests that made a claim done.
    finalized: AtomicU64,
    /// Release requests that really deleted a claim.
    released: AtomicU64,
}

impl Counted {
    fn new(inner: MemoryStore) -> Counted {
        Counted {
            inner,
            holders: Mutex::new(BTreeSet::new()),
            finalized: AtomicU64::new(0),
            released: AtomicU64::new(0),
        }
    }

    pub fn released(&self) -> u64 {
        self.released.load(Ordering::SeqCst)
    }

    pub fn finalized(&self) -> u64 {
        self.finalized.load(Ordering::SeqCst)
    }

    /// The records that asked for a claim since the last call.
    pub fn take_holders(&self) -> BTreeSet<(i32, i64)> {
        std::mem::take(&mut *self.holders.lock().unwrap())
    }
}

#[async_trait]
impl ClaimStore for Counted {
    async fn claim(&self, batch: &[Claim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let out = self.inner.claim(batch).await?;
        self.holders
            .lock()
            .unwrap()
            .extend(batch.iter().map(|c| (c.holder.partition, c.holder.offset)));
        Ok(out)
    }
    async fn finalize(&self, batch: &[Settle]) -> Result<Vec<bool>, StoreError> {
        let out = self.inner.finalize(batch).await?;
        let done = out.iter().filter(|d| **d).count() as u64;
        self.finalized.fetch_add(done, Ordering::SeqCst);
        Ok(out)
    }
    async fn release(&self, batch: &[Settle]) -> Result<Vec<bool>, StoreError> {
        let out = self.inner.release(batch).await?;
        let done = out.iter().filter(|d| **d).count() as u64;
        self.released.fetch_add(done, Ordering::SeqCst);
        Ok(out)
    }
    async fn stats(&self, at: Millis) -> Result<StoreStats, StoreError> {
        self.inner.stats(at).await
    }
}

/// A worker running on the test's runtime, with its own stop channel.
pub struct Replica {
    stop: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<()>>,
    pub group: Arc<Group>,
}

impl Replica {
    pub async fn start(config: &Config, store: Arc<dyn ClaimStore>) -> Replica {
        let (stop, stop_rx) = watch::channel(false);
        let worker = Worker::new(config, store, stop_rx)
            .await
            .expect("starting a worker");
        let group = worker.group();
        Replica {
            stop,
            task: tokio::spawn(worker.run()),
            group,
        }
    }

    pub fn assigned(&self) -> bool {
        self.group.assigned.load(Ordering::SeqCst)
    }

    pub async fn wait_assigned(&self, what: &str) {
        wait_until(what, || self.assigned()).await;
    }

    /// Graceful stop: the batch in flight finishes or is abandoned, the
    /// finished work is committed, the replica leaves the group.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        match tokio::time::timeout(LIMIT, self.task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => panic!("worker failed: {error:#}"),
            Ok(Err(error)) => panic!("worker task panicked: {error}"),
            Err(_) => panic!("worker did not stop within {LIMIT:?}"),
        }
    }
}

pub async fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "timed out after {LIMIT:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the group has committed the end of every partition the
/// records went to.
pub async fn wait_committed(setup: &Setup, sent: &[Sent]) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let committed = setup.committed(&setup.topics.raw).await;
        let behind: Vec<i32> = (0..setup.partitions)
            .filter(|&p| {
                let end = sent
                    .iter()
                    .filter(|s| s.partition == p)
                    .map(|s| s.offset + 1)
                    .max();
                end.is_some() && committed[p as usize] < end
            })
            .collect();
        if behind.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "partitions {behind:?} not committed within {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Worker logs on stderr when `RUST_LOG` is set (e.g. `idemgate=info`).
pub fn logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .with_ansi(false)
            .try_init();
    }
}
