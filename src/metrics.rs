//! Every metric idemgate exports, declared once (docs/design.md §11). The loop
//! calls the small functions below where things happen; what happens per
//! record is counted per turn of the loop ([`Tally`]) and added to handles
//! looked up once ([`StreamMetrics`]). Labels are low cardinality: stream,
//! decision, tier, operation; never a hash or offset.

use std::time::Duration;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics::{Counter, Histogram, Unit};

use crate::decision::Decision;
use crate::store::{StoreError, StoreStats, Tier};

pub const RECORDS: &str = "idemgate_records_total";
pub(crate) const TIER_HITS: &str = "idemgate_tier_hits_total";
pub(crate) const RELEASES: &str = "idemgate_claims_released_total";
pub(crate) const REPLAYS: &str = "idemgate_replayed_records_total";
pub(crate) const WAITS: &str = "idemgate_claim_waits_total";
pub(crate) const PRODUCE_FAILURES: &str = "idemgate_produce_failures_total";
pub(crate) const STORE_LATENCY: &str = "idemgate_store_latency_seconds";
pub(crate) const STORE_ERRORS: &str = "idemgate_store_errors_total";
pub const BATCH_SIZE: &str = "idemgate_batch_records";
pub(crate) const BREAKER_OPEN: &str = "idemgate_breaker_open";
pub(crate) const FILTER_INSERTS: &str = "idemgate_filter_inserts";
pub(crate) const FILTER_CAPACITY: &str = "idemgate_filter_capacity";
pub(crate) const EVICTED_KEYS: &str = "idemgate_store_evicted_keys";
pub const COMMITS: &str = "idemgate_offset_commits_total";
pub(crate) const BUILD_INFO: &str = "idemgate_build_info";
pub(crate) const LAG: &str = "idemgate_consumer_lag_records";
pub(crate) const WAITING: &str = "idemgate_waiting_records";
pub(crate) const OLDEST_WAIT: &str = "idemgate_oldest_wait_seconds";
pub(crate) const IN_FLIGHT: &str = "idemgate_batches_in_flight";
pub(crate) const TAKEN_OVER: &str = "idemgate_claims_taken_over_total";
pub(crate) const IDENTITY_LOST: &str = "idemgate_store_identity_lost";
pub const DECISION_LATENCY: &str = "idemgate_decision_latency_seconds";
pub(crate) const PARTITIONS_ASSIGNED: &str = "idemgate_partitions_assigned";
pub(crate) const INPUT_PARTITIONS: &str = "idemgate_stream_input_partitions";

/// Bucket bounds of the store latency histogram (seconds): a loopback
/// round trip is well under a millisecond, a timed-out one 5 s.
pub(crate) const LATENCY_BUCKETS: [f64; 14] = [
    0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];
/// Bucket bounds of the batch size histogram (records).
pub(crate) const BATCH_BUCKETS: [f64; 10] = [
    1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0,
];

/// Bucket bounds of the decision latency histogram (seconds), fine where a
/// pipelined batch lands (a few to tens of milliseconds).
pub const DECISION_BUCKETS: [f64; 22] = [
    0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
    0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 30.0,
];

/// The exporter with idemgate's histogram buckets.
pub fn with_buckets(
    builder: metrics_exporter_prometheus::PrometheusBuilder,
) -> Result<metrics_exporter_prometheus::PrometheusBuilder, metrics_exporter_prometheus::BuildError>
{
    use metrics_exporter_prometheus::Matcher;
    builder
        .set_buckets_for_metric(Matcher::Full(STORE_LATENCY.into()), &LATENCY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(BATCH_SIZE.into()), &BATCH_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(DECISION_LATENCY.into()), &DECISION_BUCKETS)
}

/// Store operations, as the `op` label names them: one round carries the
/// publish of what was delivered and the claims of what arrived.
const OPERATIONS: [&str; 1] = ["round"];
const DECISIONS: [&str; 5] = ["novel", "duplicate", "conflict", "invalid", "unverified"];

/// The process metrics every Prometheus client library exports, under
/// their usual names (`process_cpu_seconds_total`,
/// `process_resident_memory_bytes`, `process_virtual_memory_bytes`,
/// `process_virtual_memory_max_bytes`, `process_open_fds`,
/// `process_max_fds`, `process_start_time_seconds`, `process_threads`),
/// declared and read from /proc by `metrics-process`. CPU seconds count
/// whole seconds (a `metrics` counter is an integer); an unlimited limit
/// reads 0.
static PROCESS: std::sync::LazyLock<metrics_process::Collector> =
    std::sync::LazyLock::new(metrics_process::Collector::default);

/// Reads the process metrics afresh: called as /metrics is scraped.
pub(crate) fn process() {
    PROCESS.collect();
}

/// Registers names, units and help texts with the installed recorder.
pub fn describe() {
    PROCESS.describe();
    describe_counter!(
        RECORDS,
        Unit::Count,
        "records decided, by stream and decision"
    );
    describe_counter!(
        TIER_HITS,
        Unit::Count,
        "duplicates recognised, by stream and tier (exact, filter)"
    );
    describe_counter!(
        RELEASES,
        Unit::Count,
        "claims released: every attempt to produce the record's output was refused, certainly not persisted"
    );
    describe_counter!(REPLAYS, Unit::Count, "records decided before (below their partition's watermark, their own claim settled, or listed done by the last owner): not produced again");
    describe_counter!(
        WAITS,
        Unit::Count,
        "claims answered with another record's unsettled claim: the record waits and claims again"
    );
    describe_counter!(
        PRODUCE_FAILURES,
        Unit::Count,
        "outputs not delivered: produced again (claim kept), or to audit without the payload where refused for size or content"
    );
    describe_histogram!(
        STORE_LATENCY,
        Unit::Seconds,
        "claim store rounds (publish and claims in one round trip), by operation"
    );
    describe_histogram!(
        DECISION_LATENCY,
        Unit::Seconds,
        "from a record's poll to its output's delivery report, by stream"
    );
    describe_counter!(
        STORE_ERRORS,
        Unit::Count,
        "claim store calls that failed, by op and cause: unavailable (an outage), protocol, or a rejection that lasts until an operator acts (noperm, wrongtype, oom, readonly)"
    );
    describe_histogram!(BATCH_SIZE, Unit::Count, "records claimed per store round");
    describe_gauge!(
        BREAKER_OPEN,
        Unit::Count,
        "1 while the store circuit breaker is open"
    );
    describe_gauge!(
        FILTER_INSERTS,
        Unit::Count,
        "hashes inserted into the current filter generation"
    );
    describe_gauge!(
        FILTER_CAPACITY,
        Unit::Count,
        "capacity of one filter generation; alarm as inserts approach it"
    );
    describe_gauge!(
        EVICTED_KEYS,
        Unit::Count,
        "keys the store server evicted: must stay 0"
    );
    describe_counter!(COMMITS, Unit::Count, "offset commits");
    describe_gauge!(
        BUILD_INFO,
        Unit::Count,
        "1, labelled with the running version"
    );
    describe_gauge!(
        WAITING,
        Unit::Count,
        "records waiting on another record's unsettled claim"
    );
    describe_gauge!(
        OLDEST_WAIT,
        Unit::Seconds,
        "how long the longest-waiting record has waited on another record's claim"
    );
    describe_gauge!(
        IN_FLIGHT,
        Unit::Count,
        "poll batches read and not yet finished (several while pipelined)"
    );
    describe_gauge!(
        IDENTITY_LOST,
        Unit::Count,
        "1 once a round found the stream's store identity missing or changed: the store lost the stream's claims; closed streams stop deciding, open ones pass records unverified, until idemgate rebuild and a restart"
    );
    describe_gauge!(
        PARTITIONS_ASSIGNED,
        Unit::Count,
        "input partitions this replica owns, by stream: summed over the replicas, below the stream's input partitions means part of the stream is read by nobody"
    );
    describe_gauge!(
        INPUT_PARTITIONS,
        Unit::Count,
        "partitions of the stream's input topics, as the brokers' metadata lists them (0 for a topic that is gone)"
    );
    describe_counter!(
        TAKEN_OVER,
        Unit::Count,
        "claims taken over from abandoned holders by an operator's reset (never on a timer; 0 until one is run)"
    );
}

/// Creates every series at zero (or its value) before the first event, so
/// dashboards and alerts see them from the start and `rate()` starts from
/// a known value.
pub(crate) fn register(streams: &[&str], tiered: &[&str]) {
    gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for stream in streams {
        let stream = stream.to_string();
        for decision in DECISIONS {
            counter!(RECORDS, "stream" => stream.clone(), "decision" => decision).absolute(0);
        }
        for tier in [Tier::Exact, Tier::Filter] {
            counter!(TIER_HITS, "stream" => stream.clone(), "tier" => tier.as_str()).absolute(0);
        }
        for name in [RELEASES, REPLAYS, PRODUCE_FAILURES, TAKEN_OVER] {
            counter!(name, "stream" => stream.clone()).absolute(0);
        }
        gauge!(IDENTITY_LOST, "stream" => stream.clone()).set(0.0);
        gauge!(WAITING, "stream" => stream.clone()).set(0.0);
        gauge!(OLDEST_WAIT, "stream" => stream.clone()).set(0.0);
        gauge!(PARTITIONS_ASSIGNED, "stream" => stream.clone()).set(0.0);
        gauge!(INPUT_PARTITIONS, "stream" => stream.clone()).set(0.0);
    }
    for stream in tiered {
        gauge!(FILTER_INSERTS, "stream" => stream.to_string()).set(0.0);
        gauge!(FILTER_CAPACITY, "stream" => stream.to_string()).set(0.0);
    }
    for op in OPERATIONS {
        for cause in StoreError::CAUSES {
            counter!(STORE_ERRORS, "op" => op, "cause" => cause).absolute(0);
        }
    }
    counter!(WAITS).absolute(0);
    counter!(COMMITS).absolute(0);
    gauge!(BREAKER_OPEN).set(0.0);
    gauge!(EVICTED_KEYS).set(0.0);
    gauge!(IN_FLIGHT).set(0.0);
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
            records: DECISIONS.map(|d| counter!(RECORDS, "stream" => s(), "decision" => d)),
            exact_hits: counter!(TIER_HITS, "stream" => s(), "tier" => Tier::Exact.as_str()),
            filter_hits: counter!(TIER_HITS, "stream" => s(), "tier" => Tier::Filter.as_str()),
            released: counter!(RELEASES, "stream" => s()),
            replayed: counter!(REPLAYS, "stream" => s()),
            produce_failures: counter!(PRODUCE_FAILURES, "stream" => s()),
            taken_over: counter!(TAKEN_OVER, "stream" => s()),
            latency: histogram!(DECISION_LATENCY, "stream" => s()),
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
    counter!(WAITS).increment(count);
}

pub(crate) fn store_call(operation: &'static str, took: Duration, error: Option<&StoreError>) {
    histogram!(STORE_LATENCY, "op" => operation).record(took.as_secs_f64());
    if let Some(error) = error {
        store_failed(operation, error);
    }
}

pub(crate) fn store_failed(operation: &'static str, error: &StoreError) {
    counter!(STORE_ERRORS, "op" => operation, "cause" => error.cause()).increment(1);
}

pub(crate) fn batch(records: usize) {
    histogram!(BATCH_SIZE).record(records as f64);
}

pub(crate) fn breaker(open: bool) {
    gauge!(BREAKER_OPEN).set(if open { 1.0 } else { 0.0 });
}

/// Records waiting on other records' claims, and the longest wait, per
/// stream (set every second).
pub(crate) fn waiting(stream: &str, records: usize, oldest: Duration) {
    gauge!(WAITING, "stream" => stream.to_string()).set(records as f64);
    gauge!(OLDEST_WAIT, "stream" => stream.to_string()).set(oldest.as_secs_f64());
}

/// The stream's store lost its state (docs/design.md §8.2).
pub(crate) fn identity_lost(stream: &str) {
    gauge!(IDENTITY_LOST, "stream" => stream.to_string()).set(1.0);
}

/// Input partitions this replica owns, per stream (set every second).
pub(crate) fn partitions_assigned(stream: &str, partitions: usize) {
    gauge!(PARTITIONS_ASSIGNED, "stream" => stream.to_string()).set(partitions as f64);
}

/// Partitions of a stream's input topics, as the brokers list them.
pub(crate) fn input_partitions(stream: &str, partitions: usize) {
    gauge!(INPUT_PARTITIONS, "stream" => stream.to_string()).set(partitions as f64);
}

pub(crate) fn in_flight(batches: usize) {
    gauge!(IN_FLIGHT).set(batches as f64);
}

/// Lag series by (topic, partition), kept here rather than in the
/// recorder, which cannot remove a series: a partition that leaves this
/// replica must not keep reporting its last lag (docs/design.md §11).
static LAGS: std::sync::Mutex<std::collections::BTreeMap<(String, i32), i64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());
const LAG_HELP: &str =
    "records between the consumer's position and the partition's end, by topic and partition";

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
    let _ = writeln!(out, "# HELP {LAG} {LAG_HELP}");
    let _ = writeln!(out, "# TYPE {LAG} gauge");
    for ((topic, partition), records) in LAGS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let topic = topic.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            out,
            "{LAG}{{topic=\"{topic}\",partition=\"{partition}\"}} {records}"
        );
    }
}

pub(crate) fn committed() {
    counter!(COMMITS).increment(1);
}

pub(crate) fn store_stats(stats: &StoreStats) {
    gauge!(EVICTED_KEYS).set(stats.evicted_keys as f64);
    for fill in &stats.filters {
        gauge!(FILTER_INSERTS, "stream" => fill.stream.clone()).set(fill.inserts as f64);
        gauge!(FILTER_CAPACITY, "stream" => fill.stream.clone()).set(fill.capacity as f64);
    }
}
