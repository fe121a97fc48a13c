//! idemgate turns an at-least-once Kafka stream into an effectively-once one.
//!
//! # Layout
//!
//! The modules follow the data flow of `docs/design.md` §1:
//!
//! - [`fingerprint`]: a record's canonical source hash and payload digest
//!   (profiles `header`, `fields`, `payload`; presets `bank-txn`,
//!   `spatial-job`). Pure functions, typed errors naming the field.
//! - [`ttl`]: TTLs derived from evidence: explicit durations, retention
//!   years, job policies, and horizons measured from delivery logs.
//! - [`coordinates`] and [`tier`]: the words the store, the decisions and
//!   the worker share (where a record is: its input topic's tag, partition
//!   and offset; which tier of the store knew a hash). Leaves, like
//!   [`clock`] (which also names `Millis`): they import nothing of the crate.
//! - [`config`]: the stream and store settings, parsed then validated.
//! - [`store`]: the `ClaimStore` contract (one round: publish what was
//!   delivered, claim what arrived, compare the stream's store identity)
//!   and its backends: `memory` (injectable clock, fastbloom generations),
//!   `redis` (standalone or cluster; tier 2 on RedisBloom or bitmaps) and
//!   `postgres` (exact claims on disk, for multi-year horizons).
//! - [`decision`]: a claim outcome turned into a decision, a route (clean or
//!   audit) and the headers that say why.
//! - [`worker`]: the pipelined consumer-group loop: poll, fingerprint,
//!   claim, route, produce, publish, commit, several batches in flight;
//!   it reads time only through [`clock`] (the machine's, or a test's),
//!   and ends only with a `WorkerError` that says why.
//! - [`app`]: the one place a replica is wired (each stream's store
//!   identity settled first, then store, worker, /metrics, store watcher)
//!   and run until shutdown.
//! - [`demo`]: the whole product in one process on librdkafka's mock
//!   cluster, with a realistic at-least-once workload.
//! - [`logging`]: text or JSON logs, rate limits for repeated errors.
//! - `group`: a consumer group as its coordinator answers for it (its
//!   member count, a transactional commit read back and judged), asked by
//!   the worker and by `ops` alike, so that neither imports the other.
//! - [`ops`]: the operator's commands: `check` a config and its servers,
//!   `plan` memory, measure a `horizon` from a log or a recorded topic,
//!   `reset` a stream's offsets (replay, re-emit, skip forward), `rebuild`
//!   a stream's store that lost its state from the clean topic.
//! - [`cli`]: the command line, a module per command (its arguments and
//!   its `run`). `anyhow` is spoken only at this top: here, in `app` and
//!   in `demo` (an application of `app`); below them errors are typed
//!   (`worker::WorkerError`, `store::StoreError`, `config::ConfigError`).
//! - [`metrics`], `http`, `readiness`: every metric declared once;
//!   /metrics, /healthz and /readyz (each stream not ready, and why).

pub mod app;
pub mod cli;
pub mod clock;
pub mod config;
pub mod coordinates;
pub mod decision;
pub mod demo;
pub mod fingerprint;
pub(crate) mod group;
pub(crate) mod http;
pub mod logging;
pub mod metrics;
pub mod ops;
pub(crate) mod readiness;
pub mod store;
pub mod tier;
pub mod ttl;
pub mod worker;
