# zh_en on TorchServe for a CPU host. Its build step is the README's
# `make archives` and its CMD the README's torchserve command; hadolint lints it in `make test`.
#   docker build -t zh-en-torchserve .                       # real model from the hub
#   docker build --build-arg MODEL=synthetic -t zh-en-torchserve:standin .
#   docker run -d -p 8080:8080 --name zh_en zh-en-torchserve
FROM python:3.11-slim

# Debian's own openjdk-17 security updates are wanted, so the version is not pinned.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless make \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin serve
WORKDIR /srv/zh_en
COPY --chown=serve:serve . .
USER 10001

ARG MODEL=Helsinki-NLP/opus-mt-zh-en
ARG STRICT=0
# make archives creates .venv first (pinned torch 2.13.0 CPU build), then builds both .mar files.
RUN make archives MODEL=${MODEL} STRICT=${STRICT}

# Only inference leaves the container; management (8081) and metrics (8082) stay on its loopback:
# use `docker exec` for swaps and scraping.
EXPOSE 8080
# /ping needs the inference key from key_file.json (token authorization is on).
HEALTHCHECK --interval=30s --timeout=5s --start-period=180s --retries=3 \
  CMD [".venv/bin/python", "-m", "serving.health", "--key-file", "key_file.json"]
CMD [".venv/bin/torchserve", "--start", "--foreground", "--ncs", "--model-store", "model_store", \
     "--ts-config", "config/config.properties", "--models", "zh_en_int8.mar"]
