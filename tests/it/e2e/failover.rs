//! Two replicas in one group, one SIGKILLed mid-stream: no shutdown, no
//! final commit, claims left pending. The survivor takes its partitions
//! over (after the session timeout) and replays from the last committed
//! offsets. Nothing may be lost, and the only extra copies allowed in clean
//! are replays: the same input decided again because its offset was not
//! committed, never a second input of one event let through.
//!
//! Twice: with every redelivery keyed like its original (so in its
//! partition), and with redeliveries keyed on their own, so the copies of
//! one event meet on different replicas (docs/design.md §7: which replica sees
//! which copy must not matter).
//!
//! The kill is aimed: right after the doomed replica logs a delivered
//! record, before it finalizes its claims and commits its offsets. Killed
//! at a random instant it was almost always between batches, and nothing
//! needed replaying (no replayed input in eight such runs).

use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs_as_delivered, Producer, Reader, Topics};
use idemgate_testkit::servers::{claim_ttls, unsettled_claims};

use super::process::{Gate, GateConfig};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, say, tansu_brokers, BOUND};

#[test]
fn two_workers_one_killed_mid_stream_lose_nothing() {
    failover("failover", true);
}

#[test]
fn two_workers_one_killed_with_copies_across_partitions_double_nothing() {
    failover("failover-spread", false);
}

fn failover(test: &str, copies_share_key: bool) {
    let began = Instant::now();
    let partitions = 4;
    let topics = Topics::create(&tansu_brokers(), test, partitions, 2);
    let mut bank = Bank::new(test, 64);
    bank.copy_rate = (0.30, 0.08);
    bank.copies_share_key = copies_share_key;
    // A burst the replicas work through as a backlog (so the kill lands
    // inside a batch), then a paced tail that still flows after the kill:
    // new events, and redeliveries of burst events, some of them of records
    // the killed replica delivered but never finalized.
    let burst = bank.phase(2_400, 0, 30);
    let tail = bank.phase(400, 1_400, 10);
    let plan: Vec<Planned> = burst.iter().chain(&tail).cloned().collect();
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config = GateConfig::new(test, &topics, redis_url.clone());
    config.max_records = 500;
    // The worker's default is eager (range,roundrobin); a run can try
    // another assignor, e.g. cooperative-sticky.
    if let Ok(strategy) = std::env::var("IDEMGATE_E2E_ASSIGNMENT") {
        config
            .kafka
            .push(("partition.assignment.strategy", strategy));
    }

    let mut doomed = Gate::start(&format!("{test}-doomed"), &config);
    let mut survivor = Gate::start(&format!("{test}-survivor"), &config);
    // Both members of one generation, the partitions split between them.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        doomed.assert_alive();
        survivor.assert_alive();
        let (a, b) = (doomed.assigned(), survivor.assigned());
        if matches!((a, b), (Some(a), Some(b)) if a > 0 && b > 0 && a + b == partitions as usize) {
            say(
                test,
                format!("assigned {a:?} + {b:?} at {:?}", began.elapsed()),
            );
            break;
        }
        assert!(
            Instant::now() < until,
            "the group did not settle on two members within 30s: {a:?} + {b:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let producing = {
        let topic = topics.input.clone();
        std::thread::spawn(move || {
            let producer = Producer::new(&tansu_brokers());
            let mut landed = producer.send(&topic, &burst, 250, Duration::from_millis(10));
            landed.extend(producer.send(&topic, &tail, 50, Duration::from_millis(100)));
            landed
        })
    };
    let mut reader = Reader::new(&tansu_brokers(), &topics.outputs());
    let part = plan.len() * 3 / 10;
    let reached = reader.read_until(
        BOUND,
        |reader| reader.records.len() >= part,
        || {
            doomed.assert_alive();
            survivor.assert_alive();
        },
    );
    assert!(
        reached,
        "{} of {part} outputs before the kill",
        reader.records.len()
    );
    let aimed = doomed.kill_after_next_log_line(Duration::from_secs(5));
    let killed_at = Instant::now();
    let mid_stream = !producing.is_finished();
    say(
        test,
        format!(
            "SIGKILL at {:?} (aimed just after a delivery: {aimed}) with {} outputs read; producer still running: {mid_stream}",
            began.elapsed(),
            reader.records.len()
        ),
    );
    assert!(
        mid_stream,
        "the kill came after the whole stream was produced"
    );

    reader.read_every_input(plan.len(), BOUND, "of the kill", || survivor.assert_alive());
    say(
        test,
        format!(
            "every input has an output {:?} after the kill",
            killed_at.elapsed()
        ),
    );
    let delivered = producing.join().expect("producer thread");
    let landed = read_inputs_as_delivered(&tansu_brokers(), &topics, &delivered);
    // When outputs arrived, by second since the kill: the gap is the
    // session timeout and the rebalance.
    let mut arrivals = std::collections::BTreeMap::<i64, usize>::new();
    for record in &reader.records {
        let second = if record.seen >= killed_at {
            (record.seen - killed_at).as_secs() as i64
        } else {
            -((killed_at - record.seen).as_secs() as i64) - 1
        };
        *arrivals.entry(second).or_default() += 1;
    }
    say(
        test,
        format!("outputs read by second since the kill: {arrivals:?}"),
    );
    // The survivor took every partition over: records of each partition,
    // produced after the kill, have outputs.
    let taken_over: std::collections::BTreeSet<i32> = reader
        .records
        .iter()
        .filter(|r| r.seen > killed_at)
        .map(|r| landed[r.test_id()].partition)
        .collect();
    assert_eq!(
        taken_over.len(),
        partitions as usize,
        "partitions with outputs after the kill: {taken_over:?}"
    );
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Replays);
    say(test, &summary);
    say(
        test,
        format!(
            "extra copies in clean: {} (all from replayed inputs); inputs decided twice: {}",
            summary.extra_clean, summary.replayed_inputs
        ),
    );
    // One claim per event, every one settled (below its partition's
    // watermark or flagged done), the replayed ones too.
    let ttls = claim_ttls(&redis_url, &config.key_prefix);
    assert_eq!(ttls.len(), bank.events(), "claim keys, one per event");
    let unsettled = unsettled_claims(&redis_url, &config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");

    let status = survivor.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(test, format!("took {:?}", began.elapsed()));
}
