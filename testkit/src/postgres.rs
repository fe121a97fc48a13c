//! The PostgreSQL store's tables as a test reads them from outside, through
//! `psql` (the test services' server, over TLS against their CA): the
//! claims of a stream and which of them are unsettled, read the way the
//! Redis helpers of `servers` read keys.

use std::process::Command;

/// The rows `sql` answers on `url`, each split into its fields. Panics,
/// with psql's words, where the query fails: a test that cannot look must
/// not pass.
pub fn psql(url: &str, sql: &str) -> Vec<Vec<String>> {
    let out = client("psql", url)
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-F",
            "|",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .output()
        .expect("running psql (postgresql-client)");
    assert!(
        out.status.success(),
        "psql {sql:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

/// One claim row, its 28-byte value taken apart (`store/value.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgClaim {
    pub topic: i64,
    pub partition: i64,
    pub offset: i64,
    pub done: bool,
    pub expires_at: i64,
}

/// Every claim of the stream with key id `key_id` in `schema`.
pub fn claims(url: &str, schema: &str, key_id: &str) -> Vec<PgClaim> {
    psql(
        url,
        &format!(
            "SELECT encode(value, 'hex'), expires_at FROM \"{schema}\".{}",
            idemgate::store::postgres::claims_name(key_id)
        ),
    )
    .into_iter()
    .map(|row| {
        let value: Vec<u8> = (0..row[0].len() / 2)
            .map(|i| u8::from_str_radix(&row[0][2 * i..2 * i + 2], 16).expect("a hex claim value"))
            .collect();
        assert_eq!(value.len(), 28, "a claim value of {} bytes", value.len());
        let int =
            |r: std::ops::Range<usize>| value[r].iter().fold(0i64, |n, b| (n << 8) | i64::from(*b));
        PgClaim {
            topic: int(0..3),
            partition: int(3..6),
            offset: int(6..12),
            done: value[24] & 0x80 != 0,
            expires_at: row[1].parse().expect("expires_at"),
        }
    })
    .collect()
}

/// The claims of the stream that are not settled: neither flagged done
/// nor below their partition's watermark.
pub fn unsettled_claims(url: &str, schema: &str, key_id: &str) -> Vec<String> {
    let marks: std::collections::HashMap<(i64, i64), i64> = psql(
        url,
        &format!(
            "SELECT topic, partition, below FROM \"{schema}\".watermarks WHERE stream = '{key_id}'"
        ),
    )
    .into_iter()
    .map(|row| {
        let n = |i: usize| row[i].parse::<i64>().expect("a number");
        ((n(0) & 0xff_ffff, n(1)), n(2))
    })
    .collect();
    claims(url, schema, key_id)
        .into_iter()
        .filter(|c| {
            let below = marks.get(&(c.topic, c.partition));
            !c.done && below.is_none_or(|w| c.offset >= *w)
        })
        .map(|c| {
            let below = marks.get(&(c.topic, c.partition));
            format!(
                "{:06x}/{}/{} (watermark {below:?})",
                c.topic, c.partition, c.offset
            )
        })
        .collect()
}

/// `pg_dump` of one schema to `to`: a backup to restore later.
pub fn dump_schema(url: &str, schema: &str, to: &std::path::Path) {
    let out = client("pg_dump", url)
        .args(["--schema", schema, "--no-owner", "-f"])
        .arg(to)
        .output()
        .expect("running pg_dump (postgresql-client)");
    assert!(
        out.status.success(),
        "pg_dump of {schema} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The schema dropped and restored from `dump` (a [`dump_schema`]): a
/// backup restored over the live database, everything written since gone.
pub fn restore_schema(url: &str, schema: &str, dump: &std::path::Path) {
    psql(url, &format!("DROP SCHEMA {schema} CASCADE"));
    let out = client("psql", url)
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(dump)
        .output()
        .expect("running psql (postgresql-client)");
    assert!(
        out.status.success(),
        "restoring {schema} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A PostgreSQL client program (`psql`, `pg_dump`) on `url`, over TLS
/// against the test services' CA.
fn client(program: &str, url: &str) -> Command {
    let mut command = Command::new(program);
    command
        .arg(url)
        .env("PGSSLROOTCERT", crate::env("IDEMGATE_TEST_POSTGRES_CA"))
        .env("PGCONNECT_TIMEOUT", "10");
    command
}
