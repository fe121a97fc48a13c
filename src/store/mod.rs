//! The claim store: where a source hash is claimed before anything else
//! happens to its record (docs/design.md §4-§6).
//!
//! The contract is batch-first. The worker claims every hash of a poll batch
//! in one call, produces the outputs, then finalizes (claims whose output was
//! delivered) or releases (claims whose output failed) in one call each. Each
//! backend spends one round trip per tier per call.
//!
//! Time is a parameter of every request, never read from a clock inside the
//! store: the worker passes wall time (or, with the memory store, event
//! time), and tests say "nine hours later" with explicit timestamps.

mod generations;
mod judge;
pub mod memory;
pub mod redis;
mod value;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::fingerprint::{PayloadDigest, SourceHash};

pub use generations::{FilterSizing, GenerationPlan};

/// Milliseconds since the Unix epoch, on whichever clock the caller runs.
pub type Millis = i64;

/// Identifies a record within the stream: the claim holder. Compared
/// byte for byte to recognise a record meeting its own claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Coordinates {
    pub topic: TopicTag,
    pub partition: i32,
    pub offset: i64,
}

/// A 32-bit tag of an input topic's name. Stored instead of the name so
/// every tier-1 value has the same small size; the worker maps tags back to
/// the names of its stream's input topics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicTag(pub u32);

impl TopicTag {
    /// The first four bytes of SHA-256 over the topic name: stable across
    /// restarts, config reorderings and replicas.
    pub fn of(topic: &str) -> TopicTag {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(topic.as_bytes());
        TopicTag(u32::from_be_bytes([
            digest[0], digest[1], digest[2], digest[3],
        ]))
    }
}

impl fmt::Display for Coordinates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}/{}/{}", self.topic.0, self.partition, self.offset)
    }
}

/// Index of a stream in the list the store was built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// The stream's key namespace: two streams never see each other's hashes.
    pub name: String,
    pub mode: Mode,
    /// How long a pending claim holds before another record may take it;
    /// longer than any batch can take, shorter than `tier1_ttl`.
    pub lease: Duration,
    /// How long a done claim stays an exact key.
    pub tier1_ttl: Duration,
    /// Tier 2 (tiered mode only): generation length and sizing.
    pub filter: Option<GenerationPlan>,
}

/// One record asking for its hash.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    pub stream: StreamId,
    pub hash: SourceHash,
    pub digest: PayloadDigest,
    pub holder: Coordinates,
    /// The stream's clock (wall time, or the record's timestamp with the
    /// memory store on event time): done claims and filter generations
    /// age on it.
    pub at: Millis,
    /// Wall time of the claim. A lease bounds how long a batch may take, a
    /// processing-time matter, so pending claims lapse on this clock
    /// whatever clock the stream runs on. Equal to `at` on wall time.
    pub wall: Millis,
}

/// One record settling its claim: finalize after delivery, release after a
/// failed one.
#[derive(Clone, Copy, Debug)]
pub struct Settle {
    pub(crate) stream: StreamId,
    pub(crate) hash: SourceHash,
    /// Written into the done value, so a later copy with another payload is
    /// still told apart as a conflict even if the pending claim had lapsed.
    pub(crate) digest: PayloadDigest,
    pub(crate) holder: Coordinates,
    pub(crate) at: Millis,
}

impl From<&Claim> for Settle {
    fn from(claim: &Claim) -> Settle {
        Settle {
            stream: claim.stream,
            hash: claim.hash,
            digest: claim.digest,
            holder: claim.holder,
            at: claim.at,
        }
    }
}

/// State of a tier-1 claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimState {
    /// Claimed; the holder's output is not delivered yet.
    Pending,
    /// The holder's output was delivered.
    Done,
}

/// Which tier recognised a duplicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    Exact,
    Filter,
}

impl Tier {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Tier::Exact => "exact",
            Tier::Filter => "filter",
        }
    }
}

/// The store's answer for one claimed record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This record now holds a pending claim on the hash.
    Won,
    /// The claim is this record's own: it is coming back after a crash, a
    /// rebalance or an offset reset. Never a duplicate of itself.
    Own(ClaimState),
    /// Another record holds a pending claim: not decided yet, retry later.
    Held { holder: Coordinates },
    /// Another record's claim is done. The filter tier does not know the
    /// holder.
    Duplicate {
        tier: Tier,
        holder: Option<Coordinates>,
    },
    /// The key is done by another record whose payload digest differs.
    Conflict { holder: Coordinates },
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
}

#[derive(Clone, Debug, PartialEq)]
pub struct FilterFill {
    pub stream: String,
    pub inserts: u64,
    pub capacity: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The server did not answer or answered with an I/O error: the breaker
    /// counts these.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The server answered something the protocol does not allow.
    #[error("store protocol error: {0}")]
    Protocol(String),
    /// The server is set up in a way that would lose claims.
    #[error("store refused: {0}")]
    Refused(String),
    #[error("unknown stream index {0}")]
    UnknownStream(usize),
}

/// The claim protocol, batch-first. Outcomes come back in request order.
#[async_trait]
pub trait ClaimStore: Send + Sync {
    /// Claims every hash: tier 1 `SET NX` with the lease, then (tiered
    /// streams) the live filter generations for the hashes it won.
    async fn claim(&self, batch: &[Claim]) -> Result<Vec<ClaimOutcome>, StoreError>;

    /// Turns pending claims into done ones with the full tier-1 TTL, only
    /// where the record still holds its claim (or the key has lapsed and no
    /// one else took it), then adds the hashes to the current filter
    /// generation. `true` where the claim is now done by this record.
    async fn finalize(&self, batch: &[Settle]) -> Result<Vec<bool>, StoreError>;

    /// Deletes pending claims whose record still holds them. `true` where a
    /// claim was released.
    async fn release(&self, batch: &[Settle]) -> Result<Vec<bool>, StoreError>;

    /// Evicted keys and filter fill, for metrics.
    async fn stats(&self, at: Millis) -> Result<StoreStats, StoreError>;
}

pub(crate) fn spec(streams: &[StreamSpec], id: StreamId) -> Result<&StreamSpec, StoreError> {
    streams.get(id.0).ok_or(StoreError::UnknownStream(id.0))
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Builds the store a config names, with its streams.
pub async fn open(
    config: &crate::config::Config,
) -> Result<std::sync::Arc<dyn ClaimStore>, StoreError> {
    let streams: Vec<StreamSpec> = config.streams.iter().map(|s| s.spec.clone()).collect();
    Ok(match &config.store {
        crate::config::StoreConfig::Memory { .. } => {
            std::sync::Arc::new(memory::MemoryStore::new(streams))
        }
        crate::config::StoreConfig::Redis(options) => {
            std::sync::Arc::new(redis::RedisStore::connect(options, streams).await?)
        }
    })
}
