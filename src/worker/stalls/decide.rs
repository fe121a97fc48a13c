//! Pure: given samples of an output partition's last stable offset (LSO)
//! and high watermark (HW) over time, whether a transaction stalls it
//! (docs/design.md §11). Time is the caller's.
//!
//! A gap between the two is no signal: with several writers an open
//! transaction almost always holds the LSO below the HW. What a healthy
//! partition never shows is an LSO that stays put below the HW for longer
//! than a transaction may live (the transaction timeout, after which the
//! coordinator aborts it, plus the broker's abort interval and a margin:
//! the bound). The clock of a partition starts at the first sample that
//! shows its current LSO below the HW; an LSO that moves, or that reaches
//! the HW, starts it over.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An output partition: a clean or audit topic and a partition of it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct OutputPartition {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
}

/// One look at a partition: what a read_committed client's and a
/// read_uncommitted client's watermark queries answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Offsets {
    pub(crate) last_stable: i64,
    pub(crate) high: i64,
}

/// What a sample changed, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// The LSO has stood at `offsets.last_stable`, below the HW, for
    /// `for_` (at least the bound).
    Stalled {
        partition: OutputPartition,
        offsets: Offsets,
        for_: Duration,
    },
    /// A stalled partition's LSO moved (or the partition is gone) after
    /// standing for `for_`.
    Recovered {
        partition: OutputPartition,
        offsets: Option<Offsets>,
        for_: Duration,
    },
}

/// A partition as last seen: its LSO, since when that LSO has stood below
/// the HW (None while it is at the HW), whether it counts as stalled.
#[derive(Debug)]
struct Seen {
    last_stable: i64,
    below_since: Option<Instant>,
    stalled: bool,
}

/// Every output partition's state, and the bound.
#[derive(Debug)]
pub(crate) struct Stalls {
    bound: Duration,
    seen: BTreeMap<OutputPartition, Seen>,
}

impl Stalls {
    pub(crate) fn new(bound: Duration) -> Stalls {
        Stalls {
            bound,
            seen: BTreeMap::new(),
        }
    }

    /// Takes one sample of `partition` at `now`.
    pub(crate) fn observe(
        &mut self,
        partition: &OutputPartition,
        offsets: Offsets,
        now: Instant,
    ) -> Option<Change> {
        let below = offsets.last_stable < offsets.high;
        let Some(seen) = self.seen.get_mut(partition) else {
            self.seen.insert(
                partition.clone(),
                Seen {
                    last_stable: offsets.last_stable,
                    below_since: below.then_some(now),
                    stalled: false,
                },
            );
            return None;
        };
        if seen.last_stable != offsets.last_stable || !below {
            let was = seen.stalled.then(|| seen.below_since.map(|t| now - t));
            *seen = Seen {
                last_stable: offsets.last_stable,
                below_since: below.then_some(now),
                stalled: false,
            };
            return was.map(|for_| Change::Recovered {
                partition: partition.clone(),
                offsets: Some(offsets),
                for_: for_.unwrap_or_default(),
            });
        }
        let since = *seen.below_since.get_or_insert(now);
        let for_ = now.saturating_duration_since(since);
        if seen.stalled || for_ < self.bound {
            return None;
        }
        seen.stalled = true;
        Some(Change::Stalled {
            partition: partition.clone(),
            offsets,
            for_,
        })
    }

    /// Forgets the partitions not in `present` (a topic deleted or
    /// shrunk): a stalled one among them recovers.
    pub(crate) fn retain(
        &mut self,
        present: &std::collections::BTreeSet<OutputPartition>,
        now: Instant,
    ) -> Vec<Change> {
        let gone: Vec<OutputPartition> = self
            .seen
            .keys()
            .filter(|p| !present.contains(*p))
            .cloned()
            .collect();
        gone.into_iter()
            .filter_map(|partition| {
                let seen = self.seen.remove(&partition)?;
                seen.stalled.then(|| Change::Recovered {
                    for_: seen
                        .below_since
                        .map_or(Duration::ZERO, |t| now.saturating_duration_since(t)),
                    partition,
                    offsets: None,
                })
            })
            .collect()
    }

    /// How many partitions of `topic` are stalled now.
    pub(crate) fn stalled_in(&self, topic: &str) -> usize {
        self.seen
            .iter()
            .filter(|(p, s)| s.stalled && &*p.topic == topic)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(partition: i32) -> OutputPartition {
        OutputPartition {
            topic: Arc::from("clean"),
            partition,
        }
    }

    fn at(lso: i64, hw: i64) -> Offsets {
        Offsets {
            last_stable: lso,
            high: hw,
        }
    }

    #[test]
    fn an_lso_that_stands_below_the_high_watermark_past_the_bound_is_stalled_once() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut stalls = Stalls::new(Duration::from_secs(90));
        let p = clean(3);
        assert_eq!(stalls.observe(&p, at(100, 100), s(0)), None);
        // A transaction opens at 100: its clock starts with the first
        // sample that shows it, not with the idle time before.
        assert_eq!(stalls.observe(&p, at(100, 101), s(500)), None);
        // More writes behind it; the LSO stays.
        assert_eq!(stalls.observe(&p, at(100, 250), s(589)), None);
        assert_eq!(stalls.stalled_in("clean"), 0);
        assert_eq!(
            stalls.observe(&p, at(100, 260), s(590)),
            Some(Change::Stalled {
                partition: p.clone(),
                offsets: at(100, 260),
                for_: Duration::from_secs(90),
            })
        );
        assert_eq!(stalls.stalled_in("clean"), 1);
        assert_eq!(stalls.stalled_in("audit"), 0);
        // Said once, counted while it lasts.
        assert_eq!(stalls.observe(&p, at(100, 300), s(700)), None);
        assert_eq!(stalls.stalled_in("clean"), 1);
        // Aborted by hand: the LSO moves.
        assert_eq!(
            stalls.observe(&p, at(302, 302), s(710)),
            Some(Change::Recovered {
                partition: p.clone(),
                offsets: Some(at(302, 302)),
                for_: Duration::from_secs(210),
            })
        );
        assert_eq!(stalls.stalled_in("clean"), 0);
    }

    #[test]
    fn a_gap_that_never_closes_is_no_stall_while_the_lso_keeps_moving() {
        // Several writers: an open transaction always holds the LSO below
        // the HW, but each commits within seconds.
        let t0 = Instant::now();
        let mut stalls = Stalls::new(Duration::from_secs(3));
        let p = clean(0);
        for tick in 0..200u64 {
            let lso = 10 * tick as i64;
            let now = t0 + Duration::from_millis(500 * tick);
            assert_eq!(stalls.observe(&p, at(lso, lso + 25), now), None);
        }
        assert_eq!(stalls.stalled_in("clean"), 0);
    }

    #[test]
    fn an_lso_at_the_high_watermark_never_stalls_and_restarts_the_clock() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut stalls = Stalls::new(Duration::from_secs(10));
        let p = clean(1);
        // Idle for long: nothing open.
        for secs in 0..60 {
            assert_eq!(stalls.observe(&p, at(7, 7), s(secs)), None);
        }
        // Open at 7 from 60 s, committed (LSO at the HW) at 69 s, open
        // again at the same offset? Impossible in Kafka (the markers take
        // offsets), but the clock must start over anyway.
        assert_eq!(stalls.observe(&p, at(7, 9), s(60)), None);
        assert_eq!(stalls.observe(&p, at(9, 9), s(69)), None);
        assert_eq!(stalls.observe(&p, at(9, 12), s(70)), None);
        assert_eq!(stalls.observe(&p, at(9, 12), s(79)), None);
        assert!(matches!(
            stalls.observe(&p, at(9, 12), s(80)),
            Some(Change::Stalled { .. })
        ));
    }

    #[test]
    fn partitions_are_judged_apart_and_a_partition_gone_recovers() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut stalls = Stalls::new(Duration::from_secs(5));
        let (stuck, moving) = (clean(0), clean(1));
        let audit = OutputPartition {
            topic: Arc::from("audit"),
            partition: 0,
        };
        for secs in 0..=5 {
            let change = stalls.observe(&stuck, at(4, 9), s(secs));
            assert_eq!(change.is_some(), secs == 5, "at {secs}s: {change:?}");
            assert_eq!(stalls.observe(&moving, at(secs as i64, 9), s(secs)), None);
            assert_eq!(stalls.observe(&audit, at(0, 0), s(secs)), None);
        }
        assert_eq!(stalls.stalled_in("clean"), 1);
        let present = [moving.clone(), audit.clone()].into_iter().collect();
        let changes = stalls.retain(&present, s(8));
        assert_eq!(
            changes,
            vec![Change::Recovered {
                partition: stuck,
                offsets: None,
                for_: Duration::from_secs(8),
            }]
        );
        assert_eq!(stalls.stalled_in("clean"), 0);
    }
}
