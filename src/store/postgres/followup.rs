//! After a round's transaction: every claim judged against what it met,
//! then the rare follow-ups, pipelined, each its own statement: a record
//! that met its own unsettled claim from an earlier owner re-stamps it, a
//! copy that met an abandoned holder takes its claim over (both compare
//! and set on exactly the value judged), and a claim that raced another
//! transaction is claimed again. A value that changed under a compare and
//! set is judged again.

use std::collections::HashMap;

use tokio_postgres::Row;

use super::connect::store_error;
use super::round::{boxed, pipeline, Judged, Met, Step};
use super::{PostgresStore, Session};
use crate::store::judge::Verdict;
use crate::store::value::ClaimValue;
use crate::store::{millis, Claim, ClaimOutcome, StoreError, StoreIdentity, StreamLost};

/// Follow-ups meet a changed value (or race again) at most this often in
/// one round before the round fails, to be sent again whole.
const ATTEMPTS: usize = 4;

/// A record writing over a value it met: its own unsettled claim
/// (re-stamp) or an abandoned holder's (take-over).
#[derive(Clone, Copy)]
struct Overwrite {
    index: usize,
    old: ClaimValue,
    take_over: bool,
}

/// What is left to do after a judgement.
#[derive(Default)]
struct Pending {
    overwrites: Vec<Overwrite>,
    /// Claims that raced another transaction: claimed again.
    again: Vec<usize>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.overwrites.is_empty() && self.again.is_empty()
    }

    /// Records a verdict; answers the outcome to show until the follow-up
    /// answers.
    fn note(&mut self, index: usize, met: Option<&ClaimValue>, verdict: Verdict) -> ClaimOutcome {
        match (verdict, met) {
            (Verdict::Decided(outcome), _) => outcome,
            (verdict, Some(old)) => {
                self.overwrites.push(Overwrite {
                    index,
                    old: *old,
                    take_over: verdict == Verdict::TakeOver,
                });
                verdict.outcome()
            }
            // Only a claim that met a value re-stamps or takes over.
            (_, None) => ClaimOutcome::Won { fresh: true },
        }
    }
}

impl PostgresStore {
    pub(super) async fn judge_claims(
        &self,
        session: &Session,
        claims: &[Claim],
        met: Vec<Option<Met>>,
        lost: &[StreamLost],
        judged: Judged<'_>,
        adopted: &HashMap<usize, StoreIdentity>,
    ) -> Result<(Vec<ClaimOutcome>, Vec<usize>), StoreError> {
        let mut outcomes = Vec::with_capacity(claims.len());
        let mut pending = Pending::default();
        for (index, (claim, met)) in claims.iter().zip(met).enumerate() {
            if lost.iter().any(|l| l.stream == claim.stream) {
                // Nothing is judged on a state the stream lost.
                outcomes.push(ClaimOutcome::StoreLost);
                continue;
            }
            match met {
                Some(met) => {
                    let verdict = judged.verdict(claim, met.as_ref());
                    outcomes.push(pending.note(index, met.as_ref(), verdict));
                }
                None => {
                    pending.again.push(index);
                    outcomes.push(ClaimOutcome::Won { fresh: false });
                }
            }
        }
        let mut taken_over = Vec::new();
        for _ in 0..ATTEMPTS {
            if pending.is_empty() {
                taken_over.sort_unstable();
                return Ok((outcomes, taken_over));
            }
            pending = self
                .follow_up(
                    session,
                    claims,
                    pending,
                    &judged,
                    adopted,
                    &mut outcomes,
                    &mut taken_over,
                )
                .await?;
        }
        if pending.is_empty() {
            taken_over.sort_unstable();
            Ok((outcomes, taken_over))
        } else {
            Err(StoreError::Unavailable(
                "a claim kept changing under its compare and set".into(),
            ))
        }
    }

    /// One trip of follow-ups; answers what is still left.
    #[allow(clippy::too_many_arguments)]
    async fn follow_up(
        &self,
        session: &Session,
        claims: &[Claim],
        pending: Pending,
        judged: &Judged<'_>,
        adopted: &HashMap<usize, StoreIdentity>,
        outcomes: &mut [ClaimOutcome],
        taken_over: &mut Vec<usize>,
    ) -> Result<Pending, StoreError> {
        let mut steps = Vec::new();
        for o in &pending.overwrites {
            let claim = &claims[o.index];
            let spec = &self.streams[claim.stream.0];
            let new = if o.take_over {
                ClaimValue::pending(claim.holder, claim.token, claim.digest, claim.at)
            } else {
                ClaimValue {
                    token: claim.token,
                    claimed_at: claim.at,
                    ..o.old
                }
            };
            steps.push(Step::new(
                &self.sql.claims[claim.stream.0].overwrite,
                vec![
                    boxed(claim.hash.0[..16].to_vec()),
                    boxed(o.old.encode()?.to_vec()),
                    boxed(new.encode()?.to_vec()),
                    boxed(claim.at.saturating_add(millis(spec.tier1_ttl).max(1))),
                ],
            ));
        }
        let batches = self.batches_of(claims, &pending.again);
        for batch in &batches {
            steps.push(self.claim_step(batch, claims, adopted)?);
        }
        let mut answers = pipeline(session, &steps).await?.into_iter();
        let mut left = Pending::default();
        for o in &pending.overwrites {
            let rows: Vec<Row> = answers.next().unwrap_or_default();
            let row = rows
                .first()
                .ok_or_else(|| StoreError::Protocol("compare and set answered nothing".into()))?;
            let written: bool = row.try_get(0).map_err(|e| store_error("re-stamp", e))?;
            let now: Option<Vec<u8>> = row.try_get(1).map_err(|e| store_error("re-stamp", e))?;
            if written {
                if o.take_over {
                    taken_over.push(o.index);
                }
                continue;
            }
            match now {
                Some(bytes) => {
                    let now = ClaimValue::decode(&bytes)?;
                    let verdict = judged.verdict(&claims[o.index], Some(&now));
                    outcomes[o.index] = left.note(o.index, Some(&now), verdict);
                }
                None => left.again.push(o.index),
            }
        }
        let mut met: Vec<Option<Met>> = vec![None; claims.len()];
        for batch in &batches {
            self.parse_claims(batch, claims, answers.next().unwrap_or_default(), &mut met)?;
        }
        for &index in &pending.again {
            match met[index] {
                Some(found) => {
                    let verdict = judged.verdict(&claims[index], found.as_ref());
                    outcomes[index] = left.note(index, found.as_ref(), verdict);
                }
                None => left.again.push(index),
            }
        }
        Ok(left)
    }
}
