//! The in-process store: exact claims in a map, tier 2 in fastbloom
//! generations. The embedded default for trying the worker and for a single
//! replica; time is whatever the caller passes (wall time or event time).

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use fastbloom::BloomFilter;

use super::judge::{expires_at, judge, pending_value, Verdict};
use super::value::ClaimValue;
use super::{
    spec, Claim, ClaimOutcome, ClaimState, ClaimStore, FilterFill, Millis, Settle, StoreError,
    StoreStats, StreamSpec, Tier,
};
use crate::fingerprint::SourceHash;

/// Lapsed keys and generations are swept after this many writes.
const SWEEP_EVERY: u64 = 1 << 16;
/// On event time, partitions run at different points of the clock: a key is
/// swept only once it lapsed this long before the latest time seen, so a
/// partition up to an hour behind still finds it.
const SWEEP_MARGIN: Millis = 3_600_000;

pub struct MemoryStore {
    streams: Vec<StreamSpec>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    claims: HashMap<(usize, SourceHash), ClaimValue>,
    generations: HashMap<(usize, i64), Generation>,
    /// The latest time any request carried: what lapsed `SWEEP_MARGIN`
    /// before it is swept.
    high_water: Millis,
    writes: u64,
}

struct Generation {
    filter: BloomFilter,
    inserts: u64,
    expires_at: Millis,
}

impl MemoryStore {
    pub fn new(streams: Vec<StreamSpec>) -> MemoryStore {
        MemoryStore {
            streams,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, StoreError> {
        self.state
            .lock()
            .map_err(|_| StoreError::Unavailable("memory store lock poisoned".into()))
    }

    /// Number of exact keys held, for tests and the demo.
    pub fn exact_keys(&self) -> usize {
        self.state.lock().map(|s| s.claims.len()).unwrap_or(0)
    }
}

fn filter_word(hash: &SourceHash) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&hash.0[8..16]);
    u64::from_be_bytes(bytes)
}

impl State {
    fn observe(&mut self, at: Millis, streams: &[StreamSpec]) {
        self.high_water = self.high_water.max(at);
        self.writes += 1;
        if self.writes.is_multiple_of(SWEEP_EVERY) {
            let now = self.high_water.saturating_sub(SWEEP_MARGIN);
            self.claims.retain(|(stream, _), value| {
                streams
                    .get(*stream)
                    .is_some_and(|spec| expires_at(value, spec) > now)
            });
            self.generations.retain(|_, g| g.expires_at > now);
        }
    }

    fn in_filter(&self, stream: usize, spec: &StreamSpec, hash: &SourceHash, at: Millis) -> bool {
        let Some(plan) = &spec.filter else {
            return false;
        };
        let word = filter_word(hash);
        plan.read_epochs(at).any(|epoch| {
            self.generations
                .get(&(stream, epoch))
                .is_some_and(|g| g.expires_at > at && g.filter.contains_hash(word))
        })
    }

    fn add_to_filter(&mut self, stream: usize, spec: &StreamSpec, hash: &SourceHash, at: Millis) {
        let Some(plan) = &spec.filter else {
            return;
        };
        let word = filter_word(hash);
        for epoch in plan.write_epochs(at) {
            let generation =
                self.generations
                    .entry((stream, epoch))
                    .or_insert_with(|| Generation {
                        filter: BloomFilter::with_false_pos(plan.sizing.fp_rate)
                            .expected_items(plan.sizing.capacity as usize),
                        inserts: 0,
                        expires_at: plan.expires_at(epoch),
                    });
            if !generation.filter.insert_hash(word) {
                generation.inserts += 1;
            }
        }
    }
}

#[async_trait]
impl ClaimStore for MemoryStore {
    async fn claim(&self, batch: &[Claim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let mut state = self.lock()?;
        let mut outcomes = Vec::with_capacity(batch.len());
        for claim in batch {
            let spec = spec(&self.streams, claim.stream)?;
            state.observe(claim.at, &self.streams);
            let key = (claim.stream.0, claim.hash);
            let mut lapsed_pending = false;
            if let Some(existing) = state.claims.get(&key) {
                if let Verdict::Decided(outcome) = judge(existing, claim, spec) {
                    outcomes.push(outcome);
                    continue;
                }
                lapsed_pending = existing.state == ClaimState::Pending;
            }
            if state.in_filter(claim.stream.0, spec, &claim.hash, claim.at) {
                state.claims.remove(&key);
                outcomes.push(ClaimOutcome::Duplicate {
                    tier: Tier::Filter,
                    holder: None,
                });
                continue;
            }
            state.claims.insert(key, pending_value(claim));
            if lapsed_pending {
                crate::metrics::taken_over(&spec.name);
            }
            outcomes.push(ClaimOutcome::Won);
        }
        Ok(outcomes)
    }

    async fn finalize(&self, batch: &[Settle]) -> Result<Vec<bool>, StoreError> {
        let mut state = self.lock()?;
        let mut done = Vec::with_capacity(batch.len());
        for settle in batch {
            let spec = spec(&self.streams, settle.stream)?;
            state.observe(settle.at, &self.streams);
            let key = (settle.stream.0, settle.hash);
            let current = state
                .claims
                .get(&key)
                .filter(|value| expires_at(value, spec) > settle.at);
            let newly_done = match current {
                Some(value) if value.holder != settle.holder => {
                    done.push(false);
                    continue;
                }
                Some(value) => value.state == ClaimState::Pending,
                None => true,
            };
            if newly_done {
                let value = ClaimValue {
                    state: ClaimState::Done,
                    holder: settle.holder,
                    digest: settle.digest,
                    at: settle.at,
                };
                state.claims.insert(key, value);
                state.add_to_filter(settle.stream.0, spec, &settle.hash, settle.at);
            }
            done.push(true);
        }
        Ok(done)
    }

    async fn release(&self, batch: &[Settle]) -> Result<Vec<bool>, StoreError> {
        let mut state = self.lock()?;
        let mut released = Vec::with_capacity(batch.len());
        for settle in batch {
            spec(&self.streams, settle.stream)?;
            let key = (settle.stream.0, settle.hash);
            let ours = state.claims.get(&key).is_some_and(|value| {
                value.holder == settle.holder && value.state == ClaimState::Pending
            });
            if ours {
                state.claims.remove(&key);
            }
            released.push(ours);
        }
        Ok(released)
    }

    async fn stats(&self, at: Millis) -> Result<StoreStats, StoreError> {
        let state = self.lock()?;
        let filters = self
            .streams
            .iter()
            .enumerate()
            .filter_map(|(index, spec)| {
                let plan = spec.filter.as_ref()?;
                let inserts = state
                    .generations
                    .get(&(index, plan.epoch(at)))
                    .map_or(0, |g| g.inserts);
                Some(FilterFill {
                    stream: spec.name.clone(),
                    inserts,
                    capacity: plan.sizing.capacity,
                })
            })
            .collect();
        Ok(StoreStats {
            evicted_keys: 0,
            filters,
        })
    }
}
