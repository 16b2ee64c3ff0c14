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

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: missing ${missing[*]}; run as root or install them" >&2
        exit 1
    fi
    echo "install-deps: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}"
fi
