//! The long tail: tier 2 over the horizon, on explicit timestamps.

use super::*;

// The long tail: tier 2 over the horizon.

pub async fn redelivery_nine_hours_after_the_first_is_suppressed(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    deliver(&*store, claim(TIERED, key, 10, T0)).await;
    let hour_later = one(&*store, claim(TIERED, key, 11, T0 + HOUR)).await;
    assert_eq!(hour_later, exact_duplicate_of(at(10)));
    // Tier 1 (2 h) has expired by nine hours later; the filter remembers.
    h.tier1_expired(TIERED, &key).await;
    let nine_hours_later = one(&*store, claim(TIERED, key, 12, T0 + 9 * HOUR)).await;
    assert_eq!(nine_hours_later, FILTER_DUPLICATE);
    // The exact-mode stream keeps the exact key for its whole 12 h.
    deliver(&*store, claim(EXACT, key, 20, T0)).await;
    let exact_later = one(&*store, claim(EXACT, key, 21, T0 + 9 * HOUR)).await;
    assert_eq!(exact_later, exact_duplicate_of(at(20)));
}

pub async fn a_key_written_a_minute_before_a_rotation_is_found_a_minute_after(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let boundary = (T0 / HOUR + 5) * HOUR;
    let key = hash(h.salt(), 1);
    deliver(&*store, claim(FAST, key, 1, boundary - MINUTE)).await;
    // Tier 1 lasts 30 s: the filter alone answers across the rotation.
    h.tier1_expired(FAST, &key).await;
    let after = one(&*store, claim(FAST, key, 2, boundary + MINUTE)).await;
    assert_eq!(after, FILTER_DUPLICATE);
    // Still covered a full horizon after it was written.
    h.tier1_expired(FAST, &key).await;
    let late = one(&*store, claim(FAST, key, 3, boundary + HOUR - 2 * MINUTE)).await;
    assert_eq!(late, FILTER_DUPLICATE);
}

pub async fn a_repeat_three_horizons_later_is_admitted(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    deliver(&*store, claim(TIERED, key, 1, T0)).await;
    h.tier1_expired(TIERED, &key).await;
    assert_eq!(
        one(&*store, claim(TIERED, key, 2, T0 + 36 * HOUR)).await,
        WON
    );
    let fast = hash(h.salt(), 2);
    deliver(&*store, claim(FAST, fast, 1, T0)).await;
    h.tier1_expired(FAST, &fast).await;
    assert_eq!(one(&*store, claim(FAST, fast, 2, T0 + 3 * HOUR)).await, WON);
}

pub async fn a_retry_ladder_out_to_nine_hours_is_suppressed_and_measured(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    let attempts = [0, 60, 300, 1800, 5400, 12000, 21600, 33600];
    let mut log = Vec::new();
    for (n, seconds) in attempts.iter().enumerate() {
        let when = T0 + seconds * 1000;
        let record = claim(TIERED, key, 100 + n as i64, when);
        match n {
            0 => deliver(&*store, record).await,
            // Tier 1 holds the exact key for 2 h ...
            _ if *seconds < 7200 => {
                let outcome = one(&*store, record).await;
                assert_eq!(outcome, exact_duplicate_of(at(100)), "{seconds}s");
            }
            // ... the filter the rest of the 12 h horizon. Each filter
            // duplicate holds a tier-1 claim of its own, gone 2 h later,
            // before the next attempt.
            _ => {
                h.tier1_expired(TIERED, &key).await;
                let outcome = one(&*store, record).await;
                assert_eq!(outcome, FILTER_DUPLICATE, "{seconds}s");
            }
        }
        log.push(Delivery {
            delivery_id: "evt-1",
            sender: "acme-bank",
            received_at_ms: when,
        });
    }
    let horizon = measure_horizon(log);
    assert_eq!(horizon.max, Duration::from_secs(33600));
    assert!(horizon.max > Duration::from_secs(90 * 60));
}

pub async fn streams_are_separate_namespaces(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    deliver(&*store, claim(EXACT, key, 1, T0)).await;
    assert_eq!(one(&*store, claim(TIERED, key, 1, T0)).await, WON);
    // Watermarks too are per stream.
    assert_eq!(raised(&*store, raise(EXACT, PARTITION, 0, 100)).await, 100);
    let other = claim(TIERED, hash(h.salt(), 2), 5, T0);
    assert_eq!(one(&*store, other).await, WON);
    let same = claim(EXACT, hash(h.salt(), 3), 5, T0);
    assert_eq!(one(&*store, same).await, ClaimOutcome::Replayed);
    assert!(watermarks(&*store, TIERED).await.is_empty());
}

pub async fn filter_inserts_are_counted_against_capacity(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let when = T0 + 2 * HOUR;
    let batch: Vec<Claim> = (0..50)
        .map(|n| claim(TIERED, hash(h.salt(), n), n as i64, when))
        .collect();
    assert!(store.claim(&batch).await.unwrap().iter().all(|o| *o == WON));
    let answer = publish(
        &*store,
        Publish {
            done: batch.iter().map(Held::from).collect(),
            inserts: batch.iter().map(insert).collect(),
            ..Publish::default()
        },
    )
    .await;
    assert!(answer.done.iter().all(|d| *d));
    let stats = store.stats(when).await.unwrap();
    let tiered = stats.filters.iter().find(|f| f.stream == "tiered").unwrap();
    assert_eq!(tiered.inserts, 50);
    assert_eq!(tiered.capacity, 20_000);
    assert_eq!(stats.evicted_keys, 0);
}
