//! The loop: the thin I/O around `flight` (docs/design.md §1).
//!
//! One task, woken by whatever comes first: records or a rebalance from the
//! polling thread, the answer of the store round in flight, a delivery
//! report, a backoff falling due, or the stop signal. Each turn it starts
//! the next round if none is in flight (the publish of what was delivered
//! with the claims of what arrived: one round trip per batch in steady
//! state), sends what was decided, commits each partition's finished
//! prefix, and pauses partitions past the in-flight bounds. It waits on I/O
//! only when everything in flight is waiting.

use std::collections::HashSet;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use super::breaker::Breaker;
use super::consumer::{Arrival, Reader};
use super::error::WorkerError;
use super::flight::{Arrived, Flight, Resume, Round, Settle, Tp};
use super::identity_check::{answered, IdentityCheck};
use super::metadata;
use super::output::Sent;
use super::poller::{self, Event};
use super::progress::Progress;
use super::runs::AtAssignment;
use super::store_lost::Evidence;
use super::transaction::committed;
use super::Worker;
use crate::config::{FailMode, Guarantee};
use crate::logging::RateLimit;
use crate::metrics::{StreamMetrics, Tally};
use crate::store::{Claim, Publish, RoundAnswer, StoreError, StreamId};

/// A store round slower than this counts as a failure: a hung server must
/// trip the breaker in seconds, not minutes.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a revoke or a shutdown waits for deliveries and the publish.
pub(super) const FLUSH_PATIENCE: Duration = Duration::from_secs(30);
/// A wait this long is logged (the metric shows every wait).
pub(super) const LONG_WAIT: Duration = Duration::from_secs(60);

static STORE_DOWN: LazyLock<RateLimit> = LazyLock::new(|| RateLimit::new(Duration::from_secs(30)));
static STORE_REJECTED: LazyLock<RateLimit> =
    LazyLock::new(|| RateLimit::new(Duration::from_secs(30)));
static NOT_OWNED: LazyLock<RateLimit> = LazyLock::new(|| RateLimit::new(Duration::from_secs(30)));
pub(super) static WAITING_LONG: LazyLock<RateLimit> =
    LazyLock::new(|| RateLimit::new(Duration::from_secs(60)));

/// A failed round, said once a period: an outage at WARN (it passes by
/// itself), a rejection at ERROR with its cause and remedy (it lasts
/// until an operator acts: an ACL, a full server, a replica, a foreign
/// key). Either way the round is sent again whole after the backoff, and
/// the breaker counts it.
pub(super) fn store_failed(error: &StoreError) {
    match error {
        StoreError::Rejected(rejection) => {
            if let Some(held_back) = STORE_REJECTED.allow() {
                error!(cause = rejection.cause.label(), %error, held_back,
                    "the store rejected a round: nothing is decided until an operator acts; the round is sent again after the backoff");
            }
        }
        _ => {
            if let Some(held_back) = STORE_DOWN.allow() {
                warn!(%error, held_back, "store round failed: sent again whole after the backoff");
            }
        }
    }
}

/// The round in flight.
pub(super) struct InFlight {
    round: Round,
    started: Instant,
    /// The round's publish, claims and reads go with the task and come
    /// back with the answer (moved, not copied).
    handle: JoinHandle<(RoundAnswerOf, Carried)>,
}

type RoundAnswerOf = Result<RoundAnswer, StoreError>;
type Carried = (Publish, Vec<Claim>, Vec<StreamId>);

/// What the loop keeps between turns.
pub(crate) struct Pipeline {
    pub(super) flight: Flight,
    pub(super) round: Option<InFlight>,
    /// Outputs awaiting their delivery reports, by slot.
    pub(super) sent: Sent,
    pub(super) breaker: Breaker,
    pub(super) paused: HashSet<Tp>,
    pub(super) progress: Progress,
    pub(super) gauges_at: Instant,
    /// Something arrived, was delivered or answered since the last round
    /// was put together: a new one may have work.
    pub(super) dirty: bool,
    pub(super) committed_at: Instant,
    /// Per stream, the metric handles; what this turn counted for them.
    pub(super) metrics: Vec<StreamMetrics>,
    pub(super) tally: Tally,
    /// Exactly once: the open transaction.
    pub(super) txn: super::transaction::Txn,
    /// At least once: the periodic commit running off the loop
    /// (`at_least_once.rs`), one at a time.
    pub(super) commit_in_flight: Option<(Instant, JoinHandle<()>)>,
    /// The timed check of the streams' store identities
    /// (`identity_check.rs`).
    pub(super) identity: IdentityCheck,
    /// The records of finished runs this replica's commits named
    /// (`runs.rs`).
    pub(super) runs: super::runs::Records,
}

impl Pipeline {
    pub(crate) fn new(
        metrics: Vec<StreamMetrics>,
        settle: Settle,
        now: Instant,
        identity_check_interval: Duration,
    ) -> Pipeline {
        Pipeline {
            metrics,
            tally: Tally::default(),
            flight: Flight::new(settle),
            round: None,
            sent: Sent::default(),
            breaker: Breaker::new(),
            paused: HashSet::new(),
            progress: Progress::new(now),
            gauges_at: now,
            dirty: true,
            committed_at: now,
            txn: Default::default(),
            commit_in_flight: None,
            identity: IdentityCheck::new(identity_check_interval, now),
            runs: Default::default(),
        }
    }
}

/// The answer of the round in flight; pending for ever when there is none.
pub(super) async fn answer(round: &mut Option<InFlight>) -> RoundAnswerOf {
    match round {
        Some(in_flight) => match (&mut in_flight.handle).await {
            Ok((answer, (publish, claims, read))) => {
                in_flight.round.publish = publish;
                in_flight.round.claims = claims;
                in_flight.round.read = read;
                answer
            }
            Err(e) => Err(StoreError::Unavailable(format!("round task: {e}"))),
        },
        None => std::future::pending().await,
    }
}

impl Worker {
    /// Runs until `stop` turns true; then flushes, publishes and commits
    /// what is finished and leaves the group.
    pub(crate) async fn run(mut self) -> Result<(), WorkerError> {
        let poller = self.start_poller()?;
        // After the metrics listener installed the recorder.
        let metrics = self
            .streams
            .iter()
            .map(|s| StreamMetrics::new(&s.config.spec.name))
            .collect();
        let settle = match self.guarantee {
            Guarantee::AtLeastOnce => Settle::OnDelivery,
            Guarantee::ExactlyOnce => Settle::WithTransaction,
        };
        let mut p = Pipeline::new(
            metrics,
            settle,
            self.clock.now(),
            self.identity_check_interval,
        );
        self.start_committing().await?;
        let mut stop = self.stop.clone();
        loop {
            if *stop.borrow() {
                break;
            }
            self.turn(&mut p)?;
            self.commit_when_due(&mut p).await?;
            // Only instants still ahead: one already past is served by the
            // turn just taken, or waits for the round in flight (its answer
            // wakes the loop), never by waking at once for ever.
            let now = self.clock.now();
            let idle = now + Duration::from_secs(1);
            let commit = p.committed_at + self.commit_interval;
            let wake = [
                p.flight.next_due(),
                p.breaker.next_trial(),
                Some(commit),
                Some(p.identity.timer.next()),
            ]
            .into_iter()
            .flatten()
            .filter(|at| *at > now)
            .fold(idle, Instant::min);
            tokio::select! {
                _ = stop.changed() => {}
                event = self.events.recv() => match event {
                    Some(event) => self.on_event(&mut p, event).await?,
                    None => break,
                },
                result = answer(&mut p.round) => self.on_answer(&mut p, result),
                checked = answered(&mut p.identity) => self.on_identity_checked(&mut p, checked),
                _ = self.reports.ready() => self.on_reports(&mut p),
                joined = committed(&mut p.txn.committing) => {
                    self.on_committed(&mut p, joined).await?;
                }
                _ = tokio::time::sleep_until(self.clock.deadline(wake)) => {}
            }
        }
        let assigned: Vec<Tp> = p.flight.partitions().map(|(tp, _)| tp.clone()).collect();
        self.flush(&mut p, &assigned).await?;
        for line in p.progress.flush(self.clock.now()) {
            line.log();
        }
        // The poller leaves the group with its callbacks quiet; a revoke it
        // is already waiting in is let go by dropping its acknowledgement.
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.events.close();
        while self.events.try_recv().is_ok() {}
        drop(self.consumer);
        let _ = tokio::task::spawn_blocking(move || poller.join()).await;
        for lane in &self.lanes {
            let _ = rdkafka::producer::Producer::flush(&*lane.producer(), Duration::from_secs(10));
        }
        info!(
            at = self.clock.wall_ms(),
            "worker stopped: finished work committed"
        );
        Ok(())
    }

    fn start_poller(&mut self) -> Result<std::thread::JoinHandle<()>, WorkerError> {
        let consumer = self.consumer.clone();
        let events = self.poll_events.take().ok_or(WorkerError::StartedTwice)?;
        let closing = self.closing.clone();
        let batch = poller::Batching {
            max: self.max_records,
            linger: self.linger,
            read_ahead: self.read_ahead,
            unfinished: self.unfinished.clone(),
            clock: self.clock.clone(),
        };
        let configs: Vec<_> = self.streams.iter().map(|s| s.config.clone()).collect();
        let reader = Reader::new(&configs);
        let watch = super::watch::Watch::new(
            self.group_id.clone(),
            configs
                .iter()
                .map(|s| (s.spec.name.clone(), s.inputs.clone()))
                .collect(),
            self.clock.now(),
        );
        std::thread::Builder::new()
            .name("idemgate-poll".into())
            .spawn(move || poller::poll(consumer, events, closing, reader, batch, watch))
            .map_err(WorkerError::Thread)
    }

    /// One turn: the next round, the sends, the commits, the bounds.
    pub(super) fn turn(&self, p: &mut Pipeline) -> Result<(), WorkerError> {
        let now = self.clock.now();
        // A new round when something changed, a waiting record fell due,
        // or the breaker is open (its trial, once the cool-down is over).
        if p.round.is_none() && (p.dirty || p.flight.wait_due(now) || p.breaker.is_open()) {
            if !p.breaker.allows(now) {
                p.flight.pass_unverified(|s| self.fail_open(s));
            } else if let Some(round) = p.flight.take_round(now, self.max_records, self.token) {
                self.start_round(p, round, now);
            }
            p.dirty = false;
        }
        self.check_identity_when_due(p, now);
        let sends = p.flight.take_sends(now);
        if !sends.is_empty() {
            self.before_sends(p)?;
        }
        for (tp, offset) in sends {
            self.send(p, tp, offset);
        }
        self.bound(p);
        if now.duration_since(p.gauges_at) >= Duration::from_secs(1) {
            p.gauges_at = now;
            self.gauges(p, now);
        }
        p.tally.flush(&p.metrics);
        self.unfinished.store(
            p.flight.ahead_of_the_loop(),
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(())
    }

    pub(super) fn start_round(&self, p: &mut Pipeline, mut round: Round, now: Instant) {
        crate::metrics::batch(round.claimed());
        let store = self.store.clone();
        let (publish, claims, read) = (
            std::mem::take(&mut round.publish),
            std::mem::take(&mut round.claims),
            std::mem::take(&mut round.read),
        );
        let settles = publish.done.len();
        super::fault_point::reached(
            super::fault_point::Step::BeforeSettlements,
            settles > 0,
            || format!("{settles} done flags"),
        );
        let handle = tokio::spawn(async move {
            let answer = tokio::time::timeout(STORE_TIMEOUT, store.round(&publish, &claims, &read))
                .await
                .unwrap_or_else(|_| Err(StoreError::Unavailable("round timed out".into())));
            (answer, (publish, claims, read))
        });
        p.round = Some(InFlight {
            round,
            started: now,
            handle,
        });
    }

    pub(super) fn on_answer(&self, p: &mut Pipeline, result: Result<RoundAnswer, StoreError>) {
        let Some(InFlight { round, started, .. }) = p.round.take() else {
            return;
        };
        p.dirty = true;
        let now = self.clock.now();
        crate::metrics::store_call("round", now.duration_since(started), result.as_ref().err());
        match result {
            Ok(answer) => {
                p.breaker.success();
                for lost in &answer.lost {
                    self.on_store_lost(p, lost, Evidence::Identity);
                }
                let settled = p.flight.answered(round, answer, now, |s| {
                    self.streams[s].config.spec.filter.is_some()
                });
                for stream in settled.replayed {
                    p.tally.replayed(stream);
                }
                for stream in settled.released {
                    p.tally.released(stream);
                }
                for stream in settled.taken_over {
                    p.tally.taken_over(stream);
                }
                if settled.held > 0 {
                    crate::metrics::waited(settled.held);
                }
                if settled.lost > 0 {
                    warn!(claims = settled.lost, "done flags refused: those claims carry another owner now (this replica's partition moved on)");
                }
                self.log_replays(p);
            }
            Err(error) => {
                p.breaker.failure(now, &error);
                p.flight.failed(round, |s| self.fail_open(s));
                store_failed(&error);
            }
        }
    }

    async fn on_event(&mut self, p: &mut Pipeline, event: Event) -> Result<(), WorkerError> {
        p.dirty = true;
        match event {
            Event::Records(arrivals) => {
                p.flight.next_batch();
                for arrival in arrivals {
                    self.arrive(p, arrival);
                }
                for stream in p.flight.take_replayed() {
                    p.tally.replayed(stream);
                }
                self.log_replays(p);
            }
            Event::Assigned(partitions) => {
                self.token = self.token.next_attempt();
                let tps: Vec<Tp> = partitions.iter().map(|(tp, _)| tp.clone()).collect();
                self.read_assigned(p, &tps);
                for (tp, committed) in partitions {
                    let Some(&stream) = self.by_topic.get(&*tp.0) else {
                        continue;
                    };
                    p.txn.assigned(&tp, committed.as_ref());
                    let key_id = &self.streams[stream].config.spec.key_id;
                    let ours = match committed.as_ref() {
                        Some((offset, text)) => metadata::parse(key_id, text)
                            .map_err(|source| WorkerError::CommitMetadata {
                                partition: format!("{}/{}", tp.0, tp.1),
                                source,
                            })?
                            .map(|m| (*offset, m)),
                        None => None,
                    };
                    // The progress marks the last owner's commit recorded
                    // raise this replica's floors: the next round checks
                    // the store against them first (docs/design.md §8.2).
                    if let Some((_, m)) = ours.as_ref().filter(|(_, m)| !m.marks.is_empty()) {
                        self.store.raise_floors(StreamId(stream), &m.marks);
                    }
                    let metadata_raise = ours.as_ref().filter(|(_, m)| m.gap_free).map(|(o, _)| *o);
                    let mut keep_commit = false;
                    let skip = match ours {
                        Some((_, m)) => match self.runs_at_assignment(stream, &tp, m.runs).await? {
                            AtAssignment::Skip(done) => done,
                            AtAssignment::Lost(how) => {
                                self.runs_lost(p, stream, how);
                                // Fail-closed, the commit keeps naming the
                                // record for `rebuild`; fail-open streams
                                // pass their records and commit them.
                                keep_commit = !self.fail_open(stream);
                                Vec::new()
                            }
                        },
                        None => Vec::new(),
                    };
                    let resume = Resume {
                        committed: committed.as_ref().map(|(offset, _)| *offset),
                        metadata_raise,
                        skip,
                    };
                    p.flight.assign(tp.clone(), stream, resume);
                    if keep_commit {
                        p.flight.keep_commit(&tp);
                    }
                }
            }
            Event::CommittedUnreadable { after, error } => {
                return Err(WorkerError::CommittedUnreadable {
                    after,
                    source: error,
                });
            }
            Event::Revoke { partitions, ack } => {
                self.partitions_go(p, &partitions).await?;
                for tp in &partitions {
                    p.flight.revoke(tp);
                    p.paused.remove(tp);
                    p.runs.forget(tp);
                }
                let _ = ack.send(());
            }
        }
        Ok(())
    }

    /// A record read (and fingerprinted by the poller): into the flight.
    fn arrive(&self, p: &mut Pipeline, arrival: Arrival) {
        let Arrival {
            input,
            stream,
            print,
        } = arrival;
        let at = match (self.event_time, input.timestamp) {
            (true, Some(at)) => at,
            _ => self.clock.wall_ms(),
        };
        let (partition, offset) = (input.partition, input.offset);
        // Records of a partition revoked meanwhile are dropped by the
        // polling thread; one that still comes is the next owner's to
        // read, and said (it would be lost if this replica owned its
        // partition after all).
        if p.flight.arrive(input, stream, print, at) == Arrived::NotOwned {
            if let Some(held_back) = NOT_OWNED.allow() {
                warn!(stream = %self.streams[stream].config.spec.name, partition, offset, held_back,
                    "a record read from a partition this replica does not own was not kept");
            }
        }
    }

    /// A replay's start and end, as the flight noted them
    /// (`flight/replay.rs`): once each per partition, at INFO, so that an
    /// operator's reset and what it replayed are in the log.
    fn log_replays(&self, p: &mut Pipeline) {
        for line in p.flight.take_replay_log() {
            let stream = &self.streams[line.stream].config.spec.name;
            let (topic, partition, r) = (&line.tp.0, line.tp.1, line.replay);
            if line.ended {
                info!(
                    stream = %stream,
                    %topic,
                    partition,
                    from = r.from,
                    to = r.to,
                    replayed = r.replayed(),
                    suppressed = r.suppressed,
                    re_emitted = r.re_emitted,
                    decided_anew = r.anew,
                    "replay finished"
                );
            } else {
                info!(
                    stream = %stream,
                    %topic,
                    partition,
                    from = r.from,
                    to = r.to,
                    records = r.to - r.from,
                    re_emit = ?r.re_emit,
                    "replay started: records below the delivered watermark are read again"
                );
            }
        }
    }

    pub(super) fn fail_open(&self, stream: usize) -> bool {
        self.streams[stream].config.fail_mode == FailMode::Open
    }
}
