#!/usr/bin/env bash
# scripts/demo.sh — builds idemgate and runs `idemgate demo` on its embedded defaults:
# librdkafka's in-process mock Kafka cluster, the memory store on event time, two worker
# replicas and a realistic at-least-once workload. Needs no running service.
#   scripts/demo.sh [--transactions N] [--vehicles N] [--minutes N]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"
scripts/install-deps.sh >&2
RUST_LOG=${RUST_LOG:-warn} exec cargo run --release --locked -- demo "$@"
