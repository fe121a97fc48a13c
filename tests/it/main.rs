//! idemgate's integration tests, one binary: the claim-store conformance
//! suite, the worker on librdkafka's mock cluster (fault injection), and the
//! built binary end to end against a real broker (Apache Kafka) and real Redis.
//!
//! Servers come from `scripts/test-services.sh` (run by `scripts/test.sh`)
//! through `IDEMGATE_TEST_*` variables. A missing variable or server fails
//! the test loudly: nothing is skipped.

mod e2e;
mod store;
mod worker;
