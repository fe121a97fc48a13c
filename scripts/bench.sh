#!/usr/bin/env bash
# scripts/bench.sh — the end-to-end benchmark: `idemgate-bench e2e` (see BENCHMARKS.md).
#
#   scripts/bench.sh                     the default run: 2 million records, every mode, 1 and 2 replicas
#   scripts/bench.sh --records 200000    a quicker one; `scripts/bench.sh --help` lists every option
#   scripts/bench.sh --modes exact,postgres --baseline-records 0
#                                        exact mode on Redis and on PostgreSQL, and the passthrough
#   scripts/bench.sh claims              the claims bench instead (fingerprints/s, claim batches per
#                                        backend, round trips, bytes per key; see BENCHMARKS-claims.md)
#
# The bench starts an Apache Kafka broker (one KRaft node), a redis-server and, for the postgres
# mode, a PostgreSQL cluster (initdb, as the postgres system user when run as root; every setting
# at its default) of its own on spare loopback ports (clean memory and disk figures, nothing shared
# with the tests). It takes Kafka's jars and
# the RedisBloom module from the test services (IDEMGATE_TEST_KAFKA_LIBS and the RedisBloom
# server's module, in their env file), so this script starts those first (fetching the jars once
# per machine, installing what is missing), then builds and runs the release binary.
# BENCHMARKS.md and BENCHMARKS.json are written to the repository root; logs, replica specs and
# profiles to target/bench/<run>/.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"
export PATH="$HOME/.cargo/bin:$PATH"

# What building and the services need, where it is missing (as scripts/test.sh does).
"$REPO_ROOT/scripts/install-deps.sh" >&2
"$REPO_ROOT/scripts/test-services.sh" start
set -a
# shellcheck disable=SC1090
. "$("$REPO_ROOT/scripts/test-services.sh" env-file)"
set +a
if [[ ${1:-} == claims ]]; then
  shift
  exec cargo run --release --locked -p idemgate-bench -- claims "$@"
fi
exec cargo run --release --locked -p idemgate-bench -- e2e "$@"
