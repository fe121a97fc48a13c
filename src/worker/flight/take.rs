//! Putting the next round together: the publish of what was delivered,
//! the claims of what is ready, the watermark reads of fresh partitions.

use std::time::Instant;

use super::{claim_of, Flight, RaiseFor, Round, Settle, Stage, Tp, FIRST_BACKOFF};
use crate::store::{Insert, OwnerToken, Raise, StreamId};

impl Flight {
    /// The next round: the publish of everything delivered, the claims of
    /// everything ready (at most `max_claims`), the watermarks of fresh
    /// partitions. `None` when there is nothing to send.
    pub(crate) fn take_round(
        &mut self,
        now: Instant,
        max_claims: usize,
        token: OwnerToken,
    ) -> Option<Round> {
        self.take(now, max_claims, token, self.settle == Settle::OnDelivery)
    }

    /// A handover's last round: the publish of everything delivered, a
    /// done flag on every record left above its watermark, no claims.
    pub(crate) fn take_last_round(&mut self, now: Instant, token: OwnerToken) -> Option<Round> {
        self.take(now, 0, token, false)
    }

    /// `wait_for_raises`: at least once, a delivered record above its
    /// partition's delivered prefix, with only outputs in flight below it
    /// (`Sending`), is left for a later round instead of given a done flag:
    /// the raise that comes once those are delivered settles it with the
    /// rest. Outputs of one batch are reported a produce request at a
    /// time, out of their input's order, and a round sent at the first
    /// report would otherwise set a done flag on about two records in five
    /// (docs/design.md §4.3). A hole that may last (a record waiting on
    /// another's claim, a backoff, a claim to come) never holds one back:
    /// those records are why done flags exist (partitions do not wait on
    /// each other).
    fn take(
        &mut self,
        now: Instant,
        max_claims: usize,
        token: OwnerToken,
        wait_for_raises: bool,
    ) -> Option<Round> {
        let mut round = Round::default();
        // Exactly once writes tier 2 before the transaction commits.
        let early_inserts = self.settle == Settle::WithTransaction;
        // Per partition, the end of the delivered prefix a raise in this
        // round vouches for: settlements below it need no done flag.
        let mut covered_by: Vec<(Tp, i64, i64)> = Vec::new();
        // The run of outputs in flight is looked for only when something
        // is to be settled.
        let scan_for_raises = wait_for_raises && !self.to_settle.is_empty();
        for (tp, partition) in &self.partitions {
            if !partition.fresh {
                round.read.push(StreamId(partition.stream));
                round.freshened.push(tp.clone());
            }
        }
        for (tp, partition) in &mut self.partitions {
            let stream = StreamId(partition.stream);
            if let Some(end) = partition.metadata_raise.take() {
                round.publish.raises.push(Raise {
                    stream,
                    topic: partition.tag,
                    partition: tp.1,
                    start: 0,
                    end,
                });
                round.raise_of.push((tp.clone(), RaiseFor::Metadata(end)));
            }
            let end = partition.delivered_end();
            let raise = partition.fresh && partition.gap_free && end > partition.raised;
            if let (true, Some(start)) = (raise, partition.range_start) {
                round.publish.raises.push(Raise {
                    stream,
                    topic: partition.tag,
                    partition: tp.1,
                    start,
                    end,
                });
                round.raise_of.push((tp.clone(), RaiseFor::Prefix(end)));
            }
            partition_covered(&mut covered_by, tp, partition, end, scan_for_raises);
        }
        // Settlements: everything delivered since the last round.
        let mut later = Vec::new();
        for (tp, offset) in std::mem::take(&mut self.to_settle) {
            let (covered, in_flight_to) = covered_by
                .iter()
                .find(|(t, ..)| *t == tp)
                .map_or((i64::MIN, i64::MIN), |(_, end, to)| (*end, *to));
            let Some(partition) = self.partitions.get_mut(&tp) else {
                continue;
            };
            let stream = StreamId(partition.stream);
            let Some(record) = partition.records.get_mut(&offset) else {
                continue;
            };
            if record.stage != Stage::Delivered {
                continue;
            }
            let Some(owned) = record.claim.as_mut() else {
                continue;
            };
            if !owned.release && offset >= covered && offset < in_flight_to {
                later.push((tp, offset));
                continue;
            }
            if let Some(at) = owned.insert {
                round.publish.inserts.push(Insert {
                    stream,
                    hash: owned.held.hash,
                    at,
                });
            }
            if owned.release {
                round.publish.releases.push(owned.held);
                round.release_of.push((tp.clone(), offset));
            } else if offset >= covered {
                round.publish.done.push(owned.held);
                round.done_of.push((tp.clone(), offset));
            }
            record.stage = Stage::Settling;
            round.settling_of.push((tp, offset));
        }
        self.to_settle = later;
        // Claims: what is ready, oldest first.
        while round.claims.len() < max_claims {
            let Some((tp, offset)) = self.to_claim.pop_front() else {
                break;
            };
            if self.record(&tp, offset).map(|r| r.stage) != Some(Stage::Claim)
                || self.divert(&tp, offset)
            {
                continue;
            }
            let Some((record, tag)) = self.record_and_tag(&tp, offset) else {
                continue;
            };
            if let Some(claim) = claim_of(record, tag, token, early_inserts) {
                round.claims.push(claim);
                record.stage = Stage::Claiming;
                round.claim_of.push((tp, offset));
            }
        }
        // Waiting records: those due claim again, the others stay.
        let mut local_holders = Vec::new();
        let mut earliest_wait = None;
        let waits = std::mem::take(&mut self.waits);
        for (tp, offset) in waits {
            match self.record(&tp, offset).map(|r| r.stage) {
                Some(Stage::Wait { retry_at }) if retry_at <= now => {
                    local_holders.push((tp, offset));
                }
                Some(Stage::Wait { retry_at }) => {
                    earliest_wait =
                        Some(earliest_wait.map_or(retry_at, |e: Instant| e.min(retry_at)));
                    self.waits.push((tp, offset));
                }
                _ => {}
            }
        }
        // A copy waits on a holder in flight here until that holder is
        // finished; on one elsewhere, it claims again after its backoff.
        for (tp, offset) in local_holders {
            if self.divert(&tp, offset) {
                continue;
            }
            let holder_busy = self.holder_in_flight(&tp, offset);
            if holder_busy || round.claims.len() >= max_claims {
                // Looked at again shortly, not at once: the loop sleeps
                // until the earliest due record.
                if let Some(record) = self.record_mut(&tp, offset) {
                    record.stage = Stage::Wait {
                        retry_at: now + FIRST_BACKOFF,
                    };
                    self.waits.push((tp, offset));
                }
                earliest_wait = Some(now + FIRST_BACKOFF);
                continue;
            }
            if let Some((record, tag)) = self.record_and_tag(&tp, offset) {
                if let Some(claim) = claim_of(record, tag, token, early_inserts) {
                    round.claims.push(claim);
                    record.stage = Stage::Claiming;
                    round.claim_of.push((tp, offset));
                }
            }
        }
        self.earliest_wait = earliest_wait;
        round.read.sort_unstable();
        round.read.dedup();
        let empty = round.publish.is_empty() && round.claims.is_empty() && round.read.is_empty();
        (!empty).then_some(round)
    }

    /// Whether any record of the partition waits on another's claim.
    pub(crate) fn has_waiting(&self, tp: &Tp) -> bool {
        self.waits.iter().any(|(t, offset)| {
            t == tp
                && self
                    .record(t, *offset)
                    .is_some_and(|r| matches!(r.stage, Stage::Wait { .. }))
        })
    }

    /// Whether the holder a waiting record last met is a record in flight
    /// here, not finished yet.
    fn holder_in_flight(&self, tp: &Tp, offset: i64) -> bool {
        let Some(record) = self.record(tp, offset) else {
            return false;
        };
        let Some(holder) = record.waiting_on else {
            return false;
        };
        self.partitions
            .iter()
            .find(|(htp, p)| {
                p.tag == holder.topic && htp.1 == holder.partition && p.stream == record.stream
            })
            .and_then(|(_, p)| p.records.get(&holder.offset))
            .is_some_and(|h| h.stage != Stage::Finished)
    }
}

/// Notes, for a partition whose raises hold (its watermark read, its range
/// gap-free), the end of the delivered prefix a raise of this round covers
/// and, when `wait_for_raises`, the end of the run above it of records
/// delivered or with their outputs in flight: a delivered record below that
/// end is settled by a later raise (see `take`).
fn partition_covered(
    covered_by: &mut Vec<(Tp, i64, i64)>,
    tp: &Tp,
    partition: &super::Partition,
    end: i64,
    wait_for_raises: bool,
) {
    if !(partition.fresh && partition.gap_free) {
        return;
    }
    let in_flight_to = if wait_for_raises {
        partition
            .records
            .range(end..)
            .find(|(_, r)| {
                !matches!(
                    r.stage,
                    Stage::Sending | Stage::Delivered | Stage::Settling | Stage::Finished
                )
            })
            .map_or(i64::MAX, |(&offset, _)| offset)
    } else {
        i64::MIN
    };
    covered_by.push((tp.clone(), end, in_flight_to));
}
