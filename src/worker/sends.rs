//! The loop's sends: a decided record's output handed to the producer,
//! and its delivery report taken back into the flight
//! (docs/design.md §4.5: what a refusal and a retry do).

use std::sync::LazyLock;
use std::time::Duration;

use tracing::{debug, error, warn};

use super::consumer::Input;
use super::flight::{Reported, Tp};
use super::output::{send, Carry, Failure, Output, SentFor};
use super::pipeline::Pipeline;
use super::Worker;
use crate::decision::{headers, Decision, Refused, Route};
use crate::fingerprint::Invalid;
use crate::logging::RateLimit;

static UNDELIVERED: LazyLock<RateLimit> = LazyLock::new(|| RateLimit::new(Duration::from_secs(30)));

impl Worker {
    /// Hands a decided record's output to the producer.
    pub(super) fn send(&self, p: &mut Pipeline, tp: Tp, offset: i64) {
        let Some(record) = p.flight.record(&tp, offset) else {
            return;
        };
        let Some(decision) = record.decision.as_ref() else {
            return;
        };
        let stream = &self.streams[record.stream];
        let topic = match decision.route_on(stream.config.shadow) {
            Route::Clean => stream.config.clean.as_str(),
            Route::Audit => stream.config.audit.as_str(),
        };
        let hash = record
            .print
            .as_ref()
            .and_then(|p| p.as_ref().ok())
            .map(|p| &p.hash);
        let name = |c: &crate::coordinates::Coordinates| stream.topic_name(c.topic);
        let mut decision_headers = headers(decision, hash, &name);
        if record.replay {
            decision_headers.mark_replay();
        }
        let output = Output {
            topic,
            input: &record.input,
            decision_headers,
            decided_at: record.at,
            carry: carry_of(decision, &record.input, self.sendable),
        };
        let slot = p.sent.insert(SentFor {
            tp: tp.clone(),
            offset,
            epoch: record.epoch,
        });
        send(
            &self.lanes[p.txn.lane].producer(),
            &self.reports,
            &output,
            slot,
        );
    }

    /// Every delivery report handed over since the last call.
    pub(super) fn on_reports(&self, p: &mut Pipeline) {
        for (slot, result) in self.reports.take() {
            if let Some(sent) = p.sent.take(slot) {
                self.on_report(p, sent, result);
            }
        }
    }

    /// One output's delivery report, for the record it was sent for.
    pub(super) fn on_report(&self, p: &mut Pipeline, sent: SentFor, result: Result<(), Failure>) {
        let SentFor { tp, offset, epoch } = sent;
        let now = self.clock.now();
        p.dirty = true;
        let stream = self.by_topic.get(&*tp.0).copied().unwrap_or_default();
        let name = &self.streams[stream].config.spec.name;
        match p.flight.reported(&tp, offset, epoch, result, now) {
            Reported::Delivered(decision) => {
                p.tally.decided(stream, &decision);
                p.progress.decided(name, decision.label());
                let record = p.flight.record(&tp, offset);
                if let Some(record) = record {
                    p.metrics[stream].latency(now.duration_since(record.input.polled));
                }
                if decision != Decision::Novel && tracing::enabled!(tracing::Level::DEBUG) {
                    let hash = record
                        .and_then(|r| r.print.as_ref())
                        .and_then(|print| print.as_ref().ok())
                        .map(|print| print.hash.to_string())
                        .unwrap_or_default();
                    let trace_id = record.map(|r| trace_id(&r.input)).unwrap_or_default();
                    let reason = match &decision {
                        Decision::Invalid(invalid) => invalid.to_string(),
                        Decision::Undeliverable(refused) => refused.to_string(),
                        _ => String::new(),
                    };
                    debug!(trace_id = %trace_id, stream = %name, topic = %tp.0, partition = tp.1, offset,
                        source_hash = %hash, decision = decision.label(), reason = %reason, "suppressed or marked");
                }
            }
            Reported::Retry(error) => {
                p.tally.produce_failed(stream);
                if p.flight.sent_in_open_txn(&tp, offset) {
                    self.undelivered(p, &error);
                }
                if let Some(held_back) = UNDELIVERED.allow() {
                    warn!(%error, topic = %tp.0, partition = tp.1, offset, held_back,
                        "output not delivered: the claim is kept and it is produced again");
                }
            }
            Reported::Refused(error) => {
                p.tally.produce_failed(stream);
                if p.flight.sent_in_open_txn(&tp, offset) {
                    self.undelivered(p, &error);
                }
                warn!(%error, topic = %tp.0, partition = tp.1, offset,
                    "output refused: to audit without its payload");
            }
            Reported::GaveUp(error) => {
                p.tally.produce_failed(stream);
                error!(%error, topic = %tp.0, partition = tp.1, offset,
                    "even a bare audit record was refused: given up");
            }
            Reported::Gone => {}
        }
    }
}

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

/// What of its input a decision's output carries: all of it, but for a
/// record whose output the broker refused.
fn carry_of(decision: &Decision, input: &Input, sendable: usize) -> Carry {
    // What idemgate adds to an output (decision headers) fits in this.
    let fits = |carry: Carry| carry.bytes(input) + crate::config::OUTPUT_HEADROOM <= sendable;
    match decision {
        Decision::Undeliverable(Refused { bare: false, .. }) => Carry::NoPayload,
        Decision::Undeliverable(Refused { bare: true, .. }) => Carry::Bare,
        // Too large for the stream is not too large for the producer: it
        // goes whole where it can, else without what it cannot carry,
        // decided `too-large` before any produce (not refused, then
        // `undeliverable`).
        Decision::Invalid(Invalid::TooLarge { .. }) if !fits(Carry::Whole) => {
            if fits(Carry::NoPayload) {
                Carry::NoPayload
            } else {
                Carry::Bare
            }
        }
        _ => Carry::Whole,
    }
}
