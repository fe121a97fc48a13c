//! Handing partitions over (a revoke, a stop): the round in flight and
//! the deliveries of the partitions that go are waited for, what is
//! delivered is published, and the guarantee's last commit says what the
//! next owner finds: every finished prefix committed, with the metadata
//! that lets it raise the watermark and skip what is done (docs/design.md
//! §4.6, §7).

use std::time::Duration;

use super::flight::Tp;
use super::pipeline::{answer, Pipeline, FLUSH_PATIENCE};
use super::Worker;

impl Worker {
    /// Waits for the round in flight and the deliveries of `partitions`,
    /// publishes what is delivered (retried until acknowledged or out of
    /// patience) and commits their finished prefixes synchronously. What
    /// is left unfinished keeps its claims for the next owner
    /// (docs/design.md §4.6).
    /// Exactly once, the open transaction commits first, whatever
    /// partitions go: it holds every partition's outputs.
    pub(super) async fn flush(
        &self,
        p: &mut Pipeline,
        partitions: &[Tp],
    ) -> Result<(), super::WorkerError> {
        self.before_handover(p).await?;
        let deadline = self.clock.now() + FLUSH_PATIENCE;
        while p.round.is_some() || partitions.iter().any(|tp| p.flight.sending(tp)) {
            tokio::select! {
                result = answer(&mut p.round) => self.on_answer(p, result),
                _ = self.reports.ready() => self.on_reports(p),
                _ = tokio::time::sleep_until(self.clock.deadline(deadline)) => break,
            }
        }
        self.after_deliveries(p).await?;
        let mut backoff = Duration::from_millis(20);
        // Until acknowledged, out of patience, or the breaker says the
        // store is down (the next owner settles what is left).
        while self.clock.now() < deadline && p.breaker.allows(self.clock.now()) {
            let Some(round) = p.flight.take_last_round(self.clock.now(), self.token) else {
                break;
            };
            if round.publish.is_empty() {
                p.flight.failed(round, |_| false);
                break;
            }
            let now = self.clock.now();
            self.start_round(p, round, now);
            let result = answer(&mut p.round).await;
            let failed = result.is_err();
            self.on_answer(p, result);
            if failed {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
        self.commit_handover(p, partitions, deadline).await;
        Ok(())
    }
}
