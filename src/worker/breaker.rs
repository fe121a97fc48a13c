//! The store circuit breaker (docs/design.md §8). After `THRESHOLD` consecutive
//! failures it opens: calls are not attempted until a cool-down has passed,
//! then one trial call decides whether it closes again. The cool-down grows
//! with each failed trial, up to `MAX_COOLDOWN`.
//!
//! Why this is not a crate: the breaker is a pure state machine over the
//! `Instant` the worker's loop passes in, and the loop sleeps until
//! [`Breaker::next_trial`]. The circuit-breaker crates checked read the
//! clock themselves: `failsafe` (1.3) calls its own `clock::now()`, a
//! thread-local that tests can only freeze on their own thread, and
//! `recloser` (1.4) reads `Instant::now()` itself and wraps a synchronous
//! closure, where a store round here is async and spans loop turns;
//! neither says when the next trial may go, so the loop would have to
//! poll. Either would replace about thirty lines while taking the loop's
//! time away from it.

use std::time::{Duration, Instant};

use tracing::{info, warn};

const THRESHOLD: u32 = 3;
const FIRST_COOLDOWN: Duration = Duration::from_millis(250);
const MAX_COOLDOWN: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub(crate) struct Breaker {
    failures: u32,
    cooldown: Duration,
    open_until: Option<Instant>,
}

impl Breaker {
    pub(crate) fn new() -> Breaker {
        Breaker {
            failures: 0,
            cooldown: FIRST_COOLDOWN,
            open_until: None,
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open_until.is_some()
    }

    /// Whether a call may be attempted now: closed, or open with its
    /// cool-down over (the trial call).
    pub(crate) fn allows(&self, now: Instant) -> bool {
        self.open_until.is_none_or(|until| now >= until)
    }

    /// When the next trial call may go, while open.
    pub(crate) fn next_trial(&self) -> Option<Instant> {
        self.open_until
    }

    pub(crate) fn success(&mut self) {
        if self.is_open() {
            info!("claim store answers again: breaker closed");
            crate::metrics::breaker(false);
        }
        self.failures = 0;
        self.cooldown = FIRST_COOLDOWN;
        self.open_until = None;
    }

    pub(crate) fn failure(&mut self, now: Instant, error: &dyn std::fmt::Display) {
        self.failures += 1;
        if self.failures == 1 {
            warn!(%error, "claim store call failed");
        }
        if self.failures < THRESHOLD {
            return;
        }
        if !self.is_open() {
            warn!(%error, failures = self.failures, "claim store unreachable: breaker open");
            crate::metrics::breaker(true);
        } else {
            self.cooldown = (self.cooldown * 2).min(MAX_COOLDOWN);
        }
        self.open_until = Some(now + self.cooldown);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_closes_on_success() {
        let mut breaker = Breaker::new();
        let now = Instant::now();
        for _ in 0..THRESHOLD - 1 {
            breaker.failure(now, &"down");
            assert!(!breaker.is_open());
        }
        breaker.failure(now, &"down");
        assert!(breaker.is_open());
        assert!(!breaker.allows(now));
        assert!(breaker.allows(now + FIRST_COOLDOWN));
        breaker.success();
        assert!(!breaker.is_open());
        assert!(breaker.allows(now));
    }

    #[test]
    fn the_next_trial_is_when_the_cooldown_ends_and_a_failed_trial_doubles_it() {
        let mut breaker = Breaker::new();
        let now = Instant::now();
        assert_eq!(breaker.next_trial(), None, "closed: no trial to wait for");
        for _ in 0..THRESHOLD {
            breaker.failure(now, &"down");
        }
        assert_eq!(breaker.next_trial(), Some(now + FIRST_COOLDOWN));
        let trial = now + FIRST_COOLDOWN;
        breaker.failure(trial, &"still down");
        assert_eq!(breaker.next_trial(), Some(trial + FIRST_COOLDOWN * 2));
        breaker.success();
        assert_eq!(breaker.next_trial(), None);
    }

    #[test]
    fn the_cooldown_grows_with_failed_trials_up_to_a_bound() {
        let mut breaker = Breaker::new();
        let now = Instant::now();
        for _ in 0..20 {
            breaker.failure(now, &"down");
        }
        assert!(!breaker.allows(now + MAX_COOLDOWN - Duration::from_millis(1)));
        assert!(breaker.allows(now + MAX_COOLDOWN));
    }
}
