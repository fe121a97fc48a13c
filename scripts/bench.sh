#!/usr/bin/env bash
# scripts/bench.sh — the end-to-end benchmark: `idemgate bench` (see BENCHMARKS.md).
#
#   scripts/bench.sh                     the default run: 2 million records, every mode, 1 and 2 replicas
#   scripts/bench.sh --records 200000    a quicker one; `scripts/bench.sh --help` lists every option
#
# The bench starts a Tansu broker and a redis-server of its own on spare loopback ports (clean
# memory figures, nothing shared with the tests). It takes the Tansu binary and the RedisBloom
# module from the test services, so this script starts those first (installing what is missing),
# then builds and runs the release binary. BENCHMARKS.md and BENCHMARKS.json are written to the
# repository root; logs, replica specs and profiles to target/bench/<run>/.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"

"$REPO_ROOT/scripts/test-services.sh" start
exec cargo run --release -- bench "$@"
