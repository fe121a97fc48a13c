//! What a round's answers mean for one claim, and how a watermark moves.
//! Pure, and shared by every backend so they cannot drift apart
//! (docs/design.md §4.2-§4.4).

use std::collections::HashMap;

use super::value::ClaimValue;
use super::{Claim, ClaimOutcome, PartitionRanges};
use crate::coordinates::{Coordinates, TopicTag};
use crate::tier::Tier;

/// A claim is settled when its holder is below its partition's watermark
/// (`holder_below` is that watermark, `None` where none is known) or its
/// done flag is set.
pub(crate) fn settled(value: &ClaimValue, holder_below: Option<i64>) -> bool {
    value.done || holder_below.is_some_and(|w| value.holder.offset < w)
}

/// The verdict on one claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Decided(ClaimOutcome),
    /// The record met its own unsettled claim written by another owner (an
    /// earlier incarnation, or before a rebalance): re-stamp it with this
    /// record's token (compare and set on the old holder and token), then
    /// it is the outcome held here (`Won { fresh: false }`, or a filter
    /// duplicate: see `judge_reset`).
    Restamp(ClaimOutcome),
    /// The record met another record's unsettled claim whose holder lies
    /// in a range the operator's reset abandoned (DESIGN.md §4 rule 7):
    /// write this record's own claim over exactly the value judged (compare
    /// and set on the whole old value, keeping the key's expiry); then it
    /// is `Won { fresh: false }`, counted as taken over.
    TakeOver,
}

impl Verdict {
    /// What the claim is once its compare and set (if any) lands: a take-over
    /// is `Won { fresh: false }`.
    pub(crate) fn outcome(self) -> ClaimOutcome {
        match self {
            Verdict::Decided(outcome) | Verdict::Restamp(outcome) => outcome,
            Verdict::TakeOver => ClaimOutcome::Won { fresh: false },
        }
    }
}

/// What an operator's reset recorded, as it bears on one claim.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ResetMarks {
    /// The record lies in its own partition's re-emit range.
    pub(crate) replay: bool,
    /// The existing claim's holder lies in an abandoned range of its
    /// partition.
    pub(crate) holder_abandoned: bool,
}

/// What tier 2 says of a claim's hash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    /// A live filter generation holds the hash.
    pub(crate) hit: bool,
    /// The record's offset lies in a run an earlier owner noted before
    /// writing those records' hashes to tier 2 ahead of its transaction's
    /// commit (exactly once, `EarlyRun`), or nothing was ever noted for
    /// its partition (an owner of an earlier version): a hit may be the
    /// record's own hash, left by that transaction if it aborted. Asked
    /// only where it decides something (rule 5 beside a hit); `false`
    /// elsewhere.
    pub(crate) own_insert: bool,
}

/// Whether a claim's verdict turns on whether an earlier owner wrote the
/// record's own hash to tier 2 early: it met its own unsettled claim of
/// another owner's beside a filter hit, under exactly once (rule 5). Only
/// those ask the store for the noted runs (a follow-up, rare).
pub(crate) fn asks_own_insert(claim: &Claim, existing: &ClaimValue, hit: bool) -> bool {
    hit && claim.early_inserts
        && existing.holder == claim.holder
        && existing.token != claim.token
        && !existing.done
}

/// What a round read of its stream's partitions, as a claim's verdict
/// asks it: each backend reads the watermarks and reset ranges its own
/// way, and [`verdict`] puts them to the claim once.
pub(crate) trait Reads {
    /// The watermark of the partition of `at`: every offset below it is
    /// decided.
    fn below(&self, at: &Coordinates) -> Option<i64>;
    /// Whether `at` lies in its partition's re-emit range.
    fn in_replay(&self, at: &Coordinates) -> bool;
    /// Whether `at` lies in an abandoned range of its partition.
    fn in_abandoned(&self, at: &Coordinates) -> bool;
}

/// A round's reads as Redis and PostgreSQL answer them: maps by (stream,
/// topic, partition).
pub(crate) struct Maps<'a> {
    pub(crate) stream: usize,
    pub(crate) below: &'a HashMap<(usize, TopicTag, i32), i64>,
    pub(crate) ranges: &'a HashMap<(usize, TopicTag, i32), PartitionRanges>,
}

impl Maps<'_> {
    fn ranges(&self, at: &Coordinates) -> Option<&PartitionRanges> {
        self.ranges.get(&(self.stream, at.topic, at.partition))
    }
}

impl Reads for Maps<'_> {
    fn below(&self, at: &Coordinates) -> Option<i64> {
        self.below
            .get(&(self.stream, at.topic, at.partition))
            .copied()
    }

    fn in_replay(&self, at: &Coordinates) -> bool {
        self.ranges(at).is_some_and(|r| r.in_replay(at.offset))
    }

    fn in_abandoned(&self, at: &Coordinates) -> bool {
        self.ranges(at).is_some_and(|r| r.in_abandoned(at.offset))
    }
}

/// A claim's verdict with what its round read: the record's own
/// partition's watermark and re-emit range, the existing holder's
/// watermark and abandoned ranges, and tier 2's answer.
pub(crate) fn verdict(
    claim: &Claim,
    existing: Option<&ClaimValue>,
    filter: Filter,
    reads: &impl Reads,
) -> Verdict {
    let marks = ResetMarks {
        replay: reads.in_replay(&claim.holder),
        holder_abandoned: existing.is_some_and(|v| reads.in_abandoned(&v.holder)),
    };
    judge_reset(
        claim,
        existing,
        reads.below(&claim.holder),
        existing.and_then(|v| reads.below(&v.holder)),
        filter,
        marks,
    )
}

/// Without any reset's marks (tests state the rules of §4.4 through it).
/// `existing` is the value `SET NX GET` answered (`None`: this claim was
/// written); `own_below` is the watermark of the record's own partition,
/// `holder_below` that of the existing holder's partition.
#[cfg(test)]
pub(crate) fn judge(
    claim: &Claim,
    existing: Option<&ClaimValue>,
    own_below: Option<i64>,
    holder_below: Option<i64>,
    in_filter: bool,
) -> Verdict {
    judge_reset(
        claim,
        existing,
        own_below,
        holder_below,
        Filter {
            hit: in_filter,
            own_insert: false,
        },
        ResetMarks::default(),
    )
}

/// [`judge`] with what a reset recorded: in a re-emit range, what would be
/// `Replayed` as the claim's own holder is `Reemit`; a holder in an
/// abandoned range is taken over instead of waited on.
fn judge_reset(
    claim: &Claim,
    existing: Option<&ClaimValue>,
    own_below: Option<i64>,
    holder_below: Option<i64>,
    filter: Filter,
    marks: ResetMarks,
) -> Verdict {
    use ClaimOutcome::*;
    let in_filter = filter.hit;
    // Rule 2: below the watermark means decided, whatever tier 1 says.
    if own_below.is_some_and(|w| claim.holder.offset < w) {
        // Re-emitted only where nothing says its output went to audit:
        // its own claim, or (the key expired) no claim and no filter hit.
        // Another holder's claim means it was a duplicate or a conflict.
        let own = match existing {
            Some(value) => value.holder == claim.holder,
            None => !in_filter,
        };
        return Verdict::Decided(if marks.replay && own {
            Reemit
        } else {
            Replayed
        });
    }
    let Some(value) = existing else {
        // A fresh claim on a hash the filter knows: a duplicate from
        // beyond tier 1; the claim stays and is settled like any other.
        return Verdict::Decided(if in_filter {
            Duplicate {
                tier: Tier::Filter,
                holder: None,
            }
        } else {
            Won { fresh: true }
        });
    };
    if value.holder == claim.holder {
        // Its own settled claim overrides a filter hit (its hash went in
        // when it was delivered).
        return if settled(value, holder_below) {
            Verdict::Decided(if marks.replay { Reemit } else { Replayed })
        } else if value.token == claim.token {
            // This owner wrote it: a retried round whose first answer was
            // lost. That first attempt met the filter if this one does (the
            // record itself was never produced, so the filter knows the
            // hash from another record): still a filter duplicate.
            Verdict::Decided(if in_filter {
                Duplicate {
                    tier: Tier::Filter,
                    holder: None,
                }
            } else {
                Won { fresh: true }
            })
        } else {
            // The last owner's attempt. At least once, the hash goes in
            // with the settlement, which did not happen: a filter hit is
            // another record's, and the last owner met it too (a filter
            // duplicate sent to audit). Exactly once, it may have written
            // the hash to tier 2 in a transaction that then aborted: a hit
            // may be its own only where its offset was noted before those
            // inserts; elsewhere the hit is another record's, as at least
            // once (a late copy whose filter-duplicate output aborted).
            let own_hash = claim.early_inserts && filter.own_insert;
            Verdict::Restamp(if in_filter && !own_hash {
                Duplicate {
                    tier: Tier::Filter,
                    holder: None,
                }
            } else {
                Won { fresh: false }
            })
        };
    }
    if !settled(value, holder_below) && marks.holder_abandoned {
        return Verdict::TakeOver;
    }
    Verdict::Decided(if !settled(value, holder_below) {
        Held {
            holder: value.holder,
        }
    } else if value.digest != claim.digest {
        Conflict {
            holder: value.holder,
        }
    } else {
        Duplicate {
            tier: Tier::Exact,
            holder: Some(value.holder),
        }
    })
}

/// A watermark after a raise over `[start, end)`: an absent one starts at
/// `start`; it moves only from a prefix that starts at or below it, and
/// never down.
pub(crate) fn raise(current: Option<i64>, start: i64, end: i64) -> i64 {
    let current = current.unwrap_or(start);
    if current >= start {
        current.max(end)
    } else {
        current
    }
}

#[cfg(test)]
#[path = "judge_tests.rs"]
mod tests;
