//! Tier-1 claims as a Redis server holds them, in either layout
//! (docs/design.md §4.1): a claim key `<key id>{<tag>}<16 hash bytes>`
//! holding the 28-byte value, or a field of a grouped hash
//! `<key id>:g{<tag>}<bucket>`: 16 hash bytes holding the value's first
//! 24 bytes, then the done flag (high bit) over the field's expiry (31
//! bits, whole seconds since 2020-01-01), beside the hash's sweep mark `~`.
//! A field past its expiry counts as absent.

/// One live tier-1 claim on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredClaim {
    /// The stream's key id.
    pub key_id: Vec<u8>,
    /// The 28-byte claim value (a field's with a claim time of 0).
    pub value: Vec<u8>,
    /// How long it still lives (ms).
    pub ttl_ms: i64,
}

/// Where field expiries count from.
const BASE_S: i64 = 1_577_836_800;

/// Whether a key (after its prefix) is a grouped tier-1 hash.
pub fn is_group_key(rest: &[u8]) -> bool {
    rest.iter()
        .position(|b| *b == b'{')
        .is_some_and(|brace| rest[..brace].ends_with(b":g"))
}

/// Every live tier-1 claim the node behind `connection` holds under
/// `prefix`, given the keys SCAN found there.
pub fn stored_claims(
    connection: &mut redis::Connection,
    prefix: &str,
    keys: &[Vec<u8>],
) -> Vec<StoredClaim> {
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(connection).expect("TIME");
    let now_ms = seconds * 1000 + micros / 1000;
    let mut out = Vec::new();
    for key in keys {
        let rest = &key[prefix.len()..];
        let Some(brace) = rest.iter().position(|b| *b == b'{') else {
            continue;
        };
        if is_group_key(rest) {
            let key_id = rest[..brace - 2].to_vec();
            let fields: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
                .arg(key)
                .query(connection)
                .expect("HGETALL tier-1 hash");
            for (field, value) in fields {
                if field.len() != 16 {
                    continue;
                }
                assert_eq!(value.len(), 28, "a tier-1 field of {} bytes", value.len());
                let expiry = value[24..]
                    .iter()
                    .fold(0i64, |n, b| (n << 8) | i64::from(*b))
                    & 0x7fff_ffff;
                let ttl_ms = (BASE_S + expiry) * 1000 - now_ms;
                if ttl_ms > 0 {
                    let mut claim = value[..24].to_vec();
                    claim.extend_from_slice(&[value[24] & 0x80, 0, 0, 0]);
                    out.push(StoredClaim {
                        key_id: key_id.clone(),
                        value: claim,
                        ttl_ms,
                    });
                }
            }
            continue;
        }
        if !is_claim_key(rest) {
            continue;
        }
        let ttl_ms: i64 = redis::cmd("PTTL").arg(key).query(connection).expect("PTTL");
        let value: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(connection).expect("GET");
        let Some(value) = value else { continue };
        assert_eq!(value.len(), 28, "a tier-1 value of {} bytes", value.len());
        out.push(StoredClaim {
            key_id: rest[..brace].to_vec(),
            value,
            ttl_ms,
        });
    }
    out
}

/// A tier-1 claim key in the keys layout (after its prefix):
/// `<key id>{<tag>}<16 bytes>`, the only tagged key whose tag follows the
/// key id directly.
pub fn is_claim_key(rest: &[u8]) -> bool {
    rest.iter()
        .position(|b| *b == b'{')
        .is_some_and(|brace| !rest[..brace].contains(&b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_hashes_of_claims_are_told_from_identities_and_runs() {
        assert!(is_claim_key(b"ex{05}0123456789abcdef"));
        assert!(!is_claim_key(b"ex:id{05}"));
        assert!(!is_claim_key(b"ex:r{05}x"));
        assert!(!is_claim_key(b"ex:g{05}1f"));
        assert!(is_group_key(b"ex:g{05}1f"));
        assert!(!is_group_key(b"ex:id{05}"));
    }
}
