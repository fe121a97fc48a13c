//! The PostgreSQL store (docs/design.md §6.1): exact claims in one table
//! per stream, with the watermarks, reset ranges and identities beside
//! them in `store.schema`; every verdict from `judge.rs`, the SQL only
//! moves data. Exact streams only: a tiered stream is refused (the config
//! refuses it first).
//!
//! By role: `options` (the config's side), `connect` (pool, TLS, errors),
//! `schema` (tables; `legacy`: their names of before, renamed), `sql` (statements), `round`, `reads` and `followup`
//! (the claim protocol), `identity` (identities, restores, resets), `janitor`
//! (expired rows), `inspect` (what `check` asks).

mod connect;
mod followup;
mod identity;
mod inspect;
mod janitor;
mod legacy;
mod marks;
mod options;
mod reads;
mod round;
mod runs;
mod schema;
mod sql;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use tokio::task::JoinHandle;

pub use inspect::{inspect, Durability, ServerFacts, TableFacts, RIGHTS};
pub use options::{
    redact, split_sslmode, JanitorOptions, PostgresOptions, SslMode, DEFAULT_JANITOR_BATCH_ROWS,
    DEFAULT_JANITOR_INTERVAL, DEFAULT_POOL_SIZE, DEFAULT_SCHEMA,
};
pub use schema::{claims_key_id, claims_name};

use super::{
    ClaimStore, IdentityFound, Marked, Mode, PartitionReset, Publish, Restored, RoundAnswer,
    RunsName, StoreError, StoreIdentity, StoreStats, StreamId, StreamLost, StreamSpec,
};
use crate::clock::{Clock, Millis, SystemClock};
use janitor::{Janitor, Swept};
use schema::Tables;
use sql::Sql;

/// A round that takes longer fails as unavailable (its connection is
/// closed, so the server rolls back whatever it had begun).
const ROUND_TIMEOUT: Duration = Duration::from_secs(15);

pub struct PostgresStore {
    pool: Pool,
    streams: Vec<StreamSpec>,
    sql: Sql,
    tables: Tables,
    /// Stream index by key id, for the rows of the shared tables.
    key_ids: HashMap<String, usize>,
    /// The identities adopted at start, by stream index (docs/design.md
    /// §8.2).
    adopted: Mutex<HashMap<usize, StoreIdentity>>,
    /// This replica's floors of the streams' progress marks (`marks.rs`).
    floors: crate::store::marks::Floors,
    janitor: Janitor,
    janitor_task: JoinHandle<()>,
}

/// One connection, for the length of a round.
pub(super) struct Session {
    client: deadpool_postgres::Object,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.janitor_task.abort();
    }
}

impl PostgresStore {
    /// Connects, creates the tables that are missing (or refuses with the
    /// SQL to run where the role may not), and starts the janitor on the
    /// system clock.
    pub async fn connect(
        options: &PostgresOptions,
        streams: Vec<StreamSpec>,
    ) -> Result<PostgresStore, StoreError> {
        PostgresStore::connect_on(options, streams, Arc::new(SystemClock)).await
    }

    /// As [`PostgresStore::connect`], the janitor on the caller's clock.
    pub async fn connect_on(
        options: &PostgresOptions,
        streams: Vec<StreamSpec>,
        clock: Arc<dyn Clock>,
    ) -> Result<PostgresStore, StoreError> {
        if let Some(tiered) = streams.iter().find(|s| s.mode == Mode::Tiered) {
            return Err(StoreError::Refused(format!(
                "stream {:?} is tiered: the postgres store keeps exact claims only",
                tiered.name
            )));
        }
        let connect::Connected { pool, user } = connect::pool(options)?;
        let tables = Tables::new(&options.schema, &streams);
        schema::ensure(&pool, &tables, &streams, &user).await?;
        let swept = streams
            .iter()
            .zip(&tables.claims)
            .map(|(spec, table)| Swept {
                stream: spec.name.clone(),
                table: table.clone(),
            })
            .collect();
        let janitor = Janitor::new(
            pool.clone(),
            swept,
            tables.runs.clone(),
            options.janitor,
            clock,
        );
        Ok(PostgresStore {
            janitor_task: janitor.clone().spawn(),
            janitor,
            sql: Sql::new(&tables),
            key_ids: streams
                .iter()
                .enumerate()
                .map(|(i, s)| (s.key_id.clone(), i))
                .collect(),
            tables,
            pool,
            floors: marks::floors(streams.len()),
            streams,
            adopted: Mutex::new(HashMap::new()),
        })
    }

    /// One janitor pass now, as the background task runs it every
    /// interval: the rows it deleted.
    pub async fn sweep(&self) -> Result<u64, StoreError> {
        self.janitor.sweep().await
    }

    /// The claims table of a stream, qualified and quoted (for tests and
    /// operators' queries).
    pub fn claims_table(&self, stream: StreamId) -> Result<&str, StoreError> {
        self.tables
            .claims
            .get(stream.0)
            .map(String::as_str)
            .ok_or(StoreError::UnknownStream(stream.0))
    }

    fn stream_of(&self, key_id: &str) -> Option<StreamId> {
        self.key_ids.get(key_id).map(|&i| StreamId(i))
    }

    fn adopted(&self) -> HashMap<usize, StoreIdentity> {
        self.adopted.lock().map(|a| a.clone()).unwrap_or_default()
    }

    async fn checkout(&self) -> Result<Session, StoreError> {
        Ok(Session {
            client: connect::client(&self.pool).await?,
        })
    }
}

/// Bounds a piece of work on a session in time.
async fn timed<T>(
    work: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(ROUND_TIMEOUT, work)
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::Unavailable(format!(
                "postgres did not answer within {}s",
                ROUND_TIMEOUT.as_secs()
            )))
        })
}

/// Gives the connection back, or closes it where its work failed or timed
/// out: never handed to the next round in an unknown state (a transaction
/// left open); the server rolls back what it had begun.
fn checkin<T>(session: Session, result: &Result<T, StoreError>) {
    if result.is_err() {
        drop(deadpool_postgres::Object::take(session.client));
    }
}

#[async_trait]
impl ClaimStore for PostgresStore {
    async fn round(
        &self,
        publish: &Publish,
        claims: &[super::Claim],
        read: &[StreamId],
    ) -> Result<RoundAnswer, StoreError> {
        let session = self.checkout().await?;
        // Where a floor rose or a round failed since the last, the marks
        // first: a store below them is marked gone back, which this
        // round's identity read then sees (docs/design.md §8.2).
        let rechecked = timed(self.recheck_on(&session)).await;
        if rechecked.is_err() {
            checkin(session, &rechecked);
            return rechecked.map(|()| RoundAnswer::default());
        }
        let result = timed(self.run_round(&session, publish, claims, read)).await;
        if result.is_err() {
            // Perhaps another server now (a failover, a restore).
            self.floors.ask_recheck();
        }
        checkin(session, &result);
        result
    }

    /// Exact streams only: no tier 2, so no early insert to speak for.
    async fn note_early_inserts(&self, _: &[super::EarlyRun]) -> Result<(), StoreError> {
        Ok(())
    }

    async fn stats(&self, _: Millis) -> Result<StoreStats, StoreError> {
        // No eviction and no filter: the janitor sets the table gauges.
        Ok(StoreStats::default())
    }

    async fn find_identity(&self, stream: StreamId) -> Result<IdentityFound, StoreError> {
        let session = self.checkout().await?;
        let result = timed(self.find_identity_on(&session, stream)).await;
        checkin(session, &result);
        result
    }

    async fn write_identity(
        &self,
        stream: StreamId,
        identity: StoreIdentity,
        replace: bool,
    ) -> Result<IdentityFound, StoreError> {
        let session = self.checkout().await?;
        let result = timed(self.write_identity_on(&session, stream, identity, replace)).await;
        checkin(session, &result);
        result
    }

    async fn verify_identity(&self, streams: &[StreamId]) -> Result<Vec<StreamLost>, StoreError> {
        let session = self.checkout().await?;
        let result = timed(self.verify_identity_on(&session, streams)).await;
        checkin(session, &result);
        result
    }

    fn adopt_identity(&self, stream: StreamId, identity: StoreIdentity) {
        if let Ok(mut adopted) = self.adopted.lock() {
            adopted.insert(stream.0, identity);
        }
    }

    async fn advance_marks(&self, stream: StreamId) -> Result<Marked, StoreError> {
        let session = self.checkout().await?;
        let result = timed(self.marks_on(&session, stream, marks::Step::Bump)).await;
        checkin(session, &result);
        result
    }

    async fn check_marks(&self, stream: StreamId) -> Result<Marked, StoreError> {
        let session = self.checkout().await?;
        let result = timed(self.marks_on(&session, stream, marks::Step::Check)).await;
        checkin(session, &result);
        result
    }

    fn raise_floors(&self, stream: StreamId, marks: &[u64]) {
        if self.floors.raise(stream.0, marks) {
            self.floors.ask_recheck();
        }
    }

    async fn restore_marks(&self, stream: StreamId, marks: &[u64]) -> Result<(), StoreError> {
        let session = self.checkout().await?;
        let result = timed(self.marks_on(&session, stream, marks::Step::Raise(marks))).await;
        checkin(session, &result);
        result.map(drop)
    }

    async fn restore(&self, claims: &[Restored]) -> Result<(), StoreError> {
        let session = self.checkout().await?;
        let result = self.restore_on(&session, claims).await;
        checkin(session, &result);
        result
    }

    async fn put_runs(
        &self,
        name: &RunsName,
        content: &[u8],
        at: Millis,
    ) -> Result<(), StoreError> {
        let session = self.checkout().await?;
        let result = timed(self.put_runs_on(&session, name, content, at)).await;
        checkin(session, &result);
        result
    }

    async fn get_runs(&self, name: &RunsName, at: Millis) -> Result<Option<Vec<u8>>, StoreError> {
        let session = self.checkout().await?;
        let result = timed(self.get_runs_on(&session, name, at)).await;
        checkin(session, &result);
        result
    }

    async fn refresh_runs(&self, name: &RunsName, at: Millis) -> Result<bool, StoreError> {
        let session = self.checkout().await?;
        let result = timed(self.refresh_runs_on(&session, name, at)).await;
        checkin(session, &result);
        result
    }

    async fn delete_runs(&self, names: &[RunsName]) -> Result<(), StoreError> {
        if names.is_empty() {
            return Ok(());
        }
        let session = self.checkout().await?;
        let result = timed(self.delete_runs_on(&session, names)).await;
        checkin(session, &result);
        result
    }

    async fn reset(&self, resets: &[PartitionReset]) -> Result<(), StoreError> {
        let session = self.checkout().await?;
        let result = timed(self.reset_on(&session, resets)).await;
        checkin(session, &result);
        result
    }
}
