//! Claims tables of before their names were lower case: `claims_<key id>`
//! (`idemgate."claims_Uj"`, which every query had to quote) with its
//! indexes `claims_<key id>_expires_at` and `claims_<key id>_pkey`. At
//! start, a stream whose table has its old name and not its new one
//! ([`claims_name`]) gets it and its indexes renamed, its claims kept: an
//! upgraded deployment finds its tables.
//!
//! Replicas of the version before may still be running while the first
//! upgraded one starts (a rolling upgrade): their statements name the old
//! table, quoted. So the rename leaves a view of the old name over the new
//! table, `SELECT *` and nothing else, which PostgreSQL updates through
//! (`INSERT ... ON CONFLICT`, `UPDATE ... FROM`, `DELETE ... USING`
//! included): they go on claiming in the same rows until they are
//! replaced. The view costs nothing; an administrator may drop it once no
//! replica of before runs (docs/operating.md, "Upgrading").
//!
//! Replicas starting together rename once: the renames run in one
//! transaction under the advisory lock the schema's creation takes, and
//! each looks again under the lock, so a later replica finds the new names
//! and does nothing. A role that may not rename (not the tables' owner) is
//! refused with the SQL an administrator runs.

use deadpool_postgres::GenericClient;
use deadpool_postgres::Object;
use tokio_postgres::error::SqlState;
use tracing::{info, warn};

use super::connect::store_error;
use super::schema::{claims_name, expiry_index, Tables};
use crate::store::{StoreError, StreamSpec};

/// One stream's table and indexes under their old and new names,
/// unqualified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Renaming {
    pub(super) stream: String,
    pub(super) old_table: String,
    pub(super) new_table: String,
    /// The expiry's BRIN index and the primary key's, old and new: a
    /// table's rename leaves its indexes' names as they were.
    pub(super) indexes: [(String, String); 2],
}

/// Pure: what each stream's tables were called, and are now.
pub(super) fn renamings(streams: &[StreamSpec]) -> Vec<Renaming> {
    streams
        .iter()
        .map(|spec| {
            let old_table = format!("claims_{}", spec.key_id);
            let new_table = claims_name(&spec.key_id);
            Renaming {
                stream: spec.name.clone(),
                indexes: [
                    (expiry_index(&old_table), expiry_index(&new_table)),
                    (format!("{old_table}_pkey"), format!("{new_table}_pkey")),
                ],
                old_table,
                new_table,
            }
        })
        .collect()
}

impl Renaming {
    /// The statements, in `schema`: the indexes renamed with their table
    /// (the primary key's constraint with its index), then the view of the
    /// old name that replicas of before still write through.
    fn sql(&self, schema: &str) -> Vec<String> {
        let table = format!(
            "ALTER TABLE \"{schema}\".\"{}\" RENAME TO \"{}\"",
            self.old_table, self.new_table
        );
        let indexes = self.indexes.iter().map(|(old, new)| {
            format!("ALTER INDEX IF EXISTS \"{schema}\".\"{old}\" RENAME TO \"{new}\"")
        });
        let view = format!(
            "CREATE VIEW \"{schema}\".\"{}\" AS SELECT * FROM \"{schema}\".\"{}\"",
            self.old_table, self.new_table
        );
        std::iter::once(table)
            .chain(indexes)
            .chain(std::iter::once(view))
            .collect()
    }
}

/// Renames the claims tables found under their old names only.
pub(super) async fn rename(
    client: &mut Object,
    tables: &Tables,
    streams: &[StreamSpec],
) -> Result<(), StoreError> {
    let schema = &tables.schema;
    let all = renamings(streams);
    // Without the lock first: on every start but the first after the
    // upgrade, no old name is there and nothing is locked.
    let there = found(&*client, schema, &all)
        .await
        .map_err(|e| store_error("looking for claims tables of old names", e))?;
    if there.iter().all(|&(old, _)| !old) {
        return Ok(());
    }
    let renamed = match locked(client, schema, &all).await {
        Ok(renamed) => renamed,
        Err(error) if error.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            let sql: String = all
                .iter()
                .flat_map(|r| r.sql(schema))
                .map(|s| format!("{s};\n"))
                .collect();
            return Err(StoreError::Refused(format!(
                "the postgres role may not rename idemgate's claims tables to their lower-case \
                 names ({}); have their owner run, for the tables that exist:\n{sql}",
                error
                    .as_db_error()
                    .map_or_else(|| error.to_string(), |db| db.message().to_string()),
            )));
        }
        Err(error) => return Err(store_error("renaming the claims tables", error)),
    };
    for r in renamed {
        info!(stream = %r.stream, schema = %schema, from = %r.old_table, to = %r.new_table,
            "claims table renamed to its lower-case name, its claims kept");
    }
    Ok(())
}

/// Whether each stream's old and new table exists (a table: the view a
/// rename leaves under the old name is not one). Read from `pg_class`
/// with the statement's snapshot, not `to_regclass`: a name looked up
/// without a lock may come from this connection's catalog cache, stale
/// after another replica's rename committed.
async fn found(
    client: &impl GenericClient,
    schema: &str,
    all: &[Renaming],
) -> Result<Vec<(bool, bool)>, tokio_postgres::Error> {
    let (old, new): (Vec<&str>, Vec<&str>) = all
        .iter()
        .map(|r| (r.old_table.as_str(), r.new_table.as_str()))
        .unzip();
    let rows = client
        .query(
            "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace \
                            WHERE s.nspname = $1 AND c.relname = t.o AND c.relkind IN ('r', 'p')), \
                    EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace \
                            WHERE s.nspname = $1 AND c.relname = t.n AND c.relkind IN ('r', 'p')) \
             FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(o, n, i) ORDER BY t.i",
            &[&schema, &old, &new],
        )
        .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// Under the schema's advisory lock, in one transaction: what is still
/// under its old name alone is renamed. The renamed, to log once
/// committed.
async fn locked(
    client: &mut Object,
    schema: &str,
    all: &[Renaming],
) -> Result<Vec<Renaming>, tokio_postgres::Error> {
    let transaction = client.transaction().await?;
    // A rename waits for the table's ACCESS EXCLUSIVE lock, and every
    // statement on it (the replicas of before go on claiming) queues behind
    // the wait: bounded, the start fails and is tried again instead.
    transaction
        .batch_execute("SET LOCAL lock_timeout = '5s'")
        .await?;
    transaction
        .execute(
            "SELECT pg_advisory_xact_lock(hashtext('idemgate schema ' || $1::text))",
            &[&schema],
        )
        .await?;
    let there = found(&transaction, schema, all).await?;
    let mut renamed = Vec::new();
    for (r, there) in all.iter().zip(there) {
        match there {
            (true, false) => {
                for statement in r.sql(schema) {
                    transaction.batch_execute(&statement).await?;
                }
                renamed.push(r.clone());
            }
            (true, true) => warn!(stream = %r.stream, schema = %schema, old = %r.old_table,
                new = %r.new_table,
                "a claims table of the old name is there beside the new one: the new one is used, the old one left as it is"),
            _ => {}
        }
    }
    transaction.commit().await?;
    Ok(renamed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Mode;
    use std::time::Duration;

    fn spec(key_id: &str) -> StreamSpec {
        StreamSpec {
            name: format!("s-{key_id}"),
            key_id: key_id.into(),
            mode: Mode::Exact,
            tier1_ttl: Duration::from_secs(60),
            filter: None,
            peak_rate: None,
        }
    }

    #[test]
    fn new_names_are_lower_case_short_and_never_an_old_name() {
        let ids = ["Uj", "uj", "b", "B", "12", "3132", "ZZZZ", "0000", "6578"];
        let streams: Vec<StreamSpec> = ids.iter().map(|id| spec(id)).collect();
        let all = renamings(&streams);
        assert_eq!(all[0].old_table, "claims_Uj");
        assert_eq!(all[0].new_table, "claims_0000556a");
        assert_eq!(
            all[0].indexes[0],
            (
                "claims_Uj_expires_at".into(),
                "claims_0000556a_expires_at".into()
            )
        );
        assert_eq!(
            all[0].indexes[1],
            ("claims_Uj_pkey".into(), "claims_0000556a_pkey".into())
        );
        for r in &all {
            for name in std::iter::once(&r.new_table).chain(r.indexes.iter().map(|(_, new)| new)) {
                assert_eq!(name, &name.to_lowercase(), "{name}");
                assert!(name.len() <= 63, "{name}: postgres cuts names at 63 bytes");
            }
            for other in &all {
                assert_ne!(r.new_table, other.old_table, "{r:?} and {other:?}");
            }
        }
        for (r, id) in all.iter().zip(ids) {
            assert_eq!(
                super::super::schema::claims_key_id(&r.new_table).as_deref(),
                Some(id),
                "a table's name gives its key id back"
            );
        }
        assert_eq!(super::super::schema::claims_key_id("claims_Uj"), None);
        let mut new: Vec<&str> = all.iter().map(|r| r.new_table.as_str()).collect();
        new.sort();
        new.dedup();
        assert_eq!(
            new.len(),
            ids.len(),
            "a key id of each case, a name of its own"
        );
    }
}
