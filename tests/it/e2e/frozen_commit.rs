//! A zombie frozen between its transaction's offsets and its commit, on
//! Apache Kafka (docs/design.md §7, "Watermarks from commits" and the
//! committed-offsets patience).
//!
//! One of two replicas freezes itself (the `after-offsets` fault point,
//! SIGSTOP) once `send_offsets_to_transaction` has returned and before
//! `commit_transaction`. Its session runs out and the survivor is given its
//! partitions, but the brokers answer the survivor's read of the committed
//! offsets with "unstable" (KIP-447) for as long as the frozen transaction
//! holds offsets for them. The zombie thaws 35 s into that wait, past
//! the 30 s an assignment used to wait before it decided the last owner's
//! done ranges again, and before the transaction's 60 s timeout: its
//! commit lands (its offsets went in under a current generation), and
//! the survivor reads them, with their metadata.
//!
//! The guarantee: for a read_committed reader every input has exactly one
//! output (audit included) and every event is once in clean, nothing lost
//! (`Expect::Exact`); no claim left unsettled; the survivor never went on
//! without the committed offsets. Before the patience was tied to
//! `transaction.timeout.ms`, the survivor gave up first (this test fails
//! there, checked) and decided the zombie's done ranges again: two audit
//! outputs for dozens of inputs in a run of the zombie test in three, with
//! a busy core (here only when the frozen transaction's metadata lists
//! done ranges above its offset).

use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs_as_delivered, Reader};
use idemgate_testkit::servers::unsettled_claims;
use idemgate_testkit::{env, kafka_brokers, say, BOUND};

use super::process::{exactly_once_pair, BurstAndTail, GateConfig};
use super::seal_faults::wait_frozen;

/// How long the zombie stays frozen once the survivor is seen waiting on
/// the unstable offsets: past the 30 s the survivor used to wait, within
/// the transaction's 60 s timeout.
const FROZEN_INTO_THE_WAIT: Duration = Duration::from_secs(35);

/// The survivor's line while the brokers answer "unstable".
const RETRYING: &str = "cannot read committed offsets yet: retrying";

#[test]
fn exactly_once_a_zombie_frozen_between_offsets_and_commit_holds_the_new_owner_until_it_commits() {
    const TEST: &str = "eos-frozen-commit";
    let partitions = 4;
    let workload = BurstAndTail::new(TEST, partitions, false, 600);
    let (topics, plan) = (&workload.topics, workload.plan());
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config = GateConfig::new(TEST, topics, redis_url.clone());
    config.max_records = 500;
    let fault = vec![
        ("IDEMGATE_FAULT_AT", "after-offsets".to_string()),
        ("IDEMGATE_FAULT_ACTION", "stop".to_string()),
        ("IDEMGATE_FAULT_SKIP", "5".to_string()),
    ];
    let ([mut zombie, mut survivor], _) =
        exactly_once_pair(TEST, &config, ["zombie", "survivor"], fault, partitions);
    let producing = workload.produce(10, Duration::from_millis(500));
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());

    let until = Instant::now() + BOUND;
    while !zombie
        .log_text()
        .contains("fault point after-offsets reached")
    {
        zombie.assert_alive();
        survivor.assert_alive();
        assert!(
            Instant::now() < until,
            "the zombie's fault point was not reached within {BOUND:?}"
        );
        reader.read_for(Duration::from_millis(50));
    }
    wait_frozen(&zombie, "[frozen-commit]");
    let frozen = Instant::now();
    let text = zombie.log_text();
    let fired = text
        .lines()
        .find(|l| l.contains("fault point after-offsets reached"));
    say(
        TEST,
        format!(
            "the zombie froze between its offsets and its commit: {}",
            fired.unwrap_or("")
        ),
    );
    while !survivor.log_text().contains(RETRYING) {
        survivor.assert_alive();
        assert!(
            Instant::now() < until,
            "the survivor never waited on the frozen transaction's offsets:\n{}",
            survivor.tail(30)
        );
        reader.read_for(Duration::from_millis(200));
    }
    let waiting = Instant::now();
    say(
        TEST,
        format!(
            "the survivor waits on unstable offsets {:?} into the freeze",
            frozen.elapsed()
        ),
    );
    while waiting.elapsed() < FROZEN_INTO_THE_WAIT {
        survivor.assert_alive();
        reader.read_for(Duration::from_millis(200));
    }
    let log_at_thaw = zombie.log_text().len();
    zombie.resume();
    say(TEST, format!("SIGCONT after {:?} frozen", frozen.elapsed()));
    reader.read_every_input(plan.len(), BOUND, "after the thaw", || {
        survivor.assert_alive()
    });
    let delivered = producing.join().expect("producer thread");
    let landed = read_inputs_as_delivered(&kafka_brokers(), topics, &delivered);
    let summary = check(&plan, &landed, topics, &reader.records, Expect::Exact);
    say(TEST, &summary);
    let unsettled = unsettled_claims(&redis_url, &config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    let late = zombie.log_text()[log_at_thaw..].to_string();
    let told: Vec<&str> = late
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("WARN"))
        .collect();
    say(TEST, format!("the zombie's lines after the thaw: {told:?}"));
    assert!(
        !survivor
            .log_text()
            .contains("cannot read committed offsets:"),
        "the survivor gave up on the committed offsets:\n{}",
        survivor.tail(30)
    );
    let status = survivor.terminate(Duration::from_secs(20));
    assert!(
        status.success(),
        "the survivor exited with {status} on SIGTERM"
    );
    // The zombie's own end is not this test's guarantee (it rejoins, or a
    // fenced call ends it): said, not asserted.
    let zombie_end = match zombie.exited() {
        Some(status) => status,
        None => zombie.terminate(Duration::from_secs(20)),
    };
    say(TEST, format!("the zombie ended with {zombie_end}"));
}
