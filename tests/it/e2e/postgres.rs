//! The exact scenarios on the PostgreSQL store (docs/design.md §6): the
//! same runs as on Redis, the config on the test services' PostgreSQL
//! over TLS in a schema of the test's own. The guarantee each checks is
//! the Redis run's: every input one output, every event once in clean,
//! nothing lost, and every claim settled at the end.

use super::exact::counts_exactly;
use super::exactly_once::killed_mid_transaction;
use super::process::GateConfig;

/// At least once, no fault: the numbers add up exactly, one claim per
/// event, every one settled; a SIGTERM ends the replica cleanly.
#[test]
fn at_least_once_on_postgres_counts_exactly_and_settles_every_claim() {
    counts_exactly("pg-exact", GateConfig::on_postgres);
}

/// Exactly once, a replica SIGKILLed mid-transaction and restarted with
/// its transactional id: a read_committed reader sees every input's output
/// once, and every claim ends settled.
#[test]
fn exactly_once_on_postgres_a_replica_killed_mid_transaction_loses_nothing_and_settles_every_claim()
{
    killed_mid_transaction("pg-eos-kill", |config| config.on_postgres());
}
