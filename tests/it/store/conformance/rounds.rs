//! A round's order, its writes' idempotence, concurrent rounds, and a
//! full filter generation.

use super::*;

// The round's order, and its writes' idempotence.

pub async fn a_round_applies_inserts_and_raises_before_it_reads_and_claims(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let settled = claim(EXACT, hash(h.salt(), 1), 50, T0);
    let freed = claim(EXACT, hash(h.salt(), 2), 51, T0);
    assert_eq!(
        store.claim(&[settled, freed]).await.unwrap(),
        vec![WON, WON]
    );
    let filtered = claim_on(TIERED, hash(h.salt(), 3), on(9, 1), T0);
    let publish = Publish {
        inserts: vec![insert(&filtered)],
        raises: vec![raise(EXACT, PARTITION, 0, 20)],
        done: vec![Held::from(&settled)],
        releases: vec![Held::from(&freed)],
    };
    let later = T0 + 1000;
    let claims = [
        claim(TIERED, filtered.hash, 7, later),
        claim(EXACT, hash(h.salt(), 4), 5, later),
        claim_on(EXACT, settled.hash, on(4, 1), later),
        claim_on(EXACT, freed.hash, on(4, 2), later),
    ];
    let answer = store.round(&publish, &claims, &[]).await.unwrap();
    assert_eq!(answer.raised, vec![20]);
    assert_eq!(answer.done, vec![true]);
    assert_eq!(answer.released, vec![true]);
    assert_eq!(answer.watermarks, vec![mark(EXACT, PARTITION, 20)]);
    assert_eq!(
        answer.outcomes,
        vec![
            FILTER_DUPLICATE,
            ClaimOutcome::Replayed,
            exact_duplicate_of(at(50)),
            WON,
        ]
    );
}

pub async fn a_full_filter_generation_never_drops_an_insert(h: &dyn Harness) {
    let store = h.open(streams()).await;
    // Four times the generation's capacity (100), in rounds of 100.
    let hashes: Vec<SourceHash> = (0..400).map(|n| hash(h.salt(), n)).collect();
    let when = T0 + HOUR;
    for chunk in hashes.chunks(100) {
        let inserts = chunk
            .iter()
            .map(|hash| Insert {
                stream: SMALL,
                hash: *hash,
                at: when,
            })
            .collect();
        publish(
            &*store,
            Publish {
                inserts,
                ..Publish::default()
            },
        )
        .await;
    }
    let claims: Vec<Claim> = hashes
        .iter()
        .enumerate()
        .map(|(n, hash)| claim(SMALL, *hash, n as i64, when + HOUR))
        .collect();
    let outcomes = store.claim(&claims).await.unwrap();
    let missing = outcomes.iter().filter(|o| **o != FILTER_DUPLICATE).count();
    assert_eq!(missing, 0, "{missing} of 400 inserted hashes not found");
    let stats = store.stats(when).await.unwrap();
    let small = stats.filters.iter().find(|f| f.stream == "small").unwrap();
    assert_eq!((small.inserts, small.capacity), (400, 100));
}

/// For every hash inserted: a copy an hour later is a filter duplicate,
/// though another replica's inserts filled its generation, putting three
/// quarters of them in the overflow part, after this replica had found
/// that part absent (and left it out of its probes from then on:
/// docs/design.md §5).
pub async fn a_generation_another_replica_filled_is_probed_in_full(h: &dyn Harness) {
    let watcher = h.open(streams()).await;
    let filler = h.open(streams()).await;
    let when = T0 + HOUR;
    let hashes: Vec<SourceHash> = (0..400).map(|n| hash(h.salt(), n)).collect();
    let insert_all = |chunk: &[SourceHash]| Publish {
        inserts: chunk
            .iter()
            .map(|hash| Insert {
                stream: SMALL,
                hash: *hash,
                at: when,
            })
            .collect(),
        ..Publish::default()
    };
    // Ten inserts: the generation exists, its overflow part does not.
    publish(&*filler, insert_all(&hashes[..10])).await;
    // Two rounds: the first finds the overflow part absent, the second
    // probes as it found.
    for n in 0..2u8 {
        let early = claim(SMALL, hash(h.salt(), 1000 + u64::from(n)), n.into(), when);
        assert_eq!(one(&*watcher, early).await, WON);
    }
    for chunk in hashes[10..].chunks(100) {
        publish(&*filler, insert_all(chunk)).await;
    }
    let claims: Vec<Claim> = hashes
        .iter()
        .enumerate()
        .map(|(n, hash)| claim(SMALL, *hash, 10 + n as i64, when + HOUR))
        .collect();
    let outcomes = watcher.claim(&claims).await.unwrap();
    let missing = outcomes.iter().filter(|o| **o != FILTER_DUPLICATE).count();
    assert_eq!(
        missing, 0,
        "{missing} of 400 hashes another replica inserted not found"
    );
}

pub async fn a_publish_sent_twice_is_harmless(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let settled = claim(EXACT, hash(h.salt(), 1), 50, T0);
    let freed = claim(EXACT, hash(h.salt(), 2), 51, T0);
    assert_eq!(
        store.claim(&[settled, freed]).await.unwrap(),
        vec![WON, WON]
    );
    let filtered = claim_on(TIERED, hash(h.salt(), 3), on(9, 1), T0);
    let sent = Publish {
        inserts: vec![insert(&filtered)],
        raises: vec![raise(EXACT, PARTITION, 0, 20)],
        done: vec![Held::from(&settled)],
        releases: vec![Held::from(&freed)],
    };
    let first = publish(&*store, sent.clone()).await;
    assert_eq!(
        (first.raised, first.done, first.released),
        (vec![20], vec![true], vec![true])
    );
    // The freed hash is claimed by the next record before the publish,
    // whose answer was lost, is sent again.
    let next = claim_on(EXACT, freed.hash, on(4, 1), T0 + 1000);
    assert_eq!(one(&*store, next).await, WON);
    let second = publish(&*store, sent).await;
    assert_eq!(
        (second.raised, second.done, second.released),
        (vec![20], vec![true], vec![false])
    );
    // Nothing moved.
    let later = T0 + 2000;
    let copies = [
        claim_on(EXACT, freed.hash, on(4, 2), later),
        claim_on(EXACT, settled.hash, on(4, 3), later),
        claim(TIERED, filtered.hash, 9, later),
        claim(EXACT, hash(h.salt(), 4), 19, later),
    ];
    assert_eq!(
        store.claim(&copies).await.unwrap(),
        vec![
            ClaimOutcome::Held { holder: on(4, 1) },
            exact_duplicate_of(at(50)),
            FILTER_DUPLICATE,
            ClaimOutcome::Replayed,
        ]
    );
    assert_eq!(
        watermarks(&*store, EXACT).await,
        vec![mark(EXACT, PARTITION, 20)]
    );
}

pub async fn two_connections_claiming_one_hash_at_once_give_exactly_one_winner(h: &dyn Harness) {
    let left = h.open(streams()).await;
    let right = h.open(streams()).await;
    let hashes: Vec<SourceHash> = (0..300).map(|n| hash(h.salt(), 1000 + n)).collect();
    let batch = |partition: i32| -> Vec<Claim> {
        hashes
            .iter()
            .map(|key| claim_on(TIERED, *key, on(partition, 1), T0))
            .collect()
    };
    let (a, b) = (batch(1), batch(2));
    let (left_outcomes, right_outcomes) = tokio::join!(
        tokio::spawn({
            let left = Arc::clone(&left);
            async move { left.claim(&a).await.unwrap() }
        }),
        tokio::spawn({
            let right = Arc::clone(&right);
            async move { right.claim(&b).await.unwrap() }
        }),
    );
    let (left_outcomes, right_outcomes) = (left_outcomes.unwrap(), right_outcomes.unwrap());
    for (l, r) in left_outcomes.iter().zip(&right_outcomes) {
        let winners = [l, r].iter().filter(|o| ***o == WON).count();
        assert_eq!(winners, 1, "left {l:?} right {r:?}");
        assert!(matches!(
            l,
            ClaimOutcome::Won { .. } | ClaimOutcome::Held { .. }
        ));
        assert!(matches!(
            r,
            ClaimOutcome::Won { .. } | ClaimOutcome::Held { .. }
        ));
    }
}
