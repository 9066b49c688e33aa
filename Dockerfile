# zh_en on TorchServe for a CPU host. Its build step is the README's `make archives` (runtime
# dependencies and torch's CPU build only) and its CMD the README's torchserve command; hadolint
# lints it in `make test`, and `make image` builds it with podman (deploy/image/).
#   docker build -t zh-en-torchserve .                       # real model from the hub, pinned commit
#   docker build --build-arg MODEL=synthetic -t zh-en-torchserve:standin .
#   docker run -d -p 8080:8080 --name zh_en zh-en-torchserve
# STRICT=1 by default: a build that cannot reach the hub fails instead of packing the stand-in
# (random weights) under the real model's name. `make image` adds OCI labels saying which it is.

# Stage 1 builds .venv, the C kernels and both archives (which carry the kernels' library); only .venv,
# the archives and the code reach the image, so the model they were built from (the hub's download, or
# the stand-in under build/), pip's cache, make and the compiler stay behind.
FROM python:3.11-slim AS build
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends make gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin serve
WORKDIR /srv/zh_en
COPY --chown=serve:serve . .
USER 10001
ARG MODEL=Helsinki-NLP/opus-mt-zh-en
ARG STRICT=1
# UNPACK=1: both archives as directories sharing one copy of the weights, served in place.
RUN make archives MODEL=${MODEL} STRICT=${STRICT} UNPACK=1

FROM python:3.11-slim
ARG MODEL=Helsinki-NLP/opus-mt-zh-en
# "synthetic" is the stand-in: random weights, every response says "standin": true.
LABEL io.zh-en.model="${MODEL}"
# Debian's own openjdk-17 security updates are wanted, so the version is not pinned.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin serve
WORKDIR /srv/zh_en
COPY --chown=serve:serve . .
COPY --from=build --chown=serve:serve /srv/zh_en/.venv .venv
COPY --from=build --chown=serve:serve /srv/zh_en/model_store model_store
USER 10001

# Only inference leaves the container; management (8081) and metrics (8082) stay on its loopback:
# use `docker exec` for swaps and scraping.
EXPOSE 8080
# /ping, then a one-token translation, with the inference key from key_file.json (token auth is on).
HEALTHCHECK --interval=30s --timeout=25s --start-period=180s --retries=3 \
  CMD [".venv/bin/python", "-m", "serving.health", "--key-file", "key_file.json"]
# PID 1 is serving.graceful: on SIGTERM it turns the health check unhealthy, lets requests in flight
# finish (at most ZH_EN_DRAIN_SECONDS, 30), then stops TorchServe, which ignores SIGTERM as PID 1.
# Give `docker stop` time for that: docker stop -t 45 (or docker run --stop-timeout 45).
ENV ZH_EN_DRAIN_SECONDS=30
# The drain marker goes here (serving.graceful), not to /tmp: the service's own directory.
ENV ZH_EN_STATE_DIR=/srv/zh_en/state
ENTRYPOINT [".venv/bin/python", "-m", "serving.graceful", "--"]
CMD [".venv/bin/torchserve", "--start", "--foreground", "--ncs", "--model-store", "model_store", \
     "--ts-config", "config/config.properties", "--models", "zh_en_int8.mar"]
