//! One round on PostgreSQL (docs/design.md §6.1): two transactions, the
//! publish (raises, done flags, releases) and then the reads (watermarks,
//! reset ranges, identities) with the claims (one, where the publish holds
//! raises alone: they go first in it), their statements pipelined
//! on one connection in the contract's order, so a warm round is one round
//! trip. What the claims met is
//! judged by `judge.rs` against the watermarks the same transaction read;
//! the rare follow-ups (re-stamps and take-overs by compare and set, a
//! claim that raced another transaction) run after it, as Redis's do.

use std::collections::HashMap;

use futures::future::join_all;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::connect::store_error;
use super::{PostgresStore, Session};
use crate::coordinates::TopicTag;
use crate::store::judge::{self, Filter, Maps, Verdict};
use crate::store::value::{encode_owner, ClaimValue};
use crate::store::{
    millis, spec, Claim, Held, PartitionRanges, Publish, RoundAnswer, StoreError, StreamId,
};

pub(super) type Key = (usize, TopicTag, i32);

/// What a claim met: `None` where it wrote its row.
pub(super) type Met = Option<ClaimValue>;

/// One statement of a trip: its SQL and its parameters.
pub(super) struct Step {
    sql: String,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Step {
    pub(super) fn new(sql: &str, params: Vec<Box<dyn ToSql + Sync + Send>>) -> Step {
        Step {
            sql: sql.to_string(),
            params,
        }
    }
}

/// Runs each group of steps as a transaction of its own (an empty group
/// as none), every group in one pipeline, and answers each step's rows.
async fn transactions(
    session: &Session,
    groups: Vec<Vec<Step>>,
) -> Result<Vec<Vec<Row>>, StoreError> {
    let mut all = Vec::new();
    let mut mine = Vec::new();
    for group in groups.into_iter().filter(|g| !g.is_empty()) {
        all.push(Step::new("BEGIN", vec![]));
        mine.push(false);
        mine.extend(group.iter().map(|_| true));
        all.extend(group);
        all.push(Step::new("COMMIT", vec![]));
        mine.push(false);
    }
    let answers = pipeline(session, &all).await?;
    Ok(answers
        .into_iter()
        .zip(mine)
        .filter_map(|(rows, mine)| mine.then_some(rows))
        .collect())
}

/// Prepares (once per connection) and sends every step before reading any
/// answer: tokio-postgres sends each request as its future is first
/// polled, and `join_all` polls them in order.
pub(super) async fn pipeline(
    session: &Session,
    steps: &[Step],
) -> Result<Vec<Vec<Row>>, StoreError> {
    let client = &session.client;
    // A connection's first round prepares its statements, all in one trip.
    let statements = join_all(steps.iter().map(|step| client.prepare_cached(&step.sql)))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| store_error("prepare", e))?;
    let queries = steps.iter().zip(&statements).map(|(step, statement)| {
        let params: Vec<&(dyn ToSql + Sync)> = step
            .params
            .iter()
            .map(|p| &**p as &(dyn ToSql + Sync))
            .collect();
        async move { client.query(statement, &params).await }
    });
    join_all(queries)
        .await
        .into_iter()
        .map(|r| r.map_err(|e| store_error("round", e)))
        .collect()
}

pub(super) fn boxed<T: ToSql + Sync + Send + 'static>(value: T) -> Box<dyn ToSql + Sync + Send> {
    Box::new(value)
}

/// One stream's done flags or releases: the stream, the requests' indices,
/// their hashes and owner bytes.
type HeldGroup = (usize, Vec<usize>, Vec<Vec<u8>>, Vec<Vec<u8>>);

/// Per stream, the requests (done flags or releases) grouped.
fn by_stream(held: &[Held]) -> Result<Vec<HeldGroup>, StoreError> {
    type Requests = (Vec<usize>, Vec<Vec<u8>>, Vec<Vec<u8>>);
    let mut groups: HashMap<usize, Requests> = HashMap::new();
    for (index, h) in held.iter().enumerate() {
        let (indices, hashes, owners) = groups.entry(h.stream.0).or_default();
        indices.push(index);
        hashes.push(h.hash.0[..16].to_vec());
        owners.push(encode_owner(&h.holder, h.token)?.to_vec());
    }
    let mut out: Vec<_> = groups
        .into_iter()
        .map(|(s, (i, h, o))| (s, i, h, o))
        .collect();
    out.sort_by_key(|g| g.0);
    Ok(out)
}

/// The distinct hashes of one stream's claims, first claim first.
pub(super) struct Batch {
    stream: usize,
    /// Per distinct hash, the index of the claim that represents it.
    first: Vec<usize>,
}

impl PostgresStore {
    pub(super) async fn run_round(
        &self,
        session: &Session,
        publish: &Publish,
        claims: &[Claim],
        read: &[StreamId],
    ) -> Result<RoundAnswer, StoreError> {
        let adopted = self.adopted();
        let mut steps = Vec::new();
        for r in &publish.raises {
            let key_id = &spec(&self.streams, r.stream)?.key_id;
            steps.push(Step::new(
                &self.sql.raise,
                vec![
                    boxed(key_id.clone()),
                    boxed(r.topic.0 as i32),
                    boxed(r.partition),
                    boxed(r.start),
                    boxed(r.end),
                ],
            ));
        }
        let done = by_stream(&publish.done)?;
        let releases = by_stream(&publish.releases)?;
        for (groups, release) in [(&done, false), (&releases, true)] {
            for (stream, _, hashes, owners) in groups {
                let sql = &self.sql.claims[*stream];
                let text = if release { &sql.release } else { &sql.done };
                steps.push(Step::new(
                    text,
                    vec![boxed(hashes.clone()), boxed(owners.clone())],
                ));
            }
        }
        let mut streams: Vec<usize> = read
            .iter()
            .chain(claims.iter().map(|c| &c.stream))
            .map(|s| s.0)
            .collect();
        streams.sort_unstable();
        streams.dedup();
        let key_ids = streams
            .iter()
            .map(|&s| Ok(spec(&self.streams, StreamId(s))?.key_id.clone()))
            .collect::<Result<Vec<String>, StoreError>>()?;
        // Done flags and releases commit before the reads and claims
        // begin: a transaction that set done flags and then waited on
        // another's claims (an insert waits on the writer of a row it
        // meets) while that one did the same the other way round would
        // deadlock. Raises alone go in the claims' transaction, before
        // the reads (which then see them): they lock watermark rows only,
        // which no claim waits on, so a steady round (raises and claims)
        // commits once, one WAL flush instead of two.
        let publish_steps = std::mem::take(&mut steps);
        let publish_apart = !publish.done.is_empty() || !publish.releases.is_empty();
        steps.push(Step::new(&self.sql.marks, vec![boxed(key_ids.clone())]));
        steps.push(Step::new(&self.sql.ranges, vec![boxed(key_ids)]));
        let mut claimed: Vec<usize> = claims.iter().map(|c| c.stream.0).collect();
        claimed.sort_unstable();
        claimed.dedup();
        let checked: Vec<usize> = claimed
            .iter()
            .copied()
            .filter(|s| adopted.contains_key(s))
            .collect();
        // Each stream's identity, and its progress mark beside it: a dump
        // restored in place keeps the connections and the statements
        // (PostgreSQL plans them again), so no failure says so; the mark
        // below the floor does, before any claim is judged.
        let checked_ids = checked
            .iter()
            .flat_map(|&s| {
                let key_id = &self.streams[s].key_id;
                [key_id.clone(), super::marks::row(key_id)]
            })
            .collect::<Vec<_>>();
        steps.push(Step::new(&self.sql.identities, vec![boxed(checked_ids)]));
        let floors: Vec<u64> = checked
            .iter()
            .map(|&s| self.floors.of(s).first().copied().unwrap_or(0))
            .collect();
        let everyone: Vec<usize> = (0..claims.len()).collect();
        let batches = self.batches_of(claims, &everyone);
        for batch in &batches {
            steps.push(self.claim_step(batch, claims, &adopted)?);
        }

        let groups = match publish_apart {
            true => vec![publish_steps, steps],
            false => vec![publish_steps.into_iter().chain(steps).collect()],
        };
        let mut answers = transactions(session, groups).await?.into_iter();
        let mut next = || answers.next().unwrap_or_default();
        let mut answer = RoundAnswer::default();
        for _ in &publish.raises {
            let rows = next();
            let row = rows.first().ok_or_else(|| {
                StoreError::Unavailable("a watermark raise raced another transaction".into())
            })?;
            answer
                .raised
                .push(row.try_get(0).map_err(|e| store_error("raise", e))?);
        }
        answer.done = vec![false; publish.done.len()];
        answer.released = vec![false; publish.releases.len()];
        for (groups, release) in [(&done, false), (&releases, true)] {
            for (_, indices, hashes, owners) in groups {
                let mut set: Vec<(Vec<u8>, Vec<u8>)> = next()
                    .iter()
                    .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
                    .collect::<Result<_, tokio_postgres::Error>>()
                    .map_err(|e| store_error("done flags", e))?;
                for (k, &index) in indices.iter().enumerate() {
                    let pair = (hashes[k].clone(), owners[k].clone());
                    let Some(at) = set.iter().position(|p| *p == pair) else {
                        continue;
                    };
                    // A release frees a claim once; a done flag set before
                    // counts as set.
                    if release {
                        set.swap_remove(at);
                        answer.released[index] = true;
                    } else {
                        answer.done[index] = true;
                    }
                }
            }
        }
        answer.watermarks = self.parse_marks(next())?;
        answer.ranges = self.parse_ranges(next())?;
        answer.lost = self.lost(next(), &checked, &adopted, Some(&floors))?;
        let mut met: Vec<Option<Met>> = vec![None; claims.len()];
        for batch in &batches {
            self.parse_claims(batch, claims, next(), &mut met)?;
        }
        let marks: HashMap<Key, i64> = answer
            .watermarks
            .iter()
            .map(|w| ((w.stream.0, w.topic, w.partition), w.below))
            .collect();
        let ranges: HashMap<Key, PartitionRanges> = answer
            .ranges
            .iter()
            .map(|r| ((r.stream.0, r.topic, r.partition), r.clone()))
            .collect();
        let judged = Judged {
            marks: &marks,
            ranges: &ranges,
        };
        (answer.outcomes, answer.taken_over) = self
            .judge_claims(session, claims, met, &answer.lost, judged, &adopted)
            .await?;
        Ok(answer)
    }

    /// The claims at `indices`, by stream, each hash once.
    pub(super) fn batches_of(&self, claims: &[Claim], indices: &[usize]) -> Vec<Batch> {
        let mut streams: Vec<usize> = indices.iter().map(|&i| claims[i].stream.0).collect();
        streams.sort_unstable();
        streams.dedup();
        streams
            .into_iter()
            .map(|stream| {
                let mut seen = std::collections::HashSet::new();
                let first = indices
                    .iter()
                    .copied()
                    .filter(|&i| claims[i].stream.0 == stream && seen.insert(claims[i].hash))
                    .collect();
                Batch { stream, first }
            })
            .collect()
    }

    pub(super) fn claim_step(
        &self,
        batch: &Batch,
        claims: &[Claim],
        adopted: &HashMap<usize, crate::store::StoreIdentity>,
    ) -> Result<Step, StoreError> {
        let spec = spec(&self.streams, StreamId(batch.stream))?;
        let ttl = millis(spec.tier1_ttl).max(1);
        // In hash order: concurrent rounds insert shared hashes in one order.
        let mut rows = batch
            .first
            .iter()
            .map(|&i| {
                let c = &claims[i];
                let value = ClaimValue::pending(c.holder, c.token, c.digest, c.at).encode()?;
                Ok((
                    c.hash.0[..16].to_vec(),
                    c.at.saturating_add(ttl),
                    value.to_vec(),
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut expiries = Vec::with_capacity(rows.len());
        let mut hashes = Vec::with_capacity(rows.len());
        let mut values = Vec::with_capacity(rows.len());
        for (hash, expiry, value) in rows {
            hashes.push(hash);
            expiries.push(expiry);
            values.push(value);
        }
        Ok(Step::new(
            &self.sql.claims[batch.stream].claim,
            vec![
                boxed(expiries),
                boxed(hashes),
                boxed(values),
                boxed(ttl),
                boxed(adopted.get(&batch.stream).map(|i| i.to_hex())),
                boxed(spec.key_id.clone()),
            ],
        ))
    }

    /// Per claim, what it met; `None` where the statement could not tell
    /// (it raced another transaction): claimed again.
    pub(super) fn parse_claims(
        &self,
        batch: &Batch,
        claims: &[Claim],
        rows: Vec<Row>,
        met: &mut [Option<Met>],
    ) -> Result<(), StoreError> {
        let mut by_hash: HashMap<Vec<u8>, Option<Met>> = HashMap::new();
        // The first claim of each hash (by its 16 bytes, the table's key),
        // looked up once per row and claim rather than searched.
        let first_of: HashMap<&[u8], usize> = batch
            .first
            .iter()
            .map(|&i| (&claims[i].hash.0[..16], i))
            .collect();
        for row in rows {
            let parse = || -> Result<_, tokio_postgres::Error> {
                let hash: Vec<u8> = row.try_get(0)?;
                let written: bool = row.try_get(1)?;
                let value: Option<Vec<u8>> = row.try_get(2)?;
                let expires_at: Option<i64> = row.try_get(3)?;
                Ok((hash, written, value, expires_at))
            };
            let (hash, written, value, expires_at) =
                parse().map_err(|e| store_error("claim", e))?;
            let index = *first_of
                .get(&hash[..])
                .ok_or_else(|| StoreError::Protocol("a claim answered another hash".into()))?;
            let at = claims[index].at;
            let found = if written {
                Some(None)
            } else {
                match (value, expires_at) {
                    (Some(value), Some(expires_at)) if expires_at > at => {
                        Some(Some(ClaimValue::decode(&value)?))
                    }
                    _ => None,
                }
            };
            by_hash.insert(hash, found);
        }
        for (i, claim) in claims.iter().enumerate() {
            if claim.stream.0 != batch.stream {
                continue;
            }
            let Some(found) = by_hash.get(&claim.hash.0[..16]) else {
                continue;
            };
            met[i] = match found {
                // A later claim on a hash an earlier one of the round
                // wrote meets that one's claim, as `SET NX GET` would.
                Some(None) if first_of.get(&claim.hash.0[..16]) != Some(&i) => {
                    let first = first_of.get(&claim.hash.0[..16]).copied().unwrap_or(i);
                    let c = &claims[first];
                    Some(Some(ClaimValue::pending(c.holder, c.token, c.digest, c.at)))
                }
                other => *other,
            };
        }
        Ok(())
    }
}

/// What a round's claims are judged against.
pub(super) struct Judged<'a> {
    pub(super) marks: &'a HashMap<Key, i64>,
    pub(super) ranges: &'a HashMap<Key, PartitionRanges>,
}

impl Judged<'_> {
    /// The pure judgement with the round's watermarks and reset ranges.
    pub(super) fn verdict(&self, claim: &Claim, existing: Option<&ClaimValue>) -> Verdict {
        let reads = Maps {
            stream: claim.stream.0,
            below: self.marks,
            ranges: self.ranges,
        };
        judge::verdict(claim, existing, Filter::default(), &reads)
    }
}
