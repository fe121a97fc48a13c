//! One batch, from fingerprint to finished (docs/design.md §1, §2, §4.5, §7, §8):
//!
//! ```text
//! fingerprint ─► claim ─► route ─► produce ─► finalize │ release ─► (next round)
//! ```
//!
//! A batch runs in rounds until every record is delivered or skipped. A
//! round claims what is undecided, produces what is decided, finalizes the
//! delivered novel records and releases the claims whose output failed.
//! Records held by another record's pending claim stay undecided; when that
//! holder is in the same batch it settles in the same round, so the next
//! round decides them at once. Only a round without progress waits (with
//! the partitions paused and the group served).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::logging::RateLimit;

/// One "output not delivered" line per period: a broker refusing every
/// output would otherwise write one per record per round.
static UNDELIVERED: RateLimit = RateLimit::new(Duration::from_secs(30));

use super::consumer::{keep_alive, Input};
use super::output::{produce_all, Carry, Failure, Output};
use super::Worker;
use crate::config::FailMode;
use crate::decision::{headers, next, Decision, Next};
use crate::fingerprint::{fingerprint, Fingerprint, Invalid, RecordView};
use crate::store::{Claim, Coordinates, Held, Insert, Millis, Publish, StoreError, TopicTag};

/// Where a record stands in its batch.
#[derive(Clone, Debug, PartialEq)]
enum Stage {
    /// Needs a claim (first time, after a release, or while held).
    Claim,
    /// Decided; its output is to be produced.
    Emit(Decision),
    /// Output delivered (and, for a novel record, the claim finalized or
    /// given up on at shutdown).
    Delivered,
    /// Its own claim was already done: delivered before a crash or replay.
    Skipped,
}

struct Record {
    input: Input,
    stream: usize,
    print: Option<Fingerprint>,
    stage: Stage,
    /// Since when it has waited on another record's claim (the oldest-wait
    /// metric); `None` while it is not waiting.
    held_since: Option<Instant>,
}

/// How a batch ended.
pub(crate) enum Ended {
    Finished,
    /// Only records held by other records' pending claims were left, past
    /// `HOLD_PATIENCE`: per partition, the first of them, to read again.
    /// The holder may sit in a partition this replica has just been given
    /// (its first owner crashed), which it can only replay by polling.
    Deferred(BTreeMap<(String, i32), i64>),
    /// Shutdown arrived: only each partition's finished prefix counts.
    Abandoned,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(20);
/// How long a batch waits for holders outside it before it defers the
/// records they hold and polls again: well under any lease, so a holder
/// whose owner crashed is replayed (and meets its own claim) before its
/// lease lapses and a copy takes the claim over.
pub(crate) const HOLD_PATIENCE: Duration = Duration::from_millis(250);
/// How long a deferred partition stays paused, so the others are read.
pub(crate) const HOLD_BACK: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

impl Worker {
    /// Processes one batch and returns the next offset to commit for each
    /// partition: the end of its finished prefix.
    pub(crate) async fn process(
        &mut self,
        inputs: Vec<Input>,
        revocations: u64,
        stop: &tokio::sync::watch::Receiver<bool>,
    ) -> (BTreeMap<(String, i32), i64>, Ended) {
        crate::metrics::batch(inputs.len());
        // A partition assigned back during the poll is fetched again from
        // its committed offset: the same record may come twice.
        let mut seen = HashSet::new();
        let mut records: Vec<Record> = inputs
            .into_iter()
            .filter(|i| seen.insert((i.topic.clone(), i.partition, i.offset)))
            .filter_map(|i| self.prepare(i))
            .collect();
        let mut backoff = FIRST_BACKOFF;
        let mut holding_since: Option<Instant> = None;
        let ended = loop {
            if *stop.borrow() {
                break Ended::Abandoned;
            }
            // A rebalance during the poll or a wait: keep only what this
            // replica still owns.
            if self.revocations() != revocations {
                self.drop_revoked(&mut records).await;
                if records.is_empty() {
                    break Ended::Finished;
                }
            }
            let mut progress = self.claim_round(&mut records).await;
            self.publish_waiting(&records);
            let (emitted, failed) = self.emit_round(&mut records).await;
            progress |= emitted;
            if emitted {
                // Stored as soon as delivered, so a revoke while this batch
                // waits commits exactly the finished work (the protocol
                // above `GroupContext`).
                super::consumer::store(&self.consumer, &finished_prefixes(&records));
            }
            if records
                .iter()
                .all(|r| matches!(r.stage, Stage::Delivered | Stage::Skipped))
            {
                break Ended::Finished;
            }
            // A failed delivery is retried after the backoff, never at once:
            // its released claim is won again next round, which would count
            // as progress and spin while the broker refuses.
            if progress && !failed {
                backoff = FIRST_BACKOFF;
                holding_since = None;
                continue;
            }
            let only_held = !self.breaker.is_open()
                && records
                    .iter()
                    .all(|r| matches!(r.stage, Stage::Delivered | Stage::Skipped | Stage::Claim));
            if only_held {
                let since = *holding_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= HOLD_PATIENCE {
                    break Ended::Deferred(self.defer(&records));
                }
            }
            let wait = backoff.max(self.breaker.wait(Instant::now()));
            keep_alive(&self.consumer, &mut self.carry, wait).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        };
        if matches!(ended, Ended::Abandoned) {
            self.release_undelivered(&records).await;
        }
        self.publish_waiting(&[]);
        (finished_prefixes(&records), ended)
    }

    /// Per stream: records waiting on other records' claims, and the
    /// longest of those waits.
    fn publish_waiting(&self, records: &[Record]) {
        let mut per_stream = vec![(0usize, Duration::ZERO); self.streams.len()];
        for record in records {
            if let Some(since) = record.held_since {
                let (count, oldest) = &mut per_stream[record.stream];
                *count += 1;
                *oldest = (*oldest).max(since.elapsed());
            }
        }
        for (runtime, (count, oldest)) in self.streams.iter().zip(per_stream) {
            crate::metrics::waiting(&runtime.config.spec.name, count, oldest);
        }
    }

    /// Notes every finished record and returns, per partition, the first
    /// record still waiting.
    fn defer(&mut self, records: &[Record]) -> BTreeMap<(String, i32), i64> {
        let mut rewind: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for record in records {
            let partition = (record.input.topic.clone(), record.input.partition);
            if matches!(record.stage, Stage::Delivered | Stage::Skipped) {
                self.finished
                    .entry(partition)
                    .or_default()
                    .add(record.input.offset);
            } else {
                let first = rewind.entry(partition).or_insert(record.input.offset);
                *first = (*first).min(record.input.offset);
            }
        }
        info!(
            partitions = rewind.len(),
            "records held by claims outside this batch: deferred, polling on"
        );
        rewind
    }

    /// Fingerprints a record; `None` for a topic no stream reads (it cannot
    /// happen with our subscription, but nothing is assumed).
    fn prepare(&self, input: Input) -> Option<Record> {
        let Some(&stream) = self.by_topic.get(&input.topic) else {
            warn!(topic = %input.topic, "record from a topic no stream reads");
            return None;
        };
        let done_before = self
            .finished
            .get(&(input.topic.clone(), input.partition))
            .is_some_and(|finished| finished.contains(input.offset));
        if done_before {
            // Fetched again after its partition came back from a rebalance
            // (or a lost session) from an older committed offset: already
            // decided and delivered here. Its offset counts as finished.
            return Some(Record {
                input,
                stream,
                print: None,
                stage: Stage::Skipped,
                held_since: None,
            });
        }
        let config = &self.streams[stream].config;
        let headers: Vec<(&str, Option<&[u8]>)> = input
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect();
        let view = RecordView {
            payload: input.payload.as_deref(),
            headers: &headers,
        };
        let verdict = match &input.bad_header_name {
            Some(name) => Err(Invalid::HeaderNameNotUtf8 { name: name.clone() }),
            None => fingerprint(&config.profile, config.max_record_bytes, &view),
        };
        let (print, stage) = match verdict {
            Ok(print) => (Some(print), Stage::Claim),
            Err(invalid) => (None, Stage::Emit(Decision::Invalid(invalid))),
        };
        Some(Record {
            input,
            stream,
            print,
            stage,
            held_since: None,
        })
    }

    fn clock(&self, input: &Input) -> Millis {
        match (self.event_time, input.timestamp) {
            (true, Some(at)) => at,
            _ => now_ms(),
        }
    }

    fn claim_of(&self, record: &Record) -> Option<Claim> {
        let print = record.print?;
        Some(Claim {
            stream: crate::store::StreamId(record.stream),
            hash: print.hash,
            digest: print.digest,
            holder: Coordinates {
                topic: TopicTag::of(&record.input.topic),
                partition: record.input.partition,
                offset: record.input.offset,
            },
            at: self.clock(&record.input),
            token: self.token,
        })
    }

    /// Claims every undecided record in one call. Returns whether any record
    /// was decided.
    async fn claim_round(&mut self, records: &mut [Record]) -> bool {
        let waiting: Vec<usize> = (0..records.len())
            .filter(|&i| records[i].stage == Stage::Claim)
            .collect();
        if waiting.is_empty() {
            return false;
        }
        let claims: Vec<Claim> = waiting
            .iter()
            .filter_map(|&i| self.claim_of(&records[i]))
            .collect();
        match self
            .call_store("claim", |store| async move { store.claim(&claims).await })
            .await
        {
            Ok(outcomes) => {
                let mut progress = false;
                let mut held = 0;
                for (&i, outcome) in waiting.iter().zip(outcomes) {
                    let verdict = next(outcome);
                    records[i].held_since = match verdict {
                        Next::Wait { .. } => {
                            Some(records[i].held_since.unwrap_or_else(Instant::now))
                        }
                        _ => None,
                    };
                    match verdict {
                        Next::Emit(decision) => {
                            records[i].stage = Stage::Emit(decision);
                            progress = true;
                        }
                        Next::AlreadyDelivered => {
                            crate::metrics::replayed(
                                &self.streams[records[i].stream].config.spec.name,
                            );
                            records[i].stage = Stage::Skipped;
                            progress = true;
                        }
                        Next::Wait { .. } => held += 1,
                    }
                }
                if held > 0 {
                    crate::metrics::waited(held);
                }
                progress
            }
            Err(_) => {
                // Store down: fail-open streams pass their records on,
                // marked; fail-closed ones wait for the store.
                let mut progress = false;
                for &i in &waiting {
                    if self.streams[records[i].stream].config.fail_mode == FailMode::Open {
                        records[i].stage = Stage::Emit(Decision::Unverified);
                        progress = true;
                    }
                }
                progress
            }
        }
    }

    /// Produces every decided record, then finalizes the delivered novel
    /// ones and releases the claims of failed ones. Returns whether any
    /// output was delivered and whether any failed.
    async fn emit_round(&mut self, records: &mut [Record]) -> (bool, bool) {
        let ready: Vec<usize> = (0..records.len())
            .filter(|&i| matches!(records[i].stage, Stage::Emit(_)))
            .collect();
        if ready.is_empty() {
            return (false, false);
        }
        let outputs: Vec<Output<'_>> = ready
            .iter()
            .filter_map(|&i| match &records[i].stage {
                Stage::Emit(decision) => Some(self.output(&records[i], decision)),
                _ => None,
            })
            .collect();
        let results = produce_all(&self.producer, &outputs).await;
        drop(outputs);
        let (mut finalize, mut release) = (Vec::new(), Vec::new());
        let (mut progress, mut failed) = (false, false);
        for (&i, result) in ready.iter().zip(results) {
            let Stage::Emit(decision) = records[i].stage.clone() else {
                continue;
            };
            let stream = &self.streams[records[i].stream].config.spec.name;
            let novel = decision == Decision::Novel;
            match result {
                Ok(()) => {
                    crate::metrics::decided(stream, &decision);
                    self.progress.decided(stream, decision.label());
                    self.log_decision(&records[i], &decision);
                    if novel {
                        finalize.extend(self.claim_of(&records[i]));
                    }
                    records[i].stage = Stage::Delivered;
                    progress = true;
                }
                // It may have landed: keep the claim, produce it again
                // (docs/design.md §4.4).
                Err(Failure::Retry(error)) => {
                    failed = true;
                    crate::metrics::produce_failed(stream);
                    if let Some(held_back) = UNDELIVERED.allow(Instant::now()) {
                        warn!(%error, topic = %records[i].input.topic, partition = records[i].input.partition,
                            offset = records[i].input.offset, held_back, "output not delivered: will produce it again");
                    }
                }
                // Refused for its size or content, certainly not persisted:
                // to audit without its payload; a claim it won is freed.
                Err(Failure::Refused(error)) => {
                    progress = true;
                    crate::metrics::produce_failed(stream);
                    if novel {
                        release.extend(self.claim_of(&records[i]).map(|c| Held::from(&c)));
                    }
                    let carry = carry_of(&decision);
                    let next = match carry {
                        Carry::Whole => Some(false),
                        Carry::NoPayload => Some(true),
                        Carry::Bare => None,
                    };
                    warn!(%error, topic = %records[i].input.topic, partition = records[i].input.partition,
                        offset = records[i].input.offset, "output refused: to audit without its payload");
                    records[i].stage = match next {
                        Some(bare) => Stage::Emit(Decision::Invalid(Invalid::Undeliverable {
                            bytes: carry.bytes(&records[i].input),
                            reason: error,
                            bare,
                        })),
                        None => {
                            tracing::error!(topic = %records[i].input.topic, partition = records[i].input.partition,
                                offset = records[i].input.offset, "even a bare audit record was refused: given up");
                            Stage::Delivered
                        }
                    };
                }
            }
        }
        if !finalize.is_empty() {
            self.finalize(&finalize).await;
        }
        if !release.is_empty() {
            let stream_names: Vec<String> = release
                .iter()
                .map(|s| self.streams[s.stream.0].config.spec.name.clone())
                .collect();
            let publish = Publish { releases: release, ..Publish::default() };
            if let Ok(answer) = self
                .call_store(
                    "release",
                    |store| async move { store.publish(&publish).await },
                )
                .await
            {
                for (name, done) in stream_names.iter().zip(answer.released) {
                    if done {
                        crate::metrics::released(name, 1);
                    }
                }
            }
        }
        (progress, failed)
    }

    /// Finalizes delivered claims, retrying while the store is down: an
    /// unfinalized claim would lapse and let a later copy through. Gives up
    /// only at shutdown (the outputs are delivered; the offsets still count).
    async fn finalize(&mut self, settles: &[Claim]) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let publish = Publish {
                done: settles.iter().map(Held::from).collect(),
                inserts: settles
                    .iter()
                    .map(|c| Insert { stream: c.stream, hash: c.hash, at: c.at })
                    .collect(),
                ..Publish::default()
            };
            match self
                .call_store(
                    "finalize",
                    |store| async move { store.publish(&publish).await },
                )
                .await
            {
                Ok(answer) => {
                    let lost = answer.done.iter().filter(|d| !**d).count();
                    if lost > 0 {
                        warn!(
                            lost,
                            "claims taken by another record before finalize: their leases lapsed"
                        );
                    }
                    return;
                }
                Err(_) if *self.stop.borrow() => return,
                Err(_) => {
                    let wait = backoff.max(self.breaker.wait(Instant::now()));
                    keep_alive(&self.consumer, &mut self.carry, wait).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// One store call through the breaker, timed and counted.
    async fn call_store<T, F, Fut>(&mut self, op: &'static str, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(std::sync::Arc<dyn crate::store::ClaimStore>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let now = Instant::now();
        if !self.breaker.allows(now) {
            return Err(StoreError::Unavailable("breaker open".into()));
        }
        let result = match tokio::time::timeout(STORE_TIMEOUT, call(self.store.clone())).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Unavailable(format!("{op} timed out"))),
        };
        crate::metrics::store_call(op, now.elapsed(), result.is_ok());
        match &result {
            Ok(_) => self.breaker.success(),
            Err(error) => self.breaker.failure(Instant::now(), error),
        }
        result
    }

    fn output<'a>(&'a self, record: &'a Record, decision: &Decision) -> Output<'a> {
        let stream = &self.streams[record.stream];
        let topic = match decision.route() {
            crate::decision::Route::Clean => stream.config.clean.as_str(),
            crate::decision::Route::Audit => stream.config.audit.as_str(),
        };
        let name = |c: &Coordinates| stream.topic_name(c.topic);
        Output {
            topic,
            input: &record.input,
            decision_headers: headers(decision, record.print.as_ref().map(|p| &p.hash), &name),
            carry: carry_of(decision),
        }
    }

    fn log_decision(&self, record: &Record, decision: &Decision) {
        if *decision == Decision::Novel {
            return;
        }
        let trace_id = trace_id(&record.input);
        let source_hash = record.print.map(|p| p.hash.to_string()).unwrap_or_default();
        let reason = match decision {
            Decision::Invalid(invalid) => invalid.to_string(),
            _ => String::new(),
        };
        debug!(
            trace_id = %trace_id,
            source_hash = %source_hash,
            decision = decision.label(),
            stream = %self.streams[record.stream].config.spec.name,
            reason = %reason,
            "suppressed or marked"
        );
    }

    /// Drops records of partitions this replica no longer owns, releasing
    /// the claims they won but did not deliver.
    async fn drop_revoked(&mut self, records: &mut Vec<Record>) {
        let assignment =
            rdkafka::consumer::Consumer::assignment(&self.consumer).unwrap_or_default();
        let (kept, gone): (Vec<Record>, Vec<Record>) =
            std::mem::take(records).into_iter().partition(|r| {
                assignment
                    .find_partition(&r.input.topic, r.input.partition)
                    .is_some()
            });
        *records = kept;
        // Records read while the batch waited: their partitions may be gone.
        self.carry
            .retain(|i| assignment.find_partition(&i.topic, i.partition).is_some());
        if !gone.is_empty() {
            // Should a partition come back here from an older committed
            // offset, what was delivered is not decided again.
            for record in gone
                .iter()
                .filter(|r| matches!(r.stage, Stage::Delivered | Stage::Skipped))
            {
                self.finished
                    .entry((record.input.topic.clone(), record.input.partition))
                    .or_default()
                    .add(record.input.offset);
            }
            info!(
                records = gone.len(),
                "partitions revoked mid-batch: their records go to the new owner"
            );
            self.release_undelivered(&gone).await;
        }
    }

    async fn release_undelivered(&mut self, records: &[Record]) {
        let releases: Vec<Held> = records
            .iter()
            .filter(|r| r.stage == Stage::Emit(Decision::Novel))
            .filter_map(|r| self.claim_of(r).map(|c| Held::from(&c)))
            .collect();
        if !releases.is_empty() {
            let publish = Publish { releases, ..Publish::default() };
            let _ = self
                .call_store(
                    "release",
                    |store| async move { store.publish(&publish).await },
                )
                .await;
        }
    }
}

/// A store call slower than this counts as a failure: a hung server must
/// trip the breaker in seconds, not minutes.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// Trace id: W3C `traceparent` or `x-trace-id` when the producer set one,
/// else the record's coordinates.
fn trace_id(input: &Input) -> String {
    for name in ["traceparent", "x-trace-id"] {
        if let Some((_, Some(value))) = input
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
        {
            return String::from_utf8_lossy(value).into_owned();
        }
    }
    format!("{}/{}/{}", input.topic, input.partition, input.offset)
}

/// Per partition, the offset after the last record of its unbroken run of
/// finished records from the start of the batch.
fn finished_prefixes(records: &[Record]) -> BTreeMap<(String, i32), i64> {
    let mut by_partition: BTreeMap<(String, i32), Vec<(i64, bool)>> = BTreeMap::new();
    for record in records {
        let finished = matches!(record.stage, Stage::Delivered | Stage::Skipped);
        by_partition
            .entry((record.input.topic.clone(), record.input.partition))
            .or_default()
            .push((record.input.offset, finished));
    }
    let mut next = BTreeMap::new();
    for (partition, mut offsets) in by_partition {
        offsets.sort_unstable();
        let prefix = offsets.iter().take_while(|(_, finished)| *finished).last();
        if let Some((offset, _)) = prefix {
            next.insert(partition, offset + 1);
        }
    }
    next
}

/// What of its input a decision's output carries: all of it, but for a
/// record whose output the broker refused.
fn carry_of(decision: &Decision) -> Carry {
    match decision {
        Decision::Invalid(Invalid::Undeliverable { bare: false, .. }) => Carry::NoPayload,
        Decision::Invalid(Invalid::Undeliverable { bare: true, .. }) => Carry::Bare,
        _ => Carry::Whole,
    }
}
