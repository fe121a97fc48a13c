//! A zombie frozen between its transaction's offsets and its commit, on
//! Apache Kafka (docs/design.md §7, "Watermarks from commits" and the
//! committed-offsets patience).
//!
//! One of two replicas freezes itself (the `after-offsets` fault point,
//! SIGSTOP) once `send_offsets_to_transaction` has returned and before
//! `commit_transaction`. Its session runs out and the survivor is given its
//! partitions, but the brokers answer the survivor's read of the committed
//! offsets with "unstable" (KIP-447) for as long as the frozen transaction
//! holds offsets for them. Two tests, two thaws:
//!
//! - **into the wait**: the zombie thaws 35 s into that wait, past the
//!   30 s an assignment used to wait before it decided the last owner's
//!   done ranges again, and before the transaction's 60 s timeout: its
//!   commit lands (its offsets went in under a current generation), and
//!   the survivor reads them, with their metadata;
//! - **past the timeout**: the zombie stays frozen until the survivor has
//!   taken every partition, which it can only once the coordinator has
//!   aborted the frozen transaction at its timeout (librdkafka's 60 s,
//!   checked every 10 s). Thawed, the zombie finds its epoch bumped: the
//!   brokers refuse it as fenced and it exits non-zero. Two busy-core
//!   rehearsals of the zombie test in `exactly_once.rs` met this case by
//!   chance.
//!
//! The guarantee: for a read_committed reader every input has exactly one
//! output (audit included) and every event is once in clean, nothing lost
//! (`Expect::Exact`); no claim left unsettled; the survivor never went on
//! without the committed offsets. Before the patience was tied to
//! `transaction.timeout.ms`, the survivor gave up first (the first test
//! fails there, checked) and decided the zombie's done ranges again: two
//! audit outputs for dozens of inputs in a run of the zombie test in
//! three, with a busy core (here only when the frozen transaction's
//! metadata lists done ranges above its offset).

use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs_as_delivered, Reader};
use idemgate_testkit::servers::unsettled_claims;
use idemgate_testkit::{env, kafka_brokers, say, BOUND};

use super::exactly_once::FENCED;
use super::process::{exactly_once_pair, BurstAndTail, GateConfig};
use super::seal_faults::wait_frozen;

/// When the frozen zombie thaws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Thaw {
    /// `FROZEN_INTO_THE_WAIT` after the survivor is first seen waiting on
    /// the unstable offsets.
    IntoTheWait,
    /// Once the survivor owns every partition: after the coordinator
    /// aborted the frozen transaction.
    PastTheTimeout,
}

/// Past the 30 s the survivor used to wait, within the transaction's 60 s
/// timeout.
const FROZEN_INTO_THE_WAIT: Duration = Duration::from_secs(35);

/// The tail's last records, held until the thaw: the stream flows through
/// the freeze and again after the thaw, however long the broker takes to
/// let the survivor in, and the test ends soon after the thaw.
const HELD_TO_THE_THAW: usize = 400;

/// The survivor's line while the brokers answer "unstable".
const RETRYING: &str = "cannot read committed offsets yet: retrying";

#[test]
fn exactly_once_a_zombie_frozen_between_offsets_and_commit_holds_the_new_owner_until_it_commits() {
    frozen_commit("eos-frozen-commit", Thaw::IntoTheWait);
}

#[test]
fn exactly_once_a_zombie_frozen_past_its_transaction_timeout_is_fenced_at_the_thaw() {
    frozen_commit("eos-frozen-past", Thaw::PastTheTimeout);
}

fn frozen_commit(test: &str, thaw: Thaw) {
    let partitions = 4;
    let workload = BurstAndTail::new(test, partitions, false, 600);
    let (topics, plan) = (&workload.topics, workload.plan());
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config = GateConfig::new(test, topics, redis_url.clone());
    config.max_records = 500;
    let fault = vec![
        ("IDEMGATE_FAULT_AT", "after-offsets".to_string()),
        ("IDEMGATE_FAULT_ACTION", "stop".to_string()),
        ("IDEMGATE_FAULT_SKIP", "5".to_string()),
    ];
    let ([mut zombie, mut survivor], _) =
        exactly_once_pair(test, &config, ["zombie", "survivor"], fault, partitions);
    let (producing, mut held) =
        workload.produce_held(10, Duration::from_millis(250), HELD_TO_THE_THAW);
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());

    let until = Instant::now() + BOUND;
    let fired = zombie.wait_line(
        "fault point after-offsets reached",
        until,
        &format!("the fault point was not reached within {BOUND:?}"),
        || {
            survivor.assert_alive();
            reader.read_for(Duration::from_millis(50));
        },
    );
    wait_frozen(&zombie, "[frozen-commit]");
    let frozen = Instant::now();
    say(
        test,
        format!("the zombie froze between its offsets and its commit: {fired}"),
    );
    survivor.wait_until(
        until,
        "the survivor never waited on the frozen transaction's offsets",
        |gate| gate.log_text().contains(RETRYING),
        || reader.read_for(Duration::from_millis(200)),
    );
    let waiting = Instant::now();
    say(
        test,
        format!(
            "the survivor waits on unstable offsets {:?} into the freeze",
            frozen.elapsed()
        ),
    );
    match thaw {
        Thaw::IntoTheWait => {
            while waiting.elapsed() < FROZEN_INTO_THE_WAIT {
                survivor.assert_alive();
                reader.read_for(Duration::from_millis(200));
            }
        }
        Thaw::PastTheTimeout => {
            // The timeout runs from the transaction's start, before the
            // freeze; the coordinator looks every 10 s.
            survivor.read_until_owns(
                partitions,
                &mut reader,
                frozen + BOUND,
                &format!("within {BOUND:?} of the freeze"),
            );
            say(
                test,
                format!(
                    "the survivor owns every partition {:?} into the freeze",
                    frozen.elapsed()
                ),
            );
        }
    }
    let log_at_thaw = zombie.log_text().len();
    zombie.resume();
    held.release();
    say(test, format!("SIGCONT after {:?} frozen", frozen.elapsed()));
    reader.read_every_input(plan.len(), BOUND, "after the thaw", || {
        survivor.assert_alive()
    });
    let delivered = producing.join().expect("producer thread");
    let landed = read_inputs_as_delivered(&kafka_brokers(), topics, &delivered);
    let summary = check(&plan, &landed, topics, &reader.records, Expect::Exact);
    say(test, &summary);
    let unsettled = unsettled_claims(&redis_url, &config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    let late = zombie.log_text()[log_at_thaw..].to_string();
    let told: Vec<&str> = late
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("WARN"))
        .collect();
    say(test, format!("the zombie's lines after the thaw: {told:?}"));
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
    match thaw {
        // Its own end is not this test's guarantee (it rejoins, or a
        // fenced call ends it): said, not asserted.
        Thaw::IntoTheWait => {
            let zombie_end = match zombie.exited() {
                Some(status) => status,
                None => zombie.terminate(Duration::from_secs(20)),
            };
            say(test, format!("the zombie ended with {zombie_end}"));
        }
        // Its transaction was aborted under it: the brokers refuse it.
        Thaw::PastTheTimeout => {
            let status = zombie.wait_exit(Duration::from_secs(60));
            let late = zombie.log_text()[log_at_thaw..].to_string();
            say(test, format!("the zombie ended with {status}"));
            assert!(
                !status.success() && late.contains(FENCED),
                "the zombie thawed after its transaction's timeout was not refused as fenced (it exited with {status}):\n{late}"
            );
        }
    }
}
