//! A round's answer, or its failure, applied to the records it carried.

use std::time::Instant;

use super::{entry_stage, Flight, Owned, RaiseFor, Round, Settled, Stage, Tp, MAX_BACKOFF};
use crate::decision::Decision;
use crate::store::{ClaimOutcome, Held, RoundAnswer};
use crate::tier::Tier;

impl Flight {
    /// Applies a round's answer. `tiered(stream)` says whether a delivered
    /// novel record's hash goes into tier 2.
    pub(crate) fn answered(
        &mut self,
        round: Round,
        answer: RoundAnswer,
        now: Instant,
        tiered: impl Fn(usize) -> bool,
    ) -> Settled {
        let mut settled = Settled::default();
        for w in &answer.watermarks {
            let partition = self
                .partitions
                .iter_mut()
                .find(|(tp, p)| p.stream == w.stream.0 && p.tag == w.topic && tp.1 == w.partition);
            if let Some((_, p)) = partition {
                p.watermark = Some(p.watermark.map_or(w.below, |m| m.max(w.below)));
            }
        }
        // The re-emit ranges as the store holds them now: a partition read
        // without one has none (a later reset cleared it).
        if !answer.ranges.is_empty() || self.replaying {
            self.read_replays(&round, &answer);
        }
        for ((tp, why), now_at) in round.raise_of.iter().zip(&answer.raised) {
            let Some(p) = self.partitions.get_mut(tp) else {
                continue;
            };
            p.watermark = Some(p.watermark.map_or(*now_at, |m| m.max(*now_at)));
            match why {
                RaiseFor::Metadata(_) => {}
                RaiseFor::Prefix(end) if *now_at >= *end => p.raised = p.raised.max(*end),
                // Refused: this owner began above the watermark.
                RaiseFor::Prefix(_) => p.gap_free = false,
            }
        }
        for ((tp, offset), done) in round.done_of.iter().zip(&answer.done) {
            if !done {
                settled.lost += 1;
            }
            self.settle(tp, *offset);
        }
        for ((tp, offset), released) in round.release_of.iter().zip(&answer.released) {
            if *released {
                if let Some(r) = self.record(tp, *offset) {
                    settled.released.push(r.stream);
                }
            }
            self.settle(tp, *offset);
        }
        // What the raise covered is settled; what it did not (a refused
        // raise) goes out again with done flags.
        for (tp, offset) in &round.settling_of {
            let Some(p) = self.partitions.get_mut(tp) else {
                continue;
            };
            let covered = p.gap_free && *offset < p.raised;
            let Some(record) = p.records.get_mut(offset) else {
                continue;
            };
            if record.stage != Stage::Settling {
                continue;
            }
            if let Some(owned) = record.claim.as_mut() {
                owned.insert = None;
            }
            if covered {
                self.finish_at(tp, *offset);
            } else {
                record.stage = Stage::Delivered;
                self.to_settle.push((tp.clone(), *offset));
            }
        }
        for tp in &round.freshened {
            self.freshen(tp, &mut settled);
        }
        for &index in &answer.taken_over {
            if let Some(claim) = round.claims.get(index) {
                settled.taken_over.push(claim.stream.0);
            }
        }
        let mut store_lost = Vec::new();
        let claims = round.claim_of.iter().zip(&round.claims);
        for (((tp, offset), claim), outcome) in claims.zip(answer.outcomes) {
            let Some(record) = self.record_mut(tp, *offset) else {
                continue;
            };
            if record.stage != Stage::Claiming {
                continue;
            }
            let held = Held::from(claim);
            let (stage, decision, owned) = match outcome {
                ClaimOutcome::Won { fresh } => (
                    Stage::Produce,
                    Some(Decision::Novel),
                    Some(Owned {
                        held,
                        fresh: fresh && !record.claim_uncertain,
                        release: false,
                        insert: tiered(record.stream).then_some(record.at),
                    }),
                ),
                ClaimOutcome::Replayed => {
                    settled.replayed.push(record.stream);
                    (Stage::Finished, None, None)
                }
                // Delivered before; produced again, marked, with nothing
                // to settle (its partition's watermark already covers it).
                ClaimOutcome::Reemit => {
                    record.replay = true;
                    (Stage::Produce, Some(Decision::Novel), None)
                }
                ClaimOutcome::Held { holder } => {
                    settled.held += 1;
                    record.waiting_since.get_or_insert(now);
                    record.waiting_on = Some(holder);
                    let retry_at = now + record.backoff;
                    record.backoff = (record.backoff * 2).min(MAX_BACKOFF);
                    record.stage = Stage::Wait { retry_at };
                    self.earliest_wait =
                        Some(self.earliest_wait.map_or(retry_at, |e| e.min(retry_at)));
                    self.waits.push((tp.clone(), *offset));
                    continue;
                }
                ClaimOutcome::Duplicate { tier, holder } => (
                    Stage::Produce,
                    Some(Decision::Duplicate {
                        tier,
                        first_seen: holder,
                    }),
                    // A filter hit keeps the claim it wrote: settled like a
                    // novel record's, never released.
                    (tier == Tier::Filter).then_some(Owned {
                        held,
                        fresh: false,
                        release: false,
                        insert: None,
                    }),
                ),
                ClaimOutcome::Conflict { holder } => (
                    Stage::Produce,
                    Some(Decision::Conflict { first_seen: holder }),
                    None,
                ),
                // The store lost the stream's state: nothing was judged,
                // and the claim may sit in the store now, unknown to it.
                ClaimOutcome::StoreLost => {
                    record.claim_uncertain = true;
                    record.stage = Stage::Claim;
                    store_lost.push((tp.clone(), *offset));
                    continue;
                }
            };
            // Its output is in the last owner's committed transaction: it
            // settles the claim it holds now, and sends nothing again.
            let stage = match (record.already_out, stage, &owned) {
                (true, Stage::Produce, Some(_)) => Stage::Delivered,
                (true, Stage::Produce, None) => Stage::Finished,
                _ => stage,
            };
            record.decision = decision;
            record.claim = owned;
            record.stage = stage;
            record.waiting_since = None;
            self.entered(tp, *offset, stage);
        }
        // Parked or passed as unverified, as the stream's loss says; claimed
        // again where the loop did not say the stream is lost.
        for (tp, offset) in store_lost.into_iter().rev() {
            if !self.divert(&tp, offset) {
                self.to_claim.push_front((tp, offset));
            }
        }
        settled
    }

    /// Each read partition's re-emit range, as the round's answer holds it.
    fn read_replays(&mut self, round: &Round, answer: &RoundAnswer) {
        let read: Vec<usize> = round
            .read
            .iter()
            .chain(round.claims.iter().map(|c| &c.stream))
            .map(|s| s.0)
            .collect();
        for (tp, p) in self.partitions.iter_mut() {
            if !read.contains(&p.stream) {
                continue;
            }
            p.replay = answer
                .ranges
                .iter()
                .find(|r| r.stream.0 == p.stream && r.topic == p.tag && r.partition == tp.1)
                .and_then(|r| r.replay);
        }
        self.replaying = self.partitions.values().any(|p| p.replay.is_some());
    }

    /// Puts what a failed round carried back to where it was, whole: claims
    /// to claim again (or, on a stream that fails open, `unverified`),
    /// settlements to settle again.
    pub(crate) fn failed(&mut self, round: Round, fail_open: impl Fn(usize) -> bool) {
        for (tp, why) in round.raise_of {
            if let (RaiseFor::Metadata(end), Some(p)) = (why, self.partitions.get_mut(&tp)) {
                p.metadata_raise.get_or_insert(end);
            }
        }
        let mut unverified = Vec::new();
        let mut again = Vec::new();
        for (tp, p) in &mut self.partitions {
            for (&offset, record) in p.records.iter_mut() {
                match record.stage {
                    Stage::Settling => {
                        record.stage = Stage::Delivered;
                        self.to_settle.push((tp.clone(), offset));
                    }
                    // Exactly once, a record the last owner's committed
                    // transaction already holds is never sent again, not
                    // even `unverified`: it waits for the store to settle.
                    Stage::Claiming | Stage::Fresh
                        if fail_open(record.stream) && !record.already_out =>
                    {
                        pass_unchecked(record);
                        unverified.push((tp.clone(), offset));
                    }
                    Stage::Claiming => {
                        record.claim_uncertain = true;
                        record.stage = Stage::Claim;
                        again.push((tp.clone(), offset));
                    }
                    _ => {}
                }
            }
        }
        // Ahead of every record read after them, in offset order: a
        // partition's copies are claimed in the order they were read.
        for entry in again.into_iter().rev() {
            self.to_claim.push_front(entry);
        }
        self.queue.extend(unverified);
    }

    /// The store is known to be down (the breaker is open): records of
    /// streams that fail open pass as `unverified` without asking it.
    pub(crate) fn pass_unverified(&mut self, fail_open: impl Fn(usize) -> bool) {
        let mut unverified = Vec::new();
        for (tp, p) in &mut self.partitions {
            for (&offset, record) in p.records.iter_mut() {
                let ready = matches!(
                    record.stage,
                    Stage::Fresh | Stage::Claim | Stage::Wait { .. }
                );
                if ready && fail_open(record.stream) && !record.already_out {
                    pass_unchecked(record);
                    unverified.push((tp.clone(), offset));
                }
            }
        }
        self.queue.extend(unverified);
    }

    fn settle(&mut self, tp: &Tp, offset: i64) {
        if self
            .record(tp, offset)
            .is_some_and(|r| r.stage == Stage::Settling)
        {
            self.finish_at(tp, offset);
        }
    }

    /// The partition's watermark is known now: its first records move on.
    fn freshen(&mut self, tp: &Tp, settled: &mut Settled) {
        let Some(p) = self.partitions.get_mut(tp) else {
            return;
        };
        if p.fresh {
            return;
        }
        p.fresh = true;
        if let Some(start) = p.range_start {
            p.gap_free = p.watermark.is_none_or(|w| w >= start);
        }
        let mut moved = Vec::new();
        for (&offset, record) in p.records.iter_mut() {
            if record.stage == Stage::Fresh {
                entry_stage(record, p.watermark, p.replay);
                if record.stage == Stage::Finished {
                    settled.replayed.push(record.stream);
                }
                moved.push((offset, record.stage));
            }
        }
        self.replay_begins(tp);
        for (offset, stage) in moved {
            self.entered(tp, offset, stage);
        }
    }
}

/// A record of a stream that fails open, decided without the store: its
/// own verdict where it has no hash, `unverified` otherwise. Not even its
/// partition's watermark is known (a replay below it passes again: what
/// failing open accepts).
pub(super) fn pass_unchecked(record: &mut super::Record) {
    record.decision = Some(match &record.print {
        Some(Err(invalid)) => Decision::Invalid(invalid.clone()),
        _ => Decision::Unverified,
    });
    record.stage = Stage::Produce;
    record.waiting_since = None;
}
