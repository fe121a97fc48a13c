//! An operator's reset on Redis (docs/design.md §4.9): the range fields
//! beside a stream's watermarks, and the raise of `--skipped delivered`.

use std::collections::HashMap;

use super::round::values;
use super::{watermarks, Keyed, RedisStore};
use crate::coordinates::TopicTag;
use crate::store::{
    millis, spec, PartitionRanges, PartitionReset, Raise, StoreError, StreamId, StreamSpec,
};

type Ranges = HashMap<(usize, TopicTag, i32), PartitionRanges>;

impl RedisStore {
    /// Records an operator's reset: one read of each stream's hash (an
    /// abandoned range adds to those recorded before), then one trip of
    /// writes: the raise script, the range fields, the hash's TTL.
    pub(super) async fn record_reset(&self, resets: &[PartitionReset]) -> Result<(), StoreError> {
        // Read first: abandoned ranges add to those recorded before. The
        // group has no members meanwhile, so no round writes in between.
        let mut streams: Vec<StreamId> = resets.iter().map(|r| r.stream).collect();
        streams.sort_unstable();
        streams.dedup();
        let reads = streams
            .iter()
            .map(|id| Ok(watermarks::read(&self.prefix, spec(&self.streams, *id)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let mut before: Ranges = HashMap::new();
        for (stream, read) in streams
            .iter()
            .zip(values(self.conn.run(reads).await?, "watermarks")?)
        {
            for r in watermarks::parse_all(*stream, read)?.1 {
                before.insert((r.stream.0, r.topic, r.partition), r);
            }
        }
        let mut commands = Vec::new();
        for r in resets {
            let spec = spec(&self.streams, r.stream)?;
            let key = watermarks::key(&self.prefix, &spec.key_id);
            let keyed = |cmd: redis::Cmd| Keyed {
                key: key.clone(),
                cmd,
            };
            if let Some(to) = r.raise_to {
                // A raise from 0 always applies and never lowers.
                let raise = Raise {
                    stream: r.stream,
                    topic: r.topic,
                    partition: r.partition,
                    start: 0,
                    end: to,
                };
                let groups = watermarks::RaiseGroups::new(&self.prefix, &[raise], |id| {
                    spec_of(&self.streams, id)
                })?;
                commands.extend(groups.invocations(&self.scripts.raise, false));
            }
            if let Some(range) = r.abandon {
                let mut ranges = before
                    .get(&(r.stream.0, r.topic, r.partition))
                    .map(|b| b.abandoned.clone())
                    .unwrap_or_default();
                crate::store::add_abandoned(&mut ranges, range);
                let mut cmd = redis::cmd("HSET");
                cmd.arg(&key)
                    .arg(watermarks::range_field(
                        r.topic,
                        r.partition,
                        watermarks::ABANDONED,
                    ))
                    .arg(watermarks::format_ranges(&ranges));
                commands.push(keyed(cmd));
            }
            let replay = watermarks::range_field(r.topic, r.partition, watermarks::REPLAY);
            let mut cmd = redis::cmd(if r.replay.is_some() { "HSET" } else { "HDEL" });
            cmd.arg(&key).arg(replay);
            if let Some(range) = r.replay {
                cmd.arg(watermarks::format_ranges(&[range]));
            }
            commands.push(keyed(cmd));
            let mut expire = redis::cmd("PEXPIRE");
            expire.arg(&key).arg(millis(spec.watermark_ttl()).max(1));
            commands.push(keyed(expire));
        }
        values(self.conn.run(commands).await?, "reset")?;
        Ok(())
    }
}

fn spec_of(streams: &[StreamSpec], id: StreamId) -> Result<&StreamSpec, StoreError> {
    spec(streams, id)
}
