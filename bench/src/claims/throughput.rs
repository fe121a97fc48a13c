//! Figure 2: claim-batch throughput per backend and stream mode, and the
//! round trips a batch costs where they can be counted (see `proxy.rs`).
//!
//! Each batch follows the worker's order: claim the batch, then finalize
//! it (its outputs were "delivered"). A later pass claims the same hashes
//! again from other records, as a redelivery would: every one of those must
//! come back a tier-1 duplicate naming the original holder.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::ensure;
use idemgate::fingerprint::{PayloadDigest, SourceHash};
use idemgate::store::{
    Claim, ClaimOutcome, ClaimStore, Coordinates, FilterSizing, GenerationPlan, Mode, Settle,
    StreamId, StreamSpec, Tier, TopicTag,
};
use sha2::{Digest, Sha256};

use crate::proxy::{Counts, Snapshot};

/// The batch size the figures are for; the smoke pass uses smaller ones.
pub const BATCH: usize = 1000;
pub const EXACT: StreamId = StreamId(0);
pub const TIERED: StreamId = StreamId(1);
/// Redeliveries carry offsets this far past the originals: other records,
/// same hashes and payloads.
const REDELIVERY_SHIFT: i64 = 1 << 40;

/// A filter generation sized for a million keys a horizon at 1e-3, as a
/// mid-sized tiered stream would be configured.
pub fn sizing() -> FilterSizing {
    FilterSizing::new(1_000_000, 1e-3)
}

/// The two streams every store is built with. TTLs are short enough that
/// anything a failed run leaves behind expires on its own within hours.
pub fn streams() -> Vec<StreamSpec> {
    vec![
        StreamSpec {
            name: "bench-exact".into(),
            mode: Mode::Exact,
            lease: Duration::from_secs(60),
            tier1_ttl: Duration::from_secs(3600),
            filter: None,
        },
        StreamSpec {
            name: "bench-tiered".into(),
            mode: Mode::Tiered,
            lease: Duration::from_secs(60),
            tier1_ttl: Duration::from_secs(3600),
            filter: Some(GenerationPlan {
                horizon: Duration::from_secs(6 * 3600),
                slots: 2,
                skew: Duration::from_secs(5),
                sizing: sizing(),
            }),
        },
    ]
}

pub fn mode_name(stream: StreamId) -> &'static str {
    if stream == EXACT {
        "exact"
    } else {
        "tiered"
    }
}

/// Wall time: Redis enforces TTLs on its own clock, so the store must be
/// told the same time.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub fn hash(salt: &str, n: u64) -> SourceHash {
    SourceHash(Sha256::digest(format!("{salt}/{n}")).into())
}

fn holder(offset: i64) -> Coordinates {
    Coordinates {
        topic: TopicTag::of("bench.raw"),
        partition: (offset % 12) as i32,
        offset,
    }
}

fn digest(n: u64) -> PayloadDigest {
    PayloadDigest(n.to_be_bytes())
}

/// Claims of records `first..first+size`, from the originals or from
/// their redeliveries.
pub fn batch(
    stream: StreamId,
    salt: &str,
    first: u64,
    size: usize,
    redelivery: bool,
    at: i64,
) -> Vec<Claim> {
    (first..first + size as u64)
        .map(|n| Claim {
            stream,
            hash: hash(salt, n),
            digest: digest(n),
            holder: holder(n as i64 + if redelivery { REDELIVERY_SHIFT } else { 0 }),
            at,
            wall: at,
        })
        .collect()
}

/// Seconds spent in the store, summed over batches, per phase.
#[derive(Default)]
struct Timings {
    claim_new: Duration,
    finalize_new: Duration,
    claim_duplicate: Duration,
}

/// Round trips and commands per batch, per phase.
#[derive(Clone, Copy, Debug, Default)]
pub struct Trips {
    pub claim: Snapshot,
    pub finalize: Snapshot,
    pub duplicate: Snapshot,
    pub batches: u64,
    pub size: usize,
}

pub struct Row {
    pub backend: String,
    pub mode: &'static str,
    pub batch: usize,
    pub records: usize,
    pub claim_new: f64,
    pub claim_finalize_new: f64,
    pub claim_duplicate: f64,
    pub trips: Option<Trips>,
    pub cpu: Option<Cpu>,
}

/// CPU seconds spent per record over the three timed phases (new claim,
/// finalize, duplicate claim), against the wall time of those phases: shows
/// whether the client or the server is the limit on this machine.
#[derive(Clone, Copy, Debug)]
pub struct Cpu {
    pub wall_us: f64,
    pub client_us: f64,
    /// `None` for the in-process store.
    pub server_us: Option<f64>,
}

fn check_new(outcomes: &[ClaimOutcome]) -> anyhow::Result<()> {
    let won = outcomes.iter().filter(|o| **o == ClaimOutcome::Won).count();
    ensure!(
        won == outcomes.len(),
        "unseen hashes: {won} of {} won, first other outcome {:?}",
        outcomes.len(),
        outcomes.iter().find(|o| **o != ClaimOutcome::Won)
    );
    Ok(())
}

fn check_done(done: &[bool]) -> anyhow::Result<()> {
    let count = done.iter().filter(|d| **d).count();
    ensure!(
        count == done.len(),
        "finalize: {count} of {} done",
        done.len()
    );
    Ok(())
}

fn check_duplicates(claims: &[Claim], outcomes: &[ClaimOutcome]) -> anyhow::Result<()> {
    for (claim, outcome) in claims.iter().zip(outcomes) {
        let original = holder(claim.holder.offset - REDELIVERY_SHIFT);
        let expected = ClaimOutcome::Duplicate {
            tier: Tier::Exact,
            holder: Some(original),
        };
        ensure!(
            *outcome == expected,
            "redelivery of offset {}: {outcome:?}, expected {expected:?}",
            original.offset
        );
    }
    ensure!(claims.len() == outcomes.len(), "outcome count");
    Ok(())
}

/// One batch through all three phases, timed (and counted when `counts`
/// is given). Only the store calls are inside the clocks.
async fn one_batch(
    store: &dyn ClaimStore,
    stream: StreamId,
    salt: &str,
    first: u64,
    size: usize,
    times: &mut Timings,
    counts: Option<(&Counts, &mut Trips)>,
) -> anyhow::Result<()> {
    let at = now_ms();
    let claims = batch(stream, salt, first, size, false, at);
    let settles: Vec<Settle> = claims.iter().map(Settle::from).collect();
    let redeliveries = batch(stream, salt, first, size, true, at);
    let snap = || {
        counts
            .as_ref()
            .map(|(c, _)| c.snapshot())
            .unwrap_or_default()
    };

    let (s0, t0) = (snap(), Instant::now());
    let outcomes = store.claim(&claims).await?;
    let (s1, t1) = (snap(), Instant::now());
    let done = store.finalize(&settles).await?;
    let (s2, t2) = (snap(), Instant::now());
    let again = store.claim(&redeliveries).await?;
    let (s3, t3) = (snap(), Instant::now());

    check_new(&outcomes)?;
    check_done(&done)?;
    check_duplicates(&redeliveries, &again)?;
    times.claim_new += t1 - t0;
    times.finalize_new += t2 - t1;
    times.claim_duplicate += t3 - t2;
    if let Some((_, trips)) = counts {
        trips.claim = trips.claim + (s1 - s0);
        trips.finalize = trips.finalize + (s2 - s1);
        trips.duplicate = trips.duplicate + (s3 - s2);
        trips.batches += 1;
    }
    Ok(())
}

/// How many batches of which size a phase runs.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub batches: usize,
    pub size: usize,
}

/// One untimed batch through all phases: loads the Lua scripts and creates
/// the filter generation, so the timed batches see a warm server.
pub async fn warm_up(
    store: &dyn ClaimStore,
    stream: StreamId,
    salt: &str,
    size: usize,
) -> anyhow::Result<()> {
    let salt = format!("{salt}/warm");
    one_batch(store, stream, &salt, 0, size, &mut Timings::default(), None).await
}

/// Runs the timed batches on one stream (after `warm_up`). Duplicates are
/// claimed batch by batch right after their originals are finalized; their
/// time is summed separately.
pub async fn measure(
    backend: &str,
    store: &dyn ClaimStore,
    stream: StreamId,
    salt: &str,
    load: Load,
) -> anyhow::Result<Row> {
    let mut times = Timings::default();
    for b in 0..load.batches {
        let first = (b * load.size) as u64;
        one_batch(store, stream, salt, first, load.size, &mut times, None).await?;
    }
    let records = load.batches * load.size;
    let rate = |d: Duration| records as f64 / d.as_secs_f64();
    Ok(Row {
        backend: backend.to_string(),
        mode: mode_name(stream),
        batch: load.size,
        records,
        claim_new: rate(times.claim_new),
        claim_finalize_new: rate(times.claim_new + times.finalize_new),
        claim_duplicate: rate(times.claim_duplicate),
        trips: None,
        cpu: None,
    })
}

/// Counts round trips over the batches through a proxied store.
pub async fn count(
    store: &dyn ClaimStore,
    counts: &Counts,
    stream: StreamId,
    salt: &str,
    load: Load,
) -> anyhow::Result<Trips> {
    let mut trips = Trips {
        size: load.size,
        ..Trips::default()
    };
    let mut times = Timings::default();
    for b in 0..load.batches {
        let first = (b * load.size) as u64;
        let counting = Some((counts, &mut trips));
        one_batch(store, stream, salt, first, load.size, &mut times, counting).await?;
    }
    Ok(trips)
}
