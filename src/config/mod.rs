//! Configuration in two stages: `RawConfig` is the TOML as written; `Config`
//! is what survives the cross-field checks. A bad config is refused at start
//! with the field named (`streams[0].tier1_ttl: ...`); a value of the wrong type
//! (an unknown `fail_mode`, a zero `max_records`) is refused by the TOML
//! parser, whose message quotes the line with the field and marks the value.

mod kafka;
mod raw;
mod rules;
mod source;
mod store;
mod substitute;

use std::collections::{BTreeMap, HashSet};
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use kafka::client_configs;
pub(crate) use kafka::{transaction_timeout, Client, ClientProperties, KafkaTables};
/// The variable `--config` is read from where the flag is not given
/// (`run`, `check`, `reset`, `rebuild`).
pub const ENV_CONFIG: &str = "IDEMGATE_CONFIG";

pub use raw::Guarantee;
pub(crate) use raw::{
    Clock, FailMode, FilterChoice, KafkaValue, RawConfig, RawStore, RawStream, RawTls, StoreKind,
    MAX_HANDOVER_DRAIN,
};
pub(crate) use rules::GroupProtocol;
pub(crate) use rules::OUTPUT_HEADROOM;
pub(crate) use substitute::substitute;
pub use substitute::SubstituteError;

use crate::fingerprint::Profile;
use crate::store::postgres::{JanitorOptions, PostgresOptions};
use crate::store::redis::{Auth, FilterBackend, RedisOptions, RedisTarget, TlsFiles};
use crate::store::{FilterSizing, GenerationPlan, Mode, StreamSpec};

/// Why a config was refused. Each message is whole on its own (no source
/// chain to print again) and names the field; `load` adds the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {reason}")]
    Read { path: String, reason: String },
    /// `${VAR}` without the variable set (or malformed).
    #[error("{0}")]
    Substitute(SubstituteError),
    /// Not TOML, or a value serde refuses (unknown field or enum variant, a
    /// zero count): the field's path, then the parser's message, which
    /// quotes the offending line.
    #[error("{field}: {message}")]
    Parse { field: String, message: String },
    /// A value that parses but cannot be right; names the field.
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    /// Any of the above, in this file.
    #[error("{path}: {error}")]
    InFile {
        path: String,
        error: Box<ConfigError>,
    },
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The validated configuration. Its `Debug` hides librdkafka properties
/// that carry secrets.
#[derive(Clone)]
pub struct Config {
    /// `[kafka]`, `[kafka.consumer]` and `[kafka.producer]`: see
    /// [`Config::client_properties`].
    pub(crate) kafka: KafkaTables,
    /// `[kafka] "group.protocol"`: which idemgate defaults apply
    /// (`client_configs`).
    pub(crate) group_protocol: GroupProtocol,
    pub store: StoreConfig,
    /// How often the worker reads every stream's store identity on its
    /// own (`[store] identity_check_interval`, docs/design.md §8).
    pub(crate) identity_check_interval: Duration,
    pub(crate) metrics_listen: String,
    /// `[metrics] output_stall_after`, its default resolved from the
    /// producer's `transaction.timeout.ms` (`worker::stalls`).
    pub(crate) output_stall_after: Duration,
    pub(crate) batch: BatchConfig,
    pub guarantee: Guarantee,
    pub streams: Vec<StreamConfig>,
    /// The file `load` read, as `--config` gave it: remedies name it
    /// ([`Config::config_flag`]). None for a config parsed from text.
    pub(crate) source: Option<PathBuf>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |table: &BTreeMap<String, String>| -> BTreeMap<String, String> {
            table
                .iter()
                .map(|(k, v)| {
                    let secret = ["password", "secret", "key", "token"]
                        .iter()
                        .any(|s| k.contains(s));
                    (k.clone(), if secret { "***".into() } else { v.clone() })
                })
                .collect()
        };
        f.debug_struct("Config")
            .field("kafka", &hidden(&self.kafka.common))
            .field("kafka.consumer", &hidden(&self.kafka.consumer))
            .field("kafka.producer", &hidden(&self.kafka.producer))
            .field("group_protocol", &self.group_protocol)
            .field("store", &self.store)
            .field("identity_check_interval", &self.identity_check_interval)
            .field("metrics_listen", &self.metrics_listen)
            .field("output_stall_after", &self.output_stall_after)
            .field("batch", &self.batch)
            .field("guarantee", &self.guarantee)
            .field("streams", &self.streams)
            .field("source", &self.source)
            .finish()
    }
}

#[derive(Clone, Debug)]
pub(crate) struct BatchConfig {
    pub(crate) max_records: usize,
    pub(crate) linger: Duration,
    /// Bounds over every batch in flight: at the bound the worker reads no
    /// more (partitions holding waiting records pause first).
    pub(crate) max_in_flight_records: usize,
    pub(crate) max_in_flight_bytes: usize,
    /// Batches the poller reads ahead of the loop: throughput against
    /// decision latency (a record waits behind those read before it).
    pub(crate) read_ahead: usize,
    /// How often finished offsets are committed (exactly once: how long a
    /// transaction stays open).
    pub(crate) commit_interval: Duration,
    /// Exactly once: the longest a handover lets the records read finish
    /// (`[batch] handover_drain`).
    pub(crate) handover_drain: Duration,
    /// Exactly once: how long a transactional call may take before its
    /// outcome counts as unknown (`[batch] transaction_call_timeout`).
    pub(crate) transaction_call_timeout: Duration,
}

/// Environment variables that override the file, so one config serves
/// every environment: brokers and store addresses.
pub(crate) const ENV_BROKERS: &str = "IDEMGATE_KAFKA_BROKERS";
pub(crate) const ENV_REDIS_URL: &str = "IDEMGATE_REDIS_URL";
pub(crate) const ENV_REDIS_NODES: &str = "IDEMGATE_REDIS_NODES";

#[derive(Clone, Debug)]
pub enum StoreConfig {
    Memory {
        event_time: bool,
    },
    Redis(RedisOptions),
    /// Exact streams only (the config refuses a tiered stream on it).
    Postgres(PostgresOptions),
}

#[derive(Clone, Debug)]
pub struct StreamConfig {
    pub(crate) inputs: Vec<String>,
    pub(crate) clean: String,
    pub(crate) audit: String,
    pub(crate) profile: Profile,
    pub(crate) max_record_bytes: usize,
    pub(crate) fail_mode: FailMode,
    /// Every output goes to clean, decision headers kept (docs/design.md
    /// §2.1).
    pub(crate) shadow: bool,
    /// The expected peak records/s: tiered, what sized the filter (always
    /// there); exact, optional. `idemgate plan` and `check` size the
    /// stream's claims at it.
    pub(crate) peak_rate: Option<u64>,
    /// What the claim store needs: name, key id, mode, TTLs, filter plan.
    pub spec: StreamSpec,
}

impl Config {
    /// Reads the file, expands `${VAR}` from the environment, applies the
    /// environment's overrides and validates; an error names the file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: shown.clone(),
            reason: error.to_string(),
        })?;
        let mut config = Config::parse_with_env(&text).map_err(|error| ConfigError::InFile {
            path: shown,
            error: Box::new(error),
        })?;
        config.source = Some(path.to_path_buf());
        Ok(config)
    }

    /// The text as it is: no `${VAR}` expansion, no overrides.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        validate(parse_raw(text)?)
    }

    /// Like `parse`, with `${VAR}` expanded and the environment's overrides
    /// applied first.
    pub(crate) fn parse_with_env(text: &str) -> Result<Config, ConfigError> {
        Config::parse_with_vars(text, |name| std::env::var(name).ok())
    }

    /// `parse_with_env` with the variables read through `var`.
    pub(crate) fn parse_with_vars(
        text: &str,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let text = substitute(text, &var).map_err(ConfigError::Substitute)?;
        let mut raw = parse_raw(&text)?;
        apply_env(&mut raw, var);
        validate(raw)
    }
}

/// TOML into `RawConfig`, keeping the path of the field serde refused
/// (`streams[1].fail_mode`) beside the parser's message.
pub(crate) fn parse_raw(text: &str) -> Result<RawConfig, ConfigError> {
    let deserializer = toml::Deserializer::new(text);
    serde_path_to_error::deserialize(deserializer).map_err(|error| {
        let field = error.path().to_string();
        ConfigError::Parse {
            field: if field == "." { "config".into() } else { field },
            message: error.into_inner().to_string().trim_end().to_string(),
        }
    })
}

/// `IDEMGATE_KAFKA_BROKERS` sets `bootstrap.servers`; `IDEMGATE_REDIS_URL`
/// makes the store a standalone Redis at that URL; `IDEMGATE_REDIS_NODES`
/// (comma separated) a cluster.
pub(crate) fn apply_env(raw: &mut RawConfig, var: impl Fn(&str) -> Option<String>) {
    if let Some(brokers) = var(ENV_BROKERS) {
        raw.kafka
            .common
            .insert("bootstrap.servers".into(), KafkaValue::Text(brokers));
    }
    if let Some(url) = var(ENV_REDIS_URL) {
        raw.store.kind = StoreKind::Redis;
        raw.store.url = Some(url);
        raw.store.nodes.clear();
    }
    if let Some(nodes) = var(ENV_REDIS_NODES) {
        raw.store.kind = StoreKind::Cluster;
        raw.store.nodes = nodes.split(',').map(|n| n.trim().to_string()).collect();
        raw.store.url = None;
    }
}

pub(crate) fn validate(raw: RawConfig) -> Result<Config, ConfigError> {
    let store = store::validate_store(&raw.store)?;
    if raw.streams.is_empty() {
        return Err(invalid(
            "streams",
            "at least one [[streams]] entry is needed",
        ));
    }
    let mut names = HashSet::new();
    let mut inputs = HashSet::new();
    let mut streams = Vec::with_capacity(raw.streams.len());
    for (index, stream) in raw.streams.iter().enumerate() {
        let field = |name: &str| format!("streams[{index}].{name}");
        let validated = validate_stream(stream, &field)?;
        if !names.insert(stream.name.clone()) {
            return Err(invalid(
                field("name"),
                format!("{} is used twice", stream.name),
            ));
        }
        for topic in &stream.inputs {
            if !inputs.insert(topic.clone()) {
                return Err(invalid(
                    field("inputs"),
                    format!("topic {topic} is read by two streams"),
                ));
            }
        }
        streams.push(validated);
    }
    let kafka = KafkaTables::from_raw(raw.kafka);
    rules::check_brokers(&kafka.common)?;
    kafka.check_overrides()?;
    let (consumer, producer) = (
        kafka.client(Client::Consumer),
        kafka.client(Client::Producer),
    );
    rules::check_fixed(&consumer)?;
    rules::check_topics(&streams)?;
    rules::check_sendable(&producer, &streams)?;
    rules::check_key_ids(&streams)?;
    if matches!(store, StoreConfig::Postgres(_)) {
        store::exact_only(&streams)?;
    }
    rules::check_guarantee(raw.guarantee, &consumer, &producer)?;
    let group_protocol = rules::check_group_protocol(&consumer)?;
    if raw.batch.max_in_flight_records.get() < raw.batch.max_records.get() {
        return Err(invalid(
            "batch.max_in_flight_records",
            "must be at least batch.max_records",
        ));
    }
    let most = MAX_HANDOVER_DRAIN;
    if raw.batch.handover_drain > most {
        return Err(invalid(
            "batch.handover_drain",
            format!("at most {}s: the drain and the wait for deliveries after it must fit in the time a revoke waits for the loop", most.as_secs()),
        ));
    }
    let output_stall_after = match raw.metrics.output_stall_after {
        Some(bound) if bound < Duration::from_secs(1) => {
            return Err(invalid(
                "metrics.output_stall_after",
                "at least 1s: shorter, a transaction that is merely open counts as stalled",
            ))
        }
        Some(bound) => bound,
        None => default_output_stall_after(&producer),
    };
    if raw.batch.transaction_call_timeout < Duration::from_secs(1) {
        return Err(invalid(
            "batch.transaction_call_timeout",
            "at least 1s: shorter, a commit that is merely slow is taken for one whose outcome is unknown".to_string(),
        ));
    }
    if raw.store.identity_check_interval < Duration::from_millis(100) {
        return Err(invalid(
            "store.identity_check_interval",
            "at least 100ms: each check reads every place a stream's identity is kept (every hash tag), so a shorter one loads the store for nothing",
        ));
    }
    Ok(Config {
        kafka,
        group_protocol,
        store,
        identity_check_interval: raw.store.identity_check_interval,
        metrics_listen: raw.metrics.listen,
        output_stall_after,
        batch: BatchConfig {
            max_records: raw.batch.max_records.get(),
            linger: raw.batch.linger,
            max_in_flight_records: raw.batch.max_in_flight_records.get(),
            max_in_flight_bytes: raw.batch.max_in_flight_bytes.get(),
            read_ahead: raw.batch.read_ahead.get(),
            commit_interval: raw.batch.commit_interval,
            handover_drain: raw.batch.handover_drain,
            transaction_call_timeout: raw.batch.transaction_call_timeout,
        },
        guarantee: raw.guarantee,
        streams,
        source: None,
    })
}

/// The broker's default `transaction.abort.timed.out.transaction.cleanup.interval.ms`:
/// how often it aborts the transactions past their timeout.
const BROKER_ABORT_INTERVAL: Duration = Duration::from_secs(10);
/// What the stall bound allows beyond them: the abort's own markers, a
/// look or two of the watch.
const STALL_MARGIN: Duration = Duration::from_secs(20);

/// `[metrics] output_stall_after` when unset: the longest a live
/// transaction holds an output partition's last stable offset (its
/// timeout, then the broker's next abort check), and a margin.
fn default_output_stall_after(producer: &ClientProperties<'_>) -> Duration {
    transaction_timeout(producer.get("transaction.timeout.ms"))
        + BROKER_ABORT_INTERVAL
        + STALL_MARGIN
}

pub(super) fn is_plain_name(text: &str, extra: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c) || extra.contains(c))
}

fn validate_stream(
    raw: &RawStream,
    field: &dyn Fn(&str) -> String,
) -> Result<StreamConfig, ConfigError> {
    if !is_plain_name(&raw.name, "") {
        return Err(invalid(
            field("name"),
            "letters, digits, '.', '_' and '-' only",
        ));
    }
    if raw.inputs.is_empty() {
        return Err(invalid(
            field("inputs"),
            "at least one input topic is needed",
        ));
    }
    for (name, topic) in [("clean", &raw.clean), ("audit", &raw.audit)] {
        if topic.is_empty() {
            return Err(invalid(field(name), "a topic name is needed"));
        }
        if raw.inputs.contains(topic) {
            return Err(invalid(
                field(name),
                "must not be one of the stream's inputs",
            ));
        }
    }
    let profile = Profile::resolve(&raw.profile, raw.fields.as_deref(), raw.header.as_deref())
        .and_then(|profile| profile.ignoring(&raw.ignore))
        .map_err(|e| invalid(field(e.field()), e.to_string()))?;
    let remembered = raw
        .ttl
        .ttl()
        .map_err(|e| invalid(field("ttl"), e.to_string()))?;
    let (tier1_ttl, filter) = match raw.mode {
        Mode::Exact => {
            if raw.tier1_ttl.is_some() {
                return Err(invalid(
                    field("tier1_ttl"),
                    "only for mode = \"tiered\"; in exact mode ttl is the tier-1 ttl",
                ));
            }
            (remembered, None)
        }
        Mode::Tiered => {
            let tier1 = raw
                .tier1_ttl
                .ok_or_else(|| invalid(field("tier1_ttl"), "mode = \"tiered\" needs it"))?;
            (tier1, Some(filter_plan(raw, remembered, tier1, field)?))
        }
    };
    if tier1_ttl.is_zero() {
        return Err(invalid(field("tier1_ttl"), "must be above zero"));
    }
    let key_id = match &raw.key_id {
        Some(id)
            if (1..=4).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            id.clone()
        }
        Some(_) => return Err(invalid(field("key_id"), "1 to 4 letters or digits")),
        None => crate::store::key_id(&raw.name),
    };
    Ok(StreamConfig {
        inputs: raw.inputs.clone(),
        clean: raw.clean.clone(),
        audit: raw.audit.clone(),
        profile,
        max_record_bytes: raw.max_record_bytes.get(),
        fail_mode: raw.fail_mode,
        shadow: raw.shadow,
        peak_rate: raw.peak_rate.map(NonZeroU64::get),
        spec: StreamSpec {
            name: raw.name.clone(),
            key_id,
            mode: raw.mode,
            tier1_ttl,
            filter,
            peak_rate: raw.peak_rate.map(NonZeroU64::get),
        },
    })
}

fn filter_plan(
    raw: &RawStream,
    horizon: Duration,
    tier1_ttl: Duration,
    field: &dyn Fn(&str) -> String,
) -> Result<GenerationPlan, ConfigError> {
    if tier1_ttl >= horizon {
        return Err(invalid(
            field("tier1_ttl"),
            format!(
                "{} is not shorter than the horizon {} (ttl); use mode = \"exact\"",
                crate::ttl::format_duration(tier1_ttl),
                crate::ttl::format_duration(horizon)
            ),
        ));
    }
    if raw.filter_slots.get() < 2 {
        return Err(invalid(
            field("filter_slots"),
            "at least 2, or a key written just before a rotation is forgotten just after it",
        ));
    }
    if !(raw.fp_rate > 0.0 && raw.fp_rate < 0.5) {
        return Err(invalid(field("fp_rate"), "must be above 0 and below 0.5"));
    }
    let peak_rate = raw
        .peak_rate
        .ok_or_else(|| invalid(field("peak_rate"), "mode = \"tiered\" needs it"))?
        .get();
    if raw.clock_skew * 4 >= horizon {
        return Err(invalid(
            field("clock_skew"),
            "must be well under the horizon",
        ));
    }
    Ok(GenerationPlan {
        horizon,
        slots: raw.filter_slots.get(),
        skew: raw.clock_skew,
        sizing: FilterSizing::for_rate(peak_rate, horizon, raw.fp_rate),
    })
}

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod example_tests;
#[cfg(test)]
mod identity_check_tests;
#[cfg(test)]
mod kafka_tests;
#[cfg(test)]
mod peak_rate_tests;
#[cfg(test)]
mod postgres_tests;
#[cfg(test)]
mod profile_tests;
#[cfg(test)]
mod reference_tests;
#[cfg(test)]
mod store_tests;
#[cfg(test)]
mod tests;
