//! Deliveries in the flight, and the commits: what to send, what a
//! delivery report does to its record, and each partition's finished
//! prefix.

use std::time::Instant;

use super::{Flight, Settle, Stage, Tp, MAX_BACKOFF};
use crate::decision::{Decision, Refused};
use crate::worker::record::{Carry, Failure};

/// What a delivery report did to its record.
#[derive(Debug, PartialEq)]
pub(crate) enum Reported {
    /// Delivered with this decision.
    Delivered(Decision),
    /// May have landed: the claim is kept and the output sent again.
    Retry(String),
    /// Refused for its size or content: sent again to audit without its
    /// payload (a fresh claim it won is released).
    Refused(String),
    /// Even a bare audit record was refused: given up, loudly.
    GaveUp(String),
    /// The record is gone (its partition was revoked).
    Gone,
}

/// A partition's offset to commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Commit {
    pub(crate) tp: Tp,
    pub(crate) offset: i64,
    /// Every record below `offset` was decided and delivered, and this
    /// owner's watermark chain is unbroken: the next owner may raise the
    /// watermark to it.
    pub(crate) gap_free: bool,
    /// Finished ranges above `offset`: the next owner skips them.
    pub(crate) done: Vec<(i64, i64)>,
}

impl Flight {
    /// Records whose output is to be sent now (decided, or past their
    /// backoff), marked `Sending`.
    pub(crate) fn take_sends(&mut self, now: Instant) -> Vec<(Tp, i64)> {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.backoffs)
            .into_iter()
            .partition(|(at, _, _)| *at <= now);
        self.backoffs = later;
        let mut out = std::mem::take(&mut self.queue);
        out.extend(due.into_iter().map(|(_, tp, offset)| (tp, offset)));
        let txn = self.open_txn;
        out.retain(|(tp, offset)| match self.record_mut(tp, *offset) {
            Some(record) if matches!(record.stage, Stage::Produce | Stage::Backoff { .. }) => {
                record.stage = Stage::Sending;
                record.txn = txn;
                true
            }
            _ => false,
        });
        out
    }

    /// Applies one delivery report.
    pub(crate) fn reported(
        &mut self,
        tp: &Tp,
        offset: i64,
        epoch: u64,
        result: Result<(), Failure>,
        now: Instant,
    ) -> Reported {
        let transactional = self.settle == Settle::WithTransaction;
        let Some(record) = self.record_mut(tp, offset) else {
            return Reported::Gone;
        };
        // A report for an earlier assignment's attempt is not this record's.
        if record.stage != Stage::Sending || record.epoch != epoch {
            return Reported::Gone;
        }
        let decision = record.decision.clone().unwrap_or(Decision::Unverified);
        let reported = match result {
            Ok(()) if transactional => {
                // In its transaction: settled once that commits.
                record.stage = Stage::Produced;
                if Some(record.txn) == self.sealed_txn {
                    self.sealed.push((tp.clone(), offset));
                } else {
                    self.in_txn.push((tp.clone(), offset));
                }
                return Reported::Delivered(decision);
            }
            Ok(()) => {
                record.stage = Stage::Delivered;
                Reported::Delivered(decision)
            }
            Err(Failure::Retry(error)) => {
                // This attempt may have landed: whatever later attempts
                // meet, the claim is never released (docs/design.md §4.5).
                if let Some(owned) = record.claim.as_mut() {
                    owned.fresh = false;
                }
                let until = now + record.backoff;
                record.backoff = (record.backoff * 2).min(MAX_BACKOFF);
                record.stage = Stage::Backoff { until };
                self.backoffs.push((until, tp.clone(), offset));
                return Reported::Retry(error);
            }
            Err(Failure::Refused(error)) => {
                let bare = match &decision {
                    Decision::Undeliverable(Refused { bare: true, .. }) => {
                        record.stage = Stage::Delivered;
                        None
                    }
                    Decision::Undeliverable(Refused { bare: false, .. }) => Some(true),
                    _ => Some(false),
                };
                match bare {
                    None => Reported::GaveUp(error),
                    Some(bare) => {
                        if let Some(owned) = record.claim.as_mut() {
                            // Certainly not persisted: a claim this record
                            // wrote itself goes; any other stays.
                            owned.release |= decision == Decision::Novel && owned.fresh;
                            owned.insert = None;
                        }
                        let carry = if bare { Carry::NoPayload } else { Carry::Whole };
                        record.decision = Some(Decision::Undeliverable(Refused {
                            bytes: carry.bytes(&record.input),
                            reason: error.clone(),
                            bare,
                        }));
                        record.stage = Stage::Produce;
                        self.queue.push((tp.clone(), offset));
                        return Reported::Refused(error);
                    }
                }
            }
        };
        if record.claim.is_none() {
            self.finish_at(tp, offset);
        } else {
            self.to_settle.push((tp.clone(), offset));
        }
        reported
    }

    /// Exactly once: whether `tp`/`offset`'s output was last sent in the
    /// open transaction (not the one sealed and committing).
    pub(crate) fn sent_in_open_txn(&self, tp: &Tp, offset: i64) -> bool {
        self.record(tp, offset)
            .is_some_and(|r| r.txn == self.open_txn)
    }

    /// Whether any output awaits its delivery report.
    pub(crate) fn sending(&self, tp: &Tp) -> bool {
        self.partitions.get(tp).is_some_and(|p| {
            p.records
                .values()
                .any(|r| matches!(r.stage, Stage::Sending))
        })
    }

    /// The earliest instant a record waits for (a backoff, a claim retry).
    pub(crate) fn next_due(&self) -> Option<Instant> {
        let backoff = self.backoffs.iter().map(|(at, _, _)| *at).min();
        backoff.into_iter().chain(self.earliest_wait).min()
    }

    /// Per partition, the offset after its contiguous run of finished
    /// records and the finished ranges above it, where either moved since
    /// the last call; the records below the offset are dropped. `only`
    /// limits it to one partition (a revoke).
    pub(crate) fn commits(&mut self, only: Option<&Tp>) -> Vec<Commit> {
        let mut out = Vec::new();
        for (tp, p) in &mut self.partitions {
            if only.is_some_and(|o| o != tp) || p.keep_commit {
                continue;
            }
            let Some(end) = p.finished_end() else {
                p.records.quiet();
                continue;
            };
            // The last owner's finished ranges this owner has not passed
            // yet go on with every commit: it may not have read them yet,
            // and a commit without them would make the owner after it
            // decide them again (two audit outputs for one input).
            let done = carried_forward(finished_ranges(&p.records, end), &p.skip, end);
            let moved = p.committed.is_none_or(|c| end > c);
            if !moved && done == p.committed_done {
                p.records.quiet();
                continue;
            }
            p.committed = Some(end);
            p.records.drop_below(end);
            p.committed_done.clone_from(&done);
            out.push(Commit {
                tp: tp.clone(),
                offset: end,
                gap_free: p.gap_free,
                done,
            });
        }
        out
    }
}

/// Runs of finished records at or above `from`, as `[first, last + 1)`.
fn finished_ranges(records: &super::records::Records, from: i64) -> Vec<(i64, i64)> {
    let mut ranges: Vec<(i64, i64)> = Vec::new();
    let mut open = false;
    for (&offset, record) in records.range(from..) {
        let finished = record.stage == Stage::Finished;
        match (finished, open, ranges.last_mut()) {
            (true, true, Some(last)) => last.1 = offset + 1,
            (true, _, _) => ranges.push((offset, offset + 1)),
            (false, _, _) => {}
        }
        open = finished;
    }
    ranges
}

/// `ranges` and the last owner's finished ranges `skip` that reach above
/// `end` (clipped to it), sorted and joined: what a commit at `end` lists
/// as finished, so that ranges the last owner finished survive every
/// commit until the prefix passes them (docs/design.md §7).
pub(crate) fn carried_forward(
    mut ranges: Vec<(i64, i64)>,
    skip: &[(i64, i64)],
    end: i64,
) -> Vec<(i64, i64)> {
    ranges.extend(
        skip.iter()
            .filter(|(_, to)| *to > end)
            .map(|(from, to)| ((*from).max(end), *to)),
    );
    ranges.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (from, to) in ranges {
        match out.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => out.push((from, to)),
        }
    }
    out
}
