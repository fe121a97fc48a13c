//! The in-process store: exact claims and watermarks in maps, tier 2 in
//! fastbloom generations. The embedded default for trying the worker and
//! for a single replica; time is whatever the caller passes (wall time or
//! event time).

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use fastbloom::BloomFilter;

use super::judge::{self, asks_own_insert, raise, Filter, Verdict};
use super::value::ClaimValue;
use super::{
    add_abandoned, lost_among, millis, spec, Claim, ClaimOutcome, ClaimStore, EarlyRun, FilterFill,
    IdentityFound, PartitionRanges, PartitionReset, Publish, Restored, RoundAnswer, RunsName,
    StoreError, StoreIdentity, StoreStats, StreamId, StreamLost, StreamSpec, Watermark,
};
use crate::clock::Millis;
use crate::coordinates::{Coordinates, TopicTag};
use crate::fingerprint::SourceHash;

/// Lapsed keys and generations are swept after this many writes.
const SWEEP_EVERY: u64 = 1 << 16;

pub struct MemoryStore {
    streams: Vec<StreamSpec>,
    event_time: bool,
    state: Mutex<State>,
    /// The identities the replica adopted at start, by stream: its rounds
    /// compare the state's with them (docs/design.md §8.2).
    adopted: Mutex<HashMap<usize, StoreIdentity>>,
}

type PartitionKey = (usize, TopicTag, i32);

#[derive(Default)]
struct State {
    /// Per (stream, hash): the claim and when it lapses on the stream's
    /// clock.
    claims: HashMap<(usize, SourceHash), (ClaimValue, Millis)>,
    watermarks: HashMap<PartitionKey, i64>,
    /// What operators' resets recorded (docs/design.md §4.9): abandoned
    /// ranges and the re-emit range, per partition.
    abandoned: HashMap<PartitionKey, Vec<(i64, i64)>>,
    replays: HashMap<PartitionKey, (i64, i64)>,
    /// Exactly once: per partition, the runs of offsets whose hashes went
    /// to tier 2 before their transaction committed (`EarlyRun`), each
    /// with its time.
    early: HashMap<PartitionKey, Vec<(i64, i64, Millis)>>,
    generations: HashMap<(usize, i64), Generation>,
    /// Per partition, the latest time its claims carried. On event time,
    /// partitions run at different points of the clock: a key is swept
    /// only once it lapsed for the partition furthest behind.
    clocks: HashMap<PartitionKey, Millis>,
    writes: u64,
    /// Each stream's store identity: made when it is first asked for, so
    /// a replica always finds one at start; a state made anew (`forget`)
    /// has none until then, and a round sees it missing.
    identities: HashMap<usize, StoreIdentity>,
    /// Records of finished runs (docs/design.md §7) and when they expire.
    runs: HashMap<RunsName, (Vec<u8>, Millis)>,
}

struct Generation {
    filter: BloomFilter,
    inserts: u64,
    expires_at: Millis,
}

impl MemoryStore {
    /// A store on wall time: every caller's clock is the same one.
    pub fn new(streams: Vec<StreamSpec>) -> MemoryStore {
        MemoryStore {
            streams,
            event_time: false,
            state: Mutex::new(State::default()),
            adopted: Mutex::new(HashMap::new()),
        }
    }

    /// A store whose callers pass each record's own timestamp.
    pub fn on_event_time(streams: Vec<StreamSpec>) -> MemoryStore {
        MemoryStore {
            event_time: true,
            ..MemoryStore::new(streams)
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

    /// Forgets everything, as a store that restarted empty: claims,
    /// watermarks, filters, and the streams' identities (new ones take
    /// their place). For tests of a store that lost its state.
    pub fn forget(&self) {
        if let Ok(mut state) = self.state.lock() {
            *state = State::default();
        }
    }

    /// The streams whose adopted identity the state no longer holds (its
    /// one place: never made anew here, as `find_identity` would).
    fn lost(&self, state: &State, streams: &[usize]) -> Vec<StreamLost> {
        let Ok(adopted) = self.adopted.lock() else {
            return Vec::new();
        };
        let found = streams.iter().map(|&stream| {
            let held = state.identities.get(&stream);
            let places = vec![held.map(|i| i.to_hex().into_bytes())];
            (StreamId(stream), IdentityFound { places })
        });
        lost_among(&adopted, found)
    }
}

fn filter_word(hash: &SourceHash) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&hash.0[8..16]);
    u64::from_be_bytes(bytes)
}

fn partition_of(stream: StreamId, holder: &Coordinates) -> PartitionKey {
    (stream.0, holder.topic, holder.partition)
}

/// The memory store's watermarks and reset ranges, as a claim's verdict
/// reads them.
struct Reads<'a> {
    state: &'a State,
    stream: StreamId,
}

impl judge::Reads for Reads<'_> {
    fn below(&self, at: &Coordinates) -> Option<i64> {
        let key = partition_of(self.stream, at);
        self.state.watermarks.get(&key).copied()
    }

    fn in_replay(&self, at: &Coordinates) -> bool {
        let key = partition_of(self.stream, at);
        self.state.replays.contains_key(&key) && self.state.ranges(key).in_replay(at.offset)
    }

    fn in_abandoned(&self, at: &Coordinates) -> bool {
        let key = partition_of(self.stream, at);
        self.state.abandoned.contains_key(&key) && self.state.ranges(key).in_abandoned(at.offset)
    }
}

impl State {
    fn identity(&mut self, stream: usize) -> StoreIdentity {
        *self
            .identities
            .entry(stream)
            .or_insert_with(StoreIdentity::random)
    }

    fn ranges(&self, key: PartitionKey) -> PartitionRanges {
        PartitionRanges {
            stream: StreamId(key.0),
            topic: key.1,
            partition: key.2,
            abandoned: self.abandoned.get(&key).cloned().unwrap_or_default(),
            replay: self.replays.get(&key).copied(),
        }
    }

    /// Whether an earlier owner may have written the hash of the record
    /// at `offset` to tier 2 early: it noted the offset first, or nothing
    /// was ever noted for the partition (as on Redis, where an owner of an
    /// earlier version notes nothing).
    fn noted_early(&self, key: PartitionKey, offset: i64) -> bool {
        self.early.get(&key).is_none_or(|runs| {
            runs.iter()
                .any(|&(start, end, _)| (start..end).contains(&offset))
        })
    }

    fn observe(&mut self, key: PartitionKey, at: Millis, event_time: bool) {
        let clock = self.clocks.entry(key).or_insert(at);
        *clock = (*clock).max(at);
        self.writes += 1;
        if self.writes.is_multiple_of(SWEEP_EVERY) {
            let clocks = self.clocks.values().copied();
            let now = if event_time {
                clocks.min()
            } else {
                clocks.max()
            }
            .unwrap_or(at);
            let claims = std::mem::take(&mut self.claims);
            self.claims = claims
                .into_iter()
                .filter(|((stream, _), (value, expires_at))| {
                    *expires_at > now || (event_time && !self.is_settled(*stream, value))
                })
                .collect();
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

    /// A Bloom filter never refuses an insert: past its capacity it only
    /// answers more false positives, which the fill metric shows.
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
            generation.filter.insert_hash(word);
            generation.inserts += 1;
        }
    }

    /// The live claim on a hash at `at`, if any. On wall time a claim
    /// lives `tier1_ttl` from its write, as a Redis key does. On event time
    /// an unsettled claim is live whatever its age: a copy can carry a
    /// timestamp past its holder's expiry while the holder is still in
    /// flight, and no claim is ever taken over on a clock
    /// (docs/design.md §4.7).
    fn live(&self, key: &(usize, SourceHash), at: Millis, event_time: bool) -> Option<ClaimValue> {
        self.claims
            .get(key)
            .filter(|(value, expires_at)| {
                *expires_at > at || (event_time && !self.is_settled(key.0, value))
            })
            .map(|(value, _)| *value)
    }

    fn is_settled(&self, stream: usize, value: &ClaimValue) -> bool {
        let below = self
            .watermarks
            .get(&(stream, value.holder.topic, value.holder.partition))
            .copied();
        super::judge::settled(value, below)
    }
}

#[async_trait]
impl ClaimStore for MemoryStore {
    async fn round(
        &self,
        publish: &Publish,
        claims: &[Claim],
        read: &[StreamId],
    ) -> Result<RoundAnswer, StoreError> {
        let mut state = self.lock()?;
        let mut answer = RoundAnswer::default();
        for insert in &publish.inserts {
            let spec = spec(&self.streams, insert.stream)?;
            state.add_to_filter(insert.stream.0, spec, &insert.hash, insert.at);
        }
        for r in &publish.raises {
            spec(&self.streams, r.stream)?;
            let key = (r.stream.0, r.topic, r.partition);
            let now = raise(state.watermarks.get(&key).copied(), r.start, r.end);
            state.watermarks.insert(key, now);
            answer.raised.push(now);
        }
        for held in &publish.done {
            spec(&self.streams, held.stream)?;
            let entry = state.claims.get_mut(&(held.stream.0, held.hash));
            let ours = match entry {
                Some((value, _)) if value.holder == held.holder && value.token == held.token => {
                    value.done = true;
                    true
                }
                _ => false,
            };
            answer.done.push(ours);
        }
        for held in &publish.releases {
            spec(&self.streams, held.stream)?;
            let key = (held.stream.0, held.hash);
            let ours = state.claims.get(&key).is_some_and(|(value, _)| {
                value.holder == held.holder && value.token == held.token && !value.done
            });
            if ours {
                state.claims.remove(&key);
            }
            answer.released.push(ours);
        }
        let mut streams: Vec<usize> = read
            .iter()
            .chain(claims.iter().map(|c| &c.stream))
            .map(|s| s.0)
            .collect();
        streams.sort_unstable();
        streams.dedup();
        for (&(stream, topic, partition), &below) in &state.watermarks {
            if streams.binary_search(&stream).is_ok() {
                answer.watermarks.push(Watermark {
                    stream: StreamId(stream),
                    topic,
                    partition,
                    below,
                });
            }
        }
        answer
            .watermarks
            .sort_by_key(|w| (w.stream, w.topic, w.partition));
        let mut marked: Vec<PartitionKey> = Vec::new();
        if !state.abandoned.is_empty() || !state.replays.is_empty() {
            marked = state
                .abandoned
                .keys()
                .chain(state.replays.keys())
                .filter(|k| streams.binary_search(&k.0).is_ok())
                .copied()
                .collect();
        }
        marked.sort_unstable();
        marked.dedup();
        answer.ranges = marked.into_iter().map(|key| state.ranges(key)).collect();
        let mut claimed: Vec<usize> = claims.iter().map(|c| c.stream.0).collect();
        claimed.sort_unstable();
        claimed.dedup();
        answer.lost = self.lost(&state, &claimed);
        for claim in claims {
            let spec = spec(&self.streams, claim.stream)?;
            if answer.lost.iter().any(|l| l.stream == claim.stream) {
                // Nothing is written or judged on a state the stream lost.
                answer.outcomes.push(ClaimOutcome::StoreLost);
                continue;
            }
            state.observe(
                partition_of(claim.stream, &claim.holder),
                claim.at,
                self.event_time,
            );
            let key = (claim.stream.0, claim.hash);
            let existing = state.live(&key, claim.at, self.event_time);
            let hit = state.in_filter(claim.stream.0, spec, &claim.hash, claim.at);
            let filter = Filter {
                hit,
                own_insert: existing.is_some_and(|v| asks_own_insert(claim, &v, hit))
                    && state.noted_early(
                        partition_of(claim.stream, &claim.holder),
                        claim.holder.offset,
                    ),
            };
            let reads = Reads {
                state: &state,
                stream: claim.stream,
            };
            let verdict = judge::verdict(claim, existing.as_ref(), filter, &reads);
            if existing.is_none() {
                // `SET NX` writes whatever the verdict, as on Redis.
                let value = ClaimValue::pending(claim.holder, claim.token, claim.digest, claim.at);
                let expires_at = claim.at.saturating_add(millis(spec.tier1_ttl));
                state.claims.insert(key, (value, expires_at));
            }
            match verdict {
                Verdict::Decided(_) => {}
                Verdict::Restamp(_) => {
                    if let Some((value, _)) = state.claims.get_mut(&key) {
                        value.token = claim.token;
                        value.claimed_at = claim.at;
                    }
                }
                Verdict::TakeOver => {
                    if let Some((value, _)) = state.claims.get_mut(&key) {
                        *value =
                            ClaimValue::pending(claim.holder, claim.token, claim.digest, claim.at);
                    }
                    answer.taken_over.push(answer.outcomes.len());
                }
            }
            answer.outcomes.push(verdict.outcome());
        }
        Ok(answer)
    }

    /// Runs under the partition's watermark are dropped as new ones come,
    /// and on wall time those twice the tier-1 TTL older than the new ones
    /// (every claim they could speak for has lapsed: a claim here lives
    /// `tier1_ttl` from its time). On event time an unsettled claim never
    /// lapses, so neither do its runs.
    async fn note_early_inserts(&self, runs: &[EarlyRun]) -> Result<(), StoreError> {
        let mut state = self.lock()?;
        for run in runs {
            let spec = spec(&self.streams, run.stream)?;
            let key = (run.stream.0, run.topic, run.partition);
            let below = state.watermarks.get(&key).copied().max(run.below);
            let now = run.at;
            let keep = millis(spec.tier1_ttl).saturating_mul(2);
            let noted = state.early.entry(key).or_default();
            let event_time = self.event_time;
            noted.retain(|&(_, end, at)| {
                below.is_none_or(|b| end > b) && (event_time || at.saturating_add(keep) > now)
            });
            noted.push((run.start, run.end, run.at));
        }
        Ok(())
    }

    async fn reset(&self, resets: &[PartitionReset]) -> Result<(), StoreError> {
        let mut state = self.lock()?;
        for r in resets {
            spec(&self.streams, r.stream)?;
            let key = (r.stream.0, r.topic, r.partition);
            if let Some(to) = r.raise_to {
                let now = raise(state.watermarks.get(&key).copied(), 0, to);
                state.watermarks.insert(key, now);
            }
            if let Some(range) = r.abandon {
                add_abandoned(state.abandoned.entry(key).or_default(), range);
            }
            match r.replay {
                Some(range) => state.replays.insert(key, range),
                None => state.replays.remove(&key),
            };
        }
        Ok(())
    }

    async fn restore(&self, claims: &[Restored]) -> Result<(), StoreError> {
        let mut state = self.lock()?;
        for restored in claims {
            spec(&self.streams, restored.stream)?;
            let value = ClaimValue::restored(restored);
            state.claims.insert(
                (restored.stream.0, restored.hash),
                (value, restored.expires_at),
            );
        }
        Ok(())
    }

    async fn find_identity(&self, stream: StreamId) -> Result<IdentityFound, StoreError> {
        spec(&self.streams, stream)?;
        let held = self.lock()?.identity(stream.0);
        Ok(IdentityFound {
            places: vec![Some(held.to_hex().into_bytes())],
        })
    }

    async fn write_identity(
        &self,
        stream: StreamId,
        identity: StoreIdentity,
        replace: bool,
    ) -> Result<IdentityFound, StoreError> {
        spec(&self.streams, stream)?;
        if replace {
            self.lock()?.identities.insert(stream.0, identity);
        }
        self.find_identity(stream).await
    }

    async fn verify_identity(&self, streams: &[StreamId]) -> Result<Vec<StreamLost>, StoreError> {
        let ids: Vec<usize> = streams.iter().map(|s| s.0).collect();
        let state = self.lock()?;
        Ok(self.lost(&state, &ids))
    }

    fn adopt_identity(&self, stream: StreamId, identity: StoreIdentity) {
        if let Ok(mut adopted) = self.adopted.lock() {
            adopted.insert(stream.0, identity);
        }
    }

    async fn put_runs(
        &self,
        name: &RunsName,
        content: &[u8],
        at: Millis,
    ) -> Result<(), StoreError> {
        let expires = at + millis(spec(&self.streams, name.stream)?.watermark_ttl());
        let mut state = self.lock()?;
        let held = state
            .runs
            .entry(*name)
            .or_insert_with(|| (content.to_vec(), 0));
        held.1 = expires;
        Ok(())
    }

    async fn get_runs(&self, name: &RunsName, at: Millis) -> Result<Option<Vec<u8>>, StoreError> {
        let state = self.lock()?;
        let held = state.runs.get(name).filter(|(_, expires)| *expires > at);
        Ok(held.map(|(content, _)| content.clone()))
    }

    async fn refresh_runs(&self, name: &RunsName, at: Millis) -> Result<bool, StoreError> {
        let expires = at + millis(spec(&self.streams, name.stream)?.watermark_ttl());
        let mut state = self.lock()?;
        let held = state.runs.get_mut(name).filter(|(_, e)| *e > at);
        Ok(held.map(|held| held.1 = expires).is_some())
    }

    async fn delete_runs(&self, names: &[RunsName]) -> Result<(), StoreError> {
        let mut state = self.lock()?;
        for name in names {
            state.runs.remove(name);
        }
        Ok(())
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
            tier1_hash_fields: Vec::new(),
            filters,
        })
    }
}
