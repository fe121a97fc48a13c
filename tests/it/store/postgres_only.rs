//! The PostgreSQL store: its conformance harness (a schema of its own per
//! test), and what only it has: tables it creates or refuses to start
//! without, a janitor that deletes expired claims, `sslmode`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use idemgate::clock::{Clock, ManualClock};
use idemgate::fingerprint::SourceHash;
use idemgate::store::postgres::{PostgresOptions, PostgresStore};
use idemgate::store::redis::TlsFiles;
use idemgate::store::{ClaimStore, Held, Mode, Publish, StoreError, StreamId, StreamSpec};
use idemgate_testkit::{env, unique};
use sha2::{Digest, Sha256};

use super::conformance::{claim, claim_on, hash, on, streams, EXACT, HOUR, MINUTE, T0};
use super::Harness;

pub struct Postgres {
    salt: String,
    /// The test's own schema: `t` and 20 hex digits of its salt's hash.
    pub(super) schema: String,
    /// The janitor's clock, shared by every store the test opens.
    clock: Arc<ManualClock>,
    opened: Mutex<Vec<Arc<PostgresStore>>>,
}

/// The test cluster's URL (verify-full against its CA) and CA.
pub fn options(url_var: &str, schema: &str) -> PostgresOptions {
    let mut options = PostgresOptions::new(env(url_var));
    options.schema = schema.to_string();
    options.tls = Some(TlsFiles {
        ca_file: Some(env("IDEMGATE_TEST_POSTGRES_CA").into()),
        cert_file: None,
        key_file: None,
    });
    options
}

/// The store keeps exact claims only: the suite's tiered streams are
/// opened as exact ones with the same tier-1 TTL (only the tests that need
/// no filter run on it).
fn exact(streams: Vec<StreamSpec>) -> Vec<StreamSpec> {
    streams
        .into_iter()
        .map(|s| StreamSpec {
            mode: Mode::Exact,
            filter: None,
            peak_rate: None,
            ..s
        })
        .collect()
}

/// A plain connection to the test database, as the store's own role, for
/// the harness's checks.
pub(super) async fn admin() -> tokio_postgres::Client {
    let url = env("IDEMGATE_TEST_POSTGRES_URL").replace("sslmode=verify-full", "sslmode=disable");
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot reach the test postgres: {e}"));
    tokio::spawn(connection);
    client
}

impl Postgres {
    pub async fn new(test: &str) -> Postgres {
        let salt = unique(test);
        let digest = Sha256::digest(salt.as_bytes());
        Postgres {
            schema: format!("t{}", &hex::encode(digest)[..20]),
            salt,
            clock: Arc::new(ManualClock::new()),
            opened: Mutex::new(Vec::new()),
        }
    }

    pub async fn store(&self, streams: Vec<StreamSpec>) -> Arc<PostgresStore> {
        let options = options("IDEMGATE_TEST_POSTGRES_URL", &self.schema);
        let clock: Arc<dyn Clock> = self.clock.clone();
        let store = PostgresStore::connect_on(&options, exact(streams), clock)
            .await
            .unwrap_or_else(|e| panic!("cannot open the postgres store: {e}"));
        let store = Arc::new(store);
        self.opened.lock().unwrap().push(store.clone());
        store
    }

    /// Moves the janitor's clock to `at` (milliseconds) if it is behind.
    pub(super) fn clock_to(&self, at: i64) {
        let behind = at - self.clock.wall_ms();
        if behind > 0 {
            self.clock.advance(Duration::from_millis(behind as u64));
        }
    }

    /// Rows of a stream's claims table expired at `at`.
    async fn expired_rows(&self, store: &PostgresStore, stream: StreamId, at: i64) -> i64 {
        let table = store.claims_table(stream).unwrap();
        admin()
            .await
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE expires_at <= $1"),
                &[&at],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// Checked after every conformance test: a janitor pass a hundred days
    /// after T0 leaves no expired row behind, whatever the test wrote.
    pub async fn no_expired_row_outlives_a_sweep(&self) {
        let store = self.store(streams()).await;
        let later = T0 + 2400 * HOUR;
        self.clock_to(later);
        store.sweep().await.expect("janitor pass");
        for stream in 0..streams().len() {
            let left = self.expired_rows(&store, StreamId(stream), later).await;
            assert_eq!(left, 0, "stream {stream} kept {left} expired rows");
        }
    }
}

#[async_trait]
impl Harness for Postgres {
    async fn open(&self, streams: Vec<StreamSpec>) -> Arc<dyn ClaimStore> {
        self.store(streams).await
    }
    fn salt(&self) -> &str {
        &self.salt
    }
    /// Claims expire on the claim's own timestamps, as on the memory
    /// store: nothing to do.
    async fn tier1_expired(&self, _: StreamId, _: &SourceHash) {}
    /// What a restore from an empty database would leave: every table of
    /// the test's schema empty.
    async fn lose_state(&self) {
        let client = admin().await;
        let tables: Vec<String> = client
            .query(
                "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables \
                 WHERE schemaname = $1",
                &[&self.schema],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert!(!tables.is_empty(), "no tables in schema {}", self.schema);
        client
            .batch_execute(&format!("TRUNCATE {}", tables.join(", ")))
            .await
            .unwrap();
    }
}

/// Replicas starting together on an empty database (a deployment's first
/// rollout): every one connects, the tables made once. Before the
/// creation took an advisory lock, two replicas of the bench's first run
/// collided in the catalog (23505 on pg_type) and one exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_starting_together_on_an_empty_database_all_connect() {
    for round in 0..3 {
        let pg = Postgres::new(&format!("together-{round}")).await;
        let options = options("IDEMGATE_TEST_POSTGRES_URL", &pg.schema);
        let starts = (0..6).map(|_| {
            let options = options.clone();
            tokio::spawn(async move { PostgresStore::connect(&options, exact(streams())).await })
        });
        for start in futures::future::join_all(starts).await {
            let store = start.expect("a start panicked");
            assert!(
                store.is_ok(),
                "a replica failed to start: {:?}",
                store.err()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_may_not_create_the_tables_is_refused_with_the_sql_to_run() {
    let pg = Postgres::new("nocreate").await;
    let options = options("IDEMGATE_TEST_POSTGRES_NOCREATE_URL", &pg.schema);
    let refused = PostgresStore::connect(&options, exact(streams())).await;
    let Err(StoreError::Refused(why)) = refused else {
        panic!("a role without CREATE was not refused");
    };
    for sql in [
        format!("CREATE SCHEMA IF NOT EXISTS \"{}\";", pg.schema),
        // `claims_` and the key id `ex` in hex.
        format!(
            "CREATE TABLE IF NOT EXISTS \"{}\".\"claims_00006578\"",
            pg.schema
        ),
        format!("GRANT USAGE ON SCHEMA \"{}\" TO \"nocreate\";", pg.schema),
    ] {
        assert!(why.contains(&sql), "{sql:?} not in: {why}");
    }
    // Once an administrator ran it, the same role starts.
    let admin = admin().await;
    let start = why.find("CREATE SCHEMA").unwrap();
    admin.batch_execute(&why[start..]).await.unwrap();
    let store = PostgresStore::connect(&options, exact(streams())).await;
    assert!(store.is_ok(), "{:?}", store.err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_janitor_deletes_expired_claims_in_bounded_batches_and_only_those() {
    let pg = Postgres::new("janitor").await;
    let ttl = Duration::from_secs(60);
    let short = vec![StreamSpec {
        name: "short".into(),
        key_id: "sh".into(),
        mode: Mode::Exact,
        tier1_ttl: ttl,
        filter: None,
        peak_rate: None,
    }];
    let store = pg.store(short.clone()).await;
    let stream = StreamId(0);
    let old: Vec<_> = (0..250)
        .map(|n| claim_on(stream, hash(pg.salt(), n), on(1, n as i64), T0))
        .collect();
    store.claim(&old).await.unwrap();
    let young = claim_on(stream, hash(pg.salt(), 999), on(1, 999), T0 + 2 * MINUTE);
    store.claim(&[young]).await.unwrap();
    // Ten minutes later the old claims expired: a late copy is novel.
    let late = claim_on(stream, old[0].hash, on(2, 1), T0 + 10 * MINUTE);
    assert_eq!(
        store.claim(&[late]).await.unwrap()[0],
        idemgate::store::ClaimOutcome::Won { fresh: true }
    );
    // The janitor at T0 + 2.5 min: the 249 other old rows go, in batches of
    // 100; the young claim and the late copy's stay.
    let mut options = options("IDEMGATE_TEST_POSTGRES_URL", &pg.schema);
    options.janitor.batch_rows = 100;
    let clock = Arc::new(ManualClock::new());
    clock.advance(Duration::from_millis(
        (T0 + 150_000 - clock.wall_ms()) as u64,
    ));
    let janitor = PostgresStore::connect_on(&options, short, clock)
        .await
        .unwrap();
    assert_eq!(janitor.sweep().await.unwrap(), 249);
    assert_eq!(pg.expired_rows(&janitor, stream, T0 + 150_000).await, 0);
    let table = janitor.claims_table(stream).unwrap();
    let left: i64 = admin()
        .await
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 2, "the young claim and the late copy's");
    assert_eq!(janitor.sweep().await.unwrap(), 0, "nothing twice");
}

/// The claims table's bytes (heap, indexes, TOAST) per row, after a
/// VACUUM, and its rows.
async fn bytes_per_row(table: &str) -> (f64, f64, i64) {
    let admin = admin().await;
    admin
        .batch_execute(&format!("VACUUM {table}"))
        .await
        .unwrap();
    let row = admin
        .query_one(
            &format!(
                "SELECT pg_total_relation_size('{table}'), pg_relation_size('{table}'), \
                 count(*) FROM {table}"
            ),
            &[],
        )
        .await
        .unwrap();
    let (total, heap, rows): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    (total as f64 / rows as f64, heap as f64 / rows as f64, rows)
}

/// How many bytes a claim costs on disk: 100,000 claims in rounds of
/// 1,000, measured with `pg_total_relation_size` over the rows after a
/// VACUUM; then once every claim got its done flag (an update: a new row
/// version, and the old one's space free after the VACUUM); then
/// generations of 100,000 more in the place of the last, once the janitor
/// deleted it: the table settles at a size and stays there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_costs_about_140_bytes_on_disk_and_the_table_does_not_grow() {
    let pg = Postgres::new("bytes").await;
    let store = pg.store(streams()).await;
    let table = store.claims_table(EXACT).unwrap().to_string();
    let mut sizes = Vec::new();
    for generation in 0..4i64 {
        let at = T0 + generation * 13 * HOUR;
        if generation > 0 {
            pg.clock_to(at);
            assert_eq!(store.sweep().await.unwrap(), 100_000);
        }
        for round in 0..100 {
            let batch: Vec<_> = (0..1000)
                .map(|n| {
                    let offset = generation * 100_000 + round * 1000 + n;
                    claim(EXACT, hash(pg.salt(), offset as u64), offset, at)
                })
                .collect();
            store.claim(&batch).await.unwrap();
            if generation == 0 && round == 99 {
                let (fresh, heap, rows) = bytes_per_row(&table).await;
                assert_eq!(rows, 100_000);
                println!("{rows} claims: {fresh:.1} bytes per claim in all, heap {heap:.1}");
                assert!(fresh < 150.0, "{fresh:.1} bytes per claim");
            }
        }
        for round in 0..100 {
            let done = (0..1000)
                .map(|n| {
                    let offset = generation * 100_000 + round * 1000 + n;
                    Held::from(&claim(EXACT, hash(pg.salt(), offset as u64), offset, at))
                })
                .collect();
            let publish = Publish {
                done,
                ..Publish::default()
            };
            assert!(store
                .publish(&publish)
                .await
                .unwrap()
                .done
                .iter()
                .all(|d| *d));
        }
        let (settled, heap, rows) = bytes_per_row(&table).await;
        assert_eq!(rows, 100_000);
        println!(
            "generation {generation}, done flags set: {settled:.1} bytes per claim, heap {heap:.1}"
        );
        sizes.push(settled);
    }
    // Each generation holds 100,000 rows and a dead version of each (its
    // done flag), in the space the last one left: where nothing were
    // reused, generation n would take n + 1 times the first's bytes. The
    // heap swings (VACUUM truncates its empty tail, or cannot while
    // another transaction runs), within twice the first generation.
    assert!(
        sizes.iter().all(|&s| s < 2.0 * sizes[0]),
        "the table kept growing: {sizes:?} bytes per claim"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_decides_what_is_verified() {
    let pg = Postgres::new("sslmode").await;
    let url = env("IDEMGATE_TEST_POSTGRES_URL");
    let with = |mode: &str, ca: bool| {
        let mut options = options("IDEMGATE_TEST_POSTGRES_URL", &pg.schema);
        options.url = url.replace("sslmode=verify-full", &format!("sslmode={mode}"));
        if !ca {
            options.tls = None;
        }
        options
    };
    for (mode, ca) in [
        ("disable", false),
        ("prefer", false),
        ("require", false),
        ("verify-ca", true),
        ("verify-full", true),
    ] {
        let opened = PostgresStore::connect(&with(mode, ca), exact(streams())).await;
        assert!(opened.is_ok(), "sslmode={mode}: {:?}", opened.err());
    }
    // verify-full without the test CA: the system's roots do not know it.
    let unknown = PostgresStore::connect(&with("verify-full", false), exact(streams())).await;
    assert!(
        unknown.is_err(),
        "a certificate of an unknown CA was accepted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_stream_is_refused_and_a_dead_server_is_unavailable() {
    let pg = Postgres::new("refusals").await;
    let options = options("IDEMGATE_TEST_POSTGRES_URL", &pg.schema);
    let refused = PostgresStore::connect(&options, streams()).await;
    assert!(
        matches!(&refused, Err(StoreError::Refused(why)) if why.contains("\"tiered\"")),
        "{:?}",
        refused.err()
    );
    let mut nowhere = options.clone();
    nowhere.url = "postgres://idemgate@127.0.0.1:1/idemgate?sslmode=disable".into();
    let error = PostgresStore::connect(&nowhere, exact(streams()))
        .await
        .err()
        .expect("a closed port answered");
    assert_eq!(error.cause(), "unavailable", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_naming_postgres_opens_this_store() {
    let pg = Postgres::new("config").await;
    let text = format!(
        r#"
[kafka]
"bootstrap.servers" = "127.0.0.1:9"
[store]
kind = "postgres"
url = "{url}"
schema = "{schema}"
pool_size = 2
[store.tls]
ca_file = "{ca}"
[store.janitor]
interval = "1h"
batch_rows = 500
[[streams]]
name = "bank"
inputs = ["raw.bank"]
clean = "clean.bank"
audit = "audit.bank"
profile = "bank-txn"
mode = "exact"
ttl = {{ explicit = "1h" }}
"#,
        url = env("IDEMGATE_TEST_POSTGRES_URL"),
        schema = pg.schema,
        ca = env("IDEMGATE_TEST_POSTGRES_CA"),
    );
    let config = idemgate::config::Config::parse(&text).expect("config");
    let store = idemgate::app::open_store(&config).await.expect("open");
    let record = claim_on(StreamId(0), hash(pg.salt(), 1), on(0, 1), T0);
    let again = claim_on(StreamId(0), hash(pg.salt(), 1), on(0, 2), T0 + MINUTE);
    assert_eq!(
        store.claim(&[record, again]).await.unwrap(),
        vec![
            idemgate::store::ClaimOutcome::Won { fresh: true },
            idemgate::store::ClaimOutcome::Held { holder: on(0, 1) },
        ]
    );
    let tables: i64 = admin()
        .await
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&pg.schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        tables, 5,
        "claims_<key id in hex>, watermarks, reset_ranges, identities, finished_runs"
    );
}

/// Two replicas' rounds at once, each setting the done flags of its own
/// claims and claiming copies of the other's, the shared new hashes in
/// opposite orders: every round answers (no deadlock fails one), and each
/// hash has one winner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_rounds_in_opposite_orders_never_deadlock() {
    use idemgate::store::{Claim, ClaimOutcome};
    let pg = Postgres::new("deadlock").await;
    let (left, right) = (pg.store(streams()).await, pg.store(streams()).await);
    for attempt in 0..5u64 {
        let base = attempt * 10_000;
        let hashes = |from: u64| (from..from + 300).map(|n| hash(pg.salt(), base + n));
        let mine = |partition: i32, from: u64| -> Vec<Claim> {
            hashes(from)
                .enumerate()
                .map(|(i, h)| claim_on(EXACT, h, on(partition, i as i64), T0))
                .collect()
        };
        let (left_own, right_own) = (mine(1, 0), mine(2, 1000));
        assert!(left
            .claim(&left_own)
            .await
            .unwrap()
            .iter()
            .all(|o| matches!(o, ClaimOutcome::Won { .. })));
        assert!(right
            .claim(&right_own)
            .await
            .unwrap()
            .iter()
            .all(|o| matches!(o, ClaimOutcome::Won { .. })));
        // Copies of the other's claims, and new hashes both claim.
        let mut left_claims = mine(3, 1000);
        left_claims.extend(mine(3, 2000));
        let mut right_claims = mine(4, 0);
        right_claims.extend(mine(4, 2000).into_iter().rev());
        let round = |store: Arc<PostgresStore>, own: Vec<Claim>, claims: Vec<Claim>| {
            tokio::spawn(async move {
                let publish = Publish {
                    done: own.iter().map(Held::from).collect(),
                    ..Publish::default()
                };
                store.round(&publish, &claims, &[]).await
            })
        };
        let (l, r) = tokio::join!(
            round(left.clone(), left_own, left_claims),
            round(right.clone(), right_own, right_claims),
        );
        let (l, r) = (
            l.unwrap().expect("left round"),
            r.unwrap().expect("right round"),
        );
        assert!(l.done.iter().chain(&r.done).all(|d| *d));
        for outcome in l.outcomes[..300].iter().chain(&r.outcomes[..300]) {
            assert!(
                matches!(
                    outcome,
                    ClaimOutcome::Held { .. } | ClaimOutcome::Duplicate { .. }
                ),
                "a copy of a held claim answered {outcome:?}"
            );
        }
        let left_new = &l.outcomes[300..];
        let right_new: Vec<_> = r.outcomes[300..].iter().rev().collect();
        for (a, b) in left_new.iter().zip(right_new) {
            let won = [a, b]
                .iter()
                .filter(|o| matches!(o, ClaimOutcome::Won { .. }))
                .count();
            assert_eq!(won, 1, "left {a:?} right {b:?}");
        }
    }
}
