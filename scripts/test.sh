#!/usr/bin/env bash
# scripts/test.sh — THE way to run idemgate's tests (CI runs exactly this, via .ci/run).
#
#   scripts/test.sh [extra cargo test args...]
#   e.g. scripts/test.sh --lib            scripts/test.sh bloom -- --nocapture
#
# 1. starts the Redis servers, the PostgreSQL cluster and the Apache Kafka broker the tests need
#    (scripts/test-services.sh start),
# 2. exports IDEMGATE_TEST_REDIS_URL, IDEMGATE_TEST_REDISBLOOM_URL, IDEMGATE_TEST_REDIS_CLUSTER,
#    IDEMGATE_TEST_KAFKA_BROKERS, IDEMGATE_TEST_KAFKA_LIBS, the TLS Redis's IDEMGATE_TEST_REDIS_TLS_*
#    and the PostgreSQL cluster's IDEMGATE_TEST_POSTGRES_*
#    (the tests fail loudly without them, so we check they are set before running cargo),
# 3. runs `cargo test --workspace --all-targets --locked "$@"` (the product, the bench and
#    the test kit; for the whole suite, the bench's tests beside the others, see below),
# 4. stops the servers again if this run started them (always, via a trap), and
# 5. exits with cargo's status, after a one-line summary of the test counts.
#
# Environment:
#   IDEMGATE_KEEP_SERVICES=1  leave the servers running afterwards (faster re-runs; stop them
#                             with `scripts/test-services.sh stop`). Servers that were already
#                             running before this script started are never stopped by it.
#   IDEMGATE_TEST_DOC=1|0     also run doc tests (`cargo test --doc`), which --all-targets
#                             leaves out. Default: 1 when no extra args are given, else 0.
#   RUST_TEST_THREADS=N       tests run at once per test binary. Default: 6 (see below).
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"
SERVICES=$REPO_ROOT/scripts/test-services.sh

# rustup's toolchain lives in ~/.cargo/bin, which a non-login shell may not have on PATH.
export PATH="$HOME/.cargo/bin:$PATH"
export RUST_BACKTRACE=${RUST_BACKTRACE:-1}
# Six tests at a time, not one per core: the end-to-end tests spend their time waiting on the
# broker's clocks (session and transaction timeouts, paced streams), not on the CPU. On two
# cores, with another process keeping one of them busy, the `it` binary took 1,062 s at
# libtest's default of one per core, 561 s at four and 393 s at six, every test passing.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-6}

log() { printf '[test.sh] %s\n' "$*" >&2; }

# --- services --------------------------------------------------------------------------
# If everything is already up (a developer ran `test-services.sh start`), it is not ours
# to stop afterwards.
we_started=1
if "$SERVICES" status >/dev/null 2>&1; then
  we_started=0
  log "test services already running; they will be left running"
fi

services_stopped=0
stop_services() {
  ((services_stopped == 0)) || return 0
  services_stopped=1
  if ((we_started == 1)) && [[ ${IDEMGATE_KEEP_SERVICES:-0} != 1 ]]; then
    "$SERVICES" stop || log "WARNING: stopping the test services failed"
  fi
}
trap stop_services EXIT
trap 'exit 130' INT   # make Ctrl-C / kill go through the EXIT trap too
trap 'exit 143' TERM

# Packages first (build tools, redis-server): a fresh machine has none of them.
"$REPO_ROOT/scripts/install-deps.sh" >&2
"$SERVICES" start

# The env file is plain KEY=VALUE lines; `set -a` exports everything it defines.
set -a
# shellcheck disable=SC1090
. "$("$SERVICES" env-file)"
set +a
for var in IDEMGATE_TEST_REDIS_URL IDEMGATE_TEST_REDISBLOOM_URL IDEMGATE_TEST_REDIS_CLUSTER \
  IDEMGATE_TEST_KAFKA_BROKERS IDEMGATE_TEST_KAFKA_LIBS IDEMGATE_TEST_REDIS_TLS_URL \
  IDEMGATE_TEST_REDIS_TLS_DIR IDEMGATE_TEST_REDIS_TLS_USER IDEMGATE_TEST_REDIS_MANAGED_USER \
  IDEMGATE_TEST_POSTGRES_URL IDEMGATE_TEST_POSTGRES_CA IDEMGATE_TEST_POSTGRES_NOCREATE_URL; do
  [[ -n ${!var:-} ]] || { log "ERROR: $var is not set after starting the test services"; exit 1; }
  log "$var=${!var}"
done
[[ -f $IDEMGATE_TEST_KAFKA_LIBS/.complete ]] || { log "ERROR: IDEMGATE_TEST_KAFKA_LIBS=$IDEMGATE_TEST_KAFKA_LIBS holds no complete set of Kafka jars"; exit 1; }

# --- tests -----------------------------------------------------------------------------
out=$(mktemp)
trap 'rm -f "$out"; stop_services' EXIT

# Run one cargo command, teeing its output so we can count results afterwards.
status=0
run_cargo() {
  log "+ cargo $*"
  local rc
  set +e
  cargo "$@" 2>&1 | tee -a "$out"
  rc=${PIPESTATUS[0]}
  set -e
  ((status != 0)) || status=$rc   # keep the first failure
}

# The bench package's tests (its two fault soaks, about three minutes each, each with brokers
# and replicas of its own) run beside the product's, not after them: cargo runs one test binary
# at a time, and the soaks would otherwise add six minutes to the suite. One build of every
# test target first, on the workspace's features; the bench's test executables are read from
# that build's JSON messages and run as cargo runs them (from the package's directory).
# `cargo test -p idemgate-bench` would build that package again on features of its own (its
# selection leaves out the product's dev-dependencies: 46 s, from regex-syntax up, beside a
# busy core), and hold the build lock the product's tests wait on meanwhile. With other
# arguments (a filter, --lib), one cargo run as before: the split is for the whole suite.
BESIDE=bench
whole_suite=1
for arg in "$@"; do [[ $arg == --no-fail-fast ]] || whole_suite=0; done
if ((whole_suite == 1)); then
  beside_bins=$(mktemp)
  beside_out=$(mktemp)
  trap 'rm -f "$out" "$beside_bins" "$beside_out"; stop_services' EXIT
  log "+ cargo test --workspace --all-targets --locked --no-run $*"
  set +e
  cargo test --workspace --all-targets --locked --no-run --message-format=json-render-diagnostics "$@" |
    python3 -c '
import json, sys
manifest = sys.argv[1]
for line in sys.stdin:
    if not line.startswith("{"):
        continue
    m = json.loads(line)
    if (m.get("reason") == "compiler-artifact" and m.get("executable")
            and m.get("profile", {}).get("test") and m.get("manifest_path") == manifest):
        print(m["executable"])
' "$REPO_ROOT/$BESIDE/Cargo.toml" >"$beside_bins"
  rc=${PIPESTATUS[0]}
  set -e
  ((status != 0)) || status=$rc
  if ((status == 0)) && [[ ! -s $beside_bins ]]; then
    log "ERROR: the build listed no test executable of $BESIDE/"
    status=1
  fi
  if ((status == 0)); then
    log "+ the test executables of $BESIDE/, beside the rest (their output follows theirs): $(tr '\n' ' ' <"$beside_bins")"
    (
      cd "$REPO_ROOT/$BESIDE"
      rc=0
      while read -r bin; do
        echo "     Running $bin"
        "$bin" || rc=$?
      done <"$beside_bins" >"$beside_out" 2>&1
      echo "exit $rc" >>"$beside_out"
    ) &
    beside_pid=$!
    run_cargo test --workspace --exclude idemgate-bench --all-targets --locked "$@"
    wait "$beside_pid" || true
    log "+ the test executables of $BESIDE/ (their output)"
    head -n -1 "$beside_out" | tee -a "$out"
    beside_rc=$(tail -n 1 "$beside_out" | sed -n 's/^exit //p')
    ((status != 0)) || status=${beside_rc:-1}
  fi
else
  run_cargo test --workspace --all-targets --locked "$@"
fi

doc=${IDEMGATE_TEST_DOC:-$(($# == 0 ? 1 : 0))}
if [[ $doc == 1 && -f src/lib.rs ]]; then
  run_cargo test --workspace --doc --locked "$@"
fi

stop_services
if ((status != 0)); then log "cargo test FAILED (exit $status)"; fi

# One closing line that sums up every "test result:" line of every test binary, so the
# overall count is visible at the end (cargo prints one line per binary). Ignored tests
# are reported as skipped.
awk '
  /^test result: / {
    for (i = 1; i <= NF; i++) {
      if ($(i+1) ~ /^passed/)  p += $i
      if ($(i+1) ~ /^failed/)  f += $i
      if ($(i+1) ~ /^ignored/) s += $i
    }
    seen = 1
  }
  END {
    if (seen) printf "summary: %d passed, %d failed, %d skipped\n", p, f, s
    else print "summary: no test results (did the build fail?)"
  }' "$out"
exit "$status"
