//! The `ClaimStore` contract, written once and run against every backend
//! (see `main.rs`). Time is explicit: "nine hours later" is a timestamp.

use std::sync::Arc;
use std::time::Duration;

use idemgate::fingerprint::{PayloadDigest, SourceHash};
use idemgate::store::{
    Claim, ClaimOutcome, ClaimState, ClaimStore, Coordinates, FilterSizing, GenerationPlan, Mode,
    Settle, StreamId, StreamSpec, Tier, TopicTag,
};
use idemgate::ttl::{measure_horizon, Delivery};
use sha2::{Digest, Sha256};

use super::Harness;

pub const HOUR: i64 = 3_600_000;
pub const MINUTE: i64 = 60_000;
/// A fixed epoch-aligned start, so rotation tests know their boundaries.
pub const T0: i64 = 1_800_000_000_000 / (12 * HOUR) * (12 * HOUR) + HOUR;

pub const EXACT: StreamId = StreamId(0);
pub const TIERED: StreamId = StreamId(1);
pub const FAST: StreamId = StreamId(2);

/// Three streams: exact with 12 h, tiered with a 12 h horizon over a 2 h
/// tier 1, and a tiered one whose tier 1 lasts 30 s, so the filter alone
/// has to answer across a rotation.
pub fn streams() -> Vec<StreamSpec> {
    let plan = |horizon: Duration| GenerationPlan {
        horizon,
        slots: 2,
        skew: Duration::from_secs(5),
        sizing: FilterSizing::new(20_000, 1e-3),
    };
    vec![
        StreamSpec {
            name: "exact".into(),
            mode: Mode::Exact,
            lease: Duration::from_secs(30),
            tier1_ttl: Duration::from_secs(12 * 3600),
            filter: None,
        },
        StreamSpec {
            name: "tiered".into(),
            mode: Mode::Tiered,
            lease: Duration::from_secs(30),
            tier1_ttl: Duration::from_secs(2 * 3600),
            filter: Some(plan(Duration::from_secs(12 * 3600))),
        },
        StreamSpec {
            name: "fast".into(),
            mode: Mode::Tiered,
            lease: Duration::from_secs(10),
            tier1_ttl: Duration::from_secs(30),
            filter: Some(plan(Duration::from_secs(3600))),
        },
    ]
}

pub fn hash(salt: &str, n: u64) -> SourceHash {
    SourceHash(Sha256::digest(format!("{salt}/{n}")).into())
}

pub fn at(offset: i64) -> Coordinates {
    Coordinates {
        topic: TopicTag::of("raw.events"),
        partition: 3,
        offset,
    }
}

const DIGEST: PayloadDigest = PayloadDigest([7; 8]);

pub fn claim(stream: StreamId, hash: SourceHash, offset: i64, when: i64) -> Claim {
    Claim {
        stream,
        hash,
        digest: DIGEST,
        holder: at(offset),
        at: when,
        wall: when,
    }
}

async fn one(store: &dyn ClaimStore, claim: Claim) -> ClaimOutcome {
    store.claim(&[claim]).await.expect("claim")[0]
}

async fn finalize(store: &dyn ClaimStore, claim: Claim) -> bool {
    store
        .finalize(&[Settle::from(&claim)])
        .await
        .expect("finalize")[0]
}

/// Claims and finalizes: the record went through.
async fn deliver(store: &dyn ClaimStore, claim: Claim) {
    assert_eq!(one(store, claim).await, ClaimOutcome::Won);
    assert!(finalize(store, claim).await);
}

fn exact_duplicate_of(holder: i64) -> ClaimOutcome {
    ClaimOutcome::Duplicate {
        tier: Tier::Exact,
        holder: Some(at(holder)),
    }
}

const FILTER_DUPLICATE: ClaimOutcome = ClaimOutcome::Duplicate {
    tier: Tier::Filter,
    holder: None,
};

pub async fn redelivery_nine_hours_after_the_first_is_suppressed(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 1);
    deliver(&*store, claim(TIERED, key, 10, T0)).await;
    let hour_later = one(&*store, claim(TIERED, key, 11, T0 + HOUR)).await;
    assert_eq!(hour_later, exact_duplicate_of(10));
    let nine_hours_later = one(&*store, claim(TIERED, key, 12, T0 + 9 * HOUR)).await;
    assert_eq!(nine_hours_later, FILTER_DUPLICATE);
    // The exact-mode stream keeps the exact key for its whole 12 h.
    deliver(&*store, claim(EXACT, key, 20, T0)).await;
    let exact_later = one(&*store, claim(EXACT, key, 21, T0 + 9 * HOUR)).await;
    assert_eq!(exact_later, exact_duplicate_of(20));
}

pub async fn a_key_written_a_minute_before_a_rotation_is_found_a_minute_after(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let boundary = (T0 / HOUR + 5) * HOUR;
    let key = hash(h.salt(), 2);
    deliver(&*store, claim(FAST, key, 1, boundary - MINUTE)).await;
    assert_eq!(
        one(&*store, claim(FAST, key, 2, boundary + MINUTE)).await,
        FILTER_DUPLICATE
    );
    // Still covered a full horizon after it was written.
    assert_eq!(
        one(&*store, claim(FAST, key, 3, boundary + HOUR - 2 * MINUTE)).await,
        FILTER_DUPLICATE
    );
}

pub async fn a_repeat_three_horizons_later_is_admitted(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 3);
    deliver(&*store, claim(TIERED, key, 1, T0)).await;
    assert_eq!(
        one(&*store, claim(TIERED, key, 2, T0 + 36 * HOUR)).await,
        ClaimOutcome::Won
    );
    let fast = hash(h.salt(), 4);
    deliver(&*store, claim(FAST, fast, 1, T0)).await;
    assert_eq!(
        one(&*store, claim(FAST, fast, 2, T0 + 3 * HOUR)).await,
        ClaimOutcome::Won
    );
}

pub async fn a_retry_ladder_out_to_nine_hours_is_suppressed_and_measured(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 5);
    let attempts = [0, 60, 300, 1800, 5400, 12000, 21600, 33600];
    let mut log = Vec::new();
    for (n, seconds) in attempts.iter().enumerate() {
        let when = T0 + seconds * 1000;
        let record = claim(TIERED, key, 100 + n as i64, when);
        let outcome = one(&*store, record).await;
        match n {
            0 => {
                assert_eq!(outcome, ClaimOutcome::Won);
                assert!(finalize(&*store, record).await);
            }
            // Tier 1 holds the exact key for 2 h ...
            _ if *seconds < 7200 => assert_eq!(outcome, exact_duplicate_of(100), "{seconds}s"),
            // ... the filter the rest of the 12 h horizon.
            _ => assert_eq!(outcome, FILTER_DUPLICATE, "{seconds}s"),
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

pub async fn a_record_meeting_its_own_claim_is_not_its_own_duplicate(h: &dyn Harness) {
    let store = h.open(streams()).await;
    for stream in [EXACT, TIERED] {
        let record = claim(stream, hash(h.salt(), 6), 42, T0);
        assert_eq!(one(&*store, record).await, ClaimOutcome::Won);
        let again = claim(stream, record.hash, 42, T0 + 1000);
        assert_eq!(
            one(&*store, again).await,
            ClaimOutcome::Own(ClaimState::Pending)
        );
        assert!(finalize(&*store, again).await);
        let replayed = claim(stream, record.hash, 42, T0 + MINUTE);
        assert_eq!(
            one(&*store, replayed).await,
            ClaimOutcome::Own(ClaimState::Done)
        );
        // Finalizing again keeps it done (and does not extend its TTL).
        assert!(finalize(&*store, replayed).await);
    }
}

pub async fn a_released_claim_is_won_by_the_next_record(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let first = claim(TIERED, hash(h.salt(), 7), 1, T0);
    assert_eq!(one(&*store, first).await, ClaimOutcome::Won);
    assert_eq!(
        store.release(&[Settle::from(&first)]).await.unwrap(),
        vec![true]
    );
    let next = claim(TIERED, first.hash, 2, T0 + 1000);
    assert_eq!(one(&*store, next).await, ClaimOutcome::Won);
    // A release by a record that no longer holds the claim changes nothing.
    assert_eq!(
        store.release(&[Settle::from(&first)]).await.unwrap(),
        vec![false]
    );
    assert!(finalize(&*store, next).await);
    let third = claim(TIERED, first.hash, 3, T0 + 2000);
    assert_eq!(one(&*store, third).await, exact_duplicate_of(2));
}

pub async fn another_records_pending_claim_is_held_not_duplicate(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 8);
    assert_eq!(
        one(&*store, claim(EXACT, key, 1, T0)).await,
        ClaimOutcome::Won
    );
    assert_eq!(
        one(&*store, claim(EXACT, key, 2, T0 + 1000)).await,
        ClaimOutcome::Held { holder: at(1) }
    );
    // Two copies in one batch: the first holds, the later ones are held.
    let twin = hash(h.salt(), 9);
    let outcomes = store
        .claim(&[claim(EXACT, twin, 5, T0), claim(EXACT, twin, 6, T0)])
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        vec![ClaimOutcome::Won, ClaimOutcome::Held { holder: at(5) }]
    );
}

pub async fn a_reused_key_with_another_payload_is_a_conflict(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 10);
    deliver(&*store, claim(EXACT, key, 1, T0)).await;
    let mut reused = claim(EXACT, key, 2, T0 + 1000);
    reused.digest = PayloadDigest([8; 8]);
    assert_eq!(
        one(&*store, reused).await,
        ClaimOutcome::Conflict { holder: at(1) }
    );
}

pub async fn a_lapsed_lease_passes_the_claim_on_and_the_old_holder_cannot_finalize(
    h: &dyn Harness,
) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 11);
    let stale = claim(EXACT, key, 1, T0);
    assert_eq!(one(&*store, stale).await, ClaimOutcome::Won);
    let after_lease = claim(EXACT, key, 2, T0 + 31_000);
    assert_eq!(one(&*store, after_lease).await, ClaimOutcome::Won);
    assert!(!finalize(&*store, claim(EXACT, key, 1, T0 + 32_000)).await);
    assert!(finalize(&*store, after_lease).await);
    assert_eq!(
        one(&*store, claim(EXACT, key, 3, T0 + 33_000)).await,
        exact_duplicate_of(2)
    );
}

pub async fn streams_are_separate_namespaces(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let key = hash(h.salt(), 12);
    deliver(&*store, claim(EXACT, key, 1, T0)).await;
    assert_eq!(
        one(&*store, claim(TIERED, key, 1, T0)).await,
        ClaimOutcome::Won
    );
}

pub async fn two_connections_claiming_one_hash_at_once_give_exactly_one_winner(h: &dyn Harness) {
    let left = h.open(streams()).await;
    let right = h.open(streams()).await;
    let hashes: Vec<SourceHash> = (0..300).map(|n| hash(h.salt(), 1000 + n)).collect();
    let batch = |offset: i64| -> Vec<Claim> {
        hashes
            .iter()
            .map(|key| claim(TIERED, *key, offset, T0))
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
        let winners = [l, r].iter().filter(|o| ***o == ClaimOutcome::Won).count();
        assert_eq!(winners, 1, "left {l:?} right {r:?}");
        assert!(matches!(l, ClaimOutcome::Won | ClaimOutcome::Held { .. }));
        assert!(matches!(r, ClaimOutcome::Won | ClaimOutcome::Held { .. }));
    }
}

pub async fn filter_inserts_are_counted_against_capacity(h: &dyn Harness) {
    let store = h.open(streams()).await;
    let when = T0 + 2 * HOUR;
    let batch: Vec<Claim> = (0..50)
        .map(|n| claim(TIERED, hash(h.salt(), 2000 + n), n as i64, when))
        .collect();
    assert!(store
        .claim(&batch)
        .await
        .unwrap()
        .iter()
        .all(|o| *o == ClaimOutcome::Won));
    let settles: Vec<Settle> = batch.iter().map(Settle::from).collect();
    assert!(store.finalize(&settles).await.unwrap().iter().all(|d| *d));
    let stats = store.stats(when).await.unwrap();
    let tiered = stats.filters.iter().find(|f| f.stream == "tiered").unwrap();
    assert_eq!(tiered.inserts, 50);
    assert_eq!(tiered.capacity, 20_000);
    assert_eq!(stats.evicted_keys, 0);
}
