//! The periodic progress line: per stream, records decided since the last
//! line, the rate, and the count of each decision. It replaces a line per
//! record at info (single decisions are logged at debug), so a day's log of
//! a busy stream is readable and still says what happened.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tracing::info;

/// A line this often (while records are decided).
pub(crate) const EVERY: Duration = Duration::from_secs(30);

/// Decisions counted since the last line.
pub(crate) struct Progress {
    since: Instant,
    /// Per stream name, per decision label.
    counts: BTreeMap<String, BTreeMap<&'static str, u64>>,
}

impl Progress {
    pub(crate) fn new(now: Instant) -> Progress {
        Progress {
            since: now,
            counts: BTreeMap::new(),
        }
    }

    pub(crate) fn decided(&mut self, stream: &str, decision: &'static str) {
        // The stream's name is copied once a period, not once a record.
        let decisions = match self.counts.get_mut(stream) {
            Some(decisions) => decisions,
            None => self.counts.entry(stream.to_string()).or_default(),
        };
        *decisions.entry(decision).or_default() += 1;
    }

    /// The lines due at `now`, and the counts reset; nothing before `EVERY`
    /// has passed or when nothing was decided.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<Line> {
        if now.duration_since(self.since) < EVERY {
            return Vec::new();
        }
        self.flush(now)
    }

    /// The lines for what was decided since the last one, whenever it was
    /// (at shutdown), and the counts reset.
    pub(crate) fn flush(&mut self, now: Instant) -> Vec<Line> {
        let elapsed = now.duration_since(self.since).max(Duration::from_millis(1));
        self.since = now;
        std::mem::take(&mut self.counts)
            .into_iter()
            .map(|(stream, decisions)| {
                let records: u64 = decisions.values().sum();
                Line {
                    stream,
                    records,
                    per_second: records as f64 / elapsed.as_secs_f64(),
                    decisions,
                }
            })
            .collect()
    }
}

/// One stream's progress since the last line.
#[derive(Debug, PartialEq)]
pub(crate) struct Line {
    pub(crate) stream: String,
    pub(crate) records: u64,
    pub(crate) per_second: f64,
    pub(crate) decisions: BTreeMap<&'static str, u64>,
}

impl Line {
    pub(crate) fn log(&self) {
        let count = |label: &str| self.decisions.get(label).copied().unwrap_or(0);
        info!(
            stream = %self.stream,
            records = self.records,
            records_per_second = format!("{:.1}", self.per_second),
            novel = count("novel"),
            duplicate = count("duplicate"),
            conflict = count("conflict"),
            invalid = count("invalid"),
            unverified = count("unverified"),
            "progress"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_per_stream_comes_once_a_period_with_what_was_decided_since() {
        let t0 = Instant::now();
        let mut progress = Progress::new(t0);
        for _ in 0..90 {
            progress.decided("bank", "novel");
        }
        for _ in 0..30 {
            progress.decided("bank", "duplicate");
        }
        progress.decided("telemetry", "unverified");
        assert!(progress.due(t0 + Duration::from_secs(10)).is_empty());
        let lines = progress.due(t0 + EVERY);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].stream, "bank");
        assert_eq!(lines[0].records, 120);
        assert!((lines[0].per_second - 4.0).abs() < 1e-9);
        assert_eq!(lines[0].decisions["duplicate"], 30);
        assert_eq!(lines[1].decisions["unverified"], 1);
        assert!(
            progress.due(t0 + EVERY * 2).is_empty(),
            "counts were not reset"
        );
    }
}
