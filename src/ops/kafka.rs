//! The Kafka clients the operator commands use: short-lived, no group, and
//! quiet. librdkafka's own log lines (a refused connection every second,
//! a producer property a consumer ignores) would bury the command's report,
//! which states the outcome itself; they stay at `debug` (`RUST_LOG`).

use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;

pub(crate) use crate::logging::QuietContext;

/// How long a metadata or offsets request may take before the brokers
/// count as unreachable.
pub(crate) const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A consumer outside any group that commits nothing, with `properties`
/// (bootstrap servers, security) as librdkafka reads them.
pub(crate) fn consumer<'a>(
    properties: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<BaseConsumer<QuietContext>, KafkaError> {
    let mut config = ClientConfig::new();
    // librdkafka's consumer queue reports "unknown group" without one;
    // partitions are assigned, never subscribed, so no group is joined and
    // nothing is committed under it.
    config.set("group.id", "idemgate-ops");
    for (key, value) in properties {
        config.set(key, value);
    }
    config
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .create_with_context(QuietContext)
}
