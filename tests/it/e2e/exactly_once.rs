//! `guarantee = "exactly-once"` against Apache Kafka (docs/design.md §7):
//! a reader of clean and audit with `isolation.level = read_committed` (the
//! test kit's reader: librdkafka's default) sees every input's output once,
//! whatever happened to the replicas.
//!
//! - Transactions commit, and the input offsets go through them, with
//!   idemgate's metadata: the worker's consumer never commits in this mode,
//!   so every committed offset the group has came in a transaction
//!   (TxnOffsetCommit), and the broker keeps its metadata.
//! - A graceful handover (SIGTERM) commits the open transaction: the
//!   restart repeats no output.
//! - A replica SIGKILLed mid-transaction: its open transaction is aborted,
//!   so nothing it wrote after its last commit is read, and the replay
//!   writes it once; every claim ends settled, also those of outputs the
//!   killed replica's last committed transaction listed above its prefix
//!   (settled by the new owner, not sent again).
//! - A second producer with the same transactional id fences the first.
//! - A zombie (frozen past its session timeout, its partitions moved) is
//!   fenced when it thaws: its transaction carries a generation the group
//!   left behind.
//! - An output the brokers refuse inside a transaction aborts it, and goes
//!   to audit without its payload in a later one; the replica goes on.

use std::time::{Duration, Instant};

use futures::executor::block_on;
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{
    admin, committed_metadata, create_topics, read_inputs_as_delivered, send_keyless, Producer,
    Reader, Topics,
};
use idemgate_testkit::process::scrape_metric;
use idemgate_testkit::servers::{free_port, unsettled_claims};
use idemgate_testkit::workload::Bank;
use idemgate_testkit::{env, kafka_brokers, say, unique, BOUND};
use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};

use super::group::{ends, wait_committed};
use super::process::{exactly_once_pair, read_part_before, BurstAndTail, Gate, GateConfig};

/// No fault: every input one output, every event once in clean, and the
/// offsets committed through the transactions reach the end of the input.
#[test]
fn exactly_once_commits_outputs_and_offsets_in_transactions() {
    const TEST: &str = "eos";
    let topics = Topics::create(&kafka_brokers(), TEST, 3, 2);
    let mut bank = Bank::new(TEST, 24);
    bank.conflict_rate = 0.03;
    let plan = bank.phase(600, 0, 10);
    let producer = Producer::new(&kafka_brokers());
    let delivered = producer.send(&topics.input, &plan, 100, Duration::ZERO);
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let config = GateConfig::new(TEST, &topics, redis_url.clone()).exactly_once(&unique("eos-txn"));
    let mut gate = Gate::start(TEST, &config);
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    reader.read_every_input(plan.len(), BOUND, "", || gate.assert_alive());
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(TEST, &summary);
    assert_eq!(summary.decisions.get("novel"), Some(&bank.events()));
    // The consumer never commits in this mode: these came in transactions.
    wait_committed(&config, &topics, &ends(&landed, 3), &mut [&mut gate]);
    // The metadata the next owner raises watermarks from (docs/design.md
    // §7): every partition's offsets came in a transaction, and the broker
    // kept what idemgate wrote with them.
    let metadata = committed_metadata(&kafka_brokers(), &config.group, &topics.input, &[0, 1, 2]);
    say(
        TEST,
        format!("committed metadata as the broker keeps it: {metadata:?}"),
    );
    for text in &metadata {
        assert!(
            text.as_deref()
                .is_some_and(|t| t.starts_with("idemgate/3 ")),
            "the transaction's offsets lost idemgate's metadata: {metadata:?}"
        );
    }
    assert!(
        gate.log_text()
            .contains("transactional producers ready lanes=2"),
        "no transactional producer in the log"
    );
    let unsettled = unsettled_claims(&redis_url, &config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    let status = gate.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
}

/// SIGTERM mid-stream, then a restart: the handover commits the open
/// transaction with the offsets, so the restart repeats no output at all
/// (Expect::Exact: every input exactly one output).
#[test]
fn exactly_once_a_sigterm_and_restart_mid_stream_repeat_no_output() {
    const TEST: &str = "eos-restart";
    let topics = Topics::create(&kafka_brokers(), TEST, 3, 2);
    let mut bank = Bank::new(TEST, 24);
    let plan = bank.phase(2_000, 0, 20);
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let config = GateConfig::new(TEST, &topics, redis_url.clone()).exactly_once(&unique("eos-txn"));
    let mut gate = Gate::start(&format!("{TEST}-first"), &config);
    gate.wait_assigned(Duration::from_secs(30));
    let producing = {
        let topic = topics.input.clone();
        let plan = plan.clone();
        std::thread::spawn(move || {
            Producer::new(&kafka_brokers()).send(&topic, &plan, 100, Duration::from_millis(20))
        })
    };
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    read_part_before(&mut reader, plan.len() / 3, &mut [&mut gate], "the SIGTERM");
    let status = gate.terminate(Duration::from_secs(40));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(
        TEST,
        format!("SIGTERM with {} outputs read", reader.records.len()),
    );
    let mut second = Gate::start(&format!("{TEST}-second"), &config);
    reader.read_every_input(plan.len(), BOUND, "after the restart", || {
        second.assert_alive()
    });
    let delivered = producing.join().expect("producer thread");
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(TEST, &summary);
    wait_committed(&config, &topics, &ends(&landed, 3), &mut [&mut second]);
    let status = second.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
}

/// Two replicas, one SIGKILLed right after a delivery (inside an open
/// transaction) and restarted. The guarantee: for a read_committed reader
/// every input exactly one output and every event once in clean, nothing
/// lost (Expect::Exact: the killed replica's open transaction is aborted,
/// its replay committed once), and every claim settled at the end: also
/// those the killed replica's last committed transaction listed above its
/// prefix.
#[test]
fn exactly_once_a_replica_killed_mid_transaction_loses_nothing_and_settles_every_claim() {
    killed_mid_transaction("eos-kill", |config| config);
}

/// The run of `exactly_once_a_replica_killed_mid_transaction_...`, on the
/// store `on` puts the config on (Redis as it is, or PostgreSQL).
pub fn killed_mid_transaction(test: &'static str, on: fn(GateConfig) -> GateConfig) {
    let partitions = 4;
    let workload = BurstAndTail::new(test, partitions, false, 400);
    let (topics, bank, plan) = (&workload.topics, &workload.bank, workload.plan());
    let mut config = on(GateConfig::new(
        test,
        topics,
        env("IDEMGATE_TEST_REDIS_URL"),
    ));
    config.max_records = 500;
    let ([mut doomed, mut survivor], [doomed_config, survivor_config]) = exactly_once_pair(
        test,
        &config,
        ["doomed", "survivor"],
        Vec::new(),
        partitions,
    );
    // The tail's second half waits for the restart: the stream flows on
    // after the kill, however long the backlog took.
    let (producing, mut held) =
        workload.produce_held(50, Duration::from_millis(100), workload.tail.len() / 2);
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    read_part_before(
        &mut reader,
        plan.len() * 3 / 10,
        &mut [&mut doomed, &mut survivor],
        "the kill",
    );
    let aimed = doomed.kill_after_next_log_line(Duration::from_secs(5));
    say(test, format!("SIGKILL (aimed after a delivery: {aimed})"));
    // Its supervisor restarts it with its transactional id: the restart
    // fences the dead incarnation and aborts its open transaction (which
    // would otherwise hold read_committed readers of clean back until the
    // broker's transaction timeout).
    let mut restarted = Gate::start(&format!("{test}-restarted"), &doomed_config);
    held.release();
    reader.read_every_input(plan.len(), BOUND, "of the kill", || {
        survivor.assert_alive();
        restarted.assert_alive();
    });
    let delivered = producing.join().expect("producer thread");
    let landed = read_inputs_as_delivered(&kafka_brokers(), topics, &delivered);
    let summary = check(&plan, &landed, topics, &reader.records, Expect::Exact);
    say(test, &summary);
    let (claims, unsettled) = config.claims();
    assert_eq!(claims, bank.events(), "claims, one per event");
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    wait_committed(
        &survivor_config,
        topics,
        &ends(&landed, partitions),
        &mut [&mut survivor, &mut restarted],
    );
    for gate in [&mut survivor, &mut restarted] {
        let status = gate.terminate(Duration::from_secs(20));
        assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    }
}

/// A second replica started with the first one's transactional id (a
/// restarted replica whose zombie still runs): the broker fences the first
/// at the second's InitProducerId; the first stops with the error instead
/// of writing on, and the second carries the stream to the end.
///
/// A fenced producer learns it at its next transactional request, so the
/// first must still have records to write once the second has registered:
/// the plan's last two fifths are held back until the second owns a
/// partition (its InitProducerId comes before it joins the group). Sent
/// all at once, a fast first replica finished the stream before the second
/// started, and sat idle, unfenced, past the test's bound (a busy-core
/// run met it).
#[test]
fn exactly_once_a_second_producer_with_the_same_transactional_id_fences_the_first() {
    const TEST: &str = "eos-fence";
    let topics = Topics::create(&kafka_brokers(), TEST, 2, 2);
    let mut bank = Bank::new(TEST, 24);
    let plan = bank.phase(1_500, 0, 10);
    let (early, held) = plan.split_at(plan.len() * 3 / 5);
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let config =
        GateConfig::new(TEST, &topics, redis_url.clone()).exactly_once(&unique("eos-shared"));
    let mut first = Gate::start(&format!("{TEST}-first"), &config);
    first.wait_assigned(Duration::from_secs(30));
    let producer = Producer::new(&kafka_brokers());
    let mut delivered = producer.send(&topics.input, early, 50, Duration::from_millis(20));
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    read_part_before(&mut reader, plan.len() / 5, &mut [&mut first], "the second");
    let mut second = Gate::start(&format!("{TEST}-second"), &config);
    second.wait_assigned(Duration::from_secs(60));
    delivered.extend(producer.send(&topics.input, held, 50, Duration::from_millis(20)));
    let status = first.wait_exit(Duration::from_secs(60));
    assert!(
        !status.success(),
        "the fenced replica exited with {status}, not an error"
    );
    let log = first.log_text().to_lowercase();
    assert!(
        log.contains("fenc") || log.contains("epoch"),
        "the first replica's log does not tell of its fencing:\n{}",
        first.tail(30)
    );
    reader.read_every_input(plan.len(), BOUND, "after the fencing", || {
        second.assert_alive()
    });
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    // The fenced replica's open transaction was aborted by the second's
    // InitProducerId: what it wrote after its last commit is never read.
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(TEST, &summary);
    let status = second.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
}

/// What librdkafka says of a producer whose epoch another took (the
/// transaction's coordinator aborted it, or a newer producer started).
pub(super) const FENCED: &str = "fenced by a newer instance";

/// Longer than the 6 s session timeout, with the rebalance after it.
const STALL: Duration = Duration::from_secs(14);

/// A zombie: one of two replicas frozen (SIGSTOP) inside an open
/// transaction past its session timeout, its partitions taken over, then
/// thawed. Its late transaction carries a generation the group left
/// behind. The guarantee: for a read_committed reader every input exactly
/// one output, every event once in clean, nothing lost (Expect::Exact),
/// every claim settled; and the zombie's transaction never commits.
///
/// Which of two things stops it is a race both sides of the thaw start
/// at once, so either is the fencing this test requires: the zombie's
/// loop seals its overdue transaction and the broker refuses its offsets
/// (UNKNOWN_MEMBER_ID: the member was removed; the worker exits non-zero,
/// docs/design.md §7), or librdkafka's session check reports the
/// assignment lost first and the worker aborts the transaction itself
/// (and rejoins as a new member). With two lanes the freeze can also fall
/// after a seal and before the next output: the sealed transaction's
/// offsets went in under the current generation, its commit stands (the
/// survivor's committed-offset fetch waits for it), and the zombie, with
/// nothing open, says so and rejoins. Where the freeze falls between a
/// seal's offsets and its commit, that fetch waits until the coordinator
/// aborts the transaction at its timeout (librdkafka's 60 s, checked every
/// 10 s): a busy-core rehearsal met it, the survivor taking over 62 s
/// after the freeze, after the paced tail had ended. So the tail's last
/// records are held back until the thaw, however long the takeover takes.
/// Thawed after that abort, the zombie finds its epoch bumped: librdkafka
/// fails what it still had in flight, the worker aborts, the abort is
/// refused as fenced and the worker exits non-zero: a refusal too (another
/// rehearsal met it; `frozen_commit.rs` makes it happen on purpose).
#[test]
fn exactly_once_a_zombie_thawed_after_its_partitions_moved_lets_no_event_through_twice() {
    const TEST: &str = "eos-zombie";
    let partitions = 4;
    let workload = BurstAndTail::new(TEST, partitions, false, 600);
    let (topics, plan) = (&workload.topics, workload.plan());
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config = GateConfig::new(TEST, topics, redis_url.clone());
    config.max_records = 500;
    let ([mut zombie, mut survivor], _) = exactly_once_pair(
        TEST,
        &config,
        ["zombie", "survivor"],
        Vec::new(),
        partitions,
    );
    // The tail's last 200 records wait for the thaw: the takeover lasts
    // from one session timeout to a transaction timeout (see above).
    let (producing, mut held) = workload.produce_held(20, Duration::from_millis(500), 200);
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    read_part_before(
        &mut reader,
        plan.len() * 3 / 10,
        &mut [&mut zombie, &mut survivor],
        "the stall",
    );
    let aimed = zombie.stop_after_next_log_line(Duration::from_secs(5));
    let stopped = Instant::now();
    say(TEST, format!("SIGSTOP (aimed after a delivery: {aimed})"));
    survivor.read_until_owns(
        partitions,
        &mut reader,
        Instant::now() + BOUND,
        &format!("within {BOUND:?} of the freeze"),
    );
    reader.read_for(STALL.saturating_sub(stopped.elapsed()));
    let log_at_thaw = zombie.log_text().len();
    assert!(
        !producing.is_finished(),
        "the producer ended before the thaw (it holds the tail's last records until then)"
    );
    // The held records flow as the zombie wakes.
    held.release();
    zombie.resume();
    say(TEST, format!("SIGCONT after {:?}", stopped.elapsed()));
    reader.read_every_input(plan.len(), BOUND, "of the thaw", || survivor.assert_alive());
    let delivered = producing.join().expect("producer thread");
    let landed = read_inputs_as_delivered(&kafka_brokers(), topics, &delivered);
    let summary = check(&plan, &landed, topics, &reader.records, Expect::Exact);
    say(TEST, &summary);
    let unsettled = unsettled_claims(&redis_url, &config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    let zombie_exited = zombie.exited();
    let late = zombie.log_text()[log_at_thaw..].to_string();
    let told: Vec<&str> = late
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("WARN"))
        .collect();
    say(
        TEST,
        format!("the zombie exited: {zombie_exited:?}; its lines after the thaw: {told:?}"),
    );
    let refused = zombie_exited.is_some_and(|status| !status.success())
        && (late.contains("committing the transaction (a fenced zombie") || late.contains(FENCED));
    let aborted =
        late.contains("assignment lost (the session timed out): the open transaction is aborted");
    // Or the freeze fell between two transactions: the one sealed before
    // it committed (its offsets were taken while the generation was
    // current, and the survivor's fetch of the committed offsets waited
    // for it), and nothing was open to abort.
    let none_open = late.contains("no transaction open, nothing to abort");
    say(
        TEST,
        format!("the zombie's transaction refused by the broker: {refused}; aborted on the lost assignment: {aborted}; none open: {none_open}"),
    );
    assert!(
        refused || aborted || none_open,
        "the zombie's late transaction was neither refused nor aborted, and one was open:\n{late}"
    );
    let status = survivor.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    if zombie.exited().is_none() {
        let status = zombie.terminate(Duration::from_secs(20));
        assert!(
            status.success(),
            "the rejoined zombie exited with {status} on SIGTERM"
        );
    }
}

/// An output the brokers refuse for its content inside a transaction: the
/// clean topic is compacted, and an event's record without a key is refused
/// there (INVALID_RECORD). The guarantee, for a read_committed reader: the
/// transaction holding the refused output is aborted at once and the
/// replica goes on (no crash loop, it exits 0 on SIGTERM at the end); each
/// refused input has exactly one output, in audit, without its payload
/// (`undeliverable`), its claim released; every other input exactly one
/// output, before and after, every event once in clean, nothing lost, no
/// claim left unsettled.
#[test]
fn exactly_once_an_output_the_brokers_refuse_goes_to_audit_bare_in_a_later_transaction() {
    const TEST: &str = "eos-refused";
    let brokers = kafka_brokers();
    let topics = Topics::named(TEST, 2, 1);
    create_topics(
        &brokers,
        &[(topics.input.as_str(), 2), (topics.audit.as_str(), 1)],
    );
    let clean = NewTopic::new(&topics.clean, 1, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact");
    let created = block_on(admin(&brokers).create_topics(&[clean], &AdminOptions::new()))
        .expect("create_topics");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    let mut bank = Bank::new(TEST, 12);
    let mut plan = bank.phase(300, 0, 5);
    let producer = Producer::new(&brokers);
    let mut delivered = producer.send(&topics.input, &plan, 100, Duration::ZERO);
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config =
        GateConfig::new(TEST, &topics, redis_url.clone()).exactly_once(&unique("eos-refused-txn"));
    let metrics = format!("127.0.0.1:{}", free_port());
    config.metrics_listen = metrics.clone();
    let mut gate = Gate::start(TEST, &config);
    let mut reader = Reader::new(&brokers, &topics.outputs());
    reader.read_every_input(plan.len(), BOUND, "", || gate.assert_alive());
    // Three new events, written without a key: novel, and refused by the
    // compacted clean topic. Nothing else is in flight meanwhile, so no
    // keyed output shares their produce batch.
    let copy_rate = std::mem::replace(&mut bank.copy_rate, (0.0, 0.0));
    let keyless = bank.phase(3, 0, 0);
    bank.copy_rate = copy_rate;
    for record in &keyless {
        let at = send_keyless(&brokers, &topics.input, 0, record);
        delivered.insert(record.id.clone(), at);
    }
    reader.read_every_input(plan.len() + keyless.len(), BOUND, "", || {
        gate.assert_alive()
    });
    // The replica goes on: later records flow as ever.
    let after = bank.phase(200, 0, 5);
    delivered.extend(producer.send(&topics.input, &after, 100, Duration::ZERO));
    plan.extend(after);
    reader.read_every_input(plan.len() + keyless.len(), BOUND, "", || {
        gate.assert_alive()
    });
    let (refused, keyed): (Vec<_>, Vec<_>) = std::mem::take(&mut reader.records)
        .into_iter()
        .partition(|o| keyless.iter().any(|k| k.id == o.test_id()));
    for record in &keyless {
        let outputs: Vec<_> = refused
            .iter()
            .filter(|o| o.test_id() == record.id)
            .collect();
        assert_eq!(outputs.len(), 1, "{}: {outputs:?}", record.id);
        let out = outputs[0];
        assert_eq!(out.topic, topics.audit, "{}: {out:?}", record.id);
        assert!(
            out.header(idemgate::decision::REASON)
                .is_some_and(|r| r.starts_with("undeliverable"))
                && out.payload.is_none(),
            "{}: not a bare undeliverable record: {out:?}",
            record.id
        );
    }
    let landed = read_inputs_as_delivered(&brokers, &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &keyed, Expect::Exact);
    say(TEST, &summary);
    // The refusal is met as the delivery's report (reason `delivery`) or,
    // when the seal's commit comes first, as the commit's error (`commit`):
    // either way the transaction holding it was aborted.
    let aborted = scrape_metric(&metrics, "idemgate_transactions_aborted_total");
    assert!(
        aborted >= 1.0,
        "no transaction was aborted: the refusal was not met inside one"
    );
    let unsettled = unsettled_claims(&redis_url, &config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    let status = gate.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
}
