//! `[store] kind = "postgres"`: the table as docs/configuration.md writes
//! it, its defaults, and what it refuses.

use super::tests::{brokers, STREAM};
use super::*;
use crate::store::postgres::{
    DEFAULT_JANITOR_BATCH_ROWS, DEFAULT_JANITOR_INTERVAL, DEFAULT_POOL_SIZE, DEFAULT_SCHEMA,
};

fn parse(store: &str, stream: &str) -> Result<Config, ConfigError> {
    Config::parse_with_vars(&format!("{store}\n{stream}"), |name| {
        brokers(name).or_else(|| (name == "PG_PASSWORD").then(|| "s3cret".into()))
    })
}

fn options_of(store: &str) -> PostgresOptions {
    match parse(store, STREAM).unwrap().store {
        StoreConfig::Postgres(options) => options,
        other => panic!("not a postgres store: {other:?}"),
    }
}

fn refused(store: &str, stream: &str) -> String {
    match parse(store, stream) {
        Ok(config) => panic!("accepted: {:?}", config.store),
        Err(error) => error.to_string(),
    }
}

#[test]
fn the_whole_table_is_read_with_the_password_from_the_environment() {
    let options = options_of(
        r#"
[store]
kind = "postgres"
url = "postgres://idemgate@db.internal:5432/idemgate?sslmode=verify-full"
password = "${PG_PASSWORD}"
schema = "dedup"
pool_size = 8
[store.tls]
ca_file = "/etc/idemgate/pg-ca.pem"
[store.janitor]
interval = "30s"
batch_rows = 500
"#,
    );
    assert_eq!(
        options.url,
        "postgres://idemgate@db.internal:5432/idemgate?sslmode=verify-full"
    );
    assert_eq!(options.password.as_deref(), Some("s3cret"));
    assert_eq!(options.schema, "dedup");
    assert_eq!(options.pool_size, 8);
    let tls = options.tls.clone().unwrap();
    assert_eq!(
        tls.ca_file,
        Some(std::path::PathBuf::from("/etc/idemgate/pg-ca.pem"))
    );
    assert_eq!(options.janitor.interval, std::time::Duration::from_secs(30));
    assert_eq!(options.janitor.batch_rows, 500);
    let shown = format!("{options:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[test]
fn the_defaults_are_the_stores_own() {
    let options = options_of("[store]\nkind = \"postgres\"\nurl = \"postgresql://ig@db/ig\"");
    assert_eq!(options.schema, DEFAULT_SCHEMA);
    assert_eq!(options.pool_size, DEFAULT_POOL_SIZE);
    assert_eq!(options.janitor.interval, DEFAULT_JANITOR_INTERVAL);
    assert_eq!(options.janitor.batch_rows, DEFAULT_JANITOR_BATCH_ROWS);
    assert!(options.password.is_none() && options.tls.is_none());
    // Half a janitor table keeps the other half's default.
    let options = options_of(
        "[store]\nkind = \"postgres\"\nurl = \"postgres://db/ig\"\n[store.janitor]\nbatch_rows = 7",
    );
    assert_eq!(options.janitor.interval, DEFAULT_JANITOR_INTERVAL);
    assert_eq!(options.janitor.batch_rows, 7);
}

#[test]
fn a_tiered_stream_on_postgres_is_refused_by_name() {
    let tiered = r#"
[[streams]]
name = "telemetry"
inputs = ["raw.telemetry"]
clean = "clean.telemetry"
audit = "audit.telemetry"
profile = "payload"
mode = "tiered"
ttl = { explicit = "12h" }
tier1_ttl = "2h"
peak_rate = 1000
"#;
    let error = refused(
        "[store]\nkind = \"postgres\"\nurl = \"postgres://db/ig\"",
        &format!("{STREAM}{tiered}"),
    );
    assert!(
        error.starts_with("streams[1].mode:") && error.contains("\"telemetry\""),
        "{error}"
    );
}

#[test]
fn what_a_postgres_store_cannot_use_is_refused_naming_the_field() {
    let cases = [
        ("[store]\nkind = \"postgres\"", "store.url:"),
        ("[store]\nkind = \"postgres\"\nurl = \"redis://db\"", "store.url:"),
        (
            "[store]\nkind = \"postgres\"\nurl = \"postgres://db/ig?sslmode=allow\"",
            "store.url:",
        ),
        (
            "[store]\nkind = \"postgres\"\nurl = \"postgres://db/ig\"\nschema = \"Bad-Name\"",
            "store.schema:",
        ),
        (
            "[store]\nkind = \"postgres\"\nurl = \"postgres://db/ig\"\nusername = \"ig\"",
            "store.username:",
        ),
        (
            "[store]\nkind = \"postgres\"\nurl = \"postgres://db/ig\"\nclock = \"event\"",
            "store.clock:",
        ),
        (
            "[store]\nkind = \"postgres\"\nurl = \"postgres://db/ig?sslmode=disable\"\n[store.tls]\nca_file = \"ca.pem\"",
            "store.tls:",
        ),
        (
            "[store]\nkind = \"postgres\"\nurl = \"postgres://db/ig\"\n[store.janitor]\ninterval = \"0s\"",
            "store.janitor.interval:",
        ),
        (
            "[store]\nkind = \"redis\"\nurl = \"redis://db\"\nschema = \"idemgate\"",
            "store.schema:",
        ),
        (
            "[store]\nkind = \"memory\"\n[store.janitor]\ninterval = \"1m\"",
            "store.janitor:",
        ),
    ];
    for (store, field) in cases {
        let error = refused(store, STREAM);
        assert!(error.starts_with(field), "{store}\n=> {error}");
    }
}
