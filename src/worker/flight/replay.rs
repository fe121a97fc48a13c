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
//! The end is the decision of the record just below the watermark, or the
//! arrival of a record at or above it (the last offsets of the range held
//! no record: a transaction marker, a compacted one). The counts are those
//! decided by then: a re-emitted record still waiting on a claim then is
//! not in them. A partition revoked mid-replay logs no end; its next owner
//! logs a replay of its own.

use super::{Flight, Stage, Tp};

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
        p.replaying = Replay::begins(p.range_start, p.watermark, p.replay);
        if let Some(replay) = p.replaying {
            self.open_replays += 1;
            self.replay_log.push(ReplayLog {
                tp: tp.clone(),
                stream: p.stream,
                replay,
                ended: false,
            });
        }
    }

    /// A record of the partition entered `stage`: counted if that decided
    /// a replayed record; the replay ends with its last record, or with a
    /// record above it.
    pub(super) fn replay_step(&mut self, tp: &Tp, offset: i64, stage: Stage) {
        if self.open_replays == 0 {
            return;
        }
        let Some(p) = self.partitions.get_mut(tp) else {
            return;
        };
        let Some(replay) = p.replaying.as_mut() else {
            return;
        };
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
            if offset + 1 < replay.to {
                return;
            }
        }
        let replay = *replay;
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
