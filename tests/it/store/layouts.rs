//! Redis's two tier-1 layouts side by side (docs/design.md §4.1): claims
//! of both live at once, replicas writing either claiming the same events,
//! and what a start decides and records.

use std::sync::Arc;

use idemgate::store::redis::{RedisOptions, RedisStore, Tier1Layout};
use idemgate::store::{ClaimOutcome, ClaimStore, Held, Publish, StoreIdentity};

use super::conformance::{claim, claim_on, hash, on, streams, EXACT, NEXT, T0};
use super::{connections, Redis};

const WON: ClaimOutcome = ClaimOutcome::Won { fresh: true };

fn options(r: &Redis, layout: Option<Tier1Layout>) -> RedisOptions {
    RedisOptions {
        filter_backend: Some(r.backend),
        tier1_layout: layout,
        ..RedisOptions::new(r.target.clone(), r.prefix.clone())
    }
}

async fn open(r: &Redis, layout: Option<Tier1Layout>) -> Arc<RedisStore> {
    Arc::new(
        RedisStore::connect(&options(r, layout), streams())
            .await
            .expect("connect"),
    )
}

/// Whether a claim of `hash` is a key, and whether it is a field.
async fn where_is(r: &Redis, store: &RedisStore, n: u64) -> (bool, bool) {
    let place = store.tier1_place(EXACT, &hash(&r.prefix, n)).unwrap();
    let (key, group, field) = (place.key, place.group, place.field);
    let (mut as_key, mut as_field) = (false, false);
    for mut conn in connections(r).await {
        // On a cluster only the slot's owner answers.
        let exists: redis::RedisResult<bool> =
            redis::cmd("EXISTS").arg(&key).query_async(&mut conn).await;
        as_key |= exists.unwrap_or(false);
        let exists: redis::RedisResult<bool> = redis::cmd("HEXISTS")
            .arg(&group)
            .arg(&field)
            .query_async(&mut conn)
            .await;
        as_field |= exists.unwrap_or(false);
    }
    (as_key, as_field)
}

async fn both_layouts_claim_each_event_once(kind: &str) {
    let r = Redis::new(kind, "layouts-mixed");
    let keys = open(&r, Some(Tier1Layout::Keys)).await;
    let grouped = open(&r, Some(Tier1Layout::Grouped)).await;
    assert_eq!(keys.tier1_layout(EXACT).unwrap(), Tier1Layout::Keys);
    assert_eq!(grouped.tier1_layout(EXACT).unwrap(), Tier1Layout::Grouped);
    let salt = r.prefix.clone();

    // Claims of both layouts live: 0..50 as keys, 50..100 as fields.
    let old: Vec<_> = (0..100)
        .map(|n| claim(EXACT, hash(&salt, n), n as i64, T0))
        .collect();
    assert_eq!(keys.claim(&old[..50]).await.unwrap(), vec![WON; 50]);
    assert_eq!(grouped.claim(&old[50..]).await.unwrap(), vec![WON; 50]);
    assert_eq!(where_is(&r, &keys, 3).await, (true, false));
    assert_eq!(where_is(&r, &keys, 73).await, (false, true));
    // The grouped writer counted its hashes' live claims at their first
    // sweep (50 claims over 64 tags of 896 buckets: mostly one a hash),
    // for the stream that claimed, the keys writer none; read once, the
    // figure starts over.
    let exact = &streams()[EXACT.0].name;
    let fields = |stats: idemgate::store::StoreStats| -> Vec<u64> {
        let named = stats.tier1_hash_fields.iter().map(|(stream, _)| stream);
        assert!(
            named.eq(streams().iter().map(|s| &s.name)),
            "every stream, in order"
        );
        stats.tier1_hash_fields.iter().map(|(_, n)| *n).collect()
    };
    let first = fields(grouped.stats(T0).await.unwrap());
    assert!((1..=50).contains(&first[EXACT.0]), "{first:?}");
    assert_eq!(
        first.iter().sum::<u64>(),
        first[EXACT.0],
        "{exact} alone claimed: {first:?}"
    );
    assert!(fields(grouped.stats(T0).await.unwrap())
        .iter()
        .all(|&n| n == 0));
    assert!(fields(keys.stats(T0).await.unwrap())
        .iter()
        .all(|&n| n == 0));

    // Copies of them, and new events, from both write modes at once:
    // nobody wins an event another layout holds, and each new event has
    // exactly one winner.
    let copies = |partition: i32| -> Vec<_> {
        (0..400)
            .map(|n| claim_on(EXACT, hash(&salt, n), on(partition, 1000 + n as i64), T0))
            .collect()
    };
    let (left, right) = (copies(7), copies(8));
    let (left, right) = tokio::join!(
        tokio::spawn({
            let keys = Arc::clone(&keys);
            async move { keys.claim(&left).await.unwrap() }
        }),
        tokio::spawn({
            let grouped = Arc::clone(&grouped);
            async move { grouped.claim(&right).await.unwrap() }
        }),
    );
    let (left, right) = (left.unwrap(), right.unwrap());
    for (n, (l, r)) in left.iter().zip(&right).enumerate() {
        let winners = [l, r].iter().filter(|o| ***o == WON).count();
        let expected = usize::from(n >= 100);
        assert_eq!(winners, expected, "event {n}: keys {l:?} grouped {r:?}");
        assert!(
            matches!(l, ClaimOutcome::Won { .. } | ClaimOutcome::Held { .. }),
            "{l:?}"
        );
        assert!(
            matches!(r, ClaimOutcome::Won { .. } | ClaimOutcome::Held { .. }),
            "{r:?}"
        );
    }

    // Each write mode settles and frees the other's claims.
    let flagged = Publish {
        done: old[50..60].iter().map(Held::from).collect(),
        ..Publish::default()
    };
    assert_eq!(keys.publish(&flagged).await.unwrap().done, vec![true; 10]);
    let freed = Publish {
        releases: old[..10].iter().map(Held::from).collect(),
        ..Publish::default()
    };
    assert_eq!(
        grouped.publish(&freed).await.unwrap().released,
        vec![true; 10]
    );
    assert_eq!(where_is(&r, &keys, 3).await, (false, false));
    // The freed event is won again, now as a field, and the other mode
    // meets it.
    let again = claim_on(EXACT, hash(&salt, 3), on(9, 5), T0);
    assert_eq!(grouped.claim(&[again]).await.unwrap(), vec![WON]);
    assert_eq!(where_is(&r, &keys, 3).await, (false, true));
    let copy = claim_on(EXACT, hash(&salt, 3), on(9, 6), T0);
    assert!(matches!(
        keys.claim(&[copy]).await.unwrap()[0],
        ClaimOutcome::Held { .. }
    ));
    // A done field is a duplicate to the keys writer.
    let copy = claim_on(EXACT, hash(&salt, 55), on(9, 7), T0);
    assert!(matches!(
        keys.claim(&[copy]).await.unwrap()[0],
        ClaimOutcome::Duplicate { .. }
    ));
    // Its own claim, written as a key by an earlier owner, is re-stamped
    // where it lies by the grouped writer.
    let own = idemgate::store::Claim {
        token: NEXT,
        ..old[20]
    };
    assert_eq!(
        grouped.claim(&[own]).await.unwrap(),
        vec![ClaimOutcome::Won { fresh: false }]
    );
    assert_eq!(where_is(&r, &keys, 20).await, (true, false));
    let by_next = Publish {
        done: vec![Held::from(&own)],
        ..Publish::default()
    };
    assert_eq!(keys.publish(&by_next).await.unwrap().done, vec![true]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_writing_keys_and_grouped_win_each_event_once_on_one_server() {
    both_layouts_claim_each_event_once("bitmap").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_writing_keys_and_grouped_win_each_event_once_on_a_cluster() {
    both_layouts_claim_each_event_once("cluster").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_stream_writes_grouped_and_an_older_one_keys_until_switched() {
    let r = Redis::new("bitmap", "layouts-start");
    let fresh = open(&r, None).await;
    assert_eq!(fresh.tier1_layout(EXACT).unwrap(), Tier1Layout::Grouped);

    // A stream an earlier version started: an identity, no record.
    let old = Redis::new("bitmap", "layouts-old");
    let first = open(&old, Some(Tier1Layout::Keys)).await;
    first
        .write_identity(EXACT, StoreIdentity::random(), false)
        .await
        .unwrap();
    for mut conn in connections(&old).await {
        let _: i64 = redis::cmd("DEL")
            .arg(format!(
                "{}{}:layout",
                old.prefix,
                streams()[EXACT.0].key_id
            ))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    assert_eq!(
        open(&old, None).await.tier1_layout(EXACT).unwrap(),
        Tier1Layout::Keys
    );
    // Switched by the config; the next start without it follows the record.
    assert_eq!(
        open(&old, Some(Tier1Layout::Grouped))
            .await
            .tier1_layout(EXACT)
            .unwrap(),
        Tier1Layout::Grouped
    );
    assert_eq!(
        open(&old, None).await.tier1_layout(EXACT).unwrap(),
        Tier1Layout::Grouped
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_would_change_the_bucket_count_is_refused() {
    let r = Redis::new("bitmap", "layouts-buckets");
    open(&r, None).await;
    let mut faster = streams();
    faster[EXACT.0].peak_rate = Some(1_000_000);
    let refused = RedisStore::connect(&options(&r, None), faster).await;
    let error = refused.err().expect("refused").to_string();
    assert!(error.contains("buckets per tag"), "{error}");
    assert!(error.contains("peak_rate"), "{error}");
}

/// A stream born grouped, ten hashes per tag: once a claim script wrote a
/// hash, later claims in it go as a native command (docs/design.md §4.1),
/// and every rule still holds on what they wrote: copies held, done flags,
/// releases, re-stamps; each field lives its TTL, each hash longer.
async fn born_grouped_claims_go_native(kind: &str) {
    let r = Redis::native(kind, "layouts-native");
    let store = RedisStore::connect(&options(&r, Some(Tier1Layout::Grouped)), few_streams(&r))
        .await
        .unwrap();
    let salt = r.prefix.clone();
    // Ten buckets per tag (1/s for 12 h): 2,000 claims write all but a
    // few of the 640 hashes.
    let first: Vec<_> = (1000..3000)
        .map(|n| claim(EXACT, hash(&salt, n), n as i64, T0))
        .collect();
    assert_eq!(store.claim(&first).await.unwrap(), vec![WON; 2000]);

    let before = store.native_claims();
    let next: Vec<_> = (200..400)
        .map(|n| claim(EXACT, hash(&salt, n), n as i64, T0))
        .collect();
    assert_eq!(store.claim(&next).await.unwrap(), vec![WON; 200]);
    let sent = store.native_claims() - before;
    assert!(
        sent >= 150,
        "only {sent} of 200 claims in written hashes went native"
    );

    // Copies of native claims meet them through the script.
    let copies: Vec<_> = (200..400)
        .map(|n| claim_on(EXACT, hash(&salt, n), on(8, n as i64), T0))
        .collect();
    for outcome in store.claim(&copies).await.unwrap() {
        assert!(matches!(outcome, ClaimOutcome::Held { .. }), "{outcome:?}");
    }
    // Settled and freed natively written claims behave as any other.
    let settle = Publish {
        done: next[..20].iter().map(Held::from).collect(),
        releases: next[20..40].iter().map(Held::from).collect(),
        ..Publish::default()
    };
    let answer = store.publish(&settle).await.unwrap();
    assert_eq!(
        (answer.done, answer.released),
        (vec![true; 20], vec![true; 20])
    );
    let outcomes = store.claim(&copies[..40]).await.unwrap();
    for outcome in &outcomes[..20] {
        assert!(
            matches!(outcome, ClaimOutcome::Duplicate { .. }),
            "{outcome:?}"
        );
    }
    assert_eq!(outcomes[20..], vec![WON; 20]);
    // Its own claim met by a new owner is re-stamped where it lies.
    let own = idemgate::store::Claim {
        token: NEXT,
        ..next[50]
    };
    assert_eq!(
        store.claim(&[own]).await.unwrap(),
        vec![ClaimOutcome::Won { fresh: false }]
    );

    // A field's expiry is its TTL past the server's time or later; its
    // hash expires no earlier than the field's second.
    let ttl_s = streams()[EXACT.0].tier1_ttl.as_secs() as i64;
    let place = store.tier1_place(EXACT, &hash(&salt, 300)).unwrap();
    for mut conn in connections(&r).await {
        let field: redis::RedisResult<Option<Vec<u8>>> = redis::cmd("HGET")
            .arg(&place.group)
            .arg(&place.field)
            .query_async(&mut conn)
            .await;
        let Ok(Some(field)) = field else { continue };
        let (now_s, _): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        let word = u32::from_be_bytes([field[24] & 0x7f, field[25], field[26], field[27]]);
        let expires_s = 1_577_836_800 + i64::from(word);
        assert!(
            expires_s >= now_s + ttl_s - 5,
            "{expires_s} against {now_s}"
        );
        assert!(
            expires_s <= now_s + ttl_s + 3,
            "{expires_s} against {now_s}"
        );
        let hash_ms: i64 = redis::cmd("PEXPIRETIME")
            .arg(&place.group)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            hash_ms >= expires_s * 1000,
            "hash {hash_ms}, field {expires_s}"
        );
    }

    // No replica may write keys into it.
    let refused = RedisStore::connect(&options(&r, Some(Tier1Layout::Keys)), few_streams(&r)).await;
    let error = refused.err().expect("a keys writer is refused").to_string();
    assert!(error.contains("born grouped"), "{error}");
}

/// The streams as the harness opens them.
fn few_streams(r: &Redis) -> Vec<idemgate::store::StreamSpec> {
    let mut few = streams();
    for spec in &mut few {
        spec.peak_rate = r.peak_rate;
    }
    few
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_born_grouped_streams_claims_go_native_on_one_server() {
    born_grouped_claims_go_native("bitmap").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_born_grouped_streams_claims_go_native_on_a_cluster() {
    born_grouped_claims_go_native("cluster").await;
}

/// A store a version before store identities wrote: watermarks and key
/// claims, no identity, no record. It is fresh enough to write grouped,
/// but not born grouped: its rounds keep reading keys, and a replica may
/// still write them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_watermarks_but_no_identity_is_not_born_grouped() {
    let r = Redis::new("bitmap", "layouts-before-identities");
    let salt = r.prefix.clone();
    for spec in streams() {
        for mut conn in connections(&r).await {
            let _: i64 = redis::cmd("HSET")
                .arg(format!("{}{}:w", r.prefix, spec.key_id))
                .arg("000000:3")
                .arg("5")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    }
    let old = claim(EXACT, hash(&salt, 1), 1, T0);
    let first = open(&r, None).await;
    assert_eq!(first.tier1_layout(EXACT).unwrap(), Tier1Layout::Grouped);
    let keys = open(&r, Some(Tier1Layout::Keys)).await;
    assert_eq!(keys.claim(&[old]).await.unwrap(), vec![WON]);
    assert_eq!(where_is(&r, &keys, 1).await, (true, false));
    // The grouped writer meets the key claim.
    let copy = claim_on(EXACT, hash(&salt, 1), on(8, 9), T0);
    assert!(matches!(
        first.claim(&[copy]).await.unwrap()[0],
        ClaimOutcome::Held { .. }
    ));
    assert_eq!(first.native_claims(), 0);
}
