#!/usr/bin/env bash
# Builds the project's image with podman on a host with no Docker engine and no reachable registry
# (deploy/image/base-image.sh provides podman and the python:3.11-slim base).
#
#   deploy/image/build.sh [SRC]            # MODEL=synthetic (default): zh-en-torchserve:standin
#   MODEL=Helsinki-NLP/opus-mt-zh-en deploy/image/build.sh [SRC]   # zh-en-torchserve (needs the hub)
#
# SRC is the build context (a checkout with the Dockerfile). Without it, HEAD of the repository this
# script lives in is cloned into a temporary directory: a working tree may hold uncommitted edits
# and a multi-GB .venv/build that do not belong in the image.
# Environment: MODEL (default synthetic: random weights the build creates, no hub access), STRICT
# (default 0), IMAGE (the tag; default as above), BUILD_NETWORK (podman build --network; the default
# bridge network reaches PyPI and the Debian mirrors here, so it is not needed).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BASE=docker.io/library/python:3.11-slim
MODEL=${MODEL:-synthetic}
STRICT=${STRICT:-0}
if [[ $MODEL == synthetic ]]; then
  IMAGE=${IMAGE:-zh-en-torchserve:standin}
else
  IMAGE=${IMAGE:-zh-en-torchserve}
fi

case ${1:-} in
  -h | --help) sed -n '5,14s/^# \{0,1\}//p' "$0"; exit 0 ;;
esac

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

volumes=(--volume "$work/pip.conf:/etc/pip.conf:ro")
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
log "podman build $src -> $IMAGE (MODEL=$MODEL STRICT=$STRICT)"
podman build \
  --format docker \
  --pull=never \
  --layers \
  "${network[@]}" \
  "${volumes[@]}" \
  --build-arg "MODEL=$MODEL" \
  --build-arg "STRICT=$STRICT" \
  --tag "$IMAGE" \
  --file "$src/Dockerfile" \
  "$src"

elapsed=$(($(date +%s) - start))
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
log "built $IMAGE in $((elapsed / 60))m$((elapsed % 60))s: $(numfmt --to=iec "$size") ($size bytes)"
log "run: podman run -d --name zh_en -p 127.0.0.1:8080:8080 $IMAGE"
