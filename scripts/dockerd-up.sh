#!/usr/bin/env bash
# Makes sure a Docker Engine answers for the pod tests and benchmarks, and that the busybox test
# image exists. Starts dockerd when none answers (hosts without systemd, CI containers), with its
# own log file. Safe to run repeatedly and concurrently.
#
#   scripts/dockerd-up.sh [SOCKET]        default /var/run/docker.sock
#
# Flags chosen for hosts like CI runners (cgroup v1 or v2, no systemd, maybe inside a container):
#   --iptables=false       tests only use loopback; some hosts have no usable iptables
#   --storage-driver=vfs   works on any backing filesystem (overlay2 fails on overlayfs roots);
#                          the busybox image is a few MB, so copying it per container is cheap
#   --live-restore         containers outlive a dockerd restart (the Lost/recovered behaviour)
# Override with DOCKERD_FLAGS. The log goes to DOCKERD_LOG (default /var/log/steward-dockerd.log).
set -euo pipefail
cd "$(dirname "$0")/.."

socket=${1:-/var/run/docker.sock}
image=${STEWARD_TEST_IMAGE:-steward-busybox:test}
log=${DOCKERD_LOG:-/var/log/steward-dockerd.log}
flags=${DOCKERD_FLAGS:---iptables=false --storage-driver=vfs --live-restore}
docker_cli() { docker -H "unix://$socket" "$@"; }

exec 9>"/tmp/steward-dockerd-up.lock"
flock 9

if ! docker_cli version >/dev/null 2>&1; then
    command -v dockerd >/dev/null || { echo "dockerd-up: dockerd is not installed (scripts/install-deps.sh)" >&2; exit 1; }
    echo "dockerd-up: starting dockerd on $socket (log: $log)" >&2
    # A stale pidfile from a killed dockerd blocks the start.
    if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
        rm -f /var/run/docker.pid
    fi
    # shellcheck disable=SC2086 # flags are words
    setsid dockerd --host "unix://$socket" $flags >>"$log" 2>&1 </dev/null 9>&- &
    for _ in $(seq 1 300); do
        docker_cli version >/dev/null 2>&1 && break
        sleep 0.1
    done
    docker_cli version >/dev/null 2>&1 || { echo "dockerd-up: dockerd did not answer; see $log" >&2; tail -20 "$log" >&2; exit 1; }
fi

if ! docker_cli image inspect "$image" >/dev/null 2>&1; then
    bash scripts/busybox-image.sh "$socket" "$image"
fi
