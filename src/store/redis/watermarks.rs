//! Delivered watermarks on Redis (docs/design.md §4): one hash per stream,
//! `<prefix><key_id>:w`, one field per input partition, `<topic tag as 6
//! hex>:<partition>`, the value the decimal offset below which every record
//! was decided and delivered. An operator's reset (docs/design.md §4.9)
//! adds, per partition, `<tag>:<partition>:abandoned` (`from-to,...`, the
//! ranges skipped with `--skipped abandoned`) and `<tag>:<partition>:replay`
//! (`from-to`, the range replayed with `--re-emit`), so the round's one
//! `HGETALL` brings them along.
//!
//! One hash per stream keeps the read to one `HGETALL` per stream per
//! round, and a raise to one single-key script (one slot on a cluster). The
//! hash carries `watermark_ttl`, refreshed at every raise, so a stream's
//! watermarks outlive everything they settle.

use std::collections::BTreeMap;

use redis::Value;

use super::conn::Keyed;
use super::tier1::LuaScript;
use crate::coordinates::TopicTag;
use crate::store::{millis, PartitionRanges, Raise, StoreError, StreamId, StreamSpec, Watermark};

pub(crate) fn key(prefix: &str, key_id: &str) -> Vec<u8> {
    format!("{prefix}{key_id}:w").into_bytes()
}

fn field(topic: TopicTag, partition: i32) -> String {
    format!("{:06x}:{partition}", topic.0)
}

pub(crate) const ABANDONED: &str = "abandoned";
pub(crate) const REPLAY: &str = "replay";

/// A reset's field beside a partition's watermark.
pub(crate) fn range_field(topic: TopicTag, partition: i32, kind: &str) -> String {
    format!("{:06x}:{partition}:{kind}", topic.0)
}

/// What a field of the hash holds.
#[derive(Debug, PartialEq, Eq)]
enum Field {
    Watermark,
    Abandoned,
    Replay,
}

fn parse_field(field: &[u8]) -> Option<(TopicTag, i32, Field)> {
    let text = std::str::from_utf8(field).ok()?;
    let mut parts = text.splitn(3, ':');
    let tag = TopicTag(u32::from_str_radix(parts.next()?, 16).ok()?);
    let partition = parts.next()?.parse().ok()?;
    let kind = match parts.next() {
        None => Field::Watermark,
        Some(ABANDONED) => Field::Abandoned,
        Some(REPLAY) => Field::Replay,
        Some(_) => return None,
    };
    Some((tag, partition, kind))
}

/// `from-to,from-to` as a reset writes it.
pub(crate) fn format_ranges(ranges: &[(i64, i64)]) -> String {
    ranges
        .iter()
        .map(|(from, to)| format!("{from}-{to}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_ranges(text: &str) -> Option<Vec<(i64, i64)>> {
    text.split(',')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (from, to) = part.split_once('-')?;
            Some((from.parse().ok()?, to.parse().ok()?))
        })
        .collect()
}

/// One stream's raises: their indices, the hash key, the script arguments.
type Group = (Vec<usize>, Vec<u8>, Vec<Vec<u8>>);

/// A round's raises, one script invocation per stream.
pub(crate) struct RaiseGroups {
    groups: Vec<Group>,
}

impl RaiseGroups {
    /// `spec_of` resolves each raise's stream.
    pub(crate) fn new<'a>(
        prefix: &str,
        raises: &[Raise],
        spec_of: impl Fn(StreamId) -> Result<&'a StreamSpec, StoreError>,
    ) -> Result<RaiseGroups, StoreError> {
        let mut by_stream: BTreeMap<usize, Group> = BTreeMap::new();
        for (index, r) in raises.iter().enumerate() {
            let spec = spec_of(r.stream)?;
            let (indices, _, args) = by_stream.entry(r.stream.0).or_insert_with(|| {
                let ttl = millis(spec.watermark_ttl()).max(1).to_string();
                (
                    Vec::new(),
                    key(prefix, &spec.key_id),
                    vec![ttl.into_bytes()],
                )
            });
            indices.push(index);
            args.push(field(r.topic, r.partition).into_bytes());
            args.push(r.start.to_string().into_bytes());
            args.push(r.end.to_string().into_bytes());
        }
        Ok(RaiseGroups {
            groups: by_stream.into_values().collect(),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.groups.len()
    }

    pub(crate) fn invocations(&self, script: &LuaScript, cached: bool) -> Vec<Keyed> {
        (0..self.groups.len())
            .filter_map(|g| self.invocation(script, g, cached))
            .collect()
    }

    /// Stream group `g`'s invocation, to send it again as `EVAL`.
    pub(crate) fn invocation(&self, script: &LuaScript, g: usize, cached: bool) -> Option<Keyed> {
        let (_, key, args) = self.groups.get(g)?;
        Some(script.invoke(cached, std::slice::from_ref(key), args))
    }

    /// Per raise, in request order: the watermark after it.
    pub(crate) fn answers(
        &self,
        answers: Vec<Value>,
        total: usize,
    ) -> Result<Vec<i64>, StoreError> {
        if answers.len() != self.groups.len() {
            return Err(StoreError::Protocol("raises answered short".into()));
        }
        let mut out = vec![0; total];
        for ((indices, _, _), answer) in self.groups.iter().zip(answers) {
            let Value::Array(values) = answer else {
                return Err(StoreError::Protocol(format!("raise answered {answer:?}")));
            };
            if values.len() != indices.len() {
                return Err(StoreError::Protocol("raise answered short".into()));
            }
            for (&index, value) in indices.iter().zip(values) {
                if let Some(slot) = out.get_mut(index) {
                    *slot = offset(&value)?;
                }
            }
        }
        Ok(out)
    }
}

fn offset(value: &Value) -> Result<i64, StoreError> {
    let text: String = redis::from_redis_value_ref(value)
        .map_err(|e| StoreError::Protocol(format!("watermark {value:?}: {e}")))?;
    text.parse()
        .map_err(|_| StoreError::Protocol(format!("watermark {text:?} is not an offset")))
}

/// `HGETALL` of a stream's watermarks.
pub(crate) fn read(prefix: &str, spec: &StreamSpec) -> Keyed {
    let key = key(prefix, &spec.key_id);
    let mut cmd = redis::cmd("HGETALL");
    cmd.arg(&key);
    Keyed { key, cmd }
}

/// A stream's watermarks from its `HGETALL` answer (a flat array on RESP2,
/// a map on RESP3), in partition order. A field this code did not write is
/// a protocol error rather than a silently unsettled partition.
/// The reset ranges come beside them, in partition order.
pub(crate) fn parse_all(
    stream: StreamId,
    answer: Value,
) -> Result<(Vec<Watermark>, Vec<PartitionRanges>), StoreError> {
    let pairs: Vec<(Value, Value)> = match answer {
        Value::Map(pairs) => pairs,
        Value::Array(flat) => {
            let mut flat = flat.into_iter();
            let mut pairs = Vec::new();
            while let (Some(f), Some(v)) = (flat.next(), flat.next()) {
                pairs.push((f, v));
            }
            pairs
        }
        Value::Nil => Vec::new(),
        other => return Err(StoreError::Protocol(format!("HGETALL answered {other:?}"))),
    };
    let mut out = Vec::with_capacity(pairs.len());
    let mut ranges: BTreeMap<(TopicTag, i32), PartitionRanges> = BTreeMap::new();
    for (f, v) in pairs {
        let name: Vec<u8> = redis::from_redis_value(f)
            .map_err(|e| StoreError::Protocol(format!("watermark field: {e}")))?;
        let bad = || {
            StoreError::Protocol(format!(
                "watermark field {:?}",
                String::from_utf8_lossy(&name)
            ))
        };
        let (topic, partition, kind) = parse_field(&name).ok_or_else(bad)?;
        if kind == Field::Watermark {
            out.push(Watermark {
                stream,
                topic,
                partition,
                below: offset(&v)?,
            });
            continue;
        }
        let text: String = redis::from_redis_value_ref(&v).map_err(|_| bad())?;
        let parsed = parse_ranges(&text).ok_or_else(bad)?;
        let entry = ranges
            .entry((topic, partition))
            .or_insert_with(|| PartitionRanges {
                stream,
                topic,
                partition,
                abandoned: Vec::new(),
                replay: None,
            });
        match kind {
            Field::Abandoned => entry.abandoned = parsed,
            _ => entry.replay = parsed.first().copied(),
        }
    }
    out.sort_by_key(|w| (w.topic, w.partition));
    Ok((out, ranges.into_values().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_field_names_topic_tag_and_partition_and_reads_back() {
        let f = field(TopicTag(0x00ab_cdef), 12);
        assert_eq!(f, "abcdef:12");
        assert_eq!(
            parse_field(f.as_bytes()),
            Some((TopicTag(0x00ab_cdef), 12, Field::Watermark))
        );
        let r = range_field(TopicTag(0x00ab_cdef), 12, REPLAY);
        assert_eq!(r, "abcdef:12:replay");
        assert_eq!(
            parse_field(r.as_bytes()),
            Some((TopicTag(0x00ab_cdef), 12, Field::Replay))
        );
        assert_eq!(parse_field(b"abcdef:12:other"), None);
        assert_eq!(parse_field(b"nonsense"), None);
    }

    #[test]
    fn reset_ranges_read_back_beside_the_watermarks() {
        let answer = Value::Array(vec![
            bulk("000001:0"),
            bulk("40"),
            bulk("000001:0:abandoned"),
            bulk("10-20,30-35"),
            bulk("000001:1:replay"),
            bulk("5-9"),
        ]);
        let (marks, ranges) = parse_all(StreamId(0), answer).unwrap();
        assert_eq!(marks.len(), 1);
        assert_eq!(ranges.len(), 2);
        assert_eq!(ranges[0].abandoned, vec![(10, 20), (30, 35)]);
        assert_eq!(ranges[0].replay, None);
        assert_eq!(ranges[1].replay, Some((5, 9)));
        assert_eq!(format_ranges(&ranges[0].abandoned), "10-20,30-35");
        let bad = Value::Array(vec![bulk("000001:0:replay"), bulk("x-1")]);
        assert!(parse_all(StreamId(0), bad).is_err());
    }

    #[test]
    fn hgetall_answers_on_either_protocol_give_the_same_watermarks() {
        let resp2 = Value::Array(vec![
            bulk("000002:1"),
            bulk("40"),
            bulk("000001:7"),
            bulk("9"),
        ]);
        let resp3 = Value::Map(vec![
            (bulk("000001:7"), bulk("9")),
            (bulk("000002:1"), bulk("40")),
        ]);
        let a = parse_all(StreamId(0), resp2).unwrap().0;
        assert_eq!(a, parse_all(StreamId(0), resp3).unwrap().0);
        assert_eq!(a[0].below, 9);
        assert_eq!(a[1].partition, 1);
        assert!(parse_all(StreamId(0), Value::Array(vec![bulk("x"), bulk("1")])).is_err());
    }
}
