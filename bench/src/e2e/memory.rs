//! What the claims cost in Redis memory, read from the bench's own
//! redis-server after a run (nothing else lives there, and it was emptied
//! before the run).
//!
//! - Tier 1: the growth of `used_memory` over the run, less the tier-2
//!   keys' own `MEMORY USAGE`, divided by the tier-1 keys. This is what the
//!   server really spends per key, including the expiry entry and both hash
//!   tables' buckets, which `MEMORY USAGE` of a key leaves out (that figure
//!   is given beside it, averaged over sampled keys).
//! - Tier 2: `MEMORY USAGE` of every generation key (RedisBloom filter or
//!   bitmap shards), in bits per key inserted (the `:n:` counters), beside
//!   the configured sizing (bits per key at capacity).
//!
//! A stream's keys sit under `<prefix><key_id>`: a tier-1 key continues it
//! with the hash tag and hash, every other key with `:` (the generations,
//! the insert counters, the watermark hash). Those others are left out of
//! tier 1, in keys and in bytes, but for the grouped tier-1 hashes
//! (`:g{<tag>}<bucket>`, docs/design.md §4.1), whose claim fields count as
//! tier-1 claims (`tier1_keys` is claims, whatever their layout).

use anyhow::Result;
use idemgate_testkit::servers::scan_async;
use redis::aio::MultiplexedConnection;
use serde::Serialize;

use super::services::info_field;

#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Memory {
    pub used_memory_before: i64,
    pub used_memory_after: i64,
    pub keys: u64,
    pub tier1_keys: u64,
    pub tier1_bytes_per_key: f64,
    /// `MEMORY USAGE` of a tier-1 key, averaged over a sample.
    pub tier1_memory_usage: f64,
    pub tier1_key_len: usize,
    pub tier1_value_len: usize,
    pub tier2: Option<Tier2>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Tier2 {
    pub keys: u64,
    pub bytes: u64,
    pub inserts: u64,
    pub capacity: u64,
    /// What the sizing gives at capacity (m / n).
    pub sized_bits_per_key: f64,
    /// Bytes held by the generation keys, per key inserted.
    pub bits_per_inserted_key: f64,
    /// Bytes held, per key of capacity.
    pub bits_per_capacity_key: f64,
}

/// Empties the server (ours alone) and returns `used_memory` after.
pub(crate) async fn reset(conn: &mut MultiplexedConnection) -> Result<i64> {
    redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async::<()>(conn)
        .await?;
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(conn)
        .await?;
    used_memory(conn).await
}

pub(crate) async fn used_memory(conn: &mut MultiplexedConnection) -> Result<i64> {
    Ok(info_field(conn, "memory", "used_memory").await?.parse()?)
}

async fn memory_usage(conn: &mut MultiplexedConnection, key: &[u8]) -> Result<u64> {
    let usage: Option<u64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(conn)
        .await?;
    Ok(usage.unwrap_or(0))
}

/// Reads the figures after a run of stream `stream` under `prefix`;
/// `capacity` and `sized_bits` describe a tiered stream's generations.
pub(crate) async fn measure(
    conn: &mut MultiplexedConnection,
    before: i64,
    prefix: &str,
    stream: &str,
    filter: Option<(u64, f64)>,
) -> Result<Memory> {
    let after = used_memory(conn).await?;
    let keys: u64 = redis::cmd("DBSIZE").query_async(conn).await?;
    // A tier-1 key is the namespace, the hash tag and the hash; the
    // stream's other keys continue the namespace with `:`.
    let namespace = format!("{prefix}{}", idemgate::store::key_id(stream));
    let others = scan_async(conn, &format!("{namespace}:*")).await?;
    let of_kind = |key: &Vec<u8>, kinds: &[&str]| {
        kinds
            .iter()
            .any(|kind| key.starts_with(format!("{namespace}:{kind}:").as_bytes()))
    };
    let tier2_keys: Vec<&Vec<u8>> = others.iter().filter(|k| of_kind(k, &["f", "b"])).collect();
    let grouped = |key: &Vec<u8>| key.starts_with(format!("{namespace}:g{{").as_bytes());
    let mut fields = 0u64;
    for key in others.iter().filter(|k| grouped(k)) {
        let names: Vec<Vec<u8>> = redis::cmd("HKEYS").arg(key).query_async(conn).await?;
        // Claim fields are 16 hash bytes; the sweep mark is `~`.
        fields += names.iter().filter(|f| f.len() == 16).count() as u64;
    }
    let counters: Vec<&Vec<u8>> = others.iter().filter(|k| of_kind(k, &["n"])).collect();
    let mut tier2_bytes = 0;
    for key in tier2_keys.iter().chain(&counters) {
        tier2_bytes += memory_usage(conn, key).await?;
    }
    // The watermark hash (`:w`) and anything else that is not a claim.
    let mut other_bytes = 0;
    for key in others
        .iter()
        .filter(|k| !of_kind(k, &["f", "b", "n"]) && !grouped(k))
    {
        other_bytes += memory_usage(conn, key).await?;
    }
    let mut inserts = 0u64;
    for key in &counters {
        let n: Option<u64> = redis::cmd("GET").arg(key).query_async(conn).await?;
        inserts += n.unwrap_or(0);
    }
    let mut sampled = 0u64;
    let mut usage_sum = 0u64;
    let (mut key_len, mut value_len) = (0, 0);
    for _ in 0..400 {
        let key: Option<Vec<u8>> = redis::cmd("RANDOMKEY").query_async(conn).await?;
        let Some(key) = key else { break };
        let rest = key.strip_prefix(namespace.as_bytes());
        if rest.is_none_or(|rest| rest.is_empty() || rest.starts_with(b":")) {
            continue;
        }
        usage_sum += memory_usage(conn, &key).await?;
        sampled += 1;
        if key_len == 0 {
            key_len = key.len();
            value_len = redis::cmd("STRLEN").arg(&key).query_async(conn).await?;
        }
        if sampled == 200 {
            break;
        }
    }
    let tier1_keys = keys.saturating_sub(others.len() as u64) + fields;
    let tier1_bytes = (after - before) as f64 - tier2_bytes as f64 - other_bytes as f64;
    let tier2 = filter.map(|(capacity, sized)| Tier2 {
        keys: tier2_keys.len() as u64,
        bytes: tier2_bytes,
        inserts,
        capacity,
        sized_bits_per_key: sized,
        bits_per_inserted_key: tier2_bytes as f64 * 8.0 / inserts.max(1) as f64,
        bits_per_capacity_key: tier2_bytes as f64 * 8.0 / capacity.max(1) as f64,
    });
    Ok(Memory {
        used_memory_before: before,
        used_memory_after: after,
        keys,
        tier1_keys,
        tier1_bytes_per_key: tier1_bytes / tier1_keys.max(1) as f64,
        tier1_memory_usage: usage_sum as f64 / sampled.max(1) as f64,
        tier1_key_len: key_len,
        tier1_value_len: value_len,
        tier2,
    })
}
