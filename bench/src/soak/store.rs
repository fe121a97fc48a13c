//! The claim store a soak run owns and breaks: a redis-server (frozen,
//! and restarted from its own `SHUTDOWN SAVE` dump) or, with `--store
//! postgres`, a PostgreSQL server of the soak's own (`crate::pg_server`:
//! frozen with the postmaster and every child stopped, and restarted with
//! `pg_ctl stop -m fast` then a start on the same data directory). What
//! differs between the two (the faults' wording, the settled-claims check)
//! is here; the rest of the soak does not know which it has.

use std::path::Path;

use anyhow::Result;
use idemgate_testkit::servers::{unsettled_claims, version_line, RedisServer, ServerOptions};
use serde::Serialize;

use crate::pg_server::PgServer;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StoreKind {
    Redis,
    Postgres,
}

impl StoreKind {
    pub fn parse(text: &str) -> Result<StoreKind> {
        match text {
            "redis" => Ok(StoreKind::Redis),
            "postgres" | "postgresql" => Ok(StoreKind::Postgres),
            other => anyhow::bail!("--store {other:?}: redis or postgres"),
        }
    }

    /// As the report names it.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Redis => "Redis",
            StoreKind::Postgres => "PostgreSQL",
        }
    }

    pub fn describe_freeze(self, seconds: f64) -> String {
        match self {
            StoreKind::Redis => format!("Redis SIGSTOP for {seconds:.0} s, then SIGCONT"),
            StoreKind::Postgres => format!(
                "PostgreSQL SIGSTOP (the postmaster and its children) for {seconds:.0} s, then SIGCONT"
            ),
        }
    }

    pub fn describe_restart(self, seconds: f64) -> String {
        match self {
            StoreKind::Redis => {
                format!("Redis SHUTDOWN SAVE, down {seconds:.0} s, restart from its dump")
            }
            StoreKind::Postgres => format!(
                "PostgreSQL `pg_ctl stop -m fast`, down {seconds:.0} s, start on the same data"
            ),
        }
    }
}

/// Where the store's binaries are.
pub(crate) struct Binaries<'a> {
    pub redis: &'a Path,
    /// The folder of `initdb` and `pg_ctl` (PostgreSQL runs).
    pub postgres: Option<&'a Path>,
}

pub(crate) enum SoakStore {
    Redis {
        server: RedisServer,
        version: String,
    },
    Postgres(PgServer),
}

impl SoakStore {
    /// A fresh server of `kind` under `dir`.
    pub fn start(kind: StoreKind, bin: &Binaries<'_>, dir: &Path) -> Result<SoakStore> {
        Ok(match (kind, bin.postgres) {
            (StoreKind::Redis, _) => SoakStore::Redis {
                version: version_line(bin.redis, "--version")?,
                server: RedisServer::start(
                    "soak",
                    ServerOptions {
                        binary: Some(bin.redis.to_path_buf()),
                        dir: Some(dir.to_path_buf()),
                        ..ServerOptions::default()
                    },
                ),
            },
            (StoreKind::Postgres, Some(pg_bin)) => {
                SoakStore::Postgres(PgServer::start(pg_bin, dir)?)
            }
            (StoreKind::Postgres, None) => anyhow::bail!("no PostgreSQL binaries"),
        })
    }

    pub fn url(&self) -> String {
        match self {
            SoakStore::Redis { server, .. } => server.url(),
            SoakStore::Postgres(pg) => pg.url.clone(),
        }
    }

    pub fn version(&self) -> String {
        match self {
            SoakStore::Redis { version, .. } => version.clone(),
            SoakStore::Postgres(pg) => pg.version.clone(),
        }
    }

    /// The server settings the report names (PostgreSQL's).
    pub fn settings(&self) -> Vec<(String, String)> {
        match self {
            SoakStore::Redis { .. } => Vec::new(),
            SoakStore::Postgres(pg) => pg
                .settings()
                .unwrap_or_else(|error| vec![("settings".into(), format!("not read: {error}"))]),
        }
    }

    /// Where a PostgreSQL server keeps its data (Redis: empty).
    pub fn data_dir(&self) -> String {
        match self {
            SoakStore::Redis { .. } => String::new(),
            SoakStore::Postgres(pg) => pg.data_dir(),
        }
    }

    pub fn freeze(&mut self) {
        match self {
            SoakStore::Redis { server, .. } => server.freeze(),
            SoakStore::Postgres(pg) => pg.freeze(),
        }
    }

    pub fn thaw(&mut self) {
        match self {
            SoakStore::Redis { server, .. } => server.thaw(),
            SoakStore::Postgres(pg) => pg.thaw(),
        }
    }

    /// Stops the server keeping its data, calls `wait` for the seconds it
    /// stays down, starts it again; what it took.
    pub fn restart(&mut self, down: f64, mut wait: impl FnMut(f64)) -> Result<String> {
        match self {
            SoakStore::Redis { server, .. } => {
                server.shutdown_save();
                wait(down);
                server.restart();
                Ok("restarted from dump.rdb".into())
            }
            SoakStore::Postgres(pg) => {
                let stop = pg.stop_fast()?;
                wait(down);
                let start = pg.start_again()?;
                Ok(format!(
                    "fast shutdown {:.1} s, start {:.1} s (accepting connections again); the data directory kept",
                    stop.as_secs_f64(),
                    start.as_secs_f64()
                ))
            }
        }
    }

    /// Claims not settled (neither flagged done nor below their
    /// partition's watermark) after the graceful stop.
    pub fn unsettled(&self, key_prefix: &str) -> Result<Vec<String>> {
        match self {
            SoakStore::Redis { server, .. } => Ok(unsettled_claims(&server.url(), key_prefix)),
            SoakStore::Postgres(pg) => super::postgres::unsettled_claims(pg),
        }
    }
}
