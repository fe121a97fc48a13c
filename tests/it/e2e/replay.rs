//! Replay as users do it (DESIGN.md §12, §4 rule 2; docs/design.md §4.2,
//! §4.9): the group stopped, its offsets moved with Apache Kafka's own
//! `kafka-consumer-groups --reset-offsets`, the replicas started again.
//!
//! - Back to the earliest offsets after two replicas processed a workload
//!   with duplicates, conflicts and invalid records: every record read
//!   again lies below its partition's delivered watermark, so the replay
//!   produces nothing, audit included, while records sent after the reset
//!   are decided as usual (their copies of earlier events are duplicates of
//!   the outputs of the first run).
//! - `idemgate reset --to-time T --dry-run` and Kafka's `--reset-offsets
//!   --to-datetime T --dry-run` name the same offset for every partition
//!   (both ask the broker for the first offset at or after T, the log's end
//!   where there is none), and the one the records' timestamps say; T
//!   written in RFC 3339 or in Kafka's own format (with a zone or without,
//!   which both tools read as UTC) for idemgate.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{
    committed_metadata, committed_offsets, read_inputs_as_delivered, Producer, Topics,
};
use idemgate_testkit::process::scrape_metric;
use idemgate_testkit::servers::{free_port, unsettled_claims};
use idemgate_testkit::tools::{reset_offsets, reset_rows};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, kafka_brokers, say, BOUND};

use super::group::{ends, idemgate_reset, idemgate_reset_rows, process, wait_committed, Processed};
use super::process::{wait_split, Gate, GateConfig};

/// Two replicas of `config`, each with a `/metrics` listener of its own,
/// started and waited for until they split `partitions` between them.
fn two_replicas(
    name: &str,
    config: &GateConfig,
    partitions: usize,
) -> ([GateConfig; 2], Gate, Gate) {
    let replica = |n: usize| {
        let mut config = config.clone();
        config.metrics_listen = format!("127.0.0.1:{}", free_port());
        (Gate::start(&format!("{name}-{n}"), &config), config)
    };
    let (mut a, a_config) = replica(1);
    let (mut b, b_config) = replica(2);
    wait_split(&mut a, &mut b, partitions, Duration::from_secs(30));
    ([a_config, b_config], a, b)
}

/// The guarantee: for every distinct event exactly one copy in clean, every
/// input exactly one output over both runs (Expect::Exact on the whole
/// workload): the replay of the first run's records added nothing to clean
/// or audit, and the records sent after the reset were decided as the
/// first time (their new events novel, their copies of first-run events
/// duplicates naming the first run's outputs). Evidence that the replay
/// happened: Kafka's tool reset every partition to 0 and dropped
/// idemgate's commit metadata, and the restarted replicas counted every
/// first-run record as replayed and committed the new ends.
#[test]
fn a_replay_reset_with_kafkas_own_tool_repeats_no_output_and_decides_new_records_as_usual() {
    const TEST: &str = "replay-kafka-tool";
    let partitions = 4;
    let topics = Topics::create(&kafka_brokers(), TEST, partitions, 2);
    let mut bank = Bank::new(TEST, 48);
    bank.copy_rate = (0.30, 0.08);
    bank.conflict_rate = 0.03;
    // Copies of one event on other partitions: the replicas meet each
    // other's claims.
    bank.copies_share_key = false;
    let first_plan = bank.phase(600, 0, 12);
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let config = GateConfig::new(TEST, &topics, redis_url.clone());

    let (_, mut a, mut b) = two_replicas(&format!("{TEST}-first"), &config, partitions as usize);
    let Processed {
        mut reader,
        landed: mut delivered,
        ends: first_ends,
    } = process(TEST, &config, &topics, &first_plan, &mut [&mut a, &mut b]);
    // The group stopped: every member leaves it on SIGTERM.
    for gate in [&mut a, &mut b] {
        let status = gate.terminate(Duration::from_secs(20));
        assert!(
            status.success(),
            "[{}] exited with {status} on SIGTERM",
            gate.name
        );
    }
    let unsettled = unsettled_claims(&redis_url, &config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");

    // The operator's replay, with Kafka's own tool. It refuses a group
    // that still has members, so this also shows that both left.
    let printed = reset_offsets(
        &kafka_brokers(),
        &config.group,
        Some(&topics.input),
        &["--to-earliest", "--execute"],
    )
    .expect("kafka-consumer-groups --reset-offsets --to-earliest --execute");
    let rows = reset_rows(&printed);
    let earliest: Vec<(String, i32, i64)> = (0..partitions)
        .map(|p| (topics.input.clone(), p, 0))
        .collect();
    assert_eq!(rows, earliest, "the tool's reset:\n{printed}");
    let all: Vec<i32> = (0..partitions).collect();
    let committed = committed_offsets(&kafka_brokers(), &config.group, &topics.input, &all);
    assert_eq!(
        committed,
        vec![Some(0); all.len()],
        "the offsets the tool committed"
    );
    let metadata = committed_metadata(&kafka_brokers(), &config.group, &topics.input, &all);
    say(
        TEST,
        format!("reset to the earliest offsets from {first_ends:?} by Kafka's tool; metadata now {metadata:?}"),
    );
    let first_outputs = reader.records.len();

    // Restarted; new records (new events, copies of first-run events,
    // invalid records) arrive after the reset.
    let (configs, mut a, mut b) =
        two_replicas(&format!("{TEST}-again"), &config, partitions as usize);
    let after = bank.phase(200, 80, 6);
    delivered.extend(Producer::new(&kafka_brokers()).send(
        &topics.input,
        &after,
        50,
        Duration::from_millis(20),
    ));
    let plan: Vec<Planned> = first_plan.iter().chain(&after).cloned().collect();
    reader.read_every_input(plan.len(), BOUND, "after the replay", || {
        a.assert_alive();
        b.assert_alive();
    });
    let first_ids: HashSet<&str> = first_plan.iter().map(|p| p.id.as_str()).collect();
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let new_ends = ends(&landed, partitions);
    wait_committed(&config, &topics, &new_ends, &mut [&mut a, &mut b]);

    let repeated: Vec<String> = reader.records[first_outputs..]
        .iter()
        .filter(|o| first_ids.contains(o.test_id()))
        .map(|o| format!("{} {}:{}/{}", o.test_id(), o.decision(), o.topic, o.offset))
        .collect();
    assert!(
        repeated.is_empty(),
        "the replay repeated {} outputs of the first run: {repeated:?}",
        repeated.len()
    );
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(TEST, format!("both runs: {summary}"));
    let new_decisions: HashMap<&str, usize> =
        reader.records[first_outputs..]
            .iter()
            .fold(HashMap::new(), |mut counts, o| {
                *counts.entry(o.decision()).or_default() += 1;
                counts
            });
    let replayed: f64 = configs
        .iter()
        .map(|c| scrape_metric(&c.metrics_listen, "idemgate_replayed_records_total"))
        .sum();
    say(
        TEST,
        format!(
            "after the reset: {} outputs ({new_decisions:?}), all of records sent after it; {replayed} records counted replayed; committed {new_ends:?}",
            reader.records.len() - first_outputs
        ),
    );
    assert_eq!(
        replayed,
        first_plan.len() as f64,
        "idemgate_replayed_records_total over both replicas: every first-run record, once"
    );
    assert!(
        new_decisions.get("duplicate").is_some_and(|n| *n > 0),
        "no copy of a first-run event was sent after the reset"
    );
    for gate in [&mut a, &mut b] {
        let status = gate.terminate(Duration::from_secs(20));
        assert!(
            status.success(),
            "[{}] exited with {status} on SIGTERM",
            gate.name
        );
    }
    let unsettled = unsettled_claims(&redis_url, &config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
}

/// 2026-03-01T09:00:00Z, ms: the first record's timestamp.
const FIRST_STAMP: i64 = 1_772_355_600_000;

/// `at` (ms since the epoch) as RFC 3339 in UTC, as `idemgate reset
/// --to-time` takes it.
fn rfc3339(at: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(at) * 1_000_000)
        .expect("a time in range")
        .format(&time::format_description::well_known::Rfc3339)
        .expect("formatting RFC 3339")
}

/// The same instant as `kafka-consumer-groups --to-datetime` takes it:
/// `YYYY-MM-DDThh:mm:ss.sss` with the milliseconds it requires, here
/// written at +01:00 (it accepts `Z` and `±hh:mm`).
fn kafka_datetime(at: i64) -> String {
    let format = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3][offset_hour sign:mandatory]:[offset_minute]"
    );
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(at) * 1_000_000)
        .expect("a time in range")
        .to_offset(time::macros::offset!(+1))
        .format(format)
        .expect("formatting the datetime")
}

/// Kafka's `--to-datetime` without a zone, which Kafka's tool (and
/// idemgate) reads as UTC: the instant written in UTC.
fn kafka_datetime_utc(at: i64) -> String {
    let format = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]"
    );
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(at) * 1_000_000)
        .expect("a time in range")
        .format(format)
        .expect("formatting the datetime")
}

/// The guarantee: for every instant tried (before every record, on one
/// record's timestamp, between two records' timestamps, after every
/// record), `idemgate reset --stream bank --to-time T --dry-run` and
/// `kafka-consumer-groups --reset-offsets --to-datetime T --dry-run` print
/// the same new offset per partition, and it is the first offset whose
/// record is stamped at or after T (the log's end where none is). Neither
/// moves anything: the group's commits stay where they were.
#[test]
fn idemgate_reset_to_a_time_and_kafkas_reset_to_a_datetime_name_the_same_offsets() {
    const TEST: &str = "replay-to-time";
    let partitions = 3;
    let topics = Topics::create(&kafka_brokers(), TEST, partitions, 1);
    let mut bank = Bank::new(TEST, 24);
    // Record n is stamped a second after record n - 1: every partition's
    // records are in timestamp order, as the broker's time index expects.
    let plan: Vec<Planned> = bank
        .phase(90, 0, 3)
        .into_iter()
        .enumerate()
        .map(|(n, record)| record.stamped(FIRST_STAMP + n as i64 * 1_000))
        .collect();
    let landed = Producer::new(&kafka_brokers()).send(&topics.input, &plan, 100, Duration::ZERO);
    let input_ends = ends(&landed, partitions);
    let config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    // The group has read everything (committed at the ends, as Kafka's
    // tool commits them) and has no member.
    let latest = reset_offsets(
        &kafka_brokers(),
        &config.group,
        Some(&topics.input),
        &["--to-latest", "--execute"],
    )
    .expect("kafka-consumer-groups --reset-offsets --to-latest --execute");
    let at_ends: Vec<(String, i32, i64)> = input_ends
        .iter()
        .map(|(p, o)| (topics.input.clone(), *p, *o))
        .collect();
    assert_eq!(reset_rows(&latest), at_ends, "{latest}");

    let instants = [
        ("before every record", FIRST_STAMP - 60_000),
        ("on a record's timestamp", stamp_of(&plan[plan.len() / 3])),
        (
            "between two records",
            stamp_of(&plan[plan.len() * 2 / 3]) - 500,
        ),
        (
            "after every record",
            stamp_of(&plan[plan.len() - 1]) + 3_600_000,
        ),
    ];
    for (what, at) in instants {
        // What the records' timestamps say: per partition the first offset
        // stamped at or after `at`, else the log's end.
        let mut expected: Vec<(String, i32, i64)> = input_ends
            .iter()
            .map(|(p, end)| {
                let first = plan
                    .iter()
                    .filter(|r| landed[&r.id].partition == *p && stamp_of(r) >= at)
                    .map(|r| landed[&r.id].offset)
                    .min()
                    .unwrap_or(*end);
                (topics.input.clone(), *p, first)
            })
            .collect();
        expected.sort();
        let (ours, theirs) = (rfc3339(at), kafka_datetime(at));
        let run = idemgate_reset(&config, &["--to-time", &ours, "--dry-run"]);
        assert!(
            run.ok,
            "idemgate reset --to-time {ours} --dry-run: {}",
            run.stderr
        );
        assert!(
            run.stdout.contains("dry run: nothing was changed"),
            "{}",
            run.stdout
        );
        // Kafka's format, with its zone and without, names the same rows.
        for kafka_form in [theirs.clone(), kafka_datetime_utc(at)] {
            let again = idemgate_reset(&config, &["--to-time", &kafka_form]);
            assert!(
                again.ok,
                "idemgate reset --to-time {kafka_form}: {}",
                again.stderr
            );
            assert_eq!(
                idemgate_reset_rows(&again.stdout),
                idemgate_reset_rows(&run.stdout),
                "{what}: --to-time {kafka_form} and {ours} differ"
            );
        }
        let printed = reset_offsets(
            &kafka_brokers(),
            &config.group,
            Some(&topics.input),
            &["--to-datetime", &theirs, "--dry-run"],
        )
        .unwrap_or_else(|e| panic!("kafka-consumer-groups --to-datetime {theirs}: {e}"));
        let (idemgate_rows, kafka_rows) = (idemgate_reset_rows(&run.stdout), reset_rows(&printed));
        let shown = |rows: &[(String, i32, i64)]| -> Vec<String> {
            rows.iter().map(|(_, p, o)| format!("{p}={o}")).collect()
        };
        say(
            TEST,
            format!(
                "{what}: idemgate --to-time {ours} -> {:?}; kafka --to-datetime {theirs} -> {:?}",
                shown(&idemgate_rows),
                shown(&kafka_rows)
            ),
        );
        assert_eq!(
            idemgate_rows, kafka_rows,
            "{what}: the two tools disagree\nidemgate reset:\n{}\nkafka-consumer-groups:\n{printed}",
            run.stdout
        );
        assert_eq!(
            idemgate_rows, expected,
            "{what}: not the records' first offset at or after {ours}"
        );
    }
    let all: Vec<i32> = (0..partitions).collect();
    let committed = committed_offsets(&kafka_brokers(), &config.group, &topics.input, &all);
    let unmoved: Vec<Option<i64>> = input_ends.iter().map(|(_, o)| Some(*o)).collect();
    assert_eq!(committed, unmoved, "a dry run moved the group's offsets");
}

/// A planned record's stamped timestamp.
fn stamp_of(record: &Planned) -> i64 {
    record.timestamp().expect("stamped")
}
