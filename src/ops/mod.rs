//! What an operator runs beside `run`: before a replica starts, and to
//! size and measure what it will keep.
//!
//! - [`check`]: the config loaded as `run` loads it, then the brokers
//!   (`check_kafka`: topics and partitions) and the store (`check_redis`:
//!   credentials, eviction policy, filter module, cluster state;
//!   `check_postgres`: server version, tables, the role's rights, bloat)
//!   and, for
//!   exactly once, a probe transaction (`check_txn`: is its offset metadata
//!   kept); a report
//!   of `ok`/`warn`/`FAIL` findings with each stream's TTLs and plan.
//! - [`plan`]: tier-1 keys and bytes and tier-2 generations for a rate and
//!   horizon, exact and tiered side by side; pure, written out by
//!   [`plan_text`].
//! - [`horizon`]: retry horizons from a delivery log on stdin, or from a
//!   recorded topic ([`horizon_topic`]), measured by the pure
//!   `ttl::measure_horizon`.
//! - [`reset`]: reset and replay a stream's input offsets (the scenarios
//!   of `kafka-consumer-groups --reset-offsets`) while its group is empty,
//!   recording in the store what a forward skip passed over and what a
//!   replay re-emits; the pure plan in `reset`, its report in
//!   [`reset_text`], Kafka's CSV in [`reset_csv`], `--by-duration`'s syntax
//!   in [`kafka_duration`], `--to-time`'s in [`reset_time`], the command line in `cli::reset`, the I/O in
//!   [`reset_run`].
//! - [`rebuild`]: a stream's store written back after it lost its state,
//!   from the clean topic and the group's commits; the pure plan and report
//!   in `rebuild`, the I/O in [`rebuild_run`].
//! - [`group`]: the consumer group from outside: its members (reset and
//!   rebuild refuse while it has any) and its committed offsets.
//! - `kafka`: the short-lived, quiet Kafka clients these use.

pub mod check;
pub(crate) mod check_kafka;
mod check_postgres;
mod check_redis;
pub(crate) mod check_txn;
pub mod group;
pub mod horizon;
pub mod horizon_topic;
pub(crate) mod kafka;
pub mod kafka_duration;
pub mod plan;
pub mod plan_text;
pub mod rebuild;
pub mod rebuild_run;
mod rebuild_start;
pub mod reset;
pub mod reset_csv;
pub mod reset_run;
pub mod reset_text;
pub mod reset_time;
