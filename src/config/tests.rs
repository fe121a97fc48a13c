use super::*;

pub(super) const BASE: &str = r#"
[[streams]]
name = "bank"
inputs = ["raw.bank"]
clean = "clean.bank"
audit = "audit.bank"
profile = "bank-txn"
mode = "exact"
ttl = { retention_years = 7 }
"#;

/// One bank stream with a one-hour TTL, for tests about other tables.
pub(super) const STREAM: &str = r#"
[[streams]]
name = "bank"
inputs = ["raw.bank"]
clean = "clean.bank"
audit = "audit.bank"
profile = "bank-txn"
mode = "exact"
ttl = { explicit = "1h" }
"#;

/// Brokers as `IDEMGATE_KAFKA_BROKERS` gives them, and no other variable:
/// most tests are about something else, and a config without brokers is
/// refused.
pub(super) fn brokers(name: &str) -> Option<String> {
    (name == ENV_BROKERS).then(|| "broker-1:9092".into())
}

/// The text with brokers from the environment.
pub(super) fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse_with_vars(text, brokers)
}

pub(super) fn refused(text: &str) -> String {
    match parse(text) {
        Ok(_) => panic!("config accepted:\n{text}"),
        Err(error) => error.to_string(),
    }
}

pub(super) fn tiered(extra: &str) -> String {
    format!(
        r#"
[[streams]]
name = "telemetry"
inputs = ["raw.telemetry"]
clean = "clean.telemetry"
audit = "audit.telemetry"
profile = "payload"
mode = "tiered"
ttl = {{ explicit = "12h" }}
peak_rate = 1000
{extra}
"#
    )
}

#[test]
fn a_plain_exact_stream_is_accepted() {
    let config = parse(BASE).unwrap();
    let stream = &config.streams[0];
    assert_eq!(stream.spec.tier1_ttl.as_secs(), 220_903_200);
    assert!(stream.spec.filter.is_none());
    assert!(matches!(
        config.store,
        StoreConfig::Memory { event_time: false }
    ));
    assert_eq!(stream.fail_mode, FailMode::Closed);
    assert_eq!(config.batch.max_records, 1000);
    assert_eq!(stream.max_record_bytes, 900 * 1024);
}

#[test]
fn a_tiered_stream_is_sized_from_rate_and_horizon() {
    let config = parse(&tiered("tier1_ttl = \"2h\"")).unwrap();
    let plan = config.streams[0].spec.filter.clone().unwrap();
    assert_eq!(plan.sizing.capacity, 1000 * 12 * 3600);
    assert_eq!(plan.slots, 2);
}

#[test]
fn a_zero_ttl_is_refused_naming_the_field() {
    let text = BASE.replace("{ retention_years = 7 }", "{ explicit = \"0s\" }");
    assert!(
        refused(&text).starts_with("streams[0].ttl:"),
        "{}",
        refused(&text)
    );
}

#[test]
fn a_lease_is_refused_since_no_claim_is_taken_over_on_a_timer() {
    let error = refused(&tiered("tier1_ttl = \"2h\"\nlease = \"2h\""));
    assert!(error.contains("lease"), "{error}");
}

#[test]
fn two_streams_with_one_key_id_are_refused() {
    let second = BASE
        .replace("name = \"bank\"", "name = \"bank2\"\nkey_id = \"b\"")
        .replace("raw.bank", "raw.bank2")
        .replace("clean.bank", "clean.bank2")
        .replace("audit.bank", "audit.bank2");
    let first = BASE.replace("name = \"bank\"", "name = \"bank\"\nkey_id = \"b\"");
    let error = refused(&format!("{first}{second}"));
    assert!(error.starts_with("streams[1].key_id:"), "{error}");
    let error = refused(&BASE.replace("name = \"bank\"", "name = \"bank\"\nkey_id = \"b-1\""));
    assert!(error.starts_with("streams[0].key_id:"), "{error}");
}

#[test]
fn in_flight_bounds_below_one_batch_are_refused() {
    let text = format!("[batch]\nmax_records = 1000\nmax_in_flight_records = 999\n{BASE}");
    let error = refused(&text);
    assert!(error.starts_with("batch.max_in_flight_records:"), "{error}");
}

#[test]
fn a_tier1_ttl_not_shorter_than_the_horizon_is_refused() {
    let error = refused(&tiered("tier1_ttl = \"12h\""));
    assert!(error.starts_with("streams[0].tier1_ttl:"), "{error}");
}

#[test]
fn fewer_than_two_filter_slots_are_refused() {
    let error = refused(&tiered("tier1_ttl = \"2h\"\nfilter_slots = 1"));
    assert!(error.starts_with("streams[0].filter_slots:"), "{error}");
}

/// Refused by the TOML parser rather than by `validate`: the message must
/// still show the user which field is wrong, and why.
pub(super) fn refused_by_the_parser(text: &str, field: &str, why: &str) {
    let error = refused(text);
    let first = error.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("streams[0].")
            || first.starts_with("batch.")
            || first.starts_with("store."),
        "no field path first: {error}"
    );
    assert!(
        first.contains(field),
        "field {field} not named first: {error}"
    );
    assert!(error.contains(why), "reason {why:?} not given: {error}");
}

#[test]
fn an_unknown_fail_mode_is_refused_naming_the_field() {
    refused_by_the_parser(
        &format!("{BASE}fail_mode = \"sideways\"\n"),
        "fail_mode",
        "unknown variant `sideways`, expected `closed` or `open`",
    );
}

#[test]
fn an_unknown_store_kind_is_refused_naming_the_field() {
    refused_by_the_parser(
        &format!("[store]\nkind = \"mysql\"\n{BASE}"),
        "kind",
        "unknown variant `mysql`, expected one of `memory`, `redis`, `cluster`, `postgres`",
    );
}

#[test]
fn an_unknown_filter_is_refused_naming_the_field() {
    refused_by_the_parser(
        &format!(
            "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1\"\nfilter = \"cuckoo\"\n{BASE}"
        ),
        "filter",
        "unknown variant `cuckoo`, expected one of `auto`, `redisbloom`, `bitmap`",
    );
}

#[test]
fn an_unknown_clock_is_refused_naming_the_field() {
    refused_by_the_parser(
        &format!("[store]\nclock = \"lunar\"\n{BASE}"),
        "clock",
        "unknown variant `lunar`, expected `wall` or `event`",
    );
}

#[test]
fn zero_records_per_batch_are_refused_naming_the_field() {
    refused_by_the_parser(
        &format!("[batch]\nmax_records = 0\n{BASE}"),
        "max_records",
        "nonzero",
    );
}

#[test]
fn zero_filter_slots_are_refused_naming_the_field() {
    refused_by_the_parser(
        &tiered("tier1_ttl = \"2h\"\nfilter_slots = 0"),
        "filter_slots",
        "nonzero",
    );
}

#[test]
fn a_zero_record_size_limit_is_refused_naming_the_field() {
    refused_by_the_parser(
        &format!("{BASE}max_record_bytes = 0\n"),
        "max_record_bytes",
        "nonzero",
    );
}

#[test]
fn an_unknown_field_is_refused() {
    let error = refused(&format!("{BASE}colour = \"blue\"\n"));
    assert!(error.contains("colour"), "{error}");
}

#[test]
fn a_redis_store_without_url_is_refused() {
    let error = refused(&format!("[store]\nkind = \"redis\"\n{BASE}"));
    assert!(error.starts_with("store.url:"), "{error}");
}

#[test]
fn event_time_with_redis_is_refused() {
    let error = refused(&format!(
        "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1\"\nclock = \"event\"\n{BASE}"
    ));
    assert!(error.starts_with("store.clock:"), "{error}");
}

#[test]
fn the_environment_overrides_broker_and_store_addresses() {
    let mut raw: RawConfig = toml::from_str(BASE).unwrap();
    apply_env(&mut raw, |name| match name {
        ENV_BROKERS => Some("broker-9:9092".into()),
        ENV_REDIS_URL => Some("redis://cache:6379".into()),
        _ => None,
    });
    let config = validate(raw).unwrap();
    assert_eq!(config.kafka.common["bootstrap.servers"], "broker-9:9092");
    match config.store {
        StoreConfig::Redis(options) => assert_eq!(
            options.target,
            crate::store::redis::RedisTarget::Standalone("redis://cache:6379".into())
        ),
        other => panic!("store not overridden: {other:?}"),
    }
}

#[test]
fn the_environment_can_make_the_store_a_cluster() {
    let mut raw: RawConfig = toml::from_str(BASE).unwrap();
    apply_env(&mut raw, |name| match name {
        ENV_REDIS_NODES => Some("redis://a:7000, redis://b:7000".into()),
        _ => brokers(name),
    });
    assert_eq!(raw.store.kind, StoreKind::Cluster);
    match validate(raw).unwrap().store {
        StoreConfig::Redis(options) => assert_eq!(
            options.target,
            crate::store::redis::RedisTarget::Cluster(vec![
                "redis://a:7000".into(),
                "redis://b:7000".into()
            ])
        ),
        other => panic!("store not overridden: {other:?}"),
    }
}

#[test]
fn secrets_in_kafka_properties_are_hidden_from_debug_output() {
    let text = format!("[kafka]\n\"sasl.password\" = \"hunter2\"\n{BASE}");
    let shown = format!("{:?}", parse(&text).unwrap());
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn kafka_properties_may_be_strings_integers_or_booleans() {
    let text = format!(
        "[kafka]\n\"session.timeout.ms\" = 10000\n\"enable.ssl.certificate.verification\" = false\n\"client.id\" = \"gate-1\"\n{BASE}"
    );
    let config = parse(&text).unwrap();
    assert_eq!(config.kafka.common["session.timeout.ms"], "10000");
    assert_eq!(
        config.kafka.common["enable.ssl.certificate.verification"],
        "false"
    );
    assert_eq!(config.kafka.common["client.id"], "gate-1");
}

#[test]
fn a_kafka_property_of_another_type_is_refused_naming_it() {
    let error = refused(&format!("[kafka]\n\"linger.ms\" = [5]\n{BASE}"));
    assert!(error.starts_with("kafka.linger.ms:"), "{error}");
}

#[test]
fn secrets_and_addresses_come_from_the_environment() {
    let text = format!(
        "[kafka]\n\"bootstrap.servers\" = \"${{BROKERS:-localhost:9092}}\"\n\"sasl.password\" = \"${{SASL_PASSWORD}}\"\n[batch]\nmax_records = ${{BATCH:-250}}\n{BASE}"
    );
    let var = |name: &str| (name == "SASL_PASSWORD").then(|| "hunter2".to_string());
    let config = Config::parse_with_vars(&text, var).unwrap();
    assert_eq!(config.kafka.common["sasl.password"], "hunter2");
    assert_eq!(config.kafka.common["bootstrap.servers"], "localhost:9092");
    assert_eq!(config.batch.max_records, 250);
    assert!(!format!("{config:?}").contains("hunter2"));
}

#[test]
fn an_unset_variable_is_refused_naming_it_and_its_line() {
    let text = format!("[kafka]\n\"sasl.password\" = \"${{SASL_PASSWORD}}\"\n{BASE}");
    let error = Config::parse_with_vars(&text, |_| None)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("line 2") && error.contains("${SASL_PASSWORD}"),
        "{error}"
    );
}

#[test]
fn a_file_error_names_the_file_once_and_the_field() {
    let dir = std::env::temp_dir().join(format!("idemgate-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.toml");
    let error = Config::load(&missing).unwrap_err().to_string();
    assert!(error.contains("missing.toml"), "{error}");
    assert!(error.starts_with("cannot read config file"), "{error}");

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, format!("{BASE}fail_mode = \"sideways\"\n")).unwrap();
    let error = Config::load(&bad).unwrap_err().to_string();
    assert!(
        error.starts_with(&format!("{}: streams[0].fail_mode:", bad.display())),
        "{error}"
    );
    assert_eq!(error.matches("unknown variant").count(), 1, "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_tls_store_with_an_acl_user_and_a_client_certificate_is_accepted() {
    let text = format!(
        "[store]\nkind = \"redis\"\nurl = \"rediss://cache:6380\"\nusername = \"idemgate\"\npassword = \"${{REDIS_PASSWORD}}\"\nrequire_eviction_check = true\n[store.tls]\nca_file = \"/etc/idemgate/ca.pem\"\ncert_file = \"/etc/idemgate/client.pem\"\nkey_file = \"/etc/idemgate/client.key\"\n{BASE}"
    );
    let var = |name: &str| match name {
        "REDIS_PASSWORD" => Some("pw".to_string()),
        _ => brokers(name),
    };
    let config = Config::parse_with_vars(&text, var).unwrap();
    let StoreConfig::Redis(options) = &config.store else {
        panic!("not a redis store: {:?}", config.store)
    };
    assert_eq!(options.auth.username.as_deref(), Some("idemgate"));
    assert_eq!(options.auth.password.as_deref(), Some("pw"));
    assert!(options.require_eviction_check);
    let tls = options.tls.as_ref().expect("tls files");
    assert_eq!(
        tls.key_file.as_deref(),
        Some(std::path::Path::new("/etc/idemgate/client.key"))
    );
    assert!(!format!("{config:?}").contains("\"pw\""), "{config:?}");
}

#[test]
fn tls_files_with_a_plain_redis_url_are_refused() {
    let error = refused(&format!(
        "[store]\nkind = \"redis\"\nurl = \"redis://cache:6379\"\n[store.tls]\nca_file = \"ca.pem\"\n{BASE}"
    ));
    assert!(
        error.starts_with("store.tls:") && error.contains("rediss://"),
        "{error}"
    );
}

#[test]
fn a_client_certificate_without_its_key_is_refused() {
    let error = refused(&format!(
        "[store]\nkind = \"redis\"\nurl = \"rediss://cache:6380\"\n[store.tls]\ncert_file = \"client.pem\"\n{BASE}"
    ));
    assert!(
        error.starts_with("store.tls:") && error.contains("key_file"),
        "{error}"
    );
}

#[test]
fn a_record_limit_the_producer_cannot_send_is_refused() {
    let error = refused(&format!("{BASE}max_record_bytes = 1048576\n"));
    assert!(error.starts_with("streams[0].max_record_bytes:"), "{error}");
    assert!(error.contains("message.max.bytes"), "{error}");
    let raised =
        format!("[kafka]\n\"message.max.bytes\" = 4194304\n{BASE}max_record_bytes = 1048576\n");
    assert_eq!(parse(&raised).unwrap().streams[0].max_record_bytes, 1 << 20);
}

#[test]
fn a_clean_topic_that_is_an_audit_topic_or_an_input_is_refused() {
    let same = BASE.replace("audit = \"audit.bank\"", "audit = \"clean.bank\"");
    let error = refused(&same);
    assert!(
        error.starts_with("streams[0].clean:") && error.contains("audit"),
        "{error}"
    );
    let fed_back = BASE.replace("clean = \"clean.bank\"", "clean = \"raw.bank\"");
    let error = refused(&fed_back);
    assert!(
        error.starts_with("streams[0].clean:") && error.contains("input"),
        "{error}"
    );
}

#[test]
fn a_config_without_brokers_is_refused_naming_the_field() {
    for text in [
        BASE.to_string(),
        format!("[kafka]\n\"bootstrap.servers\" = \" , \"\n{BASE}"),
    ] {
        let error = Config::parse(&text).unwrap_err().to_string();
        assert!(error.starts_with("kafka.bootstrap.servers:"), "{error}");
        assert!(error.contains(ENV_BROKERS), "{error}");
    }
}

#[test]
fn brokers_from_the_environment_or_librdkafkas_alias_are_enough() {
    let from_env = Config::parse_with_vars(BASE, brokers).unwrap();
    assert_eq!(from_env.kafka.common["bootstrap.servers"], "broker-1:9092");
    let alias = format!("[kafka]\n\"metadata.broker.list\" = \"b-1:9092\"\n{BASE}");
    assert!(Config::parse(&alias).is_ok());
}

#[test]
fn exactly_once_is_a_top_level_choice_with_its_producer_settings_checked() {
    let eos = format!("guarantee = \"exactly-once\"\n{BASE}");
    let config = parse(&eos).expect("exactly once accepted");
    assert_eq!(config.guarantee, Guarantee::ExactlyOnce);
    assert_eq!(parse(BASE).unwrap().guarantee, Guarantee::AtLeastOnce);
    let (_, producer) = crate::config::client_configs(&config);
    assert!(
        producer
            .get("transactional.id")
            .is_some_and(|id| id.starts_with("idemgate-idemgate-")),
        "a default transactional id from the group and the host: {:?}",
        producer.get("transactional.id")
    );
    let named =
        format!("guarantee = \"exactly-once\"\n[kafka]\n\"transactional.id\" = \"gate-0\"\n{BASE}");
    let (_, producer) = crate::config::client_configs(&parse(&named).unwrap());
    assert_eq!(producer.get("transactional.id"), Some("gate-0"));
    let cases = [
        (
            format!("[kafka]\n\"transactional.id\" = \"gate-0\"\n{BASE}"),
            "kafka.transactional.id",
        ),
        (
            format!("guarantee = \"exactly-once\"\n[kafka]\n\"enable.idempotence\" = false\n{BASE}"),
            "kafka.enable.idempotence",
        ),
        (
            format!("guarantee = \"exactly-once\"\n[kafka]\n\"isolation.level\" = \"read_uncommitted\"\n{BASE}"),
            "kafka.isolation.level",
        ),
        (format!("guarantee = \"twice\"\n{BASE}"), "guarantee"),
    ];
    for (text, field) in cases {
        let error = refused(&text);
        assert!(error.contains(field), "{field} not named in: {error}");
    }
}

#[test]
fn shadow_is_off_by_default_and_a_non_boolean_is_refused_naming_the_field() {
    assert!(!parse(BASE).unwrap().streams[0].shadow);
    assert!(parse(&format!("{BASE}shadow = true\n")).unwrap().streams[0].shadow);
    let error = refused(&format!("{BASE}shadow = \"yes\"\n"));
    assert!(error.contains("streams[0].shadow"), "{error}");
}

#[test]
fn a_tier1_layout_is_keys_or_grouped_on_redis_only() {
    let redis = "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1\"\n";
    let config = parse(&format!("{redis}tier1_layout = \"grouped\"\n{STREAM}")).unwrap();
    let StoreConfig::Redis(options) = &config.store else {
        panic!("not redis");
    };
    assert_eq!(
        options.tier1_layout,
        Some(crate::store::redis::Tier1Layout::Grouped)
    );
    refused_by_the_parser(
        &format!("{redis}tier1_layout = \"tables\"\n{BASE}"),
        "tier1_layout",
        "unknown variant `tables`, expected `keys` or `grouped`",
    );
    let error = refused(&format!("[store]\ntier1_layout = \"keys\"\n{BASE}"));
    assert!(error.contains("tier1_layout"), "{error}");
}
