//! Exactly once (docs/design.md §7): one Kafka transaction per commit
//! interval holds the interval's outputs and the input offsets they
//! finish, with the group's metadata, so a zombie replica is fenced.
//!
//! ```text
//! begin ─► produce … ─► (every report in) ─► tier-2 inserts ─► offsets + metadata ─► commit ─► done flags, raises
//!                                                                 └─ off the loop: the next transaction's produce goes on ─┘
//! ```
//!
//! Two transactional producers ("lanes") take turns: while one commits a
//! transaction off the loop, the loop claims and sends the next
//! transaction's outputs on the other. One commit is in flight at a time:
//! the next transaction seals only once the last one committed, so each
//! commit's offsets follow the one before.
//!
//! A transaction that cannot commit is a crash: the worker stops with the
//! error, the broker aborts the transaction, and the partitions' next
//! owner (this replica restarted, or another) replays from the committed
//! offsets, meets its own unsettled claims and produces again. One whose
//! outcome is unknown (a call timed out) is resolved instead
//! (`resolve.rs`): the lane's producer is built again and the outcome read
//! back.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use rdkafka::{Offset, TopicPartitionList};
use tokio::task::{JoinError, JoinHandle};
use tracing::{info, warn};

use super::commit_failure::{commit_failure, CommitFailure, Outcome};
use super::error::{Doing, WorkerError};
use super::fault_point::{self, Step};
use super::flight::{Commit, EarlyInserts, Tp};
use super::lane::{init, reports_in};
use super::marks::{self, Covered};
use super::pipeline::{answer, Pipeline, FLUSH_PATIENCE};
use super::resolve::{offset_of, resolve, Sent};
use super::runs;
use super::store_lost::Evidence;
use super::Worker;
use crate::store::{Check, Publish, RunsName, StoreError, StreamId, StreamLost};

/// Where the open transaction stands.
#[derive(Default)]
pub(crate) struct Txn {
    /// Since when a transaction is open; `None` when none is.
    pub(crate) open_since: Option<Instant>,
    /// The lane (producer) the open transaction is on, or the next.
    pub(crate) lane: usize,
    /// A delivery inside it failed: it cannot commit.
    pub(crate) failed: Option<String>,
    /// A commit of this replica's was read back with its metadata
    /// (docs/design.md §7): the brokers keep it.
    pub(crate) metadata_kept: bool,
    /// Commits read back without an answer at the offset written (a
    /// broker that stores no transactional offsets at all, as librdkafka's
    /// mock cluster): after `READ_BACKS` the worker stops asking.
    pub(crate) read_backs: u8,
    /// The transaction committing off the loop, if any.
    pub(crate) committing: Option<Committing>,
    /// Per partition, the offset and metadata of the last commit seen to
    /// succeed (this replica's, or the one read at assignment): what a
    /// transaction whose outcome is unknown is told by.
    pub(crate) last: HashMap<(String, i32), (i64, String)>,
}

impl Txn {
    /// A partition assigned, with what its group had committed.
    pub(crate) fn assigned(&mut self, tp: &Tp, committed: Option<&(i64, String)>) {
        let key = (tp.0.to_string(), tp.1);
        match committed {
            Some(commit) => self.last.insert(key, commit.clone()),
            None => self.last.remove(&key),
        };
    }
}

/// A sealed transaction whose offsets and commit run off the loop.
pub(crate) struct Committing {
    lane: usize,
    handle: JoinHandle<Result<Ended, KafkaError>>,
    commits: Vec<Commit>,
    /// The offsets it sends, with their metadata.
    sent: TopicPartitionList,
    /// Its offsets, to read back (until the brokers are seen to keep
    /// transactional offset metadata).
    written: Option<TopicPartitionList>,
    /// The records of finished runs this replica's earlier commits named
    /// that this one makes needless: deleted once it is known committed.
    superseded: Vec<RunsName>,
}

/// How a sealed transaction ended: committed, or (where a call timed
/// out) as its offsets read back say.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ended {
    outcome: Outcome,
    timed_out: bool,
}

/// What the commit's task gave back.
pub(super) type Joined = Result<Result<Ended, KafkaError>, JoinError>;

/// The outcome of the commit in flight; pending for ever when there is
/// none.
pub(super) async fn committed(committing: &mut Option<Committing>) -> Joined {
    match committing {
        Some(c) => (&mut c.handle).await,
        None => std::future::pending().await,
    }
}

/// How many commits are read back at most before the question is left to
/// `idemgate check`.
const READ_BACKS: u8 = 3;

impl Worker {
    /// Registers this replica's transactional ids with the brokers,
    /// fencing any earlier producer with the same ids (a zombie of this
    /// replica); a call that may pass is made again (`lane::init`).
    pub(super) async fn init_transactions(&self) -> Result<(), WorkerError> {
        for lane in &self.lanes {
            let producer = lane.producer();
            let timeout = self.call_timeout;
            tokio::task::spawn_blocking(move || init(&producer, timeout))
                .await
                .doing("initialising the transactional producer (transactional.id)")?
                .doing("initialising the transactional producer (transactional.id)")?;
        }
        info!(
            lanes = self.lanes.len(),
            "exactly once: transactional producers ready"
        );
        Ok(())
    }

    /// Opens a transaction if none is: outputs are sent only inside one.
    pub(super) fn begin(&self, p: &mut Pipeline) -> Result<(), WorkerError> {
        if p.txn.open_since.is_none() {
            self.lanes[p.txn.lane]
                .producer()
                .begin_transaction()
                .doing("beginning a transaction")?;
            p.txn.open_since = Some(self.clock.now());
        }
        Ok(())
    }

    /// Before a handover (a revoke, a stop): reads nothing more and runs
    /// the loop until every record read is finished, or waits on a holder
    /// elsewhere, or `batch.handover_drain` passes. The commit then covers everything
    /// delivered in its offsets alone, not only in its metadata (a broker
    /// that dropped transactional offset metadata would lose it).
    pub(super) async fn drain(&self, p: &mut Pipeline) -> Result<(), WorkerError> {
        let until = self.clock.now() + self.handover_drain;
        while self.clock.now() < until && !p.flight.drained() {
            self.turn(p)?;
            self.commit_when_due(p).await?;
            let soon = self.clock.now() + Duration::from_millis(10);
            let wake = p.flight.next_due().map_or(soon, |at| at.min(soon));
            tokio::select! {
                result = answer(&mut p.round) => self.on_answer(p, result),
                _ = self.reports.ready() => self.on_reports(p),
                joined = committed(&mut p.txn.committing) => {
                    self.on_committed(p, joined).await?;
                }
                _ = tokio::time::sleep_until(self.clock.deadline(wake)) => {}
            }
        }
        Ok(())
    }

    /// A handover's commit: the one in flight, then the open transaction
    /// (or one with offsets alone, where they moved), both waited for.
    pub(super) async fn seal_and_wait(&self, p: &mut Pipeline) -> Result<Vec<Commit>, WorkerError> {
        self.seal(p).await?;
        Ok(self.settle_commit(p).await?.unwrap_or_default())
    }

    /// Seals the open transaction (or one with offsets alone, where they
    /// moved), after the commit in flight: inserts into tier 2, and leaves
    /// the offsets, with the group's metadata, and the commit running off
    /// the loop on this lane (librdkafka's commit waits for every delivery
    /// report of the transaction, and fails if one failed); the next
    /// transaction opens on the other lane. The settlements follow the
    /// commit (`on_committed`). An error is the end of this worker.
    pub(super) async fn seal(&self, p: &mut Pipeline) -> Result<(), WorkerError> {
        self.settle_commit(p).await?;
        let sealing = self.clock.now();
        let deadline = sealing + FLUSH_PATIENCE;
        if p.txn.failed.is_some() {
            // The producer survives it: the outputs go again, each as its
            // report said (one refused for its size or content, to audit
            // without its payload).
            if p.txn.open_since.take().is_some() {
                self.abort(p.txn.lane).await?;
            }
            // The aborted transaction's last reports (failures, most):
            // they are its, and fail nothing more.
            self.on_reports(p);
            let error = p.txn.failed.take().unwrap_or_default();
            let again = p.flight.txn_aborted();
            crate::metrics::transaction_aborted("delivery");
            warn!(%error, outputs = again, "a delivery inside the transaction failed: the transaction is aborted and its outputs are sent again in the next one");
            return Ok(());
        }
        // A fault is aimed at a transaction whose commit leaves claims to
        // settle (tests only, `fault_point`: the scan runs only when armed).
        let claims = if fault_point::any_armed() && p.txn.open_since.is_some() {
            p.flight.open_txn_claims()
        } else {
            0
        };
        let holding = move || format!("{claims} claims to settle");
        fault_point::reached(Step::AfterProduce, claims > 0, holding);
        self.insert_before_commit(p, deadline).await?;
        fault_point::reached(Step::AfterInserts, claims > 0, holding);
        let commits = p.flight.txn_offsets(p.txn.open_since.is_some());
        if commits.is_empty() && p.txn.open_since.is_none() {
            return Ok(());
        }
        crate::metrics::transaction_step("inserts", self.clock.now() - sealing);
        let mut list = TopicPartitionList::new();
        let (mut writes, mut superseded) = (Vec::new(), Vec::new());
        let mut covered = Covered::default();
        for c in &commits {
            let Some(&stream) = self.by_topic.get(&*c.tp.0) else {
                continue;
            };
            list.add_partition_offset(&c.tp.0, c.tp.1, Offset::Offset(c.offset))
                .doing("listing offsets")?;
            if let Some(mut element) = list.find_partition(&c.tp.0, c.tp.1) {
                let prepared = self.prepare_commit(p, stream, c);
                element.set_metadata(prepared.text);
                writes.extend(prepared.write);
                superseded.extend(prepared.superseded);
                if p.flight.lost(stream).is_none() {
                    covered.add(stream, self.fail_open(stream), &c.tp.0);
                }
            }
        }
        // The records of finished runs the offsets' metadata names, in the
        // pre-commit store step: acknowledged before the commit
        // (docs/design.md §7).
        if let Err(source) = runs::write(&self.store, &self.clock, &writes, deadline).await {
            if p.txn.open_since.take().is_some() {
                let _ = self.abort(p.txn.lane).await;
            }
            return Err(WorkerError::RunsUnwritten { source });
        }
        // Then the progress marks (docs/design.md §8.2). A fail-closed
        // stream whose store came back older aborts the transaction: its
        // outputs were decided there. This replica ends, and does not
        // start again before `idemgate rebuild`.
        let held = marks::stamp(&self.store, &self.clock, &covered, &mut list, deadline).await;
        if let Some(held) = held.into_iter().next() {
            if p.txn.open_since.take().is_some() {
                let _ = self.abort(p.txn.lane).await;
            }
            self.on_store_lost(
                p,
                &StreamLost {
                    stream: StreamId(held.stream),
                    how: Check::Behind,
                },
                Evidence::Identity,
            );
            let stream = self.streams[held.stream].config.spec.name.clone();
            return Err(WorkerError::StoreWentBack { stream });
        }
        self.begin(p)?;
        let group = self
            .consumer
            .group_metadata()
            .ok_or(WorkerError::NoGroupMetadata)?;
        let lane = p.txn.lane;
        let written = (!p.txn.metadata_kept && p.txn.read_backs < READ_BACKS && list.count() > 0)
            .then(|| list.clone());
        let sent = Sent {
            moved: list
                .elements()
                .iter()
                .map(|e| {
                    let key = (e.topic().to_string(), e.partition());
                    let now = (offset_of(e.offset()), e.metadata().to_string());
                    p.txn.last.get(&key) != Some(&now)
                })
                .collect(),
            list: list.clone(),
        };
        let clock = self.clock.clone();
        let (on_lane, consumer, timeout) = (
            self.lanes[lane].clone(),
            self.consumer.clone(),
            self.call_timeout,
        );
        let handle = tokio::task::spawn_blocking(move || {
            let producer = on_lane.producer();
            let ended = (|| {
                let offsets = clock.now();
                if sent.list.count() > 0 {
                    producer.send_offsets_to_transaction(&sent.list, &group, timeout)?;
                }
                // Aimed at a transaction holding offsets too: they are
                // pending from here to its commit.
                let work = claims > 0 && sent.list.count() > 0;
                let holding = || fault_point::holding(claims, &sent.list);
                fault_point::reached(Step::AfterOffsets, work, holding);
                let committing = clock.now();
                crate::metrics::transaction_step("offsets", committing - offsets);
                reports_in(&producer, timeout);
                producer.commit_transaction(timeout)?;
                fault_point::reached(Step::AfterCommit, work, holding);
                crate::metrics::transaction_step("commit", clock.now() - committing);
                Ok::<(), KafkaError>(())
            })();
            drop(producer);
            match ended {
                Ok(()) => Ok(Ended {
                    outcome: Outcome::Committed,
                    timed_out: false,
                }),
                Err(error) if commit_failure(&error) == CommitFailure::Unknown => {
                    let outcome = resolve(&on_lane, &consumer, &sent, timeout, error)?;
                    Ok(Ended {
                        outcome,
                        timed_out: true,
                    })
                }
                Err(error) => Err(error),
            }
        });
        // What is delivered now is the next transaction's, on the other
        // lane.
        p.flight.seal_txn();
        p.txn.committing = Some(Committing {
            lane,
            handle,
            commits,
            sent: list,
            written,
            superseded,
        });
        p.txn.open_since = None;
        p.txn.lane = (lane + 1) % self.lanes.len();
        Ok(())
    }

    /// Waits for the commit in flight, if any, while the store rounds go
    /// on (claims, and the settlements of earlier transactions); what they
    /// decide waits for the next transaction.
    async fn settle_commit(&self, p: &mut Pipeline) -> Result<Option<Vec<Commit>>, WorkerError> {
        if p.txn.committing.is_none() {
            return Ok(None);
        }
        let joined = loop {
            tokio::select! {
                joined = committed(&mut p.txn.committing) => break joined,
                result = answer(&mut p.round) => {
                    self.on_answer(p, result);
                    self.claim_meanwhile(p);
                }
            }
        };
        self.on_committed(p, joined).await.map(Some)
    }

    /// The commit in flight ended: its deliveries settle in the rounds
    /// that follow, or, if it failed, the worker ends (the open
    /// transaction on the other lane is aborted first, so read_committed
    /// readers do not wait for its timeout).
    pub(super) async fn on_committed(
        &self,
        p: &mut Pipeline,
        joined: Joined,
    ) -> Result<Vec<Commit>, WorkerError> {
        let Some(Committing {
            lane,
            commits,
            sent,
            written,
            superseded,
            ..
        }) = p.txn.committing.take()
        else {
            return Ok(Vec::new());
        };
        // The commit waited for every delivery report of the
        // transaction: they are all handed over, and apply first (where
        // the producer was built again, the old one's purged outputs too,
        // each a failure: produced again).
        self.on_reports(p);
        match joined.doing("committing the transaction")? {
            Ok(Ended {
                outcome: Outcome::Committed,
                timed_out,
            }) => {
                if timed_out {
                    crate::metrics::transaction_timed_out("committed");
                    warn!("the transaction whose call timed out had committed (its offsets read back): it settles; the producer was built again");
                }
                crate::metrics::committed();
                runs::delete(&self.store, superseded);
                p.flight.txn_committed();
                let _ = p.flight.commits(None);
                for e in sent.elements() {
                    p.txn.last.insert(
                        (e.topic().to_string(), e.partition()),
                        (offset_of(e.offset()), e.metadata().to_string()),
                    );
                }
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
            Ok(Ended {
                outcome: Outcome::Aborted,
                ..
            }) => {
                // The new producer's epoch ended it: nothing of it is
                // visible, its outputs go again.
                let again = p.flight.sealed_aborted();
                crate::metrics::transaction_timed_out("aborted");
                crate::metrics::transaction_aborted("timeout");
                warn!(outputs = again, "the transaction whose call timed out was aborted (its offsets read back): its outputs are sent again in the next one; the producer was built again");
                Ok(Vec::new())
            }
            Err(error) if commit_failure(&error) == CommitFailure::Abortable => {
                // A delivery inside it failed, or the brokers aborted it:
                // nothing of it is visible, its outputs go again.
                self.abort(lane).await?;
                self.on_reports(p);
                let again = p.flight.sealed_aborted();
                crate::metrics::transaction_aborted("commit");
                warn!(%error, outputs = again, "the transaction's commit failed and it is aborted: its outputs are sent again in the next one");
                Ok(Vec::new())
            }
            Err(error) => {
                p.flight.txn_offsets_lost();
                let _ = self.abort(lane).await;
                if p.txn.open_since.take().is_some() {
                    let _ = self.abort(p.txn.lane).await;
                }
                Err(error).doing("committing the transaction (a fenced zombie, the broker aborted it, or its outcome could not be read back): aborted; the partitions' next owner replays")
            }
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
    /// once its offsets are committed no replay inserts them again. The
    /// runs of offsets they speak for go first, acknowledged: should the
    /// transaction abort, the partition's next owner tells from them a
    /// filter hit that may be a record's own hash from another record's
    /// (docs/design.md §4.4 rule 5).
    async fn insert_before_commit(
        &self,
        p: &mut Pipeline,
        deadline: Instant,
    ) -> Result<(), WorkerError> {
        let EarlyInserts { runs, inserts } = p.flight.take_txn_inserts();
        if inserts.is_empty() {
            return Ok(());
        }
        let publish = Publish {
            inserts,
            ..Publish::default()
        };
        let mut noted = runs.is_empty();
        let mut backoff = Duration::from_millis(20);
        loop {
            let attempt = async {
                if !noted {
                    self.store.note_early_inserts(&runs).await?;
                    noted = true;
                }
                self.store.round(&publish, &[], &[]).await.map(|_| ())
            };
            let result = tokio::time::timeout(Duration::from_secs(2), attempt)
                .await
                .unwrap_or_else(|_| Err(StoreError::Unavailable("round timed out".into())));
            match result {
                Ok(()) => return Ok(()),
                Err(error) if self.clock.now() + backoff < deadline => {
                    crate::metrics::store_failed("round", &error);
                    super::pipeline::store_failed(&error);
                    // A pause before asking the real store again; the
                    // deadline is the worker's clock's.
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(error) => {
                    let _ = self.abort(p.txn.lane).await;
                    return Err(WorkerError::Inserts {
                        patience: FLUSH_PATIENCE,
                        source: error,
                    });
                }
            }
        }
    }

    /// The assignment was lost (the session timed out: this replica was
    /// a zombie, its partitions have another owner): the commit in flight
    /// ends first (if it fails, so does the worker), the open transaction
    /// is aborted, not committed, and everything in flight is left to the
    /// new owner, who meets the claims as its own.
    pub(super) async fn abandon(&self, p: &mut Pipeline) -> Result<(), WorkerError> {
        let settled = self.settle_commit(p).await?.is_some();
        if p.txn.open_since.take().is_some() {
            warn!("assignment lost (the session timed out): the open transaction is aborted, its records left to their new owner");
            self.abort(p.txn.lane).await?;
        } else {
            // Nothing of it is open: what was sealed before the session
            // ran out was committed (the brokers took its offsets while
            // the generation was current), or aborted with its outputs
            // sent again, or the worker has ended above.
            warn!(
                commit_in_flight = settled,
                "assignment lost (the session timed out): no transaction open, nothing to abort; its records are left to their new owner"
            );
        }
        p.txn.failed = None;
        Ok(())
    }

    /// Aborts the lane's transaction; one whose abort timed out is ended
    /// by building the producer again (its epoch bump aborts it).
    async fn abort(&self, lane: usize) -> Result<(), WorkerError> {
        let lane = self.lanes[lane].clone();
        let timeout = self.call_timeout;
        tokio::task::spawn_blocking(move || match lane.producer().abort_transaction(timeout) {
            Err(error) if commit_failure(&error) == CommitFailure::Unknown => {
                warn!(%error, "an abort timed out: the producer is built again, which aborts the transaction");
                crate::metrics::transaction_timed_out("aborted");
                lane.rebuild(timeout)
            }
            ended => ended,
        })
        .await
        .doing("aborting the transaction")?
        .doing("aborting the transaction")?;
        Ok(())
    }
}
