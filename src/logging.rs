//! Logs for people and for collectors: text on a terminal (colour only
//! there), JSON lines with `--log-format json`. `RUST_LOG` sets the levels
//! (default `info`). Two helpers keep the volume an operator can read: a
//! rate limit for an error that repeats (a broker outage), and the periodic
//! per-stream progress line the worker writes instead of a line per record.

use std::io::IsTerminal;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use governor::clock::{Clock, MonotonicClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable; ANSI colour only when stderr is a terminal.
    Text,
    /// One JSON object a line, for log collectors.
    Json,
}

/// Installs the subscriber for the process (stderr).
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// The line `run` starts with: every setting an operator checks first, each
/// a field of its own (a JSON key with `--log-format json`), secrets left
/// out.
pub fn log_settings(config: &crate::config::Config) {
    let (store, store_at) = (config.store.kind(), config.store.target());
    let streams: Vec<&str> = config
        .streams
        .iter()
        .map(|s| s.spec.name.as_str())
        .collect();
    let guarantee = match config.guarantee {
        crate::config::Guarantee::AtLeastOnce => "at-least-once",
        crate::config::Guarantee::ExactlyOnce => "exactly-once",
    };
    tracing::info!(
        brokers = config.brokers().unwrap_or_default(),
        group = config.group_id(),
        guarantee,
        store,
        store_at = %store_at,
        streams = %streams.join(","),
        metrics_listen = %config.metrics_listen,
        "starting"
    );
}

/// How a command's fatal error is written: `idemgate: <error>` on a
/// terminal's stderr; with `--log-format json`, one JSON line like every
/// other, the error chain as its `error` field.
pub fn log_fatal(format: LogFormat, error: &anyhow::Error) {
    match format {
        LogFormat::Text => eprintln!("idemgate: {error:#}"),
        LogFormat::Json => {
            tracing::error!(error = %format!("{error:#}"), "idemgate stopped on an error")
        }
    }
}

/// Lets one line through per `every`, counting what it held back, so a
/// failure that repeats every few milliseconds (brokers down, store down)
/// is logged once a period with how often it happened.
///
/// Whether a line may go is `governor`'s (a GCRA limiter with a burst of
/// one, on the clock `C`: monotonic in the process, a fake one in tests);
/// governor only says yes or no, so the count held back is kept here. A
/// line that carries a count of what it reports (ranges dropped, records
/// skipped) goes through [`RateLimit::allow_counting`]: the line that gets
/// through carries the total since the last one, never only its own
/// (docs/design.md §11: counts in log lines are the true counts).
pub(crate) struct RateLimit<C: Clock = MonotonicClock> {
    limiter: RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<C::Instant>>,
    /// Lines held back since the last one let through, and the sum of
    /// their counts: one lock, so a line let through takes both at once.
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    lines: u64,
    count: u64,
}

/// What a line let through says: how many lines were held back since the
/// last one, and the total count of those and this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LetThrough {
    pub(crate) held_back: u64,
    pub(crate) total: u64,
}

impl RateLimit {
    pub(crate) fn new(every: Duration) -> RateLimit {
        RateLimit::with_clock(every, MonotonicClock)
    }
}

impl<C: Clock> RateLimit<C> {
    pub(crate) fn with_clock(every: Duration, clock: C) -> RateLimit<C> {
        // A zero period limits nothing: every line goes.
        let quota = Quota::with_period(every).unwrap_or_else(|| Quota::per_second(NonZeroU32::MAX));
        RateLimit {
            limiter: RateLimiter::direct_with_clock(quota, clock),
            held: Mutex::default(),
        }
    }

    /// `Some(suppressed since the last line)` when a line may be written
    /// now; `None` when this one is to be held back (and counted).
    pub(crate) fn allow(&self) -> Option<u64> {
        self.allow_counting(1).map(|through| through.held_back)
    }

    /// As [`RateLimit::allow`], for a line reporting `count` of something:
    /// a line held back adds its count to the next one let through.
    pub(crate) fn allow_counting(&self, count: u64) -> Option<LetThrough> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match self.limiter.check() {
            Ok(()) => {
                let through = LetThrough {
                    held_back: held.lines,
                    total: held.count + count,
                };
                *held = Held::default();
                Some(through)
            }
            Err(_) => {
                held.lines += 1;
                held.count += count;
                None
            }
        }
    }
}

/// A side client's context (the operator's commands, the outputs' stall
/// watch): librdkafka's logs and errors go to `tracing` at debug, since the
/// client reports what fails through its calls' results.
pub(crate) struct QuietContext;

impl rdkafka::client::ClientContext for QuietContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        tracing::debug!(target: "librdkafka", ?level, fac, message = log_message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", %error, reason);
    }
}

impl rdkafka::consumer::ConsumerContext for QuietContext {}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    #[test]
    fn a_repeating_error_is_let_through_once_a_period_with_the_count_held_back() {
        let clock = FakeRelativeClock::default();
        let limit = RateLimit::with_clock(Duration::from_secs(10), clock.clone());
        assert_eq!(limit.allow(), Some(0));
        for _ in 1..=313 {
            clock.advance(Duration::from_millis(30));
            assert_eq!(limit.allow(), None);
        }
        // 313 × 30 ms = 9.39 s: on to 10 s after the first line.
        clock.advance(Duration::from_millis(610));
        assert_eq!(limit.allow(), Some(313));
        clock.advance(Duration::from_secs(1));
        assert_eq!(limit.allow(), None);
    }

    #[test]
    fn the_next_line_goes_a_full_period_after_the_last_one_let_through() {
        let clock = FakeRelativeClock::default();
        let limit = RateLimit::with_clock(Duration::from_secs(30), clock.clone());
        clock.advance(Duration::from_secs(100));
        assert_eq!(limit.allow(), Some(0), "the first line always goes");
        clock.advance(Duration::from_secs(30) - Duration::from_nanos(1));
        assert_eq!(limit.allow(), None);
        clock.advance(Duration::from_nanos(1));
        assert_eq!(limit.allow(), Some(1));
        // A quiet spell earns no burst: still one line a period.
        clock.advance(Duration::from_secs(600));
        assert_eq!(limit.allow(), Some(0));
        assert_eq!(limit.allow(), None);
    }

    #[test]
    fn a_line_let_through_counts_what_the_lines_held_back_counted() {
        // The commit metadata's WARN said `dropped=6`, the first commit's,
        // while 1,946 ranges were dropped over the run.
        let clock = FakeRelativeClock::default();
        let limit = RateLimit::with_clock(Duration::from_secs(30), clock.clone());
        let through = |held_back, total| Some(LetThrough { held_back, total });
        assert_eq!(limit.allow_counting(6), through(0, 6));
        for count in [40, 0, 900] {
            clock.advance(Duration::from_secs(9));
            assert_eq!(limit.allow_counting(count), None);
        }
        // 30 s after the first line: this one's 1,000 and the 940 held.
        clock.advance(Duration::from_secs(3));
        assert_eq!(limit.allow_counting(1_000), through(3, 1_940));
        // The sum starts over with each line let through.
        clock.advance(Duration::from_secs(1));
        assert_eq!(limit.allow_counting(5), None);
        clock.advance(Duration::from_secs(29));
        assert_eq!(limit.allow_counting(2), through(1, 7));
        // `allow` counts lines: each is one.
        clock.advance(Duration::from_secs(1));
        assert_eq!(limit.allow(), None);
        clock.advance(Duration::from_secs(29));
        assert_eq!(limit.allow_counting(3), through(1, 4));
    }
}
