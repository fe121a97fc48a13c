//! TTLs derived from evidence, never guessed (docs/design.md §9).
//!
//! A claim TTL shorter than a sender's retry horizon does not fail loudly: it
//! lets the late retries through as new records, hours after every test has
//! passed. So a stream's TTL is written as the evidence it comes from and
//! computed here.
//!
//! - `duration`: [`parse_duration`] and [`format_duration`], the one human
//!   duration grammar of configs, CLI flags and logs; [`format_years`], a
//!   long retention in years beside it, for people.
//! - [`serde_duration`], [`serde_duration_opt`]: that grammar for serde
//!   fields, e.g. `#[serde(with = "crate::ttl::serde_duration")]`.
//! - `policy`: [`TtlPolicy`] (explicit, retention years, job policy, measured
//!   horizon) and the arithmetic of [`TtlPolicy::ttl`].
//! - `horizon`: [`measure_horizon`], per-sender retry horizons from a
//!   recorded topic, which feed [`TtlPolicy::Horizon`].

mod duration;
mod horizon;
mod policy;
pub mod serde_duration;
pub mod serde_duration_opt;

pub use duration::{format_duration, format_years, parse_duration, DurationError};
pub use horizon::{measure_horizon, Delivery, Horizon};
pub use policy::{TtlError, TtlPolicy};
