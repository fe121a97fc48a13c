//! The per-record baseline: what deduplication costs without batches. For
//! each record, in order: fingerprint it (the same `bank-txn` profile), one
//! `SET key value NX PX ttl` round trip, produce its output to the clean or
//! audit topic and await the broker's acknowledgement, then mark its offset
//! for commit.
//!
//! It is given its best chance: `linger.ms = 0` (the worker's 5 ms linger
//! would add 5 ms to every record of a one-at-a-time loop), the Redis
//! connection goes straight to the server (not through the counting proxy),
//! and offsets are stored per record and committed by librdkafka every
//! 100 ms, with a synchronous commit at the end, rather than one commit
//! request per record.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Header, Headers, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, Message};
use serde::{Deserialize, Serialize};
use tokio::io::{BufReader, Lines, Stdin};

use super::histogram::Histogram;
use super::replica::{wait_for, CONNECTED, GO};
use idemgate::coordinates::TopicTag;
use idemgate::fingerprint::{fingerprint, Profile, RecordView};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct BaselineSpec {
    pub brokers: String,
    pub group: String,
    pub topic: String,
    pub clean: String,
    pub audit: String,
    pub redis_url: String,
    pub key_prefix: String,
    pub ttl_ms: i64,
    /// Stop after this many records (a prefix of the topic).
    pub records: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct BaselineReport {
    pub processed: u64,
    pub novel: u64,
    pub duplicates: u64,
    pub invalid: u64,
    /// Per record: from the consumer handing it over to its output's
    /// acknowledgement, µs.
    pub latency: Histogram,
    pub first_consumed_us: Option<i64>,
    pub last_committed_us: Option<i64>,
    /// Peak resident memory of the baseline process, read by itself (it
    /// exits right after its report).
    pub peak_rss_bytes: u64,
}

fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

pub(crate) async fn run(
    spec: &BaselineSpec,
    stdin: &mut Lines<BufReader<Stdin>>,
) -> Result<BaselineReport> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &spec.brokers)
        .set("group.id", &spec.group)
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "100")
        .set("enable.auto.offset.store", "false")
        .create()
        .context("creating the baseline's consumer")?;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &spec.brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "0")
        .set("message.timeout.ms", "30000")
        .create()
        .context("creating the baseline's producer")?;
    let client = redis::Client::open(spec.redis_url.as_str())?;
    let mut redis = client.get_multiplexed_async_connection().await?;
    let profile = Profile::resolve("bank-txn", None, None)?;
    let tag = TopicTag::of(&spec.topic);
    println!("{CONNECTED}");
    if !wait_for(stdin, GO).await? {
        bail!("the harness went away before go");
    }
    consumer.subscribe(&[&spec.topic])?;
    let mut report = BaselineReport::default();
    while report.processed < spec.records {
        let message = consumer.recv().await?;
        let started = Instant::now();
        if report.first_consumed_us.is_none() {
            report.first_consumed_us = Some(unix_us());
        }
        let (topic, decision) =
            decide(spec, &profile, tag, &message, &mut redis, &mut report).await?;
        let mut headers = message
            .headers()
            .map(|h| h.detach())
            .unwrap_or_else(OwnedHeaders::new);
        headers = headers.insert(Header {
            key: "idemgate-decision",
            value: Some(decision),
        });
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(headers);
        if let Some(key) = message.key() {
            record = record.key(key);
        }
        if let Some(payload) = message.payload() {
            record = record.payload(payload);
        }
        producer
            .send(record, Timeout::After(Duration::from_secs(5)))
            .await
            .map_err(|(error, _)| error)
            .context("producing a baseline output")?;
        consumer.store_offset_from_message(&message)?;
        report.latency.record(started.elapsed().as_micros() as u64);
        report.processed += 1;
    }
    consumer.commit_consumer_state(CommitMode::Sync)?;
    report.last_committed_us = Some(unix_us());
    report.peak_rss_bytes = super::services::status_bytes(std::process::id(), "VmHWM").unwrap_or(0);
    Ok(report)
}

/// One record's claim: its own round trip.
async fn decide<'a>(
    spec: &'a BaselineSpec,
    profile: &Profile,
    tag: TopicTag,
    message: &BorrowedMessage<'_>,
    redis: &mut redis::aio::MultiplexedConnection,
    report: &mut BaselineReport,
) -> Result<(&'a str, &'static str)> {
    let headers: Vec<(&str, Option<&[u8]>)> = message
        .headers()
        .map(|h| h.iter().map(|h| (h.key, h.value)).collect())
        .unwrap_or_default();
    let view = RecordView {
        key: message.key(),
        payload: message.payload(),
        headers: &headers,
    };
    let Ok(print) = fingerprint(profile, 1 << 20, &view) else {
        report.invalid += 1;
        return Ok((&spec.audit, "invalid"));
    };
    let mut key = spec.key_prefix.as_bytes().to_vec();
    key.extend_from_slice(&print.hash.0[..16]);
    // The same 33 bytes the worker stores: state, holder, digest, time.
    let mut value = Vec::with_capacity(33);
    value.push(b'D');
    value.extend_from_slice(&tag.0.to_be_bytes());
    value.extend_from_slice(&message.partition().to_be_bytes());
    value.extend_from_slice(&message.offset().to_be_bytes());
    value.extend_from_slice(&print.digest.0);
    value.extend_from_slice(&(unix_us() / 1000).to_be_bytes());
    let set: Option<String> = redis::cmd("SET")
        .arg(&key)
        .arg(&value)
        .arg("NX")
        .arg("PX")
        .arg(spec.ttl_ms)
        .query_async(redis)
        .await?;
    Ok(if set.is_some() {
        report.novel += 1;
        (&spec.clean, "novel")
    } else {
        report.duplicates += 1;
        (&spec.audit, "duplicate")
    })
}
