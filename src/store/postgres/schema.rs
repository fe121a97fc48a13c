//! The store's tables, all in `store.schema`, created at the first start
//! where the role may (docs/design.md §6.1):
//!
//! - `claims_<key id in hex>`, one per stream ([`claims_name`]: lower
//!   case, so a query needs no quotes): the 16 first bytes of the source
//!   hash (the key, as on Redis), the 28-byte claim value of `value.rs`
//!   (holder, owner token, payload digest, claim time and done flag, so a
//!   compare and set compares its first 16 bytes and the done flag is one
//!   bit), and when the claim expires, in the store's milliseconds. A BRIN
//!   index on the expiry costs next to nothing (claims are written in
//!   roughly the order they expire) and lets the janitor find what expired
//!   without reading the table.
//! - `watermarks`: a partition's delivered watermark, per stream (its key
//!   id), topic tag and partition.
//! - `reset_ranges`: what operators' resets recorded per partition.
//! - `identities`: one stream identity per stream.
//! - `finished_runs`: records of finished runs a commit's metadata names
//!   (docs/design.md §7), by their unique name, with their expiry.
//!
//! Where the role may not create them, the start is refused with the SQL an
//! administrator runs.

use deadpool_postgres::Pool;
use tokio_postgres::error::SqlState;

use super::connect::{client, store_error};
use crate::store::{StoreError, StreamSpec};

/// How full inserts leave a claims table's heap pages: full. A done flag
/// or a re-stamp writes a new version of its row (84 B with its line
/// pointer, as the row); room left on the page would make that update HOT
/// (no second index entry, the old version pruned in place; the BRIN index
/// on `expires_at` does not block it, the update leaving the expiry as it
/// is). But a publish sets the done flags of a whole claim batch in one
/// transaction, and a batch's rows fill whole pages: every row of a page
/// needs its new version there before any old one can be pruned, so an
/// update stays on its page only where inserts left half of it free, and
/// the room pruning gives back is then below what inserts must leave
/// free. Less room moves bytes from the index to the heap and saves none:
/// `idemgate-bench claims` (every claim settled by a done flag, half a TTL
/// between vacuums) measured 212 B a claim at 100 and 218 at 80, fresh
/// claims 143 and 165; the same writes in SQL, vacuumed every quarter
/// TTL, 218 at 100, 223 at 90, 222 at 80, 238 at 70, 261 at 60, 286 at
/// 50.
///
/// What a done flag costs is its old version and index entry until vacuum
/// frees them for the next inserts: with autovacuum at its defaults (a
/// table is vacuumed once its dead rows pass a fifth of it, a tenth of a
/// TTL where every claim is settled so) the bench measured 182 B a
/// settled claim against 155 fresh in steady state (1.17x; 152 against
/// 137 after the first TTL). Settling without rewriting the row would
/// take a done flag kept apart from it, compare and set on its owner
/// against re-stamps and releases included, and a layout change in two
/// phases: not this table's.
const FILLFACTOR: u32 = 100;

/// A stream's claims table, unqualified: `claims_` and the bytes of its
/// key id in hex, zero-padded to 8 digits (`Uj`: `claims_0000556a`). A key
/// id is case-sensitive (`Ab` and `ab` are two streams); its hex keeps
/// them apart in lower case, and 8 digits (a key id has at most 4 bytes)
/// never equal a name of before, `claims_<key id>` (`legacy.rs`).
pub fn claims_name(key_id: &str) -> String {
    format!("claims_{:0>8}", hex::encode(key_id))
}

/// The key id whose claims table this is ([`claims_name`]'s inverse), for
/// a reader that finds the tables before it knows the streams (the soak's
/// check of unsettled claims); `None` for any other name.
pub fn claims_key_id(table: &str) -> Option<String> {
    let bytes = hex::decode(table.strip_prefix("claims_")?).ok()?;
    let start = bytes.iter().position(|&b| b != 0)?;
    String::from_utf8(bytes.get(start..)?.to_vec()).ok()
}

/// The BRIN index on a claims table's expiry.
pub(super) fn expiry_index(table: &str) -> String {
    format!("{table}_expires_at")
}

/// Names of one schema's tables, qualified and quoted (the schema's name
/// is the config's, of any case; the tables' are lower case).
#[derive(Clone, Debug)]
pub(super) struct Tables {
    pub(super) schema: String,
    pub(super) watermarks: String,
    pub(super) ranges: String,
    pub(super) identities: String,
    pub(super) runs: String,
    /// Per stream, in stream order.
    pub(super) claims: Vec<String>,
}

impl Tables {
    pub(super) fn new(schema: &str, streams: &[StreamSpec]) -> Tables {
        let name = |table: &str| format!("\"{schema}\".\"{table}\"");
        Tables {
            schema: schema.to_string(),
            watermarks: name("watermarks"),
            ranges: name("reset_ranges"),
            identities: name("identities"),
            runs: name("finished_runs"),
            claims: streams
                .iter()
                .map(|s| name(&claims_name(&s.key_id)))
                .collect(),
        }
    }

    /// Every statement that makes the schema, each idempotent.
    pub(super) fn ddl(&self, streams: &[StreamSpec]) -> Vec<String> {
        let mut out = vec![
            format!("CREATE SCHEMA IF NOT EXISTS \"{}\"", self.schema),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (stream text NOT NULL, topic integer NOT NULL, \
                 partition integer NOT NULL, below bigint NOT NULL, \
                 PRIMARY KEY (stream, topic, partition))",
                self.watermarks
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (stream text NOT NULL, topic integer NOT NULL, \
                 partition integer NOT NULL, abandoned bigint[] NOT NULL DEFAULT '{{}}', \
                 replay_from bigint, replay_to bigint, PRIMARY KEY (stream, topic, partition))",
                self.ranges
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (stream text PRIMARY KEY, identity text NOT NULL)",
                self.identities
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (stream text NOT NULL, topic integer NOT NULL, \
                 partition integer NOT NULL, writer bigint NOT NULL, sequence bigint NOT NULL, \
                 expires_at bigint NOT NULL, content bytea NOT NULL, \
                 PRIMARY KEY (stream, topic, partition, writer, sequence))",
                self.runs
            ),
        ];
        for (table, spec) in self.claims.iter().zip(streams) {
            // The expiry first: an 8-byte column right after the row
            // header needs no padding.
            out.push(format!(
                "CREATE TABLE IF NOT EXISTS {table} (expires_at bigint NOT NULL, \
                 hash bytea PRIMARY KEY, value bytea NOT NULL) WITH (fillfactor = {FILLFACTOR})"
            ));
            out.push(format!(
                "CREATE INDEX IF NOT EXISTS \"{}\" ON {table} USING brin (expires_at)",
                expiry_index(&claims_name(&spec.key_id))
            ));
        }
        out
    }

    /// What an administrator runs for a role that may not create the
    /// tables itself.
    pub(super) fn for_an_administrator(&self, streams: &[StreamSpec], user: &str) -> String {
        let mut sql: Vec<String> = self.ddl(streams);
        sql.push(format!(
            "GRANT USAGE ON SCHEMA \"{}\" TO \"{user}\"",
            self.schema
        ));
        sql.push(format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA \"{}\" TO \"{user}\"",
            self.schema
        ));
        sql.iter().map(|s| format!("{s};\n")).collect()
    }

    /// Every table, qualified and quoted.
    pub(super) fn all(&self) -> impl Iterator<Item = &str> {
        [&self.watermarks, &self.ranges, &self.identities, &self.runs]
            .into_iter()
            .chain(&self.claims)
            .map(String::as_str)
    }
}

/// Creates what is missing. Only where something is: `CREATE SCHEMA IF
/// NOT EXISTS` checks the role's CREATE right before it looks, so a role
/// without it starts on tables an administrator made. Two replicas
/// creating at once may collide on the catalog; the loser tries again.
pub(super) async fn ensure(
    pool: &Pool,
    tables: &Tables,
    streams: &[StreamSpec],
    user: &str,
) -> Result<(), StoreError> {
    let mut client = client(pool).await?;
    super::legacy::rename(&mut client, tables, streams).await?;
    let names: Vec<&str> = tables.all().collect();
    let mut attempt = 0;
    loop {
        let row = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1), \
                 (SELECT count(*) FROM unnest($2::text[]) AS t(name) \
                  WHERE to_regclass(t.name) IS NULL)",
                &[&tables.schema, &names],
            )
            .await
            .map_err(|e| store_error("schema check", e))?;
        let (schema_exists, missing): (bool, i64) = (row.get(0), row.get(1));
        if schema_exists && missing == 0 {
            return Ok(());
        }
        let Err(error) = create(&mut client, tables, streams).await else {
            return Ok(());
        };
        let code = error.code().cloned();
        if code == Some(SqlState::INSUFFICIENT_PRIVILEGE) {
            return Err(StoreError::Refused(format!(
                "the postgres role {user:?} may not create idemgate's tables in schema {:?} \
                 ({}); have an administrator run:\n{}",
                tables.schema,
                error
                    .as_db_error()
                    .map_or_else(|| error.to_string(), |db| db.message().to_string()),
                tables.for_an_administrator(streams, user)
            )));
        }
        let collided = code == Some(SqlState::UNIQUE_VIOLATION)
            || code == Some(SqlState::DUPLICATE_TABLE)
            || code == Some(SqlState::DUPLICATE_SCHEMA);
        attempt += 1;
        if !collided || attempt >= 3 {
            return Err(store_error("schema", error));
        }
    }
}

/// The DDL in one transaction that first takes an advisory lock named
/// after the schema: replicas starting together on an empty database
/// create it one after the other (the later ones find every table there),
/// instead of colliding in the catalog (`CREATE ... IF NOT EXISTS` is not
/// safe against a concurrent create of the same name). A failure rolls
/// the whole creation back.
async fn create(
    client: &mut deadpool_postgres::Object,
    tables: &Tables,
    streams: &[StreamSpec],
) -> Result<(), tokio_postgres::Error> {
    let transaction = client.transaction().await?;
    transaction
        .execute(
            "SELECT pg_advisory_xact_lock(hashtext('idemgate schema ' || $1::text))",
            &[&tables.schema],
        )
        .await?;
    for statement in tables.ddl(streams) {
        transaction.batch_execute(&statement).await?;
    }
    transaction.commit().await
}
