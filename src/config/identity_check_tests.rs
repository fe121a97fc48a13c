//! `[store] identity_check_interval`: its default and its bound.

use std::time::Duration;

use super::tests::{brokers, STREAM};
use super::Config;

fn parse(store: &str) -> Result<Config, super::ConfigError> {
    Config::parse_with_vars(&format!("[store]\n{store}\n{STREAM}"), brokers)
}

#[test]
fn the_identity_check_runs_every_five_seconds_unless_set() {
    let config = parse("").expect("config");
    assert_eq!(config.identity_check_interval, Duration::from_secs(5));
    let config = parse("identity_check_interval = \"1500ms\"").expect("config");
    assert_eq!(config.identity_check_interval, Duration::from_millis(1500));
}

#[test]
fn a_zero_identity_check_interval_is_refused_naming_the_field() {
    let error = parse("identity_check_interval = \"0s\"")
        .expect_err("0s accepted")
        .to_string();
    assert!(
        error.starts_with("store.identity_check_interval:"),
        "{error}"
    );
    assert!(error.contains("above zero"), "{error}");
}
