//! The brokers, as `check` asks them: do they answer metadata with the
//! config's own properties (TLS, SASL), is every input topic there (and
//! with how many partitions), and is every output there or will the broker
//! create it. Blocking; `check` runs it on a blocking thread.

use std::collections::HashMap;

use futures::executor::block_on;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use super::Finding;
use crate::config::{Client, Config};
use crate::ops::kafka::{consumer, QuietContext, REQUEST_TIMEOUT};

/// A topic as the brokers' metadata shows it: its partitions, or the error
/// the broker gave for it.
type Seen = Result<usize, RDKafkaErrorCode>;

/// Why a DescribeConfigs question went unanswered: `check` then warns
/// instead of judging.
#[derive(Debug, thiserror::Error)]
enum DescribeError {
    #[error("{0}")]
    Kafka(KafkaError),
    #[error("{topic}: DescribeConfigs: {code:?}")]
    TopicRefused {
        topic: String,
        code: RDKafkaErrorCode,
    },
    #[error("{0}: no max.message.bytes in DescribeConfigs")]
    NoTopicLimit(String),
    #[error("no broker in the metadata")]
    NoBroker,
    #[error("no answer to DescribeConfigs")]
    NoAnswer,
    #[error("DescribeConfigs: {0:?}")]
    BrokerRefused(RDKafkaErrorCode),
    #[error("DescribeConfigs did not list auto.create.topics.enable")]
    NoAutoCreate,
}

pub(crate) fn probe(config: &Config) -> Vec<Finding> {
    let brokers = config.brokers().unwrap_or_default().to_string();
    // The consumer's properties: `[kafka]` under `[kafka.consumer]`.
    let properties = config.client_properties(Client::Consumer);
    let client = match consumer(properties.iter()) {
        Ok(client) => client,
        Err(error) => {
            return vec![Finding::fail(
                "kafka",
                format!("cannot make a client from [kafka]: {error}"),
            )]
        }
    };
    let metadata = match client.fetch_metadata(None, REQUEST_TIMEOUT) {
        Ok(metadata) => metadata,
        Err(error) => {
            return vec![Finding::fail(
                "kafka",
                format!(
                    "{brokers}: no metadata within {}s: {error}",
                    REQUEST_TIMEOUT.as_secs()
                ),
            )]
        }
    };
    let answered: Vec<String> = metadata
        .brokers()
        .iter()
        .map(|b| format!("{} {}:{}", b.id(), b.host(), b.port()))
        .collect();
    let mut findings = vec![Finding::ok(
        "kafka",
        format!(
            "{brokers}: metadata from {} broker(s): {}",
            answered.len(),
            answered.join(", ")
        ),
    )];
    let topics: HashMap<&str, Seen> = metadata
        .topics()
        .iter()
        .map(|t| {
            let seen = match t.error() {
                None => Ok(t.partitions().len()),
                Some(code) => Err(RDKafkaErrorCode::from(code)),
            };
            (t.name(), seen)
        })
        .collect();
    // Asked once, and only if an output is missing.
    let mut auto_create: Option<Result<bool, DescribeError>> = None;
    let broker_id = metadata.brokers().first().map(|b| b.id());
    for (index, stream) in config.streams.iter().enumerate() {
        let field = |name: &str| format!("streams[{index}].{name}");
        for input in &stream.inputs {
            findings.push(match topics.get(input.as_str()) {
                Some(Ok(n)) if *n > 0 => {
                    Finding::ok(field("inputs"), format!("{input}: {}", partitions(*n)))
                }
                Some(Ok(_)) => Finding::fail(field("inputs"), format!("{input}: no partitions")),
                Some(Err(error)) => Finding::fail(field("inputs"), format!("{input}: {error}")),
                None => Finding::fail(
                    field("inputs"),
                    format!(
                        "{input}: not on the brokers (metadata lists no such topic): create it"
                    ),
                ),
            });
        }
        let present: Vec<&str> = [&stream.clean, &stream.audit]
            .into_iter()
            .filter(|t| matches!(topics.get(t.as_str()), Some(Ok(n)) if *n > 0))
            .map(String::as_str)
            .collect();
        if !present.is_empty() {
            findings.push(output_limit(config, index, stream, &present));
        }
        for (name, topic) in [("clean", &stream.clean), ("audit", &stream.audit)] {
            findings.push(match topics.get(topic.as_str()) {
                Some(Ok(n)) if *n > 0 => {
                    Finding::ok(field(name), format!("{topic}: {}", partitions(*n)))
                }
                Some(Ok(_)) => Finding::fail(field(name), format!("{topic}: no partitions")),
                Some(Err(error)) => Finding::fail(field(name), format!("{topic}: {error}")),
                None => {
                    let allowed =
                        auto_create.get_or_insert_with(|| auto_create_topics(config, broker_id));
                    missing_output(field(name), topic, allowed)
                }
            });
        }
    }
    findings
}

/// Whether the output topics take every record `max_record_bytes` lets
/// through (plus what idemgate adds to an output): a topic whose
/// `max.message.bytes` is lower refuses such an output at produce time,
/// and `run` refuses the config instead (docs/design.md §10).
fn output_limit(
    config: &Config,
    index: usize,
    stream: &crate::config::StreamConfig,
    outputs: &[&str],
) -> Finding {
    let field = format!("streams[{index}].max_record_bytes");
    let needed = stream.max_record_bytes + crate::config::OUTPUT_HEADROOM;
    let limits = match topic_limits(config, outputs) {
        Ok(limits) => limits,
        Err(why) => {
            return Finding::warn(
                field,
                format!("the output topics' max.message.bytes could not be read ({why})"),
            )
        }
    };
    match limits.iter().min_by_key(|(_, limit)| *limit) {
        Some((topic, limit)) if *limit < needed => Finding::fail(
            field,
            format!(
                "{} bytes plus {} for key and headers exceed {topic}'s max.message.bytes ({limit}): \
                 lower it, or raise the topic's limit",
                stream.max_record_bytes,
                crate::config::OUTPUT_HEADROOM
            ),
        ),
        _ => Finding::ok(
            field,
            format!(
                "{} bytes (plus {} for key and headers) fit every output topic's max.message.bytes",
                stream.max_record_bytes,
                crate::config::OUTPUT_HEADROOM
            ),
        ),
    }
}

/// An admin client with the config's own properties (TLS, SASL), quiet,
/// and the options of a request bounded by `REQUEST_TIMEOUT`.
fn admin(config: &Config) -> Result<(AdminClient<QuietContext>, AdminOptions), DescribeError> {
    let mut client_config = ClientConfig::new();
    for (key, value) in config.client_properties(Client::Consumer).iter() {
        client_config.set(key, value);
    }
    let admin = client_config
        .create_with_context(QuietContext)
        .map_err(DescribeError::Kafka)?;
    Ok((
        admin,
        AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT)),
    ))
}

/// Each topic's `max.message.bytes`, by DescribeConfigs.
fn topic_limits(config: &Config, topics: &[&str]) -> Result<Vec<(String, usize)>, DescribeError> {
    let (admin, options) = admin(config)?;
    let resources: Vec<ResourceSpecifier<'_>> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let results =
        block_on(admin.describe_configs(&resources, &options)).map_err(DescribeError::Kafka)?;
    topics
        .iter()
        .zip(results)
        .map(|(topic, result)| {
            let resource = result.map_err(|code| DescribeError::TopicRefused {
                topic: topic.to_string(),
                code,
            })?;
            let limit = resource
                .get("max.message.bytes")
                .and_then(|entry| entry.value.as_deref())
                .and_then(|value| value.parse::<usize>().ok())
                .ok_or_else(|| DescribeError::NoTopicLimit(topic.to_string()))?;
            Ok((topic.to_string(), limit))
        })
        .collect()
}

/// What `run` refuses to start with (docs/design.md §10): an input topic
/// the brokers do not have, an output topic that could not take the
/// largest record the stream lets through. Brokers that cannot be asked
/// refuse nothing: the replica starts, and its monitoring shows what it
/// cannot read.
pub(crate) fn refusals(findings: &[Finding]) -> Vec<&Finding> {
    findings
        .iter()
        .filter(|f| f.status == super::Status::Fail)
        .filter(|f| f.subject.ends_with(".inputs") || f.subject.ends_with(".max_record_bytes"))
        .collect()
}

fn partitions(n: usize) -> String {
    if n == 1 {
        "1 partition".into()
    } else {
        format!("{n} partitions")
    }
}

/// An output the metadata does not list: the producer's first record asks
/// the broker for it, which creates it only with
/// `auto.create.topics.enable`.
fn missing_output(field: String, topic: &str, allowed: &Result<bool, DescribeError>) -> Finding {
    let absent = format!("{topic}: not in the brokers' metadata");
    match allowed {
        Ok(true) => Finding::warn(
            field,
            format!("{absent}; the broker creates it on the first record (auto.create.topics.enable = true), with its default partitions"),
        ),
        Ok(false) => Finding::fail(
            field,
            format!("{absent}, and the broker does not create topics (auto.create.topics.enable = false): create it"),
        ),
        Err(why) => Finding::warn(
            field,
            format!("{absent}; the first record creates it only if the broker has auto.create.topics.enable, which it did not tell ({why})"),
        ),
    }
}

/// The broker's `auto.create.topics.enable`, by DescribeConfigs.
fn auto_create_topics(config: &Config, broker: Option<i32>) -> Result<bool, DescribeError> {
    let broker = broker.ok_or(DescribeError::NoBroker)?;
    let (admin, options) = admin(config)?;
    let results = block_on(admin.describe_configs(&[ResourceSpecifier::Broker(broker)], &options))
        .map_err(DescribeError::Kafka)?;
    let resource = results
        .into_iter()
        .next()
        .ok_or(DescribeError::NoAnswer)?
        .map_err(DescribeError::BrokerRefused)?;
    let value = resource
        .get("auto.create.topics.enable")
        .and_then(|entry| entry.value.clone())
        .ok_or(DescribeError::NoAutoCreate)?;
    Ok(value.eq_ignore_ascii_case("true"))
}
