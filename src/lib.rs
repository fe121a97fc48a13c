//! idemgate turns an at-least-once Kafka stream into an effectively-once one.
//!
//! # Layout
//!
//! The modules follow the data flow of `DESIGN.md` §1:
//!
//! - [`fingerprint`]: a record's canonical source hash and payload digest
//!   (profiles `header`, `fields`, `payload`; presets `bank-txn`,
//!   `spatial-job`). Pure functions, typed errors naming the field.
//! - [`ttl`]: TTLs derived from evidence: explicit durations, retention
//!   years, job policies, and horizons measured from delivery logs.
//! - [`config`]: the stream and store settings, parsed then validated.
//! - [`store`]: the `ClaimStore` contract (claim, finalize, release a batch)
//!   and its backends: `memory` (injectable clock, fastbloom generations) and
//!   `redis` (standalone or cluster; tier 2 on RedisBloom or bitmaps).

pub mod config;
pub mod fingerprint;
pub mod store;
pub mod ttl;
