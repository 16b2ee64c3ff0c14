#!/usr/bin/env bash
# Installs what the test suite and the demo need, only when missing. Safe to run repeatedly.
# A fresh machine has only the Rust toolchain: every other tool is installed here.
set -euo pipefail

missing=()
need() { # need COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 || missing+=("$2")
}

need perl perl-base        # the example gamesvc workload (units/packages/gamesvc)
need timeout coreutils
need setsid util-linux
need nginx nginx-light          # real forking daemons in the supervisor tests
need redis-server redis-server
need haproxy haproxy            # tests/real_daemons.rs: -D -p, as its own user
need useradd passwd             # tests create users
need ip iproute2                 # tests/sched_cluster.rs: hosts as network namespaces
need nsenter util-linux          # runs a daemon in a namespace, keeping its mounts (cgroups)
# tests/sched_cluster.rs runs `python3 -m http.server` as a workload, on the daemon's PATH.
[ -x /usr/bin/python3 ] || missing+=(python3)
# The package test (scripts/test-package.sh): building, linting, inspecting and installing.
need strip binutils
need dpkg-shlibdeps dpkg-dev    # cargo-deb's $auto dependencies
need lintian lintian
need rpm rpm                    # Debian's rpm: rpm -qlp / -qp --scripts
need man man-db
need curl curl
dpkg-query -W -f='${Status}' groff 2>/dev/null | grep -q ' installed$' || missing+=(groff)
need dockerd docker.io          # pods run on a real Docker Engine (scripts/dockerd-up.sh starts it)
need docker docker.io
need flock util-linux
dpkg -s busybox-static >/dev/null 2>&1 \
    || missing+=(busybox-static) # the pod tests' image is built from it (scripts/busybox-image.sh)

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: missing ${missing[*]}; run as root or install them" >&2
        exit 1
    fi
    echo "install-deps: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    # Packages like nginx and redis start their system service on install; the tests run their
    # own copies, so keep the system ones from starting (Debian's policy-rc.d convention).
    policy=/usr/sbin/policy-rc.d
    own_policy=false
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && own_policy=true
    fi
    apt-get update -qq
    apt-get install -o DPkg::Lock::Timeout=600 -y -qq "${missing[@]}" || status=$?
    if $own_policy; then rm -f "$policy"; fi
    exit "${status:-0}"
fi
