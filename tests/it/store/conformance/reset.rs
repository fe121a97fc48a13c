//! Rules 2 and 7 under an operator's reset (`idemgate reset`,
//! docs/design.md §4.9): a claim is taken over only where its holder lies
//! in a range the reset abandoned, and only while unsettled; a skip counted
//! delivered settles its holders; a replay re-emits, inside its range only,
//! what held its own claim.

use idemgate::store::PartitionReset;

use super::*;

fn reset(partition: i32) -> PartitionReset {
    PartitionReset {
        stream: EXACT,
        topic: TopicTag::of("raw.events"),
        partition,
        raise_to: None,
        abandon: None,
        replay: None,
    }
}

pub async fn a_copy_takes_over_an_unsettled_claim_whose_holder_was_abandoned(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    // The holder at offset 10 of partition 4 claimed and was never
    // settled; the operator skipped partition 4 from 10 to 20.
    let holder = claim_on(EXACT, key, on(4, 10), T0);
    assert_eq!(one(&*store, holder).await, WON);
    let copy = claim_on(EXACT, key, at(3), T0 + MINUTE);
    assert_eq!(
        one(&*store, copy).await,
        ClaimOutcome::Held { holder: on(4, 10) }
    );
    let abandon = PartitionReset {
        abandon: Some((10, 20)),
        ..reset(4)
    };
    store.reset(&[abandon]).await.expect("reset");
    let answer = store
        .round(&Publish::default(), &[copy], &[])
        .await
        .expect("round");
    assert_eq!(answer.outcomes, vec![ClaimOutcome::Won { fresh: false }]);
    assert_eq!(answer.taken_over, vec![0]);
    let ranges: Vec<_> = answer.ranges.iter().filter(|r| r.partition == 4).collect();
    assert_eq!(ranges.len(), 1, "{:?}", answer.ranges);
    assert_eq!(ranges[0].abandoned, vec![(10, 20)]);
    // The copy holds the claim now: it settles it, and a third copy is
    // its duplicate, never the abandoned holder's.
    assert!(done(&*store, &copy).await);
    let third = claim_on(EXACT, key, on(5, 1), T0 + 2 * MINUTE);
    assert_eq!(one(&*store, third).await, exact_duplicate_of(at(3)));
    // The old holder can no longer settle it.
    assert!(!done(&*store, &holder).await);
}

pub async fn no_claim_is_taken_over_outside_an_abandoned_range(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let below = hash(h.salt(), 1);
    let beyond = hash(h.salt(), 2);
    let settled = hash(h.salt(), 3);
    let elsewhere = hash(h.salt(), 4);
    for (key, holder) in [
        (below, on(4, 9)),
        (beyond, on(4, 20)),
        (settled, on(4, 12)),
        (elsewhere, on(5, 12)),
    ] {
        assert_eq!(one(&*store, claim_on(EXACT, key, holder, T0)).await, WON);
    }
    // The one inside the range whose output was delivered and settled.
    assert!(done(&*store, &claim_on(EXACT, settled, on(4, 12), T0)).await);
    let abandon = PartitionReset {
        abandon: Some((10, 20)),
        ..reset(4)
    };
    store.reset(&[abandon]).await.expect("reset");
    let copies: Vec<Claim> = [below, beyond, settled, elsewhere]
        .into_iter()
        .enumerate()
        .map(|(i, key)| claim_on(EXACT, key, on(6, i as i64), T0 + MINUTE))
        .collect();
    let answer = store
        .round(&Publish::default(), &copies, &[])
        .await
        .expect("round");
    assert_eq!(
        answer.outcomes,
        vec![
            ClaimOutcome::Held { holder: on(4, 9) },
            ClaimOutcome::Held { holder: on(4, 20) },
            exact_duplicate_of(on(4, 12)),
            ClaimOutcome::Held { holder: on(5, 12) },
        ]
    );
    assert!(answer.taken_over.is_empty());
}

pub async fn a_skip_counted_delivered_settles_its_holders(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    assert_eq!(one(&*store, claim_on(EXACT, key, on(4, 10), T0)).await, WON);
    let delivered = PartitionReset {
        raise_to: Some(20),
        ..reset(4)
    };
    store.reset(&[delivered]).await.expect("reset");
    assert!(watermarks(&*store, EXACT)
        .await
        .contains(&mark(EXACT, 4, 20)));
    let copy = claim_on(EXACT, key, at(3), T0 + MINUTE);
    assert_eq!(one(&*store, copy).await, exact_duplicate_of(on(4, 10)));
    // A watermark never goes down, not even by a reset.
    let lower = PartitionReset {
        raise_to: Some(5),
        ..reset(4)
    };
    store.reset(&[lower]).await.expect("reset");
    assert!(watermarks(&*store, EXACT)
        .await
        .contains(&mark(EXACT, 4, 20)));
}

pub async fn a_replay_re_emits_inside_its_range_only_what_held_its_own_claim(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let (inside, outside, copy_key) = (hash(h.salt(), 1), hash(h.salt(), 2), hash(h.salt(), 3));
    for (key, offset) in [(inside, 5), (outside, 15), (copy_key, 6)] {
        assert_eq!(one(&*store, claim(EXACT, key, offset, T0)).await, WON);
    }
    // A duplicate at 7 of the record at 6.
    let duplicate = claim(EXACT, copy_key, 7, T0);
    assert_eq!(raised(&*store, raise(EXACT, PARTITION, 0, 20)).await, 20);
    let replay = PartitionReset {
        partition: PARTITION,
        replay: Some((0, 10)),
        ..reset(PARTITION)
    };
    store.reset(&[replay]).await.expect("reset");
    let again = |key, offset| by(NEXT, claim(EXACT, key, offset, T0 + HOUR));
    let answer = store
        .round(
            &Publish::default(),
            &[again(inside, 5), again(outside, 15), duplicate],
            &[],
        )
        .await
        .expect("round");
    assert_eq!(
        answer.outcomes,
        vec![
            ClaimOutcome::Reemit,
            ClaimOutcome::Replayed,
            ClaimOutcome::Replayed
        ]
    );
    let ours: Vec<_> = answer
        .ranges
        .iter()
        .filter(|r| r.partition == PARTITION)
        .collect();
    assert_eq!(ours[0].replay, Some((0, 10)));
    // A reset without re-emission clears the range: nothing again.
    store.reset(&[reset(PARTITION)]).await.expect("reset");
    assert_eq!(one(&*store, again(inside, 5)).await, ClaimOutcome::Replayed);
}
