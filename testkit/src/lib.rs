//! What idemgate's tests and its bench share, written once.
//!
//! # Layout
//!
//! - [`workload`]: the seeded generator of bank transactions for the
//!   correctness tests: redeliveries re-serialized, conflicts, malformed
//!   records, each record fingerprinted by the library as the oracle.
//! - [`telemetry`]: vehicle readings re-sent byte for byte, soon or late,
//!   for tiered streams; fingerprinted the same way.
//! - [`feed`]: the bank feed the bench loads: millions of fixed-size
//!   records, deterministic, redeliveries along a retry ladder.
//! - [`kafka`]: a test's topics, the producer that writes a workload, the
//!   reader that collects outputs ([`kafka::Out`]), on any broker (the mock
//!   cluster or Apache Kafka).
//! - [`check`]: the exactly-once check: every output mapped back to its
//!   input by the [`TEST_ID`] header and judged record by record.
//! - [`counting`]: a `ClaimStore` decorator that counts what a worker asks.
//! - [`faulty`]: a `ClaimStore` decorator that injects store faults.
//! - [`link`]: a loopback TCP link to a server that a test can cut (the
//!   traffic dropped, the sockets open) and restore.
//! - [`process`]: a child process with its log, killed on drop.
//! - [`postgres`]: the PostgreSQL store's claims and watermarks read from
//!   outside (through `psql`), and which claims are unsettled.
//! - [`servers`]: guards that start and stop a redis-server or an Apache
//!   Kafka broker of one's own; SCAN (never KEYS) under a prefix.
//! - [`tools`]: Kafka's own command-line tools (`kafka-consumer-groups`,
//!   `kafka-transactions`), run from the cached jars as a user runs them.
//!
//! Every test names its topics, group and key prefix with [`unique`], so
//! tests run in parallel on shared servers, and finds those servers with
//! [`env`], which fails loudly when they were not started.

pub mod check;
pub mod counting;
pub mod faulty;
pub mod feed;
pub mod kafka;
pub mod link;
pub mod postgres;
pub mod process;
pub mod servers;
pub mod telemetry;
pub mod tier1;
pub mod tools;
pub mod workload;

#[cfg(test)]
mod check_tests;

use std::time::Duration;

/// The header every workload record carries; outputs keep their input's
/// headers, so it maps each output back to its input.
pub const TEST_ID: &str = "x-test-id";

/// The longest any test waits for something that should happen.
pub const BOUND: Duration = Duration::from_secs(90);

/// How long readers keep reading after the expected count: a doubled output
/// arrives here or not at all.
pub const SETTLE: Duration = Duration::from_secs(3);

/// A name no other test (or earlier run) uses: for topics, groups and key
/// prefixes.
pub fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "t{}-{name}-{nanos:x}-{}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// A server address from the environment; panics with how to get it.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the suite with scripts/test.sh, which starts the servers")
    })
}

/// The Apache Kafka broker the end-to-end tests use, from
/// `scripts/test-services.sh`.
pub fn kafka_brokers() -> String {
    env("IDEMGATE_TEST_KAFKA_BROKERS")
}

/// A line for the test's output, flushed at once (tests run in parallel).
pub fn say(test: &str, line: impl std::fmt::Display) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "[{test}] {line}");
    let _ = out.flush();
}
