//! The catalog: every metric idemgate exports, each declared once with its
//! name, type, unit, help text, labels and (histograms) buckets. Everything
//! else iterates [`CATALOG`]: `describe` and `register` here, the exporter's
//! buckets, the recording functions (by the constants' `name`), the
//! `/metrics` unit test, and `tests/monitoring.rs`, which holds
//! docs/monitoring.md's metric table, the dashboard and the alert rules to
//! it. A metric added here is created at zero on `/metrics` and demanded by
//! those checks.

use metrics::Unit;

use crate::store::StoreError;
use crate::tier::Tier;

/// A metric's Prometheus type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    /// Exported as `_bucket{le=...}`, `_sum` and `_count` series only.
    Histogram,
}

impl Kind {
    /// The word of the exposition format's `# TYPE` line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Who puts a metric's series on `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The `metrics` recorder: `register` creates every series at its
    /// start value, the recording functions move it.
    Recorder,
    /// The `metrics-process` crate, read from /proc at each scrape under
    /// the names every Prometheus client library uses (the crate owns the
    /// names; the help texts are declared here, the same as the crate's).
    Process,
    /// Rendered by hand after the recorder's text (`render_lags`): the
    /// recorder cannot remove a series, and a revoked partition's lag must go.
    Lags,
}

/// The values a label takes, so `register` knows which series to create.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Values {
    /// Each stream's name.
    Streams,
    /// Each tiered stream's name (the filter exists only there).
    TieredStreams,
    /// These values, every one created at start.
    Fixed(&'static [&'static str]),
    /// Known only as they happen (a topic, a partition): nothing at start.
    Open,
}

/// A label of a metric: low cardinality, never a hash or an offset.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Label {
    pub name: &'static str,
    pub values: Values,
}

/// One exported metric.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    /// The `# HELP` text.
    pub help: &'static str,
    pub labels: &'static [Label],
    /// Bucket bounds of a histogram; empty for the others.
    pub buckets: &'static [f64],
    pub source: Source,
    /// The value every series starts at (`idemgate_build_info` is 1).
    pub start: f64,
}

impl Metric {
    /// The label names, in declaration order.
    pub fn label_names(&self) -> impl Iterator<Item = &'static str> {
        self.labels.iter().map(|label| label.name)
    }
}

const fn metric(name: &'static str, kind: Kind, unit: Unit, help: &'static str) -> Metric {
    Metric {
        name,
        kind,
        unit,
        help,
        labels: &[],
        buckets: &[],
        source: Source::Recorder,
        start: 0.0,
    }
}

const fn counter(name: &'static str, help: &'static str, labels: &'static [Label]) -> Metric {
    Metric {
        labels,
        ..metric(name, Kind::Counter, Unit::Count, help)
    }
}

const fn gauge(name: &'static str, help: &'static str, labels: &'static [Label]) -> Metric {
    Metric {
        labels,
        ..metric(name, Kind::Gauge, Unit::Count, help)
    }
}

const fn histogram(
    name: &'static str,
    unit: Unit,
    help: &'static str,
    labels: &'static [Label],
    buckets: &'static [f64],
) -> Metric {
    Metric {
        labels,
        buckets,
        ..metric(name, Kind::Histogram, unit, help)
    }
}

const fn process(name: &'static str, kind: Kind, unit: Unit, help: &'static str) -> Metric {
    Metric {
        source: Source::Process,
        ..metric(name, kind, unit, help)
    }
}

const STREAM: Label = Label {
    name: "stream",
    values: Values::Streams,
};
const TIERED_STREAM: Label = Label {
    name: "stream",
    values: Values::TieredStreams,
};
/// Store operations, as the `op` label names them: one round carries the
/// publish of what was delivered and the claims of what arrived.
const OP: Label = Label {
    name: "op",
    values: Values::Fixed(&["round", "identity", "runs", "marks"]),
};
/// Decisions by their `decision` label, in the order of a
/// [`super::Tally`]'s counts.
pub(crate) const DECISIONS: [&str; 5] = ["novel", "duplicate", "conflict", "invalid", "unverified"];
const TIERS: [&str; 2] = [Tier::Exact.as_str(), Tier::Filter.as_str()];

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

/// The steps of an exactly-once commit, as the `step` label names them,
/// in the order they run.
pub const TXN_STEPS: [&str; 3] = ["inserts", "offsets", "commit"];

pub const RECORDS: Metric = counter(
    "idemgate_records_total",
    "records decided, by stream and decision",
    &[
        STREAM,
        Label {
            name: "decision",
            values: Values::Fixed(&DECISIONS),
        },
    ],
);
pub(crate) const TIER_HITS: Metric = counter(
    "idemgate_tier_hits_total",
    "duplicates recognised, by stream and tier (exact, filter)",
    &[
        STREAM,
        Label {
            name: "tier",
            values: Values::Fixed(&TIERS),
        },
    ],
);
pub(crate) const RELEASES: Metric = counter(
    "idemgate_claims_released_total",
    "claims released: every attempt to produce the record's output was refused, certainly not persisted",
    &[STREAM],
);
pub(crate) const REPLAYS: Metric = counter(
    "idemgate_replayed_records_total",
    "records decided before (below their partition's watermark, their own claim settled, or listed done by the last owner): not produced again",
    &[STREAM],
);
pub(crate) const WAITS: Metric = counter(
    "idemgate_claim_waits_total",
    "claims answered with another record's unsettled claim: the record waits and claims again",
    &[],
);
pub(crate) const PRODUCE_FAILURES: Metric = counter(
    "idemgate_produce_failures_total",
    "outputs not delivered: produced again (claim kept), or to audit without the payload where refused for size or content",
    &[STREAM],
);
pub(crate) const STORE_LATENCY: Metric = histogram(
    "idemgate_store_latency_seconds",
    Unit::Seconds,
    "claim store calls by operation: round (publish and claims in one round trip), identity (the timed check of the streams' store identities)",
    &[OP],
    &LATENCY_BUCKETS,
);
pub const DECISION_LATENCY: Metric = histogram(
    "idemgate_decision_latency_seconds",
    Unit::Seconds,
    "from a record's poll to its output's delivery report, by stream",
    &[STREAM],
    &DECISION_BUCKETS,
);
pub const TXN_STEP: Metric = histogram(
    "idemgate_transaction_step_seconds",
    Unit::Seconds,
    "exactly once: how long each step of a transaction's commit took: its tier-2 inserts (on the loop), sending its offsets and committing it (off the loop; the commit waits for its outputs' delivery reports)",
    &[Label {
        name: "step",
        values: Values::Fixed(&TXN_STEPS),
    }],
    &LATENCY_BUCKETS,
);
/// Why a transaction was aborted and its outputs sent again.
pub(crate) const TXN_ABORT_REASONS: [&str; 3] = ["delivery", "commit", "timeout"];
pub(crate) const TXN_ABORTED: Metric = counter(
    "idemgate_transactions_aborted_total",
    "exactly once: transactions aborted with their outputs sent again in a later one, by reason: a delivery inside it failed (an output refused for its size or content goes to audit without its payload), its commit failed in a way the producer survives, or a call of it timed out and its offsets read back said aborted",
    &[Label {
        name: "reason",
        values: Values::Fixed(&TXN_ABORT_REASONS),
    }],
);
/// What a transaction whose call timed out turned out to be.
pub(crate) const TXN_TIMEOUT_OUTCOMES: [&str; 2] = ["committed", "aborted"];
pub(crate) const TXN_TIMED_OUT: Metric = counter(
    "idemgate_transactions_timed_out_total",
    "exactly once: transactional calls (offsets, commit, abort) that timed out, their outcome unknown: the producer was built again (its epoch bump ended the transaction) and the outcome read back from the committed offsets, by outcome",
    &[Label {
        name: "outcome",
        values: Values::Fixed(&TXN_TIMEOUT_OUTCOMES),
    }],
);
pub(crate) const STORE_ERRORS: Metric = counter(
    "idemgate_store_errors_total",
    "claim store calls that failed, by op and cause: unavailable (an outage), protocol, or a rejection that lasts until an operator acts (noperm, wrongtype, oom, readonly, diskfull)",
    &[
        OP,
        Label {
            name: "cause",
            values: Values::Fixed(&StoreError::CAUSES),
        },
    ],
);
pub const BATCH_SIZE: Metric = histogram(
    "idemgate_batch_records",
    Unit::Count,
    "records claimed per store round",
    &[],
    &BATCH_BUCKETS,
);
pub(crate) const BREAKER_OPEN: Metric = gauge(
    "idemgate_breaker_open",
    "1 while the store circuit breaker is open",
    &[],
);
pub(crate) const FILTER_INSERTS: Metric = gauge(
    "idemgate_filter_inserts",
    "hashes inserted into the current filter generation",
    &[TIERED_STREAM],
);
pub(crate) const FILTER_CAPACITY: Metric = gauge(
    "idemgate_filter_capacity",
    "capacity of one filter generation; alarm as inserts approach it",
    &[TIERED_STREAM],
);
pub(crate) const EVICTED_KEYS: Metric = gauge(
    "idemgate_store_evicted_keys",
    "keys the store server evicted: must stay 0",
    &[],
);
pub(crate) const TIER1_HASH_FIELDS: Metric = gauge(
    "idemgate_store_tier1_hash_fields",
    "the most live claims one of the stream's grouped tier-1 hashes on the redis store held at a sweep since the last reading (0 elsewhere); alarm as it nears hash-max-listpack-entries (128 by default), past which the hash takes several times the bytes",
    &[STREAM],
);
pub(crate) const JANITOR_DELETED: Metric = counter(
    "idemgate_store_janitor_deleted_total",
    "expired claims the postgres store's janitor deleted, by stream (stays 0 on the other stores, whose claims expire by themselves)",
    &[STREAM],
);
pub(crate) const TABLE_BYTES: Metric = Metric {
    unit: Unit::Bytes,
    ..gauge(
        "idemgate_store_table_bytes",
        "bytes of the stream's postgres claims table with its indexes (pg_total_relation_size), as the janitor last read it (0 on the other stores)",
        &[STREAM],
    )
};
pub const COMMITS: Metric = counter("idemgate_offset_commits_total", "offset commits", &[]);
pub(crate) const BUILD_INFO: Metric = Metric {
    start: 1.0,
    ..gauge(
        "idemgate_build_info",
        "1, labelled with the running version",
        &[Label {
            name: "version",
            values: Values::Fixed(&[env!("CARGO_PKG_VERSION")]),
        }],
    )
};
pub(crate) const LAG: Metric = Metric {
    source: Source::Lags,
    ..gauge(
        "idemgate_consumer_lag_records",
        "records between the consumer's position and the partition's end, by topic and partition",
        &[
            Label {
                name: "topic",
                values: Values::Open,
            },
            Label {
                name: "partition",
                values: Values::Open,
            },
        ],
    )
};
pub(crate) const WAITING: Metric = gauge(
    "idemgate_waiting_records",
    "records waiting on another record's unsettled claim",
    &[STREAM],
);
pub(crate) const OLDEST_WAIT: Metric = Metric {
    unit: Unit::Seconds,
    ..gauge(
        "idemgate_oldest_wait_seconds",
        "how long the longest-waiting record has waited on another record's claim",
        &[STREAM],
    )
};
pub(crate) const IN_FLIGHT: Metric = gauge(
    "idemgate_batches_in_flight",
    "poll batches read and not yet finished (several while pipelined)",
    &[],
);
pub(crate) const TAKEN_OVER: Metric = counter(
    "idemgate_claims_taken_over_total",
    "claims taken over from abandoned holders by an operator's reset (never on a timer; 0 until one is run)",
    &[STREAM],
);
pub(crate) const IDENTITY_LOST: Metric = gauge(
    "idemgate_store_identity_lost",
    "1 once a round or the timed check found the stream's store identity missing or changed, or its progress marks below what commits recorded: the store lost the stream's claims or came back older; closed streams stop deciding, open ones pass records unverified, until idemgate rebuild and a restart",
    &[STREAM],
);
pub(crate) const NOT_READY: Metric = gauge(
    "idemgate_not_ready",
    "1 while the cause keeps the stream from being ready on this replica (/readyz answers 503 and names it), 0 otherwise",
    &[
        STREAM,
        Label {
            name: "cause",
            values: Values::Fixed(crate::readiness::Cause::NAMES),
        },
    ],
);
pub(crate) const PARTITIONS_ASSIGNED: Metric = gauge(
    "idemgate_partitions_assigned",
    "input partitions this replica owns, by stream: summed over the replicas, below the stream's input partitions means part of the stream is read by nobody",
    &[STREAM],
);
pub(crate) const PARTITIONS_PAUSED: Metric = gauge(
    "idemgate_partitions_paused",
    "input partitions this replica holds paused at the in-flight bounds, by stream: paused for long while nothing is in flight means a partition nobody reads",
    &[STREAM],
);
pub(crate) const INPUT_PARTITIONS: Metric = gauge(
    "idemgate_stream_input_partitions",
    "partitions of the stream's input topics, as the brokers' metadata lists them (0 for a topic that is gone)",
    &[STREAM],
);
/// A stream's outputs, as the `output` label names them.
pub(crate) const OUTPUTS: [&str; 2] = ["clean", "audit"];
pub(crate) const OUTPUT_STALLED: Metric = gauge(
    "idemgate_output_partitions_stalled",
    "partitions of the stream's clean or audit topic whose last stable offset has stood below the high watermark for longer than metrics.output_stall_after: an open transaction stops every read_committed reader there (a WARN line names the partition)",
    &[
        STREAM,
        Label {
            name: "output",
            values: Values::Fixed(&OUTPUTS),
        },
    ],
);

/// Every metric on `/metrics`, idemgate's own and the process metrics.
/// CPU seconds count whole seconds (a `metrics` counter is an integer); an
/// unlimited limit reads 0.
pub const CATALOG: &[Metric] = &[
    RECORDS,
    TIER_HITS,
    RELEASES,
    REPLAYS,
    WAITS,
    PRODUCE_FAILURES,
    STORE_ERRORS,
    DECISION_LATENCY,
    STORE_LATENCY,
    TXN_STEP,
    TXN_ABORTED,
    TXN_TIMED_OUT,
    BATCH_SIZE,
    BREAKER_OPEN,
    FILTER_INSERTS,
    FILTER_CAPACITY,
    EVICTED_KEYS,
    TIER1_HASH_FIELDS,
    JANITOR_DELETED,
    TABLE_BYTES,
    COMMITS,
    BUILD_INFO,
    LAG,
    WAITING,
    OLDEST_WAIT,
    IN_FLIGHT,
    TAKEN_OVER,
    IDENTITY_LOST,
    NOT_READY,
    PARTITIONS_ASSIGNED,
    PARTITIONS_PAUSED,
    INPUT_PARTITIONS,
    OUTPUT_STALLED,
    process(
        "process_cpu_seconds_total",
        Kind::Counter,
        Unit::Seconds,
        "Total user and system CPU time spent in seconds.",
    ),
    process(
        "process_open_fds",
        Kind::Gauge,
        Unit::Count,
        "Number of open file descriptors.",
    ),
    process(
        "process_max_fds",
        Kind::Gauge,
        Unit::Count,
        "Maximum number of open file descriptors.",
    ),
    process(
        "process_virtual_memory_bytes",
        Kind::Gauge,
        Unit::Bytes,
        "Virtual memory size in bytes.",
    ),
    process(
        "process_virtual_memory_max_bytes",
        Kind::Gauge,
        Unit::Bytes,
        "Maximum amount of virtual memory available in bytes.",
    ),
    process(
        "process_resident_memory_bytes",
        Kind::Gauge,
        Unit::Bytes,
        "Resident memory size in bytes.",
    ),
    process(
        "process_start_time_seconds",
        Kind::Gauge,
        Unit::Seconds,
        "Start time of the process since unix epoch in seconds.",
    ),
    process(
        "process_threads",
        Kind::Gauge,
        Unit::Count,
        "Number of OS threads in the process.",
    ),
];

/// The metric a series of `/metrics` or a PromQL selector belongs to: a
/// histogram's by its `_bucket`, `_sum` or `_count` series, every other by
/// its name.
pub fn of_series(series: &str) -> Option<&'static Metric> {
    CATALOG.iter().find(|metric| match metric.kind {
        Kind::Histogram => ["_bucket", "_sum", "_count"]
            .iter()
            .any(|suffix| series.strip_suffix(suffix) == Some(metric.name)),
        _ => series == metric.name,
    })
}
