//! Logs for people and for collectors: text on a terminal (colour only
//! there), JSON lines with `--log-format json`. `RUST_LOG` sets the levels
//! (default `info`). Two helpers keep the volume an operator can read: a
//! rate limit for an error that repeats (a broker outage), and the periodic
//! per-stream progress line the worker writes instead of a line per record.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    use crate::config::StoreConfig;
    let (store, store_at) = match &config.store {
        StoreConfig::Memory { event_time } => (
            if *event_time {
                "memory (event time)"
            } else {
                "memory"
            },
            String::new(),
        ),
        StoreConfig::Redis(options) => ("redis", options.target.to_string()),
    };
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
        group = config
            .client_properties(crate::config::Client::Consumer)
            .get("group.id")
            .unwrap_or("idemgate"),
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
pub(crate) struct RateLimit {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl RateLimit {
    pub(crate) const fn new(every: Duration) -> RateLimit {
        RateLimit {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// `Some(suppressed since the last line)` when a line may be written
    /// now; `None` when this one is to be held back (and counted).
    pub(crate) fn allow(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (last, held) = &mut *state;
        match last {
            Some(at) if now.duration_since(*at) < self.every => {
                *held += 1;
                None
            }
            _ => {
                *last = Some(now);
                Some(std::mem::take(held))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeating_error_is_let_through_once_a_period_with_the_count_held_back() {
        let limit = RateLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(limit.allow(t0), Some(0));
        for ms in 1..=313 {
            assert_eq!(limit.allow(t0 + Duration::from_millis(ms * 30)), None);
        }
        assert_eq!(limit.allow(t0 + Duration::from_secs(10)), Some(313));
        assert_eq!(limit.allow(t0 + Duration::from_secs(11)), None);
    }
}
