//! Tier 2 on Redis: rotating Bloom generations, on RedisBloom where the
//! server has it, on plain bitmaps anywhere.
//!
//! Keys, per stream and epoch (see `generations.rs` for the epoch rules):
//! - RedisBloom: `<prefix><stream>:f:<epoch>`, created by `BF.INSERT ...
//!   NONSCALING` with the planned capacity and error rate;
//! - bitmaps: `<prefix><stream>:b:<epoch>:<shard>`, one `BITFIELD` per shard
//!   per batch (`SET u1` answers the old bits, `BITFIELD_RO GET u1` probes);
//! - inserts counted in `<prefix><stream>:n:<epoch>`, read against capacity.
//!
//! Every generation key gets its expiry (`PEXPIRE ... NX`) in the same
//! pipeline that creates it.

use std::collections::BTreeMap;

use redis::{RedisResult, Value};

use super::conn::Keyed;
use crate::fingerprint::SourceHash;
use crate::store::{GenerationPlan, Millis, StoreError};

/// Which data structure holds the generations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterBackend {
    RedisBloom,
    Bitmap,
}

/// One hash to probe or insert, with where it came from in the batch.
pub(crate) struct Item<'a> {
    pub(crate) index: usize,
    pub(crate) stream: &'a str,
    pub(crate) plan: &'a GenerationPlan,
    pub(crate) hash: &'a SourceHash,
    pub(crate) at: Millis,
}

/// Maps each probe command's answers back to batch indices: for every
/// command, the batch index of each item and how many answers it owns.
pub(crate) struct ProbeMap {
    per_command: Vec<Vec<(usize, usize)>>,
}

fn generation_key(prefix: &str, stream: &str, kind: &str, epoch: i64) -> String {
    format!("{prefix}{stream}:{kind}:{epoch}")
}

pub(crate) fn counter_key(prefix: &str, stream: &str, epoch: i64) -> String {
    generation_key(prefix, stream, "n", epoch)
}

/// Key of a generation (and shard) a hash belongs to, with its bit offsets
/// for bitmaps.
fn locate(backend: FilterBackend, prefix: &str, item: &Item<'_>, epoch: i64) -> (String, Vec<u64>) {
    match backend {
        FilterBackend::RedisBloom => (generation_key(prefix, item.stream, "f", epoch), Vec::new()),
        FilterBackend::Bitmap => {
            let (shard, bits) = item.plan.bit_positions(item.hash);
            let key = format!(
                "{}:{shard}",
                generation_key(prefix, item.stream, "b", epoch)
            );
            (key, bits)
        }
    }
}

/// Commands that check every live generation for every item.
pub(crate) fn probes(
    backend: FilterBackend,
    prefix: &str,
    items: &[Item<'_>],
) -> (Vec<Keyed>, ProbeMap) {
    let mut groups: BTreeMap<String, (Vec<(usize, usize)>, redis::Cmd)> = BTreeMap::new();
    for item in items {
        for epoch in item.plan.read_epochs(item.at) {
            let (key, bits) = locate(backend, prefix, item, epoch);
            let (owners, cmd) = groups.entry(key.clone()).or_insert_with(|| {
                let cmd = match backend {
                    FilterBackend::RedisBloom => redis::cmd("BF.MEXISTS"),
                    FilterBackend::Bitmap => redis::cmd("BITFIELD_RO"),
                };
                let mut cmd = cmd;
                cmd.arg(&key);
                (Vec::new(), cmd)
            });
            match backend {
                FilterBackend::RedisBloom => {
                    cmd.arg(&item.hash.0[..]);
                    owners.push((item.index, 1));
                }
                FilterBackend::Bitmap => {
                    for bit in &bits {
                        cmd.arg("GET").arg("u1").arg(*bit);
                    }
                    owners.push((item.index, bits.len()));
                }
            }
        }
    }
    let mut commands = Vec::with_capacity(groups.len());
    let mut per_command = Vec::with_capacity(groups.len());
    for (key, (owners, cmd)) in groups {
        commands.push(Keyed {
            key: key.into_bytes(),
            cmd,
        });
        per_command.push(owners);
    }
    (commands, ProbeMap { per_command })
}

/// Folds probe answers into one flag per batch index: true where some live
/// generation holds every bit of the hash (or RedisBloom says it exists).
pub(crate) fn hits(
    map: &ProbeMap,
    answers: Vec<RedisResult<Value>>,
    batch_len: usize,
) -> Result<Vec<bool>, StoreError> {
    let mut hit = vec![false; batch_len];
    for (owners, answer) in map.per_command.iter().zip(answers) {
        let flags: Vec<i64> = match answer {
            Ok(Value::Array(values)) => values
                .into_iter()
                .map(|v| match v {
                    Value::Int(n) => Ok(n),
                    Value::Boolean(b) => Ok(i64::from(b)),
                    other => Err(StoreError::Protocol(format!("filter probe gave {other:?}"))),
                })
                .collect::<Result<_, _>>()?,
            Ok(other) => {
                return Err(StoreError::Protocol(format!("filter probe gave {other:?}")));
            }
            Err(error) => return Err(StoreError::Protocol(format!("filter probe: {error}"))),
        };
        let mut flags = flags.into_iter();
        for (index, count) in owners {
            let mut all = *count > 0;
            for _ in 0..*count {
                all &= flags.next().is_some_and(|f| f != 0);
            }
            if all {
                if let Some(slot) = hit.get_mut(*index) {
                    *slot = true;
                }
            }
        }
    }
    Ok(hit)
}

/// Commands that add every item to the generations it is written to, set
/// each new generation's expiry, and count the inserts.
pub(crate) fn inserts(backend: FilterBackend, prefix: &str, items: &[Item<'_>]) -> Vec<Keyed> {
    // key -> (command, expiry in ms from the first writer's clock)
    let mut filters: BTreeMap<String, (redis::Cmd, i64)> = BTreeMap::new();
    let mut counters: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for item in items {
        for epoch in item.plan.write_epochs(item.at) {
            let ttl = (item.plan.expires_at(epoch) - item.at).max(1);
            let (key, bits) = locate(backend, prefix, item, epoch);
            let (cmd, _) = filters.entry(key.clone()).or_insert_with(|| {
                let mut cmd;
                match backend {
                    FilterBackend::RedisBloom => {
                        cmd = redis::cmd("BF.INSERT");
                        cmd.arg(&key)
                            .arg("CAPACITY")
                            .arg(item.plan.sizing.capacity)
                            .arg("ERROR")
                            .arg(item.plan.sizing.fp_rate)
                            .arg("NONSCALING")
                            .arg("ITEMS");
                    }
                    FilterBackend::Bitmap => {
                        cmd = redis::cmd("BITFIELD");
                        cmd.arg(&key);
                    }
                }
                (cmd, ttl)
            });
            match backend {
                FilterBackend::RedisBloom => {
                    cmd.arg(&item.hash.0[..]);
                }
                FilterBackend::Bitmap => {
                    for bit in bits {
                        cmd.arg("SET").arg("u1").arg(bit).arg(1);
                    }
                }
            }
            let counter = counters
                .entry(counter_key(prefix, item.stream, epoch))
                .or_insert((0, ttl));
            counter.0 += 1;
        }
    }
    let mut commands = Vec::new();
    for (key, (cmd, ttl)) in filters {
        commands.push(Keyed {
            key: key.clone().into_bytes(),
            cmd,
        });
        commands.push(expire_once(key, ttl));
    }
    for (key, (count, ttl)) in counters {
        let mut cmd = redis::cmd("INCRBY");
        cmd.arg(&key).arg(count);
        commands.push(Keyed {
            key: key.clone().into_bytes(),
            cmd,
        });
        commands.push(expire_once(key, ttl));
    }
    commands
}

fn expire_once(key: String, ttl_ms: i64) -> Keyed {
    let mut cmd = redis::cmd("PEXPIRE");
    cmd.arg(&key).arg(ttl_ms).arg("NX");
    Keyed {
        key: key.into_bytes(),
        cmd,
    }
}
