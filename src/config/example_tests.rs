//! The files `config/` ships: each parses, and its derived figures are the
//! ones docs/configuration.md's use cases state, so the examples never rot.

use super::tests::brokers;
use super::*;
use crate::fingerprint::Identity;

#[test]
fn every_shipped_config_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut parsed = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            // Secrets from the environment: any value will do here. The
            // demo's brokers are its mock cluster's, given as the demo does.
            let demo = path.file_name().is_some_and(|n| n == "demo.toml");
            let var = |name: &str| {
                if demo {
                    brokers(name)
                } else {
                    placeholder(name)
                }
            };
            Config::parse_with_vars(&text, var)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            parsed += 1;
        }
    }
    assert!(
        parsed >= 7,
        "only {parsed} configs found in {}",
        dir.display()
    );
}

/// Every variable the file names set, to a value naming it; idemgate's own
/// overrides unset.
fn placeholder(name: &str) -> Option<String> {
    (!name.starts_with("IDEMGATE_")).then(|| format!("test-{name}"))
}

fn example(name: &str) -> Config {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    Config::parse_with_vars(&text, placeholder).unwrap()
}

#[test]
fn the_bank_example_keeps_every_transaction_seven_years_in_exact_keys() {
    let config = example("bank-retention.toml");
    let bank = &config.streams[0];
    assert_eq!(bank.spec.mode, Mode::Exact);
    assert_eq!(bank.spec.tier1_ttl, Duration::from_secs(220_903_200));
    assert_eq!(bank.fail_mode, FailMode::Closed);
    assert_eq!(config.kafka.common["sasl.password"], "test-KAFKA_PASSWORD");
    let StoreConfig::Postgres(options) = &config.store else {
        panic!("not postgres: {:?}", config.store)
    };
    assert_eq!(options.password.as_deref(), Some("test-PG_PASSWORD"));
    assert!(options.tls.is_some());
}

#[test]
fn the_spatial_jobs_example_remembers_a_job_for_its_retry_policy() {
    let config = example("spatial-jobs.toml");
    let jobs = &config.streams[0];
    assert!(
        matches!(jobs.profile.identity(), Identity::Fields(_)),
        "{:?}",
        jobs.profile
    );
    // (40m + 1m + 5m + 30m + 2h + 1h) x 1.25
    assert_eq!(jobs.spec.tier1_ttl, Duration::from_secs(19_200));
}

#[test]
fn the_telemetry_example_covers_its_measured_horizon_with_a_filter() {
    let config = example("vehicle-telemetry.toml");
    let telemetry = &config.streams[0];
    assert_eq!(telemetry.spec.mode, Mode::Tiered);
    assert_eq!(telemetry.spec.tier1_ttl, Duration::from_secs(30 * 60));
    let plan = telemetry.spec.filter.as_ref().expect("a filter plan");
    assert_eq!(plan.horizon, Duration::from_secs(8 * 3600));
    assert_eq!(telemetry.fail_mode, FailMode::Open);
}

#[test]
fn the_webhook_example_is_keyed_by_the_senders_header() {
    let config = example("webhooks.toml");
    let hooks = &config.streams[0];
    assert_eq!(
        hooks.profile.identity(),
        &Identity::Header {
            name: "idempotency-key".into()
        }
    );
    assert_eq!(hooks.profile.ignored(), ["attempt", "status"]);
    assert_eq!(hooks.spec.tier1_ttl, Duration::from_secs(24 * 3600));
}

#[test]
fn the_demo_config_is_valid_once_the_demo_supplies_its_brokers() {
    let demo = include_str!("../../config/demo.toml");
    let error = Config::parse(demo).unwrap_err().to_string();
    assert!(error.starts_with("kafka.bootstrap.servers:"), "{error}");
    let config = Config::parse_with_vars(demo, brokers).unwrap();
    assert_eq!(config.kafka.common["bootstrap.servers"], "broker-1:9092");
}

#[test]
fn the_production_example_gives_each_client_its_own_table() {
    let config = example("example.toml");
    let (consumer, producer) = crate::config::client_configs(&config);
    assert_eq!(consumer.get("client.id"), Some("idemgate-in"));
    assert_eq!(producer.get("client.id"), Some("idemgate-out"));
    assert_eq!(producer.get("compression.type"), Some("lz4"));
    assert_eq!(consumer.get("compression.type"), None);
    assert_eq!(consumer.get("session.timeout.ms"), Some("10000"));
}
