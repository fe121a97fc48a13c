//! Every metric idemgate exports, declared once in [`catalog`]
//! (docs/design.md §11). The loop calls the small functions below where
//! things happen; what happens per record is counted per turn of the loop
//! ([`Tally`]) and added to handles looked up once ([`StreamMetrics`]).
//! Labels are low cardinality: stream, decision, tier, operation; never a
//! hash or offset.

use std::time::Duration;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics::{Counter, Histogram};

use crate::decision::Decision;
use crate::store::{StoreError, StoreStats};
use crate::tier::Tier;

pub mod catalog;
#[cfg(test)]
mod tests;

pub(crate) use catalog::*;
pub use catalog::{
    of_series, Kind, Label, Metric, Source, Values, BATCH_SIZE, CATALOG, COMMITS, DECISION_BUCKETS,
    DECISION_LATENCY, RECORDS, TXN_STEP, TXN_STEPS,
};

/// The exporter with every histogram's buckets from the catalog.
pub fn with_buckets(
    builder: metrics_exporter_prometheus::PrometheusBuilder,
) -> Result<metrics_exporter_prometheus::PrometheusBuilder, metrics_exporter_prometheus::BuildError>
{
    use metrics_exporter_prometheus::Matcher;
    CATALOG
        .iter()
        .filter(|metric| metric.kind == Kind::Histogram)
        .try_fold(builder, |builder, metric| {
            builder.set_buckets_for_metric(Matcher::Full(metric.name.into()), metric.buckets)
        })
}

/// The process metrics ([`Source::Process`]), read from /proc by
/// `metrics-process`.
static PROCESS: std::sync::LazyLock<metrics_process::Collector> =
    std::sync::LazyLock::new(metrics_process::Collector::default);

/// Reads the process metrics afresh: called as /metrics is scraped.
pub(crate) fn process() {
    PROCESS.collect();
}

/// Registers every recorded metric's name, unit and help text with the
/// installed recorder (the lag gauges are rendered by hand with theirs).
pub fn describe() {
    for metric in CATALOG.iter().filter(|m| m.source != Source::Lags) {
        let (name, unit, help) = (metric.name, metric.unit, metric.help);
        match metric.kind {
            Kind::Counter => describe_counter!(name, unit, help),
            Kind::Gauge => describe_gauge!(name, unit, help),
            Kind::Histogram => describe_histogram!(name, unit, help),
        }
    }
}

/// Creates every series of every recorded metric at its start value (0,
/// an empty histogram) before the first event, so dashboards and alerts
/// see them from the start and `rate()` starts from a known value: one
/// series per combination of its labels' values ([`Values`]).
pub(crate) fn register(streams: &[&str], tiered: &[&str]) {
    for metric in CATALOG.iter().filter(|m| m.source == Source::Recorder) {
        let mut series: Vec<Vec<metrics::Label>> = vec![Vec::new()];
        for label in metric.labels {
            let values: Vec<String> = match label.values {
                Values::Streams => streams.iter().map(|s| s.to_string()).collect(),
                Values::TieredStreams => tiered.iter().map(|s| s.to_string()).collect(),
                Values::Fixed(values) => values.iter().map(|v| v.to_string()).collect(),
                Values::Open => Vec::new(),
            };
            series = series
                .iter()
                .flat_map(|labels| {
                    values.iter().map(move |value| {
                        let mut labels = labels.clone();
                        labels.push(metrics::Label::new(label.name, value.clone()));
                        labels
                    })
                })
                .collect();
        }
        for labels in series {
            match metric.kind {
                Kind::Counter => counter!(metric.name, labels).absolute(metric.start as u64),
                Kind::Gauge => gauge!(metric.name, labels).set(metric.start),
                Kind::Histogram => drop(histogram!(metric.name, labels)),
            }
        }
    }
}

/// One stream's per-record metrics, looked up once.
pub(crate) struct StreamMetrics {
    /// By [`DECISIONS`] index.
    records: [Counter; 5],
    exact_hits: Counter,
    filter_hits: Counter,
    released: Counter,
    replayed: Counter,
    produce_failures: Counter,
    taken_over: Counter,
    latency: Histogram,
}

impl StreamMetrics {
    pub(crate) fn new(stream: &str) -> StreamMetrics {
        let s = || stream.to_string();
        StreamMetrics {
            records: DECISIONS.map(|d| counter!(RECORDS.name, "stream" => s(), "decision" => d)),
            exact_hits: counter!(TIER_HITS.name, "stream" => s(), "tier" => Tier::Exact.as_str()),
            filter_hits: counter!(TIER_HITS.name, "stream" => s(), "tier" => Tier::Filter.as_str()),
            released: counter!(RELEASES.name, "stream" => s()),
            replayed: counter!(REPLAYS.name, "stream" => s()),
            produce_failures: counter!(PRODUCE_FAILURES.name, "stream" => s()),
            taken_over: counter!(TAKEN_OVER.name, "stream" => s()),
            latency: histogram!(DECISION_LATENCY.name, "stream" => s()),
        }
    }

    /// A record's decision latency, recorded as it is known.
    pub(crate) fn latency(&self, took: Duration) {
        self.latency.record(took.as_secs_f64());
    }
}

/// What one turn of the loop counted per stream, added to the metrics at
/// the end of the turn.
#[derive(Default)]
pub(crate) struct Tally {
    streams: Vec<Counts>,
}

#[derive(Clone, Copy, Default)]
struct Counts {
    records: [u64; 5],
    exact_hits: u64,
    filter_hits: u64,
    released: u64,
    replayed: u64,
    produce_failures: u64,
    taken_over: u64,
}

impl Tally {
    fn of(&mut self, stream: usize) -> &mut Counts {
        if self.streams.len() <= stream {
            self.streams.resize(stream + 1, Counts::default());
        }
        &mut self.streams[stream]
    }

    pub(crate) fn decided(&mut self, stream: usize, decision: &Decision) {
        let counts = self.of(stream);
        let index = DECISIONS
            .iter()
            .position(|d| *d == decision.label())
            .unwrap_or(0);
        counts.records[index] += 1;
        match decision {
            Decision::Duplicate {
                tier: Tier::Exact, ..
            } => counts.exact_hits += 1,
            Decision::Duplicate {
                tier: Tier::Filter, ..
            } => counts.filter_hits += 1,
            _ => {}
        }
    }

    pub(crate) fn released(&mut self, stream: usize) {
        self.of(stream).released += 1;
    }

    pub(crate) fn replayed(&mut self, stream: usize) {
        self.of(stream).replayed += 1;
    }

    /// A claim taken over from a holder an operator's reset abandoned.
    pub(crate) fn taken_over(&mut self, stream: usize) {
        self.of(stream).taken_over += 1;
    }

    pub(crate) fn produce_failed(&mut self, stream: usize) {
        self.of(stream).produce_failures += 1;
    }

    /// Adds what was counted to the metrics and starts again.
    pub(crate) fn flush(&mut self, metrics: &[StreamMetrics]) {
        for (counts, m) in self.streams.iter_mut().zip(metrics) {
            let add = |counter: &Counter, n: u64| {
                if n > 0 {
                    counter.increment(n);
                }
            };
            for (counter, n) in m.records.iter().zip(counts.records) {
                add(counter, n);
            }
            add(&m.exact_hits, counts.exact_hits);
            add(&m.filter_hits, counts.filter_hits);
            add(&m.released, counts.released);
            add(&m.replayed, counts.replayed);
            add(&m.produce_failures, counts.produce_failures);
            add(&m.taken_over, counts.taken_over);
            *counts = Counts::default();
        }
    }
}

pub(crate) fn waited(count: u64) {
    counter!(WAITS.name).increment(count);
}

pub(crate) fn store_call(operation: &'static str, took: Duration, error: Option<&StoreError>) {
    histogram!(STORE_LATENCY.name, "op" => operation).record(took.as_secs_f64());
    if let Some(error) = error {
        store_failed(operation, error);
    }
}

pub(crate) fn store_failed(operation: &'static str, error: &StoreError) {
    counter!(STORE_ERRORS.name, "op" => operation, "cause" => error.cause()).increment(1);
}

pub(crate) fn batch(records: usize) {
    histogram!(BATCH_SIZE.name).record(records as f64);
}

pub(crate) fn breaker(open: bool) {
    gauge!(BREAKER_OPEN.name).set(if open { 1.0 } else { 0.0 });
}

/// Records waiting on other records' claims, and the longest wait, per
/// stream (set every second).
pub(crate) fn waiting(stream: &str, records: usize, oldest: Duration) {
    gauge!(WAITING.name, "stream" => stream.to_string()).set(records as f64);
    gauge!(OLDEST_WAIT.name, "stream" => stream.to_string()).set(oldest.as_secs_f64());
}

/// The stream's store lost its state (docs/design.md §8.2).
pub(crate) fn identity_lost(stream: &str) {
    gauge!(IDENTITY_LOST.name, "stream" => stream.to_string()).set(1.0);
}

/// Each stream's readiness: 1 for each cause that holds, 0 for the others
/// (set as /metrics or /readyz is asked).
pub(crate) fn not_ready(judged: &[(&str, Vec<crate::readiness::Cause>)]) {
    for (stream, causes) in judged {
        for cause in crate::readiness::Cause::ALL {
            gauge!(NOT_READY.name, "stream" => stream.to_string(), "cause" => cause.name())
                .set(if causes.contains(cause) { 1.0 } else { 0.0 });
        }
    }
}

/// Input partitions this replica owns, per stream (set every second).
pub(crate) fn partitions_assigned(stream: &str, partitions: usize) {
    gauge!(PARTITIONS_ASSIGNED.name, "stream" => stream.to_string()).set(partitions as f64);
}

/// Input partitions this replica holds paused, per stream (set every
/// second).
pub(crate) fn partitions_paused(stream: &str, partitions: usize) {
    gauge!(PARTITIONS_PAUSED.name, "stream" => stream.to_string()).set(partitions as f64);
}

/// Partitions of a stream's input topics, as the brokers list them.
pub(crate) fn input_partitions(stream: &str, partitions: usize) {
    gauge!(INPUT_PARTITIONS.name, "stream" => stream.to_string()).set(partitions as f64);
}

/// Partitions of a stream's clean or audit topic held by a stalled
/// transaction (`worker::stalls`).
pub(crate) fn output_partitions_stalled(stream: &str, output: &'static str, partitions: usize) {
    gauge!(OUTPUT_STALLED.name, "stream" => stream.to_string(), "output" => output)
        .set(partitions as f64);
}

pub(crate) fn in_flight(batches: usize) {
    gauge!(IN_FLIGHT.name).set(batches as f64);
}

/// Lag series by (topic, partition), kept here rather than in the
/// recorder, which cannot remove a series: a partition that leaves this
/// replica must not keep reporting its last lag (docs/design.md §11).
static LAGS: std::sync::Mutex<std::collections::BTreeMap<(String, i32), i64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// A partition's lag as librdkafka's statistics report it (`-1`, unknown,
/// is left out).
pub(crate) fn lag(topic: &str, partition: i32, records: i64) {
    if records >= 0 {
        LAGS.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((topic.to_string(), partition), records);
    }
}

/// Partitions that left this replica (a revoke): their lag series go.
pub(crate) fn lag_gone<'a>(partitions: impl IntoIterator<Item = (&'a str, i32)>) {
    let mut lags = LAGS.lock().unwrap_or_else(|e| e.into_inner());
    for (topic, partition) in partitions {
        lags.remove(&(topic.to_string(), partition));
    }
}

/// The lag series in the exposition format, appended to the recorder's.
pub(crate) fn render_lags(out: &mut String) {
    use std::fmt::Write;
    let (name, help) = (LAG.name, LAG.help);
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {}", LAG.kind.as_str());
    for ((topic, partition), records) in LAGS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let topic = topic.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            out,
            "{name}{{topic=\"{topic}\",partition=\"{partition}\"}} {records}"
        );
    }
}

/// Exactly once: how long one step of a transaction's commit took
/// (`catalog::TXN_STEPS`).
pub(crate) fn transaction_step(step: &'static str, took: Duration) {
    histogram!(TXN_STEP.name, "step" => step).record(took.as_secs_f64());
}

/// Exactly once: a transaction aborted, its outputs to be sent again
/// (`catalog::TXN_ABORT_REASONS`).
pub(crate) fn transaction_aborted(reason: &'static str) {
    counter!(TXN_ABORTED.name, "reason" => reason).increment(1);
}

/// Exactly once: a transactional call timed out, and what the transaction
/// turned out to be (`catalog::TXN_TIMEOUT_OUTCOMES`).
pub(crate) fn transaction_timed_out(outcome: &'static str) {
    counter!(TXN_TIMED_OUT.name, "outcome" => outcome).increment(1);
}

pub(crate) fn committed() {
    counter!(COMMITS.name).increment(1);
}

pub(crate) fn store_stats(stats: &StoreStats) {
    gauge!(EVICTED_KEYS.name).set(stats.evicted_keys as f64);
    for (stream, fields) in &stats.tier1_hash_fields {
        gauge!(TIER1_HASH_FIELDS.name, "stream" => stream.clone()).set(*fields as f64);
    }
    for fill in &stats.filters {
        gauge!(FILTER_INSERTS.name, "stream" => fill.stream.clone()).set(fill.inserts as f64);
        gauge!(FILTER_CAPACITY.name, "stream" => fill.stream.clone()).set(fill.capacity as f64);
    }
}

/// What one janitor pass of the postgres store did to a stream's claims
/// table: rows deleted, and the table's size after.
pub(crate) fn janitor_swept(stream: &str, deleted: u64, table_bytes: Option<i64>) {
    counter!(JANITOR_DELETED.name, "stream" => stream.to_string()).increment(deleted);
    if let Some(bytes) = table_bytes {
        gauge!(TABLE_BYTES.name, "stream" => stream.to_string()).set(bytes as f64);
    }
}
