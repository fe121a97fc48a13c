//! The consumer-group worker (docs/design.md §1, §4, §7, §8): a pipelined
//! loop that reads records, claims their hashes, produces their outputs,
//! publishes what was delivered and commits each partition's finished
//! prefix, with several batches in flight.
//!
//! - `poller`: the polling thread, group membership, the rebalance protocol;
//! - `consumer`: a record as read;
//! - `flight`: every record in flight and every partition's offsets (pure),
//!   over `record`: a record as read, what an output carries, a failed
//!   delivery;
//! - `pipeline`: the loop, the I/O around `flight`; `sends`: outputs
//!   sent and their delivery reports taken back;
//! - `committer`: the one place where at least once and exactly once
//!   differ, sending each hook to its implementation;
//! - `handover`: revokes and stops; `at_least_once`: the consumer's
//!   commits, periodic and a handover's last;
//! - `metadata`: what a commit says for the next owner; `runs`: the
//!   records of finished runs a commit names where they do not fit in it;
//! - `commit_failure`: what a failed transactional commit leaves (pure);
//! - `transaction`: exactly once, the transaction around a commit
//!   interval's outputs and offsets; `lane`: its two producers;
//!   `resolve`: a transactional call that timed out, resolved;
//! - `output`: an output's record and the producer that sends it;
//!   `breaker`: the store circuit breaker;
//! - `pressure`: pausing at the in-flight bounds, the waiting gauges;
//! - `store_lost`: a stream whose store lost its state stops (or passes
//!   records unverified) and says so; `identity_check`: the timed check
//!   that finds a quiet stream's loss;
//! - `progress`, `client_logs`: what the worker says in its logs;
//! - `fault_point`: a test-only hook that stops the process at a step of
//!   an exactly-once seal;
//! - `watch`: the polling thread's look at the streams' input partitions
//!   and at a wait for an assignment;
//! - `stalls`: a task of its own watching the outputs for a transaction
//!   that holds their last stable offset (docs/design.md §11).

mod at_least_once;
mod breaker;
mod client_logs;
mod commit_failure;
mod committer;
pub(crate) mod consumer;
mod error;
mod fault_point;
mod flight;
mod handover;
mod identity_check;
mod lane;
mod marks;
pub(crate) mod metadata;
#[cfg(test)]
mod metadata_tests;
mod output;
mod pipeline;
pub(crate) mod poller;
mod pressure;
mod progress;
mod record;
mod resolve;
mod runs;
mod sends;
mod stalls;
mod store_lost;
mod transaction;
mod watch;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use rdkafka::consumer::Consumer;

use crate::clock::Clock;
use crate::config::{
    client_configs, Config, Guarantee, StoreConfig, StreamConfig, MAX_HANDOVER_DRAIN,
};
use crate::coordinates::TopicTag;
use crate::store::{ClaimStore, OwnerToken};
use error::Doing;
pub(crate) use error::WorkerError;
use output::Reports;
use poller::{Event, GroupConsumer, GroupContext, GroupState};

pub use crate::clock::wall_ms;
pub use consumer::read_headers;
pub use poller::GroupState as Group;
pub use record::HeaderList;
pub use runs::commit_cost;
pub(crate) use stalls::watch_outputs;

// The longest drain the config lets through (`config::MAX_HANDOVER_DRAIN`)
// and the wait for deliveries after it fit in the time a revoke waits for
// the loop.
const _: () = assert!(
    MAX_HANDOVER_DRAIN.as_millis() + pipeline::FLUSH_PATIENCE.as_millis()
        <= poller::REVOKE_PATIENCE.as_millis()
);

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
            .unwrap_or_else(|| format!("topic#{:06x}", tag.0))
    }
}

pub(crate) struct Worker {
    streams: Vec<StreamRuntime>,
    by_topic: rustc_hash::FxHashMap<String, usize>,
    store: Arc<dyn ClaimStore>,
    consumer: Arc<GroupConsumer>,
    /// The producers outputs go through: one under at least once; two
    /// under exactly once (`transaction.rs`), one committing a transaction
    /// while the other holds the next.
    lanes: Vec<Arc<lane::Lane>>,
    /// Exactly once: how long a transactional call may take before its
    /// outcome counts as unknown (`batch.transaction_call_timeout`).
    call_timeout: std::time::Duration,
    /// At least once or exactly once: `committer.rs` is the one place
    /// that asks.
    guarantee: Guarantee,
    /// Where the loop, the poller and the handover read time
    /// (`crate::clock`): the machine's, or a test's.
    clock: Arc<dyn Clock>,
    commit_interval: std::time::Duration,
    /// How often the streams' store identities are checked without a
    /// round (`[store] identity_check_interval`, `identity_check.rs`).
    identity_check_interval: std::time::Duration,
    /// Exactly once: the longest a handover lets the records read finish
    /// (`batch.handover_drain`).
    handover_drain: std::time::Duration,
    /// Where the producer's thread hands delivery reports over.
    reports: Arc<Reports>,
    group: Arc<GroupState>,
    events: tokio::sync::mpsc::Receiver<Event>,
    /// The polling thread's end of the channel, until it starts.
    poll_events: Option<tokio::sync::mpsc::Sender<Event>>,
    /// Tells the polling thread to leave the group; its callbacks go quiet.
    closing: Arc<AtomicBool>,
    /// Records read and not finished, as the loop last counted them (less
    /// those a transaction's commit holds, `Flight::ahead_of_the_loop`):
    /// the poller reads ahead only so far (`batch.read_ahead`).
    unfinished: Arc<std::sync::atomic::AtomicUsize>,
    event_time: bool,
    /// The consumer group, for what the watch asks its coordinator.
    group_id: String,
    /// The producer's `message.max.bytes`: a `too-large` record goes to
    /// audit without what would not fit in it.
    sendable: usize,
    max_records: usize,
    linger: std::time::Duration,
    max_in_flight_records: usize,
    max_in_flight_bytes: usize,
    read_ahead: usize,
    /// This incarnation's owner token; its attempt moves on at every
    /// assignment.
    token: OwnerToken,
    stop: tokio::sync::watch::Receiver<bool>,
    /// Per stream, in stream order: set once a round finds the stream's
    /// store lost its state (docs/design.md §8.2): `/readyz` says so until
    /// the restart.
    store_lost: Arc<[AtomicBool]>,
    /// `--config` and the file read (`Config::config_flag`), for the
    /// command a lost store's ERROR line names (`store_lost.rs`).
    config_flag: String,
}

impl Worker {
    pub(crate) async fn new(
        config: &Config,
        store: Arc<dyn ClaimStore>,
        stop: tokio::sync::watch::Receiver<bool>,
        clock: Arc<dyn Clock>,
    ) -> Result<Worker, WorkerError> {
        let group = Arc::new(GroupState::default());
        let (sender, events) = tokio::sync::mpsc::channel(16);
        let closing = Arc::new(AtomicBool::new(false));
        let (consumer_config, producer_config) = client_configs(config);
        let group_id = config.group_id().to_string();
        let consumer: GroupConsumer = consumer_config
            .create_with_context(GroupContext {
                state: group.clone(),
                logs: client_logs::ClientLogs::default(),
                events: sender.clone(),
                closing: closing.clone(),
                revoked: std::sync::Mutex::new(Vec::new()),
                clock: clock.clone(),
                committed_patience: poller::CommittedPatience::of(
                    config.guarantee,
                    &producer_config,
                ),
            })
            .doing("creating the kafka consumer")?;
        let reports = Arc::new(Reports::default());
        let mut lanes = Vec::new();
        for lane_config in lane::lanes(config.guarantee, &producer_config) {
            lanes.push(Arc::new(
                lane::Lane::new(lane_config, reports.clone())
                    .doing("creating the kafka producer")?,
            ));
        }

        let mut by_topic = rustc_hash::FxHashMap::default();
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
            .doing("subscribing to the input topics")?;
        let incarnation = std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            std::process::id(),
        ) as u32
            >> 8;
        Ok(Worker {
            streams,
            by_topic,
            store,
            consumer: Arc::new(consumer),
            lanes,
            call_timeout: config.batch.transaction_call_timeout,
            guarantee: config.guarantee,
            clock,
            commit_interval: config.batch.commit_interval,
            identity_check_interval: config.identity_check_interval,
            handover_drain: config.batch.handover_drain,
            reports,
            group,
            events,
            poll_events: Some(sender),
            closing,
            unfinished: Arc::default(),
            event_time: matches!(config.store, StoreConfig::Memory { event_time: true }),
            sendable: config.sendable_bytes(),
            group_id,
            max_records: config.batch.max_records,
            linger: config.batch.linger,
            max_in_flight_records: config.batch.max_in_flight_records,
            max_in_flight_bytes: config.batch.max_in_flight_bytes,
            read_ahead: config.batch.read_ahead,
            token: OwnerToken::new(incarnation, 0),
            stop,
            store_lost: config
                .streams
                .iter()
                .map(|_| AtomicBool::new(false))
                .collect(),
            config_flag: config.config_flag(),
        })
    }

    pub(crate) fn group(&self) -> Arc<GroupState> {
        self.group.clone()
    }

    /// Per stream, whether a round found its store lost its state.
    pub(crate) fn store_lost(&self) -> Arc<[AtomicBool]> {
        self.store_lost.clone()
    }
}
