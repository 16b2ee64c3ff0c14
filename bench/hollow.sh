#!/usr/bin/env bash
# Issue 46 item 4: a fleet of hollow hosts on one machine. Starts N stewardd with
# runtime = "hollow" on 127.0.0.1 (remote listener on BASE_PORT+i), each with its own state,
# socket, TLS certificate (one CA, from `steward cert`) and token; writes a steward-sched cluster
# file for them; reports the time until all are ready and their total RSS. With INSTANCES=M,
# deploys one app of M instances across them through `steward-sched deploy` and reports the time
# until all run and the RSS then.
# Usage: bench/hollow.sh [N] (after cargo build --release). BASE_PORT=20000 INSTANCES=0
#   BIN=target/release KEEP=1 (leave the daemons running; the cluster file is printed)
#   HEARTBEAT_SECS=15 (the daemons' event-stream heartbeat).
set -euo pipefail
n=${1:-10}
root="$(cd "$(dirname "$0")/.." && pwd)"
bin=$(cd "${BIN:-$root/target/release}" && pwd)
base=${BASE_PORT:-20000}
instances=${INSTANCES:-0}
dir=$(mktemp -d /tmp/hollow.XXXX)
chmod 755 "$dir"
pids=()
cleanup() {
    set +e
    if [ -z "${KEEP:-}" ]; then
        for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
        rm -rf "$dir"
    fi
}
trap cleanup EXIT
ms() { date +%s%3N; }
# Total resident memory of the daemons, in KiB.
rss() { ps -o rss= -p "$(IFS=,; echo "${pids[*]}")" | awk '{s += $1} END {print s}'; }
# Their proportional share (shared pages, the binary's among them, split between them), in KiB.
pss() { for p in "${pids[@]}"; do cat "/proc/$p/smaps_rollup"; done | awk '/^Pss:/ {s += $2} END {print s}'; }
threads() { ps -o nlwp= -p "$(IFS=,; echo "${pids[*]}")" | awk '{s += $1} END {print s}'; }

t0=$(ms)
mkdir -p "$dir/tls"
for i in $(seq 1 "$n"); do
    h="$dir/h$i"
    mkdir -p "$h"
    "$bin/steward" cert --dir "$dir/tls" --name "h$i" --ip 127.0.0.1 >/dev/null
    printf 'hollow-token-%04d-0123456789abcdef\n' "$i" >"$h/tokens"
    chmod 600 "$h/tokens"
    cat >"$h/stewardd.toml" <<CONF
runtime = "hollow"
state_dir = "$h/state"
work_base_dir = "$h/work"
run_base_dir = "$h/run"
socket = "$h/stewardd.sock"
host_ip = "127.0.0.1"
[node]
hostname = "h$i"
[remote]
listen = "127.0.0.1:$((base + i))"
cert = "$dir/tls/h$i.pem"
key = "$dir/tls/h$i-key.pem"
tokens_file = "$h/tokens"
[events]
heartbeat_secs = ${HEARTBEAT_SECS:-15}
CONF
    printf '[[node]]\nname = "h%d"\naddress = "127.0.0.1:%d"\ntoken_file = "%s"\n' "$i" $((base + i)) "$h/tokens" \
        >>"$dir/nodes.toml"
done
printf 'state_dir = "sched"\nca = "tls/ca.pem"\ntoken_file = "h1/tokens"\n' | cat - "$dir/nodes.toml" >"$dir/cluster.toml"
echo "configured $n hollow hosts in $(($(ms) - t0)) ms ($dir)"

t0=$(ms)
for i in $(seq 1 "$n"); do
    STEWARD_LOG=warn,steward::daemon=info setsid "$bin/stewardd" --config "$dir/h$i/stewardd.toml" \
        </dev/null >"$dir/h$i/log" 2>&1 &
    pids+=($!)
    disown
done
# Ready: the remote listener is up (it comes after the store, the instances and the socket).
while [ "$(grep -l "remote API listening" "$dir"/h*/log 2>/dev/null | wc -l)" -lt "$n" ]; do
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "a stewardd died:" >&2; grep -h . "$dir"/h*/log | tail >&2; exit 1; }; done
    sleep 0.1
done
started=$(($(ms) - t0))
sleep 2 # settled
idle=$(rss) idle_pss=$(pss)
echo "started $n hollow stewardd in $started ms; RSS $((idle / 1024)) MiB in all, $((idle / n)) KiB each;" \
    "PSS $((idle_pss / 1024)) MiB in all; $(threads) threads"

if [ "$instances" -gt 0 ]; then
    cat >"$dir/app.json" <<SPEC
{"apiVersion": "v4", "kind": "process", "metadata": {"name": "hollow", "namespace": "bench"},
 "restartPolicy": {"policy": "Always"},
 "spec": {"instance": $instances, "template": {"spec": {"processes": [
   {"procName": "p", "startCmd": "exec sleep 1000", "startGracePeriod": 0,
    "workPath": "\${work_base_dir}/\${namespace}.\${processname}.\${instanceid}",
    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}}
SPEC
    t0=$(ms)
    (cd "$dir" && STEWARD_LOG=warn "$bin/steward-sched" --cluster cluster.toml deploy app.json >"$dir/deploy.out" 2>&1) ||
        { cat "$dir/deploy.out" >&2; exit 1; }
    deployed=$(($(ms) - t0))
    # Every instance Running, counted through each daemon's socket.
    while :; do
        running=0
        for i in $(seq 1 "$n"); do
            c=$("$bin/steward" --socket "$dir/h$i/stewardd.sock" -o json ls --state running | grep -c '"state"' || true)
            running=$((running + c))
        done
        [ "$running" -ge "$instances" ] && break
        sleep 0.5
    done
    all=$(($(ms) - t0))
    sleep 2
    busy=$(rss) busy_pss=$(pss)
    echo "deployed $instances instances: steward-sched deploy returned in $deployed ms, all Running in $all ms"
    echo "RSS with them: $((busy / 1024)) MiB in all, $((busy / n)) KiB each; PSS $((busy_pss / 1024)) MiB in all"
fi
if [ -n "${KEEP:-}" ]; then
    echo "left running: pids ${pids[*]}"
    echo "cluster file: $dir/cluster.toml"
fi
