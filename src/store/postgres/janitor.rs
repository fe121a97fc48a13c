//! The janitor: deletes expired records of finished runs, and expired
//! claims in bounded batches, never inside a
//! round, and reads each claims table's size for the gauge. A claim past
//! its expiry already counts as absent to every round (judged on the
//! claim's own time); the janitor only keeps the tables from growing.
//! Time comes from an injected clock, so a test says "after the expiry" by
//! moving it.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::task::JoinHandle;
use tracing::warn;

use super::connect::{client, store_error};
use super::options::JanitorOptions;
use crate::clock::Clock;
use crate::store::StoreError;

/// One stream's claims table, as the janitor sweeps it.
#[derive(Clone, Debug)]
pub(super) struct Swept {
    pub(super) stream: String,
    pub(super) table: String,
}

#[derive(Clone)]
pub(super) struct Janitor {
    pool: Pool,
    tables: Vec<Swept>,
    /// `finished_runs`: records their writer left to expire (an aborted
    /// attempt's, a revoked partition's last).
    runs: String,
    options: JanitorOptions,
    clock: Arc<dyn Clock>,
}

impl Janitor {
    pub(super) fn new(
        pool: Pool,
        tables: Vec<Swept>,
        runs: String,
        options: JanitorOptions,
        clock: Arc<dyn Clock>,
    ) -> Janitor {
        Janitor {
            pool,
            tables,
            runs,
            options,
            clock,
        }
    }

    /// Runs every `interval` until the handle is aborted (the store's
    /// drop). A failed pass is logged and counted nowhere else: the next
    /// one tries again, and the rounds never depend on it.
    pub(super) fn spawn(self) -> JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                let due = self.clock.now() + self.options.interval;
                tokio::time::sleep_until(self.clock.deadline(due)).await;
                if let Err(error) = self.sweep().await {
                    warn!(%error, "postgres janitor: expired claims not deleted this pass");
                }
            }
        })
    }

    /// One pass over every claims table: `DELETE`s of at most `batch_rows`
    /// rows that expired before the clock's now, until one deletes fewer;
    /// then the table's size. Answers the rows deleted.
    pub(super) async fn sweep(&self) -> Result<u64, StoreError> {
        let now = self.clock.wall_ms();
        let batch = i64::from(self.options.batch_rows.max(1));
        let client = client(&self.pool).await?;
        let runs = format!("DELETE FROM {} WHERE expires_at <= $1", self.runs);
        client
            .execute(&runs, &[&now])
            .await
            .map_err(|e| store_error("janitor", e))?;
        let mut total = 0;
        for swept in &self.tables {
            let table = &swept.table;
            // `SKIP LOCKED`: a row a round holds is left for the next pass,
            // never waited on (expiry never blocks a round). The outer
            // `expires_at` is the recheck that matters: where a round's
            // claim rewrote an expired row after the subselect picked it,
            // the DELETE follows the row to its new version and rechecks
            // only the outer conditions, and PostgreSQL's recheck of a
            // `ctid` condition passes whatever the version (up to 17 at
            // least): without it the janitor would delete the fresh claim.
            let delete = client
                .prepare_cached(&format!(
                    "DELETE FROM {table} WHERE ctid IN \
                     (SELECT ctid FROM {table} WHERE expires_at <= $1 LIMIT $2 \
                      FOR UPDATE SKIP LOCKED) AND expires_at <= $1"
                ))
                .await
                .map_err(|e| store_error("janitor", e))?;
            loop {
                let deleted = client
                    .execute(&delete, &[&now, &batch])
                    .await
                    .map_err(|e| store_error("janitor", e))?;
                total += deleted;
                crate::metrics::janitor_swept(&swept.stream, deleted, None);
                if deleted < batch as u64 {
                    break;
                }
                // Let the rounds have the table between batches.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let bytes: i64 = client
                .query_one(
                    "SELECT pg_total_relation_size($1::text::regclass)",
                    &[&table],
                )
                .await
                .map_err(|e| store_error("janitor table size", e))?
                .get(0);
            crate::metrics::janitor_swept(&swept.stream, 0, Some(bytes));
        }
        Ok(total)
    }
}
