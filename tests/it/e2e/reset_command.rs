//! `idemgate reset`, the built binary against Apache Kafka and Redis
//! (DESIGN.md §4 rules 2 and 7; docs/design.md §4.9):
//!
//! - without `--execute` (a plan, with `--re-emit` or a forward skip):
//!   no committed offset moves and no store key changes;
//! - `--execute` refused while the group has a member;
//! - backward to earliest without `--re-emit`: the replay repeats no
//!   output, audit included (duplicates, conflicts and invalid records in
//!   the workload);
//! - again with `--re-emit`: clean gets every novel record once more, each
//!   marked `idemgate-replay: true`, and audit nothing;
//! - forward past pending claims with `--skipped abandoned`: one copy of
//!   each skipped event takes its claim over and reaches clean, exactly
//!   once; with `--skipped delivered` the copies are duplicates.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use idemgate::decision::REPLAY;
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{
    committed_metadata, committed_offsets, read_inputs_as_delivered, Out, Producer, Reader, Topics,
};
use idemgate_testkit::process::scrape_metric;
use idemgate_testkit::servers::{free_port, scan};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, kafka_brokers, say, BOUND};

use super::group::{
    idemgate_reset, process, stop_with_pending_claims, wait_committed, Pending, Processed,
};
use super::process::{Gate, GateConfig};

/// `idemgate reset` with `args`, which must succeed: its report.
fn reset_ok(config: &GateConfig, args: &[&str]) -> String {
    let run = idemgate_reset(config, args);
    assert!(run.ok, "idemgate reset {args:?} failed: {}", run.stderr);
    run.stdout
}

/// A gateway's replay in its log (`idemgate::worker::pipeline`): one
/// `replay started` and one `replay finished` line per partition with
/// records, from 0 to its end; the sum of `field` over the end lines.
fn replay_lines(gate: &Gate, ends: &[(i32, i64)], field: &str) -> u64 {
    let log = gate.log_text();
    let value = |line: &str, key: &str| -> Option<i64> {
        line.split_whitespace()
            .find_map(|cell| cell.strip_prefix(&format!("{key}="))?.parse().ok())
    };
    let mut sum = 0;
    for (partition, end) in ends.iter().filter(|(_, end)| *end > 0) {
        for what in ["replay started", "replay finished"] {
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| {
                    l.contains(what) && value(l, "partition") == Some(i64::from(*partition))
                })
                .collect();
            assert_eq!(
                lines.len(),
                1,
                "one `{what}` line for partition {partition}:\n{log}"
            );
            let line = lines[0];
            assert_eq!(
                (value(line, "from"), value(line, "to")),
                (Some(0), Some(*end)),
                "{line}"
            );
            if what == "replay finished" {
                sum += value(line, field).unwrap_or_else(|| panic!("no {field} in {line}"));
            }
        }
    }
    sum as u64
}

fn shown(outputs: &[Out]) -> Vec<String> {
    outputs
        .iter()
        .map(|o| format!("{} {}:{}/{}", o.test_id(), o.decision(), o.topic, o.offset))
        .collect()
}

#[test]
fn a_reset_without_re_emission_repeats_nothing_and_with_it_clean_gets_the_novel_records_marked() {
    const TEST: &str = "reset-cmd-replay";
    let began = Instant::now();
    let topics = Topics::create(&kafka_brokers(), TEST, 3, 2);
    let mut bank = Bank::new(TEST, 24);
    bank.conflict_rate = 0.03;
    let plan = bank.phase(200, 0, 10);
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config = GateConfig::new(TEST, &topics, redis_url);
    config.metrics_listen = format!("127.0.0.1:{}", free_port());

    let mut first = Gate::start(&format!("{TEST}-1"), &config);
    first.wait_assigned(Duration::from_secs(30));
    let Processed {
        mut reader, ends, ..
    } = process(TEST, &config, &topics, &plan, &mut [&mut first]);

    // Refused while the gateway is a member, and nothing moved.
    let refused = idemgate_reset(&config, &["--to-earliest", "--execute"]);
    assert!(
        !refused.ok,
        "a reset while the group has a member was not refused"
    );
    assert!(
        refused.stderr.contains("active member"),
        "{}",
        refused.stderr
    );
    let partitions: Vec<i32> = ends.iter().map(|(p, _)| *p).collect();
    let committed = committed_offsets(&kafka_brokers(), &config.group, &topics.input, &partitions);
    let want: Vec<Option<i64>> = ends.iter().map(|(_, o)| Some(*o)).collect();
    assert_eq!(committed, want, "a refused reset moved the offsets");
    let status = first.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");

    // A dry run says what would happen and moves nothing.
    let report = reset_ok(&config, &["--to-earliest", "--dry-run"]);
    assert!(report.contains("dry run: nothing was changed"), "{report}");
    assert!(report.contains("replay "), "{report}");
    let committed = committed_offsets(&kafka_brokers(), &config.group, &topics.input, &partitions);
    assert_eq!(committed, want, "a dry run moved the offsets");

    // Without re-emission: nothing, audit included.
    let report = reset_ok(&config, &["--to-earliest", "--execute"]);
    assert!(report.contains("replay "), "{report}");
    assert!(report.contains("nothing produced again"), "{report}");
    assert!(report.contains("store updated"), "{report}");
    let earliest: Vec<Option<i64>> = ends.iter().map(|_| Some(0)).collect();
    let committed = committed_offsets(&kafka_brokers(), &config.group, &topics.input, &partitions);
    assert_eq!(committed, earliest, "the reset's commit");
    let before = reader.records.len();
    let mut second = Gate::start(&format!("{TEST}-2"), &config);
    second.wait_assigned(Duration::from_secs(30));
    wait_committed(&config, &topics, &ends, &mut [&mut second]);
    reader.read_for(Duration::from_secs(5));
    let added = shown(&reader.records[before..]);
    assert!(
        added.is_empty(),
        "a replay without re-emission produced {added:?}"
    );
    let replayed = scrape_metric(&config.metrics_listen, "idemgate_replayed_records_total");
    assert_eq!(
        replayed,
        plan.len() as f64,
        "every record read again was replayed"
    );
    let suppressed = replay_lines(&second, &ends, "suppressed");
    assert_eq!(
        suppressed,
        plan.len() as u64,
        "the replay's end lines count every record read again"
    );
    let status = second.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(
        TEST,
        format!(
            "replay without re-emission: nothing at {:?}",
            began.elapsed()
        ),
    );

    // With re-emission: every novel record once more, marked; no audit.
    let novel: HashSet<String> = reader
        .records
        .iter()
        .filter(|o| o.topic == topics.clean)
        .map(|o| o.test_id().to_string())
        .collect();
    assert_eq!(novel.len(), bank.events(), "one clean output per event");
    let report = reset_ok(&config, &["--to-earliest", "--re-emit", "--execute"]);
    assert!(report.contains("go to clean again"), "{report}");
    let before = reader.records.len();
    let mut third = Gate::start(&format!("{TEST}-3"), &config);
    third.wait_assigned(Duration::from_secs(30));
    wait_committed(&config, &topics, &ends, &mut [&mut third]);
    let reached = reader.read_until(
        BOUND,
        |r| r.records.len() >= before + novel.len(),
        || third.assert_alive(),
    );
    assert!(
        reached,
        "{} re-emitted of {}",
        reader.records.len() - before,
        novel.len()
    );
    reader.read_for(Duration::from_secs(5));
    let again = &reader.records[before..];
    let wrong: Vec<String> = shown(again)
        .into_iter()
        .zip(again)
        .filter(|(_, o)| {
            o.topic != topics.clean
                || o.header(REPLAY) != Some("true")
                || o.decision() != "novel"
                || !novel.contains(o.test_id())
        })
        .map(|(s, _)| s)
        .collect();
    assert!(
        wrong.is_empty(),
        "re-emitted outputs not as marked novel in clean: {wrong:?}"
    );
    let ids: HashSet<&str> = again.iter().map(|o| o.test_id()).collect();
    assert_eq!(
        again.len(),
        novel.len(),
        "each novel record re-emitted once"
    );
    let re_emitted = replay_lines(&third, &ends, "re_emitted");
    assert_eq!(
        re_emitted,
        novel.len() as u64,
        "the replay's end lines count every record re-emitted"
    );
    assert_eq!(ids.len(), novel.len());
    let status = third.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(
        TEST,
        format!(
            "re-emitted {} novel records, marked, no audit; took {:?}",
            again.len(),
            began.elapsed()
        ),
    );
}

#[test]
fn a_forward_skip_abandoned_lets_one_copy_of_each_skipped_event_take_its_claim_over() {
    forward_skip("reset-cmd-abandoned", "abandoned");
}

#[test]
fn a_forward_skip_counted_delivered_makes_the_copies_duplicates() {
    forward_skip("reset-cmd-delivered", "delivered");
}

/// As `resets.rs`'s forward test: a first gateway whose clean topic no
/// broker accepts leaves a pending claim per event
/// (`stop_with_pending_claims`); the group is then
/// skipped forward by `idemgate reset --skipped <skipped>`, and copies of
/// the skipped events arrive with new events.
fn forward_skip(test: &str, skipped: &str) {
    let began = Instant::now();
    let topics = Topics::create(&kafka_brokers(), test, 3, 2);
    let mut bank = Bank::new(test, 24);
    let first_phase = bank.phase(80, 0, 4);
    let skipped_events = bank.events();
    let mut config = GateConfig::new(test, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    let Pending {
        mut delivered,
        ends,
    } = stop_with_pending_claims(test, &config, &topics, &first_phase, skipped_events);
    let to: Vec<String> = ends
        .iter()
        .map(|(p, o)| format!("{}:{p}={o}", topics.input))
        .collect();
    let to = to.join(",");

    // A forward skip without a choice is refused, naming the flag.
    let refused = idemgate_reset(&config, &["--to-offset", &to]);
    assert!(
        !refused.ok,
        "a forward skip without --skipped was not refused"
    );
    assert!(refused.stderr.contains("--skipped"), "{}", refused.stderr);
    let report = reset_ok(
        &config,
        &["--to-offset", &to, "--skipped", skipped, "--execute"],
    );
    assert!(report.contains("skip "), "{report}");
    let risk = if skipped == "abandoned" {
        "DOUBLE"
    } else {
        "LOSS"
    };
    assert!(report.contains(risk), "the report names the risk: {report}");

    // New events, and copies of the skipped ones, after the skip.
    let after = bank.phase(80, 60, 4);
    delivered.extend(Producer::new(&kafka_brokers()).send(
        &topics.input,
        &after,
        100,
        Duration::ZERO,
    ));
    let copies: Vec<&Planned> = after
        .iter()
        .filter(|p| p.event.is_some_and(|e| e < skipped_events))
        .collect();
    assert!(
        !copies.is_empty(),
        "the workload has no copies of skipped events"
    );
    let copy_ids: HashSet<&str> = copies.iter().map(|p| p.id.as_str()).collect();
    let flowing: Vec<Planned> = after
        .iter()
        .filter(|p| !copy_ids.contains(p.id.as_str()))
        .cloned()
        .collect();
    config.metrics_listen = format!("127.0.0.1:{}", free_port());
    let mut second = Gate::start(&format!("{test}-2"), &config);
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    // Every input of the second phase gets an output: nothing waits.
    reader.read_every_input(after.len(), BOUND, "after the skip", || {
        second.assert_alive()
    });
    reader.read_for(Duration::from_secs(5));
    let waiting = scrape_metric(&config.metrics_listen, "idemgate_waiting_records");
    let taken_over = scrape_metric(&config.metrics_listen, "idemgate_claims_taken_over_total");
    let mut clean_per_event: HashMap<usize, usize> = HashMap::new();
    for out in &reader.records {
        if let Some(copy) = copies.iter().find(|p| p.id == out.test_id()) {
            if out.topic == topics.clean {
                *clean_per_event
                    .entry(copy.event.unwrap_or(usize::MAX))
                    .or_default() += 1;
            } else {
                assert_eq!(out.decision(), "duplicate", "{}", out.test_id());
            }
        }
    }
    let events_copied: HashSet<usize> = copies.iter().filter_map(|p| p.event).collect();
    say(
        test,
        format!(
            "{} copies of {} skipped events; clean per event {clean_per_event:?}; taken over {taken_over}; waiting {waiting}",
            copies.len(),
            events_copied.len()
        ),
    );
    assert_eq!(waiting, 0.0, "copies still waiting");
    if skipped == "abandoned" {
        assert_eq!(
            clean_per_event.len(),
            events_copied.len(),
            "every skipped event reached clean"
        );
        assert!(
            clean_per_event.values().all(|n| *n == 1),
            "a skipped event doubled in clean"
        );
        assert_eq!(
            taken_over,
            events_copied.len() as f64,
            "one take-over per skipped event"
        );
    } else {
        assert!(
            clean_per_event.is_empty(),
            "copies of delivered-counted events in clean"
        );
        assert_eq!(taken_over, 0.0);
    }
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let ids: HashSet<&str> = flowing.iter().map(|p| p.id.as_str()).collect();
    let outputs: Vec<Out> = reader
        .records
        .iter()
        .filter(|o| ids.contains(o.test_id()))
        .cloned()
        .collect();
    let summary = check(&flowing, &landed, &topics, &outputs, Expect::Exact);
    say(test, &summary);
    let status = second.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(test, format!("took {:?}", began.elapsed()));
}

/// The group's committed offsets and their metadata, per partition.
type Commits = Vec<Option<(i64, String)>>;

fn commits(config: &GateConfig, topics: &Topics, partitions: &[i32]) -> Commits {
    let offsets = committed_offsets(&kafka_brokers(), &config.group, &topics.input, partitions);
    let metadata = committed_metadata(&kafka_brokers(), &config.group, &topics.input, partitions);
    offsets
        .into_iter()
        .zip(metadata)
        .map(|(offset, metadata)| Some((offset?, metadata.unwrap_or_default())))
        .collect()
}

/// Every key under the test's prefix with its value as `DUMP` serialises
/// it (type, encoding and contents; not the expiry, which runs down).
fn keyspace(config: &GateConfig) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let client = redis::Client::open(config.redis_url.as_str()).expect("redis url");
    let mut connection = client.get_connection().expect("redis connection");
    scan(&mut connection, &format!("{}*", config.key_prefix))
        .into_iter()
        .filter_map(|key| {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP")
                .arg(&key)
                .query(&mut connection)
                .expect("DUMP");
            // Gone between SCAN and DUMP: an expired claim.
            Some((key, dump?))
        })
        .collect()
}

/// The guarantee: as with `kafka-consumer-groups --reset-offsets`, a reset
/// without `--execute` only prints its plan. A backward replay with
/// `--re-emit` (whose execution writes the re-emit range) and forward
/// skips with either `--skipped` (whose executions raise the watermark or
/// write the abandoned range), planned by default or with `--dry-run`,
/// leave every committed offset with its metadata and every store key
/// with its value as they were. The same replay with `--execute` changes
/// both, as the comparison sees.
#[test]
fn a_reset_without_execute_changes_no_offset_and_no_store_key() {
    const TEST: &str = "reset-cmd-plan";
    let topics = Topics::create(&kafka_brokers(), TEST, 3, 2);
    let mut bank = Bank::new(TEST, 24);
    let plan = bank.phase(120, 0, 6);
    let config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    let mut gate = Gate::start(&format!("{TEST}-1"), &config);
    gate.wait_assigned(Duration::from_secs(30));
    let Processed { ends, .. } = process(TEST, &config, &topics, &plan, &mut [&mut gate]);
    let status = gate.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    // Records no gateway read: room for a forward skip.
    let later = bank.phase(30, 0, 6);
    Producer::new(&kafka_brokers()).send(&topics.input, &later, 100, Duration::ZERO);
    let partitions: Vec<i32> = ends.iter().map(|(p, _)| *p).collect();
    let offsets_before = commits(&config, &topics, &partitions);
    let keys_before = keyspace(&config);
    assert!(
        offsets_before.iter().all(Option::is_some),
        "{offsets_before:?}"
    );
    assert!(!keys_before.is_empty(), "the run left no store key");

    for args in [
        &["--to-earliest", "--re-emit"][..],
        &["--to-earliest", "--re-emit", "--dry-run"],
        &["--to-latest", "--skipped", "abandoned"],
        &["--to-latest", "--skipped", "delivered", "--dry-run"],
        &["--shift-by", "5", "--skipped", "delivered", "--export"],
    ] {
        let report = reset_ok(&config, args);
        let export = args.contains(&"--export");
        let dry = args.contains(&"--dry-run");
        let said = if dry {
            "dry run: nothing was changed"
        } else {
            "nothing was changed: --execute is missing"
        };
        if !export {
            assert!(report.contains(said), "{args:?}: {report}");
            assert!(
                report.starts_with("\nGROUP "),
                "{args:?}: Kafka's table first: {report}"
            );
        }
        assert_eq!(
            commits(&config, &topics, &partitions),
            offsets_before,
            "{args:?} moved a committed offset"
        );
        assert_eq!(
            keyspace(&config),
            keys_before,
            "{args:?} changed a store key"
        );
    }
    say(
        TEST,
        format!(
            "five plans: {} commits and {} store keys unchanged",
            offsets_before.len(),
            keys_before.len()
        ),
    );

    // The comparison sees an executed reset: offsets and a key change.
    let report = reset_ok(&config, &["--to-earliest", "--re-emit", "--execute"]);
    assert!(report.contains("store updated"), "{report}");
    assert_ne!(commits(&config, &topics, &partitions), offsets_before);
    assert_ne!(keyspace(&config), keys_before, "--execute wrote no key");
}
