//! The tier-1 value: what a claim records about its holder.
//!
//! Paid for once per key, so it is fixed-size binary, 33 bytes:
//!
//! ```text
//! [0]      state: b'P' pending, b'D' done
//! [1..17]  holder: topic tag u32, partition i32, offset i64 (big endian)
//! [17..25] payload digest
//! [25..33] time of the last transition (claim or finalize), unix ms
//! ```
//!
//! The holder sits at a fixed range so the Redis compare-and-set scripts
//! can compare it with `string.sub` without decoding anything else.

use crate::fingerprint::PayloadDigest;

use super::{ClaimState, Coordinates, Millis, StoreError, TopicTag};

pub(crate) const VALUE_LEN: usize = 33;
/// 1-based inclusive range of the holder, as Lua's `string.sub` wants it.
pub(crate) const LUA_HOLDER_RANGE: (usize, usize) = (2, 17);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClaimValue {
    pub(crate) state: ClaimState,
    pub(crate) holder: Coordinates,
    pub(crate) digest: PayloadDigest,
    /// When the claim was taken (pending) or finalized (done): its expiry is
    /// judged from here, so TTLs are fixed from the write, never extended by
    /// a read.
    pub(crate) at: Millis,
}

impl ClaimValue {
    pub(crate) fn encode(&self) -> [u8; VALUE_LEN] {
        let mut out = [0u8; VALUE_LEN];
        out[0] = match self.state {
            ClaimState::Pending => b'P',
            ClaimState::Done => b'D',
        };
        out[1..17].copy_from_slice(&encode_holder(&self.holder));
        out[17..25].copy_from_slice(&self.digest.0);
        out[25..33].copy_from_slice(&self.at.to_be_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<ClaimValue, StoreError> {
        let bad = || StoreError::Protocol(format!("tier-1 value of {} bytes", bytes.len()));
        if bytes.len() != VALUE_LEN {
            return Err(bad());
        }
        let state = match bytes[0] {
            b'P' => ClaimState::Pending,
            b'D' => ClaimState::Done,
            _ => return Err(bad()),
        };
        let array = |range: std::ops::Range<usize>| -> Result<[u8; 8], StoreError> {
            bytes
                .get(range)
                .and_then(|s| <[u8; 8]>::try_from(s).ok())
                .ok_or_else(bad)
        };
        let tp = array(1..9)?;
        let holder = Coordinates {
            topic: TopicTag(u32::from_be_bytes([tp[0], tp[1], tp[2], tp[3]])),
            partition: i32::from_be_bytes([tp[4], tp[5], tp[6], tp[7]]),
            offset: i64::from_be_bytes(array(9..17)?),
        };
        Ok(ClaimValue {
            state,
            holder,
            digest: PayloadDigest(array(17..25)?),
            at: i64::from_be_bytes(array(25..33)?),
        })
    }
}

pub(crate) fn encode_holder(holder: &Coordinates) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[0..4].copy_from_slice(&holder.topic.0.to_be_bytes());
    out[4..8].copy_from_slice(&holder.partition.to_be_bytes());
    out[8..16].copy_from_slice(&holder.offset.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_round_trips_and_keeps_the_holder_where_the_scripts_look() {
        let value = ClaimValue {
            state: ClaimState::Done,
            holder: Coordinates {
                topic: TopicTag(0xdead_beef),
                partition: 7,
                offset: 1 << 40,
            },
            digest: PayloadDigest([9; 8]),
            at: 1_700_000_000_123,
        };
        let bytes = value.encode();
        assert_eq!(ClaimValue::decode(&bytes).unwrap(), value);
        let (from, to) = LUA_HOLDER_RANGE;
        assert_eq!(&bytes[from - 1..to], &encode_holder(&value.holder));
    }

    #[test]
    fn a_value_of_the_wrong_size_is_a_protocol_error() {
        assert!(ClaimValue::decode(b"P").is_err());
        let mut bytes = [0u8; VALUE_LEN];
        bytes[0] = b'X';
        assert!(ClaimValue::decode(&bytes).is_err());
    }
}
