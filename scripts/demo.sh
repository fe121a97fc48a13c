#!/usr/bin/env bash
# scripts/demo.sh — builds idemgate and runs `idemgate demo` on its embedded defaults:
# librdkafka's in-process mock Kafka cluster, the memory store on event time, two worker
# replicas and a realistic at-least-once workload. Needs no running service.
#   scripts/demo.sh [--transactions N] [--vehicles N] [--minutes N]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# Only what building needs: the demo starts no service and needs none installed.
scripts/install-deps.sh --build >&2
command -v cargo >/dev/null || { echo "demo.sh: cargo not found; install Rust with rustup first" >&2; exit 1; }
RUST_LOG=${RUST_LOG:-warn} exec cargo run --release --locked -- demo "$@"
