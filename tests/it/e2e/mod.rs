//! The built `idemgate` binary end to end: real processes (`idemgate run
//! --config FILE`) against Apache Kafka (one KRaft node of
//! `scripts/test-services.sh`, `IDEMGATE_TEST_KAFKA_BROKERS`) and real Redis,
//! sent real signals.
//!
//! - `process`: the gateway binary as a guard;
//! - `exact`, `restart`, `failover`, `outage`, `lost_store`, `zombie`,
//!   `quiet_loss` (a store that lost a quiet stream's state, seen by the
//!   timed check), `seal_faults` (a replica stopped at each step of an
//!   exactly-once seal),
//!   `resets`, `cluster`, `postgres` (the exact ones on PostgreSQL): the
//!   scenarios, on the test kit's workload, Kafka
//!   readers, exactly-once check and server guards;
//! - `txn_timeout`: a broker of its own, frozen while a transaction
//!   commits;
//! - `stalled_output`: a transaction of the test's own held open on an
//!   output partition, reported stalled; transactions that commit, not;
//! - `check`, `horizon`: the operator's commands against the same servers;
//!   `reset_command`, `reset_kafka`: `idemgate reset`, the latter beside
//!   Kafka's `kafka-consumer-groups --reset-offsets` on the same group.
//!
//! Every test has its own topics, group and key prefix, so they run in
//! parallel. Waits are bounded by counting outputs or by the broker's own
//! state (high watermarks, committed offsets), never by bare sleeps, except
//! where the scenario itself is "ten seconds of outage".
//!
//! Knobs: `IDEMGATE_E2E_KEEP_LOGS=1` keeps each gateway's config and log in
//! the temp dir after a passing test (a failing one always keeps them and
//! prints the log's tail); `IDEMGATE_E2E_RUST_LOG` replaces the gateways'
//! `RUST_LOG` (info, and the batch's decision lines at debug); `IDEMGATE_E2E_ASSIGNMENT` sets the failover tests'
//! `partition.assignment.strategy` (the worker's default is eager).

mod check;
mod cluster;
mod codecs;
mod exact;
mod exactly_once;
mod failover;
mod frozen_commit;
mod group;
mod horizon;
mod lost_store;
mod monitoring;
mod outage;
mod overflow;
mod postgres;
mod process;
mod protocols;
mod quiet_loss;
mod replay;
mod reset_command;
mod reset_kafka;
mod resets;
mod restart;
mod seal_faults;
mod stalled_output;
mod start_checks;
mod store_rights;
mod tiered;
mod txn_timeout;
mod unread;
mod went_back;
mod zombie;
