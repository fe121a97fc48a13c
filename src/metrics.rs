//! Every metric idemgate exports, declared once (docs/design.md §11). The loop
//! calls the small functions below where things happen. Labels are low
//! cardinality: stream, decision, tier, operation; never a hash or offset.

use std::time::Duration;

use metrics::Unit;
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

use crate::decision::Decision;
use crate::store::{StoreStats, Tier};

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

/// Registers names, units and help texts with the installed recorder.
pub fn describe() {
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
        "claims released after an output could not be produced"
    );
    describe_counter!(REPLAYS, Unit::Count, "records met with their own done claim (delivered before a crash or replay); not produced again");
    describe_counter!(
        WAITS,
        Unit::Count,
        "claims retried because another record's claim was pending"
    );
    describe_counter!(
        PRODUCE_FAILURES,
        Unit::Count,
        "outputs the broker did not accept; the record is retried"
    );
    describe_histogram!(
        STORE_LATENCY,
        Unit::Seconds,
        "claim store round trips, by operation"
    );
    describe_counter!(STORE_ERRORS, Unit::Count, "claim store calls that failed");
    describe_histogram!(BATCH_SIZE, Unit::Count, "records per poll batch");
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
}

pub(crate) fn decided(stream: &str, decision: &Decision) {
    counter!(RECORDS, "stream" => stream.to_string(), "decision" => decision.label()).increment(1);
    if let Decision::Duplicate { tier, .. } = decision {
        tier_hit(stream, *tier);
    }
}

fn tier_hit(stream: &str, tier: Tier) {
    counter!(TIER_HITS, "stream" => stream.to_string(), "tier" => tier.as_str()).increment(1);
}

pub(crate) fn released(stream: &str, count: u64) {
    counter!(RELEASES, "stream" => stream.to_string()).increment(count);
}

pub(crate) fn replayed(stream: &str) {
    counter!(REPLAYS, "stream" => stream.to_string()).increment(1);
}

pub(crate) fn waited(count: u64) {
    counter!(WAITS).increment(count);
}

pub(crate) fn produce_failed(stream: &str) {
    counter!(PRODUCE_FAILURES, "stream" => stream.to_string()).increment(1);
}

pub(crate) fn store_call(operation: &'static str, took: Duration, ok: bool) {
    histogram!(STORE_LATENCY, "op" => operation).record(took.as_secs_f64());
    if !ok {
        counter!(STORE_ERRORS, "op" => operation).increment(1);
    }
}

pub(crate) fn batch(records: usize) {
    histogram!(BATCH_SIZE).record(records as f64);
}

pub(crate) fn breaker(open: bool) {
    gauge!(BREAKER_OPEN).set(if open { 1.0 } else { 0.0 });
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
