//! SIGTERM mid-stream, then a restart with the same group: the gateway
//! finishes or abandons the batch in flight, commits what is done, exits 0,
//! and the next process resumes from the committed offsets. Nothing is lost
//! and no input is decided twice.

use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs_as_delivered, Producer, Reader, Topics};
use idemgate_testkit::servers::{claim_ttls, unsettled_claims};

use super::process::{read_part_before, Gate, GateConfig};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, kafka_brokers, say, BOUND};

#[test]
fn a_restart_resumes_from_committed_offsets_and_loses_nothing() {
    const TEST: &str = "restart";
    let began = Instant::now();
    let topics = Topics::create(&kafka_brokers(), TEST, 3, 2);
    let mut bank = Bank::new(TEST, 24);
    bank.conflict_rate = 0.02;
    let before = bank.phase(600, 0, 12);
    let after = bank.phase(200, 150, 6);
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config = GateConfig::new(TEST, &topics, redis_url.clone());
    // Small batches, so the stop lands between and inside batches, not
    // after one batch that took everything.
    config.max_records = 40;

    let mut first = Gate::start(&format!("{TEST}-1"), &config);
    first.wait_assigned(Duration::from_secs(30));
    say(
        TEST,
        format!("first process assigned at {:?}", began.elapsed()),
    );
    // A paced stream: the stop comes while records are still arriving.
    let producing = {
        let topic = topics.input.clone();
        let records = before.clone();
        std::thread::spawn(move || {
            Producer::new(&kafka_brokers()).send(&topic, &records, 20, Duration::from_millis(40))
        })
    };
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    let part = before.len() / 3;
    read_part_before(&mut reader, part, &mut [&mut first], "the stop");
    let stopping = Instant::now();
    let status = first.terminate(Duration::from_secs(20));
    let stopped_in = stopping.elapsed();
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    assert!(
        first
            .log_text()
            .contains("worker stopped: finished work committed"),
        "no clean shutdown in the log:\n{}",
        first.tail(20)
    );
    reader.read_for(Duration::from_millis(500));
    let at_stop = reader.records.len();
    say(
        TEST,
        format!(
            "SIGTERM at {:?} after {part}+ outputs: exit 0 in {stopped_in:?}, {at_stop} outputs by then",
            began.elapsed() - stopped_in
        ),
    );
    let producer_running = !producing.is_finished();

    // The rest of the stream, and more, arrive while no gateway runs.
    let mut delivered = producing.join().expect("producer thread");
    delivered.extend(Producer::new(&kafka_brokers()).send(
        &topics.input,
        &after,
        100,
        Duration::ZERO,
    ));
    let plan: Vec<Planned> = before.into_iter().chain(after).collect();
    assert!(
        at_stop < plan.len(),
        "the stop came after everything was processed: nothing to resume"
    );
    say(
        TEST,
        format!(
            "producer still running at the stop: {producer_running}; {} inputs in all",
            plan.len()
        ),
    );

    let mut second = Gate::start(&format!("{TEST}-2"), &config);
    reader.read_every_input(plan.len(), BOUND, "of the restart", || {
        second.assert_alive()
    });
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    // Exact: an input decided before the stop and again after it would
    // have two outputs; one lost would have none.
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(TEST, &summary);
    let ttls = claim_ttls(&redis_url, &config.key_prefix);
    assert_eq!(ttls.len(), bank.events(), "claim keys, one per event");
    let unsettled = unsettled_claims(&redis_url, &config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");

    let status = second.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(TEST, format!("took {:?}", began.elapsed()));
}
