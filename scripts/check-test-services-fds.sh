#!/usr/bin/env bash
# scripts/check-test-services-fds.sh — checks that the servers scripts/test-services.sh starts
# keep none of the caller's descriptors: run under `flock FILE`, `start` must leave FILE
# unlocked once it returns, while its servers run (before, they inherited flock's descriptor
# and held the lock until `stop`). It stops the services first, so that `start` starts every
# server afresh rather than reusing one, and stops them at the end.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
lock=$(mktemp)
trap 'rm -f "$lock"; scripts/test-services.sh stop >/dev/null' EXIT
scripts/test-services.sh stop >/dev/null
flock "$lock" scripts/test-services.sh start >/dev/null
scripts/test-services.sh status || { echo "check-test-services-fds: the services are not up" >&2; exit 1; }
if ! flock -n "$lock" true; then
  echo "check-test-services-fds: a server started by test-services.sh holds the caller's lock" >&2
  exit 1
fi
echo "check-test-services-fds: the caller's lock is free while the services run"
