//! Outputs: reading the clean and audit topics back, and the exactly-once
//! check over them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use idemgate::decision::{DECISION, FIRST_SEEN, REASON, TIER};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use super::{Sent, Topics, LIMIT, SEQ};
use crate::support::unique;

/// One output read back.
#[derive(Clone, Debug)]
pub struct Output {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Output {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_ref())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    pub fn decision(&self) -> String {
        self.header(DECISION).unwrap_or_default()
    }

    pub fn reason(&self) -> String {
        self.header(REASON).unwrap_or_default()
    }

    pub fn seq(&self) -> usize {
        self.header(SEQ)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "output {}/{}/{} has no {SEQ}",
                    self.topic, self.partition, self.offset
                )
            })
    }
}

/// Reads `topics` from the beginning until `expected` outputs arrived, then
/// a little longer so that any output beyond them (a doubled one) is seen.
pub async fn read_outputs(
    brokers: &str,
    topics: &[&str],
    partitions: i32,
    expected: usize,
) -> Vec<Output> {
    let brokers = brokers.to_string();
    let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
    tokio::task::spawn_blocking(move || read_blocking(&brokers, &topics, partitions, expected))
        .await
        .expect("the reader panicked")
}

fn read_blocking(
    brokers: &str,
    topics: &[String],
    partitions: i32,
    expected: usize,
) -> Vec<Output> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .set("fetch.message.max.bytes", "4194304")
        .create()
        .expect("creating the reader");
    let mut assignment = TopicPartitionList::new();
    for topic in topics {
        for partition in 0..partitions {
            assignment
                .add_partition_offset(topic, partition, Offset::Beginning)
                .expect("listing a partition");
        }
    }
    consumer.assign(&assignment).expect("assigning the reader");
    let mut outputs = Vec::with_capacity(expected);
    let deadline = Instant::now() + LIMIT;
    let mut settle: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if outputs.len() >= expected {
            // Anything beyond the expected count is a doubled output.
            let until = *settle.get_or_insert(now + Duration::from_millis(1500));
            if now >= until {
                break;
            }
        } else if now >= deadline {
            panic!(
                "only {} of {expected} outputs arrived in {topics:?} within {LIMIT:?}",
                outputs.len()
            );
        }
        let Some(polled) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let message = match polled {
            Ok(message) => message,
            Err(error) => {
                eprintln!("reader: {error}");
                continue;
            }
        };
        let headers = message
            .headers()
            .map(|h| {
                h.iter()
                    .map(|x| (x.key.to_string(), x.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        outputs.push(Output {
            topic: message.topic().to_string(),
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().map(<[u8]>::to_vec),
            headers,
        });
    }
    outputs
}

/// What a run decided, for the report and the assertions.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub inputs: usize,
    pub events: usize,
    pub novel: usize,
    pub duplicate: usize,
    pub conflict: usize,
    pub invalid: usize,
}

/// The whole contract on a finished run:
///
/// - every input has exactly one output (none missing, none doubled), with
///   its key and payload byte for byte;
/// - every distinct event is in the clean topic exactly once, as `novel`;
/// - every other copy is in audit: `duplicate` (tier exact) when it carries
///   the winner's variant, `conflict` when it does not, and its
///   `idemgate-first-seen` names the input whose output is in clean, so
///   nothing was suppressed on the strength of an undelivered original.
pub fn check_exactly_once(topics: &Topics, sent: &[Sent], outputs: &[Output]) -> Counts {
    let by_seq: HashMap<usize, &Sent> = sent.iter().map(|s| (s.record.seq, s)).collect();
    assert_eq!(by_seq.len(), sent.len(), "workload seqs are not unique");
    let mut outputs_of: BTreeMap<usize, Vec<&Output>> = BTreeMap::new();
    for output in outputs {
        let seq = output.seq();
        assert!(by_seq.contains_key(&seq), "output for unknown input {seq}");
        outputs_of.entry(seq).or_default().push(output);
    }
    let missing: Vec<usize> = by_seq
        .keys()
        .filter(|seq| !outputs_of.contains_key(seq))
        .copied()
        .collect();
    let doubled: Vec<(usize, Vec<String>)> = outputs_of
        .iter()
        .filter(|(_, outs)| outs.len() > 1)
        .map(|(seq, outs)| {
            (
                *seq,
                outs.iter()
                    .map(|o| format!("{}/{}/{} {}", o.topic, o.partition, o.offset, o.decision()))
                    .collect(),
            )
        })
        .collect();
    assert!(
        missing.is_empty() && doubled.is_empty(),
        "inputs without an output: {} {:?}; inputs with more than one: {} {:?}",
        missing.len(),
        &missing[..missing.len().min(20)],
        doubled.len(),
        &doubled[..doubled.len().min(20)]
    );

    let mut counts = Counts {
        inputs: sent.len(),
        ..Counts::default()
    };
    // Winner of each event: the input whose output is in clean.
    let mut winners: HashMap<&str, &Sent> = HashMap::new();
    for output in outputs {
        let input = by_seq[&output.seq()];
        assert_eq!(
            output.payload.as_deref(),
            Some(input.record.payload.as_slice()),
            "payload of input {} changed",
            input.record.seq
        );
        assert_eq!(
            output.key.as_deref(),
            Some(input.record.key.as_slice()),
            "key of input {} changed",
            input.record.seq
        );
        if output.topic == topics.clean {
            assert_eq!(
                output.decision(),
                "novel",
                "clean output of input {}",
                input.record.seq
            );
            let event = input.record.event.as_deref().expect("poison in clean");
            if let Some(other) = winners.insert(event, input) {
                panic!(
                    "event {event} is in clean twice: inputs {} and {}",
                    other.record.seq, input.record.seq
                );
            }
        } else {
            assert_eq!(output.topic, topics.audit);
        }
    }
    let events: HashSet<&str> = sent
        .iter()
        .filter_map(|s| s.record.event.as_deref())
        .collect();
    counts.events = events.len();
    let lost: Vec<&&str> = events
        .iter()
        .filter(|e| !winners.contains_key(**e))
        .collect();
    assert!(lost.is_empty(), "events never in clean: {lost:?}");

    for output in outputs {
        let input = by_seq[&output.seq()];
        let decision = output.decision();
        match decision.as_str() {
            "novel" => counts.novel += 1,
            "invalid" => counts.invalid += 1,
            "duplicate" | "conflict" => {
                let event = input
                    .record
                    .event
                    .as_deref()
                    .expect("poison as a duplicate");
                let winner = winners[event];
                let expected = if winner.record.variant == input.record.variant {
                    "duplicate"
                } else {
                    "conflict"
                };
                assert_eq!(
                    decision,
                    expected,
                    "input {} (variant {}) against winner {} (variant {})",
                    input.record.seq,
                    input.record.variant,
                    winner.record.seq,
                    winner.record.variant
                );
                assert_eq!(output.header(TIER).as_deref(), Some("exact"));
                assert_eq!(
                    output.header(FIRST_SEEN),
                    Some(format!(
                        "{}/{}/{}",
                        topics.raw, winner.partition, winner.offset
                    )),
                    "{decision} input {} does not name the delivered original",
                    input.record.seq
                );
                if decision == "duplicate" {
                    counts.duplicate += 1;
                } else {
                    counts.conflict += 1;
                }
            }
            other => panic!(
                "unexpected decision {other:?} on input {}",
                input.record.seq
            ),
        }
    }
    assert_eq!(counts.novel, counts.events);
    counts
}
