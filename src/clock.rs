//! The worker's clock, injected (docs/design.md §1): the loop, the poller
//! and the handover read time only through it, so a test can say "nine
//! hours later" by moving the clock instead of sleeping.
//!
//! Two readings: `now`, monotonic, for timers, waits and durations; and
//! `wall_ms`, milliseconds since the Unix epoch, for the claims' times
//! (what a store compares with TTLs and filter generations). Timers still
//! run on tokio's clock: `deadline` turns an instant of this clock into
//! the tokio instant that is as far ahead, so a clock moved forward fires
//! what fell due at once.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Milliseconds since the Unix epoch, on whichever clock the caller runs.
pub type Millis = i64;

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Instant;
    fn wall_ms(&self) -> Millis;

    /// The tokio instant as far from tokio's now as `at` is from this
    /// clock's.
    fn deadline(&self, at: Instant) -> tokio::time::Instant {
        let now = self.now();
        let real = tokio::time::Instant::now();
        if at >= now {
            real + (at - now)
        } else {
            real.checked_sub(now - at).unwrap_or(real)
        }
    }
}

/// The machine's clocks.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall_ms(&self) -> Millis {
        wall_ms()
    }

    fn deadline(&self, at: Instant) -> tokio::time::Instant {
        at.into()
    }
}

/// Milliseconds since the Unix epoch on this machine's clock.
pub fn wall_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The machine's clocks moved forward by what a test says: it runs as
/// time runs, and `advance` jumps ("nine hours later"). Both readings
/// move together.
#[derive(Debug, Default)]
pub struct ManualClock {
    ahead: Mutex<Duration>,
}

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    /// Moves both readings forward by `by`, for good.
    pub fn advance(&self, by: Duration) {
        let mut ahead = self.ahead.lock().unwrap_or_else(|e| e.into_inner());
        *ahead += by;
    }

    fn ahead(&self) -> Duration {
        *self.ahead.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        Instant::now() + self.ahead()
    }

    fn wall_ms(&self) -> Millis {
        wall_ms() + i64::try_from(self.ahead().as_millis()).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nine_hours_later_is_nine_hours_later_on_both_readings_and_due_at_once() {
        let clock = ManualClock::new();
        let (before, wall_before) = (clock.now(), clock.wall_ms());
        let due = before + Duration::from_secs(3600);
        clock.advance(Duration::from_secs(9 * 3600));
        assert!(clock.now() - before >= Duration::from_secs(9 * 3600));
        assert!(clock.wall_ms() - wall_before >= 9 * 3_600_000);
        // What fell due an hour after `before` is due now.
        assert!(clock.deadline(due) <= tokio::time::Instant::now());
        // What is due in a minute of this clock is a minute of tokio's.
        let later = clock.deadline(clock.now() + Duration::from_secs(60));
        let ahead = later - tokio::time::Instant::now();
        assert!(ahead > Duration::from_secs(59) && ahead <= Duration::from_secs(60));
    }

    #[test]
    fn the_system_clock_passes_instants_through() {
        let at = Instant::now() + Duration::from_secs(5);
        assert_eq!(SystemClock.deadline(at), tokio::time::Instant::from(at));
    }
}
