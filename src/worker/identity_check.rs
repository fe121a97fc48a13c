//! The timed check of the streams' store identities (docs/design.md
//! §8.2). A round reads a stream's identity only beside the claims it
//! makes, so a store that lost a quiet stream's state (a flush, a restart
//! without persistence, one cluster node back empty) would be seen only
//! at the stream's next record: overnight, for a quiet feed. So every
//! `[store] identity_check_interval` the loop asks the store for the
//! identity of every stream not already lost, at every place it is kept
//! (`ClaimStore::verify_identity`), and a loss found is handled as a
//! round's (`store_lost.rs`).
//!
//! Cost: the check is not skipped for busy streams; it is kept cheap
//! instead. One pipelined read per interval and replica (standalone
//! Redis one `MGET` of 64 keys per stream; PostgreSQL one `SELECT`), run
//! off the loop beside the rounds, never in front of one, and one at a
//! time. Skipping streams whose rounds read every tag lately would save
//! that read only on streams busy enough not to notice it, at the price
//! of per-round bookkeeping on the hot path.
//!
//! A check the store does not answer (an error, or no answer within
//! `CHECK_TIMEOUT`) is an outage, never a loss: counted under `op =
//! "identity"`, said at WARN, asked again at the next tick. It does not
//! move the breaker, which judges rounds: a check answered while claims
//! fail must not close it.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tracing::warn;

use super::pipeline::Pipeline;
use super::store_lost::Evidence;
use super::Worker;
use crate::logging::RateLimit;
use crate::store::{StoreError, StreamId, StreamLost};

/// A check slower than this counts as unanswered. Each store bounds its
/// own calls as it bounds a round (Redis a response in 5 s, PostgreSQL a
/// round in 15 s), and a check that took that long is an outage the
/// store reports itself; this is only the backstop that keeps a hung
/// check from stopping the timer, so it sits above both: a tighter one
/// called a slow but answering store silent while its rounds went on.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

static CHECK_FAILED: LazyLock<RateLimit> =
    LazyLock::new(|| RateLimit::new(Duration::from_secs(30)));

/// When the next check goes. Pure: the loop passes its clock's now.
#[derive(Debug)]
pub(super) struct Timer {
    every: Duration,
    next: Instant,
}

impl Timer {
    /// The first check an interval after the start: the start itself
    /// just read every identity (`app/identity.rs`).
    pub(super) fn new(every: Duration, now: Instant) -> Timer {
        Timer {
            every,
            next: now + every,
        }
    }

    /// Whether a check goes now: it fell due, and the last one answered
    /// (a store slow to answer is not asked twice at once). The next
    /// falls due an interval after this one goes.
    pub(super) fn due(&mut self, now: Instant, answering: bool) -> bool {
        if answering || now < self.next {
            return false;
        }
        self.next = now + self.every;
        true
    }

    /// When the loop must be awake for the next check.
    pub(super) fn next(&self) -> Instant {
        self.next
    }
}

/// What a check answers: the streams found lost.
type Checked = Result<Vec<StreamLost>, StoreError>;

/// The timer and the check in flight (since when, and its task).
pub(crate) struct IdentityCheck {
    pub(super) timer: Timer,
    in_flight: Option<(Instant, JoinHandle<Checked>)>,
}

impl IdentityCheck {
    pub(super) fn new(every: Duration, now: Instant) -> IdentityCheck {
        IdentityCheck {
            timer: Timer::new(every, now),
            in_flight: None,
        }
    }
}

/// The answer of the check in flight; pending for ever when there is none.
pub(super) async fn answered(check: &mut IdentityCheck) -> Checked {
    match &mut check.in_flight {
        Some((_, handle)) => match handle.await {
            Ok(answer) => answer,
            Err(e) => Err(StoreError::Unavailable(format!("identity check task: {e}"))),
        },
        None => std::future::pending().await,
    }
}

impl Worker {
    /// Sends the check when it is due, for every stream not lost yet.
    pub(super) fn check_identity_when_due(&self, p: &mut Pipeline, now: Instant) {
        let answering = p.identity.in_flight.is_some();
        if !p.identity.timer.due(now, answering) {
            return;
        }
        let streams: Vec<StreamId> = (0..self.streams.len())
            .filter(|&s| p.flight.lost(s).is_none())
            .map(StreamId)
            .collect();
        if streams.is_empty() {
            return;
        }
        let store = self.store.clone();
        let handle = tokio::spawn(async move {
            tokio::time::timeout(CHECK_TIMEOUT, store.verify_identity(&streams))
                .await
                .unwrap_or_else(|_| Err(StoreError::Unavailable("identity check timed out".into())))
        });
        p.identity.in_flight = Some((now, handle));
    }

    /// The check answered: a loss is a round's loss; a failure is said.
    pub(super) fn on_identity_checked(&self, p: &mut Pipeline, result: Checked) {
        let Some((started, _)) = p.identity.in_flight.take() else {
            return;
        };
        let took = self.clock.now().duration_since(started);
        crate::metrics::store_call("identity", took, result.as_ref().err());
        match result {
            Ok(lost) => {
                for lost in &lost {
                    self.on_store_lost(p, lost, Evidence::Identity);
                }
            }
            Err(error) => {
                if let Some(held_back) = CHECK_FAILED.allow() {
                    warn!(%error, held_back,
                        "the store did not answer the timed identity check: an outage, not a loss; asked again at the next interval");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    #[test]
    fn a_check_goes_every_interval_and_never_while_one_is_answering() {
        let clock = ManualClock::new();
        let every = Duration::from_secs(5);
        let mut timer = Timer::new(every, clock.now());
        assert!(!timer.due(clock.now(), false), "the start just read them");
        clock.advance(Duration::from_millis(4_900));
        assert!(!timer.due(clock.now(), false));
        clock.advance(Duration::from_millis(100));
        let now = clock.now();
        assert!(timer.due(now, false), "five seconds on");
        assert!(!timer.due(now, false), "once, not at every turn");
        assert_eq!(timer.next(), now + every);
        // Due again while the last one has not answered: it waits.
        clock.advance(every + Duration::from_secs(1));
        let now = clock.now();
        assert!(!timer.due(now, true));
        assert!(timer.next() < now, "overdue, not moved on");
        // It answered: the overdue check goes at once.
        assert!(timer.due(now, false));
        assert_eq!(timer.next(), now + every);
        // Nine quiet hours later: one check, not a backlog of them.
        clock.advance(Duration::from_secs(9 * 3600));
        let now = clock.now();
        assert!(timer.due(now, false));
        assert!(!timer.due(now, false));
        assert_eq!(timer.next(), now + every);
    }
}
