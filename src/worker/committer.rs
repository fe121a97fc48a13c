//! The one place where at least once and exactly once differ
//! (docs/design.md §7). The loop, the sends, the delivery reports and the
//! handover call these hooks and never ask which guarantee runs; each hook
//! sends its guarantee to its implementation:
//!
//! - at least once (`at_least_once.rs`): finished offsets are committed every
//!   `commit_interval`, off the loop, one commit at a time; a handover
//!   commits the partitions that go, after the periodic commit in flight;
//! - exactly once (`transaction.rs`): outputs are sent inside a
//!   transaction, which commits with the offsets every `commit_interval`
//!   (off the loop, while the next one fills on a second producer);
//!   a failed delivery dooms it; a handover first lets the records read
//!   finish, then commits it; a lost assignment aborts it.

use std::time::Instant;

use rdkafka::consumer::Consumer;
use tracing::{info, warn};

use super::error::WorkerError;
use super::flight::Tp;
use super::pipeline::Pipeline;
use super::Worker;
use crate::config::Guarantee;

impl Worker {
    /// Before the first record: the transactional producer registers
    /// (fencing an older incarnation with the same id).
    pub(super) async fn start_committing(&self) -> Result<(), WorkerError> {
        match self.guarantee {
            Guarantee::AtLeastOnce => Ok(()),
            Guarantee::ExactlyOnce => self.init_transactions().await,
        }
    }

    /// Before outputs go to the producer: exactly once, inside a
    /// transaction.
    pub(super) fn before_sends(&self, p: &mut Pipeline) -> Result<(), WorkerError> {
        match self.guarantee {
            Guarantee::AtLeastOnce => Ok(()),
            Guarantee::ExactlyOnce => self.begin(p),
        }
    }

    /// Every `commit_interval`: the periodic commit (at least once, off the
    /// loop) or the transaction's (exactly once, on it).
    pub(super) async fn commit_when_due(&self, p: &mut Pipeline) -> Result<(), WorkerError> {
        let now = self.clock.now();
        // A transaction with a failed delivery is aborted at once.
        if now.duration_since(p.committed_at) < self.commit_interval && p.txn.failed.is_none() {
            return Ok(());
        }
        match self.guarantee {
            Guarantee::AtLeastOnce => {
                p.committed_at = now;
                self.commit_periodic(p);
            }
            // The next transaction seals once the last one committed
            // (its completion wakes the loop).
            Guarantee::ExactlyOnce if p.txn.committing.is_some() => {}
            Guarantee::ExactlyOnce => {
                self.seal(p).await?;
                p.committed_at = self.clock.now();
            }
        }
        Ok(())
    }

    /// An output was not delivered (it is produced again, or goes to audit
    /// bare): exactly once, the open transaction cannot commit; it is
    /// aborted and its outputs sent again.
    pub(super) fn undelivered(&self, p: &mut Pipeline, error: &str) {
        if self.guarantee == Guarantee::ExactlyOnce {
            p.txn.failed.get_or_insert_with(|| error.to_string());
        }
    }

    /// Partitions go. Exactly once, an assignment lost (the session timed
    /// out: this replica is a zombie) aborts the open transaction and
    /// leaves everything to the new owner; otherwise their work is handed
    /// over (`flush`).
    pub(super) async fn partitions_go(
        &self,
        p: &mut Pipeline,
        partitions: &[Tp],
    ) -> Result<(), WorkerError> {
        if self.guarantee == Guarantee::ExactlyOnce && self.consumer.assignment_lost() {
            self.abandon(p).await
        } else {
            self.flush(p, partitions).await
        }
    }

    /// A handover's first step, before the deliveries are awaited: exactly
    /// once lets the records read finish (for at most
    /// `batch.handover_drain`), so that the commit covers what was
    /// delivered in its offsets alone. A drain that ran out is said: what
    /// it left unfinished, the next owner decides again.
    pub(super) async fn before_handover(&self, p: &mut Pipeline) -> Result<(), WorkerError> {
        if self.guarantee == Guarantee::AtLeastOnce {
            return Ok(());
        }
        let began = self.clock.now();
        self.drain(p).await?;
        if !p.flight.drained() {
            warn!(
                unfinished = p.flight.in_flight().0,
                drained_ms = self.clock.now().duration_since(began).as_millis() as u64,
                bound_ms = self.handover_drain.as_millis() as u64,
                "handover: the drain reached batch.handover_drain with records unfinished: the next owner decides them again"
            );
        }
        Ok(())
    }

    /// Once the deliveries are in, before the publish: exactly once
    /// commits the open transaction (it holds every partition's outputs,
    /// whatever partitions go).
    pub(super) async fn after_deliveries(&self, p: &mut Pipeline) -> Result<(), WorkerError> {
        if self.guarantee == Guarantee::ExactlyOnce {
            let commits = self.seal_and_wait(p).await?;
            let offsets: Vec<String> = commits
                .iter()
                .map(|c| format!("{}/{}@{}", c.tp.0, c.tp.1, c.offset))
                .collect();
            info!(offsets = ?offsets, "handover: the open transaction committed");
        }
        Ok(())
    }

    /// A handover's last word on `partitions`, after the publish: at least
    /// once commits their finished prefixes; exactly once committed them
    /// with the transaction, and drops what settled.
    pub(super) async fn commit_handover(
        &self,
        p: &mut Pipeline,
        partitions: &[Tp],
        deadline: Instant,
    ) {
        match self.guarantee {
            Guarantee::AtLeastOnce => self.commit_partitions(p, partitions, deadline).await,
            Guarantee::ExactlyOnce => {
                let _ = p.flight.commits(None);
            }
        }
    }
}
