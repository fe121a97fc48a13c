//! The e2e bench's PostgreSQL runs: exact mode on `store.kind = "postgres"`,
//! against the bench's own server (`crate::pg_server`), with the store's
//! defaults (schema `idemgate`, its pool size, its janitor).
//!
//! - Before each run the store's schema is dropped, as Redis is emptied: the
//!   replicas find a database as fresh as the first run's and lay out their
//!   tables again when they open the store (before `go`, out of the timing).
//! - After the run, once the replicas have stopped: the stream's claims
//!   table on disk (`pg_total_relation_size`: heap, free-space and
//!   visibility maps, TOAST, every index), over its rows. Dead row versions
//!   (a done flag or a re-stamp is an `UPDATE`) are on disk until vacuum
//!   reuses their space, so they are in the figure, and counted beside it.
//! - The report's parts: the version and the settings that decide what a
//!   commit costs, the disk table, the cells of the main table.

use std::fmt::Write as _;

use anyhow::{bail, Result};
use serde::Serialize;

use super::report::{bytes, count, run_name};
use super::runs::{RunResult, Setup};
use crate::pg_server::PgServer;
use idemgate::store::postgres::DEFAULT_SCHEMA;

/// The claims table after a run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PgDisk {
    pub table: String,
    pub rows: u64,
    /// Dead row versions the statistics collector counts in it.
    pub dead_rows: u64,
    /// `pg_total_relation_size`: all of the below.
    pub total_bytes: u64,
    /// Heap with its free-space and visibility maps (TOAST left out).
    pub heap_bytes: u64,
    pub index_bytes: u64,
    pub toast_bytes: u64,
    pub bytes_per_claim: f64,
    /// Every table of the store's schema (watermarks, identities, ranges
    /// and the claims), indexes and TOAST included.
    pub schema_bytes: u64,
}

fn server(setup: &Setup) -> Result<&PgServer> {
    match &setup.postgres {
        Some(pg) => Ok(pg),
        None => bail!("a PostgreSQL run without the bench's PostgreSQL server"),
    }
}

/// Drops the store's schema (and everything in it) before a run.
pub(crate) fn reset(setup: &Setup) -> Result<()> {
    server(setup)?.query(&format!(
        "DROP SCHEMA IF EXISTS \"{DEFAULT_SCHEMA}\" CASCADE"
    ))?;
    Ok(())
}

fn number(text: &str) -> u64 {
    text.trim().parse().unwrap_or(0)
}

/// The stream's claims table (the one `claims_<hex key id>` of the schema: the
/// bench runs one stream), its partitions if it has any, on disk.
pub(crate) fn disk(setup: &Setup) -> Result<PgDisk> {
    disk_of(server(setup)?)
}

fn disk_of(pg: &PgServer) -> Result<PgDisk> {
    let tables = pg.query(&format!(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = '{DEFAULT_SCHEMA}' AND c.relkind IN ('r', 'p') \
         AND NOT c.relispartition AND c.relname LIKE 'claims\\_%'"
    ))?;
    let tables: Vec<&str> = tables.lines().filter(|l| !l.is_empty()).collect();
    let [table] = tables[..] else {
        bail!(
            "expected one claims table in schema {DEFAULT_SCHEMA} after the run, found {tables:?}"
        );
    };
    let qualified = format!("\"{DEFAULT_SCHEMA}\".\"{table}\"");
    let sizes = pg.query(&format!(
        "WITH t(relid) AS (SELECT '{qualified}'::regclass \
           UNION SELECT relid FROM pg_partition_tree('{qualified}')) \
         SELECT sum(pg_total_relation_size(t.relid)), sum(pg_table_size(t.relid)), \
         sum(pg_indexes_size(t.relid)), \
         sum(CASE WHEN c.reltoastrelid = 0 THEN 0 ELSE pg_total_relation_size(c.reltoastrelid) END), \
         sum(coalesce(s.n_dead_tup, 0)) \
         FROM t JOIN pg_class c ON c.oid = t.relid \
         LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid"
    ))?;
    let f: Vec<u64> = sizes.split('|').map(number).collect();
    let [total, table_size, index, toast, dead] = f[..] else {
        bail!("sizes of {qualified}: {sizes:?}");
    };
    let rows = number(&pg.query(&format!("SELECT count(*) FROM {qualified}"))?);
    if rows == 0 {
        bail!("{qualified} holds no claims after the run");
    }
    let schema_bytes = number(&pg.query(&format!(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = '{DEFAULT_SCHEMA}' AND c.relkind IN ('r', 'm')"
    ))?);
    Ok(PgDisk {
        table: format!("{DEFAULT_SCHEMA}.{table}"),
        rows,
        dead_rows: dead,
        total_bytes: total,
        heap_bytes: table_size.saturating_sub(toast),
        index_bytes: index,
        toast_bytes: toast,
        bytes_per_claim: total as f64 / rows as f64,
        schema_bytes,
    })
}

/// The versions table's row: the server and its settings.
pub(crate) fn version_row(pg: &PgServer) -> (String, String) {
    let settings = match pg.settings() {
        Ok(s) => s
            .iter()
            .map(|(k, v)| format!("`{k}` {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        Err(error) => format!("settings not read: {error}"),
    };
    (
        "PostgreSQL".into(),
        format!(
            "{} (a cluster of the bench's own, every setting at its default: {settings}; data in {})",
            pg.version,
            pg.data_dir()
        ),
    )
}

/// What the Machine-and-versions paragraph says of the server.
pub(crate) const CONDITIONS: &str = "The PostgreSQL runs use a PostgreSQL cluster the bench \
creates for itself (`initdb` as the `postgres` system user when the bench runs as root; its \
data directory under the run's directory, or a temporary one where the `postgres` user cannot \
reach that: the versions table says where, and on which file system), on a spare \
loopback port over TCP, `trust` authentication, one superuser `idemgate` owning the database \
`idemgate`. Every server setting is PostgreSQL's default, durability included (`fsync` on, \
`synchronous_commit` on: a commit waits for its WAL flush to disk); the versions table lists \
them. The store's schema is dropped before each PostgreSQL run, as Redis is emptied.";

/// What the main table says under it of the PostgreSQL rows.
pub(crate) const TABLE_NOTE: &str = "\nPostgreSQL rows: exact mode on `store.kind = \"postgres\"`, against the bench's own PostgreSQL server (every setting at its default, `fsync` and `synchronous_commit` on). Their round-trip, command and store-round columns are empty: the counting runs count Redis round trips through a RESP proxy, which a PostgreSQL connection does not pass. *PostgreSQL CPU* is the server's processes (the postmaster and all its children, reaped ones included), idle in the other runs; *bytes / claim on disk* is the claims table with its indexes and TOAST over its rows, after the run (see PostgreSQL on disk).\n";

/// The main table's last two cells: the server's CPU per million records
/// (wherever a server ran), and bytes per claim on disk (PostgreSQL runs).
pub(crate) fn cells(r: &RunResult) -> (String, String) {
    (
        r.database_cpu_s_per_million
            .map_or(String::new(), |s| format!("{s:.1}")),
        r.postgres_disk
            .as_ref()
            .map_or(String::new(), |d| format!("{:.0}", d.bytes_per_claim)),
    )
}

/// `### PostgreSQL on disk (clean runs)`, when there were PostgreSQL runs.
pub(crate) fn disk_section(runs: &[RunResult], md: &mut String) {
    let rows: Vec<(&RunResult, &PgDisk)> = runs
        .iter()
        .filter_map(|r| Some((r, r.postgres_disk.as_ref()?)))
        .collect();
    if rows.is_empty() {
        return;
    }
    md.push_str("### PostgreSQL on disk (clean runs)\n\n");
    md.push_str("Read once the replicas have stopped: `pg_total_relation_size` of the stream's claims table (heap with its free-space and visibility maps, TOAST, and every index: the primary key on the claim's hash and any other) over its rows (`count(*)`), as the files stand, before any vacuum of the runner's own. A claim is one row (hash, value, expiry); a done flag (set where no watermark raise covers the record) and a re-stamp are `UPDATE`s, whose old row versions stay on disk until vacuum marks their space free for reuse: the dead versions the statistics counted are listed, and their space is in the figure. The whole schema (claims, watermarks, identities, reset ranges) is given beside it.\n\n");
    md.push_str("| run | table | claims (rows) | dead row versions | heap | indexes | TOAST | total | bytes / claim | whole schema |\n");
    md.push_str("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for (r, d) in rows {
        let _ = writeln!(
            md,
            "| {} | `{}` | {} | {} | {} | {} | {} | {} | {:.1} | {} |",
            run_name(r),
            d.table,
            count(d.rows),
            count(d.dead_rows),
            bytes(d.heap_bytes as i64),
            bytes(d.index_bytes as i64),
            bytes(d.toast_bytes as i64),
            bytes(d.total_bytes as i64),
            d.bytes_per_claim,
            bytes(d.schema_bytes as i64),
        );
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs PostgreSQL's server binaries. A claims table laid out as the
    /// store lays it (expiry, 16-byte hash key, 28-byte value, a BRIN index
    /// on the expiry), every row's done flag then set by an `UPDATE`: the
    /// figure counts the rows once, the dead versions apart, and the bytes
    /// of heap, indexes and TOAST together.
    #[test]
    fn bytes_per_claim_are_the_claims_table_over_its_rows() {
        let bin = crate::pg_server::bin_dir(None).expect("PostgreSQL's binaries");
        let dir = std::env::temp_dir().join(format!("idemgate-pgdisk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pg = PgServer::start(&bin, &dir).expect("a server");
        assert!(disk_of(&pg).is_err(), "no claims table yet");
        pg.query(&format!(
            "CREATE SCHEMA {DEFAULT_SCHEMA}; \
             CREATE TABLE {DEFAULT_SCHEMA}.claims_ab1 (expires_at bigint NOT NULL, hash bytea PRIMARY KEY, value bytea NOT NULL); \
             CREATE INDEX ON {DEFAULT_SCHEMA}.claims_ab1 USING brin (expires_at); \
             CREATE TABLE {DEFAULT_SCHEMA}.watermarks (stream text, topic integer, partition integer, below bigint); \
             INSERT INTO {DEFAULT_SCHEMA}.claims_ab1 SELECT n, substring(sha256(n::text::bytea) FROM 1 FOR 16), \
               substring(sha512(n::text::bytea) FROM 1 FOR 28) FROM generate_series(1, 20000) n; \
             UPDATE {DEFAULT_SCHEMA}.claims_ab1 SET value = set_byte(value, 24, 128)"
        ))
        .unwrap();
        // The statistics are flushed at the end of a session's transaction.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let d = disk_of(&pg).unwrap();
        assert_eq!(d.table, format!("{DEFAULT_SCHEMA}.claims_ab1"));
        assert_eq!(d.rows, 20_000);
        assert_eq!(d.dead_rows, 20_000, "{d:?}");
        assert_eq!(
            d.total_bytes,
            d.heap_bytes + d.index_bytes + d.toast_bytes,
            "{d:?}"
        );
        assert!(d.index_bytes > 0 && d.heap_bytes > d.index_bytes, "{d:?}");
        // A live row is 24 B of header, 8 + 17 + 29 B of data and its 4-byte
        // line pointer, padded: about 90 B; a dead copy as much again, and the
        // primary key about 40 B a row.
        assert!(
            (150.0..300.0).contains(&d.bytes_per_claim),
            "{} bytes per claim: {d:?}",
            d.bytes_per_claim
        );
        assert!(d.schema_bytes >= d.total_bytes);
        drop(pg);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
