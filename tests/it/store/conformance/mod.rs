//! The `ClaimStore` contract (claim protocol version 2, docs/design.md §4),
//! written once and run against every backend (see `store/mod.rs`). Each
//! rule of §4 is a named test. Time is explicit: "nine hours later" is a
//! timestamp; where a tier-1 key must have expired by then, the harness is
//! told (`tier1_expired`): the memory store ages keys on the timestamps
//! alone, Redis on its own wall clock, so there the harness deletes the key.

use std::sync::Arc;
use std::time::Duration;

use idemgate::coordinates::{Coordinates, TopicTag};
use idemgate::fingerprint::{PayloadDigest, SourceHash};
use idemgate::store::{
    Claim, ClaimOutcome, ClaimStore, EarlyRun, FilterSizing, GenerationPlan, Held, Insert, Mode,
    OwnerToken, Publish, Raise, RoundAnswer, StreamId, StreamSpec, Watermark,
};
use idemgate::tier::Tier;
use idemgate::ttl::{measure_horizon, Delivery};
use sha2::{Digest, Sha256};

use super::{connections, ttls, Harness, Redis};

pub const HOUR: i64 = 3_600_000;
pub const MINUTE: i64 = 60_000;
/// A fixed epoch-aligned start, so rotation tests know their boundaries.
pub const T0: i64 = 1_800_000_000_000 / (12 * HOUR) * (12 * HOUR) + HOUR;

pub const EXACT: StreamId = StreamId(0);
pub const TIERED: StreamId = StreamId(1);
pub const FAST: StreamId = StreamId(2);
pub const SMALL: StreamId = StreamId(3);

/// The partition most tests' records come from.
pub const PARTITION: i32 = 3;
/// The owner of most tests' records, and the partition's next owner (the
/// same incarnation after a rebalance), and a stranger.
pub const TOKEN: OwnerToken = OwnerToken(0x0001_0100);
pub const NEXT: OwnerToken = OwnerToken(0x0001_0101);
pub const OTHER: OwnerToken = OwnerToken(0x0002_0100);

/// Four streams: exact with 12 h; tiered with a 12 h horizon over a 2 h
/// tier 1; a tiered one whose tier 1 lasts 30 s, so the filter alone has
/// to answer across a rotation; and a tiered one whose generations hold
/// only 100 hashes, to be overfilled.
pub fn streams() -> Vec<StreamSpec> {
    let plan = |horizon: Duration, capacity: u64| GenerationPlan {
        horizon,
        slots: 2,
        skew: Duration::from_secs(5),
        sizing: FilterSizing::new(capacity, 1e-3),
    };
    let spec = |name: &str, key_id: &str, mode, tier1_ttl, filter| StreamSpec {
        name: name.into(),
        key_id: key_id.into(),
        mode,
        tier1_ttl,
        filter,
        peak_rate: None,
    };
    let h = |hours: u64| Duration::from_secs(hours * 3600);
    vec![
        spec("exact", "ex", Mode::Exact, h(12), None),
        spec(
            "tiered",
            "ti",
            Mode::Tiered,
            h(2),
            Some(plan(h(12), 20_000)),
        ),
        spec(
            "fast",
            "fa",
            Mode::Tiered,
            Duration::from_secs(30),
            Some(plan(h(1), 20_000)),
        ),
        spec("small", "sm", Mode::Tiered, h(2), Some(plan(h(12), 100))),
    ]
}

pub fn hash(salt: &str, n: u64) -> SourceHash {
    SourceHash(Sha256::digest(format!("{salt}/{n}")).into())
}

fn topic() -> TopicTag {
    TopicTag::of("raw.events")
}

/// A record of partition `partition`.
pub fn on(partition: i32, offset: i64) -> Coordinates {
    Coordinates {
        topic: topic(),
        partition,
        offset,
    }
}

/// A record of the tests' usual partition.
pub fn at(offset: i64) -> Coordinates {
    on(PARTITION, offset)
}

pub const DIGEST: PayloadDigest = PayloadDigest([7; 8]);

/// A record of the usual partition asking for `hash`, owned by `TOKEN`.
pub fn claim(stream: StreamId, hash: SourceHash, offset: i64, when: i64) -> Claim {
    claim_on(stream, hash, at(offset), when)
}

pub fn claim_on(stream: StreamId, hash: SourceHash, holder: Coordinates, when: i64) -> Claim {
    Claim {
        stream,
        hash,
        digest: DIGEST,
        holder,
        token: TOKEN,
        at: when,
        early_inserts: false,
    }
}

fn by(token: OwnerToken, claim: Claim) -> Claim {
    Claim { token, ..claim }
}

/// The run `[start, end)` of the usual partition, noted before early
/// inserts (exactly once) at `when`, no watermark known.
fn early_run(stream: StreamId, start: i64, end: i64, when: i64) -> EarlyRun {
    EarlyRun {
        stream,
        topic: topic(),
        partition: PARTITION,
        start,
        end,
        below: None,
        at: when,
    }
}

fn raise(stream: StreamId, partition: i32, start: i64, end: i64) -> Raise {
    Raise {
        stream,
        topic: topic(),
        partition,
        start,
        end,
    }
}

fn insert(claim: &Claim) -> Insert {
    Insert {
        stream: claim.stream,
        hash: claim.hash,
        at: claim.at,
    }
}

async fn one(store: &dyn ClaimStore, claim: Claim) -> ClaimOutcome {
    store.claim(&[claim]).await.expect("claim")[0]
}

async fn publish(store: &dyn ClaimStore, publish: Publish) -> RoundAnswer {
    store.publish(&publish).await.expect("publish")
}

async fn done(store: &dyn ClaimStore, claim: &Claim) -> bool {
    let done = vec![Held::from(claim)];
    publish(
        store,
        Publish {
            done,
            ..Publish::default()
        },
    )
    .await
    .done[0]
}

async fn release(store: &dyn ClaimStore, claim: &Claim) -> bool {
    let releases = vec![Held::from(claim)];
    publish(
        store,
        Publish {
            releases,
            ..Publish::default()
        },
    )
    .await
    .released[0]
}

/// One raise, answering the watermark after it.
async fn raised(store: &dyn ClaimStore, raise: Raise) -> i64 {
    let raises = vec![raise];
    publish(
        store,
        Publish {
            raises,
            ..Publish::default()
        },
    )
    .await
    .raised[0]
}

async fn watermarks(store: &dyn ClaimStore, stream: StreamId) -> Vec<Watermark> {
    let answer = store.round(&Publish::default(), &[], &[stream]).await;
    answer.expect("read").watermarks
}

fn mark(stream: StreamId, partition: i32, below: i64) -> Watermark {
    Watermark {
        stream,
        topic: topic(),
        partition,
        below,
    }
}

/// Claims, and publishes what a delivered novel record publishes above the
/// watermark: its done flag and (tiered) its tier-2 insert.
async fn deliver(store: &dyn ClaimStore, claim: Claim) {
    assert_eq!(one(store, claim).await, WON);
    let answer = publish(
        store,
        Publish {
            done: vec![Held::from(&claim)],
            inserts: vec![insert(&claim)],
            ..Publish::default()
        },
    )
    .await;
    assert_eq!(answer.done, vec![true]);
}

const WON: ClaimOutcome = ClaimOutcome::Won { fresh: true };

fn exact_duplicate_of(holder: Coordinates) -> ClaimOutcome {
    ClaimOutcome::Duplicate {
        tier: Tier::Exact,
        holder: Some(holder),
    }
}

const FILTER_DUPLICATE: ClaimOutcome = ClaimOutcome::Duplicate {
    tier: Tier::Filter,
    holder: None,
};

mod identity;
mod long_tail;
mod meet;
mod reset;
mod rounds;
mod runs;
mod server;
mod settle;

pub use identity::*;
pub use long_tail::*;
pub use meet::*;
pub use reset::*;
pub use rounds::*;
pub use runs::*;
pub use server::*;
pub use settle::*;
