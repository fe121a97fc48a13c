//! The consumer side: group membership, batches, offsets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use tracing::{debug, info, warn};

/// A polled record, owned so a batch outlives the poll that read it.
#[derive(Clone, Debug)]
pub(crate) struct Input {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) payload: Option<Vec<u8>>,
    pub(crate) headers: Vec<(String, Option<Vec<u8>>)>,
    /// The record's timestamp (ms), the clock in event-time mode.
    pub(crate) timestamp: Option<i64>,
    /// A header name that is not UTF-8 (shown lossily in `headers`): the
    /// record is `invalid`, since its headers cannot be written out as
    /// they came.
    pub(crate) bad_header_name: Option<String>,
}

impl Input {
    fn from_message(message: &BorrowedMessage<'_>) -> Input {
        let (headers, bad_header_name) = read_headers(message);
        Input {
            topic: message.topic().to_string(),
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().map(<[u8]>::to_vec),
            headers,
            timestamp: message.timestamp().to_millis(),
            bad_header_name,
        }
    }
}

/// A record's headers, read through librdkafka itself: rdkafka's header
/// iterator unwraps every name as UTF-8 and panics on one that is not, and
/// a record must never stop the worker. Such a name comes back lossily
/// (U+FFFD), and is named in the second value.
pub fn read_headers(
    message: &BorrowedMessage<'_>,
) -> (Vec<(String, Option<Vec<u8>>)>, Option<String>) {
    use rdkafka::bindings as rd;
    let mut headers_ptr: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: `message.ptr()` is the live message this borrow holds; the
    // headers it yields belong to it and are only read within this call.
    let found = unsafe { rd::rd_kafka_message_headers(message.ptr(), &mut headers_ptr) };
    if found != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || headers_ptr.is_null() {
        return (Vec::new(), None);
    }
    // SAFETY: as above; `headers_ptr` is non-null.
    let count = unsafe { rd::rd_kafka_header_cnt(headers_ptr) };
    let mut headers = Vec::with_capacity(count);
    let mut bad_name = None;
    for index in 0..count {
        let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
        // SAFETY: `index < count`; the out-pointers are valid locals; what
        // they point to lives as long as the message.
        let got = unsafe {
            rd::rd_kafka_header_get_all(headers_ptr, index, &mut name, &mut value, &mut size)
        };
        if got != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            continue;
        }
        // SAFETY: librdkafka's header names are NUL-terminated, and a
        // non-null value has `size` bytes.
        let (name, value) = unsafe {
            let name = std::ffi::CStr::from_ptr(name).to_bytes();
            let value = (!value.is_null())
                .then(|| std::slice::from_raw_parts(value.cast::<u8>(), size).to_vec());
            (name, value)
        };
        let name = match std::str::from_utf8(name) {
            Ok(name) => name.to_string(),
            Err(_) => {
                let lossy = String::from_utf8_lossy(name).into_owned();
                bad_name.get_or_insert_with(|| lossy.clone());
                lossy
            }
        };
        headers.push((name, value));
    }
    (headers, bad_name)
}

/// Shared between the rebalance callbacks and the loop.
#[derive(Default)]
pub struct GroupState {
    /// Bumped on every revoke: a batch started under an older value may
    /// hold records of partitions this replica no longer owns.
    pub revocations: AtomicU64,
    pub(crate) assigned: AtomicBool,
}

/// Rebalance protocol (eager assignors): on revoke, librdkafka calls
/// `pre_rebalance` inside a poll, before the partitions go. The loop only
/// polls between batches or while a batch waits, and stores an offset only
/// once its record is decided and delivered, so committing the stored
/// offsets synchronously here hands over exactly the finished work. The
/// revocation counter tells a waiting batch to drop records it no longer
/// owns; their next owner meets their claims as its own (same coordinates).
pub(crate) struct GroupContext {
    pub(crate) state: Arc<GroupState>,
    /// librdkafka's log lines, rate-limited.
    pub(crate) logs: super::client_logs::ClientLogs,
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
                // The internal "unassigned" partition (-1) has no lag.
                if *id >= 0 && partition.fetch_state == "active" {
                    crate::metrics::lag(name, *id, partition.consumer_lag);
                }
            }
        }
    }
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(partitions) = rebalance {
            self.state.revocations.fetch_add(1, Ordering::SeqCst);
            self.state.assigned.store(false, Ordering::SeqCst);
            match consumer.commit_consumer_state(CommitMode::Sync) {
                Ok(()) => info!(
                    partitions = partitions.count(),
                    "revoked: finished work committed"
                ),
                Err(error) if is_nothing_to_commit(&error) => {}
                Err(error) => warn!(%error, "revoked: commit failed"),
            }
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(partitions) => {
                self.state
                    .assigned
                    .store(partitions.count() > 0, Ordering::SeqCst);
                info!(partitions = partitions.count(), "assigned");
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(error) => warn!(%error, "rebalance error"),
        }
    }
}

pub(crate) fn is_nothing_to_commit(error: &KafkaError) -> bool {
    matches!(
        error,
        KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)
    )
}

pub(crate) type GroupConsumer = StreamConsumer<GroupContext>;

/// Reads up to `max` records, waiting at most `linger` after the first.
/// Records that arrived while a batch waited come first.
pub(crate) async fn poll_batch(
    consumer: &GroupConsumer,
    carry: &mut Vec<Input>,
    max: usize,
    linger: Duration,
    idle: Duration,
) -> Vec<Input> {
    let mut batch: Vec<Input> = std::mem::take(carry);
    let started = Instant::now();
    let mut deadline = if batch.is_empty() {
        started + idle
    } else {
        started + linger
    };
    while batch.len() < max {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match tokio::time::timeout(left, consumer.recv()).await {
            Ok(Ok(message)) => {
                if batch.is_empty() {
                    deadline = Instant::now() + linger;
                }
                batch.push(Input::from_message(&message));
            }
            Ok(Err(error)) => {
                debug!(%error, "consumer error");
                break;
            }
            Err(_) => break,
        }
    }
    batch
}

/// Polls for `duration` with every assigned partition paused, so group
/// membership and rebalances are served while a batch waits, and nothing
/// new is read. Anything that still arrives is kept for the next batch.
pub(crate) async fn keep_alive(
    consumer: &GroupConsumer,
    carry: &mut Vec<Input>,
    duration: Duration,
) {
    if let Ok(assignment) = consumer.assignment() {
        if assignment.count() > 0 {
            if let Err(error) = consumer.pause(&assignment) {
                debug!(%error, "pause failed");
            }
        }
    }
    let until = Instant::now() + duration;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match tokio::time::timeout(left, consumer.recv()).await {
            Ok(Ok(message)) => carry.push(Input::from_message(&message)),
            Ok(Err(_)) | Err(_) => {}
        }
    }
}

/// Resumes every assigned partition but those held back (deferred).
pub(crate) fn resume_all(
    consumer: &GroupConsumer,
    held_back: &std::collections::HashMap<(String, i32), Instant>,
) {
    if let Ok(assignment) = consumer.assignment() {
        let mut list = TopicPartitionList::new();
        for element in assignment.elements() {
            let key = (element.topic().to_string(), element.partition());
            if !held_back.contains_key(&key) {
                list.add_partition(element.topic(), element.partition());
            }
        }
        if list.count() > 0 {
            if let Err(error) = consumer.resume(&list) {
                debug!(%error, "resume failed");
            }
        }
    }
}

/// Pauses the given partitions (deferred ones, so the others get read).
pub(crate) fn pause(consumer: &GroupConsumer, partitions: &[(String, i32)]) {
    let mut list = TopicPartitionList::new();
    for (topic, partition) in partitions {
        list.add_partition(topic, *partition);
    }
    if list.count() > 0 {
        if let Err(error) = consumer.pause(&list) {
            debug!(%error, "pause failed");
        }
    }
}

/// Stores the next offset of each partition's finished prefix and commits.
pub(crate) fn commit(
    consumer: &GroupConsumer,
    next_offsets: &BTreeMap<(String, i32), i64>,
    mode: CommitMode,
) {
    if !store(consumer, next_offsets) {
        return;
    }
    match consumer.commit_consumer_state(mode) {
        Ok(()) => crate::metrics::committed(),
        Err(error) if is_nothing_to_commit(&error) => {}
        Err(error) => warn!(%error, "commit failed"),
    }
}

/// Stores the next offset of each partition's finished prefix, for the next
/// commit: the one after the batch, or the one on revoke. Returns whether
/// anything was stored.
pub(crate) fn store(consumer: &GroupConsumer, next_offsets: &BTreeMap<(String, i32), i64>) -> bool {
    if next_offsets.is_empty() {
        return false;
    }
    let mut list = TopicPartitionList::new();
    let assignment = consumer.assignment().unwrap_or_default();
    for ((topic, partition), offset) in next_offsets {
        // A partition revoked meanwhile belongs to its next owner now.
        if assignment.find_partition(topic, *partition).is_none() {
            continue;
        }
        if let Err(error) = list.add_partition_offset(topic, *partition, Offset::Offset(*offset)) {
            warn!(%error, topic, partition, "cannot list offset");
        }
    }
    if list.count() == 0 {
        return false;
    }
    if let Err(error) = consumer.store_offsets(&list) {
        warn!(%error, "storing offsets failed");
        return false;
    }
    true
}
