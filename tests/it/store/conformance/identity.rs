//! The store identity (docs/design.md §8.2): written once per stream,
//! adopted by each replica at start, compared by every round beside its
//! claims; a store that lost its state answers so, and judges nothing.
//! And the claims a rebuild writes back (§8.3).

use idemgate::store::{at_start, AtStart, Check, Restored, StoreIdentity, StreamLost};

use super::*;

/// Writes the stream's identity as a first start does and adopts it.
async fn adopted(store: &dyn ClaimStore, stream: StreamId) -> StoreIdentity {
    let found = store
        .write_identity(stream, StoreIdentity::random(), false)
        .await
        .expect("write identity");
    let AtStart::Adopt(identity) = at_start(&found) else {
        panic!("no single identity after the write: {found:?}");
    };
    store.adopt_identity(stream, identity);
    identity
}

pub async fn a_streams_identity_is_written_once_and_found_everywhere(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let first = adopted(&*store, EXACT).await;
    // A second replica starting at once writes its own: the first stays.
    let again = store
        .write_identity(EXACT, StoreIdentity::random(), false)
        .await
        .unwrap();
    assert_eq!(at_start(&again), AtStart::Adopt(first));
    let found = h.open(streams()).await.find_identity(EXACT).await.unwrap();
    assert_eq!(
        at_start(&found),
        AtStart::Adopt(first),
        "another connection"
    );
    // A rebuild replaces it.
    let rebuilt = StoreIdentity::random();
    let replaced = store.write_identity(EXACT, rebuilt, true).await.unwrap();
    assert_eq!(at_start(&replaced), AtStart::Adopt(rebuilt));
}

pub async fn a_round_on_a_store_that_lost_its_state_judges_none_of_the_streams_claims(
    h: &dyn Harness,
) {
    let store = h.open(streams()).await;
    adopted(&*store, EXACT).await;
    let original = claim(EXACT, hash(h.salt(), 1), 10, T0);
    deliver(&*store, original).await;
    let answer = store
        .round(
            &Publish::default(),
            &[claim(EXACT, hash(h.salt(), 2), 11, T0)],
            &[],
        )
        .await
        .unwrap();
    assert!(answer.lost.is_empty(), "intact: {:?}", answer.lost);

    // A restart without persistence, a flush, a failover to an empty
    // replica: the copy of the delivered event must not pass as novel.
    h.lose_state().await;
    let copy = claim_on(EXACT, original.hash, on(4, 1), T0 + MINUTE);
    // A stream that never adopted an identity is judged as before.
    let other = claim(TIERED, hash(h.salt(), 3), 12, T0 + MINUTE);
    let answer = store
        .round(&Publish::default(), &[copy, other], &[])
        .await
        .unwrap();
    assert_eq!(
        answer.lost,
        vec![StreamLost {
            stream: EXACT,
            how: Check::Missing
        }]
    );
    assert_eq!(answer.outcomes, vec![ClaimOutcome::StoreLost, WON]);
}

/// The worker's timed check (docs/design.md §8.2): with no round at all,
/// a store that lost its state answers the stream lost, from every place
/// the identity is kept; an intact store, and a stream that never adopted
/// an identity, answer nothing. Nothing is written: asked again, it
/// answers the same.
pub async fn the_timed_check_sees_a_lost_store_without_a_round(h: &dyn Harness) {
    let store = h.open(streams()).await;
    adopted(&*store, EXACT).await;
    deliver(&*store, claim(EXACT, hash(h.salt(), 1), 10, T0)).await;
    let checked = store.verify_identity(&[EXACT, TIERED]).await.unwrap();
    assert_eq!(checked, vec![], "intact");

    h.lose_state().await;
    let lost = vec![StreamLost {
        stream: EXACT,
        how: Check::Missing,
    }];
    assert_eq!(store.verify_identity(&[EXACT, TIERED]).await.unwrap(), lost);
    assert_eq!(
        store.verify_identity(&[EXACT]).await.unwrap(),
        lost,
        "again"
    );
    assert_eq!(store.verify_identity(&[TIERED]).await.unwrap(), vec![]);
    assert_eq!(store.verify_identity(&[]).await.unwrap(), vec![]);

    // Rebuilt under the replica: changed.
    store
        .write_identity(EXACT, StoreIdentity::random(), true)
        .await
        .unwrap();
    let changed = store.verify_identity(&[EXACT]).await.unwrap();
    assert_eq!(
        changed,
        vec![StreamLost {
            stream: EXACT,
            how: Check::Changed
        }]
    );
}

pub async fn a_round_on_a_store_rebuilt_under_the_replica_answers_changed(h: &dyn Harness) {
    let store = h.open(streams()).await;
    adopted(&*store, EXACT).await;
    store
        .write_identity(EXACT, StoreIdentity::random(), true)
        .await
        .unwrap();
    let answer = store
        .round(
            &Publish::default(),
            &[claim(EXACT, hash(h.salt(), 1), 10, T0)],
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        answer.lost,
        vec![StreamLost {
            stream: EXACT,
            how: Check::Changed
        }]
    );
    assert_eq!(answer.outcomes, vec![ClaimOutcome::StoreLost]);
}

/// Redis only: a cluster node that comes back empty loses the identity of
/// the tags it serves; a round is lost where its claims touch one of them.
pub async fn a_tag_that_lost_its_identity_is_seen_by_the_claims_in_it(r: &Redis) {
    let store = r.open(streams()).await;
    adopted(&*store, EXACT).await;
    let key_id = &streams()[EXACT.0].key_id;
    // Two hashes in different tags; the first tag loses its identity.
    let hashes: Vec<SourceHash> = (0..64).map(|n| hash(r.salt(), n)).collect();
    let lost = hashes[0];
    let kept = *hashes
        .iter()
        .find(|h| h.0[16] & 0x3f != lost.0[16] & 0x3f)
        .expect("another tag");
    let key = format!("{}{key_id}:id{{{:02x}}}", r.prefix, lost.0[16] & 0x3f);
    for mut conn in connections(r).await {
        // On a cluster only the slot's owner deletes.
        let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&key).query_async(&mut conn).await;
    }
    // The timed check reads every tag, so no claim needs to touch it.
    let checked = store.verify_identity(&[EXACT]).await.unwrap();
    assert_eq!(
        checked,
        vec![StreamLost {
            stream: EXACT,
            how: Check::Missing
        }]
    );
    let intact = store
        .round(&Publish::default(), &[claim(EXACT, kept, 10, T0)], &[])
        .await
        .unwrap();
    assert!(intact.lost.is_empty(), "{:?}", intact.lost);
    assert_eq!(intact.outcomes, vec![WON]);
    let answer = store
        .round(&Publish::default(), &[claim(EXACT, lost, 11, T0)], &[])
        .await
        .unwrap();
    assert_eq!(answer.lost.len(), 1);
    assert_eq!(answer.outcomes, vec![ClaimOutcome::StoreLost]);
    let found = store.find_identity(EXACT).await.unwrap();
    assert_eq!(found.missing(), 1);
    assert!(matches!(at_start(&found), AtStart::Refuse(_)));
}

/// What `idemgate rebuild` writes back (docs/design.md §8.3): a settled
/// claim whose holder is the clean output's input, over whatever the store
/// held for the hash (here a claim written on the empty store by a round
/// that met the loss).
pub async fn a_restored_claim_is_settled_and_its_copies_are_duplicates(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let event = hash(h.salt(), 1);
    let met_the_loss = claim_on(EXACT, event, on(4, 9), T0);
    assert_eq!(one(&*store, met_the_loss).await, WON);
    let original = at(5);
    let restored = Restored {
        stream: EXACT,
        hash: event,
        digest: DIGEST,
        holder: original,
        at: T0,
        expires_at: T0 + 12 * HOUR,
    };
    store.restore(&[restored]).await.expect("restore");
    assert_eq!(
        one(&*store, claim_on(EXACT, event, on(4, 9), T0 + MINUTE)).await,
        exact_duplicate_of(original),
        "the copy that met the loss is a duplicate of the original now"
    );
    let edited = Claim {
        digest: PayloadDigest([8; 8]),
        ..claim_on(EXACT, event, on(2, 3), T0 + MINUTE)
    };
    assert_eq!(
        one(&*store, edited).await,
        ClaimOutcome::Conflict { holder: original }
    );
    // The original read again (a replay): its own settled claim.
    assert_eq!(
        one(&*store, claim(EXACT, event, 5, T0 + MINUTE)).await,
        ClaimOutcome::Replayed
    );
}
