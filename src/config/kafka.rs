//! librdkafka properties: `[kafka]` for both clients, `[kafka.consumer]`
//! and `[kafka.producer]` for one each (Kafka Connect's `consumer.` and
//! `producer.` overrides). For each client, in rising precedence:
//! idemgate's defaults, then `[kafka]` (less what belongs to the other
//! client only), then its own table, then what idemgate fixes itself.
//!
//! Every rule idemgate applies to a property (`rules.rs`) reads the
//! client's resulting properties and names the table it was set in
//! (`kafka.producer.transactional.id`), so an override cannot slip past a
//! refusal that `[kafka]` would meet.

use std::collections::BTreeMap;
use std::fmt;

use rdkafka::ClientConfig;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::{invalid, Config, ConfigError, GroupProtocol, Guarantee, KafkaValue};

/// The `[kafka]` table as written.
#[derive(Debug, Default)]
pub(crate) struct RawKafka {
    /// Properties for both clients (`"bootstrap.servers"`, TLS, SASL).
    pub(crate) common: BTreeMap<String, KafkaValue>,
    /// `[kafka.consumer]`: the consumer's own, over `[kafka]`.
    pub(crate) consumer: BTreeMap<String, KafkaValue>,
    /// `[kafka.producer]`: the producer's own, over `[kafka]`.
    pub(crate) producer: BTreeMap<String, KafkaValue>,
}

/// Hand-written so that each value keeps its path for the error message
/// (`kafka.consumer."linger.ms"`): `#[serde(flatten)]` would lose it.
impl<'de> Deserialize<'de> for RawKafka {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawKafka, D::Error> {
        struct Tables;
        impl<'de> Visitor<'de> for Tables {
            type Value = RawKafka;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("librdkafka properties and [kafka.consumer] / [kafka.producer] tables")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawKafka, A::Error> {
                let mut raw = RawKafka::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "consumer" => raw.consumer = map.next_value()?,
                        "producer" => raw.producer = map.next_value()?,
                        _ => {
                            let value = map.next_value()?;
                            raw.common.insert(key, value);
                        }
                    }
                }
                Ok(raw)
            }
        }
        deserializer.deserialize_map(Tables)
    }
}

/// The two clients' tables, as text.
#[derive(Clone, Debug, Default)]
pub(crate) struct KafkaTables {
    pub(crate) common: BTreeMap<String, String>,
    pub(crate) consumer: BTreeMap<String, String>,
    pub(crate) producer: BTreeMap<String, String>,
}

/// Which client a set of properties is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Client {
    Consumer,
    Producer,
}

impl Client {
    fn table(self) -> &'static str {
        match self {
            Client::Consumer => "consumer",
            Client::Producer => "producer",
        }
    }
}

/// One client's properties from the config: `[kafka]` less the other
/// client's own properties, then the client's table over it. Each value
/// remembers its table, for messages.
pub(crate) struct ClientProperties<'a> {
    client: Client,
    entries: BTreeMap<&'a str, (&'a str, bool)>,
}

impl<'a> ClientProperties<'a> {
    pub(crate) fn get(&self, key: &str) -> Option<&'a str> {
        self.entries.get(key).map(|(value, _)| *value)
    }

    pub(crate) fn contains_key(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// The config field a property was set in: `kafka.producer.acks` when
    /// the client's table set it, else `kafka.acks`.
    pub(crate) fn field(&self, key: &str) -> String {
        match self.entries.get(key) {
            Some((_, true)) => format!("kafka.{}.{key}", self.client.table()),
            _ => format!("kafka.{key}"),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + '_ {
        self.entries.iter().map(|(key, (value, _))| (*key, *value))
    }
}

impl KafkaTables {
    pub(crate) fn from_raw(raw: RawKafka) -> KafkaTables {
        let text = |map: BTreeMap<String, KafkaValue>| {
            map.into_iter()
                .map(|(key, value)| (key, value.into_text()))
                .collect()
        };
        KafkaTables {
            common: text(raw.common),
            consumer: text(raw.consumer),
            producer: text(raw.producer),
        }
    }

    /// The client's properties from the config (idemgate's defaults and
    /// fixed properties go around them in `client_configs`).
    pub(crate) fn client(&self, client: Client) -> ClientProperties<'_> {
        let (own, belongs_elsewhere): (_, fn(&str) -> bool) = match client {
            Client::Consumer => (&self.consumer, is_producer_only),
            Client::Producer => (&self.producer, is_consumer_only),
        };
        let mut entries: BTreeMap<&str, (&str, bool)> = self
            .common
            .iter()
            .filter(|(key, _)| !belongs_elsewhere(key))
            .map(|(key, value)| (key.as_str(), (value.as_str(), false)))
            .collect();
        for (key, value) in own {
            entries.insert(key, (value, true));
        }
        ClientProperties { client, entries }
    }

    /// What `[kafka.consumer]` and `[kafka.producer]` may not hold: the
    /// brokers (one cluster: a transaction spans outputs and input
    /// offsets, and `check` and the operator's commands reach it through
    /// `[kafka]`), and the other client's own properties (which librdkafka
    /// would only warn about, and which would do nothing).
    pub(crate) fn check_overrides(&self) -> Result<(), ConfigError> {
        for (client, own, wrong, other) in [
            (
                Client::Consumer,
                &self.consumer,
                is_producer_only as fn(&str) -> bool,
                "producer",
            ),
            (
                Client::Producer,
                &self.producer,
                is_consumer_only,
                "consumer",
            ),
        ] {
            let field = |key: &str| format!("kafka.{}.{key}", client.table());
            for key in own.keys() {
                if BROKER_KEYS.contains(&key.as_str()) {
                    return Err(invalid(
                        field(key),
                        "the consumer and the producer share one cluster: set the brokers in [kafka]",
                    ));
                }
                if wrong(key) {
                    return Err(invalid(
                        field(key),
                        format!(
                            "a {other} property: set it in [kafka.{other}] (or [kafka] for both)"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl super::Config {
    /// The consumer's or the producer's properties from the config:
    /// `[kafka]`, less the other client's own, under the client's table.
    pub(crate) fn client_properties(&self, client: Client) -> ClientProperties<'_> {
        self.kafka.client(client)
    }

    /// The consumer group the replicas join: `group.id` as the config sets
    /// it for the consumer, else the default.
    pub fn group_id(&self) -> &str {
        self.client_properties(Client::Consumer)
            .get("group.id")
            .unwrap_or(DEFAULT_GROUP_ID)
    }
}

/// The consumer group's name when the config sets none.
const DEFAULT_GROUP_ID: &str = "idemgate";

/// The bootstrap list and librdkafka's alias for it.
pub(crate) const BROKER_KEYS: [&str; 2] = ["bootstrap.servers", "metadata.broker.list"];

/// librdkafka's `transaction.timeout.ms` when the configuration sets none.
const TXN_TIMEOUT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(60);

/// A producer's transaction timeout, from its `transaction.timeout.ms` as
/// set (librdkafka's default where unset): how long a transaction of it may
/// hold its partitions, which the worker's patience with the committed
/// offsets and the outputs' stall bound both wait out.
pub(crate) fn transaction_timeout(property: Option<&str>) -> std::time::Duration {
    property
        .and_then(|ms| ms.parse::<u64>().ok())
        .map_or(TXN_TIMEOUT_DEFAULT, std::time::Duration::from_millis)
}

/// Producer-only properties: `[kafka]` gives them to the producer alone.
pub(crate) fn is_producer_only(key: &str) -> bool {
    key.starts_with("compression.")
        || key.starts_with("queue.buffering.")
        || key.starts_with("batch.")
        || key.starts_with("transaction")
        || matches!(
            key,
            "linger.ms"
                | "acks"
                | "request.required.acks"
                | "enable.idempotence"
                | "message.timeout.ms"
                | "delivery.timeout.ms"
                | "retries"
                | "message.send.max.retries"
                | "partitioner"
        )
}

/// Consumer-only properties: `[kafka]` gives them to the consumer alone.
pub(crate) fn is_consumer_only(key: &str) -> bool {
    key.starts_with("group.")
        || key.starts_with("auto.")
        || key.starts_with("fetch.")
        || key.starts_with("session.")
        || key.starts_with("heartbeat.")
        || key.starts_with("partition.assignment")
        || key.starts_with("max.poll")
        || key == "isolation.level"
        || key.starts_with("enable.auto")
        || key == "check.crcs"
}

/// Consumer properties the protocol depends on; the config cannot change
/// them.
pub(crate) const CONSUMER_FIXED: [(&str, &str); 2] = [
    ("enable.auto.commit", "false"),
    ("enable.auto.offset.store", "false"),
];
/// Consumer defaults (docs/configuration.md, `[kafka]`); `[kafka]` overrides
/// them.
const CONSUMER_DEFAULTS: [(&str, &str); 4] = [
    ("group.id", DEFAULT_GROUP_ID),
    ("auto.offset.reset", "earliest"),
    // Lag per partition comes from librdkafka's statistics.
    ("statistics.interval.ms", "5000"),
    // A fetch that finds nothing waits 100 ms, not librdkafka's 500: the
    // first records after a quiet spell are not held half a second.
    ("fetch.wait.max.ms", "100"),
];
/// Consumer defaults of the classic group protocol only: under
/// `group.protocol = "consumer"` (KIP-848) the broker assigns, and
/// librdkafka refuses to create a consumer with a client-side assignor.
const CLASSIC_CONSUMER_DEFAULTS: [(&str, &str); 1] =
    [("partition.assignment.strategy", "range,roundrobin")];
/// Producer defaults (docs/configuration.md, `[kafka]`): outputs that must not
/// be lost or doubled by the client itself, batched within 5 ms; `[kafka]`
/// overrides them.
const PRODUCER_DEFAULTS: [(&str, &str); 4] = [
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("linger.ms", "5"),
    ("message.timeout.ms", "30000"),
];

/// The consumer's and the producer's librdkafka configuration: the
/// defaults above, then `[kafka]`, then `[kafka.consumer]` or
/// `[kafka.producer]`, then the consumer's fixed properties. Common
/// properties (bootstrap servers, TLS, SASL) go to both.
pub fn client_configs(config: &Config) -> (ClientConfig, ClientConfig) {
    let mut consumer = ClientConfig::new();
    for (key, value) in CONSUMER_DEFAULTS {
        consumer.set(key, value);
    }
    if config.group_protocol == GroupProtocol::Classic {
        for (key, value) in CLASSIC_CONSUMER_DEFAULTS {
            consumer.set(key, value);
        }
    }
    let mut producer = ClientConfig::new();
    for (key, value) in PRODUCER_DEFAULTS {
        producer.set(key, value);
    }
    // `[kafka]` (the common properties to both clients: librdkafka tells
    // consumer-only from producer-only ones only with warnings), then each
    // client's own table over it (`config::kafka`).
    for (key, value) in config.client_properties(Client::Consumer).iter() {
        consumer.set(key, value);
    }
    let producer_properties = config.client_properties(Client::Producer);
    for (key, value) in producer_properties.iter() {
        producer.set(key, value);
    }
    for (key, value) in CONSUMER_FIXED {
        consumer.set(key, value);
    }
    if config.guarantee == Guarantee::ExactlyOnce
        && !producer_properties.contains_key("transactional.id")
    {
        producer.set(
            "transactional.id",
            default_transactional_id(config.group_id()),
        );
    }
    (consumer, producer)
}

/// `idemgate-<group>-<host name>`: stable across restarts of a replica
/// with a stable host name (a StatefulSet pod, a VM), so a restarted
/// replica fences its own zombie. Replicas sharing a host name need
/// `[kafka] "transactional.id"` set apart (docs/configuration.md).
fn default_transactional_id(group: &str) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|| "localhost".into());
    format!("idemgate-{group}-{host}")
}
