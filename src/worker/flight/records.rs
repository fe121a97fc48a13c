//! A partition's records in flight, by offset: read in offset order and
//! kept until their offset is committed, so they sit in a ring buffer in
//! that order. A record is found by its distance from the first one (a
//! partition's offsets are contiguous but for transaction markers and
//! compacted records), or else by a binary search; none moves once read.

use std::collections::VecDeque;
use std::ops::RangeFrom;

use super::Record;

/// Records' room a partition keeps however few it holds.
const KEPT_ROOM: usize = 1024;
/// Commit spans over which a partition's room is judged (a second at the
/// default commit interval).
const ROOM_SPANS: u32 = 10;

#[derive(Default)]
pub(crate) struct Records {
    entries: VecDeque<(i64, Record)>,
    /// The most records held in the commit spans since the room was last
    /// judged, and how many spans that is.
    peak: usize,
    spans: u32,
}

impl Records {
    /// Where `offset` is, or where it would go.
    fn index(&self, offset: i64) -> Result<usize, usize> {
        let Some(&(first, _)) = self.entries.front() else {
            return Err(0);
        };
        let guess = usize::try_from(offset.saturating_sub(first)).unwrap_or(0);
        match self.entries.get(guess) {
            Some((at, _)) if *at == offset => Ok(guess),
            _ => self.entries.binary_search_by_key(&offset, |(at, _)| *at),
        }
    }

    pub(crate) fn get(&self, offset: &i64) -> Option<&Record> {
        let at = self.index(*offset).ok()?;
        self.entries.get(at).map(|(_, record)| record)
    }

    pub(crate) fn get_mut(&mut self, offset: &i64) -> Option<&mut Record> {
        let at = self.index(*offset).ok()?;
        self.entries.get_mut(at).map(|(_, record)| record)
    }

    /// Keeps `record` at `offset` (records arrive in offset order: it goes
    /// last; one that does not is put in its place all the same).
    pub(crate) fn insert(&mut self, offset: i64, record: Record) {
        match self.entries.back() {
            Some(&(last, _)) if last >= offset => match self.index(offset) {
                Ok(at) => self.entries[at] = (offset, record),
                Err(at) => self.entries.insert(at, (offset, record)),
            },
            _ => self.entries.push_back((offset, record)),
        }
    }

    /// The records at `from.start` and above, in offset order.
    pub(crate) fn range(&self, from: RangeFrom<i64>) -> impl Iterator<Item = (&i64, &Record)> {
        let start = self.index(from.start).unwrap_or_else(|at| at);
        self.entries
            .range(start..)
            .map(|(offset, record)| (offset, record))
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&i64, &mut Record)> {
        self.entries
            .iter_mut()
            .map(|(offset, record)| (&*offset, record))
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Record> {
        self.entries.iter().map(|(_, record)| record)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Forgets the records below `end` (their offset is committed).
    pub(crate) fn drop_below(&mut self, end: i64) {
        // Records only arrive between two commits: what the partition
        // holds before this one is the most it held in the span.
        let held = self.entries.len();
        let at = self.index(end).unwrap_or_else(|at| at);
        self.entries.drain(..at);
        self.end_span(held);
    }

    /// A commit found nothing new for this partition: a span in which it
    /// held what it holds now.
    pub(crate) fn quiet(&mut self) {
        self.end_span(self.entries.len());
    }

    /// Room a burst took is given back once [`ROOM_SPANS`] commit spans
    /// in a row held less than a quarter of it (all but twice the most
    /// they held, [`KEPT_ROOM`] at least): a replica of many partitions
    /// does not keep every one's peak, and a partition that goes quiet
    /// after a burst gives it back within two such windows. Judged at each
    /// commit by what the commit left, a steady drain gave its room back and
    /// grew it again every few commits (a partition's records arrive in
    /// the chunks librdkafka fetches, thousands at a time, and most
    /// commits empty it): a copy of every record kept and fresh pages
    /// zeroed by the kernel, on the loop.
    fn end_span(&mut self, held: usize) {
        self.peak = self.peak.max(held);
        self.spans += 1;
        if self.spans < ROOM_SPANS {
            return;
        }
        let room = self.entries.capacity();
        if room > KEPT_ROOM && self.peak < room / 4 {
            self.entries.shrink_to(KEPT_ROOM.max(self.peak * 2));
        }
        self.peak = 0;
        self.spans = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{input, print};
    use super::super::{Record, Stage};
    use super::*;

    fn record(offset: i64) -> Record {
        let mut flight = super::super::Flight::default();
        flight.assign(super::super::tests::tp(0), 0, Default::default());
        flight.arrive(input(0, offset), 0, print(1), 1);
        let mut records = std::mem::take(
            &mut flight
                .partitions
                .get_mut(&super::super::tests::tp(0))
                .expect("assigned")
                .records,
        );
        records.entries.pop_front().expect("arrived").1
    }

    fn offsets(records: &Records, from: i64) -> Vec<i64> {
        records.range(from..).map(|(offset, _)| *offset).collect()
    }

    #[test]
    fn offsets_with_gaps_are_found_and_ranged_over_in_order() {
        let mut records = Records::default();
        // A transaction marker at 3, compacted records 6..100.
        for offset in [0, 1, 2, 4, 5, 100, 101] {
            records.insert(offset, record(offset));
        }
        assert_eq!(records.len(), 7);
        for offset in [0, 2, 4, 5, 100, 101] {
            assert_eq!(records.get(&offset).map(|r| r.input.offset), Some(offset));
        }
        for offset in [-1, 3, 6, 99, 102] {
            assert!(records.get(&offset).is_none(), "{offset}");
        }
        assert_eq!(offsets(&records, 3), [4, 5, 100, 101]);
        assert_eq!(offsets(&records, 50), [100, 101]);
        assert_eq!(offsets(&records, i64::MIN), [0, 1, 2, 4, 5, 100, 101]);
        assert!(offsets(&records, 102).is_empty());
    }

    #[test]
    fn a_record_out_of_order_takes_its_place_and_one_read_again_replaces_it() {
        let mut records = Records::default();
        for offset in [0, 2, 5] {
            records.insert(offset, record(offset));
        }
        records.insert(1, record(1));
        let mut again = record(2);
        again.stage = Stage::Finished;
        records.insert(2, again);
        assert_eq!(offsets(&records, 0), [0, 1, 2, 5]);
        assert_eq!(records.get(&2).map(|r| r.stage), Some(Stage::Finished));
    }

    #[test]
    fn a_commit_drops_what_lies_below_it() {
        let mut records = Records::default();
        for offset in [10, 11, 13, 14] {
            records.insert(offset, record(offset));
        }
        records.drop_below(12);
        assert_eq!(offsets(&records, 0), [13, 14]);
        records.drop_below(14);
        assert_eq!(offsets(&records, 0), [14]);
        records.drop_below(1_000);
        assert_eq!(records.len(), 0);
        // Read on after the commit: kept from there.
        records.insert(1_000, record(1_000));
        assert_eq!(offsets(&records, 0), [1_000]);
    }

    /// Records at offsets 0 to 20,000, read in one span, and the room
    /// they took.
    fn burst() -> (Records, usize) {
        let mut records = Records::default();
        for offset in 0..20_000 {
            records.insert(offset, record(offset));
        }
        let room = records.entries.capacity();
        assert!(room >= 20_000);
        (records, room)
    }

    /// Ends `spans` commit spans in which nothing arrives.
    fn quiet_for(records: &mut Records, spans: u32) {
        for _ in 0..spans {
            records.quiet();
        }
    }

    #[test]
    fn the_room_of_a_burst_is_given_back_once_the_partition_stays_quiet() {
        let (mut records, burst) = burst();
        // The commit that empties it keeps the room: its span held the
        // burst, and so the spans judged with it keep it, and the next
        // ROOM_SPANS but one.
        records.drop_below(20_000);
        assert_eq!(records.len(), 0);
        quiet_for(&mut records, 2 * ROOM_SPANS - 2);
        assert_eq!(records.entries.capacity(), burst);
        records.quiet();
        assert!(
            records.entries.capacity() <= 2 * KEPT_ROOM,
            "{} kept",
            records.entries.capacity()
        );
    }

    #[test]
    fn records_held_keep_their_room_and_a_lower_peak_keeps_twice_its_room() {
        let (mut records, burst) = burst();
        // Records waiting on their outputs: nothing moves for many spans.
        quiet_for(&mut records, 3 * ROOM_SPANS);
        assert_eq!(records.entries.capacity(), burst);
        // The burst goes but 3,000, held through the next spans.
        records.drop_below(17_000);
        quiet_for(&mut records, 2 * ROOM_SPANS);
        assert_eq!(records.len(), 3_000);
        let room = records.entries.capacity();
        assert!((3_000..=6_000).contains(&room), "{room} kept");
        assert_eq!(offsets(&records, 0), (17_000..20_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_partition_fed_in_chunks_keeps_its_room_from_commit_to_commit() {
        // librdkafka hands a partition's records over in chunks of
        // thousands: one span gets 3,000, the next two none, and every
        // commit empties the partition.
        let mut records = Records::default();
        let mut next = 0;
        let mut rooms = Vec::new();
        for span in 0..(6 * ROOM_SPANS) {
            if span % 3 == 0 {
                for _ in 0..3_000 {
                    records.insert(next, record(next));
                    next += 1;
                }
                records.drop_below(next);
            } else {
                records.quiet();
            }
            assert_eq!(records.len(), 0);
            rooms.push(records.entries.capacity());
        }
        assert!(rooms[0] >= 3_000, "{rooms:?}");
        assert!(rooms.iter().all(|&room| room == rooms[0]), "{rooms:?}");
    }
}
