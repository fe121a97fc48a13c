//! The follow-up of native claims that met their field (`native.rs`): the
//! claim script, with the store identity read again just before it, as
//! the round's claims had it.

use std::sync::MutexGuard;
use std::time::Instant;

use super::native::{self, Sweeps};
use super::round::{self, existing, noscript, Learnt, Plan};
use super::RedisStore;
use crate::store::value::ClaimValue;
use crate::store::{Claim, StoreError, StreamLost};

impl RedisStore {
    /// What was learnt of the hashes; a poisoned lock only held a cache.
    pub(super) fn sweeps(&self) -> MutexGuard<'_, Sweeps> {
        self.sweeps.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What claim scripts sent at `sent` said beside their claims.
    pub(super) fn learn(&self, sent: Instant, learnt: Learnt) {
        for found in learnt.swept {
            self.saw_fields(found.stream, found.fields);
        }
        self.sweeps().learn(sent, learnt.times, learnt.marks);
    }

    /// After a round's trip: where it found stores lost, the hashes its
    /// native claims wrote get an expiry; then the native claims whose
    /// field existed go through the claim script (`claim_again`).
    pub(super) async fn native_follow_up(
        &self,
        plan: &Plan<'_>,
        claims: &[Claim],
        written: &[bool],
        held: &mut [Option<ClaimValue>],
        lost: &mut Vec<StreamLost>,
    ) -> Result<(), StoreError> {
        if !lost.is_empty() {
            self.after_loss(plan, claims, lost).await?;
        }
        let again: Vec<usize> = plan
            .native
            .iter()
            .zip(written)
            .filter(|(_, written)| !**written)
            .map(|(native, _)| native.index)
            .collect();
        let before = lost.len();
        self.claim_again(plan, claims, again, held, lost).await?;
        if lost.len() > before {
            self.sweeps().forget();
        }
        Ok(())
    }

    /// Sends the claims at `again` (native claims whose field existed)
    /// through the claim script and fills `held` with what they met; a
    /// stream the identity read finds lost joins `lost`.
    async fn claim_again(
        &self,
        plan: &Plan<'_>,
        claims: &[Claim],
        again: Vec<usize>,
        held: &mut [Option<ClaimValue>],
        lost: &mut Vec<StreamLost>,
    ) -> Result<(), StoreError> {
        if again.is_empty() {
            return Ok(());
        }
        let groups =
            round::claim_groups(&self.prefix, &self.streams, &self.layouts, claims, again)?;
        let identities = plan.identities.commands().to_vec();
        let reads = identities.len();
        let mut commands = identities;
        commands.extend(groups.invocations(&self.scripts.claim, true));
        let sent = Instant::now();
        let trip = self.conn.run(commands).await;
        let mut answers = trip.inspect_err(|_| self.sweeps().forget())?;
        let mut scripts = answers.split_off(reads);
        let lost_scripts = noscript(&scripts);
        if !lost_scripts.is_empty() {
            let resend = lost_scripts
                .iter()
                .filter_map(|&g| groups.invocation(&self.scripts.claim, g, false))
                .collect();
            for (g, answer) in lost_scripts.into_iter().zip(self.conn.run(resend).await?) {
                if let Some(slot) = scripts.get_mut(g) {
                    *slot = answer;
                }
            }
        }
        for found in plan.identities.judge(answers)? {
            if !lost.iter().any(|l| l.stream == found.stream) {
                lost.push(found);
            }
        }
        let (found, learnt) = existing(&groups, scripts, held.len())?;
        self.learn(sent, learnt);
        for group in &groups.groups {
            for &index in &group.indices {
                if let (Some(slot), Some(value)) = (held.get_mut(index), found.get(index)) {
                    *slot = *value;
                }
            }
        }
        Ok(())
    }

    /// A round found streams' stores lost: nothing learnt is trusted, and
    /// the hashes its native claims of them wrote get an expiry
    /// (`native::expire_anew`).
    async fn after_loss(
        &self,
        plan: &Plan<'_>,
        claims: &[Claim],
        lost: &[StreamLost],
    ) -> Result<(), StoreError> {
        self.sweeps().forget();
        let commands: Vec<_> = plan
            .native
            .iter()
            .filter(|n| {
                claims
                    .get(n.index)
                    .is_some_and(|c| lost.iter().any(|l| l.stream == c.stream))
            })
            .map(|n| native::expire_anew(&n.group, n.ttl_ms))
            .collect();
        round::values(self.conn.run(commands).await?, "claim's hash expiry")?;
        Ok(())
    }
}
