#!/usr/bin/env bash
# scripts/soak.sh — the fault soak: `idemgate-bench soak` (see SOAK.md), one command.
#
#   scripts/soak.sh                       the full soak: 1,000,000 records, three replicas, both
#                                         guarantees (one this build refuses is reported as not run)
#   scripts/soak.sh --short               the CI preset (20,000 records, shorter faults)
#   scripts/soak.sh --help                every option
#
# The soak starts a Tansu broker, a redis-server and a moto S3 server (the broker's persistent
# storage, so the broker can be restarted without losing its log) of its own on spare loopback
# ports. It takes the Tansu binary from the test services, so this script starts those first
# (installing what is missing) and installs moto's server (`moto[server]`, from PyPI) when
# `moto_server` is not on PATH; then it builds and runs the release binary. SOAK.md and
# SOAK.json are written to the repository root; logs and configs to target/soak/<run>/.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"
export PATH="$HOME/.cargo/bin:$PATH"

"$REPO_ROOT/scripts/test-services.sh" start
set -a
# shellcheck disable=SC1090
. "$("$REPO_ROOT/scripts/test-services.sh" env-file)"
set +a
if ! command -v moto_server >/dev/null 2>&1; then
  echo "[soak.sh] installing moto's S3 server: python3 -m pip install 'moto[server]'" >&2
  python3 -m pip install --disable-pip-version-check --no-input -q 'moto[server]' >&2 \
    || echo "[soak.sh] WARNING: no moto server: the broker restart will be SKIPPED" >&2
  hash -r
fi
exec cargo run --release --locked -p idemgate-bench -- soak "$@"
