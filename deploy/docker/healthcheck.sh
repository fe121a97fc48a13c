#!/bin/bash
# deploy/docker/healthcheck.sh — the image's HEALTHCHECK: GET /healthz on loopback at
# $IDEMGATE_METRICS_PORT (9464 unless set), healthy on a 200. Plain bash (/dev/tcp), so
# the image needs no curl. Kubernetes ignores HEALTHCHECK and uses the chart's probes.
set -euo pipefail
port=${IDEMGATE_METRICS_PORT:-9464}
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3
read -r -t 5 _ status _ <&3
[[ $status == 200 ]]
