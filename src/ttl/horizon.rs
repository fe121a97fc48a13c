//! The retry horizon measured from a recorded topic (docs/design.md §9).
//!
//! A sender's published retry schedule is a lower bound: the attempts nobody
//! documented are the ones that arrive after a TTL chosen from the
//! documentation has expired. The only reliable figure comes from failing
//! deliveries on purpose and recording every attempt, so this module turns
//! such a recording into per-sender horizons. The horizon is per sender
//! because senders retry differently: a stream fed by four senders has four
//! horizons, and its TTL must cover the longest.

use std::collections::BTreeMap;
use std::time::Duration;

/// One delivery attempt seen on a recorded topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery<'a> {
    /// The id the sender keeps across retries of one delivery; attempts are
    /// grouped by it, within one sender.
    pub delivery_id: &'a str,
    /// Who sent it: horizons are measured and reported per sender.
    pub sender: &'a str,
    /// When the attempt arrived, in milliseconds since any fixed epoch; only
    /// differences are used.
    pub received_at_ms: i64,
}

/// Retry horizons measured from a recording.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Horizon {
    /// Each sender's horizon: the longest span between the first and last
    /// attempt of any one of its delivery ids. A sender whose deliveries all
    /// arrived once has a horizon of zero, and is still listed, so a report
    /// shows that it was recorded.
    pub per_sender: BTreeMap<String, Duration>,
    /// The longest horizon over all senders: the figure a TTL must cover.
    pub max: Duration,
    /// The sender whose horizon is `max` (the first by name on a tie), so an
    /// operator knows which sender's behaviour drives the TTL; `None` only
    /// for an empty recording.
    pub longest_sender: Option<String>,
}

/// Measure each sender's retry horizon from a log of delivery attempts.
///
/// A delivery id's span is its latest arrival minus its earliest, whatever
/// order the log is in (recordings merged from several partitions are not in
/// arrival order). The same delivery id from two senders counts as two
/// deliveries. An empty log gives an empty [`Horizon`] with `max` zero.
pub fn measure_horizon<'a>(log: impl IntoIterator<Item = Delivery<'a>>) -> Horizon {
    // (sender, delivery id) -> (earliest, latest) arrival.
    let mut arrivals: BTreeMap<(&'a str, &'a str), (i64, i64)> = BTreeMap::new();
    for attempt in log {
        let at = attempt.received_at_ms;
        arrivals
            .entry((attempt.sender, attempt.delivery_id))
            .and_modify(|(first, last)| {
                *first = (*first).min(at);
                *last = (*last).max(at);
            })
            .or_insert((at, at));
    }

    let mut longest: BTreeMap<&'a str, Duration> = BTreeMap::new();
    for ((sender, _), (first, last)) in arrivals {
        // abs_diff cannot overflow, unlike `last - first` on extreme i64s.
        let span = Duration::from_millis(last.abs_diff(first));
        let horizon = longest.entry(sender).or_default();
        *horizon = (*horizon).max(span);
    }

    let mut measured = Horizon::default();
    for (sender, horizon) in longest {
        // Strictly greater, in name order: ties go to the first name, so the
        // answer does not depend on the order of the log.
        if measured.longest_sender.is_none() || horizon > measured.max {
            measured.max = horizon;
            measured.longest_sender = Some(sender.to_owned());
        }
        measured.per_sender.insert(sender.to_owned(), horizon);
    }
    measured
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(sender: &'static str, id: &'static str, secs: i64) -> Delivery<'static> {
        Delivery {
            delivery_id: id,
            sender,
            received_at_ms: secs * 1_000,
        }
    }

    #[test]
    fn an_empty_log_has_no_horizon() {
        let horizon = measure_horizon(Vec::new());
        assert_eq!(horizon, Horizon::default());
        assert_eq!(horizon.max, Duration::ZERO);
    }

    #[test]
    fn single_attempts_give_a_zero_horizon_that_is_still_reported() {
        let horizon = measure_horizon([at("b", "1", 5), at("a", "2", 9)]);
        assert_eq!(horizon.max, Duration::ZERO);
        assert_eq!(horizon.per_sender.len(), 2);
        assert_eq!(horizon.longest_sender.as_deref(), Some("a"));
    }

    #[test]
    fn a_shared_delivery_id_is_two_deliveries_across_senders() {
        // Were "x" one delivery, its span would be 0 -> 100 s.
        let horizon = measure_horizon([at("a", "x", 0), at("a", "x", 10), at("b", "x", 100)]);
        assert_eq!(horizon.per_sender["a"], Duration::from_secs(10));
        assert_eq!(horizon.per_sender["b"], Duration::ZERO);
        assert_eq!(horizon.max, Duration::from_secs(10));
    }

    #[test]
    fn extreme_timestamps_do_not_overflow() {
        let log = [
            Delivery {
                delivery_id: "1",
                sender: "a",
                received_at_ms: i64::MIN,
            },
            Delivery {
                delivery_id: "1",
                sender: "a",
                received_at_ms: i64::MAX,
            },
        ];
        assert_eq!(measure_horizon(log).max, Duration::from_millis(u64::MAX));
    }

    #[test]
    fn ties_go_to_the_first_sender_by_name() {
        let horizon = measure_horizon([
            at("z", "1", 0),
            at("z", "1", 60),
            at("m", "2", 0),
            at("m", "2", 60),
        ]);
        assert_eq!(horizon.longest_sender.as_deref(), Some("m"));
    }
}
