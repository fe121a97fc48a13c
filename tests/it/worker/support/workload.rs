//! Inputs: the bank workload with known duplicates, and producing it, at
//! once or paced in the background.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::ClientConfig;
use tokio::task::JoinHandle;

use super::{wait_until, Setup, LIMIT, SEQ};

/// One input record.
#[derive(Clone, Debug)]
pub struct Record {
    /// Index in the workload, sent as header `x-test-seq`.
    pub seq: usize,
    /// The distinct event it carries; `None` for poison.
    pub event: Option<String>,
    /// Copies of an event with the same variant are duplicates of each
    /// other; another variant (an edited memo) is a conflict.
    pub variant: u8,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
    /// Explicit partition; by key otherwise.
    pub partition: Option<i32>,
}

/// Bank transactions with known duplicates, keyed by account so every copy
/// of an event shares a partition. About half the events come again: the
/// same bytes, re-serialized with the keys reordered and whitespace, or with
/// the amount spelled another way ("100.5" and "100.50"); one event in
/// seventeen also comes back with an edited memo (a conflict), after its
/// other copies. Copies are spread over the workload, some close to their
/// original (same batch), some far.
pub fn bank_workload(events: usize, seed: u64) -> Vec<Record> {
    let mut rng = StdRng::seed_from_u64(seed);
    // (position key, event, variant, payload)
    let mut slots: Vec<(f64, usize, u8, String)> = Vec::new();
    let mut accounts = Vec::with_capacity(events);
    for n in 0..events {
        let account = format!("ACC-{:03}", rng.gen_range(0..23));
        accounts.push(account.clone());
        let txn = format!("TXN-{n:06}");
        let cents: u64 = rng.gen_range(100..1_000_000);
        // Every third amount ends in a zero, to be re-sent without it.
        let cents = if n % 3 == 0 { cents / 10 * 10 } else { cents };
        let amount = format!("{}.{:02}", cents / 100, cents % 100);
        let respelled = match amount.strip_suffix('0') {
            Some(short) => short.to_string(),
            None => format!("{amount}00"),
        };
        let posted = format!("2024-03-{:02}T{:02}:{:02}:00Z", 1 + n % 28, n % 24, n % 60);
        let memo = format!("payment {n}");
        let compact = |amount: &str, memo: &str| {
            format!(
                r#"{{"account_id":"{account}","bank_txn_id":"{txn}","amount":"{amount}","currency":"EUR","posted_at":"{posted}","memo":"{memo}"}}"#
            )
        };
        let reordered = |amount: &str| {
            format!(
                "{{\n  \"memo\": \"{memo}\",\n  \"posted_at\": \"{posted}\",\n  \"currency\": \"EUR\",\n  \"amount\": \"{amount}\",\n  \"bank_txn_id\": \"{txn}\",\n  \"account_id\": \"{account}\"\n}}"
            )
        };
        let at = n as f64;
        slots.push((at, n, 0, compact(&amount, &memo)));
        let mut last = at;
        if rng.gen_bool(0.5) {
            for _ in 0..rng.gen_range(1..=3) {
                let payload = match rng.gen_range(0..3) {
                    0 => compact(&amount, &memo),
                    1 => reordered(&amount),
                    _ => compact(&respelled, &memo),
                };
                // Close behind (same batch) or far behind.
                let later = if rng.gen_bool(0.5) {
                    at + rng.gen_range(0.1..5.0)
                } else {
                    at + rng.gen_range(5.0..events as f64)
                };
                last = last.max(later);
                slots.push((later, n, 0, payload));
            }
        }
        if n % 17 == 5 {
            let edited = format!("{memo} (corrected)");
            slots.push((last + 0.5, n, 1, compact(&amount, &edited)));
        }
    }
    slots.sort_by(|a, b| a.0.total_cmp(&b.0));
    slots
        .into_iter()
        .enumerate()
        .map(|(seq, (_, n, variant, payload))| Record {
            seq,
            event: Some(format!("{}/TXN-{n:06}", accounts[n])),
            variant,
            key: accounts[n].clone().into_bytes(),
            payload: payload.into_bytes(),
            headers: Vec::new(),
            partition: None,
        })
        .collect()
}

/// An input as the broker stored it.
#[derive(Clone, Debug)]
pub struct Sent {
    pub record: Record,
    pub partition: i32,
    pub offset: i64,
}

/// Produces the records in order (per partition order is kept) and returns
/// where each landed.
pub async fn produce(
    brokers: &str,
    topic: &str,
    records: &[Record],
    extra: &[(&str, &str)],
) -> Vec<Sent> {
    send(&producer(brokers, extra), topic, records).await
}

/// An idempotent producer for test inputs.
pub fn producer(brokers: &str, extra: &[(&str, &str)]) -> FutureProducer {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5");
    for (key, value) in extra {
        config.set(*key, *value);
    }
    config.create().expect("creating the test producer")
}

pub async fn send(producer: &FutureProducer, topic: &str, records: &[Record]) -> Vec<Sent> {
    let sends = records.iter().map(|record| {
        let seq = record.seq.to_string();
        let mut headers = OwnedHeaders::new().insert(Header {
            key: SEQ,
            value: Some(seq.as_bytes()),
        });
        for (key, value) in &record.headers {
            headers = headers.insert(Header {
                key,
                value: Some(value.as_slice()),
            });
        }
        let mut message = FutureRecord::to(topic)
            .key(record.key.as_slice())
            .payload(record.payload.as_slice())
            .headers(headers);
        if let Some(partition) = record.partition {
            message = message.partition(partition);
        }
        producer.send(message, Timeout::After(LIMIT))
    });
    let delivered = tokio::time::timeout(LIMIT, futures::future::join_all(sends))
        .await
        .unwrap_or_else(|_| panic!("the workload was not produced within {LIMIT:?}"));
    records
        .iter()
        .zip(delivered)
        .map(|(record, result)| {
            let delivery =
                result.unwrap_or_else(|(e, _)| panic!("producing input {}: {e}", record.seq));
            Sent {
                record: record.clone(),
                partition: delivery.partition,
                offset: delivery.offset,
            }
        })
        .collect()
}

/// Records produced in the background in paced chunks, so the stream is
/// still flowing while a test starts and stops replicas.
pub struct Flow {
    chunks_sent: Arc<AtomicU64>,
    pub chunks: usize,
    task: JoinHandle<Vec<Sent>>,
}

impl Flow {
    pub fn start(setup: &Setup, records: &[Record], chunk: usize, pause: Duration) -> Flow {
        let chunks_sent = Arc::new(AtomicU64::new(0));
        let (brokers, topic, records) = (
            setup.brokers.clone(),
            setup.topics.raw.clone(),
            records.to_vec(),
        );
        let counter = chunks_sent.clone();
        Flow {
            chunks: records.len().div_ceil(chunk),
            task: tokio::spawn(async move {
                let producer = producer(&brokers, &[]);
                let mut sent = Vec::with_capacity(records.len());
                for part in records.chunks(chunk) {
                    sent.extend(send(&producer, &topic, part).await);
                    counter.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(pause).await;
                }
                sent
            }),
            chunks_sent,
        }
    }

    pub fn sent(&self) -> usize {
        self.chunks_sent.load(Ordering::SeqCst) as usize
    }

    pub async fn wait_sent(&self, chunks: usize) {
        wait_until(&format!("{chunks} chunks produced"), || {
            self.sent() >= chunks
        })
        .await;
    }

    pub async fn finish(self) -> Vec<Sent> {
        tokio::time::timeout(LIMIT, self.task)
            .await
            .unwrap_or_else(|_| panic!("the workload was not produced within {LIMIT:?}"))
            .expect("the producing task panicked")
    }
}
