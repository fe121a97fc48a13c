//! Apache Kafka's own command-line tools, run as a user runs them:
//! `kafka-consumer-groups`, `kafka-transactions` and `kafka-storage` are
//! classes in the jars `scripts/test-services.sh` cached
//! (`IDEMGATE_TEST_KAFKA_LIBS`), started with `java -cp`. Also the settings
//! of the test brokers, shared with that script (`scripts/kafka/`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

const SERVER_PROPERTIES: &str = include_str!("../../scripts/kafka/server.properties");

/// The broker's log4j2 settings (INFO to its log file).
pub const BROKER_LOG4J: &str = include_str!("../../scripts/kafka/log4j2.properties");

const TOOLS_LOG4J: &str = include_str!("../../scripts/kafka/tools-log4j2.properties");

/// `kafka-consumer-groups`.
pub const CONSUMER_GROUPS: &str = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";

/// `kafka-transactions`.
pub const TRANSACTIONS: &str = "org.apache.kafka.tools.TransactionsCommand";

/// The folder of Kafka's jars, from the environment.
pub fn libs() -> PathBuf {
    PathBuf::from(crate::env("IDEMGATE_TEST_KAFKA_LIBS"))
}

/// `server.properties` for a broker on `port` with its controller on
/// `controller`, its log in `log_dir`.
pub fn server_properties(log_dir: &Path, port: u16, controller: u16) -> String {
    SERVER_PROPERTIES
        .replace("@PORT@", &port.to_string())
        .replace("@CONTROLLER_PORT@", &controller.to_string())
        .replace("@LOG_DIR@", &log_dir.to_string_lossy())
}

/// Runs one of Kafka's tool classes from `libs` and returns what it printed
/// on stdout; fails with its stderr when it exits non-zero.
pub fn run(libs: &Path, class: &str, args: &[&str]) -> Result<String> {
    let log4j = std::env::temp_dir().join("idemgate-kafka-tools-log4j2.properties");
    if !log4j.exists() {
        std::fs::write(&log4j, TOOLS_LOG4J)?;
    }
    let output = Command::new("java")
        .arg("-Xmx256m")
        .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
        .arg("-cp")
        .arg(format!("{}/*", libs.display()))
        .arg(class)
        .args(args)
        .output()
        .with_context(|| format!("running java {class}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        bail!(
            "{class} {} exited with {}:\n{stdout}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(stdout)
}

/// `kafka-consumer-groups --bootstrap-server <brokers> <args>`.
pub fn consumer_groups(brokers: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["--bootstrap-server", brokers];
    all.extend_from_slice(args);
    run(&libs(), CONSUMER_GROUPS, &all)
}

/// Kafka's own reset: `kafka-consumer-groups --group <group> [--topic
/// <topic>] --reset-offsets <args>` (`--dry-run` or `--execute`, the
/// scenario, `--export`); its stdout, or its failure.
pub fn reset_offsets(
    brokers: &str,
    group: &str,
    topic: Option<&str>,
    args: &[&str],
) -> Result<String> {
    let mut all = vec!["--group", group];
    if let Some(topic) = topic {
        all.extend(["--topic", topic]);
    }
    all.push("--reset-offsets");
    all.extend_from_slice(args);
    consumer_groups(brokers, &all)
}

/// `kafka-transactions --bootstrap-server <brokers> <args>`.
pub fn transactions(brokers: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["--bootstrap-server", brokers];
    all.extend_from_slice(args);
    run(&libs(), TRANSACTIONS, &all)
}

/// The rows `kafka-consumer-groups --reset-offsets` prints (dry run or
/// not), as (topic, partition, new offset), sorted. Its table is
/// `GROUP TOPIC PARTITION NEW-OFFSET`.
pub fn reset_rows(printed: &str) -> Vec<(String, i32, i64)> {
    let mut rows: Vec<(String, i32, i64)> = printed
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            match cells.as_slice() {
                [_group, topic, partition, offset] => Some((
                    topic.to_string(),
                    partition.parse().ok()?,
                    offset.parse().ok()?,
                )),
                _ => None,
            }
        })
        .collect();
    rows.sort();
    rows
}

/// `kafka-delete-records`.
pub const DELETE_RECORDS: &str = "org.apache.kafka.tools.DeleteRecordsCommand";

/// `kafka-delete-records` of every record of `topic`'s `partition` below
/// `before`: the partition's log start moves up to `before`.
pub fn delete_records(brokers: &str, topic: &str, partition: i32, before: i64) -> Result<String> {
    let file = std::env::temp_dir().join(format!("{}.json", crate::unique("delete-records")));
    let plan = serde_json::json!({
        "version": 1,
        "partitions": [{"topic": topic, "partition": partition, "offset": before}],
    });
    std::fs::write(&file, plan.to_string())?;
    let path = file.to_string_lossy().into_owned();
    let printed = run(
        &libs(),
        DELETE_RECORDS,
        &["--bootstrap-server", brokers, "--offset-json-file", &path],
    );
    let _ = std::fs::remove_file(&file);
    printed
}

/// The lines of Kafka's reset CSV (`--reset-offsets --export`, `idemgate
/// reset --export`) in what a tool printed, verbatim and sorted: those of
/// `topic,partition,offset`, the topic maybe in quotes; others (Kafka's
/// warnings share its stdout) are left out.
pub fn csv_lines(printed: &str) -> Vec<String> {
    let mut lines: Vec<String> = printed
        .lines()
        .filter(|line| csv_row(line).is_some())
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// Those lines as (topic, partition, offset), sorted.
pub fn csv_rows(printed: &str) -> Vec<(String, i32, i64)> {
    let mut rows: Vec<(String, i32, i64)> = printed.lines().filter_map(csv_row).collect();
    rows.sort();
    rows
}

fn csv_row(line: &str) -> Option<(String, i32, i64)> {
    let cells: Vec<&str> = line.split(',').collect();
    match cells.as_slice() {
        [topic, partition, offset] => {
            let topic = topic
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(topic);
            (!topic.is_empty()).then_some(())?;
            Some((
                topic.to_string(),
                partition.parse().ok()?,
                offset.parse().ok()?,
            ))
        }
        _ => None,
    }
}
