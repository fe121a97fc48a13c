//! The PostgreSQL store's table names: lower case, so a DBA's query needs
//! no quotes, and the mixed-case claims tables of before (`claims_Uj`)
//! found and renamed at start, their claims kept.

use std::time::Duration;

use idemgate::store::postgres::PostgresStore;
use idemgate::store::{ClaimOutcome, ClaimStore, Mode, StreamId, StreamSpec};

use super::conformance::{claim_on, hash, on, MINUTE, T0};
use super::postgres_only::{admin, options, Postgres};
use super::Harness;

/// Two streams whose key ids differ in case only: two tables.
fn streams() -> Vec<StreamSpec> {
    ["Uj", "uj"]
        .into_iter()
        .enumerate()
        .map(|(n, key_id)| StreamSpec {
            name: format!("s{n}"),
            key_id: key_id.into(),
            mode: Mode::Exact,
            tier1_ttl: Duration::from_secs(12 * 3600),
            filter: None,
            peak_rate: None,
        })
        .collect()
}

/// The schema's tables and indexes, by name.
async fn relations(schema: &str) -> Vec<String> {
    let mut names: Vec<String> = admin()
        .await
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'i')",
            &[&schema],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_table_and_index_name_is_lower_case() {
    let pg = Postgres::new("lower-case").await;
    let store = pg.store(streams()).await;
    assert_eq!(
        store.claims_table(StreamId(0)).unwrap(),
        format!("\"{}\".\"claims_0000556a\"", pg.schema)
    );
    let names = relations(&pg.schema).await;
    for table in ["claims_0000556a", "claims_0000756a", "watermarks"] {
        assert!(names.iter().any(|n| n == table), "{table} not in {names:?}");
    }
    for name in &names {
        assert_eq!(name, &name.to_lowercase(), "in {names:?}");
    }
    // As a DBA writes it: no quotes.
    admin()
        .await
        .query(
            &format!("SELECT count(*) FROM {}.claims_0000556a", pg.schema),
            &[],
        )
        .await
        .unwrap();
}

/// A deployment of before: its claims tables under `claims_<key id>`. The
/// replicas of the upgrade start together: one renames, every one starts,
/// and the claims made before are still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_tables_of_mixed_case_names_are_renamed_at_start_with_their_claims() {
    let pg = Postgres::new("legacy-names").await;
    let first = claim_on(StreamId(0), hash(pg.salt(), 1), on(0, 1), T0);
    let store = pg.store(streams()).await;
    assert_eq!(
        store.claim(&[first]).await.unwrap(),
        vec![ClaimOutcome::Won { fresh: true }]
    );
    drop(store);
    // Back to the names of before, as an older idemgate made them.
    let schema = &pg.schema;
    for (key_id, hex) in [("Uj", "0000556a"), ("uj", "0000756a")] {
        admin()
            .await
            .batch_execute(&format!(
                "ALTER TABLE \"{schema}\".claims_{hex} RENAME TO \"claims_{key_id}\"; \
                 ALTER INDEX \"{schema}\".claims_{hex}_expires_at RENAME TO \"claims_{key_id}_expires_at\"; \
                 ALTER INDEX \"{schema}\".claims_{hex}_pkey RENAME TO \"claims_{key_id}_pkey\""
            ))
            .await
            .unwrap();
    }
    assert!(relations(schema).await.contains(&"claims_Uj".to_string()));

    let options = options("IDEMGATE_TEST_POSTGRES_URL", schema);
    let starts = (0..4).map(|_| {
        let options = options.clone();
        tokio::spawn(async move { PostgresStore::connect(&options, streams()).await })
    });
    let mut stores = Vec::new();
    for start in futures::future::join_all(starts).await {
        stores.push(
            start
                .expect("a start panicked")
                .expect("a replica failed to start"),
        );
    }
    assert_eq!(
        relations(schema).await,
        [
            "claims_0000556a",
            "claims_0000556a_expires_at",
            "claims_0000556a_pkey",
            "claims_0000756a",
            "claims_0000756a_expires_at",
            "claims_0000756a_pkey",
            "finished_runs",
            "finished_runs_pkey",
            "identities",
            "identities_pkey",
            "reset_ranges",
            "reset_ranges_pkey",
            "watermarks",
            "watermarks_pkey",
        ]
        .map(String::from),
        "renamed, and nothing made afresh beside them"
    );
    let copy = claim_on(StreamId(0), first.hash, on(0, 2), T0 + MINUTE);
    assert_eq!(
        stores[0].claim(&[copy]).await.unwrap(),
        vec![ClaimOutcome::Held { holder: on(0, 1) }],
        "the claim made before the rename is still there"
    );

    // A replica of before, still running in a rolling upgrade, writes under
    // the old name: a view over the new table takes its statements, in the
    // shapes its claim, done flag and release have (a CTE's INSERT ... ON
    // CONFLICT, UPDATE ... FROM, DELETE ... USING), into the same rows.
    let db = admin().await;
    let old = format!("\"{schema}\".\"claims_Uj\"");
    let new = format!("\"{schema}\".claims_0000556a");
    assert_eq!(
        kind_of(&db, schema, "claims_Uj").await,
        Some(b'v'),
        "the old name is a view"
    );
    let rows = |sql: String| {
        let db = &db;
        async move { db.execute(&sql, &[]).await.unwrap() }
    };
    let claimed = rows(format!(
        "WITH input AS (SELECT * FROM (VALUES (9::bigint, '\\x0102'::bytea, '\\x00'::bytea)) \
           AS i(expires_at, hash, value)), \
         ins AS (INSERT INTO {old} (expires_at, hash, value) SELECT * FROM input \
           ON CONFLICT (hash) DO NOTHING RETURNING hash) SELECT * FROM ins"
    ))
    .await;
    assert_eq!(claimed, 1, "an old replica's claim through the view");
    let again = rows(format!(
        "INSERT INTO {old} (expires_at, hash, value) VALUES (9, '\\x0102', '\\x01') \
         ON CONFLICT (hash) DO NOTHING"
    ))
    .await;
    assert_eq!(again, 0, "the new table's key decides a conflict");
    let flagged = rows(format!(
        "UPDATE {old} AS c SET value = '\\x02' FROM unnest(ARRAY['\\x0102'::bytea]) AS d(hash) \
         WHERE c.hash = d.hash"
    ))
    .await;
    assert_eq!(flagged, 1);
    let seen: Vec<u8> = db
        .query_one(
            &format!("SELECT value FROM {new} WHERE hash = '\\x0102'"),
            &[],
        )
        .await
        .expect("the row is in the new table")
        .get(0);
    assert_eq!(seen, vec![2]);
    let released = rows(format!(
        "DELETE FROM {old} AS c USING unnest(ARRAY['\\x0102'::bytea]) AS d(hash) \
         WHERE c.hash = d.hash"
    ))
    .await;
    assert_eq!(released, 1);
    // Started again, an upgraded replica renames nothing and keeps the view.
    drop(stores);
    pg.store(streams()).await;
    assert_eq!(kind_of(&db, schema, "claims_Uj").await, Some(b'v'));
}

/// The kind of a relation of the schema (`r` table, `v` view), if there.
async fn kind_of(db: &tokio_postgres::Client, schema: &str, name: &str) -> Option<u8> {
    db.query_opt(
        "SELECT c.relkind::\"char\" FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relname = $2",
        &[&schema, &name],
    )
    .await
    .unwrap()
    .map(|row| row.get::<_, i8>(0) as u8)
}
