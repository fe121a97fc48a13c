//! `idemgate check` as an operator runs it before a start: the built binary
//! on a config file, against Apache Kafka and real Redis servers. A good config
//! passes and names every topic with its partitions; an evicting Redis, a
//! missing input topic and a bad config are refused, each naming what is
//! wrong; a Redis that keeps an exact stream's claims nowhere but in memory
//! is a warning.

use std::process::{Command, Output};

use idemgate_testkit::kafka::Topics;
use idemgate_testkit::servers::{RedisServer, ServerOptions};
use idemgate_testkit::{env, kafka_brokers, say, unique};

use super::process::GateConfig;

/// Runs `idemgate check --config <text in a file> [extra]`, with none of
/// the environment's overrides: the file says everything.
fn check(test: &str, toml: &str, extra: &[&str]) -> (Output, String) {
    let path = std::env::temp_dir().join(format!("idemgate-check-{}.toml", unique(test)));
    std::fs::write(&path, toml).expect("writing the config");
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .arg("check")
        .arg("--config")
        .arg(&path)
        .args(extra)
        .env_remove("IDEMGATE_KAFKA_BROKERS")
        .env_remove("IDEMGATE_REDIS_URL")
        .env_remove("IDEMGATE_REDIS_NODES")
        .env("NO_COLOR", "1")
        .output()
        .expect("running idemgate check");
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    say(
        test,
        format!(
            "exit {}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    );
    (out, stdout)
}

/// The report's line that mentions `needle`; panics with the report.
fn line<'a>(report: &'a str, needle: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{report}"))
}

fn failures(report: &str) -> Vec<&str> {
    report.lines().filter(|l| l.starts_with("FAIL")).collect()
}

#[test]
fn a_good_config_passes_and_names_every_topic_with_its_partitions() {
    const TEST: &str = "check-good";
    let brokers = kafka_brokers();
    let bank = Topics::create(&brokers, TEST, 3, 2);
    let telemetry = Topics::create(&brokers, &format!("{TEST}-tel"), 2, 1);
    let mut config = GateConfig::new(TEST, &bank, env("IDEMGATE_TEST_REDISBLOOM_URL"));
    config.more_streams = format!(
        "\n[[streams]]\nname = \"telemetry\"\ninputs = [\"{}\"]\nclean = \"{}\"\naudit = \"{}\"\nprofile = \"payload\"\nmode = \"tiered\"\nttl = {{ explicit = \"12h\" }}\ntier1_ttl = \"2h\"\npeak_rate = 40000\n",
        telemetry.input, telemetry.clean, telemetry.audit
    );
    let (out, report) = check(TEST, &config.toml(), &[]);
    assert!(
        out.status.success(),
        "check refused a good config:\n{report}"
    );
    assert!(failures(&report).is_empty(), "{report}");

    for (topic, partitions) in [
        (&bank.input, 3),
        (&bank.clean, 2),
        (&bank.audit, 2),
        (&telemetry.input, 2),
        (&telemetry.clean, 1),
        (&telemetry.audit, 1),
    ] {
        let found = line(&report, &format!("{topic}: "));
        assert!(found.starts_with("ok"), "{found}");
        let counted = match partitions {
            1 => "1 partition".to_string(),
            n => format!("{n} partitions"),
        };
        assert!(found.ends_with(&format!("{topic}: {counted}")), "{found}");
    }
    assert!(line(&report, &format!("{}: 3 partitions", bank.input)).contains("streams[0].inputs"));
    assert!(line(&report, "maxmemory-policy").ends_with("noeviction"));
    assert!(line(&report, "store.filter").contains("RedisBloom"));
    assert!(line(&report, "metrics.listen").starts_with("ok"));
    // Each stream's TTLs in seconds and as a config writes them, and its
    // memory plan: the tiered stream at its peak rate.
    assert!(report.contains("tier-1 ttl  3600 s (1h)"), "{report}");
    assert!(report.contains("horizon     43200 s (12h)"), "{report}");
    assert!(report.contains("40,000 events/s (peak_rate)"), "{report}");
    assert!(report.contains("288,000,000"), "{report}");
    assert!(report.contains("3.1 GB (1,728,000,000 keys)"), "{report}");
}

/// A PostgreSQL store, as an operator meets it: before the first start
/// the tables are missing, a warning where the role may create them; a
/// role without CREATE is refused with the SQL an administrator runs; once
/// the administrator ran it, that role passes, the tables there and every
/// right the worker needs granted.
#[test]
fn a_postgres_store_is_checked_for_its_version_tables_and_rights() {
    const TEST: &str = "check-pg";
    let topics = Topics::create(&kafka_brokers(), TEST, 1, 1);
    let config = GateConfig::new(TEST, &topics, String::new()).on_postgres();
    let (out, report) = check(TEST, &config.toml(), &[]);
    assert!(out.status.success(), "{report}");
    assert!(failures(&report).is_empty(), "{report}");
    let server = line(&report, "PostgreSQL 15");
    assert!(
        server.starts_with("ok") && server.contains("store.url"),
        "{server}"
    );
    // The test services' server runs with fsync off (a disk it need not
    // survive): a crash could lose answered rounds, unseen.
    let kept = line(&report, "store persistence");
    assert!(
        kept.starts_with("warn") && kept.contains("fsync off"),
        "{kept}"
    );
    let tables = line(&report, "store.url tables");
    assert!(
        tables.starts_with("warn") && tables.contains("created at the first start"),
        "{tables}"
    );

    let mut restricted = config.clone();
    restricted.postgres_url = env("IDEMGATE_TEST_POSTGRES_NOCREATE_URL");
    let (out, report) = check(TEST, &restricted.toml(), &[]);
    assert!(!out.status.success(), "{report}");
    let refused = failures(&report);
    assert_eq!(refused.len(), 1, "{report}");
    assert!(
        refused[0].contains("store.url tables") && refused[0].contains("may not create them"),
        "{report}"
    );
    // The SQL is printed whole, a statement a line: an administrator runs
    // it as it is.
    let sql: String = report
        .lines()
        .filter(|l| l.ends_with(';'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        sql.contains("CREATE TABLE") && sql.contains("GRANT"),
        "{report}"
    );
    idemgate_testkit::postgres::psql(&config.postgres_url, &sql);

    let (out, report) = check(TEST, &restricted.toml(), &[]);
    assert!(out.status.success(), "{report}");
    assert!(
        line(&report, "store.url tables").starts_with("ok"),
        "{report}"
    );
    let rights = line(&report, "store.url rights");
    assert!(
        rights.starts_with("ok") && rights.contains("SELECT, INSERT, UPDATE and DELETE"),
        "{rights}"
    );
    assert!(
        line(&report, "streams.bank claims table").starts_with("ok"),
        "{report}"
    );
}

#[test]
fn a_redis_that_evicts_keys_is_refused_naming_maxmemory_policy() {
    const TEST: &str = "check-lru";
    let topics = Topics::create(&kafka_brokers(), TEST, 1, 1);
    let redis = RedisServer::start(
        TEST,
        ServerOptions {
            args: vec!["--maxmemory-policy".into(), "allkeys-lru".into()],
            ..ServerOptions::default()
        },
    );
    let config = GateConfig::new(TEST, &topics, redis.url());
    let (out, report) = check(TEST, &config.toml(), &[]);
    assert!(
        !out.status.success(),
        "check passed an evicting redis:\n{report}"
    );
    let refused = failures(&report);
    assert_eq!(refused.len(), 1, "{report}");
    assert!(refused[0].contains("store.url"), "{}", refused[0]);
    assert!(
        refused[0].contains("maxmemory-policy is allkeys-lru"),
        "{}",
        refused[0]
    );
    // The topics were fine: the refusal is the store's alone.
    assert!(line(&report, &format!("{}: 1 partition", topics.input)).starts_with("ok"));
}

#[test]
fn a_missing_input_topic_is_refused_and_a_missing_output_is_reported() {
    const TEST: &str = "check-missing";
    let topics = Topics::named(TEST, 1, 1);
    idemgate_testkit::kafka::create_topics(&kafka_brokers(), &[(topics.clean.as_str(), 1)]);
    let config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    let (out, report) = check(TEST, &config.toml(), &[]);
    assert!(!out.status.success(), "{report}");
    let input = line(&report, &topics.input);
    assert!(
        input.starts_with("FAIL")
            && input.contains("streams[0].inputs")
            && input.contains("not on the brokers"),
        "{input}"
    );
    let audit = line(&report, &topics.audit);
    assert!(
        !audit.starts_with("ok") && audit.contains("auto.create.topics.enable"),
        "{audit}"
    );
    assert!(line(&report, &topics.clean).starts_with("ok"));
}

#[test]
fn offline_a_bad_config_is_refused_naming_the_field() {
    const TEST: &str = "check-offline";
    let topics = Topics::named(TEST, 1, 1);
    // Brokers nobody listens on: offline, nothing is contacted.
    let mut config = GateConfig::new(TEST, &topics, "redis://127.0.0.1:9".into());
    config.brokers = "127.0.0.1:9".into();
    config.audit = config.clean.clone();
    let (out, report) = check(TEST, &config.toml(), &["--offline"]);
    assert!(!out.status.success(), "{report}");
    let refused = failures(&report);
    assert_eq!(refused.len(), 1, "{report}");
    assert!(
        refused[0].contains("streams[0].clean:") && refused[0].contains("audit topic"),
        "{}",
        refused[0]
    );

    // The same file, fixed, passes offline though no server answers.
    config.audit = topics.audit.clone();
    let (out, report) = check(TEST, &config.toml(), &["--offline"]);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("(offline: brokers and store not contacted)"),
        "{report}"
    );
    assert!(!report.contains("PING"), "{report}");

    // Without brokers `run` would sit unassigned for ever: refused.
    let no_brokers = config
        .toml()
        .replace("\"bootstrap.servers\" = \"127.0.0.1:9\"\n", "");
    let (out, report) = check(TEST, &no_brokers, &["--offline"]);
    assert!(!out.status.success(), "{report}");
    assert!(
        line(&report, "FAIL").contains("kafka.bootstrap.servers:"),
        "{report}"
    );
}

#[test]
fn an_exact_streams_redis_that_keeps_nothing_or_snapshots_only_is_a_warning() {
    const TEST: &str = "check-persistence";
    let topics = Topics::create(&kafka_brokers(), TEST, 1, 1);
    // The test kit's servers keep nothing on disk (save "", appendonly no).
    let volatile = RedisServer::start(TEST, ServerOptions::default());
    let config = GateConfig::new(TEST, &topics, volatile.url());
    let (out, report) = check(TEST, &config.toml(), &[]);
    assert!(out.status.success(), "a warning, not a refusal:\n{report}");
    let found = line(&report, "store persistence");
    assert!(
        found.starts_with("warn")
            && found.contains("keep nothing on disk")
            && found.contains("bank")
            && found.contains("idemgate rebuild"),
        "{found}"
    );

    // Snapshots only: a crash brings back the last one, which idemgate
    // does not tell from a live store (design §12).
    let rdb = RedisServer::start(
        TEST,
        ServerOptions {
            args: vec!["--save".into(), "3600 1".into()],
            ..ServerOptions::default()
        },
    );
    let config = GateConfig::new(TEST, &topics, rdb.url());
    let (out, report) = check(TEST, &config.toml(), &[]);
    assert!(out.status.success(), "a warning, not a refusal:\n{report}");
    let found = line(&report, "store persistence");
    assert!(
        found.starts_with("warn")
            && found.contains("RDB snapshots only")
            && found.contains("progress marks"),
        "{found}"
    );

    let aof = RedisServer::start(
        TEST,
        ServerOptions {
            args: vec![
                "--appendonly".into(),
                "yes".into(),
                "--appendfsync".into(),
                "always".into(),
            ],
            ..ServerOptions::default()
        },
    );
    let config = GateConfig::new(TEST, &topics, aof.url());
    let (_, report) = check(TEST, &config.toml(), &[]);
    let found = line(&report, "store persistence");
    assert!(
        found.starts_with("ok") && found.contains("appendfsync always"),
        "{report}"
    );

    // A managed service that refuses CONFIG cannot say.
    let managed = RedisServer::start(
        TEST,
        ServerOptions {
            args: vec!["--rename-command".into(), "CONFIG".into(), "".into()],
            ..ServerOptions::default()
        },
    );
    let config = GateConfig::new(TEST, &topics, managed.url());
    let (_, report) = check(TEST, &config.toml(), &[]);
    let found = line(&report, "store persistence");
    assert!(
        found.starts_with("warn") && found.contains("could not tell"),
        "{found}"
    );
}

/// Exactly once settles a stopped replica's claims from its commit's
/// metadata (docs/design.md §7): `check` commits a probe transaction on a
/// group of its own, reads the metadata back and deletes the group. Apache
/// Kafka keeps it; an at-least-once config is not probed.
#[test]
fn an_exactly_once_config_probes_that_the_brokers_keep_transactional_offset_metadata() {
    const TEST: &str = "check-txn-metadata";
    let topics = Topics::create(&kafka_brokers(), TEST, 2, 1);
    let config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    let (_, report) = check(TEST, &config.toml(), &[]);
    assert!(
        !report.contains("probe transaction"),
        "an at-least-once config was probed:\n{report}"
    );

    let config = config.exactly_once(&unique(TEST));
    let (out, report) = check(TEST, &config.toml(), &[]);
    assert!(out.status.success(), "{report}");
    let found = line(&report, "probe transaction");
    assert!(
        found.starts_with("ok")
            && found.contains("read back as written")
            && found.contains("deleted"),
        "{found}"
    );
    let group = found
        .split("group ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .expect("the probe names its group");
    let groups = idemgate_testkit::tools::consumer_groups(&kafka_brokers(), &["--list"])
        .expect("kafka-consumer-groups --list");
    assert!(
        !groups.lines().any(|l| l.trim() == group),
        "the probe group {group} was left behind:\n{groups}"
    );
}
