//! A transactional call that times out, on Apache Kafka (docs/design.md
//! §7, "A call whose outcome is unknown").
//!
//! The test runs a broker of its own (the shared one serves every other
//! test). An exactly-once replica working through a backlog freezes itself
//! at a seal's `after-offsets` fault point (its offsets are in the
//! transaction, its commit not sent); the test then freezes the broker
//! (SIGSTOP) and lets the replica go on, so its `commit_transaction` meets
//! a broker that answers nothing for 7 s and outlasts
//! `batch.transaction_call_timeout` (2 s): its outcome is unknown.
//! librdkafka tells its users to treat that as fatal; the replica instead
//! builds the lane's producer again (its `init_transactions`, tried until
//! the broker is back, fences the old producer and ends the transaction)
//! and reads the outcome back from the committed offsets.
//!
//! The freeze is aimed, not timed: a broker frozen at a moment of the
//! test's choosing met no call in flight in some runs (everything fetched
//! was decided and committed), and in others met the offsets' second
//! stage, which librdkafka bounds by `socket.timeout.ms` rather than the
//! call's timeout, so the call outlasted the freeze and succeeded.
//!
//! The guarantee: the replica never exits; for a read_committed reader
//! every input has exactly one output (audit included) and every event is
//! once in clean, nothing lost (`Expect::Exact`); no claim is left
//! unsettled; the timeout was met and resolved
//! (`idemgate_transactions_timed_out_total`).

use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs_as_delivered, Producer, Reader, Topics};
use idemgate_testkit::process::scrape_metric;
use idemgate_testkit::servers::{free_port, signal, Kafka};
use idemgate_testkit::workload::Bank;
use idemgate_testkit::{env, say, unique, BOUND};

use super::process::{Gate, GateConfig};
use super::seal_faults::wait_frozen;

/// How long the broker stays frozen: past the call timeout, within the
/// replica's session timeout and the broker's own (9 s).
const FROZEN: Duration = Duration::from_secs(7);
/// The replica's line at its fault point.
const REACHED: &str = "fault point after-offsets reached";

/// A fresh broker's first transactional client makes it create and load
/// `__transaction_state`: 2.1 s on a slow machine, past the replica's 2 s
/// call timeout, so its start-up `init_transactions` failed ("Coordinator
/// load in progress"; the replica exited then, and makes the call again
/// since 45b6ab7, which worker::exactly_once's start-up test checks). A
/// producer of the test's own initialises a transactional id first, with
/// time to spare: the start on a broker's very first transaction is not
/// what this test is about, and its retries would only sit in its time.
fn load_transaction_coordinator(brokers: &str) {
    use rdkafka::producer::{BaseProducer, Producer as _};
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("transactional.id", unique("eos-txn-timeout-first"))
        .create()
        .expect("a transactional producer");
    producer
        .init_transactions(BOUND)
        .expect("the broker's transaction coordinator loads");
}

#[test]
fn exactly_once_a_commit_timed_out_on_a_frozen_broker_is_resolved_and_nothing_is_doubled_or_lost() {
    const TEST: &str = "eos-txn-timeout";
    let dir = std::env::temp_dir().join(unique(TEST));
    let kafka = Kafka::start(&idemgate_testkit::tools::libs(), &dir)
        .expect("starting a broker of this test's own");
    let brokers = kafka.brokers.clone();
    load_transaction_coordinator(&brokers);
    let partitions = 4;
    let topics = Topics::create(&brokers, TEST, partitions, 2);
    let mut bank = Bank::new(TEST, 64);
    let plan = bank.phase(20_000, 0, 30);
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config = GateConfig::new(TEST, &topics, redis_url);
    // The group outlives the freeze: its member is not what is tested.
    config.kafka = vec![
        ("session.timeout.ms", "30000".into()),
        ("heartbeat.interval.ms", "1000".into()),
    ];
    let mut config = config.exactly_once(&unique(TEST));
    config.brokers = brokers.clone();
    config.max_records = 500;
    config.batch = "transaction_call_timeout = \"2s\"".into();
    // Mid-backlog: a few transactions with claims commit first.
    config.env = vec![
        ("IDEMGATE_FAULT_AT", "after-offsets".to_string()),
        ("IDEMGATE_FAULT_ACTION", "stop".to_string()),
        ("IDEMGATE_FAULT_SKIP", "5".to_string()),
    ];
    let metrics = format!("127.0.0.1:{}", free_port());
    config.metrics_listen = metrics.clone();
    let mut gate = Gate::start(TEST, &config);
    gate.wait_assigned(BOUND);
    let timed_out = || scrape_metric(&metrics, "idemgate_transactions_timed_out_total");
    assert_eq!(timed_out(), 0.0, "a call timed out before the freeze");

    let delivered = Producer::new(&brokers).send(&topics.input, &plan, 1_000, Duration::ZERO);
    let mut reader = Reader::new(&brokers, &topics.outputs());
    gate.wait_line(
        REACHED,
        Instant::now() + BOUND,
        &format!("the fault point was not reached within {BOUND:?}"),
        || reader.read_for(Duration::from_millis(50)),
    );
    wait_frozen(&gate, "[eos-txn-timeout]");
    // The broker first, then the replica: its commit is sent into the
    // freeze.
    signal(kafka.pid(), "STOP");
    let frozen = Instant::now();
    gate.resume();
    say(
        TEST,
        "the replica stopped between its offsets and its commit; broker frozen, replica resumed",
    );
    while frozen.elapsed() < FROZEN {
        gate.assert_alive();
        // The fault's own duration: the broker answers nothing meanwhile.
        std::thread::sleep(Duration::from_millis(100));
    }
    signal(kafka.pid(), "CONT");
    say(TEST, "broker thawed");
    let until = Instant::now() + BOUND;
    while timed_out() < 1.0 {
        gate.assert_alive();
        assert!(
            Instant::now() < until,
            "the commit sent into the freeze did not time out and get resolved within {BOUND:?} of the thaw:\n{}",
            gate.tail(30)
        );
        reader.read_for(Duration::from_millis(200));
    }
    reader.read_every_input(plan.len(), BOUND, "after the thaw", || gate.assert_alive());
    let landed = read_inputs_as_delivered(&brokers, &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(TEST, &summary);
    let (claims, unsettled) = config.claims();
    assert!(claims > 0, "no claim in the store");
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    let told: Vec<String> = gate
        .log_text()
        .lines()
        .filter(|l| l.contains("timed out"))
        .map(|l| l.chars().take(220).collect())
        .collect();
    say(
        TEST,
        format!(
            "{} calls timed out and were resolved; the replica said: {told:#?}",
            timed_out()
        ),
    );
    let status = gate.terminate(Duration::from_secs(30));
    assert!(
        status.success(),
        "the replica exited with {status} on SIGTERM"
    );
    drop(kafka);
    let _ = std::fs::remove_dir_all(&dir);
}
