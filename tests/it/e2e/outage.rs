//! The claim store goes away for ten seconds while records flow
//! (docs/design.md §8). Each test runs a redis-server of its own, so stopping it
//! touches no other test.
//!
//! Two shapes of outage:
//!
//! - a restart: `SHUTDOWN SAVE`, ten seconds down, restart from the dump on
//!   the same port. This is the outage operators actually have (a
//!   maintenance restart, a crash with persistence, a failover to the same
//!   address): connections are refused, then the server is back with every
//!   claim it had. A payments store must persist claims; one that forgot
//!   them would let every redelivery through, which no gateway can prevent.
//!   So a fail-closed stream is held to the strict promise, nothing lost and
//!   nothing doubled, and a fail-open one must pass records as `unverified`
//!   meanwhile.
//! - a hang: SIGSTOP, ten seconds, SIGCONT. A frozen server or a dropped
//!   network: connections stay open, requests time out, and commands sent
//!   during the freeze still run when it ends (a claim the gateway gave up
//!   on is written after all). A fail-closed stream must come out of that
//!   exact too.

use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs_as_delivered, Landed, Producer, Reader, Topics};
use idemgate_testkit::servers::{claim_ttls, unsettled_claims, RedisServer, ServerOptions};

use super::process::{read_part_before, Gate, GateConfig};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{kafka_brokers, say, BOUND};

/// How long the store is away.
const OUTAGE: Duration = Duration::from_secs(10);

/// What the store-outage scenario leaves for its test to judge.
struct Outage {
    topics: Topics,
    config: GateConfig,
    gate: Gate,
    redis: RedisServer,
    plan: Vec<Planned>,
    /// Test ids of the records produced while the store was away.
    during: Vec<String>,
    reader: Reader,
    /// Outputs read before the store came back.
    read_while_down: usize,
    delivered: std::collections::HashMap<String, Landed>,
    bank: Bank,
}

/// Streams `before` (paced), takes the store away halfway through it,
/// produces `during` while it is away, brings it back after `OUTAGE`,
/// produces `after` (redeliveries of everything so far), and reads until
/// every input has an output.
fn run_outage(
    test: &str,
    fail_mode: &'static str,
    stop: fn(&mut RedisServer),
    resume: fn(&mut RedisServer),
) -> Outage {
    let began = Instant::now();
    let topics = Topics::create(&kafka_brokers(), test, 3, 2);
    let redis = RedisServer::start(test, ServerOptions::default());
    let mut bank = Bank::new(test, 24);
    let before = bank.phase(300, 0, 6);
    let during = bank.phase(150, 100, 6);
    let after = bank.phase(100, 250, 4);
    let mut config = GateConfig::new(test, &topics, redis.url());
    config.fail_mode = fail_mode;
    config.max_records = 50;
    let mut redis = redis;
    let mut gate = Gate::start(test, &config);
    gate.wait_assigned(Duration::from_secs(30));

    let producing = {
        let topic = topics.input.clone();
        let records = before.clone();
        std::thread::spawn(move || {
            Producer::new(&kafka_brokers()).send(&topic, &records, 10, Duration::from_millis(40))
        })
    };
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    let half = before.len() / 2;
    read_part_before(&mut reader, half, &mut [&mut gate], "the outage");

    stop(&mut redis);
    let down = Instant::now();
    let flowing = !producing.is_finished();
    say(
        test,
        format!(
            "store stopped at {:?} with {} outputs read; records still arriving: {flowing}",
            began.elapsed(),
            reader.records.len()
        ),
    );
    assert!(flowing, "the outage began after the stream ended");
    // The rest of `before`, then `during`, arrive while the store is away;
    // the reader keeps reading meanwhile.
    let producing = {
        let topic = topics.input.clone();
        let records = during.clone();
        std::thread::spawn(move || {
            let mut delivered = producing.join().expect("producer thread");
            delivered.extend(Producer::new(&kafka_brokers()).send(
                &topic,
                &records,
                10,
                Duration::from_millis(30),
            ));
            delivered
        })
    };
    reader.read_for(OUTAGE.saturating_sub(down.elapsed()));
    assert!(
        producing.is_finished(),
        "producing during the outage took longer than the outage"
    );
    let mut delivered = producing.join().expect("producer thread");
    gate.assert_alive();
    let read_while_down = reader.records.len();
    resume(&mut redis);
    say(
        test,
        format!(
            "store back after {:?}; {read_while_down} outputs read by then",
            down.elapsed()
        ),
    );

    delivered.extend(Producer::new(&kafka_brokers()).send(
        &topics.input,
        &after,
        50,
        Duration::from_millis(20),
    ));
    let plan: Vec<Planned> = before
        .into_iter()
        .chain(during.iter().cloned())
        .chain(after)
        .collect();
    reader.read_every_input(plan.len(), BOUND, "of the store's return", || {
        gate.assert_alive()
    });
    say(
        test,
        format!("every input has an output at {:?}", began.elapsed()),
    );
    Outage {
        topics,
        config,
        gate,
        redis,
        plan,
        during: during.into_iter().map(|p| p.id).collect(),
        reader,
        read_while_down,
        delivered,
        bank,
    }
}

impl Outage {
    fn landed(&self) -> std::collections::HashMap<String, Landed> {
        read_inputs_as_delivered(&kafka_brokers(), &self.topics, &self.delivered)
    }

    /// Outputs (read while the store was down) of records produced while it
    /// was down, by decision.
    fn decided_while_down(&self) -> std::collections::BTreeMap<String, usize> {
        let during: std::collections::HashSet<&str> =
            self.during.iter().map(String::as_str).collect();
        let mut decided = std::collections::BTreeMap::new();
        for out in &self.reader.records[..self.read_while_down] {
            if during.contains(out.test_id()) {
                *decided.entry(out.decision().to_string()).or_insert(0) += 1;
            }
        }
        decided
    }
}

fn shutdown_save(redis: &mut RedisServer) {
    redis.shutdown_save();
}

fn restart(redis: &mut RedisServer) {
    redis.restart();
}

fn freeze(redis: &mut RedisServer) {
    redis.freeze();
}

fn thaw(redis: &mut RedisServer) {
    redis.thaw();
}

#[test]
fn redis_stopped_ten_seconds_closed_mode_loses_and_doubles_nothing() {
    const TEST: &str = "outage-closed";
    let began = Instant::now();
    let mut outage = run_outage(TEST, "closed", shutdown_save, restart);
    assert_closed_mode_exact(TEST, &mut outage);
    let log = outage.gate.log_text();
    assert!(
        log.contains("breaker open") && log.contains("breaker closed"),
        "the outage and the recovery must be logged:\n{}",
        outage.gate.tail(30)
    );
    say(TEST, format!("took {:?}", began.elapsed()));
}

/// Fail-closed, whatever the outage: nothing needing a claim decided while
/// the store was away, then every input exactly one output, every event
/// exactly once in clean, and every claim finalized.
fn assert_closed_mode_exact(test: &str, outage: &mut Outage) {
    // Only invalid records (no claim needed) may pass while it is away.
    let while_down = outage.decided_while_down();
    say(
        test,
        format!("records produced during the outage, decided before it ended: {while_down:?}"),
    );
    assert!(
        while_down.keys().all(|decision| decision == "invalid"),
        "a fail-closed stream decided records without its store: {while_down:?}"
    );
    let landed = outage.landed();
    let summary = check(
        &outage.plan,
        &landed,
        &outage.topics,
        &outage.reader.records,
        Expect::Exact,
    );
    say(test, &summary);
    assert_eq!(summary.decisions.get("unverified"), None);
    // The claims outlived the outage: one per event, none written twice.
    let ttls = claim_ttls(&outage.redis.url(), &outage.config.key_prefix);
    assert_eq!(
        ttls.len(),
        outage.bank.events(),
        "claim keys, one per event"
    );
    let unsettled = unsettled_claims(&outage.redis.url(), &outage.config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    let status = outage.gate.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
}

#[test]
fn redis_stopped_open_mode_marks_records_unverified() {
    const TEST: &str = "outage-open";
    let began = Instant::now();
    let mut outage = run_outage(TEST, "open", shutdown_save, restart);

    let while_down = outage.decided_while_down();
    say(
        TEST,
        format!("records produced during the outage, decided before it ended: {while_down:?}"),
    );
    let landed = outage.landed();
    // Each input one output; an event with an unverified record may reach
    // clean twice, every other event exactly once.
    let summary = check(
        &outage.plan,
        &landed,
        &outage.topics,
        &outage.reader.records,
        Expect::Open,
    );
    say(TEST, &summary);
    assert!(
        summary.decisions.get("unverified").copied().unwrap_or(0) > 0,
        "no record passed as unverified during a {OUTAGE:?} outage of a fail-open stream"
    );
    assert!(
        while_down.get("unverified").copied().unwrap_or(0) > 0,
        "records produced during the outage waited for the store instead of passing unverified: {while_down:?}"
    );
    let log = outage.gate.log_text();
    assert!(
        log.contains("breaker open") && log.contains("decision=\"unverified\""),
        "the outage and the unverified records must be logged:\n{}",
        outage.gate.tail(30)
    );
    let status = outage.gate.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(TEST, format!("took {:?}", began.elapsed()));
}

#[test]
fn redis_frozen_ten_seconds_closed_mode_loses_and_doubles_nothing() {
    const TEST: &str = "frozen-closed";
    let began = Instant::now();
    let mut outage = run_outage(TEST, "closed", freeze, thaw);
    assert_closed_mode_exact(TEST, &mut outage);
    say(TEST, format!("took {:?}", began.elapsed()));
}
