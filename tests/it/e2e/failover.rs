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
//! And once with the store frozen around the kill for longer than the 60 s
//! lease of claim protocol v1: nothing may pass on a clock.
//!
//! The kill is aimed: right after the doomed replica logs a delivered
//! record, before it finalizes its claims and commits its offsets. Killed
//! at a random instant it was almost always between batches, and nothing
//! needed replaying (no replayed input in eight such runs).

use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs_as_delivered, Producer, Reader, Topics};
use idemgate_testkit::servers::{claim_ttls, unsettled_claims, RedisServer, ServerOptions};

use super::process::{read_part_before, wait_split, BurstAndTail, Gate, GateConfig};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, kafka_brokers, say, BOUND};

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
    // A burst the replicas work through as a backlog (so the kill lands
    // inside a batch), then a paced tail that still flows after the kill:
    // new events, and redeliveries of burst events, some of them of records
    // the killed replica delivered but never finalized.
    let workload = BurstAndTail::new(test, partitions, copies_share_key, 400);
    let (topics, bank, plan) = (&workload.topics, &workload.bank, workload.plan());
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config = GateConfig::new(test, topics, redis_url.clone());
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
    let split = wait_split(
        &mut doomed,
        &mut survivor,
        partitions as usize,
        Duration::from_secs(30),
    );
    say(test, format!("assigned {split:?} at {:?}", began.elapsed()));

    let producing = workload.produce(50, Duration::from_millis(100));
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    let part = plan.len() * 3 / 10;
    read_part_before(
        &mut reader,
        part,
        &mut [&mut doomed, &mut survivor],
        "the kill",
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
    let landed = read_inputs_as_delivered(&kafka_brokers(), topics, &delivered);
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
    let summary = check(&plan, &landed, topics, &reader.records, Expect::Replays);
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

/// How long the store stays frozen: past the 60 s lease of claim protocol
/// v1, after which a killed holder's claims would have been taken over.
const FROZEN: Duration = Duration::from_secs(65);

/// SIGKILL of one of two replicas while the store (a redis-server of the
/// test's own) is frozen by SIGSTOP, for `FROZEN`; then it thaws. The
/// killed replica's delivered work was never published, so its claims stay
/// pending; the survivor takes its partitions over during the freeze,
/// replays them once the store answers, meets those claims as its own and
/// produces again, and every copy waiting on them is decided only after.
///
/// The guarantee: for every distinct event, exactly one copy in clean and
/// nothing lost; the same input may be in clean twice (the killed
/// replica's output and the survivor's replay), never an event through two
/// inputs (Expect::Replays). Evidence that the fault hit: the survivor's
/// breaker opened, it held every partition while the store was frozen,
/// and nothing produced during the freeze was decided (but invalid
/// records, which need no claim) before the thaw.
#[test]
fn a_replica_killed_while_the_store_is_frozen_past_the_old_lease_doubles_no_event() {
    const TEST: &str = "failover-frozen";
    let began = Instant::now();
    let partitions = 4;
    let topics = Topics::create(&kafka_brokers(), TEST, partitions, 2);
    let mut redis = RedisServer::start(TEST, ServerOptions::default());
    let mut bank = Bank::new(TEST, 64);
    bank.copy_rate = (0.30, 0.08);
    // Copies on other partitions: some wait on the killed replica's claims
    // from the survivor's own partitions.
    bank.copies_share_key = false;
    let before = bank.phase(1_600, 0, 20);
    let during = bank.phase(200, 600, 8);
    let mut config = GateConfig::new(TEST, &topics, redis.url());
    config.max_records = 250;

    let mut doomed = Gate::start(&format!("{TEST}-doomed"), &config);
    let mut survivor = Gate::start(&format!("{TEST}-survivor"), &config);
    let split = wait_split(
        &mut doomed,
        &mut survivor,
        partitions as usize,
        Duration::from_secs(30),
    );
    say(TEST, format!("assigned {split:?} at {:?}", began.elapsed()));
    let producing = {
        let (topic, records) = (topics.input.clone(), before.clone());
        std::thread::spawn(move || {
            Producer::new(&kafka_brokers()).send(&topic, &records, 250, Duration::from_millis(10))
        })
    };
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    let part = before.len() * 3 / 10;
    read_part_before(
        &mut reader,
        part,
        &mut [&mut doomed, &mut survivor],
        "the freeze",
    );
    redis.freeze();
    let frozen = Instant::now();
    // Outputs decided before the freeze are delivered within it; their
    // publish cannot land, so the killed replica leaves them unsettled.
    reader.read_for(Duration::from_secs(1));
    doomed.kill();
    say(
        TEST,
        format!(
            "store frozen at {:?}, SIGKILL {:?} later, {} outputs read",
            began.elapsed(),
            frozen.elapsed(),
            reader.records.len()
        ),
    );
    let mut delivered = producing.join().expect("producer thread");
    delivered.extend(Producer::new(&kafka_brokers()).send(
        &topics.input,
        &during,
        100,
        Duration::ZERO,
    ));
    survivor.read_until_owns(
        partitions,
        &mut reader,
        frozen + FROZEN - Duration::from_secs(5),
        "during the freeze",
    );
    let taken = frozen.elapsed();
    reader.read_for(FROZEN.saturating_sub(frozen.elapsed()));
    survivor.assert_alive();
    let read_while_frozen = reader.records.len();
    redis.thaw();
    let thawed = Instant::now();
    say(
        TEST,
        format!(
            "the survivor held all {partitions} partitions {taken:?} into the freeze; thawed after {:?} with {read_while_frozen} outputs read",
            frozen.elapsed()
        ),
    );
    let during_ids: std::collections::HashSet<&str> =
        during.iter().map(|p| p.id.as_str()).collect();
    let decided_frozen: Vec<String> = reader.records[..read_while_frozen]
        .iter()
        .filter(|o| during_ids.contains(o.test_id()) && o.decision() != "invalid")
        .map(|o| format!("{} {}", o.test_id(), o.decision()))
        .collect();
    assert!(
        decided_frozen.is_empty(),
        "decided while the store was frozen: {decided_frozen:?}"
    );

    let plan: Vec<Planned> = before.into_iter().chain(during).collect();
    reader.read_every_input(plan.len(), BOUND, "of the thaw", || survivor.assert_alive());
    say(
        TEST,
        format!(
            "every input has an output {:?} after the thaw",
            thawed.elapsed()
        ),
    );
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Replays);
    say(TEST, &summary);
    let log = survivor.log_text();
    assert!(
        log.contains("breaker open"),
        "the survivor never saw the store down:\n{}",
        survivor.tail(30)
    );
    let status = survivor.terminate(Duration::from_secs(40));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    let ttls = claim_ttls(&redis.url(), &config.key_prefix);
    assert_eq!(ttls.len(), bank.events(), "claim keys, one per event");
    let unsettled = unsettled_claims(&redis.url(), &config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    say(TEST, format!("took {:?}", began.elapsed()));
}
