//! Rules 4, 5 and 7: what a record meets (its own claim, another's, the
//! filter), what a release may free, and that nothing is taken over.

use super::*;

// Rule 4: meeting its own claim.

pub async fn a_record_meeting_its_own_unsettled_claim_restamps_it(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    let first = claim(EXACT, key, 7, T0);
    assert_eq!(one(&*store, first).await, WON);
    // The partition's next owner replays it (a crash, a rebalance): its
    // output may not exist, so it is produced again, never released.
    let again = by(NEXT, claim(EXACT, key, 7, T0 + MINUTE));
    assert_eq!(
        one(&*store, again).await,
        ClaimOutcome::Won { fresh: false }
    );
    // The old owner, a zombie now, can neither free nor settle it.
    assert!(!release(&*store, &first).await);
    assert!(!done(&*store, &first).await);
    let copy = claim_on(EXACT, key, on(4, 1), T0 + 2 * MINUTE);
    assert_eq!(
        one(&*store, copy).await,
        ClaimOutcome::Held { holder: at(7) }
    );
    // The new owner settles it; met again, it was decided.
    assert!(done(&*store, &again).await);
    assert_eq!(one(&*store, copy).await, exact_duplicate_of(at(7)));
    let third = by(OTHER, claim(EXACT, key, 7, T0 + 3 * MINUTE));
    assert_eq!(one(&*store, third).await, ClaimOutcome::Replayed);
}

pub async fn a_retried_round_meets_its_own_claim_as_fresh(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    let record = claim(EXACT, key, 7, T0);
    assert_eq!(one(&*store, record).await, WON);
    // The round's answer was lost and it is sent again: same owner.
    assert_eq!(one(&*store, record).await, WON);
    // So it may still free the claim it wrote.
    assert!(release(&*store, &record).await);
    let next = claim(EXACT, key, 8, T0 + 1000);
    assert_eq!(one(&*store, next).await, WON);
}

pub async fn a_filter_hit_keeps_its_tier1_claim_and_its_copies_wait_on_it(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    let original = claim_on(TIERED, key, on(9, 1), T0);
    let inserts = vec![insert(&original)];
    publish(
        &*store,
        Publish {
            inserts,
            ..Publish::default()
        },
    )
    .await;
    let record = claim(TIERED, key, 7, T0 + MINUTE);
    let outcome = one(&*store, record).await;
    assert_eq!(outcome, FILTER_DUPLICATE);
    assert!(outcome.holds_claim());
    // Its copies wait on its tier-1 claim until its publish settles it.
    let copy = claim_on(TIERED, key, on(4, 2), T0 + 2 * MINUTE);
    assert_eq!(
        one(&*store, copy).await,
        ClaimOutcome::Held { holder: at(7) }
    );
    assert!(done(&*store, &record).await);
    assert_eq!(one(&*store, copy).await, exact_duplicate_of(at(7)));
    // An exact stream never asks the filter.
    assert_eq!(one(&*store, claim(EXACT, key, 7, T0)).await, WON);
}

pub async fn its_own_claim_overrides_a_filter_hit(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    let record = claim(TIERED, key, 7, T0);
    assert_eq!(one(&*store, record).await, WON);
    // Its hash went into tier 2 before its claim was settled (exactly-once
    // inserts before the transaction commits, its offset noted first),
    // then it is met again.
    store
        .note_early_inserts(&[early_run(TIERED, 5, 8, T0)])
        .await
        .unwrap();
    let inserts = vec![insert(&record)];
    publish(
        &*store,
        Publish {
            inserts,
            ..Publish::default()
        },
    )
    .await;
    // The same owner and token meeting it with the filter knowing the hash
    // is a retried round whose first answer (a filter duplicate) was lost:
    // the record itself was never produced, so it stays a duplicate.
    assert_eq!(
        one(&*store, record).await,
        ClaimOutcome::Duplicate {
            tier: Tier::Filter,
            holder: None
        }
    );
    // Another owner (an exactly-once abort bumps the attempt, a rebalance
    // does) meets it as its own: re-stamped, the filter overridden, for
    // the hash may be its own, left by an aborted transaction (its offset
    // was noted before the inserts).
    let replay = Claim {
        early_inserts: true,
        ..by(NEXT, claim(TIERED, key, 7, T0 + MINUTE))
    };
    assert_eq!(
        one(&*store, replay).await,
        ClaimOutcome::Won { fresh: false }
    );
    // Another record meets the claim first, not the filter.
    let copy = claim_on(TIERED, key, on(4, 2), T0 + 2 * MINUTE);
    assert_eq!(
        one(&*store, copy).await,
        ClaimOutcome::Held { holder: at(7) }
    );
}

/// At least once, a hash goes to tier 2 only with its claim's settlement:
/// a record that meets its own unsettled claim of another owner's beside a
/// filter hit met another record's hash, as that owner did. It stays a
/// filter duplicate (re-stamped, to settle it): a `novel` here would put a
/// second copy of the event in clean (the fault soak's late telemetry
/// copies, re-decided after their first owner stopped mid-flight).
pub async fn at_least_once_its_own_claim_re_stamped_keeps_a_filter_hit(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    // The event's first record, delivered and settled long ago: only the
    // filter knows it (tier 1 forgot it).
    let first = claim_on(TIERED, key, on(4, 2), T0);
    publish(
        &*store,
        Publish {
            inserts: vec![insert(&first)],
            ..Publish::default()
        },
    )
    .await;
    // A late copy: its claim is written, the filter knows the hash.
    let copy = claim(TIERED, key, 7, T0 + MINUTE);
    let duplicate = ClaimOutcome::Duplicate {
        tier: Tier::Filter,
        holder: None,
    };
    assert_eq!(one(&*store, copy).await, duplicate);
    // Its owner stopped before settling it; the next owner reads it again.
    let again = by(NEXT, claim(TIERED, key, 7, T0 + 2 * MINUTE));
    assert_eq!(one(&*store, again).await, duplicate);
    // Re-stamped: the next owner's done flag settles it.
    assert!(done(&*store, &again).await);
}

/// Exactly once, a hash goes to tier 2 before the transaction commits, its
/// offset noted first. A late copy decided a filter duplicate inserts
/// nothing and is noted nowhere: when its transaction aborts, the next
/// owner meets its own unsettled claim beside a hit that is the first
/// record's hash, and it stays a filter duplicate. Deciding `novel` there
/// put a second copy of the event in clean (the fault soak's late
/// telemetry copies, when their owner was SIGKILLed with them in its open
/// transaction).
pub async fn exactly_once_a_late_copy_whose_filter_duplicate_aborted_stays_one(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    let first = claim_on(TIERED, key, on(4, 2), T0);
    publish(
        &*store,
        Publish {
            inserts: vec![insert(&first)],
            ..Publish::default()
        },
    )
    .await;
    let copy = Claim {
        early_inserts: true,
        ..claim(TIERED, key, 7, T0 + MINUTE)
    };
    let duplicate = ClaimOutcome::Duplicate {
        tier: Tier::Filter,
        holder: None,
    };
    assert_eq!(one(&*store, copy).await, duplicate);
    // The novel records around it went into tier 2 in the same
    // transaction, their runs noted first; then the transaction aborted.
    store
        .note_early_inserts(&[
            early_run(TIERED, 5, 7, T0 + MINUTE),
            early_run(TIERED, 8, 10, T0 + MINUTE),
        ])
        .await
        .unwrap();
    let again = Claim {
        early_inserts: true,
        ..by(NEXT, claim(TIERED, key, 7, T0 + 2 * MINUTE))
    };
    assert_eq!(one(&*store, again).await, duplicate);
    // Re-stamped: the next owner's done flag settles it.
    assert!(done(&*store, &again).await);
}

// Rule 5: release.

pub async fn a_released_claim_is_won_by_the_next_record(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let first = claim(TIERED, hash(h.salt(), 1), 1, T0);
    assert_eq!(one(&*store, first).await, WON);
    assert!(release(&*store, &first).await);
    let next = claim(TIERED, first.hash, 2, T0 + 1000);
    assert_eq!(one(&*store, next).await, WON);
    // A release by a record that no longer holds the claim changes nothing.
    assert!(!release(&*store, &first).await);
    assert!(done(&*store, &next).await);
    let third = claim(TIERED, first.hash, 3, T0 + 2000);
    assert_eq!(one(&*store, third).await, exact_duplicate_of(at(2)));
}

pub async fn a_done_claim_is_never_released(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let record = claim(EXACT, hash(h.salt(), 1), 1, T0);
    assert_eq!(one(&*store, record).await, WON);
    assert!(done(&*store, &record).await);
    assert!(!release(&*store, &record).await);
    let copy = claim(EXACT, record.hash, 2, T0 + 1000);
    assert_eq!(one(&*store, copy).await, exact_duplicate_of(at(1)));
}

// Rule 7: no take-over on a timer.

pub async fn no_claim_is_taken_over_however_long_it_waits(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    assert_eq!(one(&*store, claim(EXACT, key, 1, T0)).await, WON);
    let waits = [MINUTE, HOUR, 6 * HOUR, 11 * HOUR, 12 * HOUR - MINUTE];
    for (n, wait) in waits.into_iter().enumerate() {
        let copy = claim_on(EXACT, key, on(4, n as i64), T0 + wait);
        assert_eq!(
            one(&*store, copy).await,
            ClaimOutcome::Held { holder: at(1) },
            "{wait} ms later"
        );
    }
}

/// A claim lives its TTL and no longer: a copy after it expired is novel,
/// on the copy's own time.
pub async fn a_late_copy_after_its_claim_expired_is_novel(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    deliver(&*store, claim(EXACT, key, 1, T0)).await;
    let within = claim_on(EXACT, key, on(4, 1), T0 + 12 * HOUR - MINUTE);
    assert_eq!(one(&*store, within).await, exact_duplicate_of(at(1)));
    h.tier1_expired(EXACT, &key).await;
    let late = claim_on(EXACT, key, on(4, 2), T0 + 12 * HOUR + MINUTE);
    assert_eq!(one(&*store, late).await, WON);
    // The late copy holds the claim now.
    let after = claim_on(EXACT, key, on(4, 3), T0 + 12 * HOUR + 2 * MINUTE);
    assert_eq!(
        one(&*store, after).await,
        ClaimOutcome::Held { holder: on(4, 2) }
    );
}

pub async fn another_records_pending_claim_is_held_not_duplicate(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    assert_eq!(one(&*store, claim(EXACT, key, 1, T0)).await, WON);
    assert_eq!(
        one(&*store, claim(EXACT, key, 2, T0 + 1000)).await,
        ClaimOutcome::Held { holder: at(1) }
    );
    // Two copies in one round: the first holds, the later ones are held.
    let twin = hash(h.salt(), 2);
    let outcomes = store
        .claim(&[claim(EXACT, twin, 5, T0), claim(EXACT, twin, 6, T0)])
        .await
        .unwrap();
    assert_eq!(outcomes, vec![WON, ClaimOutcome::Held { holder: at(5) }]);
}

pub async fn a_reused_key_with_another_payload_is_a_conflict(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    deliver(&*store, claim(EXACT, key, 1, T0)).await;
    let mut reused = claim(EXACT, key, 2, T0 + 1000);
    reused.digest = PayloadDigest([8; 8]);
    assert_eq!(
        one(&*store, reused).await,
        ClaimOutcome::Conflict { holder: at(1) }
    );
}
