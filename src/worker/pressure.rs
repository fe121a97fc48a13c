//! Back-pressure and the periodic gauges: pausing partitions at the
//! in-flight bounds (docs/design.md §1), and the waiting records' metrics.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::TopicPartitionList;
use tracing::{debug, warn};

use super::flight::Tp;
use super::pipeline::{Pipeline, LONG_WAIT, WAITING_LONG};
use super::Worker;

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
        let list = |tps: Vec<&Tp>| {
            let mut list = TopicPartitionList::new();
            for tp in tps {
                list.add_partition(&tp.0, tp.1);
            }
            list
        };
        let pause: Vec<&Tp> = want.difference(&p.paused).collect();
        let resume: Vec<&Tp> = p.paused.difference(&want).collect();
        if !pause.is_empty() {
            if let Err(error) = self.consumer.pause(&list(pause)) {
                debug!(%error, "pause failed");
            }
        }
        if !resume.is_empty() {
            if let Err(error) = self.consumer.resume(&list(resume)) {
                debug!(%error, "resume failed");
            }
        }
        p.paused = want;
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
        for (runtime, owned) in self.streams.iter().zip(owned) {
            crate::metrics::partitions_assigned(&runtime.config.spec.name, owned);
        }
        for line in p.progress.due(now) {
            line.log();
        }
    }
}
