//! Figure 3: what a claim costs in Redis memory.
//!
//! Tier 1 is measured on a scratch `redis-server` started for the purpose,
//! so the shared servers' other keys (and other sessions writing to them)
//! cannot move `used_memory` while we read it. Tier 2 is read from the
//! filter keys a tiered run left on the shared servers, with `MEMORY USAGE`.

use anyhow::{ensure, Context};
use idemgate::store::redis::{RedisOptions, RedisStore, RedisTarget, Tier1Layout};
use idemgate::store::{ClaimOutcome, ClaimStore, Mode, Publish, StreamId, StreamSpec};

use idemgate_testkit::servers::{RedisServer, ServerOptions};

use super::servers;
use super::throughput::{self, BATCH};

/// The default key prefix and a realistic stream name, so the key length
/// is what an operator would pay: the stream's keys live under its short
/// key id (`StreamSpec::new` derives it from the name).
const PREFIX: &str = "ig:";
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
    /// Keys that are not claims (the stream's watermarks), written by the
    /// first batch before `used_before` was read.
    pub other_keys: u64,
    pub server_pid: u32,
}

/// One claim batch of `size` new hashes from `first` on in an exact
/// stream (stream 0) and its publish (watermark raises: the claims keep
/// the value their claim wrote), every claim checked won and every record
/// settled. `label` names the figure in the hashes and in errors.
pub(super) async fn claim_and_publish(
    store: &RedisStore,
    label: &str,
    first: u64,
    size: usize,
) -> anyhow::Result<()> {
    let stream = StreamId(0);
    let claims = throughput::batch(stream, label, first, size, false, throughput::now_ms());
    let claimed = store.round(&Publish::default(), &claims, &[]).await?;
    ensure!(
        claimed
            .outcomes
            .iter()
            .all(|o| *o == ClaimOutcome::Won { fresh: true }),
        "{label} batch at {first}: not every claim won"
    );
    throughput::settle(
        store,
        Mode::Exact,
        &claims,
        &claimed.outcomes,
        &claimed.watermarks,
    )
    .await
    .with_context(|| format!("{label} batch at {first}"))?;
    Ok(())
}

/// Claims then publishes `keys` distinct hashes (batches of 1000) in an
/// exact stream on a scratch server; reports the `used_memory` delta. An
/// unmeasured first batch writes the stream's watermarks (and loads the
/// scripts) before the first reading, so the delta is the claims' alone.
pub async fn tier1(keys: usize) -> anyhow::Result<Tier1> {
    let scratch =
        tokio::task::spawn_blocking(|| RedisServer::start("claims", ServerOptions::default()))
            .await
            .context("starting a scratch redis-server")?;
    let url = scratch.url();
    let template = throughput::streams().remove(0);
    ensure!(
        template.mode == Mode::Exact,
        "tier-1 figure needs the exact stream"
    );
    let spec = StreamSpec::new(STREAM, template.mode, template.tier1_ttl, None);
    // One key per claim: this figure is the keys layout's (`live.rs`
    // measures both layouts per live claim).
    let options = RedisOptions {
        tier1_layout: Some(Tier1Layout::Keys),
        ..RedisOptions::new(RedisTarget::Standalone(url.clone()), PREFIX)
    };
    let store = RedisStore::connect(&options, vec![spec]).await?;
    let stream = StreamId(0);
    let mut conn = servers::node(&url).await?;

    claim_and_publish(&store, "footprint", 0, BATCH).await?;
    let dbsize0: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
    let other_keys = dbsize0.saturating_sub(BATCH as u64);
    ensure!(
        other_keys <= throughput::PARTITIONS as u64,
        "after one batch of {BATCH} claims the server holds {dbsize0} keys: more besides the \
         claims than one watermark key per partition"
    );
    let before = servers::used_memory(&url).await?;
    let batches = keys.div_ceil(BATCH);
    for b in 1..=batches {
        claim_and_publish(&store, "footprint", (b * BATCH) as u64, BATCH).await?;
    }
    let after = servers::used_memory(&url).await?;

    let total = (batches * BATCH) as u64;
    let dbsize: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
    ensure!(
        dbsize - dbsize0 == total,
        "scratch server gained {} keys, expected {total}",
        dbsize - dbsize0
    );

    let key = store.tier1_key(stream, &throughput::hash("footprint", BATCH as u64))?;
    let value: Vec<u8> = redis::cmd("GET").arg(&key).query_async(&mut conn).await?;
    ensure!(
        !value.is_empty(),
        "no tier-1 value under the key tier1_key names"
    );
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
        other_keys,
        server_pid: scratch.pid(),
    })
}

/// Tier-2 bytes held by one tiered stream's filter keys on a standalone
/// server: RedisBloom filters (`:f:`) or bitmap shards (`:b:`) under the
/// stream's key id, summed over the generations the run wrote (normally
/// one).
pub async fn tier2_bytes(
    url: &str,
    prefix: &str,
    spec: &StreamSpec,
    kind: &str,
) -> anyhow::Result<(u64, usize)> {
    let namespace = format!("{prefix}{}", spec.key_id);
    let keys = servers::keys_under(url, &format!("{namespace}:{kind}:*")).await?;
    let mut bytes = 0;
    for key in &keys {
        bytes += servers::memory_usage(url, key)
            .await
            .with_context(|| format!("MEMORY USAGE {}", String::from_utf8_lossy(key)))?;
    }
    ensure!(
        !keys.is_empty(),
        "no {kind} filter keys under {namespace} (stream {})",
        spec.name
    );
    Ok((bytes, keys.len()))
}
