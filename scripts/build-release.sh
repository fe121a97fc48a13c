#!/usr/bin/env bash
# scripts/build-release.sh — the release build that the image ships, written once: the
# Dockerfile's build stage runs it, and so does scripts/check-deploy.sh (in CI), so CI
# builds the same binary with the same command, flags and profile as the image.
#
#   scripts/build-release.sh        -> target/release/idemgate
#
# --locked: the versions in Cargo.lock, or a refusal (never a silent update). Extra
# arguments go to cargo (e.g. -j 1 on a busy machine); the image and CI pass none.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"
exec cargo build --release --locked "$@"
