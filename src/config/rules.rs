//! Cross-field rules over the whole config that no single section can
//! check alone: where the brokers are, where outputs may go, what the
//! producer can send. Each refusal names the field (docs/design.md §10).

use std::collections::{BTreeMap, HashSet};

use super::{invalid, ConfigError, StreamConfig, ENV_BROKERS};

/// librdkafka's own name for the bootstrap list, accepted beside
/// `bootstrap.servers` (it is an alias there).
const BROKER_LIST_ALIAS: &str = "metadata.broker.list";

impl super::Config {
    /// The bootstrap list replicas connect to; validation made sure there
    /// is one.
    pub(crate) fn brokers(&self) -> Option<&str> {
        ["bootstrap.servers", BROKER_LIST_ALIAS]
            .iter()
            .find_map(|key| self.kafka.get(*key))
            .map(String::as_str)
    }
}

/// Without brokers librdkafka starts anyway and retries for ever, so a
/// replica would sit unassigned and healthy-looking: refuse it at start.
/// The environment override has been applied by the time this runs.
pub(super) fn check_brokers(kafka: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    let given = ["bootstrap.servers", BROKER_LIST_ALIAS]
        .iter()
        .filter_map(|key| kafka.get(*key))
        .any(|list| list.split(',').any(|broker| !broker.trim().is_empty()));
    if given {
        return Ok(());
    }
    Err(invalid(
        "kafka.bootstrap.servers",
        format!(
            "no brokers: set kafka.\"bootstrap.servers\" (host:port, comma separated) or {ENV_BROKERS}"
        ),
    ))
}

/// librdkafka's producer refuses a message above its `message.max.bytes`
/// (default 1,000,000) before any broker sees it.
pub(crate) const PRODUCER_MESSAGE_MAX_BYTES: usize = 1_000_000;
/// What an output carries beside the payload: the key, the input's headers
/// and idemgate's decision headers.
pub(crate) const OUTPUT_HEADROOM: usize = 64 * 1024;

/// Every record the size limit lets through must be sendable by the
/// producer, or it could never be written anywhere, audit included.
pub(super) fn check_sendable(
    kafka: &BTreeMap<String, String>,
    streams: &[StreamConfig],
) -> Result<(), ConfigError> {
    let sendable = match kafka.get("message.max.bytes") {
        Some(text) => text.parse::<usize>().map_err(|_| {
            invalid(
                "kafka.message.max.bytes",
                format!("{text:?} is not a byte count"),
            )
        })?,
        None => PRODUCER_MESSAGE_MAX_BYTES,
    };
    for (index, stream) in streams.iter().enumerate() {
        if stream.max_record_bytes + OUTPUT_HEADROOM > sendable {
            return Err(invalid(
                format!("streams[{index}].max_record_bytes"),
                format!(
                    "{} bytes plus {OUTPUT_HEADROOM} for key and headers exceed the producer's \
                     message.max.bytes ({sendable}): lower it, or raise kafka.\"message.max.bytes\" \
                     (and the brokers' and topics' limits with it)",
                    stream.max_record_bytes
                ),
            ));
        }
    }
    Ok(())
}

/// Outputs go where no stream reads and where they cannot be mistaken for
/// each other: a clean topic that is an audit topic, or any stream's input,
/// would feed outputs back in or mix decisions.
pub(super) fn check_topics(streams: &[StreamConfig]) -> Result<(), ConfigError> {
    let inputs: HashSet<&str> = streams
        .iter()
        .flat_map(|s| s.inputs.iter().map(String::as_str))
        .collect();
    let audits: HashSet<&str> = streams.iter().map(|s| s.audit.as_str()).collect();
    for (index, stream) in streams.iter().enumerate() {
        for (name, topic) in [("clean", &stream.clean), ("audit", &stream.audit)] {
            if inputs.contains(topic.as_str()) {
                return Err(invalid(
                    format!("streams[{index}].{name}"),
                    format!("{topic} is an input topic: outputs would be read back in"),
                ));
            }
        }
        if audits.contains(stream.clean.as_str()) {
            return Err(invalid(
                format!("streams[{index}].clean"),
                format!(
                    "{} is an audit topic: suppressed and novel records would mix",
                    stream.clean
                ),
            ));
        }
    }
    Ok(())
}

/// Every stream's keys live under its key id, and every claim names its
/// holder's topic by a 24-bit tag: two streams with one id would share
/// claims, and two inputs of one stream with one tag would be taken for
/// each other's records.
pub(super) fn check_key_ids(streams: &[StreamConfig]) -> Result<(), ConfigError> {
    let mut ids = std::collections::HashMap::new();
    for (index, stream) in streams.iter().enumerate() {
        if let Some(other) = ids.insert(stream.spec.key_id.clone(), &stream.spec.name) {
            return Err(invalid(
                format!("streams[{index}].key_id"),
                format!(
                    "{} is also the key id of stream {other}: set key_id on one of them",
                    stream.spec.key_id
                ),
            ));
        }
        let mut tags = std::collections::HashMap::new();
        for topic in &stream.inputs {
            if let Some(other) = tags.insert(crate::store::TopicTag::of(topic), topic) {
                return Err(invalid(
                    format!("streams[{index}].inputs"),
                    format!(
                        "{topic} and {other} have the same topic tag: read them in two streams"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A transactional producer only with `guarantee = "exactly-once"` (its
/// sends outside a transaction fail), and exactly once only with what it
/// rests on: an idempotent producer and inputs read committed.
pub(super) fn check_guarantee(
    guarantee: super::Guarantee,
    kafka: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    let set = |key: &str, value: &str| kafka.get(key).is_some_and(|v| v.trim() == value);
    match guarantee {
        super::Guarantee::AtLeastOnce if kafka.contains_key("transactional.id") => Err(invalid(
            "kafka.transactional.id",
            "a transactional producer needs guarantee = \"exactly-once\"",
        )),
        super::Guarantee::ExactlyOnce if set("enable.idempotence", "false") => Err(invalid(
            "kafka.enable.idempotence",
            "guarantee = \"exactly-once\" needs the idempotent producer",
        )),
        super::Guarantee::ExactlyOnce if set("isolation.level", "read_uncommitted") => {
            Err(invalid(
                "kafka.isolation.level",
                "guarantee = \"exactly-once\" reads its inputs read_committed: an aborted input would be decided",
            ))
        }
        super::Guarantee::ExactlyOnce
            if kafka
                .get("transactional.id")
                .is_some_and(|id| id.trim().is_empty()) =>
        {
            Err(invalid("kafka.transactional.id", "must not be empty"))
        }
        _ => Ok(()),
    }
}
