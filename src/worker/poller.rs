//! The thread that polls the consumer group, and the rebalance protocol.
//!
//! librdkafka serves rebalances inside `poll`, on the polling thread. The
//! revoke callback must not return before the loop has flushed, published
//! and committed what the revoked partitions finished (docs/design.md
//! §4.6), and the loop cannot do that from inside a callback it is itself
//! polling, so polling runs on its own thread (as in quickwit's
//! `kafka_source.rs`): records, assignments and revokes go to the loop as
//! events, in the order librdkafka gave them, and the revoke callback
//! blocks on the loop's acknowledgement. Assignments carry the committed
//! offsets with their metadata, read in the callback, so the loop can raise
//! watermarks from idemgate-written commits (docs/design.md §7).
//!
//! Eager or incremental, the loop is told per partition: an eager rebalance
//! (the classic protocol's `range,roundrobin`, idemgate's default) revokes
//! every partition and assigns the new set; an incremental one
//! (`cooperative-sticky`, and every rebalance under `group.protocol =
//! "consumer"`, KIP-848) revokes only the partitions that move and assigns
//! only the ones that arrive, the others flowing on. So a revoke hands over
//! exactly its list, an assignment adds exactly its list, and what the
//! consumer owns after either is asked of librdkafka, never inferred from
//! the list.

use crate::clock::Clock;
use crate::config::Guarantee;
use crate::logging::RateLimit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc as sync_mpsc, Arc, LazyLock};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use super::consumer::{Arrival, Reader};
use super::flight::Tp;

/// What the poller tells the loop.
pub(crate) enum Event {
    /// Records read and fingerprinted.
    Records(Vec<Arrival>),
    /// Partitions assigned, each with its committed offset and metadata.
    Assigned(Vec<(Tp, Option<(i64, String)>)>),
    /// Exactly once: the committed offsets of partitions assigned could
    /// not be read for `after`; the worker ends rather than decide again
    /// what the last owner may have committed.
    CommittedUnreadable { after: Duration, error: KafkaError },
    /// Partitions about to go: acknowledge once their work is committed.
    Revoke {
        partitions: Vec<Tp>,
        ack: sync_mpsc::Sender<()>,
    },
}

/// Shared between the rebalance callbacks, the loop and health checks.
#[derive(Default)]
pub struct GroupState {
    /// Bumped on every revoke.
    pub revocations: AtomicU64,
    pub(crate) assigned: AtomicBool,
}

static CONSUMER_ERROR: LazyLock<RateLimit> =
    LazyLock::new(|| RateLimit::new(Duration::from_secs(30)));

/// How long a revoke waits for the loop: past it, the partitions go anyway
/// and their unfinished claims are the next owner's.
pub(super) const REVOKE_PATIENCE: Duration = Duration::from_secs(60);

pub(crate) struct GroupContext {
    pub(crate) state: Arc<GroupState>,
    pub(crate) logs: super::client_logs::ClientLogs,
    pub(crate) events: mpsc::Sender<Event>,
    /// Set when the loop is gone: callbacks then only log.
    pub(crate) closing: Arc<AtomicBool>,
    /// Partitions revoked since the poller last looked: records of them it
    /// read before the revoke and has not handed over yet belong to the old
    /// assignment (the next one fetches them again from the commit).
    pub(crate) revoked: std::sync::Mutex<Vec<Tp>>,
    /// The worker's clock (`crate::clock`).
    pub(crate) clock: Arc<dyn Clock>,
    /// How long an assignment reads the committed offsets.
    pub(crate) committed_patience: CommittedPatience,
}

impl ClientContext for GroupContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.logs.log(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.logs.error(&error, reason);
    }

    /// librdkafka's statistics (every `statistics.interval.ms`): the lag of
    /// every partition this consumer fetches.
    fn stats(&self, statistics: rdkafka::Statistics) {
        for (name, topic) in &statistics.topics {
            for (id, partition) in &topic.partitions {
                if *id >= 0 && partition.fetch_state == "active" {
                    crate::metrics::lag(name, *id, partition.consumer_lag);
                }
            }
        }
    }
}

/// How many partitions the consumer owns now (after the assign or revoke
/// librdkafka has just applied, inside the callback).
fn owned(consumer: &BaseConsumer<GroupContext>) -> usize {
    consumer.assignment().map_or(0, |list| list.count())
}

fn partitions_of(list: &TopicPartitionList) -> Vec<Tp> {
    list.elements()
        .iter()
        .map(|e| (Arc::from(e.topic()), e.partition()))
        .collect()
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(list) = rebalance else {
            return;
        };
        self.state.revocations.fetch_add(1, Ordering::SeqCst);
        // Eager: everything goes. Incremental: what is not in the list stays.
        let kept = owned(consumer).saturating_sub(list.count());
        self.state.assigned.store(kept > 0, Ordering::SeqCst);
        crate::metrics::lag_gone(list.elements().iter().map(|e| (e.topic(), e.partition())));
        if self.closing.load(Ordering::SeqCst) || list.count() == 0 {
            return;
        }
        let (ack, acked) = sync_mpsc::channel();
        let partitions = partitions_of(list);
        if let Ok(mut revoked) = self.revoked.lock() {
            revoked.extend(partitions.iter().cloned());
        }
        let count = partitions.len();
        if self
            .events
            .blocking_send(Event::Revoke { partitions, ack })
            .is_err()
        {
            return;
        }
        let started = self.clock.now();
        match acked.recv_timeout(REVOKE_PATIENCE) {
            Ok(()) => info!(
                partitions = count,
                kept,
                took_ms = self.clock.now().duration_since(started).as_millis() as u64,
                "revoked: partitions handed over (what finished is published and committed, unless the commit failed above)"
            ),
            Err(_) => warn!(
                partitions = count,
                "revoke not acknowledged in time: unfinished claims go to the next owner"
            ),
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => {
                if self.closing.load(Ordering::SeqCst) {
                    return;
                }
                let patience = self.committed_patience;
                let committed = match committed_with_metadata(
                    consumer,
                    list,
                    &*self.clock,
                    patience.patience(),
                ) {
                    Ok(committed) => committed,
                    Err(error) => match patience {
                        CommittedPatience::DecideAgainAfter(_) => {
                            error!(%error, "cannot read committed offsets: records the last owner finished above its commit are decided again, and watermarks are not raised from its commits");
                            TopicPartitionList::new()
                        }
                        CommittedPatience::EndAfter(after) => {
                            let _ = self
                                .events
                                .blocking_send(Event::CommittedUnreadable { after, error });
                            return;
                        }
                    },
                };
                let partitions =
                    partitions_of(list)
                        .into_iter()
                        .map(|tp| {
                            let found = committed.find_partition(&tp.0, tp.1).and_then(|e| match e
                                .offset()
                            {
                                Offset::Offset(offset) => Some((offset, e.metadata().to_string())),
                                _ => None,
                            });
                            (tp, found)
                        })
                        .collect::<Vec<_>>();
                // `partitions`: all it owns now (eager: the list; incremental:
                // the list added to what it kept).
                let now = owned(consumer);
                info!(partitions = now, added = partitions.len(), "assigned");
                // An incremental rebalance that only revoked ends with an
                // empty assignment: nothing for the loop (a new assignment
                // moves the owner token's attempt on, docs/design.md §4.3).
                if !partitions.is_empty() {
                    let _ = self.events.blocking_send(Event::Assigned(partitions));
                }
                self.state.assigned.store(now > 0, Ordering::SeqCst);
            }
            Rebalance::Revoke(_) => {
                self.state
                    .assigned
                    .store(owned(consumer) > 0, Ordering::SeqCst);
            }
            Rebalance::Error(error) => warn!(%error, "rebalance error"),
        }
    }
}

/// The committed offsets of `list` with their metadata, tried for up to
/// `patience`: without them the new owner cannot skip what the last one
/// listed as finished (it would decide those records again: a second
/// audit output) nor raise watermarks from its commits.
fn committed_with_metadata(
    consumer: &BaseConsumer<GroupContext>,
    list: &TopicPartitionList,
    clock: &dyn Clock,
    patience: Duration,
) -> Result<TopicPartitionList, KafkaError> {
    let until = clock.now() + patience;
    loop {
        match consumer.committed_offsets(list.clone(), Duration::from_secs(10)) {
            Ok(committed) => return Ok(committed),
            Err(error) if clock.now() < until => {
                warn!(%error, "cannot read committed offsets yet: retrying");
                // A coordinator that is moving or loading answers soon; a
                // transaction of the last owner's with offsets pending
                // (exactly once) by its commit, or its timeout.
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(error) => return Err(error),
        }
    }
}

/// How long an assignment reads the committed offsets, and what it does
/// when it cannot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommittedPatience {
    /// At least once: after this long, the records the last owner finished
    /// above its commit are decided again (a second audit output at most).
    DecideAgainAfter(Duration),
    /// Exactly once: deciding again would put a second output beside one
    /// already committed, so after this long the worker ends. The brokers
    /// answer "unstable" while a transaction of the last owner's holds
    /// offsets for the partition (KIP-447), until it commits or its
    /// `transaction.timeout.ms` runs out and the coordinator aborts it
    /// (it looks every 10 s): the patience outlasts both.
    EndAfter(Duration),
}

/// At least once's patience with the committed offsets.
const COMMITTED_PATIENCE: Duration = Duration::from_secs(30);

impl CommittedPatience {
    /// The patience for `guarantee`, exactly once from the producer's
    /// `transaction.timeout.ms` (every replica of a group runs one
    /// configuration).
    pub(crate) fn of(guarantee: Guarantee, producer: &rdkafka::ClientConfig) -> Self {
        match guarantee {
            Guarantee::AtLeastOnce => Self::DecideAgainAfter(COMMITTED_PATIENCE),
            Guarantee::ExactlyOnce => {
                let txn =
                    crate::config::transaction_timeout(producer.get("transaction.timeout.ms"));
                Self::EndAfter(txn + COMMITTED_PATIENCE)
            }
        }
    }

    fn patience(self) -> Duration {
        match self {
            Self::DecideAgainAfter(d) | Self::EndAfter(d) => d,
        }
    }
}

pub(crate) type GroupConsumer = BaseConsumer<GroupContext>;

/// The longest the poller holds off: it polls at least this often, so
/// rebalances are served and `max.poll.interval.ms` never lapses; a loop
/// stuck past it is held by the in-flight bounds (pauses) instead.
const HOLD_OFF: Duration = Duration::from_secs(1);

/// How the poller cuts batches, and how far ahead of the loop it reads.
pub(crate) struct Batching {
    /// Records per batch, and how long a batch waits after its first.
    pub(crate) max: usize,
    pub(crate) linger: Duration,
    /// The poller reads ahead of the loop by this many batches at most
    /// (`batch.read_ahead`): more only waits in memory, and a record's
    /// decision latency counts that wait. librdkafka keeps fetching ahead
    /// meanwhile, into its own queue.
    pub(crate) read_ahead: usize,
    /// Records read and not finished, as the loop last counted them.
    pub(crate) unfinished: Arc<std::sync::atomic::AtomicUsize>,
    /// The worker's clock (`crate::clock`).
    pub(crate) clock: Arc<dyn Clock>,
}

impl Batching {
    /// Waits while the loop holds `read_ahead` batches or more, for
    /// `HOLD_OFF` at most.
    fn hold_off(&self, stop: &AtomicBool) {
        let until = self.clock.now() + HOLD_OFF;
        while self.unfinished.load(Ordering::Relaxed) >= self.read_ahead * self.max
            && self.clock.now() < until
            && !stop.load(Ordering::SeqCst)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Polls until `stop`, handing records to the loop in batches of up to
/// `max` read within `linger` of the first, fingerprinted, reading ahead of
/// the loop by a few batches. Then leaves the group.
pub(crate) fn poll(
    consumer: Arc<GroupConsumer>,
    events: mpsc::Sender<Event>,
    stop: Arc<AtomicBool>,
    reader: Reader,
    batching: Batching,
    mut watch: super::watch::Watch,
) {
    let (max, linger) = (batching.max, batching.linger);
    let clock = batching.clock.clone();
    while !stop.load(Ordering::SeqCst) {
        watch.tick(&consumer, clock.now());
        batching.hold_off(&stop);
        let mut batch: Vec<Arrival> = Vec::with_capacity(max);
        let mut deadline = None;
        while batch.len() < max && !stop.load(Ordering::SeqCst) {
            drop_revoked(&consumer, &mut batch);
            let wait = match deadline {
                None => Duration::from_millis(100),
                Some(until) => {
                    let left = Instant::saturating_duration_since(&until, clock.now());
                    if left.is_zero() {
                        break;
                    }
                    left
                }
            };
            match consumer.poll(wait) {
                Some(Ok(message)) => {
                    let polled = clock.now();
                    match reader.read(&message, polled) {
                        Some(arrival) => batch.push(arrival),
                        None => warn!(
                            topic = rdkafka::Message::topic(&message),
                            "record from a topic no stream reads"
                        ),
                    }
                    deadline.get_or_insert(polled + linger);
                }
                Some(Err(error)) => {
                    // A fetch that failed (a partition's leader moving, an
                    // offset out of range and reset, a refusal): librdkafka
                    // fetches on by itself; said, as it may explain a gap.
                    if !matches!(error, KafkaError::PartitionEOF(_)) {
                        if let Some(held_back) = CONSUMER_ERROR.allow() {
                            warn!(%error, held_back, "consumer error");
                        }
                    }
                    if deadline.is_none() {
                        break;
                    }
                }
                None if deadline.is_none() => break,
                None => {}
            }
        }
        drop_revoked(&consumer, &mut batch);
        // Counted at once (the loop's next count replaces it), so the next
        // hold-off sees this batch.
        batching
            .unfinished
            .fetch_add(batch.len(), Ordering::Relaxed);
        if !batch.is_empty() && events.blocking_send(Event::Records(batch)).is_err() {
            break;
        }
    }
    stop.store(true, Ordering::SeqCst);
    consumer.unsubscribe();
    // Serve the leave's rebalance with the callbacks quiet.
    let until = clock.now() + Duration::from_millis(500);
    while clock.now() < until {
        if consumer.poll(Duration::from_millis(50)).is_none() {
            break;
        }
    }
}

/// Drops, from a batch not handed over yet, the records of partitions
/// revoked meanwhile (a rebalance served inside one of its polls).
fn drop_revoked(consumer: &GroupConsumer, batch: &mut Vec<Arrival>) {
    let revoked = match consumer.context().revoked.lock() {
        Ok(mut revoked) => std::mem::take(&mut *revoked),
        Err(_) => return,
    };
    if !revoked.is_empty() {
        batch.retain(|a| {
            !revoked.iter().any(|(topic, partition)| {
                *topic == a.input.topic && *partition == a.input.partition
            })
        });
    }
}

pub(crate) fn is_nothing_to_commit(error: &KafkaError) -> bool {
    matches!(
        error,
        KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At least once decides again after 30 s; exactly once waits out the
    /// last owner's transaction (its `transaction.timeout.ms`, librdkafka's
    /// 60 s when unset) and 30 s more, then ends the worker.
    #[test]
    fn exactly_once_outwaits_the_last_owners_transaction_before_it_ends() {
        let mut producer = rdkafka::ClientConfig::new();
        assert_eq!(
            CommittedPatience::of(Guarantee::AtLeastOnce, &producer),
            CommittedPatience::DecideAgainAfter(Duration::from_secs(30))
        );
        assert_eq!(
            CommittedPatience::of(Guarantee::ExactlyOnce, &producer),
            CommittedPatience::EndAfter(Duration::from_secs(90))
        );
        producer.set("transaction.timeout.ms", "20000");
        assert_eq!(
            CommittedPatience::of(Guarantee::ExactlyOnce, &producer),
            CommittedPatience::EndAfter(Duration::from_secs(50))
        );
    }
}
