//! Tier 2's trips beside a round, and what the store learns from them: the
//! inserts (with a full RedisBloom generation's refused items sent to its
//! overflow part), the follow-up probe of an overflow part a round left out
//! that exists now, and the memory of full generations and of overflow
//! parts found absent (docs/design.md §5). What the commands are is
//! `tier2.rs`.

use std::collections::HashSet;

use redis::{RedisResult, Value};
use tracing::warn;

use super::round::{self, Plan};
use super::tier2::{self, BloomWrite, Clear, Item, Want};
use super::{Keyed, RedisStore};
use crate::store::StoreError;

impl RedisStore {
    pub(super) fn insert_commands(
        &self,
        items: &[Item<'_>],
    ) -> (Vec<Keyed>, Vec<Option<BloomWrite>>) {
        // A poisoned lock only loses what was learnt of full generations:
        // inserts then try the generation first again, which stays correct.
        let full = self.full.lock().map(|f| f.clone()).unwrap_or_default();
        round::insert_commands(self.filter_backend, &self.prefix, items, &full)
    }

    /// Tier-2 inserts as a trip of their own, overflow included.
    pub(super) async fn insert(&self, items: &[Item<'_>]) -> Result<(), StoreError> {
        let (commands, watch) = self.insert_commands(items);
        let answers = self.conn.run(commands).await?;
        self.after_inserts(watch, answers).await
    }

    /// Checks a trip's insert answers; whatever a full RedisBloom
    /// generation refused goes to its overflow part, and the generation is
    /// remembered as full (warned about once).
    pub(super) async fn after_inserts(
        &self,
        watch: Vec<Option<BloomWrite>>,
        answers: Vec<RedisResult<Value>>,
    ) -> Result<(), StoreError> {
        let mut overflow = Vec::new();
        for (write, answer) in watch.iter().zip(answers) {
            let Some(write) = write else {
                tier2::check(answer)?;
                continue;
            };
            let Some(refused) = tier2::refused(write, answer)? else {
                continue;
            };
            self.remember_full(write);
            overflow.extend(tier2::overflow(write, &refused));
        }
        if !overflow.is_empty() {
            for answer in self.conn.run(overflow).await? {
                tier2::check(answer)?;
            }
        }
        Ok(())
    }

    /// What a round found of the probed generations' overflow parts: those
    /// absent are probed without them from now on.
    pub(super) fn learn_overflow(&self, asked: &[(usize, i64)], found: &[bool]) {
        let Ok(mut clear) = self.clear.lock() else {
            return;
        };
        for (&(stream, epoch), &exists) in asked.iter().zip(found) {
            if exists {
                clear.remove(&(stream, epoch));
            } else {
                remember(&mut clear, (stream, epoch));
            }
        }
    }

    fn remember_full(&self, write: &BloomWrite) {
        if let Ok(mut clear) = self.clear.lock() {
            clear.remove(&(write.stream, write.epoch));
        }
        let Ok(mut full) = self.full.lock() else {
            return;
        };
        if remember(&mut full, (write.stream, write.epoch)) {
            let stream = self
                .streams
                .get(write.stream)
                .map_or("?", |s| s.name.as_str());
            warn!(
                stream,
                epoch = write.epoch,
                "filter generation full: inserts go to its overflow part; raise peak_rate"
            );
        }
    }

    /// Takes the round's answers on which overflow parts exist: remembers
    /// those absent, and probes for the round's claims each part the round
    /// left out that exists now, before the round answers.
    pub(super) async fn overflow_follow_up(
        &self,
        plan: &Plan<'_>,
        clear: &Clear,
        answers: Vec<RedisResult<Value>>,
        in_filter: &mut [bool],
    ) -> Result<(), StoreError> {
        let found = answers
            .into_iter()
            .map(tier2::exists)
            .collect::<Result<Vec<_>, _>>()?;
        if found.len() != plan.asked.len() {
            return Err(StoreError::Protocol(
                "overflow part checks answered short".into(),
            ));
        }
        let skipped = plan.skipped_overflow(clear, &found);
        self.learn_overflow(&plan.asked, &found);
        if skipped.is_empty() {
            return Ok(());
        }
        let want = Want::Overflow(&skipped);
        let (commands, map) = tier2::probes(self.filter_backend, &self.prefix, &plan.probed, want);
        let found = tier2::hits(&map, self.conn.run(commands).await?, in_filter.len())?;
        for (hit, found) in in_filter.iter_mut().zip(found) {
            *hit |= found;
        }
        Ok(())
    }
}

/// Adds a generation to a set of them (full ones, or those without an
/// overflow part), forgetting the stream's generations long expired so the
/// set stays small; whether it was new.
fn remember(generations: &mut HashSet<(usize, i64)>, (stream, epoch): (usize, i64)) -> bool {
    const KEPT_EPOCHS: i64 = 16;
    generations.retain(|&(s, e)| s != stream || e + KEPT_EPOCHS >= epoch);
    generations.insert((stream, epoch))
}
