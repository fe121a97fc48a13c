//! Exactly once (docs/design.md §7): one Kafka transaction per commit
//! interval holds the interval's outputs and the input offsets they
//! finish, with the group's metadata, so a zombie replica is fenced.
//!
//! ```text
//! begin ─► produce … ─► (every report in) ─► tier-2 inserts ─► offsets + metadata ─► commit ─► done flags, raises
//! ```
//!
//! A transaction that cannot commit is a crash: the worker stops with the
//! error, the broker aborts the transaction, and the partitions' next
//! owner (this replica restarted, or another) replays from the committed
//! offsets, meets its own unsettled claims and produces again.

use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::producer::Producer;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{info, warn};

use super::error::{Doing, WorkerError};
use super::fault_point::{self, Step};
use super::flight::Commit;
use super::metadata::Metadata;
use super::pipeline::{answer, Pipeline, FLUSH_PATIENCE};
use super::Worker;
use crate::store::{Publish, StoreError};

/// How long librdkafka may take for a transaction's own requests.
const TXN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a handover lets the records read finish first.
const DRAIN: Duration = Duration::from_secs(10);

/// Where the open transaction stands.
#[derive(Default)]
pub(crate) struct Txn {
    /// Since when a transaction is open; `None` when none is.
    pub(crate) open_since: Option<Instant>,
    /// A delivery inside it failed: it cannot commit.
    pub(crate) failed: Option<String>,
    /// A commit of this replica's was read back with its metadata
    /// (docs/design.md §7): the brokers keep it.
    pub(crate) metadata_kept: bool,
    /// Commits read back without an answer at the offset written (a
    /// broker that stores no transactional offsets at all, as librdkafka's
    /// mock cluster): after `READ_BACKS` the worker stops asking.
    pub(crate) read_backs: u8,
}

/// How many commits are read back at most before the question is left to
/// `idemgate check`.
const READ_BACKS: u8 = 3;

impl Worker {
    /// Registers this replica's transactional id with the brokers, fencing
    /// any earlier producer with the same id (a zombie of this replica).
    pub(super) async fn init_transactions(&self) -> Result<(), WorkerError> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || producer.init_transactions(TXN_TIMEOUT))
            .await
            .doing("initialising the transactional producer (transactional.id)")?
            .doing("initialising the transactional producer (transactional.id)")?;
        info!("exactly once: transactional producer ready");
        Ok(())
    }

    /// Opens a transaction if none is: outputs are sent only inside one.
    pub(super) fn begin(&self, p: &mut Pipeline) -> Result<(), WorkerError> {
        if p.txn.open_since.is_none() {
            self.producer
                .begin_transaction()
                .doing("beginning a transaction")?;
            p.txn.open_since = Some(self.clock.now());
        }
        Ok(())
    }

    /// Before a handover (a revoke, a stop): reads nothing more and runs
    /// the loop until every record read is finished, or waits on a holder
    /// elsewhere, or `DRAIN` passes. The commit then covers everything
    /// delivered in its offsets alone, not only in its metadata (a broker
    /// that dropped transactional offset metadata would lose it).
    pub(super) async fn drain(&self, p: &mut Pipeline) -> Result<(), WorkerError> {
        let until = self.clock.now() + DRAIN;
        while self.clock.now() < until && !p.flight.drained() {
            self.turn(p)?;
            self.commit_when_due(p).await?;
            let soon = self.clock.now() + Duration::from_millis(10);
            let wake = p.flight.next_due().map_or(soon, |at| at.min(soon));
            tokio::select! {
                result = answer(&mut p.round) => self.on_answer(p, result),
                _ = self.reports.ready() => self.on_reports(p),
                _ = tokio::time::sleep_until(self.clock.deadline(wake)) => {}
            }
        }
        Ok(())
    }

    /// Commits the open transaction (or one with offsets alone, where they
    /// moved): waits for every delivery report, inserts into tier 2, sends
    /// the offsets with the group's metadata and commits. The settlements
    /// follow in the next rounds. An error is the end of this worker.
    pub(super) async fn seal(&self, p: &mut Pipeline) -> Result<Vec<Commit>, WorkerError> {
        let sealing = self.clock.now();
        let deadline = sealing + FLUSH_PATIENCE;
        while p.flight.any_sending() {
            tokio::select! {
                result = answer(&mut p.round) => {
                    self.on_answer(p, result);
                    self.claim_meanwhile(p);
                }
                _ = self.reports.ready() => self.on_reports(p),
                _ = tokio::time::sleep_until(self.clock.deadline(deadline)) => {
                    return Err(WorkerError::Undelivered(FLUSH_PATIENCE));
                }
            }
        }
        if let Some(error) = p.txn.failed.take() {
            let _ = self.abort().await;
            return Err(WorkerError::OutputFailed(error));
        }
        fault_point::reached(Step::AfterProduce, p.txn.open_since.is_some());
        let reported = self.clock.now();
        self.insert_before_commit(p, deadline).await?;
        fault_point::reached(Step::AfterInserts, p.txn.open_since.is_some());
        let inserted = self.clock.now();
        let commits = p.flight.txn_offsets(p.txn.open_since.is_some());
        if commits.is_empty() && p.txn.open_since.is_none() {
            return Ok(commits);
        }
        crate::metrics::transaction_step("reports", reported - sealing);
        crate::metrics::transaction_step("inserts", inserted - reported);
        let mut list = TopicPartitionList::new();
        for c in &commits {
            let Some(&stream) = self.by_topic.get(&*c.tp.0) else {
                continue;
            };
            list.add_partition_offset(&c.tp.0, c.tp.1, Offset::Offset(c.offset))
                .doing("listing offsets")?;
            if let Some(mut element) = list.find_partition(&c.tp.0, c.tp.1) {
                element.set_metadata(self.metadata_text(
                    stream,
                    &c.tp,
                    &Metadata {
                        gap_free: c.gap_free,
                        done: c.done.clone(),
                    },
                ));
            }
        }
        let outputs = p.txn.open_since.is_some();
        self.begin(p)?;
        let group = self
            .consumer
            .group_metadata()
            .ok_or(WorkerError::NoGroupMetadata)?;
        let producer = self.producer.clone();
        let written = (!p.txn.metadata_kept && p.txn.read_backs < READ_BACKS && list.count() > 0)
            .then(|| list.clone());
        let clock = self.clock.clone();
        let mut commit = tokio::task::spawn_blocking(move || {
            let offsets = clock.now();
            if list.count() > 0 {
                producer.send_offsets_to_transaction(&list, &group, TXN_TIMEOUT)?;
            }
            fault_point::reached(Step::AfterOffsets, outputs);
            let committing = clock.now();
            crate::metrics::transaction_step("offsets", committing - offsets);
            producer.commit_transaction(TXN_TIMEOUT)?;
            fault_point::reached(Step::AfterCommit, outputs);
            crate::metrics::transaction_step("commit", clock.now() - committing);
            Ok::<(), rdkafka::error::KafkaError>(())
        });
        // The store rounds go on meanwhile (claims, and the settlements of
        // earlier transactions); what they decide waits for the next one.
        let result = loop {
            tokio::select! {
                result = &mut commit => break result.doing("committing the transaction")?,
                result = answer(&mut p.round) => {
                    self.on_answer(p, result);
                    self.claim_meanwhile(p);
                }
            }
        };
        p.txn.open_since = None;
        match result {
            Ok(()) => {
                crate::metrics::committed();
                p.flight.txn_committed();
                if let Some(written) = written {
                    p.txn.metadata_kept = self.metadata_read_back(written).await?;
                    p.txn.read_backs += 1;
                    if !p.txn.metadata_kept && p.txn.read_backs == READ_BACKS {
                        warn!("{READ_BACKS} transactional commits read back without an answer at the offsets written: whether these brokers keep transactional offset metadata is unknown (`idemgate check` probes it)");
                    }
                }
                // Their settlements are the next round's work.
                p.dirty = true;
                Ok(commits)
            }
            Err(error) => {
                p.flight.txn_offsets_lost();
                let _ = self.abort().await;
                Err(error).doing("committing the transaction (a fenced zombie, or the broker aborted it): aborted; the partitions' next owner replays")
            }
        }
    }

    /// Reads a commit back (this replica's first, until one partition
    /// answers at the offset written): a broker that dropped its metadata
    /// is the end of this worker, with why (docs/design.md §7). `true`
    /// once the metadata was seen kept.
    async fn metadata_read_back(&self, written: TopicPartitionList) -> Result<bool, WorkerError> {
        let consumer = self.consumer.clone();
        let read = tokio::task::spawn_blocking(move || {
            crate::ops::check_txn::read_back(&consumer, &written)
        })
        .await
        .doing("reading the first transactional commit back")?;
        match read {
            Err(why) => {
                warn!(%why, "the first transactional commit could not be read back: read again after the next one");
                Ok(false)
            }
            Ok(read) => match crate::ops::check_txn::verdict(&read) {
                Some(Ok(())) => {
                    info!("exactly once: the brokers keep transactional offset metadata (this replica's first commit read back)");
                    Ok(true)
                }
                Some(Err(why)) => Err(why.into()),
                None => Ok(false),
            },
        }
    }

    /// While a transaction is sealed: the next store round, if none is in
    /// flight. Its decisions are sent in the next transaction.
    fn claim_meanwhile(&self, p: &mut Pipeline) {
        let now = self.clock.now();
        if p.round.is_none() && p.breaker.allows(now) {
            if let Some(round) = p.flight.take_round(now, self.max_records, self.token) {
                self.start_round(p, round, now);
            }
        }
    }

    /// The transaction's tier-2 inserts, acknowledged before it commits:
    /// once its offsets are committed no replay inserts them again.
    async fn insert_before_commit(
        &self,
        p: &mut Pipeline,
        deadline: Instant,
    ) -> Result<(), WorkerError> {
        let inserts = p.flight.take_txn_inserts();
        if inserts.is_empty() {
            return Ok(());
        }
        let publish = Publish {
            inserts,
            ..Publish::default()
        };
        let mut backoff = Duration::from_millis(20);
        loop {
            let result =
                tokio::time::timeout(Duration::from_secs(2), self.store.round(&publish, &[], &[]))
                    .await
                    .unwrap_or_else(|_| Err(StoreError::Unavailable("round timed out".into())));
            match result {
                Ok(_) => return Ok(()),
                Err(error) if self.clock.now() + backoff < deadline => {
                    crate::metrics::store_failed("round", &error);
                    super::pipeline::store_failed(&error);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(error) => {
                    let _ = self.abort().await;
                    return Err(WorkerError::Inserts {
                        patience: FLUSH_PATIENCE,
                        source: error,
                    });
                }
            }
        }
    }

    /// The assignment was lost (the session timed out: this replica was
    /// a zombie, its partitions have another owner): the open transaction
    /// is aborted, not committed, and everything in flight is left to the
    /// new owner, who meets the claims as its own.
    pub(super) async fn abandon(&self, p: &mut Pipeline) -> Result<(), WorkerError> {
        if p.txn.open_since.take().is_some() {
            warn!("assignment lost (the session timed out): the open transaction is aborted, its records left to their new owner");
            self.abort().await?;
        }
        p.txn.failed = None;
        Ok(())
    }

    async fn abort(&self) -> Result<(), WorkerError> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || producer.abort_transaction(TXN_TIMEOUT))
            .await
            .doing("aborting the transaction")?
            .doing("aborting the transaction")?;
        Ok(())
    }
}
