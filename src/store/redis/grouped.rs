//! Tier 1's two layouts on Redis and the record that fixes a stream's
//! (docs/design.md §4.1).
//!
//! `keys`: one key per claim, `<prefix><key_id>{<tag>}<hash[0..16]>`
//! (`tier1.rs`). `grouped`: a stream's claims as fields of small hashes
//! Redis keeps as compact listpacks, one hash per hash tag and bucket,
//! `<prefix><key_id>:g{<tag>}<bucket>`, the field the same 16 hash bytes,
//! the value 28 bytes: the claim value with its expiry where a key's value
//! keeps the claim time (`grouped_script.rs`). A claim's key and its field share the `{tag}`, hence a slot, so
//! one script reads both atomically: this version always does, whatever it
//! writes, so a replica writing keys and one writing fields never both win
//! one event. A replica of an earlier version reads keys alone: a stream
//! moves to `grouped` only once none runs (two phases, §4.1).
//!
//! The bucket count is fixed for a stream once chosen (a lookup in another
//! bucket than the write's would be a double): sized from `peak_rate` x
//! `tier1_ttl` so that a hash's live fields stay well under
//! `hash-max-listpack-entries` (128 by default, fixed on managed services),
//! rounded up to one of four steps an octave (4, 5, 6 or 7 times a power
//! of two: hashes at least four fifths as full as sized) so that small
//! changes to either keep it,
//! and recorded beside the stream's identity with the written layout,
//! `<prefix><key_id>:layout` = `grouped 4` (no expiry: it must outlive
//! every claim).

use std::str::FromStr;

use redis::Value;
use serde::Deserialize;

use super::conn::{reply_error, Conn, Keyed};
use super::identity;
use super::tier1;
use super::watermarks;
use crate::fingerprint::SourceHash;
use crate::store::{StoreError, StreamSpec};

/// What a replica writes its new claims as. Reads always cover both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier1Layout {
    /// One key per claim (`SET NX PX GET`), what every earlier version
    /// writes and reads.
    Keys,
    /// Fields of small hashes per hash tag and bucket.
    Grouped,
}

impl Tier1Layout {
    fn word(self) -> &'static str {
        match self {
            Tier1Layout::Keys => "keys",
            Tier1Layout::Grouped => "grouped",
        }
    }

    /// The mode argument the scripts take.
    pub(crate) fn script_arg(self) -> &'static [u8] {
        match self {
            Tier1Layout::Keys => b"k",
            Tier1Layout::Grouped => b"g",
        }
    }
}

impl FromStr for Tier1Layout {
    type Err = String;
    fn from_str(word: &str) -> Result<Tier1Layout, String> {
        match word {
            "keys" => Ok(Tier1Layout::Keys),
            "grouped" => Ok(Tier1Layout::Grouped),
            other => Err(format!(
                "tier-1 layout {other:?} is neither keys nor grouped"
            )),
        }
    }
}

/// A stream's tier 1 as this replica runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StreamLayout {
    pub(crate) write: Tier1Layout,
    /// Buckets per hash tag (`buckets`).
    pub(crate) buckets: u32,
    /// Born grouped: no replica ever wrote the stream a key claim (it was
    /// fresh when its record was first written as `grouped`), and none may
    /// (a replica asked to write keys is refused). Its claims are only
    /// fields, so a new one needs no look at its key: it may go as native
    /// commands (`native.rs`).
    pub(crate) fields_only: bool,
}

/// Live fields a hash is sized for: with the expired fields that linger
/// until a sweep (a tenth or so) and bursts over `peak_rate`, still under
/// 128 entries.
pub(crate) const FIELDS_PER_HASH: u64 = 80;
/// The rate a stream without a `peak_rate` is sized for (events/s).
pub(crate) const DEFAULT_RATE: u64 = 100;
/// At most 2^24 buckets per tag (a billion hashes).
const MAX_BUCKETS: u64 = 1 << 24;

/// Buckets per tag for a stream: its live claims (`peak_rate` x
/// `tier1_ttl`) over 64 tags and `FIELDS_PER_HASH`, rounded up a step.
pub(crate) fn buckets(spec: &StreamSpec) -> u32 {
    let rate = spec.peak_rate.unwrap_or(DEFAULT_RATE).max(1);
    let live = u128::from(rate) * spec.tier1_ttl.as_millis() / 1000;
    let per_tag = live.div_ceil(u128::from(identity::TAGS));
    let wanted = per_tag.div_ceil(u128::from(FIELDS_PER_HASH)).max(1);
    let wanted = u64::try_from(wanted)
        .unwrap_or(MAX_BUCKETS)
        .min(MAX_BUCKETS);
    step_up(wanted) as u32
}

/// The least of 1, 2, 3 and 4, 5, 6, 7 times a power of two that is `n` or
/// more.
fn step_up(n: u64) -> u64 {
    if n <= 4 {
        return n.max(1);
    }
    let octave = (n - 1).ilog2() - 2;
    (n - 1) / (1 << octave) * (1 << octave) + (1 << octave)
}

/// Which bucket of its tag a hash falls in: bytes the key does not use.
pub(crate) fn bucket(hash: &SourceHash, buckets: u32) -> u32 {
    let word = u32::from_be_bytes([hash.0[17], hash.0[18], hash.0[19], hash.0[20]]);
    word % buckets.max(1)
}

/// A claim's two places: its key and its field (in the hash `group`,
/// which is `slot` among its stream's: its tag over its bucket).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) key: Vec<u8>,
    pub(crate) group: Vec<u8>,
    pub(crate) field: Vec<u8>,
    pub(crate) slot: u32,
}

impl Place {
    pub(crate) fn of(prefix: &str, key_id: &str, buckets: u32, hash: &SourceHash) -> Place {
        let (tag, bucket) = (tier1::tag(hash), bucket(hash, buckets));
        Place {
            key: tier1::key(prefix, key_id, hash),
            group: group_key(prefix, key_id, tag, bucket),
            field: hash.0[..16].to_vec(),
            // Buckets stay under 2^24 (`MAX_BUCKETS`), tags under 64.
            slot: u32::from(tag) << 24 | bucket,
        }
    }
}

/// `<prefix><key_id>:g{<tag>}<bucket in hex>`.
pub(crate) fn group_key(prefix: &str, key_id: &str, tag: u8, bucket: u32) -> Vec<u8> {
    format!("{prefix}{key_id}:g{{{tag:02x}}}{bucket:x}").into_bytes()
}

/// Where a stream's layout is recorded.
pub(crate) fn record_key(prefix: &str, key_id: &str) -> Vec<u8> {
    format!("{prefix}{key_id}:layout").into_bytes()
}

/// `grouped 832`, or `grouped 832 only` for a stream born grouped.
fn format_record(layout: StreamLayout) -> String {
    let only = if layout.fields_only { " only" } else { "" };
    format!("{} {}{only}", layout.write.word(), layout.buckets)
}

fn parse_record(stored: &[u8]) -> Result<StreamLayout, StoreError> {
    let text = String::from_utf8_lossy(stored);
    let bad = || StoreError::Protocol(format!("tier-1 layout record {text:?}"));
    let mut words = text.split(' ');
    let write: Tier1Layout = words.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let buckets = words.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let fields_only = match words.next() {
        None => false,
        Some("only") if write == Tier1Layout::Grouped => true,
        Some(_) => return Err(bad()),
    };
    if words.next().is_some() {
        return Err(bad());
    }
    Ok(StreamLayout {
        write,
        buckets,
        fields_only,
    })
}

/// What a start found of a stream in the store, beside its record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    /// No store identity: no replica of an earlier version claims in it.
    pub(crate) fresh: bool,
    /// No watermarks either: nothing was ever claimed in it, in either
    /// layout (a version before store identities left watermarks, and
    /// key claims, but no identity).
    pub(crate) untouched: bool,
}

/// What a start decides from the record, what it found of the stream and
/// the config: pure, so every case is a test.
pub(crate) fn decide(
    spec: &StreamSpec,
    recorded: Option<StreamLayout>,
    seen: Seen,
    asked: Option<Tier1Layout>,
) -> Result<StreamLayout, StoreError> {
    let buckets = buckets(spec);
    match recorded {
        Some(recorded) if recorded.buckets != buckets => Err(StoreError::Refused(format!(
            "stream {:?} keeps its grouped tier-1 claims in {} buckets per tag, but its \
             peak_rate and tier1_ttl now give {buckets}: a claim would be looked for in the \
             wrong bucket; set them back to values that give {} (peak_rate x tier1_ttl / \
             {} / {FIELDS_PER_HASH}, rounded up to 4, 5, 6 or 7 times a power of two), or stop every replica \
             of the stream, wait tier1_ttl and delete the key {}",
            spec.name,
            recorded.buckets,
            recorded.buckets,
            identity::TAGS,
            String::from_utf8_lossy(&record_key("<key_prefix>", &spec.key_id)),
        ))),
        Some(recorded) if recorded.fields_only && asked == Some(Tier1Layout::Keys) => {
            Err(StoreError::Refused(format!(
                "stream {:?} was born grouped: its rounds look for a new claim in its field \
                 alone, so a replica writing keys could win an event another already won; \
                 unset [store] tier1_layout or set it to \"grouped\"",
                spec.name
            )))
        }
        Some(recorded) => Ok(StreamLayout {
            write: asked.unwrap_or(recorded.write),
            buckets,
            fields_only: recorded.fields_only,
        }),
        None => {
            let write = asked.unwrap_or(if seen.fresh {
                Tier1Layout::Grouped
            } else {
                Tier1Layout::Keys
            });
            Ok(StreamLayout {
                write,
                buckets,
                fields_only: seen.fresh && seen.untouched && write == Tier1Layout::Grouped,
            })
        }
    }
}

/// Reads each stream's record, identity and watermarks, decides its layout
/// and writes the record where it is new or changed. A stream without an
/// identity is fresh: no replica of an earlier version claims in it, so it
/// writes grouped unless the config says otherwise; without watermarks too,
/// it is recorded born grouped (`only`). Two replicas starting together
/// agree: the first record written wins (`SET NX GET`).
pub(crate) async fn settle(
    conn: &Conn,
    prefix: &str,
    streams: &[StreamSpec],
    asked: Option<Tier1Layout>,
) -> Result<Vec<StreamLayout>, StoreError> {
    let mut out = Vec::with_capacity(streams.len());
    for spec in streams {
        let key = record_key(prefix, &spec.key_id);
        let mut get = redis::cmd("GET");
        get.arg(&key);
        let mut commands = vec![Keyed {
            key: key.clone(),
            cmd: get,
        }];
        let identity = identity::find(prefix, spec, conn.is_cluster());
        let places = identity.len();
        commands.extend(identity);
        commands.push(watermarks::read(prefix, spec));
        let mut answers = conn.run(commands).await?.into_iter();
        let recorded = match answers.next() {
            Some(answer) => stored(answer)?.map(|v| parse_record(&v)).transpose()?,
            None => return Err(StoreError::Protocol("layout record unanswered".into())),
        };
        let fresh = identity::found(answers.by_ref().take(places).collect())?
            .places
            .iter()
            .all(Option::is_none);
        let untouched = match answers.next() {
            Some(Ok(Value::Array(fields))) => fields.is_empty(),
            Some(Ok(Value::Map(fields))) => fields.is_empty(),
            Some(Ok(Value::Nil)) => true,
            Some(Err(error)) => return Err(reply_error("watermarks at start", error)),
            other => {
                return Err(StoreError::Protocol(format!(
                    "watermarks at start answered {other:?}"
                )))
            }
        };
        let seen = Seen { fresh, untouched };
        let mut layout = decide(spec, recorded, seen, asked)?;
        if recorded != Some(layout) {
            let mut set = redis::cmd("SET");
            set.arg(&key).arg(format_record(layout));
            if recorded.is_none() {
                set.arg("NX").arg("GET");
            }
            let answer = conn.run(vec![Keyed { key, cmd: set }]).await?;
            let before = match answer.into_iter().next() {
                Some(answer) => stored(answer)?,
                None => None,
            };
            // Another replica recorded first: its choice holds.
            if let (None, Some(before)) = (recorded, before) {
                layout = decide(spec, Some(parse_record(&before)?), seen, asked)?;
            }
        }
        out.push(layout);
    }
    Ok(out)
}

fn stored(answer: redis::RedisResult<Value>) -> Result<Option<Vec<u8>>, StoreError> {
    match answer.map_err(|e| reply_error("tier-1 layout record", e))? {
        Value::Nil | Value::Okay => Ok(None),
        Value::BulkString(bytes) => Ok(Some(bytes)),
        Value::SimpleString(text) => Ok(Some(text.into_bytes())),
        other => Err(StoreError::Protocol(format!(
            "tier-1 layout record answered {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Mode;
    use std::time::Duration;

    fn spec(rate: Option<u64>, ttl_s: u64) -> StreamSpec {
        StreamSpec {
            peak_rate: rate,
            ..StreamSpec::new("s", Mode::Exact, Duration::from_secs(ttl_s), None)
        }
    }

    #[test]
    fn buckets_keep_a_hash_under_eighty_live_fields_in_four_steps_an_octave() {
        // 10,000/s for an hour: 36 M claims, 562,500 per tag, 7,032 hashes.
        assert_eq!(buckets(&spec(Some(10_000), 3600)), 7 * 1024);
        assert_eq!(buckets(&spec(Some(1), 60)), 1);
        // Without a peak rate: 100/s, 5,625 per tag, 70.3 hashes.
        assert_eq!(buckets(&spec(None, 3600)), 80);
        let steps: Vec<u64> = (1..=17).map(step_up).collect();
        assert_eq!(
            steps,
            [1, 2, 3, 4, 5, 6, 7, 8, 10, 10, 12, 12, 14, 14, 16, 16, 20]
        );
        for n in 5..5000 {
            let step = step_up(n);
            assert!(step >= n && step * 4 < n * 5 + 4, "{n} -> {step}");
        }
        for b in [1, 2, 8192] {
            let hash = SourceHash([0xff; 32]);
            assert!(bucket(&hash, b) < b);
        }
    }

    const NEW: Seen = Seen {
        fresh: true,
        untouched: true,
    };
    const OLD: Seen = Seen {
        fresh: false,
        untouched: false,
    };

    #[test]
    fn a_fresh_stream_writes_grouped_an_old_one_keys_until_switched() {
        let s = spec(Some(100), 3600);
        assert_eq!(
            decide(&s, None, NEW, None).unwrap().write,
            Tier1Layout::Grouped
        );
        assert_eq!(
            decide(&s, None, OLD, None).unwrap().write,
            Tier1Layout::Keys
        );
        let keys = StreamLayout {
            write: Tier1Layout::Keys,
            buckets: buckets(&s),
            fields_only: false,
        };
        assert_eq!(decide(&s, Some(keys), NEW, None).unwrap(), keys);
        let switched = decide(&s, Some(keys), OLD, Some(Tier1Layout::Grouped)).unwrap();
        assert_eq!(switched.write, Tier1Layout::Grouped);
        // A switched stream may still hold key claims; a fresh one none.
        assert!(!switched.fields_only);
        assert!(decide(&s, None, NEW, None).unwrap().fields_only);
        assert!(
            !decide(&s, None, NEW, Some(Tier1Layout::Keys))
                .unwrap()
                .fields_only
        );
        // No identity but watermarks: a store of a version before store
        // identities, whose key claims may still live.
        let before_identities = Seen {
            fresh: true,
            untouched: false,
        };
        let layout = decide(&s, None, before_identities, None).unwrap();
        assert_eq!(layout.write, Tier1Layout::Grouped);
        assert!(!layout.fields_only);
    }

    #[test]
    fn a_stream_born_grouped_stays_fields_only_and_refuses_a_keys_writer() {
        let s = spec(Some(100), 3600);
        let born = decide(&s, None, NEW, None).unwrap();
        assert_eq!(decide(&s, Some(born), OLD, None).unwrap(), born);
        assert_eq!(
            decide(&s, Some(born), OLD, Some(Tier1Layout::Grouped)).unwrap(),
            born
        );
        let error = decide(&s, Some(born), OLD, Some(Tier1Layout::Keys)).unwrap_err();
        assert!(error.to_string().contains("born grouped"), "{error}");
    }

    #[test]
    fn a_start_whose_bucket_count_differs_from_the_record_is_refused() {
        let recorded = StreamLayout {
            write: Tier1Layout::Grouped,
            buckets: 128,
            fields_only: true,
        };
        let error = decide(&spec(Some(1000), 3600), Some(recorded), OLD, None).unwrap_err();
        assert!(error.to_string().contains("128 buckets"), "{error}");
    }

    #[test]
    fn a_record_round_trips_and_nonsense_is_refused() {
        for fields_only in [false, true] {
            let layout = StreamLayout {
                write: Tier1Layout::Grouped,
                buckets: 64,
                fields_only,
            };
            assert_eq!(
                parse_record(format_record(layout).as_bytes()).unwrap(),
                layout
            );
        }
        assert_eq!(
            format_record(decide(&spec(Some(1), 60), None, NEW, None).unwrap()),
            "grouped 1 only"
        );
        assert!(parse_record(b"tables 4").is_err());
        assert!(parse_record(b"keys 4 only").is_err());
        assert!(parse_record(b"grouped 4 only more").is_err());
        assert!("grouped".parse::<Tier1Layout>().is_ok());
        assert!("hashes".parse::<Tier1Layout>().is_err());
    }

    #[test]
    fn a_claims_key_and_field_share_its_hash_tag() {
        let mut hash = SourceHash([7; 32]);
        hash.0[16] = 0xc5;
        let place = Place::of("ig:", "Ab", 4, &hash);
        assert!(place.key.starts_with(b"ig:Ab{05}"));
        assert!(place.group.starts_with(b"ig:Ab:g{05}"));
        assert_eq!(place.field, vec![7; 16]);
    }
}
