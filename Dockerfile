# Dockerfile — the idemgate image: built on the official Rust image, run on Debian
# bookworm-slim as a non-root user, with tini as PID 1 passing SIGTERM on to idemgate.
#
#   docker build -t idemgate:0.1.0 .
#   docker run --rm -v "$PWD/config:/etc/idemgate:ro" -p 9464:9464 idemgate:0.1.0 \
#     run --config /etc/idemgate/compose.toml
#
# The image holds no config: mount one (docker-compose.yml mounts config/, the Helm chart
# a ConfigMap) and set its [metrics] listen to 0.0.0.0:PORT so /metrics, /healthz and
# /readyz are reachable from outside the container (the default, 127.0.0.1:9464, is not).
#
# CI cannot run `docker build` (no Docker engine there): scripts/check-deploy.sh lints
# this file with hadolint and runs scripts/build-release.sh, the same build command as
# below, on the CI machine.

# --- build --------------------------------------------------------------------------
# 1.95: the toolchain CI builds and tests with (Cargo.lock's newest dependencies need
# 1.88 or later).
FROM rust:1.95-bookworm AS build
WORKDIR /src
# The build packages first (librdkafka's cmake build with SSL, SASL, zlib): this layer
# stays cached while the sources change.
COPY scripts/install-deps.sh scripts/
RUN scripts/install-deps.sh --build
COPY . .
RUN scripts/build-release.sh \
    && install -D -m 0755 target/release/idemgate /out/idemgate

# --- run ----------------------------------------------------------------------------
FROM debian:bookworm-slim
# libssl3: the bundled librdkafka links OpenSSL (Kafka TLS and SASL SCRAM);
# ca-certificates: the system CAs for brokers and Redis over TLS; tini: PID 1, which
# forwards SIGTERM/SIGINT to idemgate and reaps zombies. The health check needs nothing
# more: it is bash's /dev/tcp (bash is part of every Debian image). Not pinned (DL3008):
# bookworm's security updates replace these versions, and a pin would then fail the build.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libssl3 ca-certificates tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin idemgate
COPY --from=build /out/idemgate /usr/local/bin/idemgate
COPY deploy/docker/healthcheck.sh /usr/local/bin/idemgate-healthcheck
# Numeric, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 10001:10001
# The port of /metrics, /healthz and /readyz: the health check probes it, and it must
# match the config's [metrics] listen.
ENV IDEMGATE_METRICS_PORT=9464
EXPOSE 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/idemgate-healthcheck"]
# SIGTERM (docker stop, a Kubernetes pod deletion) makes idemgate finish the batch in
# flight, publish and commit before it exits: give it the grace period docs/kubernetes.md
# gives.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/idemgate"]
CMD ["run", "--config", "/etc/idemgate/idemgate.toml"]
