#!/usr/bin/env bash
# Builds the base image the Dockerfile names (FROM python:3.11-slim) on a host with no Docker engine
# and no reachable image registry: podman runs the build, and the base image is bootstrapped from
# Debian bookworm with mmdebstrap, then imported under the tag `FROM python:3.11-slim` resolves to
# (docker.io/library/python:3.11-slim), so podman finds it locally and never tries to pull.
#
#   deploy/image/base-image.sh             # install/configure podman where missing, build the base if absent
#   deploy/image/base-image.sh --rebuild   # build and re-tag the base even if the tag exists
#
# Needs root (apt-get, /etc/containers, mmdebstrap's root mode) and the Debian mirrors over HTTP.
# The image differs from Docker Hub's python:3.11-slim: Python is Debian's python3.11 (in
# /usr/bin, `python3` but no `python`), not a source build in /usr/local. The Dockerfile needs only
# `python3 -m venv`, apt-get and useradd, which both provide.
set -euo pipefail

TAG=docker.io/library/python:3.11-slim
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
SECURITY_MIRROR=http://deb.debian.org/debian-security

usage() { sed -n '7,8s/^# \{0,3\}//p' "$0"; }

REBUILD=0
for arg in "$@"; do
  case $arg in
    --rebuild) REBUILD=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; usage >&2; exit 2 ;;
  esac
done

log() { printf '[base-image] %s\n' "$*" >&2; }

if [[ $EUID -ne 0 ]]; then
  echo "run as root: it installs packages, writes /etc/containers and bootstraps a rootfs" >&2
  exit 1
fi

# podman builds and runs the images; runc is its OCI runtime here (crun rejects this host's hybrid
# cgroup v1/v2 layout); mmdebstrap bootstraps the base rootfs. --no-install-recommends: buildah,
# slirp4netns, fuse-overlayfs, criu... are not needed for rootful podman on overlayfs.
install_host_tools() {
  local pkg missing=()
  for pkg in podman runc mmdebstrap; do
    # shellcheck disable=SC2016  # ${Status} is dpkg-query's field, not a shell variable
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if ((${#missing[@]} == 0)); then
    log "podman, runc and mmdebstrap are installed"
    return
  fi
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Sets `key = value` in [section] of a TOML file, replacing an existing `key = ...` line (the keys set
# here occur in one section only) or adding the key under its section header, or the section at the end.
toml_set() {
  local file=$1 section=$2 key=$3 value=$4 before
  touch "$file"
  before=$(cksum <"$file")
  if grep -Eq "^[[:space:]]*${key}[[:space:]]*=" "$file"; then
    sed -i -E "s|^[[:space:]]*${key}[[:space:]]*=.*|${key} = ${value}|" "$file"
  elif grep -Eq "^\[${section}\][[:space:]]*$" "$file"; then
    sed -i -E "/^\[${section}\][[:space:]]*$/a ${key} = ${value}" "$file"
  else
    printf '\n[%s]\n%s = %s\n' "$section" "$key" "$value" >>"$file"
  fi
  [[ $(cksum <"$file") == "$before" ]] || log "$file: [$section] $key = $value"
}

# default_ulimits = []: podman's default nofile/nproc ulimits fail to apply in this host's sandbox.
# runtime = "runc": crun (podman's first choice when installed) rejects the hybrid cgroups.
configure_podman() {
  local conf=/etc/containers/containers.conf
  mkdir -p /etc/containers
  toml_set "$conf" containers default_ulimits '[]'
  toml_set "$conf" engine runtime '"runc"'
  local runtime
  runtime=$(podman info --format '{{.Host.OCIRuntime.Name}}')
  [[ $runtime == runc ]] || { echo "podman uses $runtime, not runc: check $conf" >&2; exit 1; }
}

build_base() {
  if podman image exists "$TAG" && ((!REBUILD)); then
    log "$TAG exists (--rebuild to replace it)"
    return
  fi
  local work
  work=$(mktemp -d /var/tmp/base-image.XXXXXX)
  # shellcheck disable=SC2064  # expand $work now: it is local to this function
  trap "rm -rf '$work'" EXIT

  # Docker's Debian images ship this apt configuration (docker-clean): apt's package caches and
  # downloaded .debs are deleted after every apt run, so an `apt-get install` RUN step does not keep
  # ~120 MB of /var/cache/apt in its layer (the Dockerfile removes only /var/lib/apt/lists).
  cat >"$work/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT

  log "bootstrapping Debian $SUITE (minbase + python3.11, python3, python3-venv, ca-certificates)"
  # - minbase: Essential packages and apt, nothing of priority "important" (no systemd, no editors).
  # - merged-usr hook: /bin, /lib... as symlinks into /usr (as debootstrap and Docker's debian
  #   images do) plus the usr-is-merged package; otherwise apt satisfies init-system-helpers'
  #   "usrmerge | usr-is-merged" with usrmerge, which drags in perl (about 45 MB).
  # - python3 gives the `python3` command; python3-venv gives `python3 -m venv` with ensurepip,
  #   which the Makefile uses to create .venv; ca-certificates lets pip and apt verify TLS.
  # - the path-exclude options are the ones Debian's slim images use: no docs (but keep the
  #   copyright files), man pages, info, locales. They stay in /etc/dpkg/dpkg.cfg.d/99mmdebstrap,
  #   so packages the Dockerfile installs later (openjdk) are slimmed too.
  # - no translations of package descriptions in apt lists (Acquire::Languages, as in slim images).
  # - the three sources (bookworm, bookworm-updates, bookworm-security on deb.debian.org) are written
  #   to the image's /etc/apt/sources.list, so `apt-get update && apt-get install` works in a RUN step.
  # - the empty /usr/share/man/man[1-8] stay, as in Docker's slim images: with the man pages excluded
  #   they would be missing, and openjdk-17-jre-headless's postinst then fails ("update-alternatives:
  #   error creating symbolic link '/usr/share/man/man1/java.1.gz.dpkg-tmp'").
  # - docker-clean (above) goes to /etc/apt/apt.conf.d. With it in place mmdebstrap's own cleanup
  #   no longer finds apt's *.bin caches (about 70 MB), so a hook deletes them.
  # - mmdebstrap's cleanup removes the apt lists and cache and the logs; the hook empties the host's
  #   resolv.conf and hostname it copied in (podman mounts its own at run time).
  # shellcheck disable=SC2016  # "$1" in the hooks is the rootfs, expanded by mmdebstrap's sh -c
  mmdebstrap --variant=minbase --format=tar \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include=python3.11,python3,python3-venv,ca-certificates \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/groff/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --dpkgopt='path-exclude=/usr/share/linda/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --customize-hook='for n in 1 2 3 4 5 6 7 8; do mkdir -p "$1/usr/share/man/man$n"; done' \
    --customize-hook="install -m 644 '$work/docker-clean' \"\$1/etc/apt/apt.conf.d/docker-clean\"" \
    --customize-hook='rm -f "$1"/var/cache/apt/*.bin' \
    --customize-hook=': >"$1/etc/resolv.conf"; : >"$1/etc/hostname"' \
    "$SUITE" "$work/rootfs.tar" \
    "deb $MIRROR $SUITE main" \
    "deb $MIRROR $SUITE-updates main" \
    "deb $SECURITY_MIRROR $SUITE-security main"

  log "importing as $TAG"
  local old
  old=$(podman image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)
  # CMD and LANG as in the official image; PATH because an imported image has no environment.
  podman import --quiet \
    --change 'CMD ["python3"]' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --message "mmdebstrap $SUITE minbase + python3.11 (deploy/image/base-image.sh)" \
    "$work/rootfs.tar" "$TAG" >/dev/null
  rm -rf "$work"
  # The replaced base, now untagged; kept if images built on it still use it.
  [[ -z $old ]] || podman rmi "$old" >/dev/null 2>&1 || true
  trap - EXIT
}

install_host_tools
configure_podman
build_base
podman run --rm "$TAG" python3 -c 'import ssl, sys, venv; print("python", sys.version.split()[0], ssl.OPENSSL_VERSION)'
log "$TAG: $(podman image inspect --format '{{.Size}}' "$TAG" | numfmt --to=iec) ($(podman image inspect --format '{{.Size}}' "$TAG") bytes)"
