//! Figure 2: claim-batch throughput per backend and stream mode, and the
//! round trips a batch costs where they can be counted (see `proxy.rs`).
//!
//! Each batch follows the worker's order (docs/design.md §4.3): claim the
//! batch in one round, then, its outputs "delivered", publish it in another:
//! one watermark raise per partition over the batch's contiguous prefix,
//! done flags only for records a raise does not cover (none here: every
//! record of the batch is delivered and each pass's owner starts at its
//! partitions' watermarks), and the delivered hashes into tier 2 for the
//! tiered stream. The worker sends that publish with the next batch's
//! claims; here the two go in rounds of their own so each is timed and
//! counted apart. A later round claims the same hashes again from other
//! records, as a redelivery would: every one of those must come back a
//! tier-1 duplicate naming the original holder.
//!
//! Each pass (warm-up, timed, counted, footprint) reads a topic of its own
//! (its tag derived from the pass's salt), so its offsets start where no
//! watermark is: a pass never replays another's records.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::ensure;
use idemgate::coordinates::{Coordinates, TopicTag};
use idemgate::fingerprint::{PayloadDigest, SourceHash};
use idemgate::store::{
    Claim, ClaimOutcome, ClaimStore, FilterSizing, GenerationPlan, Held, Insert, Mode, OwnerToken,
    Publish, Raise, StreamId, StreamSpec, Watermark,
};
use idemgate::tier::Tier;
use sha2::{Digest, Sha256};

use crate::proxy::{Counts, Snapshot};

/// The batch size the figures are for; the smoke pass uses smaller ones.
pub const BATCH: usize = 1000;
pub const EXACT: StreamId = StreamId(0);
pub const TIERED: StreamId = StreamId(1);
/// Partitions of each pass's topic: record `n` is offset `n / PARTITIONS`
/// of partition `n % PARTITIONS`, so every partition's offsets are
/// contiguous, as Kafka's are.
pub const PARTITIONS: i64 = 12;
/// Redeliveries carry offsets this far past the originals: other records,
/// same hashes and payloads.
const REDELIVERY_SHIFT: i64 = 1 << 40;
/// The bench's one owner (incarnation and attempt), for every claim.
const OWNER: OwnerToken = OwnerToken((0xbe_c4 << 8) | 1);

/// A filter generation sized for a million keys a horizon at 1e-3, as a
/// mid-sized tiered stream would be configured.
pub fn sizing() -> FilterSizing {
    FilterSizing::new(1_000_000, 1e-3)
}

/// The two streams every store is built with. TTLs are short enough that
/// anything a failed run leaves behind expires on its own within hours.
pub fn streams() -> Vec<StreamSpec> {
    vec![
        StreamSpec::new("bench-exact", Mode::Exact, Duration::from_secs(3600), None),
        StreamSpec::new(
            "bench-tiered",
            Mode::Tiered,
            Duration::from_secs(3600),
            Some(GenerationPlan {
                horizon: Duration::from_secs(6 * 3600),
                slots: 2,
                skew: Duration::from_secs(5),
                sizing: sizing(),
            }),
        ),
    ]
}

pub fn mode_name(stream: StreamId) -> &'static str {
    match mode_of(stream) {
        Mode::Exact => "exact",
        Mode::Tiered => "tiered",
    }
}

/// The mode of a stream of `streams()`.
pub fn mode_of(stream: StreamId) -> Mode {
    if stream == EXACT {
        Mode::Exact
    } else {
        Mode::Tiered
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

/// The input topic of a pass.
fn topic(salt: &str) -> TopicTag {
    TopicTag::of(&format!("bench.raw.{salt}"))
}

fn holder(topic: TopicTag, n: u64) -> Coordinates {
    let n = n as i64;
    Coordinates {
        topic,
        partition: (n % PARTITIONS) as i32,
        offset: n / PARTITIONS,
    }
}

fn digest(n: u64) -> PayloadDigest {
    PayloadDigest(n.to_be_bytes())
}

/// Claims of records `first..first+size` of the pass `salt`, from the
/// originals or from their redeliveries.
pub fn batch(
    stream: StreamId,
    salt: &str,
    first: u64,
    size: usize,
    redelivery: bool,
    at: i64,
) -> Vec<Claim> {
    let topic = topic(salt);
    (first..first + size as u64)
        .map(|n| {
            let mut holder = holder(topic, n);
            if redelivery {
                holder.offset += REDELIVERY_SHIFT;
            }
            Claim {
                stream,
                hash: hash(salt, n),
                digest: digest(n),
                holder,
                token: OWNER,
                at,
                early_inserts: false,
            }
        })
        .collect()
}

/// The publish of a batch whose every output was delivered, as the worker
/// builds it: per partition, a raise over `[start, end)` (`start` the
/// batch's first offset there, `end` past its last) where the watermark the
/// claim round read is absent or at `start` or above; otherwise (an owner
/// that began above the watermark) a done flag on each of the partition's
/// records that holds its claim. Tiered streams also insert the hashes of
/// the records delivered as novel.
pub fn publish_for(
    mode: Mode,
    claims: &[Claim],
    outcomes: &[ClaimOutcome],
    read: &[Watermark],
) -> Publish {
    let mut prefixes: BTreeMap<(TopicTag, i32), (i64, i64)> = BTreeMap::new();
    for claim in claims {
        let h = claim.holder;
        let range = prefixes
            .entry((h.topic, h.partition))
            .or_insert((h.offset, h.offset + 1));
        range.0 = range.0.min(h.offset);
        range.1 = range.1.max(h.offset + 1);
    }
    let stream = claims.first().map_or(StreamId(0), |c| c.stream);
    let below = |topic: TopicTag, partition: i32| {
        read.iter()
            .find(|w| w.stream == stream && w.topic == topic && w.partition == partition)
            .map(|w| w.below)
    };
    let mut publish = Publish::default();
    for (&(topic, partition), &(start, end)) in &prefixes {
        if below(topic, partition).is_none_or(|w| w >= start) {
            publish.raises.push(Raise {
                stream,
                topic,
                partition,
                start,
                end,
            });
        } else {
            publish.done.extend(
                claims
                    .iter()
                    .zip(outcomes)
                    .filter(|(c, o)| {
                        o.holds_claim()
                            && c.holder.topic == topic
                            && c.holder.partition == partition
                    })
                    .map(|(c, _)| Held::from(c)),
            );
        }
    }
    if mode == Mode::Tiered {
        publish.inserts = claims
            .iter()
            .zip(outcomes)
            .filter(|(_, o)| matches!(o, ClaimOutcome::Won { .. }))
            .map(|(c, _)| Insert {
                stream,
                hash: c.hash,
                at: c.at,
            })
            .collect();
    }
    publish
}

/// Publishes a delivered batch and checks every record of it was settled:
/// each raise reached its `end` and each done flag was set. A raise the
/// store refused (the watermark moved below its start after the claim
/// round read it) is followed by done flags on that partition's claims, in
/// one more round, as the worker's next publish would carry them.
pub async fn settle(
    store: &dyn ClaimStore,
    mode: Mode,
    claims: &[Claim],
    outcomes: &[ClaimOutcome],
    read: &[Watermark],
) -> anyhow::Result<Publish> {
    let publish = publish_for(mode, claims, outcomes, read);
    let answer = store.publish(&publish).await?;
    ensure!(
        answer.raised.len() == publish.raises.len() && answer.done.len() == publish.done.len(),
        "publish: {} raise and {} done answers for {} and {}",
        answer.raised.len(),
        answer.done.len(),
        publish.raises.len(),
        publish.done.len()
    );
    let refused: Vec<&Raise> = publish
        .raises
        .iter()
        .zip(&answer.raised)
        .filter(|(r, now)| **now < r.end)
        .map(|(r, _)| r)
        .collect();
    let mut done = answer.done;
    if !refused.is_empty() {
        let follow_up = Publish {
            done: claims
                .iter()
                .zip(outcomes)
                .filter(|(c, o)| {
                    o.holds_claim()
                        && refused
                            .iter()
                            .any(|r| r.topic == c.holder.topic && r.partition == c.holder.partition)
                })
                .map(|(c, _)| Held::from(c))
                .collect(),
            ..Publish::default()
        };
        done.extend(store.publish(&follow_up).await?.done);
    }
    let set = done.iter().filter(|d| **d).count();
    ensure!(
        set == done.len(),
        "publish: {set} of {} done flags set",
        done.len()
    );
    Ok(publish)
}

/// Seconds spent in the store, summed over batches, per phase.
#[derive(Default)]
struct Timings {
    claim_new: Duration,
    publish_new: Duration,
    claim_duplicate: Duration,
}

/// Round trips and commands per batch, per phase, and what the publishes
/// carried.
#[derive(Clone, Copy, Debug, Default)]
pub struct Trips {
    pub claim: Snapshot,
    pub publish: Snapshot,
    pub duplicate: Snapshot,
    pub batches: u64,
    pub size: usize,
    pub raises: u64,
    pub done_flags: u64,
    pub inserts: u64,
}

pub struct Row {
    pub backend: String,
    pub mode: &'static str,
    pub batch: usize,
    pub records: usize,
    pub claim_new: f64,
    pub claim_publish_new: f64,
    pub claim_duplicate: f64,
    pub trips: Option<Trips>,
    pub cpu: Option<Cpu>,
}

/// CPU seconds spent per record over the three timed phases (new claim,
/// publish, duplicate claim), against the wall time of those phases: shows
/// whether the client or the server is the limit on this machine.
#[derive(Clone, Copy, Debug)]
pub struct Cpu {
    pub wall_us: f64,
    pub client_us: f64,
    /// `None` for the in-process store.
    pub server_us: Option<f64>,
}

fn check_new(outcomes: &[ClaimOutcome], claims: &[Claim]) -> anyhow::Result<()> {
    let fresh = ClaimOutcome::Won { fresh: true };
    let won = outcomes.iter().filter(|o| **o == fresh).count();
    ensure!(
        won == claims.len() && outcomes.len() == claims.len(),
        "unseen hashes: {won} of {} won, first other outcome {:?}",
        claims.len(),
        outcomes.iter().find(|o| **o != fresh)
    );
    Ok(())
}

fn check_duplicates(claims: &[Claim], outcomes: &[ClaimOutcome]) -> anyhow::Result<()> {
    for (claim, outcome) in claims.iter().zip(outcomes) {
        let original = Coordinates {
            offset: claim.holder.offset - REDELIVERY_SHIFT,
            ..claim.holder
        };
        let expected = ClaimOutcome::Duplicate {
            tier: Tier::Exact,
            holder: Some(original),
        };
        ensure!(
            *outcome == expected,
            "redelivery of {original}: {outcome:?}, expected {expected:?}",
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
    let redeliveries = batch(stream, salt, first, size, true, at);
    let snap = || {
        counts
            .as_ref()
            .map(|(c, _)| c.snapshot())
            .unwrap_or_default()
    };

    let (s0, t0) = (snap(), Instant::now());
    let claimed = store.round(&Publish::default(), &claims, &[]).await?;
    let (s1, t1) = (snap(), Instant::now());
    check_new(&claimed.outcomes, &claims)?;
    let (s2, t2) = (snap(), Instant::now());
    let publish = settle(
        store,
        mode_of(stream),
        &claims,
        &claimed.outcomes,
        &claimed.watermarks,
    )
    .await?;
    let (s3, t3) = (snap(), Instant::now());
    let again = store.claim(&redeliveries).await?;
    let (s4, t4) = (snap(), Instant::now());

    check_duplicates(&redeliveries, &again)?;
    times.claim_new += t1 - t0;
    times.publish_new += t3 - t2;
    times.claim_duplicate += t4 - t3;
    if let Some((_, trips)) = counts {
        trips.claim = trips.claim + (s1 - s0);
        trips.publish = trips.publish + (s3 - s2);
        trips.duplicate = trips.duplicate + (s4 - s3);
        trips.batches += 1;
        trips.raises += publish.raises.len() as u64;
        trips.done_flags += publish.done.len() as u64;
        trips.inserts += publish.inserts.len() as u64;
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
/// the filter generation, so the timed batches see a warm server. It reads
/// a topic of its own, so the timed pass still starts without watermarks.
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
/// claimed batch by batch right after their originals are published; their
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
        claim_publish_new: rate(times.claim_new + times.publish_new),
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

#[cfg(test)]
mod tests {
    use super::*;
    use idemgate::store::memory::MemoryStore;

    #[tokio::test]
    async fn every_phase_checks_out_on_the_memory_store() {
        let store = MemoryStore::new(streams());
        let load = Load {
            batches: 3,
            size: 50,
        };
        for stream in [EXACT, TIERED] {
            warm_up(&store, stream, "test", load.size).await.unwrap();
            let row = measure("memory", &store, stream, "test", load)
                .await
                .unwrap();
            assert_eq!(row.records, 150);
            assert!(row.claim_new > 0.0 && row.claim_publish_new > 0.0);
        }
    }

    #[tokio::test]
    async fn a_partition_that_starts_above_its_watermark_is_settled_by_done_flags() {
        let store = MemoryStore::new(streams());
        let salt = "skip";
        // Partition 0's watermark stands at 2; this owner's records there
        // start at offset 5 (records 60..72 are offset 5 of each partition).
        let raise = Raise {
            stream: TIERED,
            topic: topic(salt),
            partition: 0,
            start: 0,
            end: 2,
        };
        let raises = Publish {
            raises: vec![raise],
            ..Publish::default()
        };
        store.publish(&raises).await.unwrap();
        let claims = batch(TIERED, salt, 60, 12, false, now_ms());
        let claimed = store
            .round(&Publish::default(), &claims, &[])
            .await
            .unwrap();
        let publish = settle(
            &store,
            Mode::Tiered,
            &claims,
            &claimed.outcomes,
            &claimed.watermarks,
        )
        .await
        .unwrap();
        assert_eq!(publish.raises.len(), 11);
        assert!(publish.raises.iter().all(|r| r.partition != 0));
        assert_eq!(publish.done, vec![Held::from(&claims[0])]);
        assert_eq!(publish.inserts.len(), 12);
        let again = batch(TIERED, salt, 60, 12, true, now_ms());
        let outcomes = store.claim(&again).await.unwrap();
        check_duplicates(&again, &outcomes).unwrap();
    }
}
