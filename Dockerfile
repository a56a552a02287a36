# syntax=docker/dockerfile:1
# One image for every groupcoord process: the command picks it (`dev`, `shard`, `gateway`,
# `assignor`, `partitions`, `repair`, `health`), e.g. `docker run IMAGE shard --node-id 0 ...`.
#
#   docker build -t groupcoord .
#
# BASE_IMAGE is any Debian-like image with python3 (>= 3.11) and its venv module; both stages
# use it, so the virtualenv built in the first one runs unchanged in the second. Behind a
# TLS-inspecting proxy, hand pip its CA as a build secret (optional):
#   docker build --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt -t groupcoord .
ARG BASE_IMAGE=python:3.12-slim-bookworm

# --- build: wheels for groupcoord and its dependencies, installed into a virtualenv ----------
FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY proto ./proto
COPY shards ./shards
COPY services ./services
COPY assignors ./assignors
COPY loadtest ./loadtest
RUN --mount=type=secret,id=ca,target=/run/secrets/ca \
    set -eu; \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi; \
    python3 -m venv /opt/groupcoord; \
    /opt/groupcoord/bin/pip install --upgrade pip; \
    /opt/groupcoord/bin/pip wheel --wheel-dir /wheels .; \
    /opt/groupcoord/bin/pip install --no-index --find-links /wheels groupcoord; \
    /opt/groupcoord/bin/pip uninstall -y pip; \
    find /opt/groupcoord -name __pycache__ -prune -exec rm -rf {} +; \
    /opt/groupcoord/bin/groupcoord --version

# --- runtime: the interpreter, the virtualenv, a non-root user; no compilers, no pip --------
FROM ${BASE_IMAGE} AS runtime
RUN set -eu; \
    groupadd --system --gid 10001 groupcoord; \
    useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/groupcoord \
            --shell /usr/sbin/nologin groupcoord; \
    mkdir -p /var/lib/groupcoord; \
    chown 10001:10001 /var/lib/groupcoord
COPY --from=build /opt/groupcoord /opt/groupcoord
ENV PATH=/opt/groupcoord/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GROUPCOORD_HOST=0.0.0.0 \
    GROUPCOORD_DATA_DIR=/var/lib/groupcoord \
    HEALTHCHECK_PORT=50051
USER 10001:10001
WORKDIR /var/lib/groupcoord
VOLUME ["/var/lib/groupcoord"]
# gRPC (dev, shard), Kafka (dev, gateway), assignor, metrics
EXPOSE 50051 9092 50061 9464
# The gRPC health service ("" = ready) of whatever process runs: its gRPC port (dev, shard:
# 50051; assignor: set HEALTHCHECK_PORT=50061) or the gateway's --health-port.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD groupcoord health "127.0.0.1:${HEALTHCHECK_PORT}" --timeout 4
ENTRYPOINT ["groupcoord"]
CMD ["dev"]
