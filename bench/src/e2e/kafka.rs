//! The bench's Kafka side: topics, the loader that fills the raw topic
//! before anything is timed, and the watcher that tells when a consumer
//! group has committed every record.
//!
//! A run is complete when the group's committed offset of every partition
//! reaches that partition's high watermark, read once after the load: the
//! raw topic is fresh and written by the loader alone, without
//! transactions, so its offsets are the records (the watermarks are checked
//! to add up to the records the loader had acknowledged).

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::stream::{FuturesUnordered, StreamExt};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::children::ChildProcess;
use super::runs::unix_us;
use idemgate_testkit::feed::Workload;

/// A line on stderr rewritten in place (carriage return), at most five
/// times a second.
pub(crate) struct Progress {
    label: String,
    total: u64,
    started: Instant,
    printed: Option<Instant>,
}

impl Progress {
    pub fn new(label: impl Into<String>, total: u64) -> Progress {
        Progress {
            label: label.into(),
            total: total.max(1),
            started: Instant::now(),
            printed: None,
        }
    }

    pub fn update(&mut self, done: u64) {
        let now = Instant::now();
        if self
            .printed
            .is_some_and(|at| now - at < Duration::from_millis(200))
        {
            return;
        }
        self.printed = Some(now);
        self.draw(done);
    }

    fn draw(&self, done: u64) {
        const WIDTH: usize = 30;
        let fraction = (done as f64 / self.total as f64).min(1.0);
        let filled = (fraction * WIDTH as f64) as usize;
        let elapsed = self.started.elapsed().as_secs_f64().max(1e-3);
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r{:<28} [{}{}] {:>3.0}% {:>9}/{} {:>8.0}/s {:>6.1}s",
            self.label,
            "#".repeat(filled),
            " ".repeat(WIDTH - filled),
            fraction * 100.0,
            done,
            self.total,
            done as f64 / elapsed,
            elapsed
        );
        let _ = err.flush();
    }

    pub fn finish(&self, done: u64) {
        self.draw(done);
        eprintln!();
    }
}

/// Creates the topics (the test kit's, which waits until the broker's
/// metadata lists every partition of each).
pub(crate) async fn create_topics(brokers: &str, topics: &[&str], partitions: i32) -> Result<()> {
    let brokers = brokers.to_string();
    let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let topics: Vec<(&str, i32)> = topics.iter().map(|t| (t.as_str(), partitions)).collect();
        idemgate_testkit::kafka::create_topics(&brokers, &topics);
    })
    .await
    .context("creating topics")
}

/// Deletes a run's output topics once it is counted (its check reads the
/// replicas' metrics, not the outputs): the broker drops their logs, so no
/// later run shares the page cache and the disk with them.
pub(crate) async fn delete_topics(brokers: &str, topics: &[String]) -> Result<()> {
    let admin = idemgate_testkit::kafka::admin(brokers);
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let options = rdkafka::admin::AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(20)))
        .request_timeout(Some(Duration::from_secs(20)));
    for result in admin
        .delete_topics(&names, &options)
        .await
        .context("deleting topics")?
    {
        if let Err((topic, code)) = result {
            bail!("deleting topic {topic}: {code:?}");
        }
    }
    Ok(())
}

/// Where the loaded records are.
#[derive(Clone, Debug)]
pub(crate) struct Loaded {
    pub topic: String,
    /// Per partition, its high watermark after the load.
    pub ends: Vec<i64>,
    pub records: u64,
    pub seconds: f64,
}

/// Produces every record of the workload in arrival order, as fast as the
/// broker takes them, waits for every delivery report, and reads where
/// each partition ends.
pub(crate) async fn load(
    brokers: &str,
    topic: &str,
    partitions: i32,
    workload: &Workload,
) -> Result<Loaded> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        // Order within a partition makes every copy land after its first
        // attempt; idempotence keeps that order through retries.
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .set("message.timeout.ms", "120000")
        .create()
        .context("creating the loader's producer")?;
    let total = workload.records.len() as u64;
    let mut progress = Progress::new(format!("loading {topic}"), total);
    let started = Instant::now();
    let mut acked = 0u64;
    let mut inflight = FuturesUnordered::new();
    const WINDOW: usize = 200_000;
    for planned in &workload.records {
        let (key, payload) = workload.render(planned);
        let partition = workload.partition(planned.event, partitions);
        let attempt = planned.attempt.to_string();
        let mut record = FutureRecord::to(topic)
            .partition(partition)
            .key(key.as_bytes())
            .payload(&payload[..])
            .timestamp(planned.arrival_ms)
            .headers(OwnedHeaders::new().insert(Header {
                key: "x-delivery-attempt",
                value: Some(attempt.as_bytes()),
            }));
        loop {
            match producer.send_result(record) {
                Ok(delivery) => {
                    inflight.push(delivery);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    let Some(result) = inflight.next().await else {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    };
                    note(result, &mut acked)?;
                }
                Err((error, _)) => return Err(error).context("queueing a record"),
            }
        }
        while inflight.len() >= WINDOW {
            if let Some(result) = inflight.next().await {
                note(result, &mut acked)?;
            }
        }
        progress.update(acked);
    }
    while let Some(result) = inflight.next().await {
        note(result, &mut acked)?;
        progress.update(acked);
    }
    progress.finish(acked);
    producer.flush(Duration::from_secs(30))?;
    let seconds = started.elapsed().as_secs_f64();
    let ends = tokio::task::block_in_place(|| {
        (0..partitions)
            .map(|p| {
                let (_, high) =
                    producer
                        .client()
                        .fetch_watermarks(topic, p, Duration::from_secs(10))?;
                Ok(high)
            })
            .collect::<Result<Vec<i64>>>()
    })
    .with_context(|| format!("reading the high watermarks of {topic}"))?;
    let held: i64 = ends.iter().sum();
    if held != acked as i64 {
        bail!("{topic} holds {held} records by its high watermarks; the loader had {acked} acknowledged");
    }
    Ok(Loaded {
        topic: topic.to_string(),
        ends,
        records: acked,
        seconds,
    })
}

fn note(
    result: Result<
        rdkafka::producer::future_producer::OwnedDeliveryResult,
        futures::channel::oneshot::Canceled,
    >,
    acked: &mut u64,
) -> Result<()> {
    match result {
        Ok(Ok(_)) => {
            *acked += 1;
            Ok(())
        }
        Ok(Err((error, _))) => Err(error).context("a record was not delivered"),
        Err(_) => bail!("the producer dropped a delivery report"),
    }
}

/// Watches the group until every record is committed; returns the unix µs
/// it saw the last one.
pub(crate) async fn watch(
    brokers: &str,
    group: &str,
    loaded: &Loaded,
    label: &str,
    children: &mut [ChildProcess],
) -> Result<i64> {
    let watcher = CommitWatch::new(brokers, group, loaded)?;
    let mut progress = Progress::new(label, loaded.records);
    let mut last = (0u64, Instant::now());
    let mut failed: Option<String> = None;
    loop {
        // Polling the broker's committed offsets: the group commits every
        // commit interval, and nothing here can be told when it does.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let done = match tokio::task::block_in_place(|| watcher.committed()) {
            Ok((done, true)) => {
                let at = unix_us();
                progress.finish(done);
                return Ok(at);
            }
            Ok((done, false)) => {
                progress.update(done);
                done
            }
            // Until the group's coordinator is up (a fresh broker makes
            // __consumer_offsets on the first group request and then loads
            // it) the read fails with NotCoordinator or a load in progress:
            // no reading this time. A lasting failure meets the bound below.
            Err(error) => {
                failed = Some(format!("{error:#}"));
                last.0
            }
        };
        if done != last.0 {
            last = (done, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(90) {
            eprintln!();
            let tails: Vec<String> = children.iter().map(|c| c.tail()).collect();
            bail!(
                "{label}: no offset committed for 90s at {done} of {} (last failed read: {})\n{}",
                loaded.records,
                failed.as_deref().unwrap_or("none"),
                tails.join("\n")
            );
        }
        for child in children.iter_mut() {
            if child.exited() {
                eprintln!();
                bail!("{label}: a replica exited\n{}", child.tail());
            }
        }
    }
}

/// Reads a group's committed offsets without joining it.
pub(crate) struct CommitWatch {
    consumer: BaseConsumer,
    partitions: TopicPartitionList,
    ends: Vec<i64>,
}

impl CommitWatch {
    pub fn new(brokers: &str, group: &str, loaded: &Loaded) -> Result<CommitWatch> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()?;
        let mut partitions = TopicPartitionList::new();
        for p in 0..loaded.ends.len() as i32 {
            partitions.add_partition(&loaded.topic, p);
        }
        Ok(CommitWatch {
            consumer,
            partitions,
            ends: loaded.ends.clone(),
        })
    }

    /// Records committed so far (each partition counted up to its end) and
    /// whether every partition is complete.
    pub fn committed(&self) -> Result<(u64, bool)> {
        let list = self
            .consumer
            .committed_offsets(self.partitions.clone(), Duration::from_secs(5))?;
        let mut done = 0u64;
        let mut complete = true;
        for element in list.elements() {
            let end = self.ends[element.partition() as usize];
            let at = match element.offset() {
                Offset::Offset(n) => n,
                _ => 0,
            };
            done += at.clamp(0, end) as u64;
            complete &= at >= end;
        }
        Ok((done, complete))
    }
}
