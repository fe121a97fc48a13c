//! The PostgreSQL store (docs/design.md §4.10): exact claims in one table
//! per stream, watermarks, reset ranges and identities beside them.

mod options;

pub use options::{
    redact, split_sslmode, JanitorOptions, PostgresOptions, SslMode, DEFAULT_JANITOR_BATCH_ROWS,
    DEFAULT_JANITOR_INTERVAL, DEFAULT_POOL_SIZE, DEFAULT_SCHEMA,
};
