//! How to reach the PostgreSQL store and what it keeps: the options the
//! config builds, each default written here once, and the URL's `sslmode`,
//! which idemgate reads itself (the client library knows only three of
//! libpq's modes).

use std::time::Duration;

use crate::store::redis::TlsFiles;
use crate::store::StoreError;

/// Schema every table lives in, where `store.schema` does not say.
pub const DEFAULT_SCHEMA: &str = "idemgate";
/// Connections in the pool, where `store.pool_size` does not say.
pub const DEFAULT_POOL_SIZE: usize = 4;
/// How often the janitor deletes expired claims.
pub const DEFAULT_JANITOR_INTERVAL: Duration = Duration::from_secs(60);
/// Rows one janitor `DELETE` removes at most.
pub const DEFAULT_JANITOR_BATCH_ROWS: u32 = 10_000;

/// Its `Debug` hides the password, in the field and in the URL.
#[derive(Clone)]
pub struct PostgresOptions {
    /// `postgres://` or `postgresql://`, with `sslmode` in its query.
    pub url: String,
    /// Where it is not in the URL.
    pub password: Option<String>,
    pub schema: String,
    pub pool_size: usize,
    /// A CA instead of the system's roots, and a client certificate.
    pub tls: Option<TlsFiles>,
    pub janitor: JanitorOptions,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("url", &redact(&self.url))
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("tls", &self.tls)
            .field("janitor", &self.janitor)
            .finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JanitorOptions {
    pub interval: Duration,
    pub batch_rows: u32,
}

impl Default for JanitorOptions {
    fn default() -> JanitorOptions {
        JanitorOptions {
            interval: DEFAULT_JANITOR_INTERVAL,
            batch_rows: DEFAULT_JANITOR_BATCH_ROWS,
        }
    }
}

impl PostgresOptions {
    /// The defaults: schema `idemgate`, four connections, the janitor
    /// every minute in batches of 10,000 rows.
    pub fn new(url: impl Into<String>) -> PostgresOptions {
        PostgresOptions {
            url: url.into(),
            password: None,
            schema: DEFAULT_SCHEMA.into(),
            pool_size: DEFAULT_POOL_SIZE,
            tls: None,
            janitor: JanitorOptions::default(),
        }
    }
}

/// The URL's `sslmode`, as idemgate applies it (libpq's names; libpq's
/// default, `prefer`, where the URL has none):
///
/// - `disable`: no TLS.
/// - `prefer`: TLS where the server offers it, plain otherwise; the
///   server's certificate is not verified (a TLS session's own checks
///   only: its signature over the handshake).
/// - `require`: TLS or no connection; the certificate is not verified,
///   unless `store.tls.ca_file` is set: then it must chain to that CA
///   (libpq does the same where a root certificate file exists).
/// - `verify-ca`: TLS; the certificate must chain to `store.tls.ca_file`
///   (the system's roots without it); the host name is not checked.
/// - `verify-full`: as `verify-ca`, and the certificate must name the
///   host of the URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

/// Splits `sslmode` off a URL: the URL without it (what the client
/// library parses) and the mode. Refuses a URL of another scheme and an
/// unknown mode.
pub fn split_sslmode(url: &str) -> Result<(String, SslMode), StoreError> {
    if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
        return Err(StoreError::Refused(format!(
            "{} is not a postgres:// or postgresql:// url",
            redact(url)
        )));
    }
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, query),
        None => return Ok((url.to_string(), SslMode::Prefer)),
    };
    let mut mode = SslMode::Prefer;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sslmode", value)) => {
                mode = SslMode::parse(value).ok_or_else(|| {
                    StoreError::Refused(format!(
                        "sslmode={value}: use disable, prefer, require, verify-ca or verify-full"
                    ))
                })?;
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, mode))
}

/// The URL with any password replaced, for logs and errors.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}{tail}")
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_is_read_off_the_url_and_the_rest_kept() {
        let (url, mode) =
            split_sslmode("postgres://ig@db:5432/ig?sslmode=verify-full&application_name=x")
                .unwrap();
        assert_eq!(url, "postgres://ig@db:5432/ig?application_name=x");
        assert_eq!(mode, SslMode::VerifyFull);
        let (url, mode) = split_sslmode("postgresql://ig@db/ig").unwrap();
        assert_eq!(
            (url.as_str(), mode),
            ("postgresql://ig@db/ig", SslMode::Prefer)
        );
        let (url, mode) = split_sslmode("postgres://db/ig?sslmode=disable").unwrap();
        assert_eq!((url.as_str(), mode), ("postgres://db/ig", SslMode::Disable));
        assert!(split_sslmode("postgres://db/ig?sslmode=allow").is_err());
        assert!(split_sslmode("redis://db").is_err());
    }

    #[test]
    fn a_password_never_reaches_a_log_line() {
        assert_eq!(
            redact("postgres://ig:s3cret@db:5432/ig?sslmode=require"),
            "postgres://ig:***@db:5432/ig?sslmode=require"
        );
        assert_eq!(redact("postgres://db/ig"), "postgres://db/ig");
    }
}
