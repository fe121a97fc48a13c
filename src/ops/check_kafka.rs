//! The brokers, as `check` asks them: do they answer metadata with the
//! config's own properties (TLS, SASL), is every input topic there (and
//! with how many partitions), and is every output there or will the broker
//! create it. Blocking; `check` runs it on a blocking thread.

use std::collections::HashMap;

use futures::executor::block_on;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::consumer::Consumer;
use rdkafka::ClientConfig;

use super::check::Finding;
use super::kafka::{consumer, QuietContext, REQUEST_TIMEOUT};
use crate::config::Config;

/// A topic as the brokers' metadata shows it: its partitions, or the error
/// the broker gave for it.
type Seen = Result<usize, String>;

pub(super) fn probe(config: &Config) -> Vec<Finding> {
    let brokers = config.brokers().unwrap_or_default().to_string();
    let properties = config.kafka.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let client = match consumer(properties) {
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
                Some(code) => Err(rdkafka::types::RDKafkaErrorCode::from(code).to_string()),
            };
            (t.name(), seen)
        })
        .collect();
    // Asked once, and only if an output is missing.
    let mut auto_create: Option<Result<bool, String>> = None;
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
fn missing_output(field: String, topic: &str, allowed: &Result<bool, String>) -> Finding {
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
fn auto_create_topics(config: &Config, broker: Option<i32>) -> Result<bool, String> {
    let broker = broker.ok_or("no broker in the metadata")?;
    let mut client_config = ClientConfig::new();
    for (key, value) in &config.kafka {
        client_config.set(key, value);
    }
    let admin: AdminClient<QuietContext> = client_config
        .create_with_context(QuietContext)
        .map_err(|e| e.to_string())?;
    let options = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
    let results = block_on(admin.describe_configs(&[ResourceSpecifier::Broker(broker)], &options))
        .map_err(|e| e.to_string())?;
    let resource = results
        .into_iter()
        .next()
        .ok_or("no answer to DescribeConfigs")?
        .map_err(|code| format!("DescribeConfigs: {code:?}"))?;
    let value = resource
        .get("auto.create.topics.enable")
        .and_then(|entry| entry.value.clone())
        .ok_or("DescribeConfigs did not list auto.create.topics.enable")?;
    Ok(value.eq_ignore_ascii_case("true"))
}
