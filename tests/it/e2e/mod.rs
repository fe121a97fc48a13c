//! The built `idemgate` binary end to end: real processes (`idemgate run
//! --config FILE`) against a real Kafka-protocol broker (Tansu,
//! `IDEMGATE_TEST_KAFKA_BROKERS`) and real Redis, sent real signals.
//!
//! - `workload`: bank transactions with redeliveries, conflicts and
//!   malformed records, fingerprinted by the library as the oracle;
//! - `kafka`: topics, the workload producer, the output readers;
//! - `process`: the gateway and a redis-server of a test's own, as guards;
//! - `check`: outputs mapped back to inputs by their `x-test-id` header and
//!   judged record by record; `oracle` checks that judge on fabricated
//!   outputs, without servers;
//! - `exact`, `restart`, `failover`, `outage`: the scenarios.
//!
//! Every test has its own topics, group and key prefix, so they run in
//! parallel. Waits are bounded by counting outputs, never by watermarks
//! (Tansu's high watermark is wrong) and never by bare sleeps, except where
//! the scenario itself is "ten seconds of outage".
//!
//! Knobs: `IDEMGATE_E2E_KEEP_LOGS=1` keeps each gateway's config and log in
//! the temp dir after a passing test (a failing one always keeps them and
//! prints the log's tail); `IDEMGATE_E2E_RUST_LOG` replaces the gateways'
//! `RUST_LOG=info`; `IDEMGATE_E2E_ASSIGNMENT` sets the failover tests'
//! `partition.assignment.strategy` (the worker's default is eager).

mod check;
mod exact;
mod failover;
mod kafka;
mod oracle;
mod outage;
mod process;
mod restart;
mod workload;

use std::time::Duration;

/// The header every workload record carries; outputs keep it, which maps
/// each output back to its input.
pub const TEST_ID: &str = "x-test-id";

/// The longest wait for the gateway's outputs.
pub const BOUND: Duration = Duration::from_secs(90);

/// How long the readers keep reading after the expected count: a doubled
/// output arrives here or not at all.
pub const SETTLE: Duration = Duration::from_secs(3);
