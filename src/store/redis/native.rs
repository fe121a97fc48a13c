//! Grouped claims sent as native commands, without the claim script
//! (docs/design.md §4.1): for a stream born grouped (no claim of it was
//! ever a key, `grouped.rs`), a new claim is `HSETNX` of its field, then
//! `PEXPIREAT … GT` of its hash to the field's expiry, two commands Redis
//! runs in about half the CPU of the script's call. Only where it is
//! safe and cheap:
//!
//! - The field's expiry is written by this replica, not read from `TIME`
//!   inside a script: the server's time is estimated from the last claim
//!   script's `TIME` plus the time elapsed here since that trip was sent.
//!   That overestimates the server's time (the script read it after the
//!   send), and a second is added for the trip of the claim itself, so
//!   the field lives at least its TTL from its write unless that write
//!   waits in flight more than a second longer than the sample's did.
//! - The hash is moved only later (`GT`), to the second the field's expiry
//!   names, so it never expires before a field in it. A hash that
//!   vanished meanwhile (a flush) comes back without an expiry: kept, not
//!   lost, until the next claim script that writes it sweeps it and sets
//!   one.
//! - Sweeps stay with the script: a claim goes native only into a hash
//!   whose next sweep this replica learnt from a script's answer and which
//!   is over a second away. A hash nobody's script wrote since this
//!   replica started goes through the script once.
//! - `HSETNX` answers 0 where the field exists: live or expired, held or
//!   not, the claim goes to the script after all, in a follow-up trip, which
//!   judges it as any other.

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
/// Hashes whose next sweep is remembered; past this the memory is dropped
/// and learnt again (each hash then goes through the script once more).
const MOST_HASHES: usize = 1 << 20;

/// The server's time as a claim script read it, and when its trip was sent.
#[derive(Clone, Copy, Debug)]
struct ServerTime {
    sent: Instant,
    server_ms: i64,
}

/// What this replica knows of its hashes' sweeps, learnt from the claim
/// scripts' answers.
#[derive(Debug, Default)]
pub(crate) struct Sweeps {
    time: Option<ServerTime>,
    /// A hash's key: its next sweep, seconds since the epoch.
    due: HashMap<Vec<u8>, i64>,
}

impl Sweeps {
    /// What a trip sent at `sent` answered: the server's time and each
    /// written hash's next sweep.
    pub(crate) fn learn(
        &mut self,
        sent: Instant,
        time: Option<(i64, i64)>,
        marks: impl IntoIterator<Item = (Vec<u8>, i64)>,
    ) {
        if let Some((seconds, micros)) = time {
            let server_ms = seconds * 1000 + micros.div_euclid(1000) + 1;
            // The latest sample: the least drift since.
            if self.time.is_none_or(|t| t.sent <= sent) {
                self.time = Some(ServerTime { sent, server_ms });
            }
        }
        for (hash, due) in marks {
            if self.due.len() >= MOST_HASHES {
                self.due.clear();
            }
            self.due.insert(hash, due);
        }
    }

    /// Everything learnt, forgotten: after a failed trip (a new connection,
    /// perhaps a server restarted older) nothing cached is trusted.
    pub(crate) fn forget(&mut self) {
        *self = Sweeps::default();
    }

    /// The expiry (ms since the epoch) a claim into `hash` writes natively
    /// at `now`, or `None` where it goes through the script: no time or
    /// sweep learnt, or the sweep due within a second.
    pub(crate) fn native_expiry(&self, hash: &[u8], ttl_ms: i64, now: Instant) -> Option<i64> {
        let time = self.time?;
        let due_s = *self.due.get(hash)?;
        let elapsed = i64::try_from(now.saturating_duration_since(time.sent).as_millis())
            .unwrap_or(i64::MAX / 4);
        let server_ms = time.server_ms.saturating_add(elapsed);
        (server_ms + MARGIN_MS < due_s.saturating_mul(1000)).then(|| server_ms + ttl_ms + MARGIN_MS)
    }
}

/// The second a field's expiry names, in ms (rounded up as `field_value`).
fn until_ms(expires_at_ms: i64) -> i64 {
    (expires_at_ms.max(0) + 999) / 1000 * 1000
}

/// A claim's two native commands: its field if absent, with its expiry;
/// then its hash's expiry moved to the field's second if that is later.
pub(crate) fn commands(place: &Place, value: &[u8; VALUE_LEN], expires_at_ms: i64) -> [Keyed; 2] {
    let field = field_value(value, expires_at_ms);
    let mut set = redis::cmd("HSETNX");
    set.arg(&place.group).arg(&place.field).arg(&field[..]);
    let mut extend = redis::cmd("PEXPIREAT");
    extend
        .arg(&place.group)
        .arg(until_ms(expires_at_ms))
        .arg("GT");
    [
        Keyed {
            key: place.group.clone(),
            cmd: set,
        },
        Keyed {
            key: place.group.clone(),
            cmd: extend,
        },
    ]
}

/// Where a round found its store lost (flushed, restarted empty), the
/// hashes its native claims wrote may have been created anew, without an
/// expiry, which `GT` does not set: each gets its field's (`NX`), or a
/// stream that stops deciding would keep them for ever.
pub(crate) fn expire_anew(group: &[u8], expires_at_ms: i64) -> Keyed {
    let mut cmd = redis::cmd("PEXPIREAT");
    cmd.arg(group).arg(until_ms(expires_at_ms)).arg("NX");
    Keyed {
        key: group.to_vec(),
        cmd,
    }
}

/// Per native claim, from its two answers: whether its field was written
/// (`false`: it exists, and the claim goes to the script). An error fails
/// the round, sent again whole: a field written by a failed round is met
/// again as this owner's own claim.
pub(crate) fn written(answers: Vec<RedisResult<Value>>) -> Result<Vec<bool>, StoreError> {
    if !answers.len().is_multiple_of(2) {
        return Err(StoreError::Protocol("native claims answered short".into()));
    }
    let mut out = Vec::with_capacity(answers.len() / 2);
    let mut answers = answers.into_iter();
    while let (Some(set), Some(extend)) = (answers.next(), answers.next()) {
        extend.map_err(|e| reply_error("claim's hash expiry", e))?;
        match set.map_err(|e| reply_error("claim", e))? {
            Value::Int(1) => out.push(true),
            Value::Int(0) => out.push(false),
            other => {
                return Err(StoreError::Protocol(format!(
                    "HSETNX of a claim answered {other:?}"
                )))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn learnt(at: Instant, due_s: i64) -> Sweeps {
        let mut sweeps = Sweeps::default();
        // 2026-12-07T20:00:00.000250Z on the server.
        sweeps.learn(at, Some((1_796_673_600, 250)), [(b"h".to_vec(), due_s)]);
        sweeps
    }

    #[test]
    fn a_native_claim_expires_a_margin_past_the_servers_time_plus_its_ttl() {
        let at = Instant::now();
        let sweeps = learnt(at, 1_796_673_600 + 360);
        let later = at + Duration::from_millis(1500);
        // 20:00:00.001 (250 µs rounded up, plus one) + 1.5 s + TTL + margin.
        let expiry = sweeps.native_expiry(b"h", 60_000, later).unwrap();
        assert_eq!(expiry, 1_796_673_600_000 + 1 + 1500 + 60_000 + 1000);
        assert_eq!(sweeps.native_expiry(b"other", 60_000, later), None);
    }

    #[test]
    fn a_hash_whose_sweep_is_due_within_a_second_goes_to_the_script() {
        let at = Instant::now();
        let sweeps = learnt(at, 1_796_673_600 + 10);
        assert!(sweeps
            .native_expiry(b"h", 1000, at + Duration::from_millis(8_900))
            .is_some());
        assert!(sweeps
            .native_expiry(b"h", 1000, at + Duration::from_millis(9_000))
            .is_none());
        assert!(sweeps
            .native_expiry(b"h", 1000, at + Duration::from_secs(60))
            .is_none());
        let mut forgotten = sweeps;
        forgotten.forget();
        assert!(forgotten.native_expiry(b"h", 1000, at).is_none());
    }

    #[test]
    fn an_older_sample_never_replaces_a_newer_one() {
        let at = Instant::now();
        let mut sweeps = learnt(at + Duration::from_secs(5), 1_796_673_600 + 600);
        // A trip sent earlier answering later says less about now.
        sweeps.learn(at, Some((1_796_673_000, 0)), []);
        let expiry = sweeps
            .native_expiry(b"h", 0, at + Duration::from_secs(5))
            .unwrap();
        assert_eq!(expiry, 1_796_673_600_000 + 1 + MARGIN_MS);
    }

    #[test]
    fn the_hash_outlives_the_field_to_the_second() {
        let place = Place {
            key: b"k".to_vec(),
            group: b"g".to_vec(),
            field: vec![1; 16],
        };
        let [set, extend] = commands(&place, &[0; VALUE_LEN], 1_796_673_600_001);
        let packed = String::from_utf8_lossy(&extend.cmd.get_packed_command()).into_owned();
        assert!(packed.contains("1796673601000"), "{packed}");
        assert!(String::from_utf8_lossy(&set.cmd.get_packed_command()).contains("HSETNX"));
        let answers = vec![
            Ok(Value::Int(1)),
            Ok(Value::Int(0)),
            Ok(Value::Int(0)),
            Ok(Value::Int(1)),
        ];
        assert_eq!(written(answers).unwrap(), [true, false]);
        assert!(written(vec![Ok(Value::Int(1))]).is_err());
    }
}
