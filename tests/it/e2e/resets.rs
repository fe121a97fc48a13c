//! The group's offsets reset with an external tool while no gateway runs:
//! a consumer committing offsets for the group from outside it, as the
//! operator's `kafka-consumer-groups --reset-offsets` does, with none of
//! idemgate's commit metadata (docs/design.md §4.2, §4.7, §7).
//!
//! - Backward to the earliest offsets after the topic was processed: every
//!   record is below its partition's delivered watermark, so a gateway
//!   started afterwards reads them all again and produces nothing, audit
//!   included; also with every tier-1 key gone first (the watermark alone
//!   decides).
//! - Forward past records whose claims are pending: those holders are
//!   never read again, so copies of their events wait (never taken over
//!   on a timer), the rest of the stream flows, nothing doubles.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{
    commit_offsets, read_inputs_as_delivered, Out, Producer, Reader, Topics,
};
use idemgate_testkit::process::scrape_metric;
use idemgate_testkit::servers::{claim_ttls, delete_claims, free_port, unsettled_claims};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, kafka_brokers, say, BOUND};

use super::group::{process, stop_with_pending_claims, wait_committed, Pending, Processed};
use super::process::{Gate, GateConfig};

#[test]
fn a_reset_to_earliest_after_the_topic_was_processed_produces_nothing() {
    reset_to_earliest("reset-earliest", false);
}

#[test]
fn a_reset_to_earliest_without_tier1_keys_produces_nothing_by_the_watermark_alone() {
    reset_to_earliest("reset-earliest-no-tier1", true);
}

/// The guarantee: for every distinct event, exactly one copy in clean and
/// nothing lost (Expect::Exact, the first run), and a replay from the
/// earliest offsets adds nothing to clean or audit (docs/design.md §4.2),
/// whether or not the tier-1 keys are still there (`delete_tier1`).
/// Evidence that the replay happened: the second gateway committed the
/// end of every partition again, from the offsets reset to 0, and counted
/// every record it read as replayed (`idemgate_replayed_records_total`).
fn reset_to_earliest(test: &str, delete_tier1: bool) {
    let began = Instant::now();
    let topics = Topics::create(&kafka_brokers(), test, 3, 2);
    let mut bank = Bank::new(test, 24);
    bank.conflict_rate = 0.03;
    let plan = bank.phase(300, 0, 12);
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config = GateConfig::new(test, &topics, redis_url.clone());
    config.metrics_listen = format!("127.0.0.1:{}", free_port());

    let mut first = Gate::start(&format!("{test}-1"), &config);
    first.wait_assigned(Duration::from_secs(30));
    let Processed {
        mut reader, ends, ..
    } = process(test, &config, &topics, &plan, &mut [&mut first]);
    let status = first.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    let unsettled = unsettled_claims(&redis_url, &config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");

    if delete_tier1 {
        let deleted = delete_claims(&redis_url, &config.key_prefix);
        assert_eq!(deleted, bank.events(), "tier-1 keys deleted, one per event");
        assert!(claim_ttls(&redis_url, &config.key_prefix).is_empty());
    }
    let earliest: Vec<(i32, i64)> = ends.iter().map(|(p, _)| (*p, 0)).collect();
    commit_offsets(&kafka_brokers(), &config.group, &topics.input, &earliest);
    let outputs_before = reader.records.len();
    say(
        test,
        format!(
            "reset to {earliest:?} from {ends:?} at {:?} (tier-1 keys deleted: {delete_tier1}); {outputs_before} outputs so far",
            began.elapsed()
        ),
    );

    let mut second = Gate::start(&format!("{test}-2"), &config);
    second.wait_assigned(Duration::from_secs(30));
    wait_committed(&config, &topics, &ends, &mut [&mut second]);
    say(
        test,
        format!(
            "second run committed {ends:?} again at {:?}",
            began.elapsed()
        ),
    );
    reader.read_for(Duration::from_secs(5));
    let replayed = scrape_metric(&config.metrics_listen, "idemgate_replayed_records_total");
    let added: Vec<String> = reader.records[outputs_before..]
        .iter()
        .map(|o| format!("{} {}:{}/{}", o.test_id(), o.decision(), o.topic, o.offset))
        .collect();
    assert!(
        added.is_empty(),
        "a replay below the watermark produced {} outputs: {added:?}",
        added.len()
    );
    assert_eq!(
        replayed,
        plan.len() as f64,
        "idemgate_replayed_records_total: every record read again is below its watermark"
    );
    if delete_tier1 {
        assert!(
            claim_ttls(&redis_url, &config.key_prefix).is_empty(),
            "the replay wrote claims"
        );
    }
    let status = second.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(
        test,
        format!(
            "nothing produced by the replay of {} records (replayed records counted: {replayed}); took {:?}",
            plan.len(),
            began.elapsed()
        ),
    );
}

/// The guarantee: for every distinct event, exactly one copy in clean and
/// nothing lost among the events after the reset (Expect::Exact), and
/// nothing at all of the events whose holders were skipped: their claims
/// stay pending, so later copies of them wait (docs/design.md §4.4, §4.7),
/// none in clean or audit.
///
/// Pending claims, reliably: the first gateway's clean topic is a name no
/// broker accepts, so every clean delivery fails and is tried again while
/// the claims stay; it is stopped once every event is claimed
/// (`stop_with_pending_claims`). Evidence: the first gateway logged failed
/// deliveries and left one pending claim per event; the second one
/// reports waiting records in `idemgate_waiting_records`.
#[test]
fn a_reset_forward_past_pending_claims_leaves_their_copies_waiting_and_doubles_nothing() {
    const TEST: &str = "reset-forward";
    let began = Instant::now();
    let topics = Topics::create(&kafka_brokers(), TEST, 3, 2);
    let mut bank = Bank::new(TEST, 24);
    let skipped = bank.phase(120, 0, 6);
    let skipped_events = bank.events();
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config = GateConfig::new(TEST, &topics, redis_url.clone());
    let Pending {
        mut delivered,
        ends,
    } = stop_with_pending_claims(TEST, &config, &topics, &skipped, skipped_events);
    commit_offsets(&kafka_brokers(), &config.group, &topics.input, &ends);
    say(
        TEST,
        format!(
            "first gateway stopped with {skipped_events} pending claims at {:?}; group reset forward to {ends:?}",
            began.elapsed()
        ),
    );

    // New events, and copies of the skipped ones.
    let after = bank.phase(100, 60, 6);
    delivered.extend(Producer::new(&kafka_brokers()).send(
        &topics.input,
        &after,
        100,
        Duration::ZERO,
    ));
    let waiting: HashSet<&str> = after
        .iter()
        .filter(|p| p.event.is_some_and(|e| e < skipped_events))
        .map(|p| p.id.as_str())
        .collect();
    let flowing: Vec<Planned> = after
        .iter()
        .filter(|p| !waiting.contains(p.id.as_str()))
        .cloned()
        .collect();
    config.metrics_listen = format!("127.0.0.1:{}", free_port());
    let mut second = Gate::start(&format!("{TEST}-2"), &config);
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    let ids: HashSet<&str> = flowing.iter().map(|p| p.id.as_str()).collect();
    let all = reader.read_until(
        BOUND,
        |r| ids.iter().all(|id| r.ids.contains(*id)),
        || second.assert_alive(),
    );
    assert!(
        all,
        "the events after the reset did not all get an output within {BOUND:?}"
    );
    // The gauge is set every second; the copies wait for good.
    let until = Instant::now() + Duration::from_secs(20);
    let mut gauge = 0.0;
    while Instant::now() < until {
        reader.read_for(Duration::from_secs(1));
        gauge = scrape_metric(&config.metrics_listen, "idemgate_waiting_records");
        if gauge >= waiting.len() as f64 {
            break;
        }
    }
    // And they go on waiting, whatever their backoff.
    reader.read_for(Duration::from_secs(6));
    let still_waiting = scrape_metric(&config.metrics_listen, "idemgate_waiting_records");
    let oldest = scrape_metric(&config.metrics_listen, "idemgate_oldest_wait_seconds");
    say(
        TEST,
        format!(
            "{} copies of skipped events; idemgate_waiting_records {gauge}, then {still_waiting} with the oldest wait {oldest}s at {:?}",
            waiting.len(),
            began.elapsed()
        ),
    );
    assert!(
        !waiting.is_empty(),
        "the workload has no copies of skipped events"
    );
    assert_eq!(
        gauge,
        waiting.len() as f64,
        "every copy of a skipped event waits"
    );
    assert_eq!(
        still_waiting, gauge,
        "copies of skipped events stopped waiting"
    );
    assert!(oldest >= 5.0, "the oldest wait is {oldest}s");
    let skipped_ids: HashSet<&str> = skipped.iter().map(|p| p.id.as_str()).collect();
    let mut wrongly: Vec<String> = Vec::new();
    for out in &reader.records {
        let id = out.test_id();
        if waiting.contains(id) || (skipped_ids.contains(id) && out.topic == topics.clean) {
            wrongly.push(format!(
                "{id} {}:{}/{}",
                out.decision(),
                out.topic,
                out.offset
            ));
        }
    }
    assert!(wrongly.is_empty(), "outputs of skipped events: {wrongly:?}");

    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let outputs: Vec<Out> = reader
        .records
        .iter()
        .filter(|o| ids.contains(o.test_id()))
        .cloned()
        .collect();
    let summary = check(&flowing, &landed, &topics, &outputs, Expect::Exact);
    say(TEST, &summary);
    let status = second.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    let still = unsettled_claims(&redis_url, &config.key_prefix);
    assert_eq!(
        still.len(),
        skipped_events,
        "the skipped holders' claims, still pending: {still:?}"
    );
    say(TEST, format!("took {:?}", began.elapsed()));
}
