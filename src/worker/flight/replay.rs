//! A partition's replay, for the log (docs/design.md §4.9): the records an
//! owner reads again below the partition's delivered watermark, after an
//! operator's `idemgate reset` moved the group's offset back (or a crash
//! left the commit behind the watermark). They are decided as they arrive
//! (finished with nothing produced, or, in a `--re-emit` range, claimed
//! and produced again), so without a word in the log thousands of records
//! pass unseen. The flight notes the replay when it knows both ends (the
//! watermark read, the first offset known), counts its records as they are
//! decided, and hands the loop two lines to log: its start and its end.
//!
//! The end comes once the range is read to its last record (the record just
//! below the watermark, or one at or above it where the last offsets of the
//! range held none: a transaction marker, a compacted one) and every record
//! of the range read so far is decided. A `--re-emit` range decides its
//! records as their claims are answered, after a record without a hash
//! (finished as it arrives) that may be the range's last: the end waits
//! for them, so its counts are the whole range's. A partition revoked
//! mid-replay logs no end; its next owner logs a replay of its own.

use super::{Flight, Stage, Tp};

/// A replay under way, with what its end waits for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Replaying {
    replay: Replay,
    /// Records of the range read so far (each is decided once).
    read: u64,
    /// The range is read to its end.
    read_all: bool,
}

/// A replay under way: `[from, to)`, to the watermark, and its records
/// decided so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Replay {
    pub(crate) from: i64,
    pub(crate) to: i64,
    /// The `--re-emit` range the store holds for the partition, if any.
    pub(crate) re_emit: Option<(i64, i64)>,
    /// Decided before: finished, nothing produced.
    pub(crate) suppressed: u64,
    /// Produced again, marked `idemgate-replay` (`--re-emit`).
    pub(crate) re_emitted: u64,
    /// Decided anew: a re-emit claim that had expired, a record passed
    /// unverified while the store was down.
    pub(crate) anew: u64,
}

impl Replay {
    /// A replay, where the owner starts below the watermark.
    fn begins(
        from: Option<i64>,
        watermark: Option<i64>,
        re_emit: Option<(i64, i64)>,
    ) -> Option<Self> {
        let (from, to) = (from?, watermark?);
        (from < to).then_some(Replay {
            from,
            to,
            re_emit,
            suppressed: 0,
            re_emitted: 0,
            anew: 0,
        })
    }

    /// Records decided so far.
    pub(crate) fn replayed(&self) -> u64 {
        self.suppressed + self.re_emitted + self.anew
    }
}

/// A line for the loop to log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReplayLog {
    pub(crate) tp: Tp,
    pub(crate) stream: usize,
    pub(crate) replay: Replay,
    /// The replay's end (else its start).
    pub(crate) ended: bool,
}

impl Flight {
    /// The partition's watermark and first offset are known: a replay
    /// starts if the first offset lies below the watermark.
    pub(super) fn replay_begins(&mut self, tp: &Tp) {
        let Some(p) = self.partitions.get_mut(tp) else {
            return;
        };
        if p.replaying.is_some() || !p.fresh {
            return;
        }
        let Some(replay) = Replay::begins(p.range_start, p.watermark, p.replay) else {
            return;
        };
        // The records read before the watermark was known, undecided yet.
        let read = p
            .records
            .range(replay.from..)
            .take_while(|(offset, _)| **offset < replay.to)
            .count() as u64;
        p.replaying = Some(Replaying {
            replay,
            read,
            read_all: false,
        });
        self.open_replays += 1;
        self.replay_log.push(ReplayLog {
            tp: tp.clone(),
            stream: p.stream,
            replay,
            ended: false,
        });
    }

    /// A record of the partition was read after its replay began.
    pub(super) fn replay_read(&mut self, tp: &Tp, offset: i64) {
        if self.open_replays == 0 {
            return;
        }
        let Some(replaying) = self
            .partitions
            .get_mut(tp)
            .and_then(|p| p.replaying.as_mut())
        else {
            return;
        };
        if (replaying.replay.from..replaying.replay.to).contains(&offset) {
            replaying.read += 1;
        }
    }

    /// A record of the partition entered `stage`: counted if that decided
    /// a replayed record; the replay ends once it is read to its last
    /// record (or a record above it) and every record read is decided.
    pub(super) fn replay_step(&mut self, tp: &Tp, offset: i64, stage: Stage) {
        if self.open_replays == 0 {
            return;
        }
        let Some(p) = self.partitions.get_mut(tp) else {
            return;
        };
        let Some(replaying) = p.replaying.as_mut() else {
            return;
        };
        let replay = &mut replaying.replay;
        if offset < replay.from {
            return;
        }
        if offset < replay.to {
            match stage {
                Stage::Finished => replay.suppressed += 1,
                Stage::Produce | Stage::Delivered
                    if p.records.get(&offset).is_some_and(|r| r.replay) =>
                {
                    replay.re_emitted += 1
                }
                Stage::Produce | Stage::Delivered => replay.anew += 1,
                // Not decided yet (claimed, waiting).
                _ => return,
            }
        }
        if offset + 1 >= replay.to {
            replaying.read_all = true;
        }
        if !replaying.read_all || replaying.replay.replayed() < replaying.read {
            return;
        }
        let replay = replaying.replay;
        p.replaying = None;
        self.open_replays -= 1;
        self.replay_log.push(ReplayLog {
            tp: tp.clone(),
            stream: p.stream,
            replay,
            ended: true,
        });
    }

    /// The replays' starts and ends since the last call, for the log.
    pub(crate) fn take_replay_log(&mut self) -> Vec<ReplayLog> {
        std::mem::take(&mut self.replay_log)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::tests::{assigned, input, print, tp, TOKEN};
    use super::*;
    use crate::fingerprint::Invalid;
    use crate::store::{ClaimOutcome, RoundAnswer};

    fn replay(from: i64, re_emit: Option<(i64, i64)>, counts: [u64; 3]) -> Replay {
        Replay {
            from,
            to: 10,
            re_emit,
            suppressed: counts[0],
            re_emitted: counts[1],
            anew: counts[2],
        }
    }

    fn line(replay: Replay, ended: bool) -> ReplayLog {
        ReplayLog {
            tp: tp(0),
            stream: 0,
            replay,
            ended,
        }
    }

    #[test]
    fn a_replay_logs_its_start_once_and_its_end_when_its_last_record_is_decided() {
        // Committed at 4 after a reset: 4..10 are read again.
        let mut f = assigned(Some(4), None);
        assert_eq!(
            f.take_replay_log(),
            vec![line(replay(4, None, [0; 3]), false)]
        );
        for offset in 4..9 {
            f.arrive(input(0, offset), 0, print(offset as u8), 1);
        }
        assert!(
            f.take_replay_log().is_empty(),
            "no end before the last record"
        );
        f.arrive(input(0, 9), 0, Err(Invalid::NotObject), 1);
        assert_eq!(
            f.take_replay_log(),
            vec![line(replay(4, None, [6, 0, 0]), true)]
        );
        f.arrive(input(0, 10), 0, print(10), 1);
        assert!(f.take_replay_log().is_empty(), "one end, and no new start");
    }

    #[test]
    fn a_re_emitting_replay_counts_what_it_produced_again() {
        let mut f = assigned(None, Some((7, 10)));
        // No commit: the replay starts with the first record read.
        assert!(f.take_replay_log().is_empty());
        for offset in 7..10 {
            f.arrive(input(0, offset), 0, print(offset as u8), 1);
        }
        let started = replay(7, Some((7, 10)), [0; 3]);
        assert_eq!(f.take_replay_log(), vec![line(started, false)]);
        let round = f.take_round(Instant::now(), 100, TOKEN).expect("round");
        let answer = RoundAnswer {
            outcomes: vec![
                ClaimOutcome::Reemit,
                ClaimOutcome::Replayed,
                ClaimOutcome::Reemit,
            ],
            ..RoundAnswer::default()
        };
        f.answered(round, answer, Instant::now(), |_| false);
        let ended = replay(7, Some((7, 10)), [1, 2, 0]);
        assert_eq!(f.take_replay_log(), vec![line(ended, true)]);
    }

    #[test]
    fn a_re_emitting_replay_whose_last_record_has_no_hash_ends_once_the_claims_are_answered() {
        // 9 has no hash: finished as it arrives, while 7 and 8 wait for
        // their round. The end counts them too.
        let mut f = assigned(None, Some((7, 10)));
        for offset in 7..9 {
            f.arrive(input(0, offset), 0, print(offset as u8), 1);
        }
        f.arrive(input(0, 9), 0, Err(Invalid::NotObject), 1);
        let started = replay(7, Some((7, 10)), [0; 3]);
        assert_eq!(f.take_replay_log(), vec![line(started, false)]);
        let round = f.take_round(Instant::now(), 100, TOKEN).expect("round");
        let answer = RoundAnswer {
            outcomes: vec![ClaimOutcome::Reemit, ClaimOutcome::Reemit],
            ..RoundAnswer::default()
        };
        f.answered(round, answer, Instant::now(), |_| false);
        let ended = replay(7, Some((7, 10)), [1, 2, 0]);
        assert_eq!(f.take_replay_log(), vec![line(ended, true)]);
    }

    #[test]
    fn records_read_before_the_watermark_is_known_are_in_the_replay_they_begin() {
        let mut f = Flight::default();
        let from = crate::worker::flight::Resume {
            committed: Some(7),
            ..Default::default()
        };
        f.assign(tp(0), 0, from);
        for offset in 7..10 {
            f.arrive(input(0, offset), 0, print(offset as u8), 1);
        }
        assert!(f.take_replay_log().is_empty(), "the watermark is not known");
        let round = f.take_round(Instant::now(), 100, TOKEN).expect("round");
        let answer = RoundAnswer {
            watermarks: vec![crate::store::Watermark {
                stream: crate::store::StreamId(0),
                topic: super::super::TopicTag::of("raw"),
                partition: 0,
                below: 10,
            }],
            ..RoundAnswer::default()
        };
        f.answered(round, answer, Instant::now(), |_| false);
        assert_eq!(
            f.take_replay_log(),
            vec![
                line(replay(7, None, [0; 3]), false),
                line(replay(7, None, [3, 0, 0]), true)
            ]
        );
    }

    #[test]
    fn a_record_above_the_watermark_ends_a_replay_whose_last_offsets_hold_none() {
        let mut f = assigned(Some(8), None);
        f.take_replay_log();
        f.arrive(input(0, 8), 0, print(1), 1);
        // 9 is a transaction marker: no record.
        f.arrive(input(0, 10), 0, print(2), 1);
        assert_eq!(
            f.take_replay_log(),
            vec![line(replay(8, None, [1, 0, 0]), true)]
        );
    }

    #[test]
    fn an_owner_at_the_watermark_replays_nothing() {
        let mut f = assigned(Some(10), None);
        f.arrive(input(0, 10), 0, print(1), 1);
        assert!(f.take_replay_log().is_empty());
    }
}
