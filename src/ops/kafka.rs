//! The Kafka clients the operator commands use: short-lived, no group, and
//! quiet. librdkafka's own log lines (a refused connection every second,
//! a producer property a consumer ignores) would bury the command's report,
//! which states the outcome itself; they stay at `debug` (`RUST_LOG`).

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;

/// Sends librdkafka's logs and errors to `tracing` at debug.
pub(crate) struct QuietContext;

impl ClientContext for QuietContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        tracing::debug!(target: "librdkafka", ?level, fac, message = log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", %error, reason);
    }
}

impl ConsumerContext for QuietContext {}

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
