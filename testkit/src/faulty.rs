//! A `ClaimStore` decorator that injects store faults where the protocol
//! is weakest, on a test's command: the store refusing every round (an
//! outage longer than any timer), or applying a round and losing its answer
//! (the writes landed, the worker cannot know: every one must be
//! idempotent), for rounds that publish, or for all of them.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use async_trait::async_trait;

use idemgate::clock::Millis;
use idemgate::coordinates::Coordinates;
use idemgate::store::{
    Claim, ClaimOutcome, ClaimStore, EarlyRun, IdentityFound, Marked, Publish, RoundAnswer,
    RunsName, StoreError, StoreIdentity, StoreStats, StreamId, StreamLost,
};

/// What the store does with a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Fault {
    /// Answers as the inner store does.
    None = 0,
    /// Refuses every round unapplied: the store is down.
    Down = 1,
    /// Applies every round that carries a publish, then fails it: the
    /// acknowledgement is lost after the writes landed.
    LosePublishAnswers = 2,
    /// Refuses, unapplied, every round that carries a publish; claims
    /// alone go through.
    RefusePublishes = 3,
    /// Answers rounds that carry claims until one wins a claim, then goes
    /// `Down`: the records it won are produced and delivered, and their
    /// publish cannot land.
    DownAfterClaims = 4,
}

pub struct FaultyStore {
    inner: Arc<dyn ClaimStore>,
    fault: AtomicU8,
    /// Faulted rounds left before the fault lifts by itself (0: never).
    budget: AtomicU64,
    /// Rounds that met a fault.
    faulted: AtomicU64,
    /// Rounds with claims that the inner store answered.
    claimed: AtomicU64,
    /// The claims `DownAfterClaims` let through and the worker won.
    won_before_down: std::sync::Mutex<Vec<Coordinates>>,
    /// Rounds refused while down that would have settled one of those
    /// claims (a raise over it, its done flag): it was delivered, and its
    /// settlement could not land.
    refused_settlements: AtomicU64,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ClaimStore>) -> FaultyStore {
        FaultyStore {
            inner,
            fault: AtomicU8::new(Fault::None as u8),
            budget: AtomicU64::new(0),
            faulted: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            won_before_down: std::sync::Mutex::new(Vec::new()),
            refused_settlements: AtomicU64::new(0),
        }
    }

    /// Injects `fault` until told otherwise.
    pub fn set(&self, fault: Fault) {
        self.budget.store(0, Ordering::SeqCst);
        self.fault.store(fault as u8, Ordering::SeqCst);
    }

    /// Injects `fault` into the next `rounds` rounds it applies to, then
    /// lifts it.
    pub fn set_for(&self, fault: Fault, rounds: u64) {
        self.budget.store(rounds, Ordering::SeqCst);
        self.fault.store(fault as u8, Ordering::SeqCst);
    }

    fn fault(&self) -> Fault {
        match self.fault.load(Ordering::SeqCst) {
            1 => Fault::Down,
            2 => Fault::LosePublishAnswers,
            3 => Fault::RefusePublishes,
            4 => Fault::DownAfterClaims,
            _ => Fault::None,
        }
    }

    /// Rounds that met a fault so far: the evidence it was injected.
    pub fn faulted(&self) -> u64 {
        self.faulted.load(Ordering::SeqCst)
    }

    /// Rounds with claims the inner store answered so far: the evidence
    /// that the worker is deciding records.
    pub fn claimed(&self) -> u64 {
        self.claimed.load(Ordering::SeqCst)
    }

    /// Rounds refused while down that would have settled a claim won in
    /// the round `DownAfterClaims` let through: the evidence that a
    /// delivered record was left unsettled.
    pub fn refused_settlements(&self) -> u64 {
        self.refused_settlements.load(Ordering::SeqCst)
    }

    /// Whether `publish` settles a claim won just before the outage.
    fn settles_a_won_claim(&self, publish: &Publish) -> bool {
        let won = self
            .won_before_down
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        won.iter().any(|c| {
            publish.done.iter().any(|d| d.holder == *c)
                || publish.raises.iter().any(|r| {
                    r.topic == c.topic
                        && r.partition == c.partition
                        && (r.start..r.end).contains(&c.offset)
                })
        })
    }

    fn hit(&self, what: &str) -> StoreError {
        self.faulted.fetch_add(1, Ordering::SeqCst);
        let left = self.budget.load(Ordering::SeqCst);
        if left == 1 {
            self.fault.store(Fault::None as u8, Ordering::SeqCst);
        }
        if left > 0 {
            self.budget.store(left - 1, Ordering::SeqCst);
        }
        StoreError::Unavailable(format!("injected: {what}"))
    }
}

#[async_trait]
impl ClaimStore for FaultyStore {
    async fn round(
        &self,
        publish: &Publish,
        claims: &[Claim],
        read: &[StreamId],
    ) -> Result<RoundAnswer, StoreError> {
        let answer = self.faulted_round(publish, claims, read).await;
        if answer.is_ok() && !claims.is_empty() {
            self.claimed.fetch_add(1, Ordering::SeqCst);
        }
        answer
    }

    /// A store that is down refuses them (its fault budget counts rounds
    /// only).
    async fn note_early_inserts(&self, runs: &[EarlyRun]) -> Result<(), StoreError> {
        match self.fault() {
            Fault::Down => Err(StoreError::Unavailable("injected: store down".into())),
            _ => self.inner.note_early_inserts(runs).await,
        }
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

    async fn verify_identity(&self, streams: &[StreamId]) -> Result<Vec<StreamLost>, StoreError> {
        match self.fault() {
            Fault::Down => Err(StoreError::Unavailable("injected: store down".into())),
            _ => self.inner.verify_identity(streams).await,
        }
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
        self.runs_fault()?;
        self.inner.put_runs(name, content, at).await
    }

    async fn get_runs(&self, name: &RunsName, at: Millis) -> Result<Option<Vec<u8>>, StoreError> {
        self.runs_fault()?;
        self.inner.get_runs(name, at).await
    }

    async fn refresh_runs(&self, name: &RunsName, at: Millis) -> Result<bool, StoreError> {
        self.runs_fault()?;
        self.inner.refresh_runs(name, at).await
    }

    async fn delete_runs(&self, names: &[RunsName]) -> Result<(), StoreError> {
        self.runs_fault()?;
        self.inner.delete_runs(names).await
    }

    async fn stats(&self, at: Millis) -> Result<StoreStats, StoreError> {
        match self.fault() {
            Fault::Down => Err(StoreError::Unavailable("injected: store down".into())),
            _ => self.inner.stats(at).await,
        }
    }
}

impl FaultyStore {
    /// A store down fails the records of finished runs too; the other
    /// faults are about rounds.
    fn runs_fault(&self) -> Result<(), StoreError> {
        match self.fault() {
            Fault::Down => Err(StoreError::Unavailable("injected: store down".into())),
            _ => Ok(()),
        }
    }

    /// The round as the fault in force makes it.
    async fn faulted_round(
        &self,
        publish: &Publish,
        claims: &[Claim],
        read: &[StreamId],
    ) -> Result<RoundAnswer, StoreError> {
        match self.fault() {
            Fault::None => self.inner.round(publish, claims, read).await,
            Fault::Down => {
                if self.settles_a_won_claim(publish) {
                    self.refused_settlements.fetch_add(1, Ordering::SeqCst);
                }
                Err(self.hit("store down"))
            }
            Fault::LosePublishAnswers if !publish.is_empty() => {
                self.inner.round(publish, claims, read).await?;
                Err(self.hit("answer lost after the writes"))
            }
            Fault::RefusePublishes if !publish.is_empty() => Err(self.hit("publish refused")),
            Fault::DownAfterClaims if !claims.is_empty() => {
                let answer = self.inner.round(publish, claims, read).await;
                if let Ok(answer) = &answer {
                    let won: Vec<Coordinates> = claims
                        .iter()
                        .zip(&answer.outcomes)
                        .filter(|(_, o)| matches!(o, ClaimOutcome::Won { .. }))
                        .map(|(c, _)| c.holder)
                        .collect();
                    if !won.is_empty() {
                        self.won_before_down
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .extend(won);
                        self.fault.store(Fault::Down as u8, Ordering::SeqCst);
                    }
                }
                answer
            }
            Fault::LosePublishAnswers | Fault::RefusePublishes | Fault::DownAfterClaims => {
                self.inner.round(publish, claims, read).await
            }
        }
    }
}
