//! A `ClaimStore` decorator that counts what the worker asks of the store
//! (the tests' evidence, seen from outside, that claims were released after
//! failed deliveries; the bench's calls per batch), notes which records
//! asked for a claim, and tells an optional observer (the bench's timeline)
//! when each call starts and ends.
//!
//! The worker runs a batch in rounds: one `claim` call for every undecided
//! record, then it produces the decided records' outputs, then one
//! `finalize` call for the novel ones (docs/design.md §1). A record held
//! behind another record's pending claim (`Held`) is claimed again in the
//! next round, so claim calls per batch above one are retry rounds.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use idemgate::store::{
    Claim, ClaimOutcome, ClaimState, ClaimStore, Millis, Settle, StoreError, StoreStats, Tier,
};

/// What one replica's store calls showed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StoreTally {
    pub claim_calls: u64,
    pub finalize_calls: u64,
    pub release_calls: u64,
    pub stats_calls: u64,
    /// Records in claim calls, first rounds and retries alike.
    pub claimed: u64,
    pub won: u64,
    pub own_pending: u64,
    pub own_done: u64,
    pub held: u64,
    pub duplicate_exact: u64,
    pub duplicate_filter: u64,
    pub conflict: u64,
    pub finalized: u64,
    pub finalize_lost: u64,
    pub released: u64,
    pub store_errors: u64,
}

impl StoreTally {
    pub fn add(&mut self, t: &StoreTally) {
        self.claim_calls += t.claim_calls;
        self.finalize_calls += t.finalize_calls;
        self.release_calls += t.release_calls;
        self.stats_calls += t.stats_calls;
        self.claimed += t.claimed;
        self.won += t.won;
        self.own_pending += t.own_pending;
        self.own_done += t.own_done;
        self.held += t.held;
        self.duplicate_exact += t.duplicate_exact;
        self.duplicate_filter += t.duplicate_filter;
        self.conflict += t.conflict;
        self.finalized += t.finalized;
        self.finalize_lost += t.finalize_lost;
        self.released += t.released;
        self.store_errors += t.store_errors;
    }

    fn outcomes(&mut self, outcomes: &[ClaimOutcome]) {
        for outcome in outcomes {
            match outcome {
                ClaimOutcome::Held { .. } => self.held += 1,
                ClaimOutcome::Won => self.won += 1,
                ClaimOutcome::Own(ClaimState::Pending) => self.own_pending += 1,
                ClaimOutcome::Own(ClaimState::Done) => self.own_done += 1,
                ClaimOutcome::Duplicate {
                    tier: Tier::Exact, ..
                } => self.duplicate_exact += 1,
                ClaimOutcome::Duplicate {
                    tier: Tier::Filter, ..
                } => self.duplicate_filter += 1,
                ClaimOutcome::Conflict { .. } => self.conflict += 1,
            }
        }
    }
}

/// Which store call an observer hears of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Claim,
    /// Finalize or release.
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
    observer: Option<Observer>,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn ClaimStore>) -> CountingStore {
        CountingStore {
            inner,
            tally: Mutex::new(StoreTally::default()),
            holders: Mutex::new(BTreeSet::new()),
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

    /// Claims finalized to done so far.
    pub fn finalized(&self) -> u64 {
        self.lock().finalized
    }

    /// The records that asked for a claim since the last call.
    pub fn take_holders(&self) -> BTreeSet<(i32, i64)> {
        std::mem::take(&mut *self.holders.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[async_trait]
impl ClaimStore for CountingStore {
    async fn claim(&self, batch: &[Claim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.observe(Call::Claim, true);
        let result = self.inner.claim(batch).await;
        self.observe(Call::Claim, false);
        self.holders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(batch.iter().map(|c| (c.holder.partition, c.holder.offset)));
        let mut tally = self.lock();
        tally.claim_calls += 1;
        tally.claimed += batch.len() as u64;
        match &result {
            Ok(outcomes) => tally.outcomes(outcomes),
            Err(_) => tally.store_errors += 1,
        }
        result
    }

    async fn finalize(&self, batch: &[Settle]) -> Result<Vec<bool>, StoreError> {
        self.observe(Call::Settle, true);
        let result = self.inner.finalize(batch).await;
        self.observe(Call::Settle, false);
        let mut tally = self.lock();
        tally.finalize_calls += 1;
        match &result {
            Ok(done) => {
                let finalized = done.iter().filter(|d| **d).count() as u64;
                tally.finalized += finalized;
                tally.finalize_lost += done.len() as u64 - finalized;
            }
            Err(_) => tally.store_errors += 1,
        }
        result
    }

    async fn release(&self, batch: &[Settle]) -> Result<Vec<bool>, StoreError> {
        self.observe(Call::Settle, true);
        let result = self.inner.release(batch).await;
        self.observe(Call::Settle, false);
        let mut tally = self.lock();
        tally.release_calls += 1;
        match &result {
            Ok(done) => tally.released += done.iter().filter(|d| **d).count() as u64,
            Err(_) => tally.store_errors += 1,
        }
        result
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
    use idemgate::fingerprint::{PayloadDigest, SourceHash};
    use idemgate::store::memory::MemoryStore;
    use idemgate::store::{Coordinates, Mode, StreamId, StreamSpec, TopicTag};
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
            at: 1_000,
            wall: 1_000,
        }
    }

    #[tokio::test]
    async fn a_copy_in_the_same_batch_is_held_then_a_duplicate() {
        let inner = Arc::new(MemoryStore::new(vec![StreamSpec {
            name: "s".into(),
            mode: Mode::Exact,
            lease: Duration::from_secs(60),
            tier1_ttl: Duration::from_secs(3600),
            filter: None,
        }]));
        let store = CountingStore::new(inner);
        let batch = [claim(0, 1), claim(1, 1), claim(2, 2)];
        store.claim(&batch).await.unwrap();
        let settles: Vec<Settle> = [&batch[0], &batch[2]]
            .iter()
            .map(|c| Settle::from(*c))
            .collect();
        store.finalize(&settles).await.unwrap();
        store.claim(&batch[1..2]).await.unwrap();
        let tally = store.tally();
        assert_eq!((tally.claim_calls, tally.finalize_calls), (2, 1));
        assert_eq!((tally.won, tally.held, tally.duplicate_exact), (2, 1, 1));
        assert_eq!(tally.finalized, 2);
    }
}
