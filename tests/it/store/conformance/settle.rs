//! Rules 1 to 3: a claim is settled by its holder's partition's watermark
//! or its done flag; below the watermark means decided; how a watermark
//! moves.

use super::*;

// Rule 2: below the watermark means decided.

pub async fn a_record_below_its_watermark_is_replayed_even_after_its_key_expired(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    assert_eq!(one(&*store, claim(EXACT, key, 5, T0)).await, WON);
    assert_eq!(raised(&*store, raise(EXACT, PARTITION, 0, 6)).await, 6);
    // 13 h later the exact key (12 h) is gone; the partition's next owner
    // replays the record.
    h.tier1_expired(EXACT, &key).await;
    let later = T0 + 13 * HOUR;
    let replay = by(NEXT, claim(EXACT, key, 5, later));
    assert_eq!(one(&*store, replay).await, ClaimOutcome::Replayed);
    // A record below the watermark whose key never existed is as decided.
    let never = claim(EXACT, hash(h.salt(), 2), 4, later);
    assert_eq!(one(&*store, never).await, ClaimOutcome::Replayed);
    // At the watermark it is not.
    let next = claim(EXACT, hash(h.salt(), 3), 6, later);
    assert_eq!(one(&*store, next).await, WON);

    // Tiered: when only the filter still knows the hash, the replay is
    // still replayed, not a filter duplicate of itself.
    let tiered = hash(h.salt(), 4);
    deliver(&*store, claim(TIERED, tiered, 7, T0)).await;
    assert_eq!(raised(&*store, raise(TIERED, PARTITION, 0, 8)).await, 8);
    h.tier1_expired(TIERED, &tiered).await;
    let replay = by(NEXT, claim(TIERED, tiered, 7, T0 + 3 * HOUR));
    assert_eq!(one(&*store, replay).await, ClaimOutcome::Replayed);
    // Its claim, written by the replay, is settled by the watermark: a copy
    // above it is an exact duplicate.
    let copy = claim(TIERED, tiered, 9, T0 + 3 * HOUR + MINUTE);
    assert_eq!(one(&*store, copy).await, exact_duplicate_of(at(7)));
}

// Rule 3: raising the watermark.

pub async fn a_watermark_is_raised_only_from_a_prefix_at_or_below_it(h: &dyn Harness) {
    let store = h.open(streams()).await;
    assert_eq!(raised(&*store, raise(EXACT, PARTITION, 0, 100)).await, 100);
    // An owner that began at 150 (an offset skip) cannot vouch for 100..150.
    assert_eq!(
        raised(&*store, raise(EXACT, PARTITION, 150, 200)).await,
        100
    );
    // Its records settle by their done flags alone.
    let key = hash(h.salt(), 1);
    let record = claim(EXACT, key, 160, T0);
    assert_eq!(one(&*store, record).await, WON);
    let copy = claim_on(EXACT, key, on(5, 1), T0 + 1000);
    assert_eq!(
        one(&*store, copy).await,
        ClaimOutcome::Held { holder: at(160) }
    );
    assert!(done(&*store, &record).await);
    assert_eq!(one(&*store, copy).await, exact_duplicate_of(at(160)));
    // Prefixes starting at or below the watermark move it, in order.
    let answer = publish(
        &*store,
        Publish {
            raises: vec![
                raise(EXACT, PARTITION, 100, 120),
                raise(EXACT, PARTITION, 110, 130),
            ],
            ..Publish::default()
        },
    )
    .await;
    assert_eq!(answer.raised, vec![120, 130]);
    assert_eq!(
        watermarks(&*store, EXACT).await,
        vec![mark(EXACT, PARTITION, 130)]
    );
    // A partition without a watermark starts where its first prefix does.
    assert_eq!(raised(&*store, raise(EXACT, 9, 40, 45)).await, 45);
    assert_eq!(raised(&*store, raise(EXACT, 9, 30, 35)).await, 45);
}

pub async fn a_watermark_never_goes_down(h: &dyn Harness) {
    let store = h.open(streams()).await;
    assert_eq!(raised(&*store, raise(EXACT, PARTITION, 0, 100)).await, 100);
    // A replay of an old range (the group's offsets were reset) leaves it.
    assert_eq!(raised(&*store, raise(EXACT, PARTITION, 0, 50)).await, 100);
    assert_eq!(raised(&*store, raise(EXACT, PARTITION, 40, 80)).await, 100);
    assert_eq!(
        watermarks(&*store, EXACT).await,
        vec![mark(EXACT, PARTITION, 100)]
    );
    let below = claim(EXACT, hash(h.salt(), 1), 99, T0);
    assert_eq!(one(&*store, below).await, ClaimOutcome::Replayed);
    let at_it = claim(EXACT, hash(h.salt(), 2), 100, T0);
    assert_eq!(one(&*store, at_it).await, WON);
}

// Rule 1 and rule 4: settled by the holder's partition's watermark.

pub async fn another_records_claim_is_settled_by_its_partitions_watermark(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    let holder = on(1, 10);
    assert_eq!(one(&*store, claim_on(EXACT, key, holder, T0)).await, WON);
    let copy = claim_on(EXACT, key, on(2, 60), T0 + 1000);
    let held = ClaimOutcome::Held { holder };
    // The copy's own partition's watermark says nothing of the holder.
    assert_eq!(raised(&*store, raise(EXACT, 2, 0, 50)).await, 50);
    assert_eq!(one(&*store, copy).await, held);
    // The holder's partition up to (not past) the holder: still pending.
    assert_eq!(raised(&*store, raise(EXACT, 1, 0, 10)).await, 10);
    assert_eq!(one(&*store, copy).await, held);
    assert_eq!(raised(&*store, raise(EXACT, 1, 10, 11)).await, 11);
    assert_eq!(one(&*store, copy).await, exact_duplicate_of(holder));
    let mut reused = claim_on(EXACT, key, on(2, 61), T0 + 2000);
    reused.digest = PayloadDigest([8; 8]);
    assert_eq!(
        one(&*store, reused).await,
        ClaimOutcome::Conflict { holder }
    );
}

// Rule 3: done flags.

pub async fn a_done_flag_settles_a_record_above_the_watermark(h: &dyn Harness) {
    let store = h.open(streams()).await;
    assert_eq!(raised(&*store, raise(EXACT, PARTITION, 0, 100)).await, 100);
    let key = hash(h.salt(), 1);
    let record = claim(EXACT, key, 500, T0);
    assert_eq!(one(&*store, record).await, WON);
    let copy = claim_on(EXACT, key, on(4, 1), T0 + 1000);
    assert_eq!(
        one(&*store, copy).await,
        ClaimOutcome::Held { holder: at(500) }
    );
    assert!(done(&*store, &record).await);
    // Set before by the same owner counts as set.
    assert!(done(&*store, &record).await);
    assert_eq!(one(&*store, copy).await, exact_duplicate_of(at(500)));
    // A done flag moves no watermark.
    assert_eq!(
        watermarks(&*store, EXACT).await,
        vec![mark(EXACT, PARTITION, 100)]
    );
}

pub async fn a_done_flag_or_release_with_another_token_is_refused(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    let record = claim(EXACT, key, 7, T0);
    assert_eq!(one(&*store, record).await, WON);
    let stranger = by(OTHER, record);
    assert!(!done(&*store, &stranger).await);
    assert!(!release(&*store, &stranger).await);
    // The same token on other coordinates is not the holder either.
    let elsewhere = claim(EXACT, key, 8, T0);
    assert!(!done(&*store, &elsewhere).await);
    assert!(!release(&*store, &elsewhere).await);
    // Nothing happened to the claim: still there, still pending.
    let copy = claim_on(EXACT, key, on(4, 1), T0 + 1000);
    assert_eq!(
        one(&*store, copy).await,
        ClaimOutcome::Held { holder: at(7) }
    );
    assert!(done(&*store, &record).await);
    assert_eq!(one(&*store, copy).await, exact_duplicate_of(at(7)));
}
