//! `idemgate reset` beside Apache Kafka's `kafka-consumer-groups
//! --reset-offsets` on the same group and topic (docs/design.md §4.9):
//!
//! - for every scenario both tools have (`--to-earliest`, `--to-latest`,
//!   `--shift-by` back, forward and past either end of a log whose start
//!   was moved by `kafka-delete-records`, `--by-duration` before, between
//!   and after the records), the two `--dry-run --export` outputs name the
//!   same offset for every partition, the one the logs say, in the same
//!   CSV lines;
//! - a CSV exported by either tool is read by the other's `--from-file`,
//!   for a dry run and for the reset itself, and Kafka's export of two
//!   groups (a group column) gives idemgate its group's rows;
//! - while the group has a member, idemgate's dry run plans (Kafka's tool
//!   refuses even its dry run), and both refuse the reset itself; once the
//!   group is stopped, `--shift-by -N --re-emit` records its replay range
//!   in the store as any reset does, and the restarted gateway re-emits
//!   exactly the clean outputs of the last N records of each partition.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idemgate::decision::REPLAY;
use idemgate_testkit::kafka::{committed_offsets, Landed, Producer, Topics};
use idemgate_testkit::tools::{
    consumer_groups, csv_lines, csv_rows, delete_records, reset_offsets,
};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, kafka_brokers, say, unique, BOUND};

use super::group::{
    ends, idemgate_reset, idemgate_reset_rows, process, wait_committed, CommandRun, Processed,
};
use super::process::{Gate, GateConfig};

type Rows = Vec<(String, i32, i64)>;

/// One reset asked of both tools: idemgate's flags, Kafka's, and the rows
/// the logs say for the time it is asked at.
type Scenario<'a> = (
    &'a str,
    Vec<&'a str>,
    Vec<&'a str>,
    Box<dyn Fn(i64) -> Rows + 'a>,
);

/// Minutes between two records' timestamps: `--by-duration`s fall half way
/// between two records, so the seconds between the two tools' runs (and
/// since the records were stamped) never change the answer.
const SPACING_MIN: i64 = 10;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64
}

/// `kafka-consumer-groups --group <group> --reset-offsets <args>`, which
/// must succeed: its stdout.
fn kafka_reset(config: &GateConfig, args: &[&str]) -> String {
    reset_offsets(&kafka_brokers(), &config.group, None, args)
        .unwrap_or_else(|e| panic!("kafka-consumer-groups --reset-offsets {args:?}: {e}"))
}

/// `idemgate reset <args>`, which must succeed.
fn idemgate_ok(config: &GateConfig, args: &[&str]) -> CommandRun {
    let run = idemgate_reset(config, args);
    assert!(run.ok, "idemgate reset {args:?} failed: {}", run.stderr);
    run
}

/// An `--export` printed Kafka's CSV and nothing else on stdout.
fn exported(run: &CommandRun) -> Rows {
    let rows = csv_rows(&run.stdout);
    let lines = run.stdout.lines().filter(|l| !l.is_empty()).count();
    assert_eq!(
        rows.len(),
        lines,
        "stdout is not only topic,partition,offset lines:\n{}",
        run.stdout
    );
    rows
}

fn write_plan(test: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("{}.csv", unique(test)));
    std::fs::write(&path, text).expect("writing the plan");
    path.to_string_lossy().into_owned()
}

/// The guarantee: for each scenario, `idemgate reset --dry-run --export`
/// and `kafka-consumer-groups --reset-offsets --dry-run --export` print the
/// same rows, and they are what the logs and the commits say (computed
/// here from where each record landed and how it was stamped); each
/// tool's export read by the other's `--from-file` gives the same rows
/// again, and executes to exactly those commits.
#[test]
fn every_scenario_plans_as_kafkas_tool_and_each_tool_reads_the_others_csv() {
    const TEST: &str = "reset-kafka-plans";
    let partitions = 3;
    let topics = Topics::create(&kafka_brokers(), TEST, partitions, 1);
    let mut bank = Bank::new(TEST, 24);
    // Record n is stamped n spacings after the first, the last a spacing
    // before now, and goes to partition n mod 3: every partition's records
    // are in timestamp order, and each holds a third of them. (By key, the
    // 24 accounts of a random seed once left a partition 10 records of
    // 132, fewer than the scenarios below need.) The plans depend on
    // offsets and timestamps alone, so nothing needs an event's copies on
    // one partition.
    let plan = bank.phase(90, 0, 3);
    let count = plan.len() as i64;
    let first_stamp = now_ms() - count * SPACING_MIN * 60_000;
    let plan: Vec<Planned> = plan
        .into_iter()
        .enumerate()
        .map(|(n, mut record)| {
            record.partition = Some(n as i32 % partitions);
            record.stamped(first_stamp + n as i64 * SPACING_MIN * 60_000)
        })
        .collect();
    // Half way between the records a quarter of the way in and the next:
    // before every partition's middle, where the group's commits are.
    let quarter_ago = (count - count / 4) * SPACING_MIN - SPACING_MIN / 2;
    let between = format!("PT{}H{}M", quarter_ago / 60, quarter_ago % 60);
    let landed = Producer::new(&kafka_brokers()).send(&topics.input, &plan, 100, Duration::ZERO);
    let input_ends = ends(&landed, partitions);
    assert!(
        input_ends.iter().all(|(_, end)| *end >= 12),
        "too few records on a partition: {input_ends:?}"
    );
    // Partition 0's log starts at 5: the ends of a shift are not 0.
    delete_records(&kafka_brokers(), &topics.input, 0, 5).expect("kafka-delete-records");
    let low = |p: i32| if p == 0 { 5 } else { 0 };
    let config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    let middle: Vec<(i32, i64)> = input_ends
        .iter()
        .map(|(p, end)| (*p, low(*p) + (end - low(*p)) / 2))
        .collect();
    let offsets: Vec<String> = middle
        .iter()
        .map(|(p, o)| format!("{}:{p}={o}", topics.input))
        .collect();
    // The group's commits, per partition (Kafka's --to-offset names one
    // offset for all): put there by idemgate, the records before them
    // counted as abandoned.
    idemgate_ok(
        &config,
        &[
            "--to-offset",
            &offsets.join(","),
            "--skipped",
            "abandoned",
            "--execute",
        ],
    );
    let all: Vec<i32> = (0..partitions).collect();
    let at_middle: Vec<Option<i64>> = middle.iter().map(|(_, o)| Some(*o)).collect();
    let committed = || committed_offsets(&kafka_brokers(), &config.group, &topics.input, &all);
    assert_eq!(committed(), at_middle, "the group's commits");

    let rows = |f: &dyn Fn(i32, i64, i64) -> i64| -> Rows {
        input_ends
            .iter()
            .zip(&middle)
            .map(|((p, end), (_, mid))| (topics.input.clone(), *p, f(*p, *end, *mid)))
            .collect()
    };
    let stamp = |r: &Planned| r.timestamp().expect("stamped");
    // What the records' timestamps say for `ago` before `now`: per
    // partition the first offset stamped at or after, else the log's end.
    let at_duration = |ago_ms: i64, now: i64| -> Rows {
        rows(&|p, end, _| {
            plan.iter()
                .filter(|r| {
                    let at: &Landed = &landed[&r.id];
                    at.partition == p && at.offset >= low(p) && stamp(r) >= now - ago_ms
                })
                .map(|r| landed[&r.id].offset)
                .min()
                .unwrap_or(end)
        })
    };
    let minute = 60_000;
    let scenarios: Vec<Scenario> = vec![
        (
            "by-duration before every record",
            vec!["--by-duration", "P1D"],
            vec!["--by-duration", "P1D"],
            Box::new(|now| at_duration(24 * 60 * minute, now)),
        ),
        (
            "by-duration between two records",
            vec!["--by-duration", &between],
            vec!["--by-duration", &between],
            Box::new(|now| at_duration(quarter_ago * minute, now)),
        ),
        (
            "by-duration after every record",
            vec!["--by-duration", "PT5M", "--skipped", "abandoned"],
            vec!["--by-duration", "PT5M"],
            Box::new(|now| at_duration(5 * minute, now)),
        ),
        (
            "to-earliest",
            vec!["--to-earliest"],
            vec!["--to-earliest"],
            Box::new(|_| rows(&|p, _, _| low(p))),
        ),
        (
            "to-latest",
            vec!["--to-latest", "--skipped", "abandoned"],
            vec!["--to-latest"],
            Box::new(|_| rows(&|_, end, _| end)),
        ),
        (
            "shift-by back",
            vec!["--shift-by", "-2"],
            vec!["--shift-by", "-2"],
            Box::new(|_| rows(&|_, _, mid| mid - 2)),
        ),
        (
            "shift-by forward",
            vec!["--shift-by", "3", "--skipped", "delivered"],
            vec!["--shift-by", "3"],
            Box::new(|_| rows(&|_, _, mid| mid + 3)),
        ),
        (
            "shift-by past the log start",
            vec!["--shift-by", "-1000"],
            vec!["--shift-by", "-1000"],
            Box::new(|_| rows(&|p, _, _| low(p))),
        ),
        (
            "shift-by past the log end",
            vec!["--shift-by", "1000", "--skipped", "abandoned"],
            vec!["--shift-by", "1000"],
            Box::new(|_| rows(&|_, end, _| end)),
        ),
    ];
    for (what, ours, theirs, expected) in &scenarios {
        let now = now_ms();
        let mut args = ours.clone();
        args.extend(["--dry-run", "--export"]);
        let run = idemgate_ok(&config, &args);
        let idemgate_rows = exported(&run);
        let mut args = vec!["--topic", topics.input.as_str()];
        args.extend(theirs);
        args.extend(["--dry-run", "--export"]);
        let printed = kafka_reset(&config, &args);
        let kafka_rows = csv_rows(&printed);
        // The very lines, quotes and all.
        assert_eq!(
            csv_lines(&run.stdout),
            csv_lines(&printed),
            "{what}: the CSV lines differ"
        );
        say(
            TEST,
            format!("{what}: idemgate {idemgate_rows:?}; kafka {kafka_rows:?}"),
        );
        assert_eq!(
            idemgate_rows, kafka_rows,
            "{what}: the two tools disagree\nkafka-consumer-groups:\n{printed}"
        );
        assert_eq!(
            idemgate_rows,
            expected(now),
            "{what}: not what the logs say"
        );
    }
    assert_eq!(
        committed(),
        at_middle,
        "a dry run moved the group's offsets"
    );

    // Kafka's export, read by idemgate; idemgate's, read by Kafka's tool.
    let kafka_csv = kafka_reset(
        &config,
        &[
            "--topic",
            &topics.input,
            "--shift-by",
            "-3",
            "--dry-run",
            "--export",
        ],
    );
    let kafka_file = write_plan(TEST, &kafka_csv);
    let back_three = rows(&|_, _, mid| mid - 3);
    assert_eq!(csv_rows(&kafka_csv), back_three, "{kafka_csv}");
    let run = idemgate_ok(
        &config,
        &["--from-file", &kafka_file, "--dry-run", "--export"],
    );
    assert_eq!(
        exported(&run),
        back_three,
        "idemgate --from-file of Kafka's export"
    );
    assert!(run.stderr.contains("replay 3"), "{}", run.stderr);

    let ours = idemgate_ok(
        &config,
        &["--by-duration", &between, "--dry-run", "--export"],
    );
    let idemgate_file = write_plan(TEST, &ours.stdout);
    let printed = kafka_reset(
        &config,
        &["--from-file", &idemgate_file, "--dry-run", "--export"],
    );
    assert_eq!(
        csv_rows(&printed),
        exported(&ours),
        "kafka --from-file of idemgate's export:\n{printed}"
    );
    assert_eq!(
        committed(),
        at_middle,
        "a dry run moved the group's offsets"
    );

    // Kafka's export of two groups has a group column; idemgate takes its
    // group's rows and leaves the other's alone, saying so.
    let other = unique("reset-kafka-other-group");
    let two = consumer_groups(
        &kafka_brokers(),
        &[
            "--group",
            &config.group,
            "--group",
            &other,
            "--topic",
            &topics.input,
            "--reset-offsets",
            "--to-earliest",
            "--dry-run",
            "--export",
        ],
    )
    .expect("kafka-consumer-groups --export of two groups");
    let two_file = write_plan(TEST, &two);
    let run = idemgate_ok(
        &config,
        &["--from-file", &two_file, "--dry-run", "--export"],
    );
    assert_eq!(
        exported(&run),
        rows(&|p, _, _| low(p)),
        "the group's rows of:\n{two}"
    );
    assert!(
        run.stderr.contains(&format!("left alone ({other})")),
        "{}",
        run.stderr
    );
    let _ = std::fs::remove_file(two_file);

    // And the resets themselves, from the other tool's file.
    let run = idemgate_ok(&config, &["--from-file", &kafka_file, "--execute"]);
    assert!(run.stdout.contains("store updated"), "{}", run.stdout);
    let want: Vec<Option<i64>> = back_three.iter().map(|(_, _, o)| Some(*o)).collect();
    assert_eq!(
        committed(),
        want,
        "idemgate reset --from-file <Kafka's export>"
    );
    kafka_reset(&config, &["--from-file", &idemgate_file, "--execute"]);
    let want: Vec<Option<i64>> = exported(&ours).iter().map(|(_, _, o)| Some(*o)).collect();
    assert_eq!(
        committed(),
        want,
        "kafka --from-file <idemgate's export> --execute"
    );
    for file in [kafka_file, idemgate_file] {
        let _ = std::fs::remove_file(file);
    }
}

/// The guarantee: a dry run while the group has a member prints the plan
/// from the commits so far and moves nothing; the reset itself is refused
/// by both tools while the member runs. After the group stopped, a
/// `--shift-by -N --re-emit` records the replay range as every reset
/// does: the restarted gateway produces to clean again exactly the novel
/// outputs of the last N records of each partition, each marked
/// `idemgate-replay: true`, and nothing else (no audit, no other record).
#[test]
fn a_dry_run_plans_while_the_group_has_a_member_and_a_shift_back_re_emits_its_range() {
    const TEST: &str = "reset-kafka-members";
    const BACK: i64 = 6;
    let partitions = 3;
    let topics = Topics::create(&kafka_brokers(), TEST, partitions, 2);
    let mut bank = Bank::new(TEST, 24);
    bank.conflict_rate = 0.03;
    let plan = bank.phase(150, 0, 8);
    let config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    let mut first = Gate::start(&format!("{TEST}-1"), &config);
    first.wait_assigned(Duration::from_secs(30));
    let Processed {
        mut reader,
        landed,
        ends,
    } = process(TEST, &config, &topics, &plan, &mut [&mut first]);
    let all: Vec<i32> = (0..partitions).collect();
    let committed = || committed_offsets(&kafka_brokers(), &config.group, &topics.input, &all);
    let at_ends: Vec<Option<i64>> = ends.iter().map(|(_, o)| Some(*o)).collect();
    let back: Vec<(String, i32, i64)> = ends
        .iter()
        .map(|(p, end)| (topics.input.clone(), *p, (end - BACK).max(0)))
        .collect();
    let shift = format!("-{BACK}");

    // While the member runs: idemgate's dry run plans, Kafka's refuses.
    let run = idemgate_ok(&config, &["--shift-by", &shift, "--dry-run"]);
    assert!(run.stdout.contains("1 active member"), "{}", run.stdout);
    assert_eq!(idemgate_reset_rows(&run.stdout), back, "{}", run.stdout);
    let theirs = reset_offsets(
        &kafka_brokers(),
        &config.group,
        Some(&topics.input),
        &["--shift-by", &shift, "--dry-run"],
    )
    .unwrap_or_else(|e| e.to_string());
    assert!(theirs.contains("inactive"), "Kafka's dry run: {theirs}");
    // The resets themselves: both refused.
    let refused = idemgate_reset(&config, &["--shift-by", &shift, "--re-emit", "--execute"]);
    assert!(!refused.ok, "a reset while the group has a member");
    assert!(
        refused.stderr.contains("active member"),
        "{}",
        refused.stderr
    );
    let theirs = reset_offsets(
        &kafka_brokers(),
        &config.group,
        Some(&topics.input),
        &["--shift-by", &shift, "--execute"],
    )
    .unwrap_or_else(|e| e.to_string());
    assert!(theirs.contains("inactive"), "Kafka's reset: {theirs}");
    assert_eq!(committed(), at_ends, "a refused reset moved the offsets");
    let status = first.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");

    // Stopped: the shift back with re-emission.
    let run = idemgate_ok(&config, &["--shift-by", &shift, "--re-emit", "--execute"]);
    assert!(run.stdout.contains("go to clean again"), "{}", run.stdout);
    let want: Vec<Option<i64>> = back.iter().map(|(_, _, o)| Some(*o)).collect();
    assert_eq!(committed(), want, "the shift's commit");
    let from: HashMap<i32, i64> = back.iter().map(|(_, p, o)| (*p, *o)).collect();
    let in_range = |id: &str| {
        landed
            .get(id)
            .is_some_and(|at| at.offset >= from[&at.partition])
    };
    let expected: HashSet<String> = reader
        .records
        .iter()
        .filter(|o| o.topic == topics.clean && in_range(o.test_id()))
        .map(|o| o.test_id().to_string())
        .collect();
    assert!(!expected.is_empty(), "no novel record in the shifted range");
    let before = reader.records.len();
    let mut second = Gate::start(&format!("{TEST}-2"), &config);
    second.wait_assigned(Duration::from_secs(30));
    wait_committed(&config, &topics, &ends, &mut [&mut second]);
    reader.read_until(
        BOUND,
        |r| r.records.len() >= before + expected.len(),
        || second.assert_alive(),
    );
    reader.read_for(Duration::from_secs(5));
    let again = &reader.records[before..];
    let wrong: Vec<String> = again
        .iter()
        .filter(|o| {
            o.topic != topics.clean
                || o.header(REPLAY) != Some("true")
                || !expected.contains(o.test_id())
        })
        .map(|o| format!("{} {}:{}/{}", o.test_id(), o.decision(), o.topic, o.offset))
        .collect();
    assert!(
        wrong.is_empty(),
        "outputs other than the marked re-emissions: {wrong:?}"
    );
    let ids: HashSet<String> = again.iter().map(|o| o.test_id().to_string()).collect();
    assert_eq!(again.len(), ids.len(), "a record re-emitted twice");
    assert_eq!(ids, expected, "the re-emitted records");
    say(
        TEST,
        format!(
            "shift by -{BACK} from {ends:?}: re-emitted {} novel records, marked",
            again.len()
        ),
    );
    let status = second.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
}
