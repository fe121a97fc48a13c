//! Store identities on Redis (docs/design.md §8.2): one key per stream and
//! hash tag, `<prefix><key_id>:id{<tag>}`, holding the identity as 32 hex
//! digits. The tag puts each key in the slot of that tag's claims, so a
//! cluster node holding claims holds the identity of every tag it serves,
//! and a node that comes back empty lacks it. These keys carry no expiry:
//! they must outlive every claim, or an idle stream would look lost (64
//! keys of about 40 bytes per stream).
//!
//! A round reads the identity of the tags its claims touch, in the same
//! pipeline and before the claims (one slot, one order on a cluster): on
//! standalone Redis one `MGET` per stream, on a cluster one `GET` per tag,
//! each in the pipeline its tag's claims go in anyway. No round trip is
//! added.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use redis::{RedisResult, Value};

use super::conn::{reply_error, Keyed};
use super::{marks, tier1, RedisStore};
use crate::store::marks::Floors;
use crate::store::{
    check_identity, lost_among, spec, Check, Claim, IdentityFound, StoreError, StoreIdentity,
    StreamId, StreamLost, StreamSpec,
};

/// Hash tags a stream's tier-1 keys fall in (`tier1::tag`: 6 bits).
pub(crate) const TAGS: u8 = 64;

pub(crate) fn key(prefix: &str, key_id: &str, tag: u8) -> Vec<u8> {
    format!("{prefix}{key_id}:id{{{tag:02x}}}").into_bytes()
}

/// Reads of the given tags' identity keys: one `MGET` standalone, one
/// `GET` per key on a cluster (keys of different slots cannot share a
/// command there).
fn reads(keys: Vec<Vec<u8>>, cluster: bool) -> Vec<Keyed> {
    if cluster {
        return keys
            .into_iter()
            .map(|key| {
                let mut cmd = redis::cmd("GET");
                cmd.arg(&key);
                Keyed { key, cmd }
            })
            .collect();
    }
    let Some(first) = keys.first().cloned() else {
        return Vec::new();
    };
    let mut cmd = redis::cmd("MGET");
    for key in &keys {
        cmd.arg(key);
    }
    vec![Keyed { key: first, cmd }]
}

/// The values `reads` answered, one per key, in key order.
fn values(answers: Vec<RedisResult<Value>>) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
    let mut out = Vec::new();
    for answer in answers {
        let answer = answer.map_err(|e| reply_error("store identity read", e))?;
        match answer {
            Value::Array(items) => {
                for item in items {
                    out.push(value(item)?);
                }
            }
            other => out.push(value(other)?),
        }
    }
    Ok(out)
}

fn value(answer: Value) -> Result<Option<Vec<u8>>, StoreError> {
    match answer {
        Value::Nil => Ok(None),
        Value::BulkString(bytes) => Ok(Some(bytes)),
        Value::SimpleString(text) => Ok(Some(text.into_bytes())),
        other => Err(StoreError::Protocol(format!(
            "store identity read answered {other:?}"
        ))),
    }
}

/// Every tag's identity key of a stream, in tag order.
fn all_keys(prefix: &str, key_id: &str) -> Vec<Vec<u8>> {
    (0..TAGS).map(|tag| key(prefix, key_id, tag)).collect()
}

/// The commands reading a stream's identity at every tag, and how to read
/// their answers.
pub(crate) fn find(prefix: &str, spec: &StreamSpec, cluster: bool) -> Vec<Keyed> {
    reads(all_keys(prefix, &spec.key_id), cluster)
}

pub(crate) fn found(answers: Vec<RedisResult<Value>>) -> Result<IdentityFound, StoreError> {
    let places = values(answers)?;
    if places.len() != usize::from(TAGS) {
        return Err(StoreError::Protocol(format!(
            "store identity read answered {} of {TAGS} places",
            places.len()
        )));
    }
    Ok(IdentityFound { places })
}

/// `SET key identity`, keeping what a place holds unless `replace`; the
/// first place's write answers the identity there before it (`GET`), so
/// the other places get the one the first writer chose.
pub(crate) fn write_first(
    prefix: &str,
    spec: &StreamSpec,
    identity: &StoreIdentity,
    replace: bool,
) -> Keyed {
    let key = key(prefix, &spec.key_id, 0);
    let mut cmd = redis::cmd("SET");
    cmd.arg(&key).arg(identity.to_hex());
    if !replace {
        cmd.arg("NX").arg("GET");
    }
    Keyed { key, cmd }
}

/// The identity the first place holds after `write_first`: the one it held
/// before, or the one written.
pub(crate) fn holding(
    answer: RedisResult<Value>,
    written: StoreIdentity,
) -> Result<StoreIdentity, StoreError> {
    let answer = answer.map_err(|e| reply_error("store identity write", e))?;
    if answer == Value::Okay {
        return Ok(written);
    }
    match value(answer)? {
        None => Ok(written),
        Some(bytes) => StoreIdentity::parse(&bytes).ok_or_else(|| {
            StoreError::Protocol(format!(
                "store identity {:?} is not 32 hex digits",
                String::from_utf8_lossy(&bytes)
            ))
        }),
    }
}

/// Writes to the other 63 places.
pub(crate) fn write_rest(
    prefix: &str,
    spec: &StreamSpec,
    identity: &StoreIdentity,
    replace: bool,
) -> Vec<Keyed> {
    (1..TAGS)
        .map(|tag| {
            let key = key(prefix, &spec.key_id, tag);
            let mut cmd = redis::cmd("SET");
            cmd.arg(&key).arg(identity.to_hex());
            if !replace {
                cmd.arg("NX");
            }
            Keyed { key, cmd }
        })
        .collect()
}

/// A round's identity reads: per adopted stream, the tags its claims
/// touch, each tag's identity and progress mark (`marks.rs`) together (one
/// slot: on a cluster one `MGET` of the two per tag; standalone one `MGET`
/// per stream). The marks are compared with the floors taken when the
/// round was planned: a live store's marks are at least those, whatever
/// floor rose while the round was on its way. A cluster client that
/// reconnects to a node restarted from an older snapshot fails no trip, so
/// this read, not a reconnect, is what finds it at the next round.
pub(crate) struct RoundReads {
    streams: Vec<StreamRead>,
    commands: Vec<Keyed>,
}

/// One stream's part of a round's read.
struct StreamRead {
    stream: StreamId,
    adopted: StoreIdentity,
    /// The tags read, each with its floor when the round was planned.
    tags: Vec<(u8, u64)>,
    /// How many commands read them.
    commands: usize,
}

impl RoundReads {
    pub(crate) fn new(
        prefix: &str,
        streams: &[StreamSpec],
        claims: &[Claim],
        adopted: &HashMap<usize, StoreIdentity>,
        floors: &Floors,
        cluster: bool,
    ) -> Result<RoundReads, StoreError> {
        let mut tags: BTreeMap<usize, BTreeSet<u8>> = BTreeMap::new();
        for claim in claims {
            if adopted.contains_key(&claim.stream.0) {
                tags.entry(claim.stream.0)
                    .or_default()
                    .insert(tier1::tag(&claim.hash));
            }
        }
        let mut out = RoundReads {
            streams: Vec::new(),
            commands: Vec::new(),
        };
        for (stream, tags) in tags {
            let key_id = &spec(streams, StreamId(stream))?.key_id;
            let floor = floors.of(stream);
            let pairs: Vec<[Vec<u8>; 2]> = tags
                .iter()
                .map(|&t| [key(prefix, key_id, t), marks::key(prefix, key_id, t)])
                .collect();
            let commands: Vec<Keyed> = if cluster {
                pairs.into_iter().map(|pair| mget(pair.to_vec())).collect()
            } else {
                vec![mget(pairs.into_iter().flatten().collect())]
            };
            let tags = tags
                .iter()
                .map(|&t| (t, floor.get(usize::from(t)).copied().unwrap_or(0)))
                .collect();
            out.streams.push(StreamRead {
                stream: StreamId(stream),
                adopted: adopted[&stream],
                tags,
                commands: commands.len(),
            });
            out.commands.extend(commands);
        }
        Ok(out)
    }

    pub(crate) fn commands(&self) -> &[Keyed] {
        &self.commands
    }

    /// The streams whose identity the round found missing or changed, or
    /// a tag's mark below its floor (`Behind`).
    pub(crate) fn judge(
        &self,
        answers: Vec<RedisResult<Value>>,
    ) -> Result<Vec<StreamLost>, StoreError> {
        if answers.len() != self.commands.len() {
            return Err(StoreError::Protocol(
                "store identity reads answered short".into(),
            ));
        }
        let mut answers = answers.into_iter();
        let mut lost = Vec::new();
        for StreamRead {
            stream,
            adopted: identity,
            tags,
            commands,
        } in &self.streams
        {
            let read = values(answers.by_ref().take(*commands).collect())?;
            if read.len() != tags.len() * 2 {
                return Err(StoreError::Protocol(
                    "store identity reads answered short".into(),
                ));
            }
            let identities = read.iter().step_by(2).map(Option::as_deref);
            let mut how = check_identity(identity, identities);
            if !how.lost() {
                let marks = read.iter().skip(1).step_by(2);
                let behind = marks.zip(tags).any(|(mark, &(_, floor))| {
                    let mark = mark
                        .as_deref()
                        .and_then(|m| std::str::from_utf8(m).ok()?.parse::<u64>().ok())
                        .unwrap_or(0);
                    mark < floor
                });
                if behind {
                    how = Check::Behind;
                }
            }
            if how.lost() {
                lost.push(StreamLost {
                    stream: *stream,
                    how,
                });
            }
        }
        Ok(lost)
    }
}

/// `MGET` of keys in one slot (on a cluster) or of any keys (standalone).
fn mget(keys: Vec<Vec<u8>>) -> Keyed {
    let mut cmd = redis::cmd("MGET");
    for key in &keys {
        cmd.arg(key);
    }
    Keyed {
        key: keys.into_iter().next().unwrap_or_default(),
        cmd,
    }
}

impl RedisStore {
    pub(super) async fn find_identity_at(
        &self,
        stream: StreamId,
    ) -> Result<IdentityFound, StoreError> {
        let spec = spec(&self.streams, stream)?;
        let commands = find(&self.prefix, spec, self.conn.is_cluster());
        found(self.conn.run(commands).await?)
    }

    /// The first place first, so that replicas writing at once agree on
    /// the identity its write kept; then the others; then what is there.
    pub(super) async fn write_identity_at(
        &self,
        stream: StreamId,
        identity: StoreIdentity,
        replace: bool,
    ) -> Result<IdentityFound, StoreError> {
        let spec = spec(&self.streams, stream)?;
        let first = write_first(&self.prefix, spec, &identity, replace);
        let answer = self.conn.run(vec![first]).await?.into_iter().next();
        let answer =
            answer.ok_or_else(|| StoreError::Protocol("identity write unanswered".into()))?;
        let held = holding(answer, identity)?;
        for answer in self
            .conn
            .run(write_rest(&self.prefix, spec, &held, replace))
            .await?
        {
            answer.map_err(|e| reply_error("store identity write", e))?;
        }
        self.find_identity_at(stream).await
    }

    /// The timed check (docs/design.md §8.2): every tag's identity of each
    /// adopted stream given, in one trip (standalone one `MGET` per
    /// stream; on a cluster one `GET` per tag, each node's in one
    /// pipeline), so a node that came back empty shows whatever tags it
    /// serves.
    pub(super) async fn verify_identity_at(
        &self,
        streams: &[StreamId],
    ) -> Result<Vec<StreamLost>, StoreError> {
        let adopted = self.adopted();
        let cluster = self.conn.is_cluster();
        let mut counts = Vec::new();
        let mut commands = Vec::new();
        for &stream in streams {
            if adopted.contains_key(&stream.0) {
                let reads = find(&self.prefix, spec(&self.streams, stream)?, cluster);
                counts.push((stream, reads.len()));
                commands.extend(reads);
            }
        }
        let mut answers = self.conn.run(commands).await?.into_iter();
        let mut found_all = Vec::with_capacity(counts.len());
        for (stream, count) in counts {
            found_all.push((stream, found(answers.by_ref().take(count).collect())?));
        }
        let mut lost = lost_among(&adopted, found_all);
        // The marks too (docs/design.md §8.2): a store that came back
        // older while the stream was quiet.
        for &stream in streams {
            if adopted.contains_key(&stream.0) && lost.iter().all(|l| l.stream != stream) {
                if let crate::store::Marked::Behind = self.check_marks_at(stream).await? {
                    lost.push(StreamLost {
                        stream,
                        how: crate::store::Check::Behind,
                    });
                }
            }
        }
        Ok(lost)
    }

    pub(super) fn adopt(&self, stream: StreamId, identity: StoreIdentity) {
        if let Ok(mut adopted) = self.adopted.lock() {
            adopted.insert(stream.0, identity);
        }
    }

    /// What the replica adopted, for a round's plan.
    pub(super) fn adopted(&self) -> HashMap<usize, StoreIdentity> {
        self.adopted.lock().map(|a| a.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinates::{Coordinates, TopicTag};
    use crate::fingerprint::{PayloadDigest, SourceHash};
    use crate::store::{Mode, OwnerToken};

    fn claim(stream: usize, tag: u8) -> Claim {
        let mut hash = SourceHash([0; 32]);
        hash.0[16] = tag;
        Claim {
            stream: StreamId(stream),
            hash,
            digest: PayloadDigest([0; 8]),
            holder: Coordinates {
                topic: TopicTag(1),
                partition: 0,
                offset: 0,
            },
            token: OwnerToken(1),
            at: 0,
            early_inserts: false,
        }
    }

    fn streams() -> Vec<StreamSpec> {
        let ttl = std::time::Duration::from_secs(60);
        vec![
            StreamSpec::new("a", Mode::Exact, ttl, None),
            StreamSpec::new("b", Mode::Exact, ttl, None),
        ]
    }

    #[test]
    fn an_identity_key_shares_its_tags_slot_with_the_claims() {
        let key = key("ig:", "Ab", 5);
        assert_eq!(key, b"ig:Ab:id{05}");
        let mut hash = SourceHash([0; 32]);
        hash.0[16] = 5;
        let claim_key = tier1::key("ig:", "Ab", &hash);
        assert_eq!(
            redis::cluster_routing::Slot::for_key(&key),
            redis::cluster_routing::Slot::for_key(&claim_key)
        );
    }

    #[test]
    fn a_round_reads_only_the_tags_its_adopted_streams_claims_touch() {
        let adopted = HashMap::from([(0, StoreIdentity([1; 16]))]);
        let floors = Floors::new(2, 64);
        let claims = [claim(0, 3), claim(0, 3), claim(0, 9), claim(1, 4)];
        let new = |adopted: &HashMap<usize, StoreIdentity>, cluster| {
            RoundReads::new("ig:", &streams(), &claims, adopted, &floors, cluster).unwrap()
        };
        assert_eq!(
            new(&adopted, false).commands().len(),
            1,
            "one MGET for stream a"
        );
        assert_eq!(
            new(&adopted, true).commands().len(),
            2,
            "an MGET of identity and mark per tag touched"
        );
        assert!(
            new(&HashMap::new(), false).commands().is_empty(),
            "nothing adopted, nothing read"
        );
    }

    #[test]
    fn a_tag_without_the_identity_or_below_its_floor_marks_its_stream_lost() {
        let identity = StoreIdentity([1; 16]);
        let adopted = HashMap::from([(0, identity)]);
        let floors = Floors::new(2, 64);
        let claims = [claim(0, 3), claim(0, 9)];
        let reads = RoundReads::new("ig:", &streams(), &claims, &adopted, &floors, true).unwrap();
        let id = || Value::BulkString(identity.to_hex().into_bytes());
        let mark = |m: u64| Value::BulkString(m.to_string().into_bytes());
        let pair = |a: Value, b: Value| Ok(Value::Array(vec![a, b]));
        assert!(reads
            .judge(vec![pair(id(), mark(4)), pair(id(), Value::Nil)])
            .unwrap()
            .is_empty());
        let lost = reads
            .judge(vec![pair(id(), mark(4)), pair(Value::Nil, mark(4))])
            .unwrap();
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].stream, StreamId(0));
        assert_eq!(lost[0].how, Check::Missing);
        let standalone =
            RoundReads::new("ig:", &streams(), &claims, &adopted, &floors, false).unwrap();
        let mget = Ok(Value::Array(vec![
            Value::BulkString(StoreIdentity([2; 16]).to_hex().into_bytes()),
            mark(1),
            id(),
            mark(1),
        ]));
        assert_eq!(standalone.judge(vec![mget]).unwrap()[0].how, Check::Changed);
        // Floors taken when the round is planned: tag 9 at 5.
        let mut raised = vec![0; 64];
        raised[9] = 5;
        floors.raise(0, &raised);
        let reads = RoundReads::new("ig:", &streams(), &claims, &adopted, &floors, true).unwrap();
        let lost = reads
            .judge(vec![pair(id(), mark(0)), pair(id(), mark(4))])
            .unwrap();
        assert_eq!(lost[0].how, Check::Behind, "tag 9 at 4, its floor 5");
        assert!(reads
            .judge(vec![pair(id(), mark(0)), pair(id(), mark(5))])
            .unwrap()
            .is_empty());
        // A floor that rose after the plan does not judge this round.
        floors.raise(0, &[9; 64]);
        assert!(reads
            .judge(vec![pair(id(), mark(0)), pair(id(), mark(5))])
            .unwrap()
            .is_empty());
    }
}
