//! The tier-1 value: what a claim records about its holder.
//!
//! Paid for once per key, so it is fixed-size binary, 28 bytes: with the
//! Redis object header it fits a 48-byte allocation (docs/design.md §4.1).
//!
//! ```text
//! [0..3]   topic tag (24 bits)
//! [3..6]   partition (24 bits)
//! [6..12]  offset (48 bits)
//! [12..16] owner token
//! [16..24] payload digest
//! [24..28] bit 31: done flag; bits 0-30: claim time, seconds since 2020
//! ```
//!
//! Holder and token lead, so the Redis compare-and-set scripts compare the
//! first 16 bytes and set the done flag in byte 25 without decoding the
//! rest. Integers are big endian.

use crate::clock::Millis;
use crate::coordinates::{Coordinates, TopicTag};
use crate::fingerprint::PayloadDigest;

use super::{OwnerToken, StoreError};

pub(crate) const VALUE_LEN: usize = 28;
/// Bytes of holder and token, the compare-and-set operand.
pub(crate) const OWNER_LEN: usize = 16;
/// 1-based position of the byte carrying the done flag (its high bit), as
/// Lua's `string.byte` wants it.
pub(crate) const LUA_DONE_BYTE: usize = 25;
/// Claim times count from 2020-01-01T00:00:00Z.
const TIME_BASE_S: i64 = 1_577_836_800;
const MAX_24: i64 = (1 << 24) - 1;
const MAX_48: i64 = (1 << 48) - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClaimValue {
    pub(crate) holder: Coordinates,
    pub(crate) token: OwnerToken,
    pub(crate) digest: PayloadDigest,
    /// When the claim was written or re-stamped (whole seconds): how long a
    /// holder has kept others waiting.
    pub(crate) claimed_at: Millis,
    /// Set at publish for a delivered record above its partition's
    /// watermark (docs/design.md §4.3).
    pub(crate) done: bool,
}

impl ClaimValue {
    pub(crate) fn pending(
        holder: Coordinates,
        token: OwnerToken,
        digest: PayloadDigest,
        at: Millis,
    ) -> ClaimValue {
        ClaimValue {
            holder,
            token,
            digest,
            claimed_at: at,
            done: false,
        }
    }

    /// A claim `idemgate rebuild` writes back: settled (done), with no
    /// owner's token (no replica owns it; no compare and set needs one).
    pub(crate) fn restored(restored: &super::Restored) -> ClaimValue {
        ClaimValue {
            holder: restored.holder,
            token: OwnerToken(0),
            digest: restored.digest,
            claimed_at: restored.at,
            done: true,
        }
    }

    pub(crate) fn encode(&self) -> Result<[u8; VALUE_LEN], StoreError> {
        let mut out = [0u8; VALUE_LEN];
        out[..OWNER_LEN].copy_from_slice(&encode_owner(&self.holder, self.token)?);
        out[16..24].copy_from_slice(&self.digest.0);
        let seconds =
            (self.claimed_at.div_euclid(1000) - TIME_BASE_S).clamp(0, i64::from(i32::MAX));
        let mut word = seconds as u32;
        if self.done {
            word |= 1 << 31;
        }
        out[24..28].copy_from_slice(&word.to_be_bytes());
        Ok(out)
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<ClaimValue, StoreError> {
        let bytes: &[u8; VALUE_LEN] = bytes
            .try_into()
            .map_err(|_| StoreError::Protocol(format!("tier-1 value of {} bytes", bytes.len())))?;
        let int = |range: std::ops::Range<usize>| {
            bytes[range]
                .iter()
                .fold(0i64, |n, b| (n << 8) | i64::from(*b))
        };
        let word = int(24..28);
        Ok(ClaimValue {
            holder: Coordinates {
                topic: TopicTag(int(0..3) as u32),
                partition: int(3..6) as i32,
                offset: int(6..12),
            },
            token: OwnerToken(int(12..16) as u32),
            digest: PayloadDigest(bytes[16..24].try_into().unwrap_or_default()),
            claimed_at: ((word & 0x7fff_ffff) + TIME_BASE_S) * 1000,
            done: word & (1 << 31) != 0,
        })
    }
}

/// Holder and token as the value's first 16 bytes: what compare-and-set
/// compares. Refuses coordinates that do not fit (a partition past 2^24 or
/// an offset past 2^48, neither of which Kafka reaches in practice).
pub(crate) fn encode_owner(
    holder: &Coordinates,
    token: OwnerToken,
) -> Result<[u8; OWNER_LEN], StoreError> {
    let fits = |n: i64, max: i64| (0..=max).contains(&n);
    if !fits(i64::from(holder.topic.0), MAX_24)
        || !fits(i64::from(holder.partition), MAX_24)
        || !fits(holder.offset, MAX_48)
    {
        return Err(StoreError::Protocol(format!(
            "coordinates {holder} do not fit a tier-1 value"
        )));
    }
    let mut out = [0u8; OWNER_LEN];
    out[0..3].copy_from_slice(&holder.topic.0.to_be_bytes()[1..]);
    out[3..6].copy_from_slice(&(holder.partition as u32).to_be_bytes()[1..]);
    out[6..12].copy_from_slice(&(holder.offset as u64).to_be_bytes()[2..]);
    out[12..16].copy_from_slice(&token.0.to_be_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(done: bool) -> ClaimValue {
        ClaimValue {
            holder: Coordinates {
                topic: TopicTag(0x00ad_beef),
                partition: 70_000,
                offset: 1 << 40,
            },
            token: OwnerToken::new(0x12_3456, 7),
            digest: PayloadDigest([9; 8]),
            claimed_at: 1_800_000_000_000,
            done,
        }
    }

    #[test]
    fn value_round_trips_in_28_bytes_with_the_owner_where_the_scripts_look() {
        for done in [false, true] {
            let bytes = value(done).encode().unwrap();
            assert_eq!(bytes.len(), 28);
            assert_eq!(ClaimValue::decode(&bytes).unwrap(), value(done));
            let owner = encode_owner(&value(done).holder, value(done).token).unwrap();
            assert_eq!(&bytes[..OWNER_LEN], &owner);
            assert_eq!(bytes[LUA_DONE_BYTE - 1] & 0x80 != 0, done);
        }
    }

    #[test]
    fn coordinates_that_do_not_fit_are_refused() {
        let mut v = value(false);
        v.holder.offset = 1 << 48;
        assert!(v.encode().is_err());
        v.holder.offset = 0;
        v.holder.partition = -1;
        assert!(v.encode().is_err());
    }

    #[test]
    fn a_value_of_the_wrong_size_is_a_protocol_error() {
        assert!(ClaimValue::decode(b"P").is_err());
        assert!(ClaimValue::decode(&[0u8; 33]).is_err());
    }
}
