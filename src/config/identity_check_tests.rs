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
fn an_identity_check_interval_under_100ms_is_refused_naming_the_field() {
    for short in ["0s", "1ms", "99ms"] {
        let error = parse(&format!("identity_check_interval = \"{short}\""))
            .expect_err("a short interval accepted")
            .to_string();
        assert!(
            error.starts_with("store.identity_check_interval:"),
            "{error}"
        );
        assert!(error.contains("at least 100ms"), "{error}");
    }
    assert!(parse("identity_check_interval = \"100ms\"").is_ok());
}
