#!/usr/bin/env bash
# make fresh-machine: the README's first command on a machine that has nothing of ours.
#
#   tests/fresh_machine/run.sh               # root, then a non-root user: make serve, one translation, make stop
#   tests/fresh_machine/run.sh --make-test   # then `make test` in the root as well (about 13 minutes more)
#   tests/fresh_machine/run.sh --keep        # leave the root in $FRESH_MACHINE_ROOT (mounts undone)
#
# A minimal Debian 12 root (debootstrap --variant=minbase) gets only what a new user would install
# before reading our README: make, python3, python3-venv, git, curl and ca-certificates. No compiler,
# no Java, no nginx. The repository at HEAD is cloned in and `make serve` runs in it unchanged, as root
# (which installs Java 17 and gcc on the way), then as a non-root user with the prerequisites the README
# names installed beforehand (Java 17, gcc). Each run sends the README's one request and stops the server.
#
# What the root shares with this host is the network this workplace gives every machine, never one of
# our prerequisites: the proxy's CA certificates, pip's configuration and the local wheel directories
# it names (read-only), DNS. Needs root (debootstrap, chroot, mounts) and the Debian mirror over HTTP.
# The root is $FRESH_MACHINE_ROOT (default /var/tmp/zh-en-fresh-machine/root, outside the checkout, so
# that no tool walking the repository meets a whole Debian); it is removed at the end.
# Times go to build/fresh-machine/times.tsv; each step's log to build/fresh-machine/*.log.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$repo/build/fresh-machine
root=${FRESH_MACHINE_ROOT:-/var/tmp/zh-en-fresh-machine/root}
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
# What a new Debian user has before our README: the README's own prerequisites come later.
BASE_PACKAGES=(make python3 python3-venv git curl ca-certificates)
# What the README says `make serve` needs and installs only as root (Makefile: java, cc).
README_PREREQUISITES=(openjdk-17-jre-headless gcc libc6-dev)
USER_NAME=newcomer
PORT=8080
# Host paths the root may see, read-only, when this host has them: pip's local wheels and indexes.
SHARED_DIRS=(/opt/wheels /opt/pypi /opt/pypi-more)

MAKE_TEST=0
KEEP=0
for arg in "$@"; do
  case $arg in
    --make-test) MAKE_TEST=1 ;;
    --keep) KEEP=1 ;;
    -h | --help) sed -n '4,6s/^# \{0,3\}//p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { printf '[fresh-machine %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

[[ $EUID -eq 0 ]] || die "run as root: it bootstraps a Debian root, mounts into it and chroots"
command -v debootstrap >/dev/null || {
  log "installing debootstrap"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}
# Both servers listen on the README's port; a server already there would answer instead of ours.
if (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null; then
  die "something already listens on 127.0.0.1:$PORT (make stop, or stop that server first)"
fi

# Processes whose root is ours (TorchServe's JVM, its workers), then our mounts, deepest first.
# rm -rf runs only once no mount is left under the root: a bind mount still there would let it
# reach the host's files.
mounts_under_root() { awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r; }
release_root() {
  local pid
  for pid in /proc/[0-9]*; do
    if [[ $(readlink "$pid/root" 2>/dev/null) == "$root" ]]; then kill -9 "${pid#/proc/}" 2>/dev/null || true; fi
  done
  local mount
  for _ in 1 2 3; do
    while read -r mount; do umount "$mount" 2>/dev/null || umount -l "$mount" 2>/dev/null || true; done < <(mounts_under_root)
    [[ -z $(mounts_under_root) ]] && return 0
    sleep 1
  done
  log "still mounted under $root: $(mounts_under_root | tr '\n' ' ')"
  return 1
}
cleanup() {
  local status=$?
  [[ -d $root ]] || exit "$status"
  if release_root && ((KEEP == 0)); then
    rm -rf --one-file-system "$root"
  fi
  exit "$status"
}
trap cleanup EXIT

mkdir -p "$out"
: >"$out/times.tsv"
started=$(date +%s)
timed() {
  local name=$1 t0 status=0
  shift
  t0=$(date +%s)
  "$@" >"$out/$name.log" 2>&1 || status=$?
  printf '%s\t%d\n' "$name" $(($(date +%s) - t0)) >>"$out/times.tsv"
  if ((status != 0)); then
    tail -n 40 "$out/$name.log" >&2
    die "$name exited with $status (whole log: $out/$name.log)"
  fi
  log "$name: $(($(date +%s) - t0)) s"
}

# Commands in the root see a clean environment: no variable of this shell's but pip's and the CA
# bundle's settings, which are the workplace's network, not ours.
in_root() {
  local passed=() name
  for name in $(compgen -e); do
    [[ $name == PIP_* || $name == SSL_CERT_* || $name == REQUESTS_CA_BUNDLE || $name == CURL_CA_BUNDLE ]] &&
      passed+=("$name=${!name}")
  done
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 TERM=dumb "${passed[@]}" "$@"
}
as_user() { in_root runuser -u "$USER_NAME" -- env HOME=/home/$USER_NAME "$@"; }

bootstrap() {
  [[ -z $(mounts_under_root) ]] || release_root
  rm -rf --one-file-system "$root"
  mkdir -p "$(dirname "$root")"
  debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR"
}

share_the_network() {
  mount -t proc proc "$root/proc"
  mount -t sysfs sysfs "$root/sys"
  mount --bind /dev "$root/dev"
  mount --bind /dev/pts "$root/dev/pts"
  mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
  [[ -f /etc/pip.conf ]] && cp /etc/pip.conf "$root/etc/pip.conf"
  [[ -d /etc/xdg/pip ]] && mkdir -p "$root/etc/xdg" && cp -r /etc/xdg/pip "$root/etc/xdg/pip"
  local dir
  for dir in "${SHARED_DIRS[@]}"; do
    [[ -d $dir ]] || continue
    mkdir -p "$root$dir"
    mount --bind "$dir" "$root$dir"
    mount -o remount,bind,ro "$root$dir"
  done
}

base_packages() {
  in_root apt-get update -qq
  in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${BASE_PACKAGES[@]}"
}

# The checkout a user would make: HEAD of this repository, nothing built (no .venv, build/ or archives).
clone_into() { git clone --quiet --no-local "$repo" "$root$1"; }

# The README's "One request": the inference key from key_file.json, one sentence, a JSON answer.
one_request() {
  local dir=$1 answer
  answer=$(in_root bash -c "cd $dir && TOKEN=\$(python3 -c \"import json; print(json.load(open('key_file.json'))['inference']['key'])\") &&
    curl -sS --fail-with-body -H \"Authorization: Bearer \$TOKEN\" -H 'Content-Type: application/json' \
      http://127.0.0.1:$PORT/predictions/zh_en -d '{\"text\": \"汤姆不会同意的\"}'")
  printf '%s\n' "$answer"
  python3 -c 'import json, sys; answer = json.loads(sys.argv[1]); assert answer["translation"], answer; print("translation:", repr(answer["translation"]), "stand-in:", answer["standin"])' "$answer"
}

# make stop returns once TorchServe is signalled; the port closes when it has gone.
stopped() {
  local _
  for _ in $(seq 60); do
    (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null || return 0
    sleep 1
  done
  echo "127.0.0.1:$PORT still answers 60 s after make stop"
  return 1
}

log "bootstrapping Debian $SUITE (minbase) into $root"
timed bootstrap bootstrap
share_the_network
timed base-packages base_packages
for tool in cc gcc java nginx; do
  in_root bash -c "command -v $tool" >/dev/null && die "the fresh root already has $tool"
done

log "as root: make serve (installs Java 17 and gcc where missing), one request, make stop"
clone_into /root/zh_en
timed root-make-serve in_root bash -c 'cd /root/zh_en && make serve'
timed root-one-request one_request /root/zh_en
timed root-make-stop in_root bash -c 'cd /root/zh_en && make stop'
timed root-stopped stopped

log "as $USER_NAME, with the README's prerequisites installed first: make serve, one request, make stop"
timed user-prerequisites in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${README_PREREQUISITES[@]}"
in_root useradd --create-home --shell /bin/bash "$USER_NAME"
clone_into /home/$USER_NAME/zh_en
in_root chown -R "$USER_NAME:$USER_NAME" /home/$USER_NAME/zh_en
timed user-make-serve as_user bash -c 'cd ~/zh_en && make serve'
timed user-one-request one_request /home/$USER_NAME/zh_en
timed user-make-stop as_user bash -c 'cd ~/zh_en && make stop'
timed user-stopped stopped

if ((MAKE_TEST == 1)); then
  log "as root: make test (installs nginx and chromium on the way)"
  timed root-make-test in_root bash -c 'cd /root/zh_en && make test'
fi

log "passed in $(($(date +%s) - started)) s; times (s):"
awk -F '\t' '{ printf "  %-20s %6d\n", $1, $2 }' "$out/times.tsv" >&2
