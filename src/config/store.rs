//! The store's section of a config, checked: Redis (its URL, TLS files,
//! key prefix) or PostgreSQL (its URL, schema, pool, janitor), and what a
//! PostgreSQL store refuses of the streams (docs/design.md §6).

use super::*;

pub(super) fn validate_store(raw: &RawStore) -> Result<StoreConfig, ConfigError> {
    foreign_fields(raw)?;
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
    Ok(StoreConfig::Redis(RedisOptions {
        filter_backend,
        allow_eviction: raw.allow_eviction,
        require_eviction_check: raw.require_eviction_check,
        auth: Auth {
            username: raw.username.clone(),
            password: raw.password.clone(),
        },
        tls: validate_tls(&raw.tls, &target)?,
        tier1_layout: raw.tier1_layout,
        ..RedisOptions::new(target, raw.key_prefix.clone())
    }))
}

/// Which kinds read each field of `[store]`, where it is set: one table,
/// so a field no backend of this kind reads is refused, named, instead of
/// silently ignored (a `url` without `kind = "redis"` would otherwise run
/// on the memory store, its claims dying with the replica).
fn foreign_fields(raw: &RawStore) -> Result<(), ConfigError> {
    use StoreKind::{Cluster, Memory, Postgres, Redis};
    let fields: [(&str, bool, &[StoreKind]); 14] = [
        ("url", raw.url.is_some(), &[Redis, Postgres]),
        ("nodes", !raw.nodes.is_empty(), &[Cluster]),
        (
            "key_prefix",
            raw.key_prefix != super::raw::default_prefix(),
            &[Redis, Cluster],
        ),
        (
            "filter",
            raw.filter != FilterChoice::Auto,
            &[Redis, Cluster],
        ),
        ("allow_eviction", raw.allow_eviction, &[Redis, Cluster]),
        (
            "require_eviction_check",
            raw.require_eviction_check,
            &[Redis, Cluster],
        ),
        ("username", raw.username.is_some(), &[Redis, Cluster]),
        (
            "password",
            raw.password.is_some(),
            &[Redis, Cluster, Postgres],
        ),
        (
            "tls",
            raw.tls != RawTls::default(),
            &[Redis, Cluster, Postgres],
        ),
        ("schema", raw.schema.is_some(), &[Postgres]),
        ("pool_size", raw.pool_size.is_some(), &[Postgres]),
        ("janitor", raw.janitor.is_some(), &[Postgres]),
        ("clock", raw.clock == Clock::Event, &[Memory]),
        (
            "tier1_layout",
            raw.tier1_layout.is_some(),
            &[Redis, Cluster],
        ),
    ];
    let Some((name, _, kinds)) = fields
        .into_iter()
        .find(|(_, set, kinds)| *set && !kinds.contains(&raw.kind))
    else {
        return Ok(());
    };
    let kinds: Vec<String> = kinds.iter().map(|k| format!("{:?}", k.name())).collect();
    let why = match (name, raw.kind) {
        ("username", Postgres) => {
            " (postgres takes the user from the url: postgres://user@host/db)"
        }
        ("clock", Redis | Cluster) => " (redis expires keys on its own wall clock)",
        (_, Memory) => " (the store is memory, the default: claims would live in this one replica)",
        _ => "",
    };
    Err(invalid(
        format!("store.{name}"),
        format!(
            "only for kind = {}, not {:?}{why}",
            kinds.join(" or "),
            raw.kind.name()
        ),
    ))
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
