//! Redis only: what the server holds, and a server that lost its scripts.

use super::*;
use idemgate::store::redis::Tier1Layout;

// Redis only: what the server holds.

pub async fn tier1_keys_and_values_are_compact(r: &Redis) {
    let store = r.open(streams()).await;
    let claims: Vec<Claim> = (0..20)
        .map(|n| {
            claim(
                if n % 2 == 0 { EXACT } else { TIERED },
                hash(r.salt(), n),
                n as i64,
                T0,
            )
        })
        .collect();
    store.claim(&claims).await.unwrap();
    let halfway = Publish {
        done: claims[..10].iter().map(Held::from).collect(),
        ..Publish::default()
    };
    publish(&*store, halfway).await;
    if r.layout == Tier1Layout::Grouped {
        return tier1_fields_are_compact(r).await;
    }
    // Tier-1 keys are the only ones with a hash tag.
    let tier1: Vec<Vec<u8>> = ttls(r)
        .await
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| key.contains(&b'{'))
        .collect();
    assert_eq!(tier1.len(), 20);
    for key in &tier1 {
        // prefix, key id (2), tag ({xx}: 4), 16 bytes of hash
        assert_eq!(key.len(), r.prefix.len() + 2 + 4 + 16, "{key:?}");
    }
    let mut lengths = Vec::new();
    for mut conn in connections(r).await {
        for key in &tier1 {
            let length: redis::RedisResult<i64> =
                redis::cmd("STRLEN").arg(key).query_async(&mut conn).await;
            // On a cluster only the slot's owner answers.
            if let Ok(length) = length {
                lengths.push(length);
            }
        }
    }
    assert_eq!(lengths.len(), 20);
    assert!(lengths.iter().all(|l| *l == 28), "{lengths:?}");
}

/// Grouped: 20 fields of 16 hash bytes, each holding 28 bytes (the value's
/// first 24, then the done flag over the expiry), in hashes Redis keeps as
/// listpacks; no claim key.
async fn tier1_fields_are_compact(r: &Redis) {
    let tagged: Vec<Vec<u8>> = ttls(r)
        .await
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| key.contains(&b'{') && !key.windows(4).any(|w| w == b":id{"))
        .collect();
    let mut fields = Vec::new();
    for key in &tagged {
        assert!(
            // prefix, key id (2), then `:g{`
            key[r.prefix.len() + 2..].starts_with(b":g{"),
            "{key:?} is no tier-1 hash"
        );
        for mut conn in connections(r).await {
            // On a cluster only the slot's owner answers.
            let Ok(all): redis::RedisResult<Vec<(Vec<u8>, Vec<u8>)>> =
                redis::cmd("HGETALL").arg(key).query_async(&mut conn).await
            else {
                continue;
            };
            let encoding: String = redis::cmd("OBJECT")
                .arg("ENCODING")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(encoding, "listpack", "{key:?}");
            fields.extend(all.into_iter().filter(|(field, _)| field != b"~"));
        }
    }
    assert_eq!(fields.len(), 20, "{fields:?}");
    for (field, value) in fields {
        assert_eq!((field.len(), value.len()), (16, 28));
    }
}

pub async fn a_server_that_lost_its_scripts_still_settles_and_reads_after_the_raises(r: &Redis) {
    let store = r.open(streams()).await;
    let settled = claim(EXACT, hash(r.salt(), 1), 50, T0);
    let freed = claim(EXACT, hash(r.salt(), 3), 51, T0);
    assert_eq!(
        store.claim(&[settled, freed]).await.unwrap(),
        vec![WON, WON]
    );
    // A restart, a failover or SCRIPT FLUSH: every cached script is gone.
    for mut conn in connections(r).await {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let publish = Publish {
        raises: vec![raise(EXACT, PARTITION, 0, 20)],
        done: vec![Held::from(&settled)],
        releases: vec![Held::from(&freed)],
        ..Publish::default()
    };
    let claims = [
        claim(EXACT, hash(r.salt(), 2), 5, T0),
        claim_on(EXACT, settled.hash, on(4, 1), T0),
        claim_on(EXACT, freed.hash, on(4, 2), T0),
    ];
    let answer = store.round(&publish, &claims, &[]).await.unwrap();
    assert_eq!(
        (answer.raised, answer.done, answer.released),
        (vec![20], vec![true], vec![true])
    );
    assert_eq!(answer.watermarks, vec![mark(EXACT, PARTITION, 20)]);
    // Judged after the whole publish, though its scripts went again as
    // EVAL after the claims: the record below the raise is replayed, the
    // copy of the settled claim a duplicate, the copy of the released one
    // the new holder.
    assert_eq!(
        answer.outcomes,
        vec![ClaimOutcome::Replayed, exact_duplicate_of(at(50)), WON]
    );
}

pub async fn a_watermark_hash_keeps_its_ttl_refreshed_at_every_raise(r: &Redis) {
    let store = r.open(streams()).await;
    let key = format!("{}{}:w", r.prefix, streams()[EXACT.0].key_id);
    let full = i64::try_from(streams()[EXACT.0].watermark_ttl().as_millis()).unwrap();
    let pttl = || async {
        let mut found = Vec::new();
        for mut conn in connections(r).await {
            let ttl: redis::RedisResult<i64> =
                redis::cmd("PTTL").arg(&key).query_async(&mut conn).await;
            // On a cluster only the slot's owner answers.
            found.extend(ttl.ok().filter(|t| *t != -2));
        }
        assert_eq!(found.len(), 1, "{key}: {found:?}");
        found[0]
    };
    assert_eq!(raised(&*store, raise(EXACT, PARTITION, 0, 10)).await, 10);
    let after_first = pttl().await;
    assert!(
        after_first > full - MINUTE && after_first <= full,
        "{after_first}"
    );
    // Shortened behind the store's back, it is back to full at the next
    // raise, even one that moves nothing.
    for mut conn in connections(r).await {
        let _: redis::RedisResult<i64> = redis::cmd("PEXPIRE")
            .arg(&key)
            .arg(60_000)
            .query_async(&mut conn)
            .await;
    }
    assert!(pttl().await <= 60_000);
    assert_eq!(raised(&*store, raise(EXACT, PARTITION, 0, 5)).await, 10);
    assert!(pttl().await > full - MINUTE);
}
