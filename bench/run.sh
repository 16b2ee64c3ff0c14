#!/bin/sh
# One command for the side-by-side benchmark; see bench/run.py (--quick for a smoke run).
# Installs the peer (supervisord) and the chart library when missing.
set -e
if ! command -v supervisord >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -o DPkg::Lock::Timeout=600 -y -qq supervisor >/dev/null
fi
# s6 and runit, the peers that respawn at the floor (bench/run.py skips one that is missing).
for tool in s6-svscan:s6 runsvdir:runit; do
    command -v "${tool%%:*}" >/dev/null 2>&1 \
        || DEBIAN_FRONTEND=noninteractive apt-get install -o DPkg::Lock::Timeout=600 -y -qq "${tool##*:}" >/dev/null || true
done
if ! python3 -c 'import matplotlib' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check matplotlib 2>/dev/null \
        || DEBIAN_FRONTEND=noninteractive apt-get install -o DPkg::Lock::Timeout=600 -y -qq python3-matplotlib >/dev/null
fi
exec python3 "$(dirname "$0")/run.py" "$@"
