//! The claim protocol on Redis: claim, finalize, release, stats.

use async_trait::async_trait;
use redis::Value;

use super::tier1;
use super::tier2::{self, counter_key};
use super::{protocol, unparsable, RedisStore};
use crate::store::judge::{judge, pending_value, Verdict};
use crate::store::value::ClaimValue;
use crate::store::{
    millis, spec, Claim, ClaimOutcome, ClaimState, ClaimStore, FilterFill, Millis, Settle,
    StoreError, StoreStats, Tier,
};

#[async_trait]
impl ClaimStore for RedisStore {
    async fn claim(&self, batch: &[Claim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let count = batch.len();
        let mut commands = Vec::with_capacity(count * 2);
        for claim in batch {
            let spec = spec(&self.streams, claim.stream)?;
            let key = tier1::key(&self.prefix, &spec.name, &claim.hash);
            commands.push(tier1::claim(key, &pending_value(claim), millis(spec.lease)));
        }
        let items = self.filter_items(
            batch
                .iter()
                .enumerate()
                .map(|(i, c)| (i, &c.stream, &c.hash, c.at)),
        )?;
        let (probes, probe_map) = tier2::probes(self.filter_backend, &self.prefix, &items);
        commands.extend(probes);

        let mut answers = self.conn.run(commands).await?;
        let probe_answers = answers.split_off(count.min(answers.len()));
        let in_filter = tier2::hits(&probe_map, probe_answers, count)?;

        let mut outcomes = Vec::with_capacity(count);
        let mut lapsed = Vec::new();
        for (index, (claim, answer)) in batch.iter().zip(answers).enumerate() {
            let spec = spec(&self.streams, claim.stream)?;
            let outcome = match answer.map_err(protocol)? {
                Value::Nil => ClaimOutcome::Won,
                Value::BulkString(bytes) => {
                    let existing = ClaimValue::decode(&bytes)?;
                    match judge(&existing, claim, spec) {
                        Verdict::Decided(outcome) => outcome,
                        Verdict::Lapsed => {
                            let key = tier1::key(&self.prefix, &spec.name, &claim.hash);
                            lapsed.push((index, key, existing));
                            // Placeholder until the take-over answers.
                            ClaimOutcome::Won
                        }
                    }
                }
                other => {
                    return Err(StoreError::Protocol(format!(
                        "SET NX GET answered {other:?}"
                    )))
                }
            };
            outcomes.push(outcome);
        }

        if !lapsed.is_empty() {
            let taken = self.take_over(&lapsed, batch).await?;
            for ((index, _, old), now_there) in lapsed.iter().zip(taken) {
                let Some(bytes) = now_there else {
                    if old.state == ClaimState::Pending {
                        crate::metrics::taken_over(
                            &spec(&self.streams, batch[*index].stream)?.name,
                        );
                    }
                    continue;
                };
                let claim = &batch[*index];
                let existing = ClaimValue::decode(&bytes)?;
                outcomes[*index] = match judge(&existing, claim, spec(&self.streams, claim.stream)?)
                {
                    Verdict::Decided(outcome) => outcome,
                    // Someone else took it over in between: wait for them.
                    Verdict::Lapsed => ClaimOutcome::Held {
                        holder: existing.holder,
                    },
                };
            }
        }

        // A fresh claim on a hash the filter already holds: the record is a
        // duplicate from beyond tier 1, and the claim just written goes.
        let mut unwanted = Vec::new();
        for (index, outcome) in outcomes.iter_mut().enumerate() {
            if *outcome == ClaimOutcome::Won && in_filter[index] {
                *outcome = ClaimOutcome::Duplicate {
                    tier: Tier::Filter,
                    holder: None,
                };
                unwanted.push(Settle::from(&batch[index]));
            }
        }
        if !unwanted.is_empty() {
            self.release(&unwanted).await?;
        }
        Ok(outcomes)
    }

    async fn finalize(&self, batch: &[Settle]) -> Result<Vec<bool>, StoreError> {
        let answers = self
            .settle(&self.scripts.finalize, batch, |spec, settle| {
                let done = ClaimValue {
                    state: crate::store::ClaimState::Done,
                    holder: settle.holder,
                    digest: settle.digest,
                    at: settle.at,
                };
                vec![
                    tier1::holder_arg(&settle.holder).to_vec(),
                    done.encode().to_vec(),
                    millis(spec.tier1_ttl).to_string().into_bytes(),
                ]
            })
            .await?;
        let mut done = Vec::with_capacity(batch.len());
        let mut newly_done = Vec::new();
        for (index, answer) in answers.into_iter().enumerate() {
            match answer {
                0 => done.push(false),
                1 => {
                    done.push(true);
                    newly_done.push(index);
                }
                2 => done.push(true),
                other => return Err(StoreError::Protocol(format!("finalize answered {other}"))),
            }
        }
        // Only a done hash goes into the filter: a filter cannot release.
        let items = self.filter_items(
            newly_done
                .iter()
                .map(|&i| (i, &batch[i].stream, &batch[i].hash, batch[i].at)),
        )?;
        if !items.is_empty() {
            let inserts = tier2::inserts(self.filter_backend, &self.prefix, &items);
            check_inserts(self.conn.run(inserts).await?)?;
        }
        Ok(done)
    }

    async fn release(&self, batch: &[Settle]) -> Result<Vec<bool>, StoreError> {
        let answers = self
            .settle(&self.scripts.release, batch, |_, settle| {
                vec![tier1::holder_arg(&settle.holder).to_vec()]
            })
            .await?;
        Ok(answers.into_iter().map(|n| n == 1).collect())
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

/// A command error fails the call; an error inside a reply is RedisBloom
/// saying a non-scaling generation is full. The claim is done in tier 1
/// already, so that only shortens tier-2 coverage: say so loudly.
fn check_inserts(answers: Vec<redis::RedisResult<Value>>) -> Result<(), StoreError> {
    for answer in answers {
        if let Value::Array(items) = answer.map_err(protocol)? {
            if let Some(Value::ServerError(error)) =
                items.iter().find(|v| matches!(v, Value::ServerError(_)))
            {
                tracing::warn!(error = ?error, "filter generation full: raise peak_rate; hashes past capacity are not remembered beyond tier 1");
            }
        }
    }
    Ok(())
}

impl RedisStore {
    /// Runs a compare-and-set script over a batch: one invocation per hash
    /// tag (its keys share a cluster slot), all in one round trip. Returns
    /// the script's per-key answer in batch order.
    async fn settle<F>(
        &self,
        script: &tier1::LuaScript,
        batch: &[Settle],
        args_of: F,
    ) -> Result<Vec<i64>, StoreError>
    where
        F: Fn(&crate::store::StreamSpec, &Settle) -> Vec<Vec<u8>>,
    {
        // Per hash tag: batch indices, keys, script arguments.
        type Group = (Vec<usize>, Vec<Vec<u8>>, Vec<Vec<u8>>);
        let mut groups: std::collections::BTreeMap<u8, Group> = std::collections::BTreeMap::new();
        for (index, settle) in batch.iter().enumerate() {
            let spec = spec(&self.streams, settle.stream)?;
            let (indices, keys, args) = groups.entry(tier1::tag(&settle.hash)).or_default();
            indices.push(index);
            keys.push(tier1::key(&self.prefix, &spec.name, &settle.hash));
            args.extend(args_of(spec, settle));
        }
        let groups: Vec<_> = groups.into_values().collect();
        let answers = self
            .run_scripts(groups.len(), |g, cached| {
                let (_, keys, args) = &groups[g];
                let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                script.invoke(cached, keys, &args)
            })
            .await?;
        let mut out = vec![0; batch.len()];
        for ((indices, _, _), answer) in groups.iter().zip(answers) {
            let Value::Array(values) = answer else {
                return Err(StoreError::Protocol(format!(
                    "settle script answered {answer:?}"
                )));
            };
            if values.len() != indices.len() {
                return Err(StoreError::Protocol("settle script answered short".into()));
            }
            for (&index, value) in indices.iter().zip(values) {
                out[index] = match value {
                    Value::Int(n) => n,
                    other => {
                        return Err(StoreError::Protocol(format!(
                            "settle script gave {other:?}"
                        )))
                    }
                };
            }
        }
        Ok(out)
    }
}
