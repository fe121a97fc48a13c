//! Every Kafka codec a producer may choose: an input topic written with
//! gzip, snappy, lz4 or zstd is read, deduplicated and written out (itself
//! compressed the same way) by the built binary against Apache Kafka and Redis
//! (for zstd, the TLS Redis), with every event exactly once in clean and
//! every input exactly one output.

use std::time::Duration;

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs_as_delivered, Producer, Reader, Topics};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, kafka_brokers, say, BOUND};

use super::process::{Gate, GateConfig};

/// Where the gateway keeps its claims.
enum Store {
    Plain,
    /// The TLS Redis (`rediss://`, client certificate, ACL user).
    Tls,
}

fn a_topic_compressed_with(codec: &'static str, store: Store) {
    let test = format!("codec-{codec}");
    let brokers = kafka_brokers();
    let topics = Topics::create(&brokers, &test, 2, 1);
    let mut bank = Bank::new(&test, 8);
    bank.conflict_rate = 0.05;
    let plan: Vec<Planned> = bank.phase(120, 0, 4);
    let delivered = Producer::with_properties(&brokers, &[("compression.type", codec)]).send(
        &topics.input,
        &plan,
        40,
        Duration::ZERO,
    );
    let mut config = GateConfig::new(&test, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    if let Store::Tls = store {
        config = config.over_tls();
    }
    config.kafka.push(("compression.type", codec.to_string()));
    let mut gate = Gate::start(&test, &config);
    let mut reader = Reader::new(&brokers, &topics.outputs());
    reader.read_every_input(plan.len(), BOUND, codec, || gate.assert_alive());
    let landed = read_inputs_as_delivered(&brokers, &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(&test, &summary);
    assert!(
        !gate.log_text().contains("Decompression"),
        "{codec}: the gateway logged a decompression error:\n{}",
        gate.tail(30)
    );
}

#[test]
fn a_gzip_topic_is_read_and_deduplicated() {
    a_topic_compressed_with("gzip", Store::Plain);
}

#[test]
fn a_snappy_topic_is_read_and_deduplicated() {
    a_topic_compressed_with("snappy", Store::Plain);
}

#[test]
fn an_lz4_topic_is_read_and_deduplicated() {
    a_topic_compressed_with("lz4", Store::Plain);
}

/// zstd, with the claims made through `rediss://`: a gateway as a
/// managed deployment runs it.
#[test]
fn a_zstd_topic_is_read_and_deduplicated_with_claims_through_rediss() {
    a_topic_compressed_with("zstd", Store::Tls);
}
