//! The claim protocol on Redis: claim, finalize, release, stats.

use async_trait::async_trait;
use redis::Value;

use super::tier2::counter_key;
use super::{protocol, unparsable, RedisStore};
use crate::store::{Claim, ClaimStore, FilterFill, Millis, StoreError, StoreStats};

#[async_trait]
impl ClaimStore for RedisStore {
    async fn round(
        &self,
        _publish: &crate::store::Publish,
        _claims: &[Claim],
        _read: &[crate::store::StreamId],
    ) -> Result<crate::store::RoundAnswer, StoreError> {
        Err(StoreError::Unavailable("TEMPORARY: redis round v2 not written yet".into()))
    }

    async fn stats(&self, at: Millis) -> Result<StoreStats, StoreError> {
        let mut info = redis::cmd("INFO");
        info.arg("stats");
        let mut evicted_keys = 0;
        for answer in self.conn.on_every_node(&info).await? {
            let text: String = redis::from_redis_value(answer).map_err(unparsable)?;
            evicted_keys += text
                .lines()
                .find_map(|line| line.strip_prefix("evicted_keys:"))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
        let tiered: Vec<_> = self
            .streams
            .iter()
            .filter_map(|spec| spec.filter.as_ref().map(|plan| (spec, plan)))
            .collect();
        let commands = tiered
            .iter()
            .map(|(spec, plan)| {
                let key = counter_key(&self.prefix, &spec.name, plan.epoch(at));
                let mut cmd = redis::cmd("GET");
                cmd.arg(&key);
                super::Keyed {
                    key: key.into_bytes(),
                    cmd,
                }
            })
            .collect();
        let answers = self.conn.run(commands).await?;
        let filters = tiered
            .iter()
            .zip(answers)
            .map(|((spec, plan), answer)| {
                let inserts: Option<u64> =
                    redis::from_redis_value(answer.map_err(protocol)?).map_err(unparsable)?;
                Ok(FilterFill {
                    stream: spec.name.clone(),
                    inserts: inserts.unwrap_or(0),
                    capacity: plan.sizing.capacity,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(StoreStats {
            evicted_keys,
            filters,
        })
    }
}

