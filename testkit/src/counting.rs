//! A `ClaimStore` decorator that counts what the worker asks of the store
//! (the tests' evidence, seen from outside, that claims were released,
//! watermarks raised and done flags set; the bench's rounds per batch),
//! notes which records asked for a claim, and tells an optional observer
//! (the bench's timeline) when each round starts and ends.
//!
//! The worker sends one `round` per batch in steady state: the publish of
//! what earlier batches delivered with the claims of the next one
//! (docs/design.md §1, §4.3). A record held behind another record's
//! unsettled claim (`Held`) is claimed again in a later round.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use idemgate::clock::Millis;
use idemgate::store::{
    Claim, ClaimOutcome, ClaimStore, EarlyRun, IdentityFound, Marked, Publish, RoundAnswer,
    RunsName, StoreError, StoreIdentity, StoreStats, StreamId, StreamLost,
};
use idemgate::tier::Tier;

/// What one replica's store calls showed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StoreTally {
    /// Round trips asked for: every `round` call.
    pub rounds: u64,
    /// Rounds that carried claims.
    pub claim_rounds: u64,
    /// Rounds that carried a publish.
    pub publish_rounds: u64,
    pub stats_calls: u64,
    /// Records in claims, first rounds and retries alike.
    pub claimed: u64,
    pub won: u64,
    pub restamped: u64,
    pub replayed: u64,
    pub held: u64,
    pub duplicate_exact: u64,
    pub duplicate_filter: u64,
    pub conflict: u64,
    pub raises: u64,
    pub done_flags: u64,
    pub done_lost: u64,
    pub inserts: u64,
    pub released: u64,
    pub store_errors: u64,
    /// Claims answered `StoreLost`: their stream's store lost its state.
    #[serde(default)]
    pub store_lost: u64,
}

impl StoreTally {
    pub fn add(&mut self, t: &StoreTally) {
        self.rounds += t.rounds;
        self.claim_rounds += t.claim_rounds;
        self.publish_rounds += t.publish_rounds;
        self.stats_calls += t.stats_calls;
        self.claimed += t.claimed;
        self.won += t.won;
        self.restamped += t.restamped;
        self.replayed += t.replayed;
        self.held += t.held;
        self.duplicate_exact += t.duplicate_exact;
        self.duplicate_filter += t.duplicate_filter;
        self.conflict += t.conflict;
        self.raises += t.raises;
        self.done_flags += t.done_flags;
        self.done_lost += t.done_lost;
        self.inserts += t.inserts;
        self.released += t.released;
        self.store_errors += t.store_errors;
        self.store_lost += t.store_lost;
    }

    fn answered(&mut self, publish: &Publish, answer: &RoundAnswer) {
        self.raises += publish.raises.len() as u64;
        self.inserts += publish.inserts.len() as u64;
        let done = answer.done.iter().filter(|d| **d).count() as u64;
        self.done_flags += done;
        self.done_lost += answer.done.len() as u64 - done;
        self.released += answer.released.iter().filter(|r| **r).count() as u64;
        for outcome in &answer.outcomes {
            match outcome {
                ClaimOutcome::Held { .. } => self.held += 1,
                ClaimOutcome::Won { fresh: true } => self.won += 1,
                ClaimOutcome::Won { fresh: false } => self.restamped += 1,
                ClaimOutcome::Replayed | ClaimOutcome::Reemit => self.replayed += 1,
                ClaimOutcome::Duplicate {
                    tier: Tier::Exact, ..
                } => self.duplicate_exact += 1,
                ClaimOutcome::Duplicate {
                    tier: Tier::Filter, ..
                } => self.duplicate_filter += 1,
                ClaimOutcome::Conflict { .. } => self.conflict += 1,
                ClaimOutcome::StoreLost => self.store_lost += 1,
            }
        }
    }
}

/// Which store call an observer hears of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// A round carrying claims (with or without a publish).
    Claim,
    /// A round carrying only a publish.
    Settle,
}

/// Told when a call starts (`true`) and ends (`false`).
pub type Observer = Box<dyn Fn(Call, bool) + Send + Sync>;

pub struct CountingStore {
    inner: Arc<dyn ClaimStore>,
    tally: Mutex<StoreTally>,
    /// (partition, offset) of every record that asked for a claim since the
    /// last `take_holders`.
    holders: Mutex<BTreeSet<(i32, i64)>>,
    /// Per input partition, the earliest and latest clock its claims
    /// carried: on event time, the records' own timestamps.
    times: Mutex<BTreeMap<i32, (Millis, Millis)>>,
    observer: Option<Observer>,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn ClaimStore>) -> CountingStore {
        CountingStore {
            inner,
            tally: Mutex::new(StoreTally::default()),
            holders: Mutex::new(BTreeSet::new()),
            times: Mutex::new(BTreeMap::new()),
            observer: None,
        }
    }

    pub fn with_observer(mut self, observer: Observer) -> CountingStore {
        self.observer = Some(observer);
        self
    }

    fn lock(&self) -> MutexGuard<'_, StoreTally> {
        // A poisoned lock only means a panic elsewhere; the counts are
        // still the best there are.
        self.tally.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn observe(&self, call: Call, start: bool) {
        if let Some(observer) = &self.observer {
            observer(call, start);
        }
    }

    pub fn tally(&self) -> StoreTally {
        self.lock().clone()
    }

    /// Claims really released (deleted) so far.
    pub fn released(&self) -> u64 {
        self.lock().released
    }

    /// Watermark raises and done flags published so far: records settled.
    pub fn settled(&self) -> u64 {
        let tally = self.lock();
        tally.raises + tally.done_flags
    }

    /// Per input partition, the earliest and latest time (`Claim::at`) its
    /// claims were made at: what clock the worker ran the store on.
    pub fn claim_times(&self) -> BTreeMap<i32, (Millis, Millis)> {
        self.times.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The records that asked for a claim since the last call.
    pub fn take_holders(&self) -> BTreeSet<(i32, i64)> {
        std::mem::take(&mut *self.holders.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[async_trait]
impl ClaimStore for CountingStore {
    async fn round(
        &self,
        publish: &Publish,
        claims: &[Claim],
        read: &[StreamId],
    ) -> Result<RoundAnswer, StoreError> {
        let call = if claims.is_empty() {
            Call::Settle
        } else {
            Call::Claim
        };
        self.observe(call, true);
        let result = self.inner.round(publish, claims, read).await;
        self.observe(call, false);
        self.holders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(claims.iter().map(|c| (c.holder.partition, c.holder.offset)));
        {
            let mut times = self.times.lock().unwrap_or_else(|e| e.into_inner());
            for claim in claims {
                let span = times
                    .entry(claim.holder.partition)
                    .or_insert((claim.at, claim.at));
                *span = (span.0.min(claim.at), span.1.max(claim.at));
            }
        }
        let mut tally = self.lock();
        tally.rounds += 1;
        tally.claim_rounds += u64::from(!claims.is_empty());
        tally.publish_rounds += u64::from(!publish.is_empty());
        tally.claimed += claims.len() as u64;
        match &result {
            Ok(answer) => tally.answered(publish, answer),
            Err(_) => tally.store_errors += 1,
        }
        result
    }

    /// Part of a transaction's seal, before its inserts: not counted.
    async fn note_early_inserts(&self, runs: &[EarlyRun]) -> Result<(), StoreError> {
        self.inner.note_early_inserts(runs).await
    }

    async fn find_identity(&self, stream: StreamId) -> Result<IdentityFound, StoreError> {
        self.inner.find_identity(stream).await
    }

    async fn write_identity(
        &self,
        stream: StreamId,
        identity: StoreIdentity,
        replace: bool,
    ) -> Result<IdentityFound, StoreError> {
        self.inner.write_identity(stream, identity, replace).await
    }

    /// The worker's timed identity check, off its rounds: not counted.
    async fn verify_identity(&self, streams: &[StreamId]) -> Result<Vec<StreamLost>, StoreError> {
        self.inner.verify_identity(streams).await
    }

    fn adopt_identity(&self, stream: StreamId, identity: StoreIdentity) {
        self.inner.adopt_identity(stream, identity);
    }

    async fn advance_marks(&self, stream: StreamId) -> Result<Marked, StoreError> {
        self.inner.advance_marks(stream).await
    }

    async fn check_marks(&self, stream: StreamId) -> Result<Marked, StoreError> {
        self.inner.check_marks(stream).await
    }

    fn raise_floors(&self, stream: StreamId, marks: &[u64]) {
        self.inner.raise_floors(stream, marks);
    }

    async fn restore_marks(&self, stream: StreamId, marks: &[u64]) -> Result<(), StoreError> {
        self.inner.restore_marks(stream, marks).await
    }

    async fn put_runs(
        &self,
        name: &RunsName,
        content: &[u8],
        at: Millis,
    ) -> Result<(), StoreError> {
        self.inner.put_runs(name, content, at).await
    }

    async fn get_runs(&self, name: &RunsName, at: Millis) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get_runs(name, at).await
    }

    async fn refresh_runs(&self, name: &RunsName, at: Millis) -> Result<bool, StoreError> {
        self.inner.refresh_runs(name, at).await
    }

    async fn delete_runs(&self, names: &[RunsName]) -> Result<(), StoreError> {
        self.inner.delete_runs(names).await
    }

    /// The store watcher's call, from its own task: counted, not observed.
    async fn stats(&self, at: Millis) -> Result<StoreStats, StoreError> {
        self.lock().stats_calls += 1;
        self.inner.stats(at).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemgate::coordinates::{Coordinates, TopicTag};
    use idemgate::fingerprint::{PayloadDigest, SourceHash};
    use idemgate::store::memory::MemoryStore;
    use idemgate::store::{Held, Mode, OwnerToken, StreamSpec};
    use std::time::Duration;

    fn claim(offset: i64, hash: u8) -> Claim {
        Claim {
            stream: StreamId(0),
            hash: SourceHash([hash; 32]),
            digest: PayloadDigest([hash; 8]),
            holder: Coordinates {
                topic: TopicTag(1),
                partition: 0,
                offset,
            },
            token: OwnerToken(7),
            at: 1_000,
            early_inserts: false,
        }
    }

    #[tokio::test]
    async fn a_copy_in_the_same_batch_is_held_then_a_duplicate() {
        let inner = Arc::new(MemoryStore::new(vec![StreamSpec::new(
            "s",
            Mode::Exact,
            Duration::from_secs(3600),
            None,
        )]));
        let store = CountingStore::new(inner);
        let batch = [claim(0, 1), claim(1, 1), claim(2, 2)];
        store.claim(&batch).await.unwrap();
        let publish = Publish {
            done: vec![Held::from(&batch[0]), Held::from(&batch[2])],
            ..Publish::default()
        };
        store.round(&publish, &batch[1..2], &[]).await.unwrap();
        let tally = store.tally();
        assert_eq!(
            (tally.rounds, tally.claim_rounds, tally.publish_rounds),
            (2, 2, 1)
        );
        assert_eq!((tally.won, tally.held, tally.duplicate_exact), (2, 1, 1));
        assert_eq!(tally.done_flags, 2);
    }
}
