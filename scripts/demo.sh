#!/usr/bin/env bash
# The main job: build Steward, run stewardd in the foreground with its embedded default
# configuration (no file needed; /etc/steward/stewardd.toml is read if present), apply the example
# units in units/ (two process apps and, when a Docker Engine can run, a pod) and show their status.
# Ctrl-C ends the demo: it deletes the demo's instances, then stops the daemon.
# DEMO_ONCE=1 ends it right after showing the status (for scripted runs).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cargo build --release --quiet
bin=target/release

# The example units fetch their package from the default package repository
# (package_repository = file:///usr/share/steward/repository): put gamesvc's there.
repo=/usr/share/steward/repository/examples
mkdir -p "$repo"
tar czf "$repo/gamesvc-1.0.tar.gz" -C units/packages/gamesvc .
steward="$bin/steward"
unset STEWARD_CONFIG STEWARD_SOCKET

echo "== stewardd (embedded default configuration)"
"$bin/stewardd" &
daemon=$!
cleanup() {
    trap - INT TERM EXIT
    echo
    echo "== removing the demo's instances and stopping stewardd"
    $steward delete --all --timeout 15 || true
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
}
trap cleanup INT TERM EXIT

for _ in $(seq 1 200); do
    $steward ls >/dev/null 2>&1 && break
    sleep 0.05
done

# units/vault.toml reads a configmap and a secret: they must exist before it is applied.
echo "== steward configmap create demo/vault-config; steward secret create demo/vault-creds"
$steward configmap create demo/vault-config --from-literal greeting="hello from a configmap"
$steward secret create demo/vault-creds --from-literal password=change-me

units=(units/ticker.toml units/gamesvc.json units/vault.toml)
# The example pod needs a Docker Engine and its busybox image (made locally, nothing is pulled).
if bash scripts/dockerd-up.sh >/dev/null 2>&1; then
    units+=(units/webpod.json)
else
    echo "== no Docker Engine could be started: the example pod (units/webpod.json) is skipped"
fi

for unit in "${units[@]}"; do
    echo
    echo "== steward apply -f $unit --wait"
    $steward apply -f "$unit" --wait --timeout 20 || true
done

echo
echo "== steward ls"
$steward ls
echo
echo "== steward status demo/ticker/0"
$steward status demo/ticker/0
if [[ " ${units[*]} " == *" units/webpod.json "* ]]; then
    echo
    echo "== steward status demo/webpod/0"
    $steward status demo/webpod/0 || true
fi

if [ "${DEMO_ONCE:-0}" = 1 ]; then
    exit 0
fi
echo
echo "stewardd runs in the foreground; try \`target/release/steward events -f\` in another terminal."
echo "Ctrl-C ends the demo."
wait "$daemon"
