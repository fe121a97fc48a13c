//! What the polling thread watches besides records (docs/design.md §11): a
//! stream that nobody reads must be an alert, not a silence. Every
//! `EVERY` it asks the brokers how many partitions each stream's input
//! topics have (`idemgate_stream_input_partitions`; the loop sets
//! `idemgate_partitions_assigned` from what it owns, and the alert compares
//! their sums across replicas), and while this replica waits for an
//! assignment it says so at WARN with what the group coordinator reports.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use tracing::warn;

use super::poller::GroupConsumer;

/// How often the input partitions are counted, and how long a replica may
/// wait for an assignment before it says so (then again as often).
pub(crate) const EVERY: Duration = Duration::from_secs(30);
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// The streams' names and input topics, and when each look is due.
pub(crate) struct Watch {
    pub(crate) group: String,
    pub(crate) streams: Vec<(String, Vec<String>)>,
    next_count: Instant,
    waiting: Waiting,
}

/// Pure: how long this replica has waited for an assignment, and when it
/// says so next. Time is the caller's.
#[derive(Debug)]
struct Waiting {
    since: Option<Instant>,
    next_warning: Option<Instant>,
}

impl Waiting {
    /// Whether a WARN is due now: the first after `EVERY` unassigned, then
    /// one every `EVERY` while it lasts; an assignment starts it over.
    fn observe(&mut self, assigned: bool, now: Instant) -> Option<Duration> {
        if assigned {
            self.since = None;
            self.next_warning = None;
            return None;
        }
        let since = *self.since.get_or_insert(now);
        let due = *self.next_warning.get_or_insert(since + EVERY);
        if now < due {
            return None;
        }
        self.next_warning = Some(now + EVERY);
        Some(now.duration_since(since))
    }
}

impl Watch {
    pub(crate) fn new(group: String, streams: Vec<(String, Vec<String>)>, now: Instant) -> Watch {
        Watch {
            group,
            streams,
            next_count: now,
            waiting: Waiting {
                since: Some(now),
                next_warning: None,
            },
        }
    }

    /// Called between polls; cheap unless something is due.
    pub(crate) fn tick(&mut self, consumer: &GroupConsumer, now: Instant) {
        if now >= self.next_count {
            self.next_count = now + EVERY;
            self.count_inputs(consumer);
        }
        let assigned = consumer.context().state.assigned.load(Ordering::SeqCst);
        if let Some(waited) = self.waiting.observe(assigned, now) {
            self.warn_unassigned(consumer, waited);
        }
    }

    fn count_inputs(&self, consumer: &GroupConsumer) {
        let Ok(metadata) = consumer.fetch_metadata(None, METADATA_TIMEOUT) else {
            // The brokers do not answer: the lag and breaker signals and
            // librdkafka's own errors say so; the last count stands.
            return;
        };
        for (stream, inputs) in &self.streams {
            let partitions: usize = metadata
                .topics()
                .iter()
                .filter(|t| t.error().is_none() && inputs.iter().any(|i| i == t.name()))
                .map(|t| t.partitions().len())
                .sum();
            crate::metrics::input_partitions(stream, partitions);
        }
    }

    fn warn_unassigned(&self, consumer: &GroupConsumer, waited: Duration) {
        let members = crate::group::group_members(consumer.client(), &self.group, METADATA_TIMEOUT);
        let streams: Vec<&str> = self.streams.iter().map(|(s, _)| s.as_str()).collect();
        match members {
            Ok(members) => warn!(
                group = %self.group,
                members,
                waited_s = waited.as_secs(),
                streams = %streams.join(","),
                "no partitions assigned yet: this replica reads nothing (more replicas than partitions, a join that does not complete, or input topics that are gone)"
            ),
            Err(error) => warn!(
                group = %self.group,
                %error,
                waited_s = waited.as_secs(),
                streams = %streams.join(","),
                "no partitions assigned yet, and the group coordinator does not answer: this replica reads nothing"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_waiting_for_partitions_says_so_after_thirty_seconds_then_every_thirty() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut waiting = Waiting {
            since: None,
            next_warning: None,
        };
        assert_eq!(waiting.observe(false, at(0)), None);
        assert_eq!(waiting.observe(false, at(29)), None);
        assert_eq!(
            waiting.observe(false, at(30)),
            Some(Duration::from_secs(30))
        );
        assert_eq!(waiting.observe(false, at(45)), None);
        assert_eq!(
            waiting.observe(false, at(61)),
            Some(Duration::from_secs(61))
        );
        // Assigned, then revoked of everything: the count starts over.
        assert_eq!(waiting.observe(true, at(70)), None);
        assert_eq!(waiting.observe(false, at(80)), None);
        assert_eq!(waiting.observe(false, at(109)), None);
        assert_eq!(
            waiting.observe(false, at(110)),
            Some(Duration::from_secs(30))
        );
    }
}
