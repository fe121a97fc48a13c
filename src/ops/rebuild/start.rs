//! Where `rebuild` starts reading a clean partition (docs/design.md §8.3).
//!
//! An output keeps its input's timestamp, and the broker's time index is
//! built on it: a batch re-sent from a file keeps its CreateTime, so its
//! outputs, decided an hour ago, sit in the index years back, and a start
//! found by time alone passes over them (their claims are still live).
//! Every output also says when it was decided (`idemgate-decided-at`); the
//! start is the earlier of the time index's answer and a binary search of
//! the partition on that header.
//!
//! Decision times grow with the offset but for the time an output spends
//! between its decision and its write (waits, retries). The search looks
//! for a `since` a whole window before the window's start, which covers
//! an output written up to a window after its decision; one written later
//! than that held a claim that had lapsed by then.

use std::collections::HashMap;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::clock::Millis;
use crate::decision::DECIDED_AT;
use crate::ops::kafka::{QuietContext, REQUEST_TIMEOUT};
use crate::ops::rebuild::run::{Quiet, RebuildError};

/// A partition's search: the first output decided at or after `since` lies
/// in `[low, high]` (`high` the end: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Search {
    pub(crate) low: i64,
    pub(crate) high: i64,
}

impl Search {
    /// The offset to read next, while the search is open.
    pub(crate) fn probe(&self) -> Option<i64> {
        (self.low < self.high).then(|| self.low + (self.high - self.low) / 2)
    }

    /// What reading from `probe` found: the first readable output at or
    /// after it (its offset and decision time), or nothing before the end.
    pub(crate) fn seen(&mut self, probe: i64, found: Option<(i64, Option<Millis>)>, since: Millis) {
        match found {
            Some((_, Some(decided))) if decided >= since => self.high = probe,
            Some((offset, _)) => self.low = (offset + 1).min(self.high),
            None => self.high = probe,
        }
    }
}

/// The decision time an output carries, else its timestamp (an output
/// written before the header was).
pub(crate) fn decided_at(message: &impl Message) -> Option<Millis> {
    use rdkafka::message::Headers;
    let header = message
        .headers()
        .and_then(|h| h.iter().find(|h| h.key == DECIDED_AT))
        .and_then(|h| std::str::from_utf8(h.value?).ok())
        .and_then(|v| v.parse().ok());
    header.or(message.timestamp().to_millis())
}

/// Per partition of `clean`, the first offset holding an output decided at
/// or after `since` (the end where none is), by a binary search run on
/// every partition at once: a step assigns each open partition at its
/// probe and reads one output of each.
pub(crate) fn by_decision(
    consumer: &BaseConsumer<QuietContext>,
    clean: &str,
    partitions: &[i32],
    since: Millis,
) -> Result<HashMap<i32, i64>, RebuildError> {
    let kafka = RebuildError::Kafka;
    let mut searches = HashMap::new();
    for &partition in partitions {
        let (low, high) = consumer
            .fetch_watermarks(clean, partition, REQUEST_TIMEOUT)
            .map_err(kafka)?;
        searches.insert(partition, Search { low, high });
    }
    loop {
        let probes: HashMap<i32, i64> = searches
            .iter()
            .filter_map(|(p, s)| Some((*p, s.probe()?)))
            .collect();
        if probes.is_empty() {
            return Ok(searches.into_iter().map(|(p, s)| (p, s.high)).collect());
        }
        let mut assignment = TopicPartitionList::new();
        for (partition, probe) in &probes {
            assignment
                .add_partition_offset(clean, *partition, Offset::Offset(*probe))
                .map_err(kafka)?;
        }
        consumer.assign(&assignment).map_err(kafka)?;
        let mut waiting = probes.clone();
        let mut quiet = Quiet::new();
        while !waiting.is_empty() {
            let Some(polled) = quiet.poll(consumer, clean, || waiting.keys().copied().collect())?
            else {
                continue;
            };
            let (partition, found) = match polled {
                Ok(message) => (
                    message.partition(),
                    Some((message.offset(), decided_at(&message))),
                ),
                Err(KafkaError::PartitionEOF(partition)) => (partition, None),
                Err(error) => return Err(kafka(error)),
            };
            // One answer a partition a step: the first read from its probe.
            let Some(probe) = waiting.remove(&partition) else {
                continue;
            };
            if let Some(search) = searches.get_mut(&partition) {
                search.seen(probe, found, since);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search over `decided` (one decision time an offset, `None`
    /// where the offset holds no readable output) for `since`: the first
    /// output a read from its answer meets (the end where none).
    fn search(decided: &[Option<Millis>], since: Millis) -> i64 {
        let mut s = Search {
            low: 0,
            high: decided.len() as i64,
        };
        let mut steps = 0;
        while let Some(probe) = s.probe() {
            let found = (probe..decided.len() as i64)
                .find(|o| decided[*o as usize].is_some())
                .map(|o| (o, decided[o as usize]));
            s.seen(probe, found, since);
            steps += 1;
            assert!(steps <= 64, "the search does not end");
        }
        (s.low..decided.len() as i64)
            .find(|o| decided[*o as usize].is_some())
            .unwrap_or(decided.len() as i64)
    }

    #[test]
    fn the_search_finds_the_first_output_decided_since() {
        let decided: Vec<Option<Millis>> = (0..1000).map(|o| Some(o * 10)).collect();
        assert_eq!(search(&decided, 5_000), 500);
        assert_eq!(search(&decided, 5_001), 501);
        assert_eq!(search(&decided, 0), 0);
        assert_eq!(search(&decided, 10_000), 1000, "none: the end");
    }

    #[test]
    fn offsets_without_an_output_are_stepped_over() {
        // Transaction markers at every third offset.
        let decided: Vec<Option<Millis>> =
            (0..300).map(|o| (o % 3 != 2).then_some(o * 10)).collect();
        assert_eq!(search(&decided, 1_500), 150);
        assert_eq!(search(&decided, 1_510), 151);
        assert_eq!(search(&decided, 1_520), 153, "152 holds none");
    }

    #[test]
    fn an_empty_partition_is_searched_at_once() {
        assert_eq!(search(&[], 0), 0);
    }
}
