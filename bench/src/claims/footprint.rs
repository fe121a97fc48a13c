//! Figure 3: what a claim costs in Redis memory.
//!
//! Tier 1 is measured on a scratch `redis-server` started for the purpose,
//! so the shared servers' other keys (and other sessions writing to them)
//! cannot move `used_memory` while we read it. Tier 2 is read from the
//! filter keys a tiered run left on the shared servers, with `MEMORY USAGE`.

use anyhow::{ensure, Context};
use idemgate::store::redis::{RedisOptions, RedisStore, RedisTarget};
use idemgate::store::{ClaimStore, Mode, Settle, StreamId, StreamSpec};

use idemgate_testkit::servers::{RedisServer, ServerOptions};

use super::servers;
use super::throughput::{self, BATCH};

/// A realistic deployment prefix and stream name, so the key length is
/// what an operator would pay.
const PREFIX: &str = "idemgate:";
const STREAM: &str = "payments";

pub struct Tier1 {
    pub keys: u64,
    pub used_before: i64,
    pub used_after: i64,
    pub bytes_per_key: f64,
    pub key_len: usize,
    /// The tier-1 value, fixed by `src/store/value.rs`.
    pub value_len: usize,
    /// Redis' own estimate for one of the keys, as a cross-check.
    pub memory_usage_one: u64,
    pub server_pid: u32,
}

/// Claims then finalizes `keys` distinct hashes (batches of 1000) in an
/// exact stream on a scratch server; reports the `used_memory` delta.
pub async fn tier1(keys: usize) -> anyhow::Result<Tier1> {
    let scratch =
        tokio::task::spawn_blocking(|| RedisServer::start("claims", ServerOptions::default()))
            .await
            .context("starting a scratch redis-server")?;
    let url = scratch.url();
    let spec = StreamSpec {
        name: STREAM.into(),
        ..throughput::streams().remove(0)
    };
    ensure!(
        spec.mode == Mode::Exact,
        "tier-1 figure needs the exact stream"
    );
    let options = RedisOptions::new(RedisTarget::Standalone(url.clone()), PREFIX);
    let store = RedisStore::connect(&options, vec![spec]).await?;
    let stream = StreamId(0);

    let before = servers::used_memory(&url).await?;
    let batches = keys.div_ceil(BATCH);
    for b in 0..batches {
        let claims = throughput::batch(
            stream,
            "footprint",
            (b * BATCH) as u64,
            BATCH,
            false,
            throughput::now_ms(),
        );
        let outcomes = store.claim(&claims).await?;
        ensure!(
            outcomes
                .iter()
                .all(|o| *o == idemgate::store::ClaimOutcome::Won),
            "footprint batch {b}: not every claim won"
        );
        let settles: Vec<Settle> = claims.iter().map(Settle::from).collect();
        let done = store.finalize(&settles).await?;
        ensure!(
            done.iter().all(|d| *d),
            "footprint batch {b}: not every claim done"
        );
    }
    let after = servers::used_memory(&url).await?;

    let total = (batches * BATCH) as u64;
    let mut conn = servers::node(&url).await?;
    let dbsize: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
    ensure!(
        dbsize == total,
        "scratch server holds {dbsize} keys, expected {total}"
    );

    let key = store.tier1_key(stream, &throughput::hash("footprint", 0))?;
    let value: Vec<u8> = redis::cmd("GET").arg(&key).query_async(&mut conn).await?;
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await?;
    ensure!(ttl > 0, "a tier-1 key without expiry (pttl {ttl})");
    let memory_usage_one = servers::memory_usage(&url, &key).await?;
    Ok(Tier1 {
        keys: total,
        used_before: before,
        used_after: after,
        bytes_per_key: (after - before) as f64 / total as f64,
        key_len: key.len(),
        value_len: value.len(),
        memory_usage_one,
        server_pid: scratch.pid(),
    })
}

/// Tier-2 bytes held by one tiered stream's filter keys on a standalone
/// server: RedisBloom filters (`:f:`) or bitmap shards (`:b:`), summed
/// over the generations the run wrote (normally one).
pub async fn tier2_bytes(
    url: &str,
    prefix: &str,
    stream: &str,
    kind: &str,
) -> anyhow::Result<(u64, usize)> {
    let keys = servers::keys_under(url, &format!("{prefix}{stream}:{kind}:*")).await?;
    let mut bytes = 0;
    for key in &keys {
        bytes += servers::memory_usage(url, key)
            .await
            .with_context(|| format!("MEMORY USAGE {}", String::from_utf8_lossy(key)))?;
    }
    ensure!(
        !keys.is_empty(),
        "no {kind} filter keys under {prefix}{stream}"
    );
    Ok((bytes, keys.len()))
}
