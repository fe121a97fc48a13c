//! Exactly once on Redis: the runs of offsets whose hashes an owner writes
//! to tier 2 before its transaction commits (docs/design.md §4.4 rule 5),
//! one hash per stream, `<prefix><key_id>:e`, one field per input
//! partition, `<topic tag as 6 hex>:<partition>`, the value
//! `from-to@noted,...` (`noted`: the noting replica's wall clock, in
//! milliseconds: after the claims of the run's records were written, so a
//! run kept twice the tier-1 TTL after it outlives every claim it can
//! speak for, with the TTL again to spare for clock skew). The hash
//! carries `watermark_ttl`, refreshed at every note.
//!
//! A run is noted, and acknowledged, before the inserts it speaks for: a
//! filter hit seen after an insert therefore finds its run. The partition's
//! next owner reads the field only where a record met its own unsettled
//! claim of an earlier owner's beside a filter hit (a follow-up trip, after
//! the probes answered), so the hot path pays nothing. Apart from the
//! watermarks' hash: replicas of an earlier version, reading that hash
//! whole, refuse a field they do not know. A partition without a field
//! was never noted by an owner of this version (a rolling upgrade: an
//! earlier version's owner inserts without noting): there a hit may be the
//! record's own, as before.

use std::collections::HashMap;

use super::conn::Keyed;
use super::{protocol, unparsable, RedisStore};
use crate::clock::wall_ms;
use crate::coordinates::TopicTag;
use crate::store::judge::{asks_own_insert, Filter};
use crate::store::value::ClaimValue;
use crate::store::{millis, spec, Claim, EarlyRun, StoreError, StreamId};

/// Appends runs to a partition's field, dropping those under the watermark
/// the owner knows and those older than every claim they could speak for
/// lives. KEYS: the stream's hash. ARGV: the field, the new runs
/// (`from-to,...`), the watermark (`''` where none is known), how long a
/// run is kept and the hash's TTL (milliseconds), the new runs' time.
/// Times stay strings, as the raise script keeps offsets, so no Lua float
/// formatting reaches the hash. Answers the runs kept.
pub(crate) const NOTE: &str = r#"local now = tonumber(ARGV[6])
local below = tonumber(ARGV[3])
local keep = tonumber(ARGV[4])
local kept = {}
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  for from, to, at in string.gmatch(old, '(%d+)-(%d+)@(%d+)') do
    if (not below or tonumber(to) > below) and tonumber(at) + keep > now then
      kept[#kept + 1] = from .. '-' .. to .. '@' .. at
    end
  end
end
for from, to in string.gmatch(ARGV[2], '(%d+)-(%d+)') do
  kept[#kept + 1] = from .. '-' .. to .. '@' .. ARGV[6]
end
redis.call('HSET', KEYS[1], ARGV[1], table.concat(kept, ','))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return #kept"#;

pub(crate) fn key(prefix: &str, key_id: &str) -> Vec<u8> {
    format!("{prefix}{key_id}:e").into_bytes()
}

fn field(topic: TopicTag, partition: i32) -> String {
    format!("{:06x}:{partition}", topic.0)
}

/// The runs of a field's value, without their times; `None` where it is
/// not what `NOTE` writes.
fn parse(text: &str) -> Option<Vec<(i64, i64)>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|run| {
            let (range, _noted) = run.split_once('@')?;
            let (from, to) = range.split_once('-')?;
            Some((from.parse().ok()?, to.parse().ok()?))
        })
        .collect()
}

/// A partition of a stream, as the runs are kept.
pub(crate) type PartitionOf = (StreamId, TopicTag, i32);

/// One partition's runs of one call, sent in one script call.
struct Noting {
    of: PartitionOf,
    below: Option<i64>,
    ranges: Vec<(i64, i64)>,
}

impl RedisStore {
    /// One script call per partition, acknowledged.
    pub(super) async fn note_runs(&self, runs: &[EarlyRun]) -> Result<(), StoreError> {
        let mut by_partition: Vec<Noting> = Vec::new();
        for run in runs {
            let of = (run.stream, run.topic, run.partition);
            match by_partition.iter_mut().find(|n| n.of == of) {
                Some(n) => {
                    n.below = n.below.max(run.below);
                    n.ranges.push((run.start, run.end));
                }
                None => by_partition.push(Noting {
                    of,
                    below: run.below,
                    ranges: vec![(run.start, run.end)],
                }),
            }
        }
        let noted = wall_ms().to_string().into_bytes();
        let mut prepared = Vec::with_capacity(by_partition.len());
        for Noting {
            of: (stream, topic, partition),
            below,
            ranges,
        } in &by_partition
        {
            let spec = spec(&self.streams, *stream)?;
            // A run is kept twice the tier-1 TTL; the hash as long as the
            // watermarks', so a partition noted once keeps its field (its
            // absence means an earlier version's owner) across a quiet
            // spell.
            let keep = millis(spec.tier1_ttl).saturating_mul(2).max(1);
            let ttl = millis(spec.watermark_ttl()).max(1);
            let text = ranges
                .iter()
                .map(|(from, to)| format!("{from}-{to}"))
                .collect::<Vec<_>>()
                .join(",");
            prepared.push((
                key(&self.prefix, &spec.key_id),
                vec![
                    field(*topic, *partition).into_bytes(),
                    text.into_bytes(),
                    below
                        .map(|b| b.to_string())
                        .unwrap_or_default()
                        .into_bytes(),
                    keep.to_string().into_bytes(),
                    ttl.to_string().into_bytes(),
                    noted.clone(),
                ],
            ));
        }
        self.run_scripts(prepared.len(), |i, cached| {
            let (key, args) = &prepared[i];
            self.scripts
                .early
                .invoke(cached, std::slice::from_ref(key), args)
        })
        .await?;
        Ok(())
    }

    /// The runs noted for each partition asked about (each once); `None`
    /// where the partition has no field.
    async fn noted_runs(&self, partitions: &[PartitionOf]) -> Result<Noted, StoreError> {
        let mut asked: Vec<PartitionOf> = partitions.to_vec();
        asked.sort_unstable_by_key(|(s, t, p)| (s.0, t.0, *p));
        asked.dedup();
        let mut commands = Vec::with_capacity(asked.len());
        for (stream, topic, partition) in &asked {
            let spec = spec(&self.streams, *stream)?;
            let key = key(&self.prefix, &spec.key_id);
            let mut cmd = redis::cmd("HGET");
            cmd.arg(&key).arg(field(*topic, *partition));
            commands.push(Keyed { key, cmd });
        }
        let answers = self.conn.run(commands).await?;
        let mut out = HashMap::with_capacity(asked.len());
        for (at, answer) in asked.into_iter().zip(answers) {
            let value: Option<String> =
                redis::from_redis_value(answer.map_err(protocol)?).map_err(unparsable)?;
            let runs =
                match value {
                    Some(text) => Some(parse(&text).ok_or_else(|| {
                        StoreError::Protocol(format!("early-insert runs {text:?}"))
                    })?),
                    None => None,
                };
            out.insert(at, runs);
        }
        Ok(out)
    }

    /// Reads the noted runs of the partitions of the claims among `met`
    /// (index, value met) whose verdict turns on them, and not read yet.
    pub(super) async fn read_noted(
        &self,
        claims: &[Claim],
        met: &[(usize, ClaimValue)],
        in_filter: &[bool],
        noted: &mut Noted,
    ) -> Result<(), StoreError> {
        let wanted: Vec<PartitionOf> = met
            .iter()
            .filter(|(index, value)| {
                asks_own_insert(
                    &claims[*index],
                    value,
                    in_filter.get(*index).copied().unwrap_or(false),
                )
            })
            .map(|(index, _)| partition_of(&claims[*index]))
            .filter(|at| !noted.contains_key(at))
            .collect();
        if !wanted.is_empty() {
            noted.extend(self.noted_runs(&wanted).await?);
        }
        Ok(())
    }
}

/// The runs noted before early inserts, by partition, as read this round
/// (`None`: the partition has none noted at all).
pub(super) type Noted = HashMap<PartitionOf, Option<Vec<(i64, i64)>>>;

fn partition_of(claim: &Claim) -> PartitionOf {
    (claim.stream, claim.holder.topic, claim.holder.partition)
}

/// What tier 2 says of a claim's hash: the probe, and where the verdict
/// turns on it, whether the record's offset was noted before an earlier
/// owner's early inserts.
pub(super) fn filter_of(
    claim: &Claim,
    existing: Option<&ClaimValue>,
    hit: bool,
    noted: &Noted,
) -> Filter {
    let asks = existing.is_some_and(|v| asks_own_insert(claim, v, hit));
    Filter {
        hit,
        own_insert: asks
            && noted
                .get(&partition_of(claim))
                .is_some_and(|runs| may_be_own(runs.as_deref(), claim.holder.offset)),
    }
}

/// Whether `offset` lies in one of the runs.
pub(crate) fn covers(runs: &[(i64, i64)], offset: i64) -> bool {
    runs.iter().any(|&(from, to)| (from..to).contains(&offset))
}

/// Whether an earlier owner may have written the record at `offset`'s own
/// hash to tier 2: its offset lies in a noted run, or nothing was ever
/// noted for its partition (an owner of an earlier version).
pub(crate) fn may_be_own(noted: Option<&[(i64, i64)]>, offset: i64) -> bool {
    noted.is_none_or(|runs| covers(runs, offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_read_back_without_their_times_and_cover_half_open() {
        let runs = parse("10-20@1796623620000,25-26@1796623621000").unwrap();
        assert_eq!(runs, vec![(10, 20), (25, 26)]);
        assert!(covers(&runs, 10) && covers(&runs, 19) && covers(&runs, 25));
        assert!(!covers(&runs, 20) && !covers(&runs, 24) && !covers(&runs, 26));
        assert_eq!(parse(""), Some(Vec::new()));
        assert_eq!(parse("10-20"), None, "a run without its time");
        assert_eq!(parse("x-20@1"), None);
        assert!(may_be_own(None, 24), "never noted: as before");
        assert!(!may_be_own(Some(&runs), 24));
        assert!(!may_be_own(Some(&[]), 24));
    }
}
