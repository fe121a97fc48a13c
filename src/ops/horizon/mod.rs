//! `idemgate horizon`: retry horizons from a recording, read as JSON lines
//! (stdin) or straight from a recorded Kafka topic (`topic`), then
//! measured by the pure [`measure_horizon`] (docs/design.md §9).
//!
//! A recording that measures nothing is refused rather than reported as a
//! horizon of zero: a TTL derived from an empty file would be a guess.

pub mod topic;

use std::fmt::Write;

use crate::ttl::{measure_horizon, Delivery, Horizon};

/// The unit of a numeric `received_at`: a bare number could be either, and
/// reading seconds as milliseconds shrinks a nine-hour horizon to 34 s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NumericTimes {
    /// Milliseconds since the epoch.
    Ms,
    /// Seconds since the epoch (fractions allowed).
    S,
}

/// One delivery attempt of a recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub delivery_id: String,
    pub sender: String,
    pub received_at_ms: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum HorizonError {
    /// A delivery-log line that cannot be read; 1-based.
    #[error("line {line}: {problem}")]
    Line { line: usize, problem: LineError },
    /// Nothing to measure.
    #[error("no deliveries in {0}: nothing to measure")]
    Empty(String),
    /// A flag's value that cannot be used.
    #[error("--{flag}: {reason}")]
    Flag {
        flag: &'static str,
        reason: &'static str,
    },
    /// A recorded record that has no delivery id, sender or time.
    #[error("{topic}/{partition}/{offset}: {problem}")]
    Record {
        topic: String,
        partition: i32,
        offset: i64,
        problem: crate::ops::horizon::topic::RecordError,
    },
    /// The brokers or the topic.
    #[error("kafka: {0}")]
    Kafka(rdkafka::error::KafkaError),
    #[error("kafka: {brokers}: no metadata: {error}")]
    NoMetadata {
        brokers: String,
        error: rdkafka::error::KafkaError,
    },
    #[error("kafka: topic {topic} is not on the brokers {brokers}")]
    TopicMissing { topic: String, brokers: String },
}

/// Why a delivery-log line is refused.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("{0}")]
    Json(serde_json::Error),
    #[error("received_at: {0}")]
    ReceivedAt(ReceivedAtError),
}

#[derive(serde::Deserialize)]
struct LoggedDelivery {
    delivery_id: String,
    sender: String,
    received_at: serde_json::Value,
}

/// Reads a delivery log: JSON lines with `delivery_id`, `sender` and
/// `received_at` (RFC 3339, or a number in the unit `numeric` says; a
/// number without it is refused, naming the line). Blank lines are skipped.
pub fn parse_log(text: &str, numeric: Option<NumericTimes>) -> Result<Vec<Attempt>, HorizonError> {
    let mut attempts = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at_line = |problem: LineError| HorizonError::Line {
            line: index + 1,
            problem,
        };
        let entry: LoggedDelivery =
            serde_json::from_str(line).map_err(|e| at_line(LineError::Json(e)))?;
        let received_at_ms = received_at_ms(&entry.received_at, numeric)
            .map_err(|e| at_line(LineError::ReceivedAt(e)))?;
        attempts.push(Attempt {
            delivery_id: entry.delivery_id,
            sender: entry.sender,
            received_at_ms,
        });
    }
    Ok(attempts)
}

/// A time an operator gave (a flag, a log's `received_at`) that is not
/// one.
#[derive(Debug, thiserror::Error)]
pub enum TimeError {
    #[error("{text:?} is not an RFC 3339 time: {error}")]
    NotRfc3339 {
        text: String,
        error: time::error::Parse,
    },
    #[error("{0}")]
    OutOfRange(std::num::TryFromIntError),
}

/// Why a log line's `received_at` is refused.
#[derive(Debug, thiserror::Error)]
pub enum ReceivedAtError {
    #[error(transparent)]
    Time(#[from] TimeError),
    #[error("an RFC 3339 string or a number")]
    NotATime,
    #[error("{0} is a number: say its unit with --numeric-times ms or --numeric-times s")]
    NoUnit(serde_json::Value),
    #[error("{0} is out of range")]
    OutOfRange(serde_json::Value),
}

fn received_at_ms(
    value: &serde_json::Value,
    numeric: Option<NumericTimes>,
) -> Result<i64, ReceivedAtError> {
    if let Some(text) = value.as_str() {
        return Ok(rfc3339_ms(text)?);
    }
    let Some(number) = value.as_f64() else {
        return Err(ReceivedAtError::NotATime);
    };
    let unit = numeric.ok_or_else(|| ReceivedAtError::NoUnit(value.clone()))?;
    let ms = match (unit, value.as_i64()) {
        (NumericTimes::Ms, Some(ms)) => return Ok(ms),
        (NumericTimes::Ms, None) => number,
        (NumericTimes::S, _) => number * 1000.0,
    };
    if !ms.is_finite() || ms.abs() > 9.0e15 {
        return Err(ReceivedAtError::OutOfRange(value.clone()));
    }
    Ok(ms.round() as i64)
}

/// An RFC 3339 time as milliseconds since the epoch.
pub fn rfc3339_ms(text: &str) -> Result<i64, TimeError> {
    let parsed = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|error| TimeError::NotRfc3339 {
            text: text.to_string(),
            error,
        })?;
    i64::try_from(parsed.unix_timestamp_nanos() / 1_000_000).map_err(TimeError::OutOfRange)
}

/// Each sender's horizon; refuses a recording with no deliveries, naming
/// where it came from (`stdin`, `topic raw.webhooks`).
pub fn measure(attempts: &[Attempt], source: &str) -> Result<Horizon, HorizonError> {
    if attempts.is_empty() {
        return Err(HorizonError::Empty(source.to_string()));
    }
    Ok(measure_horizon(attempts.iter().map(|a| Delivery {
        delivery_id: &a.delivery_id,
        sender: &a.sender,
        received_at_ms: a.received_at_ms,
    })))
}

/// `sender<TAB>seconds` per sender, then `max<TAB>seconds`.
pub fn report(horizon: &Horizon) -> String {
    let mut out = String::new();
    for (sender, span) in &horizon.per_sender {
        let _ = writeln!(out, "{sender}\t{}", span.as_secs());
    }
    let _ = writeln!(out, "max\t{}", horizon.max.as_secs());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_and_numbers_in_their_unit_read_the_same() {
        let log = concat!(
            r#"{"delivery_id":"d","sender":"a","received_at":"2024-03-01T00:00:00Z"}"#,
            "\n\n",
            r#"{"delivery_id":"d","sender":"a","received_at":1709251260}"#,
            "\n"
        );
        let attempts = parse_log(log, Some(NumericTimes::S)).unwrap();
        assert_eq!(
            attempts[1].received_at_ms - attempts[0].received_at_ms,
            60_000
        );
        let ms = log.replace("1709251260", "1709251260000");
        let attempts = parse_log(&ms, Some(NumericTimes::Ms)).unwrap();
        assert_eq!(
            attempts[1].received_at_ms - attempts[0].received_at_ms,
            60_000
        );
    }

    #[test]
    fn a_number_without_its_unit_is_refused_naming_the_line() {
        let log = "\n{\"delivery_id\":\"d\",\"sender\":\"a\",\"received_at\":1709251260}\n";
        let error = parse_log(log, None).unwrap_err().to_string();
        assert!(error.starts_with("line 2: received_at:"), "{error}");
        assert!(error.contains("--numeric-times"), "{error}");
    }

    #[test]
    fn an_empty_recording_is_refused_not_measured_as_zero() {
        let error = measure(&parse_log("\n  \n", None).unwrap(), "stdin").unwrap_err();
        assert_eq!(
            error.to_string(),
            "no deliveries in stdin: nothing to measure"
        );
    }

    #[test]
    fn the_report_lists_senders_then_the_max() {
        let attempts = parse_log(
            concat!(
                r#"{"delivery_id":"1","sender":"b","received_at":"2024-03-01T00:00:00Z"}"#,
                "\n",
                r#"{"delivery_id":"1","sender":"b","received_at":"2024-03-01T09:20:00Z"}"#,
                "\n",
                r#"{"delivery_id":"2","sender":"a","received_at":"2024-03-01T00:00:00Z"}"#,
            ),
            None,
        )
        .unwrap();
        let text = report(&measure(&attempts, "stdin").unwrap());
        assert_eq!(text, "a\t0\nb\t33600\nmax\t33600\n");
    }
}
