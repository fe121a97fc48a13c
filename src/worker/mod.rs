//! The consumer-group worker (docs/design.md §1, §7, §8): poll a batch, decide
//! every record, deliver every output, commit the finished offsets.
//!
//! - `consumer`: group membership, rebalance protocol, batches, commits;
//! - `batch`: one batch in rounds (fingerprint, claim, route, produce,
//!   finalize or release);
//! - `output`: the producer side;
//! - `breaker`: the store circuit breaker.

mod batch;
mod breaker;
mod client_logs;
pub(crate) mod consumer;
mod output;
mod progress;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;
use tracing::{info, warn};

use crate::config::{Config, StoreConfig, StreamConfig};
use crate::store::{ClaimStore, TopicTag};
use batch::{now_ms, Ended};
use breaker::Breaker;
use client_logs::ProducerLogs;
use consumer::{
    commit, pause, poll_batch, resume_all, GroupConsumer, GroupContext, GroupState, Input,
};

pub use batch::now_ms as wall_ms;
pub use consumer::read_headers;
pub use consumer::GroupState as Group;

/// A stream as the loop sees it.
struct StreamRuntime {
    config: StreamConfig,
    /// Input topic names by tag, to name a claim holder's topic.
    names: HashMap<TopicTag, String>,
}

impl StreamRuntime {
    fn topic_name(&self, tag: TopicTag) -> String {
        self.names
            .get(&tag)
            .cloned()
            .unwrap_or_else(|| format!("topic#{:08x}", tag.0))
    }
}

pub(crate) struct Worker {
    streams: Vec<StreamRuntime>,
    by_topic: HashMap<String, usize>,
    store: Arc<dyn ClaimStore>,
    consumer: GroupConsumer,
    producer: FutureProducer<ProducerLogs>,
    group: Arc<GroupState>,
    breaker: Breaker,
    event_time: bool,
    /// Records read while a batch waited, for the next batch.
    carry: Vec<Input>,
    /// Per partition, the records this worker finished. A partition
    /// revoked and assigned back (eager rebalance, lost session), or
    /// rewound past a deferred record, is fetched again from an older
    /// offset; what was finished here is not decided twice.
    finished: HashMap<(String, i32), Finished>,
    /// Partitions rewound to a deferred record, paused until the instant
    /// given so the other partitions (where its holder may be) are read.
    held_back: HashMap<(String, i32), std::time::Instant>,
    max_batch: usize,
    linger: Duration,
    token: crate::store::OwnerToken,
    stop: tokio::sync::watch::Receiver<bool>,
    /// Decisions since the last progress line.
    progress: progress::Progress,
}

/// Consumer properties the protocol depends on; the config cannot change
/// them.
const CONSUMER_FIXED: [(&str, &str); 2] = [
    ("enable.auto.commit", "false"),
    ("enable.auto.offset.store", "false"),
];
/// Producer defaults for outputs that must not be lost or doubled by the
/// client itself; the config may override them.
const PRODUCER_DEFAULTS: [(&str, &str); 4] = [
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("linger.ms", "5"),
    ("message.timeout.ms", "30000"),
];

impl Worker {
    pub(crate) async fn new(
        config: &Config,
        store: Arc<dyn ClaimStore>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<Worker> {
        let group = Arc::new(GroupState::default());
        let mut consumer_config = ClientConfig::new();
        consumer_config
            .set("group.id", "idemgate")
            .set("auto.offset.reset", "earliest")
            .set("partition.assignment.strategy", "range,roundrobin")
            // Lag per partition comes from librdkafka's statistics.
            .set("statistics.interval.ms", "5000");
        let mut producer_config = ClientConfig::new();
        for (key, value) in PRODUCER_DEFAULTS {
            producer_config.set(key, value);
        }
        for (key, value) in &config.kafka {
            // Consumer-only and producer-only properties are told apart by
            // librdkafka itself only with warnings; the common ones go to both.
            if !is_producer_only(key) {
                consumer_config.set(key, value);
            }
            if !is_consumer_only(key) {
                producer_config.set(key, value);
            }
        }
        for (key, value) in CONSUMER_FIXED {
            consumer_config.set(key, value);
        }
        let consumer: GroupConsumer = consumer_config
            .create_with_context(GroupContext {
                state: group.clone(),
                logs: client_logs::ClientLogs::default(),
            })
            .context("creating the kafka consumer")?;
        let producer: FutureProducer<ProducerLogs> = producer_config
            .create_with_context(ProducerLogs::default())
            .context("creating the kafka producer")?;

        let mut by_topic = HashMap::new();
        let mut streams = Vec::new();
        for (index, stream) in config.streams.iter().enumerate() {
            for topic in &stream.inputs {
                by_topic.insert(topic.clone(), index);
            }
            streams.push(StreamRuntime {
                names: stream
                    .inputs
                    .iter()
                    .map(|t| (TopicTag::of(t), t.clone()))
                    .collect(),
                config: stream.clone(),
            });
        }
        let topics: Vec<&str> = by_topic.keys().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .context("subscribing to the input topics")?;
        Ok(Worker {
            streams,
            by_topic,
            store,
            consumer,
            producer,
            group,
            breaker: Breaker::new(),
            event_time: matches!(config.store, StoreConfig::Memory { event_time: true }),
            carry: Vec::new(),
            finished: HashMap::new(),
            held_back: HashMap::new(),
            max_batch: config.batch.max_records,
            token: crate::store::OwnerToken::new(
                std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u8) as u32 >> 8,
                0,
            ),
            linger: config.batch.linger,
            progress: progress::Progress::new(std::time::Instant::now()),
            stop,
        })
    }

    pub(crate) fn group(&self) -> Arc<GroupState> {
        self.group.clone()
    }

    fn revocations(&self) -> u64 {
        self.group.revocations.load(Ordering::SeqCst)
    }

    /// Runs until `stop` turns true; then commits the finished work
    /// synchronously and leaves the group.
    pub(crate) async fn run(mut self) -> Result<()> {
        let mut stop = self.stop.clone();
        loop {
            if *stop.borrow() {
                break;
            }
            self.release_held_back();
            let revocations = self.revocations();
            let inputs = tokio::select! {
                inputs = poll_batch(&self.consumer, &mut self.carry, self.max_batch, self.linger, Duration::from_millis(200)) => inputs,
                _ = stop.changed() => break,
            };
            if inputs.is_empty() {
                continue;
            }
            let stop_now = self.stop.clone();
            crate::metrics::in_flight(1);
            let (next_offsets, ended) = self.process(inputs, revocations, &stop_now).await;
            crate::metrics::in_flight(0);
            for line in self.progress.due(std::time::Instant::now()) {
                line.log();
            }
            self.note_finished(&next_offsets);
            resume_all(&self.consumer, &self.held_back);
            match ended {
                Ended::Finished => commit(&self.consumer, &next_offsets, CommitMode::Async),
                Ended::Deferred(rewind) => {
                    commit(&self.consumer, &next_offsets, CommitMode::Async);
                    self.rewind(&rewind);
                }
                Ended::Abandoned => {
                    commit(&self.consumer, &next_offsets, CommitMode::Sync);
                    break;
                }
            }
        }
        self.shutdown();
        Ok(())
    }

    fn note_finished(&mut self, next_offsets: &std::collections::BTreeMap<(String, i32), i64>) {
        for (partition, next) in next_offsets {
            self.finished
                .entry(partition.clone())
                .or_default()
                .advance(*next);
        }
    }

    /// Resumes deferred partitions whose pause is over.
    fn release_held_back(&mut self) {
        let now = std::time::Instant::now();
        if self.held_back.values().any(|until| *until <= now) {
            self.held_back.retain(|_, until| *until > now);
            resume_all(&self.consumer, &self.held_back);
        }
    }

    /// Sends partitions back to their first deferred record and pauses them
    /// a moment: the next polls read every other assigned partition (where
    /// the holders may be), then these again.
    fn rewind(&mut self, rewind: &std::collections::BTreeMap<(String, i32), i64>) {
        let until = std::time::Instant::now() + batch::HOLD_BACK;
        let partitions: Vec<(String, i32)> = rewind.keys().cloned().collect();
        for partition in &partitions {
            self.held_back.insert(partition.clone(), until);
        }
        pause(&self.consumer, &partitions);
        for ((topic, partition), offset) in rewind {
            self.carry.retain(|i| {
                !(&i.topic == topic && i.partition == *partition && i.offset >= *offset)
            });
            if let Err(error) = self.consumer.seek(
                topic,
                *partition,
                rdkafka::Offset::Offset(*offset),
                Duration::from_secs(5),
            ) {
                warn!(%error, topic, partition, offset, "cannot rewind to a deferred record");
            }
        }
    }
}

/// The offsets of one partition this worker finished: everything below
/// `below`, and the ones in `above` (finished past a deferred record).
#[derive(Default)]
pub(crate) struct Finished {
    below: i64,
    above: std::collections::BTreeSet<i64>,
}

impl Finished {
    fn contains(&self, offset: i64) -> bool {
        offset < self.below || self.above.contains(&offset)
    }

    fn advance(&mut self, next: i64) {
        self.below = self.below.max(next);
        let below = self.below;
        self.above.retain(|o| *o >= below);
    }

    fn add(&mut self, offset: i64) {
        if offset >= self.below {
            self.above.insert(offset);
        }
    }
}

impl Worker {
    fn shutdown(&mut self) {
        for line in self.progress.flush(std::time::Instant::now()) {
            line.log();
        }
        match self.consumer.commit_consumer_state(CommitMode::Sync) {
            Ok(()) => {}
            Err(error) if consumer::is_nothing_to_commit(&error) => {}
            Err(error) => warn!(%error, "final commit failed"),
        }
        let _ = rdkafka::producer::Producer::flush(&self.producer, Duration::from_secs(10));
        self.consumer.unsubscribe();
        info!(at = now_ms(), "worker stopped: finished work committed");
    }
}

fn is_producer_only(key: &str) -> bool {
    key.starts_with("compression.")
        || key.starts_with("queue.buffering.")
        || key.starts_with("batch.")
        || key.starts_with("transaction")
        || matches!(
            key,
            "linger.ms"
                | "acks"
                | "request.required.acks"
                | "enable.idempotence"
                | "message.timeout.ms"
                | "delivery.timeout.ms"
                | "retries"
                | "message.send.max.retries"
                | "partitioner"
        )
}

fn is_consumer_only(key: &str) -> bool {
    key.starts_with("group.")
        || key.starts_with("auto.")
        || key.starts_with("fetch.")
        || key.starts_with("session.")
        || key.starts_with("heartbeat.")
        || key.starts_with("partition.assignment")
        || key.starts_with("max.poll")
        || key == "isolation.level"
        || key.starts_with("enable.auto")
        || key == "check.crcs"
}
