//! `[kafka.consumer]` and `[kafka.producer]` over `[kafka]`: which client
//! gets what, and every refusal `[kafka]` meets met in the overrides too,
//! naming the table.

use super::tests::{brokers, STREAM};
use super::*;
use crate::config::client_configs;

fn parse(tables: &str) -> Result<Config, ConfigError> {
    Config::parse_with_vars(&format!("{tables}\n{STREAM}"), brokers)
}

fn refused(tables: &str) -> String {
    match parse(tables) {
        Ok(_) => panic!("accepted:\n{tables}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_clients_own_table_wins_over_kafka_for_that_client_only() {
    let config = parse(
        r#"
[kafka]
"client.id" = "gate"
"fetch.wait.max.ms" = 200
"linger.ms" = 10
"socket.timeout.ms" = 30000
[kafka.consumer]
"client.id" = "gate-in"
"fetch.wait.max.ms" = 50
[kafka.producer]
"client.id" = "gate-out"
"linger.ms" = 20
"compression.type" = "lz4"
"#,
    )
    .unwrap();
    let (consumer, producer) = client_configs(&config);
    assert_eq!(consumer.get("client.id"), Some("gate-in"));
    assert_eq!(producer.get("client.id"), Some("gate-out"));
    assert_eq!(consumer.get("fetch.wait.max.ms"), Some("50"));
    assert_eq!(producer.get("fetch.wait.max.ms"), None, "consumer-only");
    assert_eq!(producer.get("linger.ms"), Some("20"));
    assert_eq!(consumer.get("linger.ms"), None, "producer-only");
    assert_eq!(producer.get("compression.type"), Some("lz4"));
    assert_eq!(consumer.get("compression.type"), None);
    // [kafka] still reaches both, and idemgate's defaults stay under it.
    assert_eq!(consumer.get("socket.timeout.ms"), Some("30000"));
    assert_eq!(producer.get("socket.timeout.ms"), Some("30000"));
    assert_eq!(producer.get("acks"), Some("all"));
    assert_eq!(consumer.get("auto.offset.reset"), Some("earliest"));
    assert_eq!(consumer.get("enable.auto.commit"), Some("false"));
}

#[test]
fn refusals_reach_the_overrides_and_name_their_table() {
    let eos = "guarantee = \"exactly-once\"\n";
    for (tables, field) in [
        (
            "[kafka.producer]\n\"transactional.id\" = \"gate-0\"".to_string(),
            "kafka.producer.transactional.id",
        ),
        (
            format!("{eos}[kafka.producer]\n\"enable.idempotence\" = false"),
            "kafka.producer.enable.idempotence",
        ),
        (
            format!("{eos}[kafka.producer]\n\"transactional.id\" = \" \""),
            "kafka.producer.transactional.id",
        ),
        (
            format!("{eos}[kafka.consumer]\n\"isolation.level\" = \"read_uncommitted\""),
            "kafka.consumer.isolation.level",
        ),
        (
            "[kafka]\n\"group.protocol\" = \"consumer\"\n[kafka.consumer]\n\"session.timeout.ms\" = 6000"
                .to_string(),
            "kafka.consumer.session.timeout.ms",
        ),
        (
            "[kafka.consumer]\n\"group.protocol\" = \"consumer\"\n\"partition.assignment.strategy\" = \"range\""
                .to_string(),
            "kafka.consumer.partition.assignment.strategy",
        ),
        (
            "[kafka.consumer]\n\"group.protocol\" = \"eager\"".to_string(),
            "kafka.consumer.group.protocol",
        ),
        (
            "[kafka.consumer]\n\"group.remote.assignor\" = \"range\"".to_string(),
            "kafka.consumer.group.remote.assignor",
        ),
        (
            "[kafka.producer]\n\"message.max.bytes\" = \"lots\"".to_string(),
            "kafka.producer.message.max.bytes",
        ),
        (
            "[kafka.consumer]\n\"enable.auto.commit\" = true".to_string(),
            "kafka.consumer.enable.auto.commit",
        ),
        (
            "[kafka]\n\"enable.auto.offset.store\" = true".to_string(),
            "kafka.enable.auto.offset.store",
        ),
    ] {
        let error = refused(&tables);
        assert!(error.starts_with(&format!("{field}: ")), "{tables}\n{error}");
    }
}

#[test]
fn an_override_settles_what_kafka_set_for_its_client() {
    // The producer's own table puts back what exactly once needs.
    let config = parse(
        "guarantee = \"exactly-once\"\n[kafka]\n\"enable.idempotence\" = false\n[kafka.producer]\n\"enable.idempotence\" = true",
    )
    .unwrap();
    let (_, producer) = client_configs(&config);
    assert_eq!(producer.get("enable.idempotence"), Some("true"));
    // A transactional id of the producer's own is the one it uses.
    let config =
        parse("guarantee = \"exactly-once\"\n[kafka.producer]\n\"transactional.id\" = \"gate-7\"")
            .unwrap();
    assert_eq!(
        client_configs(&config).1.get("transactional.id"),
        Some("gate-7")
    );
    // The value idemgate fixes may be written, as long as it is that value.
    assert!(parse("[kafka.consumer]\n\"enable.auto.commit\" = false").is_ok());
}

#[test]
fn the_producers_message_limit_bounds_the_record_limit() {
    let raised = Config::parse_with_vars(
        &format!("[kafka.producer]\n\"message.max.bytes\" = 4194304\n{STREAM}max_record_bytes = 1048576\n"),
        brokers,
    )
    .unwrap();
    assert_eq!(raised.sendable_bytes(), 4_194_304);
    let consumer_only = format!(
        "[kafka.consumer]\n\"fetch.max.bytes\" = 4194304\n{STREAM}max_record_bytes = 1048576\n"
    );
    let error = Config::parse_with_vars(&consumer_only, brokers)
        .unwrap_err()
        .to_string();
    assert!(error.starts_with("streams[0].max_record_bytes:"), "{error}");
}

#[test]
fn brokers_and_the_other_clients_properties_are_refused_in_an_override() {
    for (tables, field, words) in [
        (
            "[kafka.consumer]\n\"bootstrap.servers\" = \"b:9092\"",
            "kafka.consumer.bootstrap.servers",
            "one cluster",
        ),
        (
            "[kafka.producer]\n\"metadata.broker.list\" = \"b:9092\"",
            "kafka.producer.metadata.broker.list",
            "one cluster",
        ),
        (
            "[kafka.consumer]\n\"linger.ms\" = 5",
            "kafka.consumer.linger.ms",
            "[kafka.producer]",
        ),
        (
            "[kafka.producer]\n\"group.id\" = \"g\"",
            "kafka.producer.group.id",
            "[kafka.consumer]",
        ),
    ] {
        let error = refused(tables);
        assert!(error.starts_with(&format!("{field}: ")), "{error}");
        assert!(error.contains(words), "{error}");
    }
}

#[test]
fn a_bad_value_in_an_override_or_an_unknown_table_is_refused_naming_its_path() {
    let error = refused("[kafka.consumer]\n\"fetch.wait.max.ms\" = [1]");
    assert!(
        error.starts_with("kafka.consumer.fetch.wait.max.ms:"),
        "{error}"
    );
    let error = refused("[kafka.admin]\n\"request.timeout.ms\" = 1");
    assert!(error.starts_with("kafka.admin:"), "{error}");
}

#[test]
fn secrets_in_overrides_are_hidden_from_debug_output() {
    let config = parse("[kafka.producer]\n\"sasl.password\" = \"hunter2\"\n[kafka.consumer]\n\"sasl.password\" = \"hunter3\"").unwrap();
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("hunter2") && !shown.contains("hunter3"),
        "{shown}"
    );
}
