//! A transactional call that times out, on Apache Kafka (docs/design.md
//! §7, "A call whose outcome is unknown").
//!
//! The test runs a broker of its own (the shared one serves every other
//! test) and freezes it (SIGSTOP) for 7 s while an exactly-once replica
//! works through a backlog, so the commit in flight, or the next one's
//! offsets, outlasts `batch.transaction_call_timeout` (2 s): its outcome is
//! unknown. librdkafka tells its users to treat that as fatal; the replica
//! instead builds the lane's producer again (its `init_transactions`,
//! tried until the broker is back, fences the old producer and ends the
//! transaction) and reads the outcome back from the committed offsets.
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

/// How long the broker stays frozen: past the call timeout, within the
/// replica's session timeout and the broker's own (9 s).
const FROZEN: Duration = Duration::from_secs(7);
/// Freezes tried before the test says the case tests nothing.
const FREEZES: usize = 3;

#[test]
fn exactly_once_a_commit_timed_out_on_a_frozen_broker_is_resolved_and_nothing_is_doubled_or_lost() {
    const TEST: &str = "eos-txn-timeout";
    let dir = std::env::temp_dir().join(unique(TEST));
    let kafka = Kafka::start(&idemgate_testkit::tools::libs(), &dir)
        .expect("starting a broker of this test's own");
    let brokers = kafka.brokers.clone();
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
    let metrics = format!("127.0.0.1:{}", free_port());
    config.metrics_listen = metrics.clone();
    let mut gate = Gate::start(TEST, &config);
    gate.wait_assigned(BOUND);
    let timed_out = || scrape_metric(&metrics, "idemgate_transactions_timed_out_total");
    assert_eq!(timed_out(), 0.0, "a call timed out before the freeze");

    let delivered = Producer::new(&brokers).send(&topics.input, &plan, 1_000, Duration::ZERO);
    let mut reader = Reader::new(&brokers, &topics.outputs());
    // Mid-backlog, by the worker's own count (a reader of the outputs can
    // lag the whole backlog behind on a loaded machine): transactions seal
    // every commit interval.
    let decided = || scrape_metric(&metrics, "idemgate_records_total");
    let until = Instant::now() + BOUND;
    while decided() < 2_000.0 {
        gate.assert_alive();
        assert!(
            Instant::now() < until,
            "the worker did not decide 2,000 records within {BOUND:?}"
        );
        reader.read_for(Duration::from_millis(50));
    }
    let commits = || scrape_metric(&metrics, "idemgate_offset_commits_total");
    // The freeze meets a call in flight unless the replica has nothing to
    // commit while the broker is away: every record it fetched decided and
    // committed, the next ones behind a fetch (a partition resumed at the
    // in-flight bounds is fetched again from the broker). It then goes on
    // after the thaw without a timeout: two commits with none timed out say
    // so (commits are sequential, and a resolved one counts its timeout
    // first), and the broker is frozen again while backlog is left.
    for freeze in 1.. {
        assert!(
            freeze <= FREEZES,
            "{FREEZES} freezes met no transactional call in flight: the case tests nothing:\n{}",
            gate.tail(30)
        );
        assert!(
            decided() < plan.len() as f64 * 0.8,
            "the worker was past most of the backlog before freeze {freeze}: the case tests nothing"
        );
        signal(kafka.pid(), "STOP");
        let frozen = Instant::now();
        say(
            TEST,
            format!(
                "broker frozen (freeze {freeze}) after {} decisions, {} outputs read",
                decided(),
                reader.ids.len()
            ),
        );
        while frozen.elapsed() < FROZEN {
            gate.assert_alive();
            // The fault's own duration: the broker answers nothing meanwhile.
            std::thread::sleep(Duration::from_millis(100));
        }
        // What the replica held unfinished at the end of the freeze: a
        // batch in flight is an open transaction, sealed each commit
        // interval, so a call must time out.
        let held = scrape_metric(&metrics, "idemgate_batches_in_flight");
        signal(kafka.pid(), "CONT");
        let thawed_at = commits();
        say(TEST, "broker thawed");
        let until = Instant::now() + BOUND;
        let met = loop {
            gate.assert_alive();
            if timed_out() >= 1.0 {
                break true;
            }
            if commits() >= thawed_at + 2.0 {
                break false;
            }
            assert!(
                Instant::now() < until,
                "no transactional call timed out and was resolved, and no commit came, within {BOUND:?} of the thaw:\n{}",
                gate.tail(30)
            );
            reader.read_for(Duration::from_millis(200));
        };
        if met {
            break;
        }
        assert_eq!(
            held,
            0.0,
            "batches were in flight through the freeze and no transactional call timed out:\n{}",
            gate.tail(30)
        );
        say(
            TEST,
            format!("the freeze met no transactional call in flight ({held} batches in flight at its end: nothing to commit while the broker was away): freezing again"),
        );
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
