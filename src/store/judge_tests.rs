//! The rules of docs/design.md §4.4, one verdict at a time.

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
