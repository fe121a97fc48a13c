//! `[batch] handover_drain` and `[metrics] output_stall_after`: their
//! defaults and their bounds.

use std::time::Duration;

use super::tests::{brokers, STREAM};
use super::Config;

fn parse(batch: &str) -> Result<Config, super::ConfigError> {
    Config::parse_with_vars(&format!("[batch]\n{batch}\n{STREAM}"), brokers)
}

#[test]
fn the_handover_drain_is_ten_seconds_unless_set() {
    let config = parse("").expect("config");
    assert_eq!(config.batch.handover_drain, Duration::from_secs(10));
    let config = parse("handover_drain = \"1500ms\"").expect("config");
    assert_eq!(config.batch.handover_drain, Duration::from_millis(1500));
}

#[test]
fn a_handover_drain_past_thirty_seconds_is_refused_naming_the_field() {
    assert!(parse("handover_drain = \"30s\"").is_ok());
    let error = parse("handover_drain = \"31s\"")
        .expect_err("31s accepted")
        .to_string();
    assert!(error.starts_with("batch.handover_drain:"), "{error}");
    assert!(error.contains("at most 30s"), "{error}");
}

fn with_metrics(top: &str, metrics: &str) -> Result<Config, super::ConfigError> {
    Config::parse_with_vars(&format!("{top}\n[metrics]\n{metrics}\n{STREAM}"), brokers)
}

#[test]
fn the_output_stall_bound_outlasts_the_transaction_timeout_and_the_brokers_abort_check() {
    let config = with_metrics("", "").expect("config");
    assert_eq!(config.output_stall_after, Duration::from_secs(90));
    let config = with_metrics(
        "guarantee = \"exactly-once\"\n[kafka]\n\"transaction.timeout.ms\" = 15000",
        "",
    )
    .expect("config");
    assert_eq!(config.output_stall_after, Duration::from_secs(45));
    let config = with_metrics("", "output_stall_after = \"3s\"").expect("config");
    assert_eq!(config.output_stall_after, Duration::from_secs(3));
    let error = with_metrics("", "output_stall_after = \"500ms\"")
        .expect_err("500ms accepted")
        .to_string();
    assert!(error.starts_with("metrics.output_stall_after:"), "{error}");
}
