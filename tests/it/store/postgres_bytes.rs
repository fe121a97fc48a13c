//! What a settled claim costs a PostgreSQL claims table over generations,
//! against a fresh one: claims written, expired, swept by the janitor and
//! vacuumed, a TTL after another, until the table holds its steady state.

use std::time::Duration;

use idemgate::store::{ClaimStore, Held, Mode, Publish, StreamId, StreamSpec};

use super::conformance::{claim, hash, T0};
use super::postgres_only::{admin, Postgres};
use super::Harness;

const TTL_MS: i64 = 3_600_000;
const STEPS_PER_TTL: i64 = 10;
const STEP_MS: i64 = TTL_MS / STEPS_PER_TTL;
const PER_STEP: i64 = 3_000;
const FRESH: StreamId = StreamId(0);
const DONE: StreamId = StreamId(1);

/// Bytes on disk (heap, maps, indexes) over live rows.
async fn bytes_per_claim(table: &str) -> f64 {
    let row = admin()
        .await
        .query_one(
            &format!("SELECT pg_total_relation_size('{table}'), count(*) FROM {table}"),
            &[],
        )
        .await
        .unwrap();
    let (total, rows): (i64, i64) = (row.get(0), row.get(1));
    total as f64 / rows as f64
}

/// Two exact streams with one TTL: one settled by watermarks (its rows
/// written once), one with every claim settled by a done flag (an
/// `UPDATE`). A step is a tenth of the TTL; its claims are written in
/// rounds of 1,000, the done flags of each round in the next; the
/// janitor then sweeps what expired, and a table is vacuumed whenever
/// autovacuum at its defaults would be due to (its dead rows, counted
/// here, past 50 and a fifth of its rows; with a TTL of hours autovacuum's
/// naptime is nothing): the settled claims, which leave twice the dead
/// rows, fall due twice as often. After two TTLs past the first, a
/// settled claim costs at most 1.3 times a fresh one, and the table has
/// not grown past half as much again as its first TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_claim_costs_at_most_1_3_fresh_ones_over_generations() {
    let pg = Postgres::new("generations").await;
    let ttl = Duration::from_millis(TTL_MS as u64);
    let specs = ["fresh", "done"]
        .map(|name| StreamSpec::new(name, Mode::Exact, ttl, None))
        .to_vec();
    let store = pg.store(specs).await;
    let tables = [FRESH, DONE].map(|s| store.claims_table(s).unwrap().to_string());
    let mut dead = [0i64; 2];
    let mut figures = Vec::new();
    for step in 0..3 * STEPS_PER_TTL {
        let at = T0 + step * STEP_MS;
        let mut pending = Publish::default();
        for round in 0..PER_STEP / 1000 {
            let offsets = (0..1000).map(|n| step * PER_STEP + round * 1000 + n);
            let fresh: Vec<_> = offsets
                .clone()
                .map(|o| claim(FRESH, hash(&format!("{}f", pg.salt()), o as u64), o, at))
                .collect();
            let done: Vec<_> = offsets
                .map(|o| claim(DONE, hash(&format!("{}d", pg.salt()), o as u64), o, at))
                .collect();
            store.claim(&fresh).await.unwrap();
            let answer = store.round(&pending, &done, &[]).await.unwrap();
            assert!(answer.done.iter().all(|d| *d));
            pending = Publish {
                done: done.iter().map(Held::from).collect(),
                ..Publish::default()
            };
        }
        let answer = store.publish(&pending).await.unwrap();
        assert_eq!(answer.done.len(), 1000);
        assert!(answer.done.iter().all(|d| *d));
        dead[1] += PER_STEP;
        if step + 1 >= STEPS_PER_TTL {
            figures.push([
                bytes_per_claim(&tables[0]).await,
                bytes_per_claim(&tables[1]).await,
            ]);
        }
        pg.clock_to(T0 + (step + 1) * STEP_MS);
        let swept = store.sweep().await.unwrap() as i64;
        if step + 1 >= STEPS_PER_TTL {
            assert_eq!(swept, 2 * PER_STEP, "step {step}");
            dead[0] += PER_STEP;
            dead[1] += PER_STEP;
        }
        for (k, table) in tables.iter().enumerate() {
            let live = PER_STEP * STEPS_PER_TTL;
            if dead[k] > 50 + live / 5 {
                admin()
                    .await
                    .batch_execute(&format!("VACUUM {table}"))
                    .await
                    .unwrap();
                dead[k] = 0;
            }
        }
    }
    let [fresh, settled] = *figures.last().unwrap();
    println!(
        "bytes per claim, fresh and settled: first TTL {:.1} and {:.1}, steady state {fresh:.1} \
         and {settled:.1}",
        figures[0][0], figures[0][1]
    );
    // Vacuumed as autovacuum would, the table reuses what expired rather
    // than growing (never vacuumed, it would reach three times as much).
    assert!(
        fresh <= 1.5 * figures[0][0],
        "fresh claims grew from {:.1} B to {fresh:.1} B: {figures:?}",
        figures[0][0]
    );
    assert!(
        settled <= 1.3 * fresh,
        "a settled claim costs {settled:.1} B, a fresh one {fresh:.1} B: {figures:?}"
    );
}
