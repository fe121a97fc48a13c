//! What a claim costs a PostgreSQL claims table in steady state, fresh and
//! settled by done flags (`idemgate-bench claims --only postgres`).
//!
//! One store on a PostgreSQL cluster of the bench's own (`pg_server`,
//! every setting at its default, autovacuum included), two exact streams
//! with the same TTL: *fresh*, whose claims are settled by watermark raises
//! (the row is written once), and *done flags*, whose claims are each
//! settled by a done flag (an `UPDATE` of the row), as a partition whose
//! owner began above its watermark settles them. Time is the store's
//! injected clock: each step writes the same number of claims in both
//! streams, moves the clock on by a part of the TTL, runs one janitor pass
//! (expired rows deleted), and then waits for autovacuum, at its default
//! settings, to visit each table it is due to vacuum (dead rows past 50
//! and a fifth of the table; up to [`AUTOVACUUM_WAIT`]): with a TTL of
//! hours its one-minute naptime is nothing, so service vacuums as soon as
//! a table is due, which a bench that went on at once would not show. After a first TTL (the window full) several more follow:
//! the table in steady state, each row written, settled, expired and
//! deleted, its space reused.
//!
//! Bytes per claim: `pg_total_relation_size` (heap, free-space and
//! visibility maps, TOAST, indexes) over the live rows (`count(*)`), read
//! after a step's writes, at the end of the first TTL (one generation,
//! nothing yet expired) and after the last step: one TTL of claims live
//! both times.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use idemgate::clock::{Clock, ManualClock};
use idemgate::store::postgres::{JanitorOptions, PostgresOptions, PostgresStore};
use idemgate::store::{
    ClaimOutcome, ClaimStore, Held, Mode, Publish, RoundAnswer, StreamId, StreamSpec,
};

use super::throughput::{self, BATCH};
use crate::pg_server::PgServer;

const FRESH: StreamId = StreamId(0);
const DONE: StreamId = StreamId(1);
const TTL: Duration = Duration::from_secs(3600);
/// The longest wait for autovacuum's visit after a step: its default
/// naptime is a minute.
const AUTOVACUUM_WAIT: Duration = Duration::from_secs(150);

/// How much work the figure does.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Claims per stream and step.
    pub per_step: usize,
    /// Steps per TTL.
    pub steps_per_ttl: usize,
    /// TTLs after the first.
    pub generations: usize,
    /// Wait for autovacuum after each step (the smoke run does not).
    pub autovacuum: bool,
}

/// One claims table as measured.
#[derive(Clone, Debug)]
pub struct Size {
    pub rows: u64,
    pub total: u64,
    pub heap: u64,
    pub index: u64,
    pub dead: u64,
}

impl Size {
    pub fn per_claim(&self) -> f64 {
        self.total as f64 / self.rows.max(1) as f64
    }
}

pub struct Figure {
    pub plan: Plan,
    /// Fresh, done flags: after the first TTL, and at the end.
    pub first: [Size; 2],
    pub last: [Size; 2],
    /// Steps after which autovacuum had visited both tables in time.
    pub vacuumed_steps: usize,
    pub steps: usize,
    /// Fresh, done flags: the server's CPU and the wall time per claim
    /// written and settled (us).
    pub cost: [(f64, f64); 2],
    /// Fresh, done flags: commits and WAL syncs per store call.
    pub syncs: [(f64, f64); 2],
    pub version: String,
}

fn streams() -> Vec<StreamSpec> {
    ["pg-fresh", "pg-done"]
        .into_iter()
        .map(|name| StreamSpec::new(name, Mode::Exact, TTL, None))
        .collect()
}

/// Starts the server, runs the plan, stops the server.
pub async fn run(plan: Plan) -> anyhow::Result<Figure> {
    let bin = crate::pg_server::bin_dir(None)?;
    let dir = std::env::temp_dir().join(format!("idemgate-pg-generations-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let data = dir.clone();
    let pg = tokio::task::spawn_blocking(move || PgServer::start(&bin, &data))
        .await?
        .context("starting the bench's PostgreSQL")?;
    let result = measure(&pg, plan).await;
    // The server stops first; its data directory is the bench's to remove.
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn measure(pg: &PgServer, plan: Plan) -> anyhow::Result<Figure> {
    let clock = Arc::new(ManualClock::new());
    let options = PostgresOptions {
        // The bench sweeps itself, once a step.
        janitor: JanitorOptions {
            interval: Duration::from_secs(30 * 24 * 3600),
            ..JanitorOptions::default()
        },
        ..PostgresOptions::new(pg.url.clone())
    };
    let store = PostgresStore::connect_on(&options, streams(), clock.clone()).await?;
    let tables = [store.claims_table(FRESH)?, store.claims_table(DONE)?];
    let step = TTL / plan.steps_per_ttl as u32;
    // The store's clock runs as time runs, and the waits for autovacuum
    // take real time: each step ends at `start + (s + 1) * step` on it,
    // however long the step took.
    let start = clock.wall_ms();
    let steps = plan.steps_per_ttl * (1 + plan.generations);
    let (mut first, mut last) = (None, None);
    // Per stream: the server's CPU seconds and the wall seconds of the
    // writes (claim rounds and publishes), and the claims written.
    let mut cost = [(0.0, 0.0); 2];
    // Per stream: commits and WAL syncs, and the store calls (rounds and
    // the last publish of each step) of a stream.
    let mut syncs = [(0u64, 0u64); 2];
    let mut rounds = 0.0;
    let mut claims = 0.0;
    let mut vacuumed_steps = 0;
    let mut next = 0u64;
    for s in 0..steps {
        // Claim times on the same grid: a step's claims expire at the end
        // of the step a TTL later, and that step's sweep deletes them.
        let at = start + s as i64 * step.as_millis() as i64;
        let batches = plan.per_step.div_ceil(BATCH);
        for (k, stream) in [FRESH, DONE].into_iter().enumerate() {
            let flushes0 = flushes(pg).await?;
            let (cpu0, wall0) = (pg.cpu_seconds(), Instant::now());
            let mut publish = Publish::default();
            for b in 0..batches {
                let first = next + (b * BATCH) as u64;
                publish = write_batch(&store, stream, &publish, first, at).await?;
            }
            check(stream, &store.publish(&publish).await?, &publish)?;
            cost[k].0 += pg.cpu_seconds() - cpu0;
            cost[k].1 += wall0.elapsed().as_secs_f64();
            let flushes1 = flushes(pg).await?;
            syncs[k].0 += flushes1.0 - flushes0.0;
            syncs[k].1 += flushes1.1 - flushes0.1;
            rounds += if k == 0 { (batches + 1) as f64 } else { 0.0 };
        }
        next += (batches * BATCH) as u64;
        claims += (batches * BATCH) as f64;
        let now = [size(pg, tables[0])?, size(pg, tables[1])?];
        eprintln!(
            "[claims] postgres step {}/{steps}: {:.0} and {:.0} B a claim",
            s + 1,
            now[0].per_claim(),
            now[1].per_claim()
        );
        if s + 1 == plan.steps_per_ttl {
            first = Some(now.clone());
        }
        if s + 1 == steps {
            last = Some(now);
            break;
        }
        let end = start + (s as i64 + 1) * step.as_millis() as i64;
        let behind = end.saturating_sub(clock.wall_ms()).max(0);
        clock.advance(Duration::from_millis(behind as u64));
        let counts = [vacuums(pg, tables[0])?, vacuums(pg, tables[1])?];
        store.sweep().await?;
        if plan.autovacuum && wait_for_autovacuum(pg, &tables, counts).await? {
            vacuumed_steps += 1;
        }
    }
    Ok(Figure {
        plan,
        first: first.context("no first TTL")?,
        last: last.context("no last step")?,
        vacuumed_steps,
        steps,
        cost: cost.map(|(cpu, wall)| (cpu * 1e6 / claims, wall * 1e6 / claims)),
        syncs: syncs.map(|(commits, syncs)| (commits as f64 / rounds, syncs as f64 / rounds)),
        version: pg.version.clone(),
    })
}

/// One claim round as the worker sends it: the publish of the batch
/// before (delivered) with the claims of the next, every claim checked
/// won. Answers the new batch's publish: a watermark raise per partition
/// (fresh) or a done flag on each claim (done flags).
async fn write_batch(
    store: &PostgresStore,
    stream: StreamId,
    publish: &Publish,
    first: u64,
    at: i64,
) -> anyhow::Result<Publish> {
    let salt = if stream == FRESH {
        "pg-fresh"
    } else {
        "pg-done"
    };
    let claims = throughput::batch(stream, salt, first, BATCH, false, at);
    let answer = store.round(publish, &claims, &[stream]).await?;
    check(stream, &answer, publish)?;
    ensure!(
        answer
            .outcomes
            .iter()
            .all(|o| *o == ClaimOutcome::Won { fresh: true }),
        "a postgres batch of stream {} did not win every claim",
        stream.0
    );
    Ok(match stream == FRESH {
        // No watermark read: each partition's raise starts where the
        // batch before ended (`throughput::batch` numbers them so).
        true => throughput::publish_for(Mode::Exact, &claims, &answer.outcomes, &[]),
        false => Publish {
            done: claims.iter().map(Held::from).collect(),
            ..Publish::default()
        },
    })
}

/// Every raise reached its end and every done flag was set.
fn check(stream: StreamId, answer: &RoundAnswer, publish: &Publish) -> anyhow::Result<()> {
    let raised = publish
        .raises
        .iter()
        .zip(&answer.raised)
        .all(|(r, now)| *now >= r.end);
    ensure!(
        raised && answer.raised.len() == publish.raises.len(),
        "stream {}: a watermark raise was refused",
        stream.0
    );
    ensure!(
        answer.done.len() == publish.done.len() && answer.done.iter().all(|d| *d),
        "stream {}: not every done flag was set",
        stream.0
    );
    Ok(())
}

/// The database's commits and the server's WAL syncs so far, once the
/// backends have reported them (a backend sends its counts at most once a
/// second, when idle).
async fn flushes(pg: &PgServer) -> anyhow::Result<(u64, u64)> {
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let row = pg.query(
        "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), \
         (SELECT wal_sync FROM pg_stat_wal)",
    )?;
    let f: Vec<u64> = row.split('|').map(number).collect();
    match f[..] {
        [commits, syncs] => Ok((commits, syncs)),
        _ => anyhow::bail!("commits and WAL syncs: {row:?}"),
    }
}

fn number(text: &str) -> u64 {
    text.trim().parse().unwrap_or(0)
}

fn size(pg: &PgServer, table: &str) -> anyhow::Result<Size> {
    let row = pg.query(&format!(
        "SELECT (SELECT count(*) FROM {table}), pg_total_relation_size('{table}'), \
         pg_table_size('{table}'), pg_indexes_size('{table}'), \
         coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = '{table}'::regclass), 0)"
    ))?;
    let f: Vec<u64> = row.split('|').map(number).collect();
    let [rows, total, heap, index, dead] = f[..] else {
        anyhow::bail!("sizes of {table}: {row:?}");
    };
    Ok(Size {
        rows,
        total,
        heap,
        index,
        dead,
    })
}

/// Vacuums of the table so far, autovacuum's and any other.
fn vacuums(pg: &PgServer, table: &str) -> anyhow::Result<u64> {
    Ok(number(&pg.query(&format!(
        "SELECT autovacuum_count + vacuum_count FROM pg_stat_user_tables \
         WHERE relid = '{table}'::regclass"
    ))?))
}

/// Whether autovacuum, at its default settings, would vacuum the table
/// now: its dead rows past 50 and a fifth of its rows.
fn due(pg: &PgServer, table: &str) -> anyhow::Result<bool> {
    let answer = pg.query(&format!(
        "SELECT s.n_dead_tup > 50 + 0.2 * greatest(c.reltuples, 0) \
         FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid \
         WHERE s.relid = '{table}'::regclass"
    ))?;
    Ok(answer.trim() == "t")
}

/// Waits until autovacuum has visited, since `before`, every table it is
/// due to vacuum (after the second the backends take to report their dead
/// rows); `false` where it had not within [`AUTOVACUUM_WAIT`].
async fn wait_for_autovacuum(
    pg: &PgServer,
    tables: &[&str; 2],
    before: [u64; 2],
) -> anyhow::Result<bool> {
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let due = [due(pg, tables[0])?, due(pg, tables[1])?];
    let deadline = Instant::now() + AUTOVACUUM_WAIT;
    while Instant::now() < deadline {
        let visited = [vacuums(pg, tables[0])?, vacuums(pg, tables[1])?];
        if (0..2).all(|i| !due[i] || visited[i] > before[i]) {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(false)
}

/// The report's section.
pub fn print(figure: &Figure) {
    let p = figure.plan;
    println!("## PostgreSQL: bytes per claim over generations\n");
    println!(
        "{} (the bench's own cluster, every setting at its default). Two exact streams, TTL {} s: \
         each step writes {} claims in each (batches of {BATCH}), settled by watermark raises \
         (*fresh*) or each by a done flag (*done flags*), moves the store's clock by 1/{} of the \
         TTL, runs one janitor pass and waits for autovacuum to visit each table it is due to \
         vacuum (dead rows past 50 and a fifth of the table; in time after {} of {} steps); {} TTLs after the first. Bytes: `pg_total_relation_size` over the live \
         rows.\n",
        figure.version,
        TTL.as_secs(),
        p.per_step,
        p.steps_per_ttl,
        figure.vacuumed_steps,
        figure.steps - 1,
        p.generations,
    );
    println!("| claims | when | live rows | dead rows | heap | indexes | total | bytes / claim |");
    println!("|---|---|--:|--:|--:|--:|--:|--:|");
    for (when, sizes) in [("first TTL", &figure.first), ("steady state", &figure.last)] {
        for (name, s) in ["fresh", "done flags"].iter().zip(sizes.iter()) {
            println!(
                "| {name} | {when} | {} | {} | {} | {} | {} | {:.1} |",
                s.rows,
                s.dead,
                s.heap,
                s.index,
                s.total,
                s.per_claim()
            );
        }
    }
    let ratio = |sizes: &[Size; 2]| sizes[1].per_claim() / sizes[0].per_claim();
    println!(
        "\nDone flags over fresh: {:.2}x in steady state ({:.2}x after the first TTL); over the \
         first TTL's fresh figure: {:.2}x.\n",
        ratio(&figure.last),
        ratio(&figure.first),
        figure.last[1].per_claim() / figure.first[0].per_claim()
    );
    println!(
        "Writing and settling a claim (one client; each round the claims of {BATCH} records and \
         the publish of the {BATCH} before, as the worker sends them): \
         fresh {:.1} us of the server's CPU and {:.1} us of wall time; done flags {:.1} and \
         {:.1} us.\n",
        figure.cost[0].0, figure.cost[0].1, figure.cost[1].0, figure.cost[1].1
    );
    println!(
        "Per store call (a round, or a step's last publish): fresh {:.2} commits and {:.2} WAL \
         syncs; done flags {:.2} and {:.2} (the database's `xact_commit` and the server's \
         `wal_sync`; the bench's own queries count a commit each).\n",
        figure.syncs[0].0, figure.syncs[0].1, figure.syncs[1].0, figure.syncs[1].1
    );
}
