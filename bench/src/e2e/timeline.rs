//! Where a counting replica's wall time goes, round by round, from events
//! the worker already emits: its metrics (`recorder.rs` sees them) and its
//! store calls (the counting store's observer). Only counting runs have
//! it; a clean replica has nothing of this in its path.
//!
//! Read as if a replica ran one round at a time:
//!
//! ```text
//! batch-size metric (a round starts) ─► claim call ─► produce, await acks ─► records metric
//!   ▲                                                  ─► publish-only call ──┐
//!   └── next round ◄── commits metric ◄── commit ◄────────────────────────────┘
//! ```
//!
//! so the time between two consecutive events belongs to one phase, told by
//! the pair of events. A claim call is a store round carrying claims (the
//! publish of earlier batches rides with it, docs/design.md §4.3); a
//! publish call is a round carrying only a publish. With rounds pipelined
//! (§1) the phases of consecutive rounds interleave, and each gap goes to
//! the phase its two events bound. The records metric is counted once a
//! turn of the worker's loop, for the outputs acknowledged in that turn.
//!
//! The timeline is process-wide (a replica is a process), like the metrics
//! recorder it is fed by.

use std::sync::{Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// The batch-size metric: a store round starts, claiming this many
    /// records.
    BatchStart(u64),
    ClaimStart,
    ClaimEnd,
    /// The records metric: one record's output was acknowledged.
    Decided,
    SettleStart,
    SettleEnd,
    /// The offset-commits metric.
    Commit,
}

/// Summed wall time per phase, µs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Phases {
    /// From a round's start (its batch-size metric) to its store call.
    pub fingerprint: u64,
    pub claim: u64,
    /// From the end of a claim call to the first acknowledged output of
    /// that round: building and producing the outputs, awaiting the acks.
    pub produce: u64,
    /// Between the acknowledged outputs of a round and its publish: the
    /// per-record metrics and decision logs.
    pub bookkeeping: u64,
    /// A store round carrying only a publish.
    pub publish: u64,
    pub commit: u64,
    pub poll: u64,
    /// A round that decided nothing (held behind another batch's claim)
    /// backs off before the next.
    pub wait: u64,
    pub other: u64,
}

impl Phases {
    pub fn add(&mut self, o: &Phases) {
        self.fingerprint += o.fingerprint;
        self.claim += o.claim;
        self.produce += o.produce;
        self.bookkeeping += o.bookkeeping;
        self.publish += o.publish;
        self.commit += o.commit;
        self.poll += o.poll;
        self.wait += o.wait;
        self.other += o.other;
    }

    /// (name, µs) in the order of a batch.
    pub fn named(&self) -> [(&'static str, u64); 9] {
        [
            ("round set-up", self.fingerprint),
            ("claim", self.claim),
            ("produce + acks", self.produce),
            ("per-record metrics, logs", self.bookkeeping),
            ("publish-only round", self.publish),
            ("commit", self.commit),
            ("poll", self.poll),
            ("backoff", self.wait),
            ("other", self.other),
        ]
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct TimelineReport {
    pub batches: u64,
    pub batch_records: u64,
    pub decided: u64,
    pub commits: u64,
    pub phases: Phases,
    /// Unix µs of the first round's start and of the last acknowledged
    /// output.
    pub first_batch_us: Option<i64>,
    pub last_decided_us: Option<i64>,
}

#[derive(Default)]
struct State {
    report: TimelineReport,
    last: Option<(Event, Instant)>,
    started: bool,
}

pub(crate) struct Timeline {
    state: Mutex<State>,
}

fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The process's timeline.
pub(crate) fn global() -> &'static Timeline {
    static TIMELINE: OnceLock<Timeline> = OnceLock::new();
    TIMELINE.get_or_init(|| Timeline {
        state: Mutex::new(State::default()),
    })
}

impl Timeline {
    pub fn event(&self, event: Event) {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.record(event, now);
    }

    pub fn report(&self) -> TimelineReport {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.report.clone()
    }
}

impl State {
    fn record(&mut self, event: Event, now: Instant) {
        use Event::*;
        if let BatchStart(records) = event {
            let r = &mut self.report;
            r.batches += 1;
            r.batch_records += records;
            if r.first_batch_us.is_none() {
                r.first_batch_us = Some(unix_us());
            }
            self.started = true;
        }
        // Nothing is timed before the first round (the group join).
        if !self.started {
            return;
        }
        if let Some((last, at)) = self.last {
            let us = (now - at).as_micros() as u64;
            let p = &mut self.report.phases;
            let slot = match (last, event) {
                (BatchStart(_), ClaimStart) => &mut p.fingerprint,
                (ClaimStart, ClaimEnd) => &mut p.claim,
                (ClaimEnd, Decided) | (ClaimEnd, SettleStart) => &mut p.produce,
                (Decided, Decided) | (Decided, SettleStart) => &mut p.bookkeeping,
                (SettleStart, SettleEnd) => &mut p.publish,
                (ClaimEnd, ClaimStart) => &mut p.wait,
                (_, Commit) => &mut p.commit,
                (_, BatchStart(_)) => &mut p.poll,
                _ => &mut p.other,
            };
            *slot += us;
        }
        if event == Decided {
            self.report.decided += 1;
            self.report.last_decided_us = Some(unix_us());
        }
        if event == Commit {
            self.report.commits += 1;
        }
        self.last = Some((event, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn each_gap_goes_to_the_phase_its_events_bound() {
        let mut state = State::default();
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        state.record(Event::ClaimStart, ms(0)); // before any batch: ignored
        state.record(Event::BatchStart(2), ms(10));
        state.record(Event::ClaimStart, ms(12));
        state.record(Event::ClaimEnd, ms(15));
        state.record(Event::Decided, ms(25));
        state.record(Event::Decided, ms(26));
        state.record(Event::SettleStart, ms(27));
        state.record(Event::SettleEnd, ms(30));
        state.record(Event::Commit, ms(31));
        state.record(Event::BatchStart(1), ms(40));
        let r = &state.report;
        assert_eq!(r.phases.fingerprint, 2_000);
        assert_eq!(r.phases.claim, 3_000);
        assert_eq!(r.phases.produce, 10_000);
        assert_eq!(r.phases.bookkeeping, 2_000);
        assert_eq!(r.phases.publish, 3_000);
        assert_eq!(r.phases.commit, 1_000);
        assert_eq!(r.phases.poll, 9_000);
        assert_eq!((r.batches, r.batch_records, r.decided), (2, 3, 2));
    }
}
