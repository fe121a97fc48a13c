//! A transaction that stalls an output partition, on Apache Kafka
//! (docs/design.md §11, docs/operating.md "A stalled transaction on an
//! output").
//!
//! Every replica watches the last stable offset (LSO) and the high
//! watermark (HW) of every partition of its streams' clean and audit
//! topics; `metrics.output_stall_after` is 3 s here, so the watch looks
//! every second.
//!
//! - **stalled**: a transactional producer of the test's own begins a
//!   transaction, writes one record to clean partition 0 and neither
//!   commits nor aborts (its `transaction.timeout.ms` is 60 s, far past
//!   the bound): the replica's WARN line names the partition with LSO 0
//!   and HW 1 no sooner than the bound and within it plus a few looks,
//!   and `idemgate_output_partitions_stalled` says 1. The runbook's
//!   `kafka-transactions abort --start-offset` (the LSO) then ends it: an
//!   INFO line and the gauge at 0 say so.
//! - **quiet**: two replicas commit transactions all along (an input
//!   stream paced over several bounds) and two transactional producers of
//!   the test's own keep a transaction open on clean partition 0 at every
//!   moment, each committing after 1.5 s: the LSO trails the HW nearly
//!   always (the test samples both and checks), yet moves, and neither
//!   replica reports a stall.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate_testkit::kafka::{Producer, Topics};
use idemgate_testkit::process::scrape_metric;
use idemgate_testkit::servers::free_port;
use idemgate_testkit::workload::Bank;
use idemgate_testkit::{env, kafka_brokers, say, tools, unique, BOUND};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};

use super::process::{wait_split, Gate, GateConfig};

const BOUND_SET: Duration = Duration::from_secs(3);
const GAUGE: &str = "idemgate_output_partitions_stalled";
const WATCHING: &str = "watching the outputs' last stable offsets";
const STALLED: &str = "an open transaction holds this output partition's last stable offset";
const MOVES: &str = "a stalled output partition's last stable offset moves again";

/// `base` as an exactly-once replica named `role`, with the 3 s bound and
/// a metrics port of its own; its address comes back too.
fn replica(base: &GateConfig, test: &str, role: &str) -> (GateConfig, String) {
    let mut config = base.clone();
    config.metrics = format!("output_stall_after = \"{}s\"", BOUND_SET.as_secs());
    let metrics = format!("127.0.0.1:{}", free_port());
    config.metrics_listen = metrics.clone();
    (
        config.exactly_once(&unique(&format!("{test}-{role}"))),
        metrics,
    )
}

/// A transactional producer of the test's own, its transaction timeout
/// far past the bound, initialised.
fn transactional(brokers: &str, name: &str) -> BaseProducer {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("transactional.id", unique(name))
        .set("transaction.timeout.ms", "60000")
        .create()
        .expect("a transactional producer");
    producer
        .init_transactions(BOUND)
        .expect("init_transactions");
    producer
}

/// Begins a transaction and writes one record of it to `topic` partition
/// `partition`, delivered (flushed); leaves it open.
fn open_one(producer: &BaseProducer, topic: &str, partition: i32) {
    producer.begin_transaction().expect("begin_transaction");
    producer
        .send(
            BaseRecord::to(topic)
                .partition(partition)
                .key("held")
                .payload("{}"),
        )
        .map_err(|(e, _)| e)
        .expect("send");
    producer.flush(BOUND).expect("flush");
}

/// A client outside any group at `isolation`: its latest offset of a
/// partition is the LSO (read_committed) or the HW.
fn watermarks(brokers: &str, isolation: &str) -> BaseConsumer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("stalled-output-look"))
        .set("isolation.level", isolation)
        .create()
        .expect("a consumer")
}

#[test]
fn exactly_once_a_transaction_left_open_on_clean_is_reported_stalled_and_recovers_when_aborted() {
    const TEST: &str = "stalled-output";
    let brokers = kafka_brokers();
    let topics = Topics::create(&brokers, TEST, 2, 2);
    let base = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    let (config, metrics) = replica(&base, TEST, "replica");
    let mut gate = Gate::start(TEST, &config);
    gate.wait_line(
        WATCHING,
        Instant::now() + BOUND,
        "the watch did not start",
        || std::thread::sleep(Duration::from_millis(100)),
    );
    assert_eq!(scrape_metric(&metrics, GAUGE), 0.0);

    let producer = transactional(&brokers, TEST);
    open_one(&producer, &topics.clean, 0);
    let opened = Instant::now();
    say(TEST, "a transaction holds clean partition 0 at offset 0");
    let line = gate.wait_line(
        STALLED,
        opened + BOUND_SET * 4,
        "no stall reported within four times the bound",
        || std::thread::sleep(Duration::from_millis(50)),
    );
    let after = opened.elapsed();
    say(TEST, format!("reported after {after:?}: {line}"));
    assert!(after >= BOUND_SET, "reported before the bound: {after:?}");
    for field in [
        format!("topic={}", topics.clean),
        "partition=0".into(),
        "last_stable_offset=0".into(),
        "high_watermark=1".into(),
    ] {
        assert!(line.contains(&field), "no {field} in {line}");
    }
    assert_eq!(scrape_metric(&metrics, GAUGE), 1.0, "the gauge");
    let stalls = gate
        .log_text()
        .lines()
        .filter(|l| l.contains(STALLED))
        .count();
    assert_eq!(stalls, 1, "one partition stalled, said once");

    // The runbook: what holds it, then the abort at the LSO.
    let producers = tools::transactions(
        &brokers,
        &[
            "describe-producers",
            "--topic",
            &topics.clean,
            "--partition",
            "0",
        ],
    )
    .expect("kafka-transactions describe-producers");
    say(TEST, format!("describe-producers:\n{producers}"));
    let aborted = tools::transactions(
        &brokers,
        &[
            "abort",
            "--topic",
            &topics.clean,
            "--partition",
            "0",
            "--start-offset",
            "0",
        ],
    )
    .expect("kafka-transactions abort");
    say(TEST, format!("abort: {aborted}"));
    let line = gate.wait_line(
        MOVES,
        Instant::now() + BOUND,
        "the aborted transaction's partition was not seen moving again",
        || std::thread::sleep(Duration::from_millis(50)),
    );
    say(TEST, &line);
    assert!(line.contains("partition=0"), "{line}");
    assert_eq!(
        scrape_metric(&metrics, GAUGE),
        0.0,
        "the gauge after the abort"
    );
    drop(producer);
    let status = gate.terminate(Duration::from_secs(30));
    assert!(status.success(), "the replica exited with {status}");
}

#[test]
fn exactly_once_transactions_that_commit_all_along_never_count_as_stalled() {
    const TEST: &str = "stalled-output-quiet";
    let brokers = kafka_brokers();
    let partitions = 2;
    let topics = Topics::create(&brokers, TEST, partitions, 2);
    let base = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    let (first_config, first_metrics) = replica(&base, TEST, "a");
    let (second_config, second_metrics) = replica(&base, TEST, "b");
    let mut first = Gate::start(&format!("{TEST}-a"), &first_config);
    let mut second = Gate::start(&format!("{TEST}-b"), &second_config);
    wait_split(
        &mut first,
        &mut second,
        partitions as usize,
        Duration::from_secs(30),
    );
    for gate in [&first, &second] {
        assert!(
            gate.log_text().contains(WATCHING),
            "[{}] no watch",
            gate.name
        );
    }

    // Four bounds of traffic: the replicas' transactions, and the test's
    // own overlapping ones on clean partition 0.
    let span = BOUND_SET * 4;
    let mut bank = Bank::new(TEST, 32);
    let plan = bank.phase(1_200, 0, 10);
    let input = topics.input.clone();
    let pace = span / (plan.len() as u32 / 40);
    let feeding = std::thread::spawn(move || {
        Producer::new(&kafka_brokers()).send(&input, &plan, 40, pace);
    });
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|n| {
            let (brokers, clean, done) = (brokers.clone(), topics.clean.clone(), done.clone());
            std::thread::spawn(move || {
                let producer = transactional(&brokers, &format!("{TEST}-writer-{n}"));
                // Staggered by half a transaction: one is open at every
                // moment.
                std::thread::sleep(Duration::from_millis(750 * n));
                let mut committed = 0;
                while !done.load(Ordering::SeqCst) {
                    open_one(&producer, &clean, 0);
                    // The scenario itself: a transaction open 1.5 s.
                    std::thread::sleep(Duration::from_millis(1_500));
                    producer
                        .commit_transaction(BOUND)
                        .expect("commit_transaction");
                    committed += 1;
                }
                committed
            })
        })
        .collect();

    let (committed, uncommitted) = (
        watermarks(&brokers, "read_committed"),
        watermarks(&brokers, "read_uncommitted"),
    );
    let (mut samples, mut gaps) = (0, 0);
    let until = Instant::now() + span;
    while Instant::now() < until {
        for (gate, metrics) in [(&mut first, &first_metrics), (&mut second, &second_metrics)] {
            gate.assert_alive();
            assert_eq!(scrape_metric(metrics, GAUGE), 0.0, "[{}] gauge", gate.name);
            assert!(
                !gate.log_text().contains(STALLED),
                "[{}] reported a stall: {}",
                gate.name,
                gate.tail(20)
            );
        }
        let look = |c: &BaseConsumer| {
            c.fetch_watermarks(&topics.clean, 0, BOUND)
                .expect("watermarks")
                .1
        };
        let (lso, hw) = (look(&committed), look(&uncommitted));
        samples += 1;
        gaps += usize::from(lso < hw);
        std::thread::sleep(Duration::from_millis(250));
    }
    done.store(true, Ordering::SeqCst);
    let commits: usize = writers.into_iter().map(|w| w.join().expect("writer")).sum();
    feeding.join().expect("input producer");
    say(
        TEST,
        format!("{commits} transactions of the test's own committed; the LSO trailed the HW in {gaps} of {samples} samples"),
    );
    assert!(
        gaps * 10 >= samples * 8,
        "the LSO trailed the HW in only {gaps} of {samples} samples: the quiet case tests nothing"
    );
    for gate in [&first, &second] {
        assert!(
            !gate.log_text().contains(STALLED),
            "[{}] reported a stall",
            gate.name
        );
    }
    for gate in [&mut first, &mut second] {
        let status = gate.terminate(Duration::from_secs(30));
        assert!(status.success(), "[{}] exited with {status}", gate.name);
    }
}
