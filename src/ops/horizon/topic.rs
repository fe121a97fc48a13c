//! `idemgate horizon --topic`: a recorded topic read straight from the
//! brokers. Every partition from the beginning (or from the first record at
//! `--from`), until no record has arrived for the quiet period: watermarks
//! are not trusted to say where a topic ends (some brokers report them
//! wrong), silence is. A record's Kafka timestamp is its arrival time.

use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::ops::horizon::{Attempt, HorizonError};
use crate::ops::kafka::{consumer, REQUEST_TIMEOUT};

/// Where a record carries a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Locator {
    /// A field of the JSON payload; dots reach nested objects.
    Field(String),
    /// The first header of that name.
    Header(String),
}

/// The longest quiet period allowed: a read ends at most this long after
/// the last record.
pub const MAX_QUIET: Duration = Duration::from_secs(600);

/// What to read and how to read each record.
#[derive(Clone, Debug)]
pub struct TopicSource {
    pub brokers: String,
    pub topic: String,
    /// Further librdkafka properties (security, SASL).
    pub properties: Vec<(String, String)>,
    pub id: Locator,
    pub sender: Locator,
    /// Records timestamped before this (ms) are left out; reading starts at
    /// the first record at or after it.
    pub from_ms: Option<i64>,
    /// Records timestamped at or after this (ms) are left out.
    pub to_ms: Option<i64>,
    /// Reading ends when no record has arrived for this long.
    pub quiet: Duration,
}

/// What a read found.
#[derive(Clone, Debug, Default)]
pub struct Recording {
    pub attempts: Vec<Attempt>,
    /// Records read, in the time range or not.
    pub records: u64,
    /// Records outside `--from`/`--to`.
    pub outside: u64,
    pub partitions: usize,
}

impl TopicSource {
    /// `topic T`, with its time range: how an empty read is reported.
    pub fn describe(&self) -> String {
        let mut text = format!("topic {}", self.topic);
        if self.from_ms.is_some() || self.to_ms.is_some() {
            text.push_str(" in the --from/--to range");
        }
        text
    }

    fn validate(&self) -> Result<(), HorizonError> {
        if self.quiet.is_zero() || self.quiet > MAX_QUIET {
            return Err(HorizonError::Flag {
                flag: "quiet",
                reason: "must be above zero and at most 10m",
            });
        }
        if let (Some(from), Some(to)) = (self.from_ms, self.to_ms) {
            if from >= to {
                return Err(HorizonError::Flag {
                    flag: "to",
                    reason: "must be after --from",
                });
            }
        }
        Ok(())
    }
}

/// Reads the topic (blocking) and returns every attempt in the time range.
/// A record without the id, the sender or a timestamp is refused, naming
/// its coordinates: a recording with holes would understate a horizon.
pub fn read_topic(source: &TopicSource) -> Result<Recording, HorizonError> {
    source.validate()?;
    let kafka = HorizonError::Kafka;
    let properties = source
        .properties
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain([("bootstrap.servers", source.brokers.as_str())]);
    let consumer = consumer(properties).map_err(kafka)?;
    let metadata = consumer
        .fetch_metadata(Some(&source.topic), REQUEST_TIMEOUT)
        .map_err(|error| HorizonError::NoMetadata {
            brokers: source.brokers.clone(),
            error,
        })?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .find(|t| t.name() == source.topic && t.error().is_none())
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    if partitions.is_empty() {
        return Err(HorizonError::TopicMissing {
            topic: source.topic.clone(),
            brokers: source.brokers.clone(),
        });
    }
    let assignment = start_offsets(&consumer, source, &partitions)?;
    consumer.assign(&assignment).map_err(kafka)?;

    let mut recording = Recording {
        partitions: partitions.len(),
        ..Recording::default()
    };
    let mut last = Instant::now();
    while last.elapsed() < source.quiet {
        let Some(polled) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = polled.map_err(kafka)?;
        last = Instant::now();
        recording.records += 1;
        let at = message
            .timestamp()
            .to_millis()
            .ok_or_else(|| record_error(&message, RecordError::NoTimestamp))?;
        let before = source.from_ms.is_some_and(|from| at < from);
        let after = source.to_ms.is_some_and(|to| at >= to);
        if before || after {
            recording.outside += 1;
            continue;
        }
        let attempt = attempt_of(&message, at, source)
            .map_err(|problem| record_error(&message, RecordError::Value(problem)))?;
        recording.attempts.push(attempt);
    }
    Ok(recording)
}

/// Each partition from the beginning, or from its first record at
/// `--from` (a partition with none is left out). A broker that cannot
/// look offsets up by time is read from the beginning: the time range
/// still filters every record.
fn start_offsets(
    consumer: &rdkafka::consumer::BaseConsumer<crate::ops::kafka::QuietContext>,
    source: &TopicSource,
    partitions: &[i32],
) -> Result<TopicPartitionList, HorizonError> {
    let mut beginning = TopicPartitionList::new();
    for &partition in partitions {
        beginning
            .add_partition_offset(&source.topic, partition, Offset::Beginning)
            .map_err(HorizonError::Kafka)?;
    }
    let Some(from) = source.from_ms else {
        return Ok(beginning);
    };
    let mut by_time = TopicPartitionList::new();
    for &partition in partitions {
        by_time
            .add_partition_offset(&source.topic, partition, Offset::Offset(from))
            .map_err(HorizonError::Kafka)?;
    }
    let found = match consumer.offsets_for_times(by_time, REQUEST_TIMEOUT) {
        Ok(found) => found,
        Err(error) => {
            tracing::warn!(%error, "the brokers cannot look offsets up by time: reading from the beginning");
            return Ok(beginning);
        }
    };
    let mut start = TopicPartitionList::new();
    for element in found.elements() {
        if element.error().is_err() {
            tracing::warn!(
                partition = element.partition(),
                "no offset for --from: reading the partition from the beginning"
            );
            start
                .add_partition_offset(&source.topic, element.partition(), Offset::Beginning)
                .map_err(HorizonError::Kafka)?;
        } else if let Offset::Offset(offset) = element.offset() {
            start
                .add_partition_offset(&source.topic, element.partition(), Offset::Offset(offset))
                .map_err(HorizonError::Kafka)?;
        }
        // Offset::End: nothing at or after --from in this partition.
    }
    Ok(start)
}

fn record_error(message: &BorrowedMessage<'_>, problem: RecordError) -> HorizonError {
    HorizonError::Record {
        topic: message.topic().to_string(),
        partition: message.partition(),
        offset: message.offset(),
        problem,
    }
}

/// Why a recorded record cannot be measured.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("no timestamp")]
    NoTimestamp,
    #[error(transparent)]
    Value(ValueError),
}

/// Why a recorded record yields no delivery id or sender.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    #[error("no header {0}")]
    NoHeader(String),
    #[error("header {0} has no value")]
    HeaderWithoutValue(String),
    #[error("header {0} is not UTF-8")]
    HeaderNotUtf8(String),
    #[error("no payload")]
    NoPayload,
    #[error("payload is not JSON: {0}")]
    PayloadNotJson(serde_json::Error),
    #[error("no field {0}")]
    NoField(String),
    #[error("field {0} is not a string or a number")]
    NotStringOrNumber(String),
    #[error("{0} is empty")]
    Empty(String),
}

fn attempt_of(
    message: &BorrowedMessage<'_>,
    at: i64,
    source: &TopicSource,
) -> Result<Attempt, ValueError> {
    let headers: Vec<(&str, Option<&[u8]>)> = message
        .headers()
        .map(|h| h.iter().map(|h| (h.key, h.value)).collect())
        .unwrap_or_default();
    let record = RecordParts {
        payload: message.payload(),
        headers: &headers,
    };
    Ok(Attempt {
        delivery_id: record.value(&source.id)?,
        sender: record.value(&source.sender)?,
        received_at_ms: at,
    })
}

/// A record's payload and headers, for reading the id and the sender.
pub(crate) struct RecordParts<'a> {
    pub(crate) payload: Option<&'a [u8]>,
    pub(crate) headers: &'a [(&'a str, Option<&'a [u8]>)],
}

impl RecordParts<'_> {
    /// The value at `locator` as text: a string, or a number's JSON text.
    pub(crate) fn value(&self, locator: &Locator) -> Result<String, ValueError> {
        match locator {
            Locator::Header(name) => {
                let (_, value) = self
                    .headers
                    .iter()
                    .find(|(key, _)| key == name)
                    .ok_or_else(|| ValueError::NoHeader(name.clone()))?;
                let value = value.ok_or_else(|| ValueError::HeaderWithoutValue(name.clone()))?;
                let text = std::str::from_utf8(value)
                    .map_err(|_| ValueError::HeaderNotUtf8(name.clone()))?;
                non_empty(text.to_string(), name)
            }
            Locator::Field(path) => {
                let payload = self.payload.ok_or(ValueError::NoPayload)?;
                let json: serde_json::Value =
                    serde_json::from_slice(payload).map_err(ValueError::PayloadNotJson)?;
                let mut value = &json;
                for part in path.split('.') {
                    value = value
                        .get(part)
                        .ok_or_else(|| ValueError::NoField(path.clone()))?;
                }
                match value {
                    serde_json::Value::String(text) => non_empty(text.clone(), path),
                    serde_json::Value::Number(number) => Ok(number.to_string()),
                    _ => Err(ValueError::NotStringOrNumber(path.clone())),
                }
            }
        }
    }
}

fn non_empty(text: String, name: &str) -> Result<String, ValueError> {
    if text.is_empty() {
        Err(ValueError::Empty(name.to_string()))
    } else {
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_senders_come_from_fields_or_headers() {
        let payload = br#"{"delivery":{"id":"d-1"},"seq":7,"from":"acme"}"#;
        let headers = [("x-sender", Some(&b"beta"[..]))];
        let record = RecordParts {
            payload: Some(payload),
            headers: &headers,
        };
        assert_eq!(
            record.value(&Locator::Field("delivery.id".into())).unwrap(),
            "d-1"
        );
        assert_eq!(record.value(&Locator::Field("seq".into())).unwrap(), "7");
        assert_eq!(
            record.value(&Locator::Header("x-sender".into())).unwrap(),
            "beta"
        );
        let missing = record.value(&Locator::Field("sender".into())).unwrap_err();
        assert_eq!(missing.to_string(), "no field sender");
        let missing = record.value(&Locator::Header("x-id".into())).unwrap_err();
        assert_eq!(missing.to_string(), "no header x-id");
    }

    #[test]
    fn a_quiet_period_beyond_its_bound_or_an_empty_range_is_refused() {
        let source = TopicSource {
            brokers: "b:9092".into(),
            topic: "t".into(),
            properties: Vec::new(),
            id: Locator::Field("delivery_id".into()),
            sender: Locator::Field("sender".into()),
            from_ms: Some(10),
            to_ms: Some(10),
            quiet: Duration::from_secs(5),
        };
        assert!(source
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("--to:"));
        let long = TopicSource {
            from_ms: None,
            quiet: Duration::from_secs(3600),
            ..source
        };
        assert!(long
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("--quiet:"));
    }
}
