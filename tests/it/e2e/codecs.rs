//! Every Kafka codec a producer may choose: an input topic written with
//! gzip, snappy, lz4 or zstd is read, deduplicated and written out (itself
//! compressed the same way) by the built binary against Tansu and Redis,
//! with every event exactly once in clean and every input exactly one
//! output.

use std::time::Duration;

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs, Producer, Reader, Topics};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, say, tansu_brokers, BOUND, SETTLE};

use super::process::{Gate, GateConfig};

fn a_topic_compressed_with(codec: &'static str) {
    let test = format!("codec-{codec}");
    let brokers = tansu_brokers();
    let topics = Topics::create(&brokers, &test, 2, 1);
    let mut bank = Bank::new(&test, 8);
    bank.conflict_rate = 0.05;
    let plan: Vec<Planned> = bank.phase(120, 0, 4);
    Producer::with_properties(&brokers, &[("compression.type", codec)]).send(
        &topics.input,
        &plan,
        40,
        Duration::ZERO,
    );
    let mut config = GateConfig::new(&test, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    config.kafka.push(("compression.type", codec.to_string()));
    let mut gate = Gate::start(&test, &config);
    let mut reader = Reader::new(&brokers, &topics.outputs());
    let all = reader.read_until(
        BOUND,
        |reader| reader.records.len() >= plan.len(),
        || gate.assert_alive(),
    );
    assert!(
        all,
        "{codec}: {} of {} outputs within {BOUND:?}; gateway log:\n{}",
        reader.records.len(),
        plan.len(),
        gate.tail(30)
    );
    reader.read_for(SETTLE);
    let landed = read_inputs(&brokers, &topics.input, topics.input_partitions, plan.len());
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
    a_topic_compressed_with("gzip");
}

#[test]
fn a_snappy_topic_is_read_and_deduplicated() {
    a_topic_compressed_with("snappy");
}

#[test]
fn an_lz4_topic_is_read_and_deduplicated() {
    a_topic_compressed_with("lz4");
}

#[test]
fn a_zstd_topic_is_read_and_deduplicated() {
    a_topic_compressed_with("zstd");
}
