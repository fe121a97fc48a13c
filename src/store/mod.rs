//! The claim store: where a source hash is claimed before anything else
//! happens to its record (docs/design.md §4-§6).
//!
//! The contract is batch-first and settles claims by delivered offsets
//! (docs/design.md §4): one `round` call publishes what the previous batches
//! delivered (tier-2 inserts, per-partition watermarks, done flags, the rare
//! release) and claims the next batch's hashes, in one round trip.
//!
//! Time is a parameter of every request, never read from a clock inside the
//! store: the worker passes wall time (or, with the memory store, event
//! time), and tests say "nine hours later" with explicit timestamps.

mod error;
mod generations;
mod identity;
mod judge;
pub(crate) mod marks;
pub mod memory;
mod operator;
pub mod postgres;
pub mod redis;
mod runs;
mod value;

use std::time::Duration;

use async_trait::async_trait;

use crate::clock::Millis;
use crate::coordinates::{Coordinates, TopicTag};
use crate::fingerprint::{PayloadDigest, SourceHash};
use crate::tier::Tier;

pub use error::{Rejection, RejectionCause, StoreError};
pub use generations::{FilterSizing, GenerationPlan};
pub(crate) use identity::lost_among;
pub use identity::{
    at_start, check_identity, first_or_lost, AtStart, Check, IdentityFound, Refusal, StoreIdentity,
    WENT_BACK,
};
pub use marks::Marked;
pub use operator::{add_abandoned, PartitionRanges, PartitionReset, Restored, MAX_ABANDONED};
pub use runs::RunsName;

/// Who holds a claim: the replica's incarnation (random at every start) in
/// the high 24 bits, its assignment attempt in the low 8. Written into the
/// claim; release and done flags compare it, so a stalled replica (a
/// zombie) cannot free or settle a claim that its partition's new owner
/// has re-stamped (docs/design.md §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnerToken(pub u32);

impl OwnerToken {
    pub fn new(incarnation: u32, attempt: u8) -> OwnerToken {
        OwnerToken((incarnation << 8) | u32::from(attempt))
    }

    /// The same incarnation at its next assignment.
    pub fn next_attempt(self) -> OwnerToken {
        OwnerToken((self.0 & !0xff) | (self.0.wrapping_add(1) & 0xff))
    }
}

/// Index of a stream in the list the store was built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub usize);

/// Whether a stream remembers hashes only as exact keys, or exact keys for
/// the recent window plus Bloom generations for the long tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Exact,
    Tiered,
}

/// What the store needs to know of a stream. Built from the validated
/// config, so the cross-field rules already hold here.
#[derive(Clone, Debug)]
pub struct StreamSpec {
    /// The stream's name, for metrics and logs.
    pub name: String,
    /// The stream's key namespace in the store: short, so every tier-1 key
    /// stays in a small allocation class. Two streams never share one (the
    /// config refuses it).
    pub key_id: String,
    pub mode: Mode,
    /// How long a claim stays an exact key, from the moment it is written.
    pub tier1_ttl: Duration,
    /// Tier 2 (tiered mode only): generation length and sizing.
    pub filter: Option<GenerationPlan>,
    /// The stream's highest expected rate (events/s), where configured:
    /// sizes Redis's grouped tier 1 (`store/redis/grouped.rs`).
    pub peak_rate: Option<u64>,
}

impl StreamSpec {
    /// A spec whose key id is derived from its name.
    pub fn new(
        name: impl Into<String>,
        mode: Mode,
        tier1_ttl: Duration,
        filter: Option<GenerationPlan>,
    ) -> StreamSpec {
        let name = name.into();
        StreamSpec {
            key_id: key_id(&name),
            name,
            mode,
            tier1_ttl,
            filter,
            peak_rate: None,
        }
    }

    /// How long a partition's delivered watermark is kept after its last
    /// raise: well past anything it settles (every claim and filter
    /// generation of the stream), so a replay finds it, and at least a week.
    pub fn watermark_ttl(&self) -> Duration {
        let longest = self.filter.as_ref().map_or(self.tier1_ttl, |plan| {
            self.tier1_ttl.max(plan.horizon * (plan.slots + 1))
        });
        (longest * 2).max(Duration::from_secs(7 * 24 * 3600))
    }
}

/// Two characters of base 62 over SHA-256 of the stream name.
pub fn key_id(name: &str) -> String {
    use sha2::{Digest, Sha256};
    const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let digest = Sha256::digest(name.as_bytes());
    let n = usize::from(u16::from_be_bytes([digest[0], digest[1]])) % (62 * 62);
    [ALPHABET[n / 62] as char, ALPHABET[n % 62] as char]
        .iter()
        .collect()
}

/// One record asking for its hash.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    pub stream: StreamId,
    pub hash: SourceHash,
    pub digest: PayloadDigest,
    pub holder: Coordinates,
    pub token: OwnerToken,
    /// The stream's clock (wall time, or the record's timestamp with the
    /// memory store on event time): tier-1 keys and filter generations age
    /// on it.
    pub at: Millis,
    /// The replicas write a record's hash to tier 2 before its output is
    /// final (exactly once: before the transaction commits, and an abort
    /// leaves it there): a filter hit beside the record's own unsettled
    /// claim may be its own hash. At least once, the hash goes in with the
    /// claim's settlement (docs/design.md §4.4).
    pub early_inserts: bool,
}

/// A claim this replica holds, named for a compare-and-set: a done flag or
/// a release applies only while the claim still carries this holder and
/// token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub stream: StreamId,
    pub hash: SourceHash,
    pub holder: Coordinates,
    pub token: OwnerToken,
}

impl From<&Claim> for Held {
    fn from(claim: &Claim) -> Held {
        Held {
            stream: claim.stream,
            hash: claim.hash,
            holder: claim.holder,
            token: claim.token,
        }
    }
}

/// Raise a partition's delivered watermark over a finished prefix
/// `[start, end)` of this owner's range (docs/design.md §4.3): only if the
/// watermark is at or above `start` (an absent one counts as `start`), so an
/// owner that began above it (an offset skip) never vouches for records it
/// did not see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raise {
    pub stream: StreamId,
    pub topic: TopicTag,
    pub partition: i32,
    pub start: i64,
    pub end: i64,
}

/// A delivered hash going into tier 2 (tiered streams only; others ignore
/// it).
#[derive(Clone, Copy, Debug)]
pub struct Insert {
    pub stream: StreamId,
    pub hash: SourceHash,
    pub at: Millis,
}

/// A run `[start, end)` of a partition's offsets whose hashes its owner is
/// about to write to tier 2 before its transaction commits (exactly once).
/// Noted, and acknowledged, before those inserts: an aborted transaction
/// leaves its inserts, and the partition's next owner, meeting a record's
/// own unsettled claim beside a filter hit, tells from these runs whether
/// the hit may be the record's own hash (docs/design.md §4.4 rule 5).
/// `below` is the partition's watermark as the owner knows it: runs under
/// it settle nothing any more and are dropped; `at` is the latest time its
/// records' claims carried, on the stream's clock (a store that ages keys
/// on those times ages runs on them too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EarlyRun {
    pub stream: StreamId,
    pub topic: TopicTag,
    pub partition: i32,
    pub start: i64,
    pub end: i64,
    pub below: Option<i64>,
    pub at: Millis,
}

/// What a round writes before it reads: every write is idempotent, so a
/// round that failed is sent again whole.
#[derive(Clone, Debug, Default)]
pub struct Publish {
    /// Applied first, and acknowledged before any watermark in the same
    /// round is raised: a raised watermark never covers a hash tier 2 lacks.
    pub inserts: Vec<Insert>,
    pub raises: Vec<Raise>,
    /// Set the done flag on these claims (compare and set on holder and
    /// token; the key keeps its expiry).
    pub done: Vec<Held>,
    /// Delete these pending claims (compare and set on holder and token).
    pub releases: Vec<Held>,
}

impl Publish {
    pub fn is_empty(&self) -> bool {
        self.inserts.is_empty()
            && self.raises.is_empty()
            && self.done.is_empty()
            && self.releases.is_empty()
    }
}

/// One partition's delivered watermark, as read in a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermark {
    pub stream: StreamId,
    pub topic: TopicTag,
    pub partition: i32,
    /// Every record of the partition below this offset was decided and its
    /// output delivered.
    pub below: i64,
}

/// The answer to one round, every list in request order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundAnswer {
    /// Per raise: the watermark after it. Below the raise's `end` means
    /// the raise was refused (its owner began above the watermark): those
    /// records settle by done flags.
    pub raised: Vec<i64>,
    /// Per done flag: set (now or before) with this holder and token;
    /// `false` where the claim is gone or carries another token.
    pub done: Vec<bool>,
    /// Per release: the claim was deleted.
    pub released: Vec<bool>,
    /// Every partition's watermark of every stream read (the streams asked
    /// for and those of the claims), after this round's raises.
    pub watermarks: Vec<Watermark>,
    /// The reset ranges of the partitions read that have any.
    pub ranges: Vec<PartitionRanges>,
    pub outcomes: Vec<ClaimOutcome>,
    /// Indices of the claims that took over an abandoned holder's
    /// unsettled claim (their outcome is `Won { fresh: false }`).
    pub taken_over: Vec<usize>,
    /// Streams whose identity this round found missing or changed beside
    /// its claims (docs/design.md §8.2): the store lost their state, and
    /// every claim of theirs in the round answers `StoreLost`.
    pub lost: Vec<StreamLost>,
}

/// A stream whose store lost its state, as a round found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamLost {
    pub stream: StreamId,
    pub how: Check,
}

/// The store's answer for one claimed record (docs/design.md §4.2, §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This record holds the claim: `fresh` where it wrote it in this
    /// round (or an earlier attempt of the same owner did), not where it
    /// met its own unsettled claim from an earlier owner and re-stamped it.
    /// Only a fresh claim may ever be released.
    Won { fresh: bool },
    /// The record was decided and delivered before (it is below its
    /// partition's watermark, or met its own settled claim): it produces
    /// nothing.
    Replayed,
    /// Another record holds an unsettled claim: not decided yet, claim
    /// again later.
    Held { holder: Coordinates },
    /// Another record's claim is settled (exact), or the filter knows the
    /// hash (filter; the record then holds the tier-1 claim it just wrote,
    /// to be settled like a novel record's).
    Duplicate {
        tier: Tier,
        holder: Option<Coordinates>,
    },
    /// Another record's settled claim has another payload digest.
    Conflict { holder: Coordinates },
    /// The record lies in its partition's re-emit range and was decided
    /// and delivered before as its claim's holder: its clean output is
    /// produced again, marked `idemgate-replay`; it holds nothing to
    /// settle.
    Reemit,
    /// The store lost the stream's state (its identity is missing or
    /// changed beside this claim, docs/design.md §8.2): nothing was judged,
    /// and nothing may be decided from what the store holds now.
    StoreLost,
}

impl ClaimOutcome {
    /// Whether the record now holds a tier-1 claim that its publish must
    /// settle (by the watermark or a done flag).
    pub fn holds_claim(&self) -> bool {
        matches!(
            self,
            ClaimOutcome::Won { .. }
                | ClaimOutcome::Duplicate {
                    tier: Tier::Filter,
                    ..
                }
        )
    }
}

/// Figures an operator watches on the store.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoreStats {
    /// Keys the server evicted since it started: must stay 0, since an
    /// eviction silently shortens a TTL.
    pub evicted_keys: u64,
    /// Per tiered stream: inserts into the current generation and its
    /// capacity.
    pub filters: Vec<FilterFill>,
    /// Redis, per stream: the most live claims one of its grouped tier-1
    /// hashes held at a sweep since the last reading (0 where nothing was
    /// swept; none on other stores).
    pub tier1_hash_fields: Vec<(String, u64)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FilterFill {
    pub stream: String,
    pub inserts: u64,
    pub capacity: u64,
}

/// The claim protocol (docs/design.md §4): a batch's claims and the
/// previous batch's publish travel together, one round trip in steady state.
#[async_trait]
pub trait ClaimStore: Send + Sync {
    /// Applies `publish` (inserts, then raises, done flags and releases),
    /// then reads the watermarks of the streams in `read` and of the
    /// claims, then claims every hash: `SET NX PX tier1_ttl GET` with the
    /// tier-2 probe, judged against the watermarks just read. A stream
    /// whose adopted identity is missing or changed beside its claims is
    /// answered lost, and none of its claims is judged (docs/design.md
    /// §8.2).
    async fn round(
        &self,
        publish: &Publish,
        claims: &[Claim],
        read: &[StreamId],
    ) -> Result<RoundAnswer, StoreError>;

    /// Claims only.
    async fn claim(&self, claims: &[Claim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        Ok(self.round(&Publish::default(), claims, &[]).await?.outcomes)
    }

    /// Publishes only.
    async fn publish(&self, publish: &Publish) -> Result<RoundAnswer, StoreError> {
        self.round(publish, &[], &[]).await
    }

    /// Notes the runs of offsets whose hashes the inserts that follow write
    /// to tier 2 before a transaction commits (exactly once), beside what
    /// earlier owners noted: answered only once they are kept. No default:
    /// a store that wraps another must pass them on, or the next owner
    /// takes a late copy's filter hit for its own hash.
    async fn note_early_inserts(&self, runs: &[EarlyRun]) -> Result<(), StoreError>;

    /// Evicted keys and filter fill, for metrics.
    async fn stats(&self, at: Millis) -> Result<StoreStats, StoreError>;

    /// Reads a stream's store identity at every place the store keeps it
    /// (docs/design.md §8.2): on Redis beside each hash tag.
    async fn find_identity(&self, stream: StreamId) -> Result<IdentityFound, StoreError>;

    /// Writes a stream's identity at every place and answers what is there
    /// now. Without `replace` a place that holds one keeps it, and the
    /// first place decides what the others get: replicas starting together
    /// agree on one. `idemgate rebuild` replaces.
    async fn write_identity(
        &self,
        stream: StreamId,
        identity: StoreIdentity,
        replace: bool,
    ) -> Result<IdentityFound, StoreError>;

    /// Reads the identity of each stream in `streams` that adopted one, at
    /// every place the store keeps it (on Redis each of the 64 hash tags,
    /// so every cluster node serving one), in one pipelined read, and
    /// answers those whose identity is missing or changed at some place
    /// (docs/design.md §8.2): the worker's timed check, which sees a quiet
    /// stream's loss without a round. Writes nothing. A store that does
    /// not answer is an error (an outage), never a loss.
    async fn verify_identity(&self, streams: &[StreamId]) -> Result<Vec<StreamLost>, StoreError>;

    /// From now on every round reads the stream's identity beside the
    /// claims it makes and compares it with this one; a stream whose
    /// identity was never adopted is not compared.
    fn adopt_identity(&self, stream: StreamId, identity: StoreIdentity);

    /// Bumps every place's progress mark of `stream` (docs/design.md
    /// §8.2, `marks.rs`), refusing where a mark lies below this replica's
    /// floor: the pre-commit store step, whose answer the commit records.
    /// A store that keeps no marks answers `Unkept`. A store that wraps
    /// another must pass this and the two below on.
    async fn advance_marks(&self, stream: StreamId) -> Result<Marked, StoreError> {
        let _ = stream;
        Ok(Marked::Unkept)
    }

    /// Compares every place's progress mark of `stream` with this
    /// replica's floor, bumping nothing: at start, and in the timed check.
    async fn check_marks(&self, stream: StreamId) -> Result<Marked, StoreError> {
        let _ = stream;
        Ok(Marked::Unkept)
    }

    /// Raises this replica's floors of `stream` to marks a commit recorded
    /// (every place's, in place order); where one rose, the next round
    /// checks the marks before it claims.
    fn raise_floors(&self, stream: StreamId, marks: &[u64]) {
        let _ = (stream, marks);
    }

    /// Raises the store's marks of `stream` to at least `marks` (every
    /// place's, in place order): only `idemgate rebuild` calls it, so
    /// replicas that read the commits' marks start on the rebuilt store.
    async fn restore_marks(&self, stream: StreamId, marks: &[u64]) -> Result<(), StoreError> {
        let _ = (stream, marks);
        Ok(())
    }

    /// Writes settled claims back (`idemgate rebuild`, docs/design.md
    /// §8.3), over whatever the store holds for their hashes: the clean
    /// topic is what was delivered. Only the rebuild calls it, while the
    /// group has no members.
    async fn restore(&self, claims: &[Restored]) -> Result<(), StoreError> {
        let _ = claims;
        Err(StoreError::Refused(
            "this store does not restore claims".into(),
        ))
    }

    /// Writes a record of finished runs (docs/design.md §7) under its
    /// unique name, to expire the stream's watermark TTL after `at`. A
    /// name is never written with other content: writing it again (a
    /// retry) changes nothing but the expiry.
    async fn put_runs(&self, name: &RunsName, content: &[u8], at: Millis)
        -> Result<(), StoreError>;

    /// A record's content; `None` where the store lacks it (never written,
    /// expired by `at`, deleted, or lost).
    async fn get_runs(&self, name: &RunsName, at: Millis) -> Result<Option<Vec<u8>>, StoreError>;

    /// Moves a record's expiry on to the stream's watermark TTL after
    /// `at` (a commit names it again); `false` where the store lacks it.
    async fn refresh_runs(&self, name: &RunsName, at: Millis) -> Result<bool, StoreError>;

    /// Deletes records: only their writer calls it, once a later commit of
    /// its own is known committed. Absent ones are no error.
    async fn delete_runs(&self, names: &[RunsName]) -> Result<(), StoreError>;

    /// Records an operator's reset (docs/design.md §4.9): watermark raises,
    /// abandoned ranges, re-emit ranges. Only `idemgate reset` calls it,
    /// while the group has no members.
    async fn reset(&self, resets: &[PartitionReset]) -> Result<(), StoreError> {
        let _ = resets;
        Err(StoreError::Refused(
            "this store does not record resets".into(),
        ))
    }
}

pub(crate) fn spec(streams: &[StreamSpec], id: StreamId) -> Result<&StreamSpec, StoreError> {
    streams.get(id.0).ok_or(StoreError::UnknownStream(id.0))
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
