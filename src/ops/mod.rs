//! What an operator runs beside `run`: before a replica starts, and to
//! size and measure what it will keep.
//!
//! A folder per command, its pure plan in `mod.rs` and its I/O beside it:
//!
//! - [`check`]: the config loaded as `run` loads it, then the brokers
//!   (`check::kafka`: topics and partitions), the store (`check::redis`:
//!   credentials, eviction policy, persistence, filter module, cluster
//!   state; `check::postgres`: server version, durability, tables, the
//!   role's rights, bloat) and, for exactly once, a probe transaction
//!   (`check::txn`: is its offset metadata kept); a report of
//!   `ok`/`warn`/`FAIL` findings with each stream's TTLs and plan.
//! - [`plan`]: tier-1 keys and bytes and tier-2 generations for a rate and
//!   horizon, exact and tiered side by side; pure, written out by
//!   [`plan::text`].
//! - [`horizon`]: retry horizons from a delivery log on stdin, or from a
//!   recorded topic ([`horizon::topic`]), measured by the pure
//!   `ttl::measure_horizon`.
//! - [`reset`]: reset and replay a stream's input offsets (the scenarios
//!   of `kafka-consumer-groups --reset-offsets`) while its group is empty,
//!   recording in the store what a forward skip passed over and what a
//!   replay re-emits; the pure plan in `reset`, its report in
//!   [`reset::text`], Kafka's CSV in [`reset::csv`], `--by-duration`'s
//!   syntax in [`reset::duration`], `--to-time`'s in [`reset::time`], the
//!   command line in `cli::reset`, the I/O in [`reset::run`].
//! - [`rebuild`]: a stream's store written back after it lost its state,
//!   from the clean topic and the group's commits; the pure plan and report
//!   in `rebuild`, the I/O in [`rebuild::run`], where each clean partition
//!   starts in `rebuild::start`; the records of finished runs the commits
//!   name in `rebuild::runs` (the I/O in `rebuild::runs_run`).
//! - [`group`]: the consumer group from outside: its members (reset and
//!   rebuild refuse while it has any) and its committed offsets.
//! - `kafka`: the short-lived, quiet Kafka clients these use.

pub mod check;
pub mod group;
pub mod horizon;
pub(crate) mod kafka;
pub mod plan;
pub mod rebuild;
pub mod reset;
