//! Grouped claims sent as a native command, without the claim script
//! (docs/design.md §4.1): for a stream born grouped (no claim of it was
//! ever a key, `grouped.rs`), a new claim is `HSETNX` of its field, which
//! Redis runs in about a third of the CPU of the script's share of a
//! claim. Only where it is safe:
//!
//! - The field's expiry is written by this replica, not read from `TIME`
//!   inside a script: the server's time is estimated from the last claim
//!   script's `TIME` on the same hash tag (on a cluster, the same node's
//!   clock) plus the time elapsed here since that trip was sent. That
//!   overestimates the server's time (the script read it after the send),
//!   and a second is added for the claim's own trip, so the field lives at
//!   least its TTL from its write unless that write waits in flight more
//!   than a second longer than the sample's did (a round given up at its
//!   timeout whose commands a stalled server runs later).
//! - The hash outlives the field: the claim scripts answer, per hash they
//!   write, its next sweep and the least expiry its last sweep gave it
//!   (kept in its sweep mark; a hash's expiry only ever moves later), and a
//!   claim goes native only where its field expires within that, and the
//!   sweep is over a second away. Sweeps stay with the script, and a hash
//!   no script of this replica wrote yet goes through the script once.
//!   Only a store that went back in time (restored from an older
//!   snapshot, a lagging replica promoted: a store loss, §8) holds a hash
//!   expiring earlier than it said; what was learnt is forgotten at every
//!   failed trip (a new connection), at scripts the server lost (a restart,
//!   a failover) and at every store loss found.
//! - `HSETNX` answers 0 where the field exists: live or expired, held or
//!   not, the claim goes to the script after all, in a follow-up trip,
//!   which judges it as any other.
//! - A hash that vanished (a flush) comes back from `HSETNX` without an
//!   expiry. The round's identity read finds that loss, and the hashes its
//!   native claims wrote get one (`expire_anew`), or a fail-closed stream,
//!   which stops writing them, would keep them for ever.

use std::collections::HashMap;
use std::time::Instant;

use redis::{RedisResult, Value};

use super::conn::{reply_error, Keyed};
use super::grouped::Place;
use super::grouped_script::field_value;
use crate::store::value::VALUE_LEN;
use crate::store::StoreError;

/// Added to the estimated server time, for the claim's own trip.
const MARGIN_MS: i64 = 1000;
/// Hashes whose sweep is remembered; past this the memory is dropped and
/// learnt again (each hash then goes through the script once more).
const MOST_HASHES: usize = 1 << 20;

/// The server's time as a claim script read it, and when its trip was sent.
#[derive(Clone, Copy, Debug)]
struct ServerTime {
    sent: Instant,
    server_ms: i64,
}

/// A hash's sweep as a claim script answered it (seconds since the epoch):
/// the next one, and the least expiry the last one gave the hash (0 where
/// unknown: written by an earlier build).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark {
    pub(crate) due: i64,
    pub(crate) lasts: i64,
}

/// What this replica knows of its hashes' sweeps, learnt from the claim
/// scripts' answers.
#[derive(Debug, Default)]
pub(crate) struct Sweeps {
    /// By hash tag: on a cluster each node's own clock, as `TIME` inside a
    /// script would read it.
    times: Vec<Option<ServerTime>>,
    /// By `key`: the hash's name would cost a cache miss a lookup.
    marks: HashMap<u64, Mark>,
}

impl Sweeps {
    /// A hash's key here: its stream's index over its `Place::slot` (its
    /// tag over its bucket).
    pub(crate) fn key(stream: usize, slot: u32) -> u64 {
        (stream as u64) << 32 | u64::from(slot)
    }

    fn tag(key: u64) -> usize {
        ((key >> 24) & 0xff) as usize
    }

    /// What a trip sent at `sent` answered: the server's time, by the hash
    /// tag whose script read it, and each written hash's sweep.
    pub(crate) fn learn(
        &mut self,
        sent: Instant,
        times: impl IntoIterator<Item = (u8, (i64, i64))>,
        marks: impl IntoIterator<Item = (u64, Mark)>,
    ) {
        for (tag, (seconds, micros)) in times {
            let server_ms = seconds * 1000 + micros.div_euclid(1000) + 1;
            let tag = usize::from(tag);
            if self.times.len() <= tag {
                self.times.resize(tag + 1, None);
            }
            // The latest sample: the least drift since.
            if self.times[tag].is_none_or(|t| t.sent <= sent) {
                self.times[tag] = Some(ServerTime { sent, server_ms });
            }
        }
        for (hash, mark) in marks {
            if self.marks.len() >= MOST_HASHES {
                self.marks.clear();
            }
            self.marks.insert(hash, mark);
        }
    }

    /// Everything learnt, forgotten: after a failed trip (a new connection,
    /// perhaps a server restarted older) or a store loss.
    pub(crate) fn forget(&mut self) {
        *self = Sweeps::default();
    }

    /// The expiry (ms since the epoch) a claim into `hash` writes natively
    /// at `now`, or `None` where it goes through the script: no time or
    /// sweep learnt, the sweep due within a second, or the field would
    /// outlive what the hash is known to.
    pub(crate) fn native_expiry(&self, hash: u64, ttl_ms: i64, now: Instant) -> Option<i64> {
        let time = (*self.times.get(Self::tag(hash))?)?;
        let mark = self.marks.get(&hash)?;
        let elapsed = i64::try_from(now.saturating_duration_since(time.sent).as_millis())
            .unwrap_or(i64::MAX / 4);
        let server_ms = time.server_ms.saturating_add(elapsed);
        let expires_at = server_ms.saturating_add(ttl_ms + MARGIN_MS);
        let sweep_far = server_ms + MARGIN_MS < mark.due.saturating_mul(1000);
        let covered = seconds_up(expires_at) <= mark.lasts;
        (sweep_far && covered).then_some(expires_at)
    }
}

/// The second a field's expiry names (rounded up as `field_value`).
fn seconds_up(expires_at_ms: i64) -> i64 {
    (expires_at_ms.max(0) + 999) / 1000
}

/// A claim's native command: its field, with its expiry, if absent.
pub(crate) fn command(place: &Place, value: &[u8; VALUE_LEN], expires_at_ms: i64) -> Keyed {
    let field = field_value(value, expires_at_ms);
    let mut set = redis::cmd("HSETNX");
    set.arg(&place.group).arg(&place.field).arg(&field[..]);
    Keyed {
        key: place.group.clone(),
        cmd: set,
    }
}

/// After a store loss: an expiry for a hash a native claim wrote, where it
/// has none (`NX`), past its fields' (a TTL and the margin from now, and
/// a second more).
pub(crate) fn expire_anew(group: &[u8], ttl_ms: i64) -> Keyed {
    let mut cmd = redis::cmd("PEXPIRE");
    cmd.arg(group).arg(ttl_ms + 2 * MARGIN_MS).arg("NX");
    Keyed {
        key: group.to_vec(),
        cmd,
    }
}

/// Per native claim, from its answer: whether its field was written
/// (`false`: it exists, and the claim goes to the script). An error fails
/// the round, sent again whole: a field written by a failed round is met
/// again as this owner's own claim.
pub(crate) fn written(answers: Vec<RedisResult<Value>>) -> Result<Vec<bool>, StoreError> {
    answers
        .into_iter()
        .map(
            |answer| match answer.map_err(|e| reply_error("claim", e))? {
                Value::Int(1) => Ok(true),
                Value::Int(0) => Ok(false),
                other => Err(StoreError::Protocol(format!(
                    "HSETNX of a claim answered {other:?}"
                ))),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// 2026-12-07T20:00:00.000250Z on the server.
    const NOW_S: i64 = 1_796_673_600;
    const H: u64 = 7 << 32 | 3 << 24 | 5;

    fn learnt(at: Instant, due: i64, lasts: i64) -> Sweeps {
        let mut sweeps = Sweeps::default();
        sweeps.learn(at, [(3, (NOW_S, 250))], [(H, Mark { due, lasts })]);
        sweeps
    }

    #[test]
    fn a_native_claim_expires_a_margin_past_the_servers_time_plus_its_ttl() {
        let at = Instant::now();
        let sweeps = learnt(at, NOW_S + 360, NOW_S + 360 + 3600);
        let later = at + Duration::from_millis(1500);
        // 20:00:00.001 (250 µs rounded up, plus one) + 1.5 s + TTL + margin.
        let expiry = sweeps.native_expiry(H, 60_000, later).unwrap();
        assert_eq!(expiry, NOW_S * 1000 + 1 + 1500 + 60_000 + 1000);
        assert_eq!(sweeps.native_expiry(H + 1, 60_000, later), None);
    }

    #[test]
    fn a_hash_whose_sweep_is_near_or_whose_expiry_falls_short_goes_to_the_script() {
        let at = Instant::now();
        let sweeps = learnt(at, NOW_S + 10, NOW_S + 20);
        let ttl = 10_000;
        assert!(sweeps
            .native_expiry(H, ttl, at + Duration::from_millis(7_900))
            .is_some());
        // Due within a second.
        assert!(sweeps
            .native_expiry(H, ttl, at + Duration::from_millis(9_000))
            .is_none());
        // A longer TTL than the sweeping replica's: the hash may not last.
        assert!(sweeps.native_expiry(H, 2 * ttl, at).is_none());
        // A mark of an earlier build says nothing of the hash's expiry.
        assert!(learnt(at, NOW_S + 10, 0)
            .native_expiry(H, ttl, at)
            .is_none());
        let mut forgotten = sweeps;
        forgotten.forget();
        assert!(forgotten.native_expiry(H, ttl, at).is_none());
    }

    #[test]
    fn an_older_sample_never_replaces_a_newer_one() {
        let at = Instant::now();
        let mut sweeps = learnt(at + Duration::from_secs(5), NOW_S + 600, NOW_S + 700);
        // A trip sent earlier answering later says less about now.
        sweeps.learn(at, [(3, (NOW_S - 600, 0))], []);
        let expiry = sweeps
            .native_expiry(H, 0, at + Duration::from_secs(5))
            .unwrap();
        assert_eq!(expiry, NOW_S * 1000 + 1 + MARGIN_MS);
    }

    #[test]
    fn a_native_claim_is_one_hsetnx_answered_one_or_zero() {
        let place = Place {
            key: b"k".to_vec(),
            group: b"g".to_vec(),
            field: vec![1; 16],
            slot: 0,
        };
        let set = command(&place, &[0; VALUE_LEN], NOW_S * 1000 + 1);
        let packed = set.cmd.get_packed_command();
        assert!(String::from_utf8_lossy(&packed).contains("HSETNX"));
        // The field's expiry, rounded up to the second, since 2020.
        let word = ((NOW_S + 1 - 1_577_836_800) as u32).to_be_bytes();
        assert!(packed.windows(4).any(|w| w == word), "{packed:?}");
        let answers = vec![Ok(Value::Int(1)), Ok(Value::Int(0))];
        assert_eq!(written(answers).unwrap(), [true, false]);
        assert!(written(vec![Ok(Value::Nil)]).is_err());
    }
}
