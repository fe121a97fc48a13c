//! The claim protocol on Redis: a round's trips, the judgement of what the
//! claims met, the rare follow-ups, and the operator's figures. What the
//! commands are is `round.rs`; what the answers mean is `judge.rs`.

use std::collections::HashMap;
use std::time::Instant;

use async_trait::async_trait;
use redis::Value;

use super::early::{filter_of, Noted};
use super::native;
use super::round::{self, existing, noscript, values, Answers, Plan};
use super::tier2::{self, counter_key};
use super::{protocol, unparsable, watermarks, Keyed, RedisStore};
use crate::clock::Millis;
use crate::coordinates::TopicTag;
use crate::store::judge::{self, Filter, Maps, Verdict};
use crate::store::value::ClaimValue;
use crate::store::{
    millis, spec, Check, Claim, ClaimOutcome, ClaimStore, EarlyRun, FilterFill, IdentityFound,
    Marked, PartitionRanges, PartitionReset, Publish, Restored, RoundAnswer, RunsName, StoreError,
    StoreIdentity, StoreStats, StreamId, StreamLost,
};

/// A re-stamp meets a value changed under it at most this often in one
/// round before the round fails (and is sent again whole).
const RESTAMP_ATTEMPTS: usize = 4;

type Watermarks = HashMap<(usize, TopicTag, i32), i64>;
type Ranges = HashMap<(usize, TopicTag, i32), PartitionRanges>;

/// What a round's claims are judged against.
struct Judged<'a> {
    in_filter: &'a [bool],
    marks: &'a Watermarks,
    ranges: &'a Ranges,
    /// Streams whose store lost its state: their claims are not judged.
    lost: &'a [StreamLost],
}

/// A record that met a value it writes over by compare and set: its own
/// unsettled claim (re-stamp) or an abandoned holder's (take-over).
#[derive(Clone, Copy)]
struct Overwrite {
    index: usize,
    old: ClaimValue,
    take_over: bool,
}

#[async_trait]
impl ClaimStore for RedisStore {
    async fn round(
        &self,
        publish: &Publish,
        claims: &[Claim],
        read: &[StreamId],
    ) -> Result<RoundAnswer, StoreError> {
        // Where a floor rose or a trip failed since the last round, the
        // marks are checked first: a store that came back older is found
        // before any claim on it is judged.
        let behind = self.recheck_marks().await?;
        let adopted = self.adopted();
        // A poisoned lock only loses what was learnt of overflow parts:
        // every one is probed again, which stays correct.
        let clear = self.clear.lock().map(|c| c.clone()).unwrap_or_default();
        let setting = round::Setting {
            prefix: &self.prefix,
            backend: self.filter_backend,
            streams: &self.streams,
            adopted: &adopted,
            layouts: &self.layouts,
            cluster: self.conn.is_cluster(),
            floors: &self.floors,
            clear: self.ask_overflow.then_some(&clear),
        };
        let mut plan = {
            let sweeps = self.sweeps();
            let native = round::Native {
                sweeps: &sweeps,
                now: Instant::now(),
            };
            Plan::new(setting, publish, claims, read, native)?
        };
        // On a cluster the inserts' nodes answer in no order with the
        // rest: they go first, acknowledged before any raise is sent.
        let (inserts, watch) = if self.conn.is_cluster() && !plan.inserts.is_empty() {
            self.insert(&plan.inserts).await?;
            (Vec::new(), Vec::new())
        } else {
            self.insert_commands(&plan.inserts)
        };
        let (commands, split) = plan.trip(&self.scripts, inserts);
        let sent = Instant::now();
        let trip = self.conn.run(commands).await;
        // A failed trip may have met a new connection, to a server that
        // perhaps came back older: what was learnt of it is not trusted.
        let mut answers: Answers = split(trip.inspect_err(|_| {
            self.sweeps().forget();
            self.connection_may_have_changed();
        })?);
        // Standalone: the inserts ran before the raises, in one pipeline.
        // Items a full generation refused reach its overflow part before
        // the round answers (a failure fails the round, sent again whole);
        // only a crash in between would leave them to tier 1 alone, once
        // per generation, the first time it is found full.
        self.after_inserts(watch, std::mem::take(&mut answers.inserts))
            .await?;
        self.resend_lost_scripts(&plan, &mut answers).await?;
        let written = native::written(std::mem::take(&mut answers.native))?;
        self.native_sent
            .fetch_add(written.len() as u64, std::sync::atomic::Ordering::Relaxed);

        let mut answer = RoundAnswer {
            raised: plan
                .raises
                .answers(values(answers.raises, "raise")?, publish.raises.len())?,
            done: plan
                .done
                .answers(values(answers.done, "done flag")?, publish.done.len())?,
            released: plan
                .releases
                .answers(values(answers.releases, "release")?, publish.releases.len())?,
            ..RoundAnswer::default()
        };
        if answers.reads.len() != plan.streams.len() {
            return Err(StoreError::Protocol(
                "watermark reads answered short".into(),
            ));
        }
        for (stream, read) in plan
            .streams
            .iter()
            .zip(values(answers.reads, "watermarks")?)
        {
            let (marks, ranges) = watermarks::parse_all(*stream, read)?;
            answer.watermarks.extend(marks);
            answer.ranges.extend(ranges);
        }
        let marks: Watermarks = answer
            .watermarks
            .iter()
            .map(|w| ((w.stream.0, w.topic, w.partition), w.below))
            .collect();
        let ranges: Ranges = answer
            .ranges
            .iter()
            .map(|r| ((r.stream.0, r.topic, r.partition), r.clone()))
            .collect();
        answer.lost = plan
            .identities
            .judge(std::mem::take(&mut answers.identities))?;
        // What the identities say wins (missing names the likelier cause).
        for lost in behind {
            if answer.lost.iter().all(|l| l.stream != lost.stream) {
                answer.lost.push(lost);
            }
        }
        // A mark below its floor: the check marks the identity gone back
        // now, so every replica stops at its next round. Once or so per
        // replica: the worker claims nothing more for a lost stream.
        let behind: Vec<StreamId> = answer
            .lost
            .iter()
            .filter(|l| l.how == Check::Behind)
            .map(|l| l.stream)
            .collect();
        for stream in behind {
            let _ = self.check_marks_at(stream).await;
        }
        let (mut held, learnt) = existing(&plan.claims, answers.claims, claims.len())?;
        self.learn(sent, learnt);
        self.native_follow_up(&plan, claims, &written, &mut held, &mut answer.lost)
            .await?;
        let mut in_filter = tier2::hits(&plan.probe_map, answers.probes, claims.len())?;
        let asked = std::mem::take(&mut answers.overflow_reads);
        self.overflow_follow_up(&plan, &clear, asked, &mut in_filter)
            .await?;
        let judged = Judged {
            in_filter: &in_filter,
            marks: &marks,
            ranges: &ranges,
            lost: &answer.lost,
        };
        (answer.outcomes, answer.taken_over) = self.judge_claims(claims, held, judged).await?;
        Ok(answer)
    }

    async fn note_early_inserts(&self, runs: &[EarlyRun]) -> Result<(), StoreError> {
        if runs.is_empty() {
            return Ok(());
        }
        self.note_runs(runs).await
    }

    // Records of finished runs expire on the server's clock: `at` is the
    // caller's, not needed here.
    async fn put_runs(&self, name: &RunsName, content: &[u8], _: Millis) -> Result<(), StoreError> {
        self.put_runs_at(name, content).await
    }

    async fn get_runs(&self, name: &RunsName, _: Millis) -> Result<Option<Vec<u8>>, StoreError> {
        self.get_runs_at(name).await
    }

    async fn refresh_runs(&self, name: &RunsName, _: Millis) -> Result<bool, StoreError> {
        self.refresh_runs_at(name).await
    }

    async fn delete_runs(&self, names: &[RunsName]) -> Result<(), StoreError> {
        self.delete_runs_at(names).await
    }

    async fn find_identity(&self, stream: StreamId) -> Result<IdentityFound, StoreError> {
        self.find_identity_at(stream).await
    }

    async fn write_identity(
        &self,
        stream: StreamId,
        identity: StoreIdentity,
        replace: bool,
    ) -> Result<IdentityFound, StoreError> {
        self.write_identity_at(stream, identity, replace).await
    }

    async fn verify_identity(&self, streams: &[StreamId]) -> Result<Vec<StreamLost>, StoreError> {
        self.verify_identity_at(streams).await
    }

    fn adopt_identity(&self, stream: StreamId, identity: StoreIdentity) {
        self.adopt(stream, identity);
    }

    async fn advance_marks(&self, stream: StreamId) -> Result<Marked, StoreError> {
        self.advance_marks_at(stream).await
    }

    async fn check_marks(&self, stream: StreamId) -> Result<Marked, StoreError> {
        self.check_marks_at(stream).await
    }

    fn raise_floors(&self, stream: StreamId, marks: &[u64]) {
        self.raise_floors_to(stream, marks);
    }

    async fn restore_marks(&self, stream: StreamId, marks: &[u64]) -> Result<(), StoreError> {
        self.restore_marks_at(stream, marks).await
    }

    async fn reset(&self, resets: &[PartitionReset]) -> Result<(), StoreError> {
        self.record_reset(resets).await
    }

    async fn restore(&self, claims: &[Restored]) -> Result<(), StoreError> {
        self.restore_claims(claims).await
    }

    async fn stats(&self, at: Millis) -> Result<StoreStats, StoreError> {
        let mut info = redis::cmd("INFO");
        info.arg("stats");
        let mut evicted_keys = 0;
        // A user the ACL keeps from INFO (the documented minimal user, managed
        // services): the gauge stays 0 (the dry round warned at start),
        // and the filter fill and the store's reachability still count.
        let answers = match self.conn.on_every_node(&info).await {
            Ok(answers) => answers,
            Err(StoreError::Refused(_)) => Vec::new(),
            Err(other) => return Err(other),
        };
        for answer in answers {
            let text: String = redis::from_redis_value(answer).map_err(unparsable)?;
            evicted_keys += text
                .lines()
                .find_map(|line| line.strip_prefix("evicted_keys:"))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
        let tiered: Vec<_> = self
            .streams
            .iter()
            .filter_map(|spec| spec.filter.as_ref().map(|plan| (spec, plan)))
            .collect();
        let commands = tiered
            .iter()
            .map(|(spec, plan)| {
                let key = counter_key(&self.prefix, &spec.key_id, plan.epoch(at));
                let mut cmd = redis::cmd("GET");
                cmd.arg(&key);
                Keyed {
                    key: key.into_bytes(),
                    cmd,
                }
            })
            .collect();
        let answers = self.conn.run(commands).await?;
        let filters = tiered
            .iter()
            .zip(answers)
            .map(|((spec, plan), answer)| {
                let inserts: Option<u64> =
                    redis::from_redis_value(answer.map_err(protocol)?).map_err(unparsable)?;
                Ok(FilterFill {
                    stream: spec.name.clone(),
                    inserts: inserts.unwrap_or(0),
                    capacity: plan.sizing.capacity,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(StoreStats {
            evicted_keys,
            filters,
            tier1_hash_fields: self.take_most_fields(),
        })
    }
}

impl RedisStore {
    /// Scripts the server did not know (`NOSCRIPT`: a restart, a failover,
    /// `SCRIPT FLUSH`) are sent again as `EVAL`, and the watermarks read
    /// again after them, then the claim scripts that were lost or that
    /// share a hash tag with a lost done flag or release (they ran before
    /// it): claims are judged after the publish. A claim script run twice
    /// meets, the second time, what its first run wrote: its own claim with
    /// its own token, judged as written (§4.4 rule 4).
    async fn resend_lost_scripts(
        &self,
        plan: &Plan<'_>,
        answers: &mut Answers,
    ) -> Result<(), StoreError> {
        let lost = [
            noscript(&answers.raises),
            noscript(&answers.done),
            noscript(&answers.releases),
            noscript(&answers.claims),
        ];
        if lost.iter().all(Vec::is_empty) {
            return Ok(());
        }
        // A server that lost its scripts may be another (a restart, a
        // failover): nothing learnt of it is trusted, and its marks are
        // checked before the next round.
        self.sweeps().forget();
        self.connection_may_have_changed();
        let scripts = &self.scripts;
        let mut commands: Vec<Keyed> = Vec::new();
        commands.extend(
            lost[0]
                .iter()
                .filter_map(|&g| plan.raises.invocation(&scripts.raise, g, false)),
        );
        commands.extend(
            lost[1]
                .iter()
                .filter_map(|&g| plan.done.invocation(&scripts.done, g, false)),
        );
        commands.extend(
            lost[2]
                .iter()
                .filter_map(|&g| plan.releases.invocation(&scripts.release, g, false)),
        );
        commands.extend(plan.reads());
        let settled_tags: Vec<u8> = [(&plan.done, &lost[1]), (&plan.releases, &lost[2])]
            .into_iter()
            .flat_map(|(groups, failed)| failed.iter().filter_map(|&g| groups.slots.get(g)))
            .map(|(_, tag)| *tag)
            .collect();
        let reclaim: Vec<usize> = plan
            .claims
            .slots
            .iter()
            .enumerate()
            .filter(|(g, (_, tag))| lost[3].contains(g) || settled_tags.contains(tag))
            .map(|(g, _)| g)
            .collect();
        commands.extend(
            reclaim
                .iter()
                .filter_map(|&g| plan.claims.invocation(&scripts.claim, g, false)),
        );
        let mut again = self.conn.run(commands).await?.into_iter();
        for (part, failed) in [
            &mut answers.raises,
            &mut answers.done,
            &mut answers.releases,
        ]
        .into_iter()
        .zip(&lost)
        {
            for &g in failed {
                if let (Some(slot), Some(answer)) = (part.get_mut(g), again.next()) {
                    *slot = answer;
                }
            }
        }
        answers.reads = again.by_ref().take(plan.streams.len()).collect();
        for (g, answer) in reclaim.into_iter().zip(again) {
            if let Some(slot) = answers.claims.get_mut(g) {
                *slot = answer;
            }
        }
        Ok(())
    }

    /// Judges every claim's answer against the watermarks just read; the
    /// records that met their own claim from an earlier owner re-stamp it.
    /// A claim of a stream whose store lost its state is not judged: what
    /// the store holds now says nothing. Where a record met its own
    /// unsettled claim of an earlier owner's beside a filter hit (exactly
    /// once), the runs its partition's owners noted before their early
    /// inserts are read first, in a follow-up after the probes answered.
    async fn judge_claims(
        &self,
        claims: &[Claim],
        held: Vec<Option<ClaimValue>>,
        judged: Judged<'_>,
    ) -> Result<(Vec<ClaimOutcome>, Vec<usize>), StoreError> {
        let Judged {
            in_filter,
            marks,
            ranges,
            lost,
        } = judged;
        if held.len() != claims.len() {
            return Err(StoreError::Protocol("claims answered short".into()));
        }
        let values: Vec<Option<Option<ClaimValue>>> = claims
            .iter()
            .zip(held)
            .map(|(claim, held)| (!lost.iter().any(|l| l.stream == claim.stream)).then_some(held))
            .collect();
        let hit = |index: usize| in_filter.get(index).copied().unwrap_or(false);
        let mut noted = Noted::new();
        let asking: Vec<(usize, ClaimValue)> = values
            .iter()
            .enumerate()
            .filter_map(|(index, value)| value.flatten().map(|v| (index, v)))
            .collect();
        self.read_noted(claims, &asking, in_filter, &mut noted)
            .await?;
        let mut outcomes = Vec::with_capacity(claims.len());
        let mut restamps = Vec::new();
        let overwrite = |index: usize, old: ClaimValue, verdict: Verdict| match verdict {
            Verdict::Decided(_) => None,
            Verdict::Restamp(_) | Verdict::TakeOver => Some(Overwrite {
                index,
                old,
                take_over: verdict == Verdict::TakeOver,
            }),
        };
        for (index, (claim, value)) in claims.iter().zip(values).enumerate() {
            let Some(value) = value else {
                outcomes.push(ClaimOutcome::StoreLost);
                continue;
            };
            let filter = filter_of(claim, value.as_ref(), hit(index), &noted);
            let judged = verdict(claim, value.as_ref(), marks, ranges, filter);
            // Until the compare and set answers (a value that changed
            // meanwhile is judged again).
            outcomes.push(judged.outcome());
            restamps.extend(value.and_then(|v| overwrite(index, v, judged)));
        }
        let mut taken_over = Vec::new();
        for _ in 0..RESTAMP_ATTEMPTS {
            if restamps.is_empty() {
                taken_over.sort_unstable();
                return Ok((outcomes, taken_over));
            }
            let (written, changed) = self.restamp(claims, &restamps).await?;
            taken_over.extend(written);
            self.read_noted(claims, &changed, in_filter, &mut noted)
                .await?;
            let mut again = Vec::new();
            for (index, now) in changed {
                let claim = &claims[index];
                let filter = filter_of(claim, Some(&now), hit(index), &noted);
                let judged = verdict(claim, Some(&now), marks, ranges, filter);
                outcomes[index] = judged.outcome();
                again.extend(overwrite(index, now, judged));
            }
            restamps = again;
        }
        if restamps.is_empty() {
            taken_over.sort_unstable();
            Ok((outcomes, taken_over))
        } else {
            Err(StoreError::Protocol(
                "a claim kept changing under its re-stamp".into(),
            ))
        }
    }

    /// Compare and set over exactly the value judged (the key keeps its
    /// expiry): a re-stamp writes token and claim time, a take-over the
    /// record's own claim. Returns the take-overs written, and the claims
    /// whose value had changed, with the value now there.
    async fn restamp(
        &self,
        claims: &[Claim],
        restamps: &[Overwrite],
    ) -> Result<(Vec<usize>, Vec<(usize, ClaimValue)>), StoreError> {
        let mut prepared = Vec::with_capacity(restamps.len());
        for Overwrite {
            index,
            old,
            take_over,
        } in restamps
        {
            let claim = &claims[*index];
            let spec = spec(&self.streams, claim.stream)?;
            let new = if *take_over {
                ClaimValue::pending(claim.holder, claim.token, claim.digest, claim.at)
            } else {
                ClaimValue {
                    token: claim.token,
                    claimed_at: claim.at,
                    ..*old
                }
            };
            let place = round::place(
                &self.prefix,
                &self.streams,
                &self.layouts,
                claim.stream,
                &claim.hash,
            )?;
            let write = round::layout(&self.layouts, claim.stream)?.write;
            prepared.push((
                [place.key, place.group],
                vec![
                    old.encode()?.to_vec(),
                    new.encode()?.to_vec(),
                    millis(spec.tier1_ttl).max(1).to_string().into_bytes(),
                    place.field,
                    write.script_arg().to_vec(),
                ],
            ));
        }
        let answers = self
            .run_scripts(prepared.len(), |i, cached| {
                let (keys, args) = &prepared[i];
                self.scripts.restamp.invoke(cached, keys, args)
            })
            .await?;
        let mut changed = Vec::new();
        let mut written = Vec::new();
        for (o, answer) in restamps.iter().zip(answers) {
            match answer {
                Value::Int(1) if o.take_over => written.push(o.index),
                Value::Int(1) => {}
                Value::BulkString(bytes) => changed.push((o.index, ClaimValue::decode(&bytes)?)),
                other => return Err(StoreError::Protocol(format!("re-stamp answered {other:?}"))),
            }
        }
        Ok((written, changed))
    }
}

/// The pure judgement with the round's watermarks and reset ranges.
fn verdict(
    claim: &Claim,
    existing: Option<&ClaimValue>,
    marks: &Watermarks,
    ranges: &Ranges,
    filter: Filter,
) -> Verdict {
    let reads = Maps {
        stream: claim.stream.0,
        below: marks,
        ranges,
    };
    judge::verdict(claim, existing, filter, &reads)
}
