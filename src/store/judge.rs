//! What a round's answers mean for one claim, and how a watermark moves.
//! Pure, and shared by every backend so they cannot drift apart
//! (docs/design.md §4.2-§4.4).

use super::value::ClaimValue;
use super::{Claim, ClaimOutcome};
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
pub(crate) struct ResetMarks {
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
pub(crate) fn judge_reset(
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
mod tests {
    use super::*;
    use crate::coordinates::{Coordinates, TopicTag};
    use crate::fingerprint::{PayloadDigest, SourceHash};
    use crate::store::{OwnerToken, StreamId};

    fn at(partition: i32, offset: i64) -> Coordinates {
        Coordinates {
            topic: TopicTag(1),
            partition,
            offset,
        }
    }

    fn claim(holder: Coordinates, token: u32) -> Claim {
        Claim {
            stream: StreamId(0),
            hash: SourceHash([1; 32]),
            digest: PayloadDigest([2; 8]),
            holder,
            token: OwnerToken(token),
            at: 1_800_000_000_000,
            early_inserts: false,
        }
    }

    const HIT: Filter = Filter {
        hit: true,
        own_insert: false,
    };

    fn value_of(claim: &Claim) -> ClaimValue {
        ClaimValue::pending(claim.holder, claim.token, claim.digest, claim.at)
    }

    #[test]
    fn a_record_below_its_watermark_is_replayed_even_without_its_key() {
        let c = claim(at(0, 5), 1);
        assert_eq!(
            judge(&c, None, Some(6), None, false),
            Verdict::Decided(ClaimOutcome::Replayed)
        );
        assert_eq!(
            judge(&c, None, Some(5), None, false),
            Verdict::Decided(ClaimOutcome::Won { fresh: true })
        );
    }

    #[test]
    fn another_holder_is_settled_by_its_watermark_or_its_done_flag() {
        let holder = claim(at(1, 10), 1);
        let copy = claim(at(0, 3), 2);
        let mut v = value_of(&holder);
        let held = Verdict::Decided(ClaimOutcome::Held {
            holder: holder.holder,
        });
        let duplicate = Verdict::Decided(ClaimOutcome::Duplicate {
            tier: Tier::Exact,
            holder: Some(holder.holder),
        });
        assert_eq!(judge(&copy, Some(&v), None, Some(10), true), held);
        assert_eq!(judge(&copy, Some(&v), None, Some(11), false), duplicate);
        v.done = true;
        assert_eq!(judge(&copy, Some(&v), None, None, false), duplicate);
        v.digest = PayloadDigest([3; 8]);
        assert_eq!(
            judge(&copy, Some(&v), None, None, false),
            Verdict::Decided(ClaimOutcome::Conflict {
                holder: holder.holder
            })
        );
    }

    #[test]
    fn its_own_unsettled_claim_is_restamped_and_overrides_the_filter_only_where_its_hash_went_in() {
        let before = claim(at(0, 4), 1);
        let again = claim(at(0, 4), 2);
        let v = value_of(&before);
        let won = Verdict::Restamp(ClaimOutcome::Won { fresh: false });
        // Exactly once: the hash may be its own, left by an aborted
        // transaction, where the last owner noted the record before its
        // inserts.
        let early = Claim {
            early_inserts: true,
            ..again
        };
        let own_insert = Filter {
            hit: true,
            own_insert: true,
        };
        assert_eq!(
            judge_reset(
                &early,
                Some(&v),
                Some(2),
                Some(2),
                own_insert,
                ResetMarks::default()
            ),
            won
        );
        assert_eq!(judge(&early, Some(&v), Some(2), Some(2), false), won);
        // At least once: the hash is another record's, which the last
        // owner met too.
        assert_eq!(
            judge(&again, Some(&v), Some(2), Some(2), true),
            Verdict::Restamp(ClaimOutcome::Duplicate {
                tier: Tier::Filter,
                holder: None
            })
        );
        assert_eq!(judge(&again, Some(&v), Some(2), Some(2), false), won);
        assert_eq!(
            judge(&before, Some(&v), Some(2), Some(2), false),
            Verdict::Decided(ClaimOutcome::Won { fresh: true })
        );
        // A retried round after a lost answer: what met the filter still does.
        assert_eq!(
            judge(&before, Some(&v), Some(2), Some(2), true),
            Verdict::Decided(ClaimOutcome::Duplicate {
                tier: Tier::Filter,
                holder: None
            })
        );
        let done = ClaimValue { done: true, ..v };
        assert_eq!(
            judge(&again, Some(&done), Some(2), Some(2), true),
            Verdict::Decided(ClaimOutcome::Replayed)
        );
    }

    /// A late copy (its first copy's tier-1 key expired) claims its hash
    /// anew and meets the filter: a filter duplicate, to audit. Its
    /// transaction aborts (its owner SIGKILLed); the next owner meets the
    /// copy's own unsettled claim beside the same hit. The last owner
    /// noted no early insert for it (a duplicate inserts nothing), so the
    /// hit is the first copy's: a filter duplicate again, not a second
    /// copy of the event in clean.
    #[test]
    fn a_late_copy_whose_filter_duplicate_aborted_is_a_filter_duplicate_again() {
        let last_owner = claim(at(1, 1797), 1);
        let next_owner = Claim {
            early_inserts: true,
            ..claim(at(1, 1797), 2)
        };
        let v = value_of(&last_owner);
        let hit = Filter {
            hit: true,
            own_insert: false,
        };
        assert!(asks_own_insert(&next_owner, &v, true));
        assert_eq!(
            judge_reset(
                &next_owner,
                Some(&v),
                Some(1712),
                Some(1712),
                hit,
                ResetMarks::default()
            ),
            Verdict::Restamp(ClaimOutcome::Duplicate {
                tier: Tier::Filter,
                holder: None
            })
        );
        // Nothing else asks: a fresh claim, its own settled claim, the same
        // owner's retried round, at least once, no hit.
        let done = ClaimValue { done: true, ..v };
        assert!(!asks_own_insert(&next_owner, &done, true));
        assert!(!asks_own_insert(&next_owner, &v, false));
        let same_owner = Claim {
            early_inserts: true,
            ..last_owner
        };
        assert!(!asks_own_insert(&same_owner, &v, true));
        assert!(!asks_own_insert(&claim(at(1, 1797), 2), &v, true));
    }

    #[test]
    fn a_replay_range_re_emits_only_what_held_its_own_claim() {
        let replay = ResetMarks {
            replay: true,
            ..ResetMarks::default()
        };
        let c = claim(at(0, 5), 1);
        let own = value_of(&claim(at(0, 5), 9));
        let other = value_of(&claim(at(1, 2), 9));
        let reemit = Verdict::Decided(ClaimOutcome::Reemit);
        let replayed = Verdict::Decided(ClaimOutcome::Replayed);
        // Below the watermark: its own claim, or nothing at all known.
        assert_eq!(
            judge_reset(&c, Some(&own), Some(6), Some(6), Filter::default(), replay),
            reemit
        );
        assert_eq!(
            judge_reset(&c, None, Some(6), None, Filter::default(), replay),
            reemit
        );
        // A filter hit or another holder: it went to audit before.
        assert_eq!(judge_reset(&c, None, Some(6), None, HIT, replay), replayed);
        assert_eq!(
            judge_reset(
                &c,
                Some(&other),
                Some(6),
                Some(9),
                Filter::default(),
                replay
            ),
            replayed
        );
        // Its own claim settled by a done flag above the watermark.
        let done = ClaimValue { done: true, ..own };
        assert_eq!(
            judge_reset(&c, Some(&done), Some(1), Some(1), Filter::default(), replay),
            reemit
        );
        // Outside the range: as ever.
        assert_eq!(judge(&c, Some(&own), Some(6), Some(6), false), replayed);
        // Its own unsettled claim is re-stamped, not re-emitted.
        assert_eq!(
            judge_reset(&c, Some(&own), Some(1), Some(1), Filter::default(), replay),
            Verdict::Restamp(ClaimOutcome::Won { fresh: false })
        );
    }

    #[test]
    fn an_abandoned_unsettled_holder_is_taken_over_and_a_settled_one_is_not() {
        let abandoned = ResetMarks {
            holder_abandoned: true,
            ..ResetMarks::default()
        };
        let holder = claim(at(1, 10), 1);
        let copy = claim(at(0, 3), 2);
        let v = value_of(&holder);
        assert_eq!(
            judge_reset(&copy, Some(&v), None, Some(5), Filter::default(), abandoned),
            Verdict::TakeOver
        );
        assert_eq!(
            judge(&copy, Some(&v), None, Some(5), false),
            Verdict::Decided(ClaimOutcome::Held {
                holder: holder.holder
            })
        );
        let done = ClaimValue { done: true, ..v };
        assert_eq!(
            judge_reset(
                &copy,
                Some(&done),
                None,
                Some(5),
                Filter::default(),
                abandoned
            ),
            Verdict::Decided(ClaimOutcome::Duplicate {
                tier: Tier::Exact,
                holder: Some(holder.holder)
            })
        );
    }

    #[test]
    fn a_watermark_moves_only_from_a_prefix_at_or_below_it() {
        assert_eq!(raise(None, 100, 150), 150);
        assert_eq!(raise(Some(100), 100, 150), 150);
        assert_eq!(raise(Some(120), 100, 150), 150);
        assert_eq!(raise(Some(90), 100, 150), 90);
        assert_eq!(raise(Some(200), 100, 150), 200);
    }
}
