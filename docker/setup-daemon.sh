#!/usr/bin/env bash
# Bring up a Docker daemon and the offline base image that sandbox Dockerfiles build FROM.
#
# Idempotent: every step is skipped when its result is already there, so CI and developers can run
# it before every test run. Machines of this kind have no systemd and no container registry, and
# private address ranges are off limits, hence: dockerd started by hand with no bridge and no
# iptables, and the base image built from Debian's apt mirror with debootstrap + `docker import`.
#
# Environment:
#   HARNESSRL_BASE_IMAGE   tag of the base image (default debian:bookworm-slim, what FROM lines use)
#   HARNESSRL_DOCKERD_LOG  dockerd's log file (default /var/log/harnessrl-dockerd.log)
set -euo pipefail

BASE_IMAGE="${HARNESSRL_BASE_IMAGE:-debian:bookworm-slim}"
DOCKERD_LOG="${HARNESSRL_DOCKERD_LOG:-/var/log/harnessrl-dockerd.log}"
SUITE=bookworm

log() { echo "setup-daemon: $*" >&2; }

install_packages() {
    local need=()
    command -v dockerd >/dev/null || need+=(docker.io)
    command -v debootstrap >/dev/null || need+=(debootstrap)
    [ ${#need[@]} -eq 0 ] && return 0
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${need[@]}"
}

# The first Debian (non-security) mirror in apt's sources, one-line or deb822 format.
apt_mirror() {
    local url
    url=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
          | awk '$1 == "deb" && $0 ~ /debian/ && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}')
    if [ -z "$url" ]; then
        url=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
              | awk '/^URIs:/ && /debian/ && !/security/ {print $2; exit}')
    fi
    echo "${url:-http://deb.debian.org/debian}"
}

engine_up() { docker info >/dev/null 2>&1; }

# A pid file whose process is gone (or a zombie) is left by a dockerd that was killed; dockerd
# refuses to start while it exists.
remove_stale_pidfile() {
    local file=$1 pid state
    [ -f "$file" ] || return 0
    pid=$(cat "$file" 2>/dev/null || true)
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    if [ -z "$pid" ] || [ -z "$state" ] || [ "$state" = Z ]; then
        log "removing stale $file (pid ${pid:-none} is gone)"
        rm -f "$file"
    fi
}

start_dockerd() {
    if engine_up; then log "engine already running"; return 0; fi
    remove_stale_pidfile /var/run/docker.pid
    remove_stale_pidfile /var/run/docker/containerd/containerd.pid
    log "starting dockerd (log: $DOCKERD_LOG)"
    # No bridge and no iptables: sandboxes use --network none plus a bind-mounted unix socket.
    # setsid + nohup: dockerd outlives this script (and the shell that ran it).
    setsid nohup dockerd --bridge=none --iptables=false --ip6tables=false \
        >>"$DOCKERD_LOG" 2>&1 </dev/null &
    local pid=$!
    for _ in $(seq 1 120); do
        engine_up && { log "engine ready"; return 0; }
        kill -0 "$pid" 2>/dev/null || pgrep -x dockerd >/dev/null || break  # it exited: stop waiting
        sleep 0.5
    done
    log "dockerd is not answering; last lines of $DOCKERD_LOG:"
    tail -n 20 "$DOCKERD_LOG" >&2 || true
    return 1
}

build_base_image() {
    if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        log "base image $BASE_IMAGE already present"; return 0
    fi
    local mirror rootfs
    mirror=$(apt_mirror)
    rootfs=$(mktemp -d /tmp/harnessrl-rootfs.XXXXXX)
    trap 'rm -rf "$rootfs"' RETURN
    log "debootstrap $SUITE from $mirror (about a minute)"
    debootstrap --variant=minbase --include=python3 "$SUITE" "$rootfs" "$mirror" >/dev/null
    # Smaller image and no stale package lists: images that need apt run `apt-get update` first.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import - "$BASE_IMAGE" >/dev/null
    log "imported $BASE_IMAGE"
}

install_packages
start_dockerd
build_base_image
