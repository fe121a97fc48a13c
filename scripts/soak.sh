#!/usr/bin/env bash
# scripts/soak.sh — the fault soak: `idemgate-bench soak` (see SOAK.md), one command.
#
#   scripts/soak.sh                       the full soak: 1,000,000 records, three replicas, both
#                                         guarantees (one this build refuses is reported as not run)
#   scripts/soak.sh --short               the CI preset (20,000 records, shorter faults)
#   scripts/soak.sh --store postgres      both streams exact on a PostgreSQL cluster of the soak's
#                                         own, frozen and restarted (pg_ctl) in Redis's place; only
#                                         its own sections of SOAK.md are replaced
#   scripts/soak.sh --help                every option
#
# The soak starts, for each guarantee, an Apache Kafka broker (one KRaft node, its log on local
# disk, so it can be restarted mid-run and keep it) and a redis-server of its own on spare
# loopback ports (or, with --store postgres, a PostgreSQL cluster: initdb as the postgres system
# user when run as root, every setting at its default). It takes Kafka's jars from the test
# services (IDEMGATE_TEST_KAFKA_LIBS, in their env file), so this script starts those first
# (fetching the jars once per machine, installing what is missing); then it builds and runs the
# release binary. SOAK.md and
# SOAK.json are written to the repository root; logs and configs to target/soak/<run>/.
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
exec cargo run --release --locked -p idemgate-bench -- soak "$@"
