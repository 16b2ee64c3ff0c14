#!/bin/sh
# The soak benchmark (issue 32); see bench/soak.py. Default: 200 instances, 30 minutes, release
# build. Installs the chart library when missing.
set -e
if ! python3 -c 'import matplotlib' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check matplotlib 2>/dev/null \
        || DEBIAN_FRONTEND=noninteractive apt-get install -o DPkg::Lock::Timeout=600 -y -qq python3-matplotlib >/dev/null
fi
exec python3 "$(dirname "$0")/soak.py" "$@"
