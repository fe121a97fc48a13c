//! The two consumer group protocols (docs/operating.md, "Group protocols";
//! docs/design.md §7): the classic one with idemgate's default eager
//! assignor, and KIP-848's (`group.protocol = "consumer"`), where the
//! broker assigns and every rebalance is incremental.
//!
//! Under each, mid-stream, a second replica joins (partitions move from
//! the first) and then the first leaves (SIGTERM: its partitions move to
//! the second). Each handover publishes and commits what the giving
//! replica finished, and the receiver decides the rest: every event once
//! in clean, every input one output, nothing lost.

use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{committed_offsets, read_inputs_as_delivered, Reader, Topics};
use idemgate_testkit::servers::{claim_ttls, unsettled_claims};
use idemgate_testkit::tools::consumer_groups;
use idemgate_testkit::workload::Bank;
use idemgate_testkit::{env, kafka_brokers, say, unique, BOUND};

use super::group::{ends, idemgate_reset, wait_committed};
use super::process::{produce_paced, read_part_before, wait_split, Gate, GateConfig};

#[test]
fn under_the_classic_protocol_a_replica_joining_and_one_leaving_mid_stream_lose_and_double_nothing()
{
    join_and_leave("protocol-classic", Protocol::Classic, false);
}

#[test]
fn under_the_kip_848_protocol_a_replica_joining_and_one_leaving_mid_stream_lose_and_double_nothing()
{
    join_and_leave("protocol-consumer", Protocol::Consumer, false);
}

/// As above, exactly once: each replica's transactions carry the consumer
/// group metadata KIP-848 gives it (its member epoch), and the broker
/// takes their offsets.
#[test]
fn under_the_kip_848_protocol_exactly_once_a_replica_joining_and_one_leaving_lose_and_double_nothing(
) {
    join_and_leave("protocol-consumer-eos", Protocol::Consumer, true);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    /// Left unset: librdkafka's `classic`, idemgate's eager
    /// `range,roundrobin`.
    Classic,
    /// `group.protocol = "consumer"`.
    Consumer,
}

/// A replica's revokes as its log tells them: (partitions handed over,
/// partitions kept).
fn revokes(gate: &Gate) -> Vec<(usize, usize)> {
    let field = |line: &str, name: &str| -> Option<usize> {
        line.split(&format!(" {name}="))
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    gate.log_text()
        .lines()
        .filter(|line| line.contains("revoked: partitions handed over"))
        .filter_map(|line| Some((field(line, "partitions")?, field(line, "kept")?)))
        .collect()
}

/// The guarantee: for every distinct event exactly one copy in clean, and
/// every input exactly one output (Expect::Exact): a graceful handover
/// publishes and commits what was finished, and what was not keeps its
/// claims for the next owner, who meets them as its own. Evidence that
/// the rebalances happened mid-stream and as the protocol has them: the
/// producer was still sending at the join and at the leave; under the
/// classic protocol the first replica's revoke at the join handed every
/// partition over (eager), under KIP-848 it handed over only the moving
/// ones and kept the rest, and the second replica never revoked anything;
/// the broker lists the group with the protocol's assignor. And the
/// operator's `idemgate reset` works with either: refused while the two
/// members run, committing once both are gone.
fn join_and_leave(test: &str, protocol: Protocol, exactly_once: bool) {
    let began = Instant::now();
    let partitions = 4;
    let topics = Topics::create(&kafka_brokers(), test, partitions, 2);
    let mut bank = Bank::new(test, 64);
    bank.copy_rate = (0.30, 0.08);
    bank.conflict_rate = 0.02;
    // Copies on other partitions: copies of one event meet on both
    // replicas, and across each handover.
    bank.copies_share_key = false;
    let plan = bank.phase(1_800, 0, 20);
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config = GateConfig::new(test, &topics, redis_url.clone());
    config.max_records = 250;
    if protocol == Protocol::Consumer {
        // Session and heartbeat are the broker's under KIP-848 (the config
        // refuses them); a graceful leave needs neither.
        config
            .kafka
            .retain(|(key, _)| !matches!(*key, "session.timeout.ms" | "heartbeat.interval.ms"));
        config.kafka.push(("group.protocol", "consumer".into()));
    }

    // Exactly once: each replica with a transactional id of its own.
    let replica = |name: &str| match exactly_once {
        true => config
            .clone()
            .exactly_once(&unique(&format!("{test}-{name}"))),
        false => config.clone(),
    };
    let mut first = Gate::start(&format!("{test}-first"), &replica("first"));
    first.wait_assigned(Duration::from_secs(30));
    let described = consumer_groups(
        &kafka_brokers(),
        &["--describe", "--group", &config.group, "--state"],
    )
    .expect("kafka-consumer-groups --describe --state");
    say(
        test,
        format!("the group as the broker describes it:\n{described}"),
    );
    let assignor = match protocol {
        Protocol::Classic => "range",
        Protocol::Consumer => "uniform",
    };
    assert!(
        described
            .lines()
            .any(|l| l.contains(&config.group) && l.contains(assignor)),
        "not the {assignor} assignor:\n{described}"
    );
    // A paced stream: the join and the leave come while it flows. It
    // stops at two fifths until the join and at four fifths until the
    // leave, each part released as its step begins.
    let (producing, mut held) = produce_paced(
        &topics.input,
        Vec::new(),
        plan.clone(),
        (40, Duration::from_millis(100)),
        &[plan.len() * 2 / 5, plan.len() * 4 / 5],
    );
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    read_part_before(&mut reader, plan.len() / 5, &mut [&mut first], "the join");
    let mut second = Gate::start(&format!("{test}-second"), &replica("second"));
    held.release();
    let split = wait_split(
        &mut first,
        &mut second,
        partitions as usize,
        Duration::from_secs(30),
    );
    say(
        test,
        format!(
            "joined: {split:?} at {:?}, {} outputs read; the first replica's revokes (handed over, kept) {:?}",
            began.elapsed(),
            reader.records.len(),
            revokes(&first)
        ),
    );
    // The broker lists both members to `idemgate reset`: its dry run
    // plans and names them, the reset itself refuses.
    let dry = idemgate_reset(&config, &["--to-earliest", "--dry-run"]);
    assert!(
        dry.ok && format!("{}{}", dry.stdout, dry.stderr).contains("2 active member"),
        "idemgate reset's dry run did not see the two members: {}{}",
        dry.stdout,
        dry.stderr
    );
    let refused = idemgate_reset(&config, &["--to-earliest", "--execute"]);
    assert!(
        !refused.ok && refused.stderr.contains("2 active member"),
        "idemgate reset did not see the two members: {}",
        refused.stderr
    );
    read_part_before(
        &mut reader,
        plan.len() * 3 / 5,
        &mut [&mut first, &mut second],
        "the leave",
    );
    let first_revokes = revokes(&first);
    held.release();
    let status = first.terminate(Duration::from_secs(40));
    assert!(
        status.success(),
        "the first replica exited with {status} on SIGTERM"
    );
    second.read_until_owns(
        partitions,
        &mut reader,
        Instant::now() + BOUND,
        &format!("within {BOUND:?} of the leave"),
    );
    say(
        test,
        format!(
            "left: the second replica owns all {partitions} partitions at {:?}, {} outputs read",
            began.elapsed(),
            reader.records.len()
        ),
    );

    reader.read_every_input(plan.len(), BOUND, "after the leave", || {
        second.assert_alive()
    });
    let delivered = producing.join().expect("producer thread");
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(test, &summary);
    let second_revokes = revokes(&second);
    say(
        test,
        format!("revokes (handed over, kept): first {first_revokes:?}, second {second_revokes:?}"),
    );
    match protocol {
        Protocol::Classic => assert!(
            first_revokes.contains(&(partitions as usize, 0)),
            "no eager revoke of every partition at the join: {first_revokes:?}"
        ),
        Protocol::Consumer => {
            assert!(
                !first_revokes.is_empty() && first_revokes.iter().all(|(_, kept)| *kept > 0),
                "the join's revoke was not incremental: {first_revokes:?}"
            );
            assert!(
                second_revokes.is_empty(),
                "the second replica gave partitions up: {second_revokes:?}"
            );
        }
    }
    let ttls = claim_ttls(&redis_url, &config.key_prefix);
    assert_eq!(ttls.len(), bank.events(), "claim keys, one per event");
    let unsettled = unsettled_claims(&redis_url, &config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    wait_committed(
        &config,
        &topics,
        &ends(&landed, partitions),
        &mut [&mut second],
    );
    let status = second.terminate(Duration::from_secs(20));
    assert!(
        status.success(),
        "the second replica exited with {status} on SIGTERM"
    );
    // With every member gone, `idemgate reset` (its client made from the
    // same [kafka] table) commits for the group from outside it.
    let reset = idemgate_reset(&config, &["--to-earliest", "--execute"]);
    assert!(
        reset.ok,
        "idemgate reset --to-earliest --execute: {}",
        reset.stderr
    );
    let all: Vec<i32> = (0..partitions).collect();
    let committed = committed_offsets(&kafka_brokers(), &config.group, &topics.input, &all);
    assert_eq!(committed, vec![Some(0); all.len()], "the reset's commit");
    say(test, format!("took {:?}", began.elapsed()));
}
