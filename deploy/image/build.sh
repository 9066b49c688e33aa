#!/usr/bin/env bash
# Builds the project's image with podman on a host with no Docker engine and no reachable registry
# (deploy/image/base-image.sh provides podman and the python:3.11-slim base).
#
#   deploy/image/build.sh [SRC]                    # the hub model at its pinned commit: zh-en-torchserve
#   MODEL=/path/to/model_dir deploy/image/build.sh   # a local copy of the real model: zh-en-torchserve
#   MODEL=synthetic deploy/image/build.sh          # the stand-in (random weights): zh-en-torchserve:standin
#   deploy/image/build.sh --plan                   # print what would be built (archive/image_plan.py), build nothing
# SRC is the build context (a checkout with the Dockerfile). Without it, HEAD of the repository this
# script lives in is cloned into a temporary directory: a working tree may hold uncommitted edits
# and a multi-GB .venv/build that do not belong in the image.
# Environment: MODEL (default Helsinki-NLP/opus-mt-zh-en, at archive/hub.py's DEFAULT_REVISION; with
# no route to the hub the build stops and names the two other choices), IMAGE (the tag; a stand-in's
# must contain "standin"), BUILD_NETWORK (podman build --network; the default bridge network reaches
# PyPI and the Debian mirrors here, so it is not needed). The archives are always built with
# STRICT=1: an image never falls back to the stand-in.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BASE=docker.io/library/python:3.11-slim

case ${1:-} in
  -h | --help) sed -n '5,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
esac

# The decision (tag, labels, the model's source, or a refusal) is archive/image_plan.py's; it sets
# IMAGE, BUILD_MODEL, BUILD_STRICT, LABELS and MODEL_VOLUMES, or says why not and what to pass.
plan=$(cd "$here/../.." && MODEL=${MODEL:-} IMAGE=${IMAGE:-} python3 -m archive.image_plan) || exit 2
eval "$plan"
if [[ ${1:-} == --plan ]]; then
  printf '%s\n' "$plan"
  exit 0
fi

log() { printf '[build %s] %s\n' "$(date +%T)" "$*" >&2; }
start=$(date +%s)

work=$(mktemp -d /var/tmp/zh-en-build.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [[ $# -gt 0 ]]; then
  src=$(cd "$1" && pwd)
else
  repo=$(git -C "$here" rev-parse --show-toplevel)
  log "cloning HEAD of $repo ($(git -C "$repo" log -1 --format='%h %s'))"
  git clone -q "$repo" "$work/src"
  src=$work/src
fi
[[ -f $src/Dockerfile ]] || { echo "no Dockerfile in $src" >&2; exit 1; }
LABELS+=("--label=org.opencontainers.image.revision=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)")

# The base is built locally (FROM python:3.11-slim cannot be pulled here); base-image.sh also
# installs and configures podman where missing.
if ! command -v podman >/dev/null 2>&1 || ! podman image exists "$BASE"; then
  log "building the base image first"
  "$here/base-image.sh"
fi

# pip in the build container must see what pip sees on this host: the CA bundle of the
# TLS-intercepting proxy, the local wheels (/opt/wheels holds torch 2.13.0+cpu: the index's torch
# is a multi-GB CUDA build) and indexes, and the constraints file. On this host that configuration is
# spread over /etc/xdg/pip/pip.conf, /etc/pip.conf, the user's ~/.config/pip/pip.conf (which the
# container's user `serve` would not read) and PIP_* variables (which RUN steps do not inherit),
# so it is merged, in pip's own order, into one file mounted as the container's /etc/pip.conf.
# no-cache-dir keeps pip's download cache out of the image's layers.
# Everything is mounted for the build only (podman build --volume): nothing lands in the image.
python3 - "$work/pip.conf" <<'EOF'
import configparser, os, sys
conf = configparser.RawConfigParser()
conf.read(["/etc/xdg/pip/pip.conf", "/etc/pip.conf", os.path.expanduser("~/.config/pip/pip.conf")])
if not conf.has_section("global"):
    conf.add_section("global")
for name, value in sorted(os.environ.items()):
    if name.startswith("PIP_") and name not in ("PIP_CONFIG_FILE", "PIP_NO_CACHE_DIR"):
        conf.set("global", name[4:].lower().replace("_", "-"), value)
conf.set("global", "no-cache-dir", "true")
with open(sys.argv[1], "w") as out:
    out.write("# merged by deploy/image/build.sh for the image build only\n")
    conf.write(out)
EOF
chmod 644 "$work/pip.conf"
log "pip configuration for the build:"
sed 's/^/    /' "$work/pip.conf" >&2

volumes=(--volume "$work/pip.conf:/etc/pip.conf:ro" "${MODEL_VOLUMES[@]}")
for path in /etc/xdg/pip /etc/ssl/certs/ca-certificates.crt /opt/wheels /opt/pypi /opt/pypi-more; do
  if [[ -e $path ]]; then
    volumes+=(--volume "$path:$path:ro")
  else
    log "not on this host, not mounted: $path"
  fi
done

# --format docker: the OCI image format has no HEALTHCHECK, podman would drop it.
# --pull=never: FROM must resolve to the local base; no registry is reachable.
network=()
[[ -z ${BUILD_NETWORK:-} ]] || network=(--network "$BUILD_NETWORK")
log "podman build $src -> $IMAGE (MODEL=$BUILD_MODEL STRICT=$BUILD_STRICT)"
podman build \
  --format docker \
  --pull=never \
  --layers \
  "${network[@]}" \
  "${volumes[@]}" \
  "${LABELS[@]}" \
  --build-arg "MODEL=$BUILD_MODEL" \
  --build-arg "STRICT=$BUILD_STRICT" \
  --tag "$IMAGE" \
  --file "$src/Dockerfile" \
  "$src"

elapsed=$(($(date +%s) - start))
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
log "built $IMAGE in $((elapsed / 60))m$((elapsed % 60))s: $(numfmt --to=iec "$size") ($size bytes)"
log "run: podman run -d --name zh_en -p 127.0.0.1:8080:8080 $IMAGE"
