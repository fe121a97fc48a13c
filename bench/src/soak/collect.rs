//! Reading the soak's topics as it runs: every record of the output topics
//! (or, at the end, of the inputs) from the first offset, kept compact (a
//! million outputs fit in a few hundred MB), on a thread of its own, with
//! the isolation level the guarantee asks of a clean-topic reader.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use idemgate::decision::{DECIDED_AT, DECISION, FIRST_SEEN, INPUT, REASON, SOURCE_HASH, TIER};
use idemgate_testkit::TEST_ID;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::plan::{digest, parse_id};

/// Decisions as small numbers.
pub(crate) const DECISIONS: [&str; 6] = [
    "novel",
    "duplicate",
    "conflict",
    "invalid",
    "unverified",
    "<other>",
];
pub(crate) const NOVEL: u8 = 0;
pub(crate) const DUPLICATE: u8 = 1;
pub(crate) const CONFLICT: u8 = 2;
pub(crate) const INVALID: u8 = 3;
pub(crate) const UNVERIFIED: u8 = 4;

/// One record read back, compact.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// Index into the topics the collector was given.
    pub topic: u8,
    pub partition: i32,
    pub offset: i64,
    /// From its `x-test-id`: the stream and the input's number (None when
    /// the header is missing or unknown).
    pub input: Option<(u8, u32)>,
    pub decision: u8,
    /// `exact`, `filter`, or none.
    pub tier: Option<&'static str>,
    /// `idemgate-first-seen`: the holder's input (index into the
    /// collector's input names), partition and offset.
    pub first_seen: Option<(u8, i32, i64)>,
    pub first_seen_unknown: bool,
    pub hash: Option<[u8; 32]>,
    /// The reason code (before the first `:`), for invalid records.
    pub reason: Option<String>,
    pub digest: u64,
    /// How many decision headers it carries (must be 1 on an output).
    pub decision_headers: u8,
    /// `idemgate-decided-at` (ms since the epoch) and the partition of
    /// `idemgate-input`: when, and on which input partition, it was decided.
    pub decided_at: Option<i64>,
    pub input_partition: Option<i32>,
}

/// A reader thread over some topics; `stop` ends it and hands the records.
pub(crate) struct Collector {
    stop: Arc<AtomicBool>,
    shared: Arc<Mutex<State>>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct State {
    records: Vec<Seen>,
    /// By stream, the input numbers with at least one record here.
    ids: [HashSet<u32>; 2],
}

impl Collector {
    /// Reads `topics` (name, partitions) from the beginning; `inputs` names
    /// the input topics by stream, to resolve first-seen headers.
    pub fn start(
        brokers: &str,
        topics: &[(String, i32)],
        inputs: [String; 2],
        read_committed: bool,
    ) -> Collector {
        let consumer: BaseConsumer<Quiet> = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", idemgate_testkit::unique("soak-reader"))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set(
                "isolation.level",
                if read_committed {
                    "read_committed"
                } else {
                    "read_uncommitted"
                },
            )
            // Critical only: its connection failures while the broker
            // restarts are expected (see `Quiet`).
            .set("log_level", "2")
            .create_with_context(Quiet)
            .expect("reader");
        let mut list = TopicPartitionList::new();
        for (topic, partitions) in topics {
            for partition in 0..*partitions {
                list.add_partition_offset(topic, partition, Offset::Beginning)
                    .expect("assignment");
            }
        }
        consumer.assign(&list).expect("assign");
        let names: Vec<String> = topics.iter().map(|(t, _)| t.clone()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Mutex::new(State::default()));
        let thread = {
            let (stop, shared) = (stop.clone(), shared.clone());
            std::thread::spawn(move || read(consumer, &names, &inputs, &stop, &shared))
        };
        Collector {
            stop,
            shared,
            thread: Some(thread),
        }
    }

    /// Distinct inputs with a record here, by stream.
    pub fn inputs_seen(&self) -> [usize; 2] {
        let state = self.shared.lock().expect("collector state");
        [state.ids[0].len(), state.ids[1].len()]
    }

    pub fn records(&self) -> usize {
        self.shared.lock().expect("collector state").records.len()
    }

    pub fn finish(mut self) -> Vec<Seen> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        std::mem::take(&mut self.shared.lock().expect("collector state").records)
    }
}

/// The readers' client context. While the broker restarts, librdkafka
/// reports every failed reconnect (a transport failure, all brokers down)
/// and then reconnects by itself: not news, and a hundred lines a restart.
/// Any other error is printed.
struct Quiet;

fn expected(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown)
    )
}

impl ClientContext for Quiet {
    fn error(&self, error: KafkaError, reason: &str) {
        if !expected(&error) {
            eprintln!("soak reader: {error}: {reason}");
        }
    }
}

impl ConsumerContext for Quiet {}

fn read(
    consumer: BaseConsumer<Quiet>,
    names: &[String],
    inputs: &[String; 2],
    stop: &AtomicBool,
    shared: &Mutex<State>,
) {
    let mut batch = Vec::with_capacity(10_000);
    while !stop.load(Ordering::SeqCst) {
        let mut wait = Duration::from_millis(100);
        while batch.len() < 10_000 {
            let Some(result) = consumer.poll(wait) else {
                break;
            };
            wait = Duration::ZERO;
            match result {
                Ok(message) => {
                    let topic = names.iter().position(|n| n == message.topic()).unwrap_or(0) as u8;
                    batch.push(seen(&message, topic, inputs));
                }
                Err(KafkaError::PartitionEOF(_)) => {}
                Err(error) if expected(&error) => {}
                Err(error) => eprintln!("soak reader: {error}"),
            }
        }
        if !batch.is_empty() {
            let mut state = shared.lock().expect("collector state");
            for record in batch.drain(..) {
                if let Some((stream, n)) = record.input {
                    state.ids[stream as usize].insert(n);
                }
                state.records.push(record);
            }
        }
    }
}

fn seen(message: &rdkafka::message::BorrowedMessage<'_>, topic: u8, inputs: &[String; 2]) -> Seen {
    let (headers, _) = idemgate::worker::read_headers(message);
    let text = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
            .and_then(|v| std::str::from_utf8(v).ok())
    };
    let decision = match text(DECISION) {
        Some(d) => DECISIONS[..5].iter().position(|x| *x == d).unwrap_or(5) as u8,
        None => 5,
    };
    let (first_seen, first_seen_unknown) = match text(FIRST_SEEN) {
        Some(value) => {
            let parts: Vec<&str> = value.rsplitn(3, '/').collect();
            let parsed = (parts.len() == 3)
                .then(|| {
                    let input = inputs.iter().position(|t| t == parts[2])? as u8;
                    Some((input, parts[1].parse().ok()?, parts[0].parse().ok()?))
                })
                .flatten();
            (parsed, parsed.is_none())
        }
        None => (None, false),
    };
    Seen {
        topic,
        partition: message.partition(),
        offset: message.offset(),
        input: text(TEST_ID)
            .and_then(parse_id)
            .map(|(s, n)| (s as u8, n as u32)),
        decision,
        tier: match text(TIER) {
            Some("exact") => Some("exact"),
            Some("filter") => Some("filter"),
            Some(_) => Some("<other>"),
            None => None,
        },
        first_seen,
        first_seen_unknown,
        hash: text(SOURCE_HASH).and_then(|h| {
            let mut raw = [0u8; 32];
            hex::decode_to_slice(h, &mut raw).ok().map(|_| raw)
        }),
        reason: text(REASON).map(|r| r.split(':').next().unwrap_or_default().to_string()),
        digest: digest(message.key(), message.payload()),
        decision_headers: headers.iter().filter(|(k, _)| k == DECISION).count() as u8,
        decided_at: text(DECIDED_AT).and_then(|t| t.parse().ok()),
        // `topic/partition/offset`; a topic name may not hold a `/`, but
        // read from the right all the same.
        input_partition: text(INPUT).and_then(|t| t.rsplit('/').nth(1)?.parse().ok()),
    }
}
