#!/usr/bin/env bash
# scripts/try-kafka.sh — idemgate on a real Apache Kafka, as docs/getting-started.md tells it.
#
#   scripts/try-kafka.sh              everything below in one go: start Kafka and Redis, build
#                                     idemgate, create the topics, produce the sample feed, run
#                                     two replicas until the feed is decided, print clean and
#                                     audit with their headers, stop the replicas
#   eval "$(scripts/try-kafka.sh up)" start (or reuse) Kafka 4.4 and Redis; prints the exports
#                                     the other commands read
#   scripts/try-kafka.sh wait GROUP TOPIC
#                                     until GROUP's committed offsets reach TOPIC's end
#   scripts/try-kafka.sh down         stop the Kafka and Redis that `up` started (Kafka's
#                                     log stays for the next `up`; IDEMGATE_TEST_SERVICES_DIR=
#                                     target/try-kafka scripts/test-services.sh wipe removes it)
#
# `up` exports IDEMGATE_KAFKA_BROKERS and IDEMGATE_REDIS_URL (which idemgate reads over its
# config's addresses), IDEMGATE_TEST_KAFKA_LIBS (Kafka's jars, for scripts/kafka.sh) and TRY,
# a fresh name for this try's topics, group and keys (kept when already set).
#
# The servers are scripts/test-services.sh's, started with a state dir of their own
# (IDEMGATE_TRY_DIR, default target/try-kafka), so a test run beside them is not disturbed.
# Where IDEMGATE_TEST_KAFKA_BROKERS, IDEMGATE_TEST_REDIS_URL and IDEMGATE_TEST_KAFKA_LIBS are
# set (scripts/test.sh sets them), `up` uses those servers and starts nothing.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRY_DIR=$(realpath -m "${IDEMGATE_TRY_DIR:-$REPO_ROOT/target/try-kafka}")
SERVICES=$REPO_ROOT/scripts/test-services.sh
# How long `wait` waits for the group to decide the feed.
WAIT_SECS=${IDEMGATE_TRY_WAIT:-120}
# The replicas the walk-through started, killed at exit if it stops half-way.
REPLICAS=()

log() { printf '[try-kafka] %s\n' "$*" >&2; }
die() { printf '[try-kafka] ERROR: %s\n' "$*" >&2; exit 1; }

# Shows a command, then runs it: every step is one a reader can type.
run() {
  printf '\n$ %s\n' "$*" >&2
  "$@"
}

services() { IDEMGATE_TEST_SERVICES_DIR=$TRY_DIR "$SERVICES" "$@"; }

# The test services are the test run's to stop, as `up` left them running.
reusing() {
  [[ -n ${IDEMGATE_TEST_KAFKA_BROKERS:-} && -n ${IDEMGATE_TEST_REDIS_URL:-} \
    && -n ${IDEMGATE_TEST_KAFKA_LIBS:-} ]]
}

cmd_up() {
  local brokers redis libs env_file
  if reusing; then
    log "using the test services' Kafka ($IDEMGATE_TEST_KAFKA_BROKERS) and Redis ($IDEMGATE_TEST_REDIS_URL)"
    brokers=$IDEMGATE_TEST_KAFKA_BROKERS
    redis=$IDEMGATE_TEST_REDIS_URL
    libs=$IDEMGATE_TEST_KAFKA_LIBS
  else
    "$REPO_ROOT/scripts/install-deps.sh" >&2
    services start
    env_file=$(services env-file)
    brokers=$(sed -n 's/^IDEMGATE_TEST_KAFKA_BROKERS=//p' "$env_file")
    redis=$(sed -n 's/^IDEMGATE_TEST_REDIS_URL=//p' "$env_file")
    libs=$(sed -n 's/^IDEMGATE_TEST_KAFKA_LIBS=//p' "$env_file")
  fi
  [[ -n $brokers && -n $redis && -n $libs ]] || die "the services gave no broker, Redis or jars"
  printf 'export IDEMGATE_KAFKA_BROKERS=%q\n' "$brokers"
  printf 'export IDEMGATE_REDIS_URL=%q\n' "$redis"
  printf 'export IDEMGATE_TEST_KAFKA_LIBS=%q\n' "$libs"
  printf 'export TRY=%q\n' "${TRY:-try-$(date +%H%M%S)-$RANDOM}"
}

# The sum of a topic's end offsets (its record count, for a topic nothing deleted from).
end_offsets() {
  "$REPO_ROOT/scripts/kafka.sh" get-offsets --bootstrap-server "$IDEMGATE_KAFKA_BROKERS" \
    --topic "$1" | awk -F: '{ sum += $NF } END { print sum + 0 }'
}

# The sum of the group's committed offsets on a topic ("-" where none is committed).
committed() {
  "$REPO_ROOT/scripts/kafka.sh" consumer-groups --bootstrap-server "$IDEMGATE_KAFKA_BROKERS" \
    --describe --group "$1" 2>/dev/null \
    | awk -v topic="$2" '$2 == topic && $4 ~ /^[0-9]+$/ { sum += $4 } END { print sum + 0 }'
}

cmd_wait() {
  local group=${1:?give GROUP TOPIC} topic=${2:?give GROUP TOPIC} total done
  : "${IDEMGATE_KAFKA_BROKERS:?run eval \"\$(scripts/try-kafka.sh up)\" first}"
  local deadline=$((SECONDS + WAIT_SECS))
  total=$(end_offsets "$topic")
  until done=$(committed "$group" "$topic") && ((done >= total)); do
    ((SECONDS < deadline)) || die "group $group committed $done of $topic's $total records in ${WAIT_SECS}s"
    sleep 1
  done
  log "group $group decided all $total records of $topic"
}

cmd_down() {
  if reusing; then
    log "the test services were reused: nothing of ours to stop"
  elif [[ -d $TRY_DIR/run ]]; then
    services stop
  else
    log "nothing started in $TRY_DIR"
  fi
}

# The walk-through of docs/getting-started.md, step by step as it tells it, each command
# shown as it runs.
cmd_all() {
  local exports b topic n
  cd "$REPO_ROOT"
  exports=$(cmd_up)
  eval "$exports"
  command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust with rustup first"
  run cargo build --locked
  export PATH="${CARGO_TARGET_DIR:-$PWD/target}/debug:$PATH"
  b=$IDEMGATE_KAFKA_BROKERS
  for topic in raw clean audit; do
    run scripts/kafka.sh topics --bootstrap-server "$b" --create --topic "$TRY-$topic" --partitions 2
  done
  run idemgate check --config config/try.toml
  printf '\n$ %s <config/sample-feed.tsv\n' \
    "scripts/kafka.sh console-producer --bootstrap-server $b --topic $TRY-raw --reader-property parse.key=true" >&2
  scripts/kafka.sh console-producer --bootstrap-server "$b" --topic "$TRY-raw" \
    --reader-property parse.key=true <config/sample-feed.tsv
  trap '((${#REPLICAS[@]} == 0)) || kill "${REPLICAS[@]}" 2>/dev/null || true' EXIT
  mkdir -p target # the replicas' logs (a build elsewhere, CARGO_TARGET_DIR, leaves none)
  for n in 1 2; do
    printf '\n$ idemgate run --config config/try.toml 2>target/%s-%s.log &\n' "$TRY" "$n" >&2
    idemgate run --config config/try.toml 2>"target/$TRY-$n.log" &
    REPLICAS+=($!)
  done
  run scripts/try-kafka.sh wait "$TRY" "$TRY-raw"
  run scripts/kafka.sh consumer-groups --bootstrap-server "$b" --describe --group "$TRY"
  for topic in clean audit; do
    run scripts/kafka.sh console-consumer --bootstrap-server "$b" --topic "$TRY-$topic" \
      --from-beginning --isolation-level read_committed --max-messages 5 \
      --formatter-property print.headers=true --formatter-property print.key=true
  done
  run kill "${REPLICAS[@]}"
  wait "${REPLICAS[@]}"
  REPLICAS=()
  log "the replicas stopped; their logs: target/$TRY-1.log, target/$TRY-2.log"
  log "to go on by hand: eval \"\$(scripts/try-kafka.sh up)\"; export TRY=$TRY"
  log "to stop Kafka and Redis: scripts/try-kafka.sh down"
}

case ${1:-all} in
  all) cmd_all ;;
  up) cmd_up ;;
  wait) shift; cmd_wait "$@" ;;
  down) cmd_down ;;
  *)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
