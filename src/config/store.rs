//! The store's section of a config, checked: Redis (its URL, TLS files,
//! key prefix) or PostgreSQL (its URL, schema, pool, janitor), and what a
//! PostgreSQL store refuses of the streams (docs/design.md §6).

use super::*;

pub(super) fn validate_store(raw: &RawStore) -> Result<StoreConfig, ConfigError> {
    for (set, name) in [
        (raw.schema.is_some(), "store.schema"),
        (raw.pool_size.is_some(), "store.pool_size"),
        (raw.janitor.is_some(), "store.janitor"),
    ] {
        if set && raw.kind != StoreKind::Postgres {
            return Err(invalid(name, "only for kind = \"postgres\""));
        }
    }
    if !is_plain_name(&raw.key_prefix, ":") {
        return Err(invalid(
            "store.key_prefix",
            "letters, digits, '.', '_', '-' and ':' only (braces would turn into cluster hash tags)",
        ));
    }
    let filter_backend = match raw.filter {
        FilterChoice::Auto => None,
        FilterChoice::RedisBloom => Some(FilterBackend::RedisBloom),
        FilterChoice::Bitmap => Some(FilterBackend::Bitmap),
    };
    let event_time = raw.clock == Clock::Event;
    let target = match raw.kind {
        StoreKind::Memory => return Ok(StoreConfig::Memory { event_time }),
        StoreKind::Postgres => return validate_postgres(raw),
        StoreKind::Redis => RedisTarget::Standalone(
            raw.url
                .clone()
                .ok_or_else(|| invalid("store.url", "kind = \"redis\" needs a url"))?,
        ),
        StoreKind::Cluster if raw.nodes.is_empty() => {
            return Err(invalid(
                "store.nodes",
                "kind = \"cluster\" needs seed nodes",
            ))
        }
        StoreKind::Cluster => RedisTarget::Cluster(raw.nodes.clone()),
    };
    if event_time {
        return Err(invalid(
            "store.clock",
            "redis enforces ttls on its own wall clock: event time needs the memory store",
        ));
    }
    Ok(StoreConfig::Redis(RedisOptions {
        filter_backend,
        allow_eviction: raw.allow_eviction,
        require_eviction_check: raw.require_eviction_check,
        auth: Auth {
            username: raw.username.clone(),
            password: raw.password.clone(),
        },
        tls: validate_tls(&raw.tls, &target)?,
        ..RedisOptions::new(target, raw.key_prefix.clone())
    }))
}

/// `kind = "postgres"`: a `postgres://` URL whose `sslmode` idemgate
/// knows, a plain schema name, and what the Redis store alone reads left
/// unset.
fn validate_postgres(raw: &RawStore) -> Result<StoreConfig, ConfigError> {
    use crate::store::postgres::{split_sslmode, SslMode};
    let url = raw
        .url
        .clone()
        .ok_or_else(|| invalid("store.url", "kind = \"postgres\" needs a url"))?;
    let (_, sslmode) = split_sslmode(&url).map_err(|e| invalid("store.url", e.to_string()))?;
    if raw.username.is_some() {
        return Err(invalid(
            "store.username",
            "kind = \"postgres\" takes the user from the url (postgres://user@host/db)",
        ));
    }
    for (set, name) in [
        (!raw.nodes.is_empty(), "store.nodes"),
        (raw.filter != FilterChoice::Auto, "store.filter"),
        (raw.allow_eviction, "store.allow_eviction"),
        (raw.require_eviction_check, "store.require_eviction_check"),
    ] {
        if set {
            return Err(invalid(name, "only for a redis store"));
        }
    }
    if raw.clock == Clock::Event {
        return Err(invalid("store.clock", "event time needs the memory store"));
    }
    let mut options = PostgresOptions::new(url);
    options.password = raw.password.clone();
    if let Some(schema) = &raw.schema {
        let plain = schema.len() <= 63
            && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && schema
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !plain {
            return Err(invalid(
                "store.schema",
                "lowercase letters, digits and '_', starting with a letter or '_', at most 63",
            ));
        }
        options.schema = schema.clone();
    }
    if let Some(size) = raw.pool_size {
        options.pool_size = size.get();
    }
    if let Some(janitor) = &raw.janitor {
        let defaults = JanitorOptions::default();
        options.janitor = JanitorOptions {
            interval: janitor.interval.unwrap_or(defaults.interval),
            batch_rows: janitor.batch_rows.map_or(defaults.batch_rows, |n| n.get()),
        };
        if options.janitor.interval.is_zero() {
            return Err(invalid("store.janitor.interval", "must be above zero"));
        }
    }
    if let Some(files) = tls_files(&raw.tls)? {
        if sslmode == SslMode::Disable {
            return Err(invalid(
                "store.tls",
                "the url says sslmode=disable: TLS files need a TLS connection",
            ));
        }
        options.tls = Some(files);
    }
    Ok(StoreConfig::Postgres(options))
}

impl StoreConfig {
    /// The backend's name, as `store.kind` spells it (a cluster is
    /// `redis`: its target says `cluster`).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            StoreConfig::Memory { event_time: false } => "memory",
            StoreConfig::Memory { event_time: true } => "memory (event time)",
            StoreConfig::Redis(_) => "redis",
            StoreConfig::Postgres(_) => "postgres",
        }
    }

    /// Where it is, secrets redacted; empty for the memory store.
    pub(crate) fn target(&self) -> String {
        match self {
            StoreConfig::Memory { .. } => String::new(),
            StoreConfig::Redis(options) => options.target.to_string(),
            StoreConfig::Postgres(options) => crate::store::postgres::redact(&options.url),
        }
    }
}

/// The PostgreSQL store keeps exact claims only: a tiered stream on it is
/// refused, named.
pub(super) fn exact_only(streams: &[StreamConfig]) -> Result<(), ConfigError> {
    match streams
        .iter()
        .enumerate()
        .find(|(_, s)| s.spec.mode == Mode::Tiered)
    {
        Some((index, stream)) => Err(invalid(
            format!("streams[{index}].mode"),
            format!(
                "stream {:?} is tiered, and the postgres store keeps exact claims only: \
                 use mode = \"exact\" or a redis store",
                stream.spec.name
            ),
        )),
        None => Ok(()),
    }
}

/// TLS files only make sense with `rediss://`, and a client certificate
/// only with its key.
fn validate_tls(raw: &RawTls, target: &RedisTarget) -> Result<Option<TlsFiles>, ConfigError> {
    let Some(files) = tls_files(raw)? else {
        return Ok(None);
    };
    let urls = match target {
        RedisTarget::Standalone(url) => vec![url.as_str()],
        RedisTarget::Cluster(nodes) => nodes.iter().map(String::as_str).collect(),
    };
    if let Some(plain) = urls.iter().find(|u| !u.starts_with("rediss://")) {
        return Err(invalid(
            "store.tls",
            format!(
                "{} is not a rediss:// url: TLS files need a TLS connection",
                crate::store::redis::redact(plain)
            ),
        ));
    }
    Ok(Some(files))
}

/// `[store.tls]`'s files, on either backend: none, or a client
/// certificate with its key.
fn tls_files(raw: &RawTls) -> Result<Option<TlsFiles>, ConfigError> {
    let files = TlsFiles {
        ca_file: raw.ca_file.clone(),
        cert_file: raw.cert_file.clone(),
        key_file: raw.key_file.clone(),
    };
    if files == TlsFiles::default() {
        return Ok(None);
    }
    if raw.cert_file.is_some() != raw.key_file.is_some() {
        return Err(invalid(
            "store.tls",
            "cert_file and key_file go together (a client certificate and its key)",
        ));
    }
    Ok(Some(files))
}
