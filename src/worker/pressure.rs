//! Back-pressure and the periodic gauges: pausing partitions at the
//! in-flight bounds (docs/design.md §1), and the waiting records' metrics.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::TopicPartitionList;
use tracing::warn;

use super::flight::Tp;
use super::pipeline::{Pipeline, LONG_WAIT, WAITING_LONG};
use super::poller::GroupConsumer;
use super::Worker;
use crate::logging::RateLimit;

static PAUSE_FAILED: LazyLock<RateLimit> =
    LazyLock::new(|| RateLimit::new(Duration::from_secs(60)));

/// Pauses (`pause`) or resumes `tps`; returns those it could not: the
/// whole call failed, or librdkafka refused the partition (not assigned).
/// Either is said at WARN, once a minute.
fn pause_resume(consumer: &GroupConsumer, pause: bool, tps: &[Tp]) -> Vec<Tp> {
    let mut list = TopicPartitionList::new();
    for tp in tps {
        list.add_partition(&tp.0, tp.1);
    }
    let call = if pause {
        consumer.pause(&list)
    } else {
        consumer.resume(&list)
    };
    let failed: Vec<Tp> = match call {
        Err(_) => tps.to_vec(),
        Ok(()) => list
            .elements()
            .iter()
            .filter(|e| e.error().is_err())
            .map(|e| (Arc::from(e.topic()), e.partition()))
            .collect(),
    };
    if !failed.is_empty() {
        if let Some(held_back) = PAUSE_FAILED.allow() {
            let what = if pause { "pause" } else { "resume" };
            warn!(what, partitions = ?failed, error = ?call.err(), held_back,
                "pausing or resuming input partitions failed: a failed pause reads past the in-flight bounds, a failed resume leaves the partition unread; tried again on the next turn");
        }
    }
    failed
}

impl Worker {
    /// At the in-flight bounds, reads no more: partitions holding waiting
    /// records pause first (they are what holds the room), then every
    /// partition; a partition whose uncommitted records alone reach the
    /// bound pauses too. Resumed below half the bounds: librdkafka drops
    /// what it fetched ahead for a paused partition and fetches it again at
    /// the resume, so pausing is kept rare.
    pub(super) fn bound(&self, p: &mut Pipeline) {
        // Records a transaction's commit holds (exactly once) are bounded
        // by the commit interval, not here; their bytes count.
        let (records, bytes) = (p.flight.ahead_of_the_loop(), p.flight.in_flight().1);
        let over = records >= self.max_in_flight_records || bytes >= self.max_in_flight_bytes;
        let under =
            records * 2 < self.max_in_flight_records && bytes * 2 < self.max_in_flight_bytes;
        let long = |tp: &Tp| p.flight.held_back(tp) >= self.max_in_flight_records;
        // The common case, nothing paused and nothing to pause, allocates
        // nothing.
        if !over
            && p.paused.is_empty()
            && !p.flight.partitions().any(|(tp, _)| long(tp))
            && p.flight.stopped().next().is_none()
        {
            return;
        }
        let mut want: HashSet<Tp> = p
            .flight
            .partitions()
            .filter(|(tp, _)| long(tp))
            .map(|(tp, _)| tp.clone())
            .collect();
        // A stream whose store lost its state decides nothing more here:
        // its partitions stay paused (docs/design.md §8.2).
        want.extend(p.flight.stopped().cloned());
        if over {
            let waiting: Vec<Tp> = p
                .flight
                .partitions()
                .filter(|(tp, _)| p.flight.has_waiting(tp))
                .map(|(tp, _)| tp.clone())
                .collect();
            // Pausing the partitions that wait is enough only where they
            // hold the room; records elsewhere that fill it (a store
            // outage: all of them waiting for the store) pause everything.
            let elsewhere: usize = p
                .flight
                .partitions()
                .filter(|(tp, _)| !waiting.contains(tp))
                .map(|(_, part)| part.unfinished())
                .sum();
            if waiting.is_empty() || elsewhere * 10 >= self.max_in_flight_records * 9 {
                want.extend(p.flight.partitions().map(|(tp, _)| tp.clone()));
            } else {
                want.extend(waiting);
            }
        } else if !under {
            // Between the marks: keep what is paused.
            want.extend(p.paused.iter().cloned());
        }
        let pause: Vec<Tp> = want.difference(&p.paused).cloned().collect();
        let resume: Vec<Tp> = p.paused.difference(&want).cloned().collect();
        // What failed stays as it was, so the next turn tries it again.
        if !pause.is_empty() {
            for tp in pause_resume(&self.consumer, true, &pause) {
                want.remove(&tp);
            }
        }
        if !resume.is_empty() {
            want.extend(pause_resume(&self.consumer, false, &resume));
        }
        p.paused = want;
    }

    /// Newly assigned partitions are read from the start: librdkafka keeps
    /// an application's pause across a revoke and a re-assignment, while
    /// the loop forgets the partition at the revoke, so a partition paused
    /// at the in-flight bounds when the group rebalanced would come back
    /// paused and never be resumed (docs/design.md §1). A resume of a
    /// partition that is not paused leaves it unpaused, but its version
    /// barrier makes librdkafka fetch again from where the assignment
    /// started: what it had read ahead is read again, and the flight drops
    /// offsets below the next one it expects. One that fails is resumed
    /// again by `bound` next turn.
    pub(super) fn read_assigned(&self, p: &mut Pipeline, assigned: &[Tp]) {
        let fresh: Vec<Tp> = assigned
            .iter()
            .filter(|tp| !p.paused.contains(*tp))
            .cloned()
            .collect();
        if !fresh.is_empty() {
            p.paused.extend(pause_resume(&self.consumer, false, &fresh));
        }
    }

    /// Per stream: records waiting on other records' claims and the
    /// longest wait; the periodic progress lines.
    pub(super) fn gauges(&self, p: &mut Pipeline, now: Instant) {
        crate::metrics::in_flight(p.flight.batches_in_flight());
        let mut per_stream = vec![(0usize, Duration::ZERO); self.streams.len()];
        let mut owned = vec![0usize; self.streams.len()];
        for (_, partition) in p.flight.partitions() {
            owned[partition.stream] += 1;
            for record in partition.waiting() {
                let (count, oldest) = &mut per_stream[record.stream];
                *count += 1;
                if let Some(since) = record.waiting_since {
                    *oldest = (*oldest).max(now.duration_since(since));
                }
            }
        }
        for (runtime, (count, oldest)) in self.streams.iter().zip(per_stream) {
            crate::metrics::waiting(&runtime.config.spec.name, count, oldest);
            if oldest >= LONG_WAIT {
                if let Some(held_back) = WAITING_LONG.allow() {
                    warn!(stream = %runtime.config.spec.name, records = count, oldest_s = oldest.as_secs(), held_back,
                        "records wait on claims whose holders have not settled: a holder's partition may be stuck or abandoned (never taken over on a timer)");
                }
            }
        }
        let mut paused = vec![0usize; self.streams.len()];
        for tp in &p.paused {
            if let Some(&stream) = self.by_topic.get(&*tp.0) {
                paused[stream] += 1;
            }
        }
        for ((runtime, owned), paused) in self.streams.iter().zip(owned).zip(paused) {
            crate::metrics::partitions_assigned(&runtime.config.spec.name, owned);
            crate::metrics::partitions_paused(&runtime.config.spec.name, paused);
        }
        for line in p.progress.due(now) {
            line.log();
        }
    }
}
