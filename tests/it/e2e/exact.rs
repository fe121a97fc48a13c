//! One gateway, no faults: every input gets exactly one output, and the
//! numbers add up exactly.

use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs_as_delivered, Producer, Reader, Topics};

use super::process::{Gate, GateConfig};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, kafka_brokers, say, BOUND};

#[test]
fn binary_against_apache_kafka_and_redis_counts_exactly() {
    counts_exactly("exact", |config| config);
}

/// The run of `binary_against_apache_kafka_and_redis_counts_exactly`, on
/// the store `on` puts the config on (Redis as it is, or PostgreSQL).
pub fn counts_exactly(test: &'static str, on: fn(GateConfig) -> GateConfig) {
    let began = Instant::now();
    let topics = Topics::create(&kafka_brokers(), test, 3, 2);
    let mut bank = Bank::new(test, 24);
    bank.conflict_rate = 0.03;
    // Half is waiting when the gateway starts, half arrives while it runs;
    // the second half redelivers some events of the first.
    let first = bank.phase(300, 0, 10);
    let second = bank.phase(200, 60, 6);
    let producer = Producer::new(&kafka_brokers());
    let mut delivered = producer.send(&topics.input, &first, 100, Duration::ZERO);
    say(
        test,
        format!(
            "topics created, first half produced at {:?}",
            began.elapsed()
        ),
    );

    let config = on(GateConfig::new(
        test,
        &topics,
        env("IDEMGATE_TEST_REDIS_URL"),
    ));
    let mut gate = Gate::start(test, &config);
    delivered.extend(producer.send(&topics.input, &second, 50, Duration::from_millis(20)));
    let plan: Vec<Planned> = first.into_iter().chain(second).collect();
    say(
        test,
        format!(
            "all {} inputs produced at {:?}",
            plan.len(),
            began.elapsed()
        ),
    );

    // Every input must have an output; a doubled one would arrive in the
    // settle time after that.
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    reader.read_every_input(plan.len(), BOUND, "", || gate.assert_alive());
    say(test, format!("all outputs read at {:?}", began.elapsed()));

    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(test, &summary);
    // Every output keeps its input's timestamp (the event's time, not the
    // gateway's).
    let mut inputs = Reader::new(
        &kafka_brokers(),
        &[(&topics.input, topics.input_partitions)],
    );
    inputs.read_every_input(plan.len(), BOUND, "read back from the input", || {});
    let input_time: std::collections::HashMap<&str, Option<i64>> = inputs
        .records
        .iter()
        .map(|r| (r.test_id(), r.timestamp))
        .collect();
    for out in &reader.records {
        assert_eq!(
            out.timestamp,
            input_time[out.test_id()],
            "{} -> {}/{}: the output's timestamp is not its input's",
            out.test_id(),
            out.topic,
            out.offset
        );
    }
    assert_eq!(summary.decisions.get("novel"), Some(&bank.events()));

    // One claim per event, every one settled (below its partition's
    // watermark or flagged done), the replayed ones too.
    let (claims, unsettled) = config.claims();
    assert_eq!(claims, bank.events(), "claims, one per event");
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");

    let stopping = Instant::now();
    let status = gate.terminate(Duration::from_secs(20));
    say(
        test,
        format!("exited {status} {:?} after SIGTERM", stopping.elapsed()),
    );
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(test, format!("took {:?}", began.elapsed()));
}
