#!/usr/bin/env bash
# Installs what is missing, and nothing else. Safe to run repeatedly.
# A fresh machine has only the Rust toolchain: every other tool is installed here.
#
#   scripts/install-deps.sh          what the test suite needs (scripts/test.sh), the demo's too
#   scripts/install-deps.sh --demo   only what the demo needs (scripts/demo.sh), without apt's
#                                    recommended packages and with apt's output in a log file
#                                    (APT_LOG, default /var/log/steward-demo/install.log)
#   scripts/install-deps.sh --fleet  only what the fleet demo needs (scripts/fleet-demo.sh), as
#                                    --demo does
set -euo pipefail

demo=false
fleet=false
case "${1:-}" in
    --demo) demo=true ;;
    --fleet) demo=true fleet=true ;;
    "") ;;
    *) echo "usage: $0 [--demo | --fleet]" >&2; exit 2 ;;
esac

missing=()
need() { # need COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 || missing+=("$2")
}
need_package() { # need_package PACKAGE: installed (not only known to dpkg)
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q ' installed$' || missing+=("$1")
}

# Building: the etcd client (steward-sched's shared store) compiles etcd's protobuf definitions.
need protoc protobuf-compiler
[ -f /usr/include/google/protobuf/descriptor.proto ] || missing+=(libprotobuf-dev)

# The demo: the example units (units/) and the example pod.
need perl perl-base             # the example gamesvc workload (units/packages/gamesvc)
need timeout coreutils
need setsid util-linux          # stewardd in a session of its own
need flock util-linux           # scripts/dockerd-up.sh
if $fleet; then
    need ip iproute2                # the fleet's hosts: network namespaces on a bridge
    need nsenter util-linux         # a daemon in its namespace, keeping the host's mounts (cgroups)
    need etcd etcd-server           # the schedulers' shared store
    need python3 python3            # the demo reads the schedulers' JSON
else
    need dockerd docker.io          # pods run on a real Docker Engine (scripts/dockerd-up.sh starts it)
    need docker docker.io
    need_package busybox-static     # the pod's image is built from it (scripts/busybox-image.sh)
fi

if ! $demo; then
    need nginx nginx-light          # real forking daemons in the supervisor tests
    need redis-server redis-server
    need haproxy haproxy            # tests/real_daemons.rs: -D -p, as its own user
    need useradd passwd             # tests create users
    need ip iproute2                # tests/sched_cluster.rs: hosts as network namespaces
    need nsenter util-linux         # runs a daemon in a namespace, keeping its mounts (cgroups)
    need script bsdutils            # tests/demo_ctrl_c.rs: the demo in a pseudo-terminal
    need mkfs.ext4 e2fsprogs        # tests/pod_volumes.rs: a kept volume's limit is a filesystem image
    need losetup mount
    need prometheus prometheus      # tests/hook_providers.rs: a real Prometheus on 127.0.0.1
    need etcd etcd-server           # tests/sched_etcd.rs: steward-sched's shared store
    need chromium chromium          # tests/console.rs: the web console in a real headless browser
    need chromedriver chromium-driver #   driven over WebDriver
    [ -x /usr/sbin/nft ] || missing+=(nftables) # tests/sched_endpoints.rs: node ports in the kernel
    [ -x /usr/bin/docker-registry ] || missing+=(docker-registry) # tests/image_pulls.rs: a registry on 127.0.0.1
    [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins) # tests/cni.rs: bridge + host-local
    # tests/sched_cluster.rs runs `python3 -m http.server` as a workload, on the daemon's PATH.
    [ -x /usr/bin/python3 ] || missing+=(python3)
    # The package test (scripts/test-package.sh): building, linting, inspecting and installing.
    need strip binutils
    need dpkg-shlibdeps dpkg-dev    # cargo-deb's $auto dependencies
    need lintian lintian
    need rpm rpm                    # Debian's rpm: rpm -qlp / -qp --scripts
    need man man-db
    need curl curl
    need_package groff
fi

[ ${#missing[@]} -gt 0 ] || exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing ${missing[*]}; run as root or install them" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Packages like nginx, redis and docker.io start their system service on install; the tests and
# the demo run their own copies, so keep the system ones from starting (Debian's policy-rc.d
# convention).
policy=/usr/sbin/policy-rc.d
own_policy=false
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && own_policy=true
fi
if $demo; then
    log=${APT_LOG:-/var/log/steward-demo/install.log}
    mkdir -p "$(dirname "$log")"
    echo "== installing what the demo needs: ${missing[*]} (apt's output: $log)" >&2
    {
        apt-get update -qq \
            && apt-get install -o DPkg::Lock::Timeout=600 --no-install-recommends -y -qq "${missing[@]}"
    } >"$log" 2>&1 || status=$?
    if [ -n "${status:-}" ]; then
        echo "install-deps: apt-get failed (exit $status); the last lines of $log:" >&2
        tail -n 20 "$log" | sed 's/^/   /' >&2
    fi
else
    echo "install-deps: installing ${missing[*]}" >&2
    apt-get update -qq && apt-get install -o DPkg::Lock::Timeout=600 -y -qq "${missing[@]}" || status=$?
fi
if $own_policy; then rm -f "$policy"; fi
exit "${status:-0}"
