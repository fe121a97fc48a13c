//! What `idemgate check` asks a PostgreSQL server, read without creating
//! or changing anything: its version, who the store connects as, whether
//! that role may create the tables, and per table whether it exists, the
//! rights the role lacks on it, and its rows (live and dead) and size.
//! `ops::check::postgres` judges the answers.

use super::connect::{client, pool, store_error, Connected};
use super::schema::Tables;
use super::PostgresOptions;
use crate::store::{StoreError, StreamSpec};

/// The rights a worker needs on every table, in the order they are named.
pub const RIGHTS: [&str; 4] = ["SELECT", "INSERT", "UPDATE", "DELETE"];

/// What the server said about one table the store needs.
#[derive(Clone, Debug, PartialEq)]
pub struct TableFacts {
    /// Schema-qualified and quoted, as the store names it.
    pub name: String,
    /// The stream whose claims it holds; `None` for the shared tables.
    pub stream: Option<String>,
    pub exists: bool,
    /// The rights of [`RIGHTS`] the role lacks on it.
    pub missing_rights: Vec<&'static str>,
    /// Rows as the statistics collector last counted them.
    pub live_rows: i64,
    pub dead_rows: i64,
    /// Heap, indexes and TOAST (`pg_total_relation_size`).
    pub bytes: i64,
}

/// What a PostgreSQL server told `check`.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerFacts {
    /// `server_version_num`, e.g. 150018.
    pub version_num: i32,
    /// `server_version` as the server spells it.
    pub version: String,
    pub role: String,
    pub schema: String,
    /// Whether the role may create the schema (where it is missing) or
    /// tables in it: needed only while a table is missing.
    pub may_create: bool,
    pub tables: Vec<TableFacts>,
    /// The SQL an administrator runs to create what the store needs.
    pub create_sql: String,
    /// `fsync`, `synchronous_commit` and `synchronous_standby_names`: what
    /// a crash or a failover costs the claims.
    pub durability: Durability,
}

/// The server's settings that decide what a crash keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Durability {
    pub fsync: String,
    pub synchronous_commit: String,
    pub synchronous_standby_names: String,
}

/// Asks the server; an error is the connection's or a refused query's.
pub async fn inspect(
    options: &PostgresOptions,
    streams: &[StreamSpec],
) -> Result<ServerFacts, StoreError> {
    let Connected { pool, .. } = pool(options)?;
    let client = client(&pool).await?;
    let tables = Tables::new(&options.schema, streams);
    let row = client
        .query_one(
            "SELECT current_setting('server_version_num')::int, current_setting('server_version'), \
             current_user::text, \
             CASE WHEN EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) \
               THEN has_schema_privilege($1, 'CREATE') \
               ELSE has_database_privilege(current_database(), 'CREATE') END, \
             current_setting('fsync'), current_setting('synchronous_commit'), \
             current_setting('synchronous_standby_names')",
            &[&options.schema],
        )
        .await
        .map_err(|e| store_error("check", e))?;
    let role: String = row.get(2);
    let names: Vec<&str> = tables.all().collect();
    let rows = client
        .query(
            "SELECT t.name, c.oid IS NOT NULL, \
               CASE WHEN c.oid IS NULL THEN NULL ELSE ARRAY[ \
                 has_table_privilege(c.oid, 'SELECT'), has_table_privilege(c.oid, 'INSERT'), \
                 has_table_privilege(c.oid, 'UPDATE'), has_table_privilege(c.oid, 'DELETE')] END, \
               coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0), \
               CASE WHEN c.oid IS NULL THEN 0 ELSE pg_total_relation_size(c.oid) END \
             FROM unnest($1::text[]) WITH ORDINALITY AS t(name, n) \
             LEFT JOIN pg_class c ON c.oid = to_regclass(t.name) \
             LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid \
             ORDER BY t.n",
            &[&names],
        )
        .await
        .map_err(|e| store_error("check", e))?;
    let streams_of: Vec<Option<String>> = [None, None, None]
        .into_iter()
        .chain(streams.iter().map(|s| Some(s.name.clone())))
        .collect();
    let facts = rows
        .iter()
        .zip(streams_of)
        .map(|(row, stream)| {
            let rights: Option<Vec<bool>> = row.get(2);
            TableFacts {
                name: row.get(0),
                stream,
                exists: row.get(1),
                missing_rights: rights
                    .map(|held| {
                        RIGHTS
                            .iter()
                            .zip(held)
                            .filter(|(_, held)| !held)
                            .map(|(right, _)| *right)
                            .collect()
                    })
                    .unwrap_or_default(),
                live_rows: row.get(3),
                dead_rows: row.get(4),
                bytes: row.get(5),
            }
        })
        .collect();
    Ok(ServerFacts {
        version_num: row.get(0),
        version: row.get(1),
        schema: options.schema.clone(),
        may_create: row.get(3),
        tables: facts,
        create_sql: tables.for_an_administrator(streams, &role),
        durability: Durability {
            fsync: row.get(4),
            synchronous_commit: row.get(5),
            synchronous_standby_names: row.get(6),
        },
        role,
    })
}
