//! Cross-field rules over the whole config that no single section can
//! check alone: where the brokers are, where outputs may go, what the
//! producer can send. Each refusal names the field (docs/design.md §10).

use std::collections::{BTreeMap, HashSet};

use super::kafka::{BROKER_KEYS, CONSUMER_FIXED};
use super::{invalid, Client, ClientProperties, ConfigError, StreamConfig, ENV_BROKERS};

impl super::Config {
    /// The largest output the producer sends (`message.max.bytes`, checked
    /// to be a number at load).
    pub(crate) fn sendable_bytes(&self) -> usize {
        self.client_properties(Client::Producer)
            .get("message.max.bytes")
            .and_then(|text| text.parse().ok())
            .unwrap_or(PRODUCER_MESSAGE_MAX_BYTES)
    }

    /// The bootstrap list replicas connect to; validation made sure there
    /// is one.
    pub(crate) fn brokers(&self) -> Option<&str> {
        BROKER_KEYS
            .iter()
            .find_map(|key| self.kafka.common.get(*key))
            .map(String::as_str)
    }
}

/// Without brokers librdkafka starts anyway and retries for ever, so a
/// replica would sit unassigned and healthy-looking: refuse it at start.
/// The environment override has been applied by the time this runs.
pub(super) fn check_brokers(kafka: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    let given = BROKER_KEYS
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
    producer: &ClientProperties<'_>,
    streams: &[StreamConfig],
) -> Result<(), ConfigError> {
    let sendable = match producer.get("message.max.bytes") {
        Some(text) => text.parse::<usize>().map_err(|_| {
            invalid(
                producer.field("message.max.bytes"),
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
            if let Some(other) = tags.insert(crate::coordinates::TopicTag::of(topic), topic) {
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
    consumer: &ClientProperties<'_>,
    producer: &ClientProperties<'_>,
) -> Result<(), ConfigError> {
    let set = |client: &ClientProperties<'_>, key: &str, value: &str| {
        client.get(key).is_some_and(|v| v.trim() == value)
    };
    let id = "transactional.id";
    match guarantee {
        super::Guarantee::AtLeastOnce if producer.contains_key(id) => Err(invalid(
            producer.field(id),
            "a transactional producer needs guarantee = \"exactly-once\"",
        )),
        super::Guarantee::ExactlyOnce if set(producer, "enable.idempotence", "false") => {
            Err(invalid(
                producer.field("enable.idempotence"),
                "guarantee = \"exactly-once\" needs the idempotent producer",
            ))
        }
        super::Guarantee::ExactlyOnce if set(consumer, "isolation.level", "read_uncommitted") => {
            Err(invalid(
                consumer.field("isolation.level"),
                "guarantee = \"exactly-once\" reads its inputs read_committed: an aborted input would be decided",
            ))
        }
        super::Guarantee::ExactlyOnce
            if producer.get(id).is_some_and(|id| id.trim().is_empty()) =>
        {
            Err(invalid(producer.field(id), "must not be empty"))
        }
        _ => Ok(()),
    }
}

/// The consumer properties the protocol rests on (`kafka::CONSUMER_FIXED`:
/// offsets are stored and committed by idemgate, only after delivery) may
/// be written, but only with the value idemgate gives them anyway.
pub(super) fn check_fixed(consumer: &ClientProperties<'_>) -> Result<(), ConfigError> {
    for (key, fixed) in CONSUMER_FIXED {
        if let Some(value) = consumer.get(key).filter(|v| v.trim() != fixed) {
            return Err(invalid(
                consumer.field(key),
                format!(
                    "idemgate sets it to {fixed:?} (offsets are stored and committed after \
                     delivery, docs/design.md §7); {value:?} would commit records not yet written"
                ),
            ));
        }
    }
    Ok(())
}

/// The consumer group protocol (`[kafka] "group.protocol"`, librdkafka's
/// property): which side assigns partitions and how rebalances go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GroupProtocol {
    /// The original protocol (librdkafka's default): the group leader
    /// assigns with `partition.assignment.strategy` (idemgate's default is
    /// eager), the client keeps the session.
    #[default]
    Classic,
    /// KIP-848 (Apache Kafka 4.0 or later): the broker assigns
    /// (`group.remote.assignor`), every rebalance is incremental, session
    /// timeout and heartbeat interval are the broker's.
    Consumer,
}

/// Classic properties librdkafka 2.12 refuses under `group.protocol =
/// "consumer"` (at the consumer's creation, `rd_kafka_conf_finalize`), and
/// what takes their place.
const CLASSIC_ONLY: [(&str, &str); 4] = [
    (
        "session.timeout.ms",
        "the brokers' group.consumer.session.timeout.ms (or the group's \
         consumer.session.timeout.ms, set with kafka-configs --entity-type groups)",
    ),
    (
        "heartbeat.interval.ms",
        "the brokers' group.consumer.heartbeat.interval.ms (or the group's \
         consumer.heartbeat.interval.ms, set with kafka-configs --entity-type groups)",
    ),
    (
        "partition.assignment.strategy",
        "the broker's assignor: group.remote.assignor (uniform or range)",
    ),
    ("group.protocol.type", "nothing: the protocol has no type"),
];

/// Reads `group.protocol` and refuses, naming the field, what the chosen
/// protocol cannot use: under `consumer` the classic protocol's
/// client-side session, heartbeat and assignor properties (librdkafka
/// would refuse to create the consumer), under `classic` the broker-side
/// assignor (librdkafka would ignore it).
pub(super) fn check_group_protocol(
    kafka: &ClientProperties<'_>,
) -> Result<GroupProtocol, ConfigError> {
    let protocol = match kafka.get("group.protocol").map(|v| v.trim()) {
        None => GroupProtocol::Classic,
        Some(value) if value.eq_ignore_ascii_case("classic") => GroupProtocol::Classic,
        Some(value) if value.eq_ignore_ascii_case("consumer") => GroupProtocol::Consumer,
        Some(value) => {
            return Err(invalid(
                kafka.field("group.protocol"),
                format!(
                    "{value:?} is not a group protocol: \"classic\" (the default) or \
                     \"consumer\" (KIP-848, Apache Kafka 4.0 or later)"
                ),
            ))
        }
    };
    match protocol {
        GroupProtocol::Consumer => {
            if let Some((key, instead)) = CLASSIC_ONLY.iter().find(|(k, _)| kafka.contains_key(k)) {
                return Err(invalid(
                    kafka.field(key),
                    format!(
                        "not with group.protocol = \"consumer\" (librdkafka refuses it: the \
                         broker decides it); use {instead}"
                    ),
                ));
            }
        }
        GroupProtocol::Classic => {
            if kafka.contains_key("group.remote.assignor") {
                return Err(invalid(
                    kafka.field("group.remote.assignor"),
                    "only with group.protocol = \"consumer\" (the broker's assignor); the \
                     classic protocol's assignors are partition.assignment.strategy",
                ));
            }
        }
    }
    Ok(protocol)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::STREAM;
    use crate::config::Config;

    fn with_kafka(lines: &str) -> Result<Config, ConfigError> {
        Config::parse_with_vars(
            &format!("[kafka]\n{lines}\n{STREAM}"),
            super::super::tests::brokers,
        )
    }

    #[test]
    fn the_consumer_group_protocol_refuses_the_classic_client_side_properties_naming_them() {
        for (line, field) in [
            ("\"session.timeout.ms\" = 6000", "kafka.session.timeout.ms"),
            (
                "\"heartbeat.interval.ms\" = 500",
                "kafka.heartbeat.interval.ms",
            ),
            (
                "\"partition.assignment.strategy\" = \"cooperative-sticky\"",
                "kafka.partition.assignment.strategy",
            ),
            (
                "\"group.protocol.type\" = \"consumer\"",
                "kafka.group.protocol.type",
            ),
        ] {
            let error = with_kafka(&format!("\"group.protocol\" = \"consumer\"\n{line}"))
                .expect_err(line)
                .to_string();
            assert!(error.starts_with(&format!("{field}:")), "{error}");
            assert!(error.contains("group.protocol = \"consumer\""), "{error}");
            // The same property is the classic protocol's own.
            assert!(with_kafka(line).is_ok(), "{line} refused under classic");
        }
        let error = with_kafka("\"group.protocol\" = \"consumer\"\n\"session.timeout.ms\" = 6000")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("group.consumer.session.timeout.ms"),
            "{error}"
        );
    }

    #[test]
    fn the_broker_side_assignor_is_only_for_the_consumer_protocol_and_unknown_protocols_are_refused(
    ) {
        let assignor = "\"group.remote.assignor\" = \"range\"";
        let error = with_kafka(assignor).unwrap_err().to_string();
        assert!(error.starts_with("kafka.group.remote.assignor:"), "{error}");
        let config = with_kafka(&format!("\"group.protocol\" = \"consumer\"\n{assignor}"))
            .expect("the broker's assignor under the consumer protocol");
        assert_eq!(config.group_protocol, GroupProtocol::Consumer);
        let error = with_kafka("\"group.protocol\" = \"eager\"")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("kafka.group.protocol:"), "{error}");
        let classic = with_kafka("\"group.protocol\" = \"classic\"").expect("classic");
        assert_eq!(classic.group_protocol, GroupProtocol::Classic);
        assert_eq!(
            with_kafka("").unwrap().group_protocol,
            GroupProtocol::Classic
        );
    }

    #[test]
    fn the_eager_assignor_default_is_the_classic_protocols_only() {
        let (classic, _) = crate::config::client_configs(&with_kafka("").unwrap());
        assert_eq!(
            classic.get("partition.assignment.strategy"),
            Some("range,roundrobin")
        );
        let consumer = with_kafka("\"group.protocol\" = \"consumer\"").unwrap();
        let (consumer, producer) = crate::config::client_configs(&consumer);
        assert_eq!(consumer.get("partition.assignment.strategy"), None);
        assert_eq!(consumer.get("group.protocol"), Some("consumer"));
        assert_eq!(producer.get("group.protocol"), None, "a consumer property");
        // librdkafka itself accepts what the config lets through, and
        // refuses the classic default it is spared.
        let created: rdkafka::error::KafkaResult<rdkafka::consumer::BaseConsumer> =
            consumer.create();
        assert!(created.is_ok(), "{:?}", created.err());
        let mut eager = consumer.clone();
        eager.set("partition.assignment.strategy", "range,roundrobin");
        let refused: rdkafka::error::KafkaResult<rdkafka::consumer::BaseConsumer> = eager.create();
        let error = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("partition.assignment.strategy"), "{error}");
    }
}
