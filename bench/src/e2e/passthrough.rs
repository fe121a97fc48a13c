//! The passthrough: the ceiling any Kafka-to-Kafka worker has on this
//! machine. It consumes the raw topic and produces every record (key,
//! payload, headers, timestamp) to a clean topic, with no store, no
//! fingerprint and no decision, and commits offsets every 100 ms, only
//! those whose outputs (and every output before them in the partition) are
//! delivered.
//!
//! Its clients are the worker's own: `idemgate::config::client_configs` of
//! the same TOML the exact run uses (its own `group.id`), so the consumer
//! and producer settings are exactly the worker's. Like the worker's
//! polling thread it reads batches of up to `batch.max_records` within
//! `batch.linger` of the first record; it produces a batch as soon as it
//! is read (a `ThreadedProducer`, whose own thread serves the delivery
//! reports) and never waits for one batch before reading the next.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use tokio::io::{BufReader, Lines, Stdin};

use super::histogram::Histogram;
use super::replica::{wait_for, CONNECTED, GO, STOP};
use idemgate::config::Config;

const COMMIT_EVERY: Duration = Duration::from_millis(100);

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PassthroughSpec {
    /// The exact run's TOML with the passthrough's own group.
    pub config: String,
    pub topic: String,
    pub clean: String,
    pub max_records: usize,
    pub linger_ms: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct PassthroughReport {
    pub consumed: u64,
    pub delivered: u64,
    pub failed: u64,
    pub batches: u64,
    pub commits: u64,
    /// Per record: from its poll to its delivery report, µs.
    pub latency: Histogram,
    /// Unix µs of the first poll that returned a record.
    pub first_poll_us: Option<i64>,
    pub peak_rss_bytes: u64,
}

fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// What the producer's thread hands back: delivered (partition, offset)
/// pairs and the latencies, taken by the polling thread after each batch.
#[derive(Default)]
struct Delivered {
    done: Vec<(i32, i64)>,
    failed: u64,
    latency: Histogram,
}

struct Reports {
    delivered: Arc<Mutex<Delivered>>,
}

impl ClientContext for Reports {}

/// Which input record an output was, and when it was polled.
struct Sent {
    partition: i32,
    offset: i64,
    polled: Instant,
}

impl ProducerContext for Reports {
    type DeliveryOpaque = Box<Sent>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent: Box<Sent>) {
        let mut d = self.delivered.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(_) => {
                d.latency.record(sent.polled.elapsed().as_micros() as u64);
                d.done.push((sent.partition, sent.offset));
            }
            Err(_) => d.failed += 1,
        }
    }
}

/// Per input partition, the offsets read and whether each was delivered,
/// in order; what may be committed is the prefix that was.
#[derive(Default)]
struct Partition {
    pending: VecDeque<(i64, bool)>,
    /// The next offset to commit, when it moved since the last commit.
    next: Option<i64>,
    dirty: bool,
}

impl Partition {
    fn delivered(&mut self, offset: i64) {
        if let Ok(i) = self.pending.binary_search_by_key(&offset, |(o, _)| *o) {
            self.pending[i].1 = true;
        }
        while let Some(&(o, true)) = self.pending.front() {
            self.pending.pop_front();
            self.next = Some(o + 1);
            self.dirty = true;
        }
    }
}

pub(crate) async fn run(
    spec: &PassthroughSpec,
    stdin: &mut Lines<BufReader<Stdin>>,
) -> Result<PassthroughReport> {
    let config = Config::parse(&spec.config).context("the passthrough's config")?;
    let (consumer_config, producer_config) = idemgate::config::client_configs(&config);
    let consumer: BaseConsumer = consumer_config
        .create()
        .context("creating the passthrough's consumer")?;
    let delivered = Arc::new(Mutex::new(Delivered::default()));
    let producer: ThreadedProducer<Reports> = producer_config
        .create_with_context(Reports {
            delivered: delivered.clone(),
        })
        .context("creating the passthrough's producer")?;
    println!("{CONNECTED}");
    if !wait_for(stdin, GO).await? {
        bail!("the harness went away before go");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let spec = spec.clone();
    let worker =
        tokio::task::spawn_blocking(move || pass(&spec, consumer, producer, delivered, &flag));
    let _ = wait_for(stdin, STOP).await;
    stop.store(true, Ordering::SeqCst);
    let mut report = worker.await.context("the passthrough's thread")??;
    report.peak_rss_bytes = super::services::status_bytes(std::process::id(), "VmHWM").unwrap_or(0);
    Ok(report)
}

fn pass(
    spec: &PassthroughSpec,
    consumer: BaseConsumer,
    producer: ThreadedProducer<Reports>,
    delivered: Arc<Mutex<Delivered>>,
    stop: &AtomicBool,
) -> Result<PassthroughReport> {
    consumer.subscribe(&[&spec.topic])?;
    let linger = Duration::from_millis(spec.linger_ms);
    let mut partitions: Vec<Partition> = Vec::new();
    let mut report = PassthroughReport::default();
    let mut committed_at = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let batch = read_batch(&consumer, spec.max_records, linger, stop);
        if let Some((_, polled)) = batch.first() {
            report
                .first_poll_us
                .get_or_insert_with(|| unix_us() - polled.elapsed().as_micros() as i64);
            report.batches += 1;
        }
        for (message, polled) in &batch {
            let p = message.partition() as usize;
            if partitions.len() <= p {
                partitions.resize_with(p + 1, Partition::default);
            }
            partitions[p].pending.push_back((message.offset(), false));
            produce(&producer, &spec.clean, message, *polled)?;
            report.consumed += 1;
        }
        drop(batch);
        take_delivered(&delivered, &mut partitions, &mut report);
        if committed_at.elapsed() >= COMMIT_EVERY {
            committed_at = Instant::now();
            commit(
                &consumer,
                &spec.topic,
                &mut partitions,
                CommitMode::Async,
                &mut report,
            );
        }
    }
    producer.flush(Duration::from_secs(30))?;
    take_delivered(&delivered, &mut partitions, &mut report);
    for p in partitions.iter_mut() {
        p.dirty = p.next.is_some();
    }
    commit(
        &consumer,
        &spec.topic,
        &mut partitions,
        CommitMode::Sync,
        &mut report,
    );
    let d = delivered.lock().unwrap_or_else(|e| e.into_inner());
    report.failed = d.failed;
    report.latency = d.latency.clone();
    Ok(report)
}

/// Up to `max` records read within `linger` of the first, as the worker's
/// polling thread reads them.
fn read_batch<'c>(
    consumer: &'c BaseConsumer,
    max: usize,
    linger: Duration,
    stop: &AtomicBool,
) -> Vec<(BorrowedMessage<'c>, Instant)> {
    let mut batch = Vec::with_capacity(max);
    let mut deadline: Option<Instant> = None;
    while batch.len() < max && !stop.load(Ordering::Relaxed) {
        let wait = match deadline {
            None => Duration::from_millis(100),
            Some(until) => match until.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left,
                _ => break,
            },
        };
        match consumer.poll(wait) {
            Some(Ok(message)) => {
                let polled = Instant::now();
                deadline.get_or_insert(polled + linger);
                batch.push((message, polled));
            }
            Some(Err(_)) | None if deadline.is_none() => break,
            _ => {}
        }
    }
    batch
}

fn produce(
    producer: &ThreadedProducer<Reports>,
    topic: &str,
    message: &BorrowedMessage<'_>,
    polled: Instant,
) -> Result<()> {
    let headers = message.headers().map(|h| h.detach()).unwrap_or_default();
    let sent = Box::new(Sent {
        partition: message.partition(),
        offset: message.offset(),
        polled,
    });
    let mut record: BaseRecord<'_, [u8], [u8], Box<Sent>> =
        BaseRecord::with_opaque_to(topic, sent).headers(headers);
    if let Some(key) = message.key() {
        record = record.key(key);
    }
    if let Some(payload) = message.payload() {
        record = record.payload(payload);
    }
    if let Some(ms) = message.timestamp().to_millis() {
        record = record.timestamp(ms);
    }
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                // The producer's own thread serves the reports; let it.
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((error, _)) => return Err(error).context("queueing a passthrough output"),
        }
    }
}

fn take_delivered(
    delivered: &Mutex<Delivered>,
    partitions: &mut [Partition],
    report: &mut PassthroughReport,
) {
    let done = std::mem::take(&mut delivered.lock().unwrap_or_else(|e| e.into_inner()).done);
    report.delivered += done.len() as u64;
    for (p, o) in done {
        partitions[p as usize].delivered(o);
    }
}

fn commit(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: &mut [Partition],
    mode: CommitMode,
    report: &mut PassthroughReport,
) {
    let mut list = TopicPartitionList::new();
    for (p, state) in partitions.iter_mut().enumerate() {
        if let (true, Some(next)) = (state.dirty, state.next) {
            let _ = list.add_partition_offset(topic, p as i32, Offset::Offset(next));
            state.dirty = false;
        }
    }
    if list.count() > 0 && consumer.commit(&list, mode).is_ok() {
        report.commits += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_delivered_prefix_of_a_partition_is_committed() {
        let mut p = Partition::default();
        for offset in [10, 11, 13, 14] {
            p.pending.push_back((offset, false));
        }
        p.delivered(11);
        assert_eq!(p.next, None, "10 is not delivered yet");
        p.delivered(10);
        assert_eq!((p.next, p.dirty), (Some(12), true));
        p.delivered(14);
        assert_eq!(p.next, Some(12));
        p.delivered(13);
        assert_eq!(p.next, Some(15));
        assert!(p.pending.is_empty());
    }
}
