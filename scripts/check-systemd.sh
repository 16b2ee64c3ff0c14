#!/usr/bin/env bash
# Checks the systemd integration files with systemd's own tools, without touching the host:
#   systemd/stewardd.service  systemd-analyze verify (on a copy whose ExecStart is the built binary)
#   systemd/steward.sysusers  systemd-sysusers into a scratch root
#   systemd/steward.tmpfiles  systemd-tmpfiles --create into that scratch root, then the modes
#                             and owners it made are checked
# Any warning or error fails the check. Idempotent: everything happens in a temp dir.
#
# Usage: scripts/check-systemd.sh [STEWARDD_BINARY]   (default: target/debug/stewardd)
# The tools come from Debian's `systemd` package, installed here if missing (that does not make
# systemd PID 1; only its offline tools are used).
set -euo pipefail
cd "$(dirname "$0")/.."

binary="${1:-target/debug/stewardd}"
unit=systemd/stewardd.service
sysusers=systemd/steward.sysusers
tmpfiles=systemd/steward.tmpfiles

fail() {
    echo "check-systemd: $*" >&2
    exit 1
}

if ! command -v systemd-analyze >/dev/null; then
    echo "check-systemd: installing systemd's tools (apt-get install systemd)"
    if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -o DPkg::Lock::Timeout=600 -y -qq --no-install-recommends systemd >/dev/null
fi
for tool in systemd-analyze systemd-tmpfiles systemd-sysusers; do
    command -v "$tool" >/dev/null || fail "$tool is not available"
done

[ -x "$binary" ] || fail "$binary is not an executable (run cargo build first, or pass the binary's path)"
binary="$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")"
for f in "$unit" "$sysusers" "$tmpfiles"; do
    [ -f "$f" ] || fail "$f is missing"
done

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# Runs a command; fails if it exits non-zero or prints anything (systemd reports most problems,
# such as unknown keys, as warnings with exit status 0). Lines matching $2 (ERE) are expected.
quiet() {
    local what="$1" allowed="$2" out rc=0
    shift 2
    out="$("$@" 2>&1)" || rc=$?
    if [ -n "$allowed" ]; then
        out="$(printf '%s\n' "$out" | grep -Ev "$allowed" || true)"
    fi
    if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
        printf '%s\n' "$out" >&2
        fail "$what: warnings or errors above (exit status $rc)"
    fi
}

# --- the unit ---------------------------------------------------------------------------------
# verify insists that ExecStart's binary exists, so it checks a copy that starts the binary just
# built; the shipped path must be /usr/bin/stewardd, where the packages install it.
grep -qx 'ExecStart=/usr/bin/stewardd' "$unit" || fail "$unit: ExecStart must be exactly /usr/bin/stewardd"
sed "s|^ExecStart=/usr/bin/stewardd\$|ExecStart=$binary|" "$unit" >"$scratch/stewardd.service"
# Documentation=man:stewardd(8) is checked when the page is in the tree (man/), else skipped.
man_page=""
for candidate in man/stewardd.8 man/man8/stewardd.8; do
    [ -f "$candidate" ] && man_page="$candidate" && break
done
if [ -n "$man_page" ]; then
    mkdir -p "$scratch/man/man8"
    cp "$man_page" "$scratch/man/man8/stewardd.8"
    quiet "systemd-analyze verify $unit" "" env MANPATH="$scratch/man" systemd-analyze verify "$scratch/stewardd.service"
else
    quiet "systemd-analyze verify $unit" "" systemd-analyze verify --man=no "$scratch/stewardd.service"
fi

# --- sysusers and tmpfiles, applied to a scratch root -----------------------------------------
# With --root the tools read and write only below it (their own config is read from stdin).
root="$scratch/root"
mkdir -p "$root/etc"
quiet "systemd-sysusers $sysusers" "^Creating group 'steward' with GID [0-9]+\.$" \
    systemd-sysusers --root="$root" - <"$sysusers"
gid="$(awk -F: '$1 == "steward" { print $3 }' "$root/etc/group")"
[ -n "$gid" ] || fail "$sysusers did not create group steward"
if [ "$(id -u)" -ne 0 ]; then
    # tmpfiles sets owners (root, group steward), which only root may do, even in a scratch root.
    echo "check-systemd: $unit and $sysusers are fine; SKIP $tmpfiles (run as root to check it)"
    exit 0
fi
# Twice: the second run must find nothing to do and complain about nothing.
for _ in 1 2; do
    quiet "systemd-tmpfiles $tmpfiles" "" systemd-tmpfiles --root="$root" --create - <"$tmpfiles"
done

expect() {
    local path="$1" want="$2" got
    [ -d "$root$path" ] || fail "$tmpfiles did not create $path"
    got="$(stat -c '%a %u %g' "$root$path")"
    [ "$got" = "$want" ] || fail "$path is '$got' (mode uid gid), expected '$want'"
}
expect /run/steward "755 0 $gid"
expect /var/lib/steward "755 0 0"
expect /var/lib/steward/state "700 0 0"
expect /var/lib/steward/work "755 0 0"
expect /var/lib/steward/run "755 0 0"

echo "check-systemd: $unit, $sysusers and $tmpfiles are fine ($(systemd-analyze --version | head -n1))"
