#!/usr/bin/env bash
# Issue 46 item 4: steward-sched as a service at fleet scale. N hollow hosts (bench/hollow.sh),
# etcd as the desired store, two `steward-sched serve` on it; APPS apps of PER instances each
# deployed through the API (CLIENTS at once, half through each server); reports placements per
# second end to end (written, applied, reported Running), the leader's CPU and RSS, and with
# KILL=1 kills the leader -9 midway (time until the other leads; nothing lost or doubled); with
# CUT=M stops M hosts at once (SIGSTOP: silent) and reports the time until their instances run
# elsewhere. Needs target/release (cargo build --release) and etcd (scripts/install-deps.sh).
# Usage: bench/serve.sh [N] — APPS=100 PER=100 CLIENTS=4 KILL=1 CUT=0 BASE_PORT=20000
# SERVE_LOG=warn,steward::sched=debug shows where each deploy's time goes; LOGS=DIR keeps the
# servers' logs there.
set -euo pipefail
n=${1:-100}
root="$(cd "$(dirname "$0")/.." && pwd)"
bin=$(cd "${BIN:-$root/target/release}" && pwd)
apps=${APPS:-100}
per=${PER:-100}
clients=${CLIENTS:-4}
kill_leader=${KILL:-1}
cut=${CUT:-0}
total=$((apps * per))
ms() { date +%s%3N; }

out=$(KEEP=1 INSTANCES=0 HEARTBEAT_SECS=2 BIN="$bin" bash "$root/bench/hollow.sh" "$n")
echo "$out" | grep -v "^left running\|^cluster file"
dir=$(dirname "$(echo "$out" | sed -n 's/^cluster file: //p')")
read -r -a hosts <<<"$(echo "$out" | sed -n 's/^left running: pids //p')"
serves=()
etcd_pid=
cleanup() {
    set +e
    for p in "${serves[@]}" "${hosts[@]}" $etcd_pid; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
    [ -n "${LOGS:-}" ] && mkdir -p "$LOGS" && cp "$dir"/serve-*.log "$LOGS/"
    rm -rf "$dir"
}
trap cleanup EXIT

# etcd on loopback, its data in the run's directory.
etcd_port=$((${BASE_PORT:-20000} - 2))
etcd --data-dir "$dir/etcd" --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" --listen-peer-urls "http://127.0.0.1:$((etcd_port - 1))" \
    --quota-backend-bytes 8589934592 >"$dir/etcd.log" 2>&1 &
etcd_pid=$!
until grep -q "ready to serve client requests" "$dir/etcd.log"; do sleep 0.1; done

"$bin/steward" cert --dir "$dir/tls" --name sched --ip 127.0.0.1 >/dev/null
printf 'bench-serve-token-0123456789abcdef write\n' >"$dir/serve-tokens"
chmod 600 "$dir/serve-tokens"
printf 'bench-serve-token-0123456789abcdef\n' >"$dir/serve.token"
# The desired store in etcd, and nodes lost after 10 s of silence.
{ printf 'store = "etcd://127.0.0.1:%d/bench"\nheartbeat_timeout_secs = 10\n' "$etcd_port"; cat "$dir/cluster.toml"; } >"$dir/c.toml"
mv "$dir/c.toml" "$dir/cluster.toml"
for port in 7480 7481; do
    cp "$dir/cluster.toml" "$dir/serve-$port.toml"
    printf '[serve]\nlisten = "127.0.0.1:%d"\ncert = "tls/sched.pem"\nkey = "tls/sched-key.pem"\ntokens_file = "serve-tokens"\nrate_per_sec = 100000.0\nrate_burst = 100000\n' \
        "$port" >>"$dir/serve-$port.toml"
    printf 'server = "127.0.0.1:%d"\nca = "tls/ca.pem"\ntoken_file = "serve.token"\n' "$port" >"$dir/client-$port.toml"
    (cd "$dir" && STEWARD_LOG="${SERVE_LOG:-warn}" exec "$bin/steward-sched" --cluster "serve-$port.toml" -o json serve \
        >"$dir/serve-$port.log" 2>&1) &
    serves+=($!)
done
sched() { (cd "$dir" && STEWARD_LOG=warn "$bin/steward-sched" --cluster "client-$1.toml" -o json "${@:2}"); }
until sched 7480 engine >/dev/null 2>&1 && sched 7481 engine >/dev/null 2>&1; do sleep 0.2; done
leader_pid() {
    local who
    who=$(sched "$1" engine 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"] or "")')
    echo "${who##*-}"
}
until [ -n "$(leader_pid 7480)" ]; do sleep 0.2; done
leader=$(leader_pid 7480)
leads=7481
[ "${serves[0]}" = "$leader" ] && leads=7480
echo "etcd up; two serve up; the leader is pid $leader (serving on $leads)"
cpu_ms() { awk '{print ($14 + $15) * 10}' "/proc/$1/stat"; }
rss_mib() { awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$1/status"; }

mkdir -p "$dir/apps"
for a in $(seq 1 "$apps"); do
    cat >"$dir/apps/a$a.json" <<SPEC
{"apiVersion": "v4", "kind": "process", "metadata": {"name": "a$a", "namespace": "bench"},
 "restartPolicy": {"policy": "Always"},
 "spec": {"instance": $per, "template": {"spec": {"processes": [
   {"procName": "p", "startCmd": "exec sleep 1000", "startGracePeriod": 0,
    "workPath": "\${work_base_dir}/\${namespace}.\${processname}.\${instanceid}",
    "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]}}}}
SPEC
done
# Running instances, as the scheduler reports them (every node read), and their count per id.
running() {
    sched "$1" status 2>/dev/null | python3 -c '
import json, sys, collections
rows = json.load(sys.stdin)
ids = collections.Counter(r["instance"] for r in rows if r["state"] == "Running")
print(len(ids), sum(1 for c in ids.values() if c > 1))'
}

t0=$(ms)
cpu0=$(cpu_ms "$leader")
# Every app deployed, CLIENTS at a time, odd ones through one server and even ones through the
# other; a deploy the killed server was answering fails, and is made again through the survivor
# (a deploy is create-or-update: made twice, it places once).
deploy_all() {
    seq 1 "$apps" | xargs -P "$clients" -I{} sh -c \
        "port=\$(( {} % 2 == 0 ? 7480 : 7481 )); cd '$dir' && s=\$(date +%s%3N) && { STEWARD_LOG=warn '$bin/steward-sched' --cluster client-\$port.toml -o json deploy apps/a{}.json >apps/a{}.out 2>&1 || touch apps/a{}.failed; }; echo \$port \$(( \$(date +%s%3N) - s )) >apps/a{}.ms; touch apps/a{}.done"
}
deploy_all &
deploying=$!
survivor=7480
if [ "$kill_leader" = 1 ]; then
    until [ "$(ls "$dir"/apps/*.done 2>/dev/null | wc -l)" -ge $((apps / 2)) ]; do sleep 0.2; done
    old=$leader
    [ "${serves[0]}" = "$old" ] && survivor=7481
    kill -9 "$old"
    tk=$(ms)
    until new=$(leader_pid $survivor 2>/dev/null) && [ -n "$new" ] && [ "$new" != "$old" ]; do sleep 0.1; done
    leader=$new
    echo "leader (pid $old) killed -9 with $(ls "$dir"/apps/*.done | wc -l) of $apps deploys done: pid $leader leads after $(($(ms) - tk)) ms"
    cpu0=$(cpu_ms "$leader")
fi
wait "$deploying" || true
failed=$(find "$dir/apps" -name "*.failed" | wc -l)
# Made again CLIENTS at a time, as the first time.
find "$dir/apps" -name "*.failed" -printf '%f\n' | sed 's/\.failed$//' | xargs -r -P "$clients" -I{} sh -c \
    "cd '$dir' && STEWARD_LOG=warn '$bin/steward-sched' --cluster client-$survivor.toml -o json deploy apps/{}.json >apps/{}.again 2>&1 || { echo 'deploy {} failed again:'; cat apps/{}.again; exit 255; }" ||
    exit 1
[ "$failed" -gt 0 ] && echo "$failed deploy(s) the killed server was answering made again through the survivor"
deployed=$(($(ms) - t0))
# How long one deploy took, through the leader and through the other server.
cat "$dir"/apps/*.ms | python3 -c "
import sys, collections, statistics
by = collections.defaultdict(list)
for l in sys.stdin:
    port, ms = l.split(); by[port].append(int(ms))
for port, v in sorted(by.items()):
    v.sort(); print('deploys through %s: %d, p50 %d ms, p90 %d ms, max %d ms' % (port, len(v), v[len(v)//2], v[len(v)*9//10], v[-1]))"
port=$survivor
while :; do
    read -r up doubled <<<"$(running "$port")"
    [ "$up" -ge "$total" ] && break
    sleep 2
done
all=$(($(ms) - t0))
echo "$total instances in $apps apps: deploys returned in $deployed ms; all Running in $all ms:" \
    "$((total * 1000 / all)) placements/s end to end (Nomad C1M: 3,750/s); doubled: $doubled"
echo "the leader (pid $leader): $(($(cpu_ms "$leader") - cpu0)) ms CPU since it led; RSS $(rss_mib "$leader") MiB;" \
    "etcd RSS $(rss_mib "$etcd_pid") MiB"
placed_on() { # instances placed on the hosts named h$1..h$2
    sched "$port" status 2>/dev/null | python3 -c "
import json, sys
cut = {'h%d' % i for i in range($1, $2 + 1)}
print(sum(1 for r in json.load(sys.stdin) if r['node'] in cut and r['placement']['state'] == 'Placed'))"
}
if [ "$cut" -gt 0 ]; then
    on_cut=$(placed_on 1 "$cut")
    for i in $(seq 0 $((cut - 1))); do kill -STOP "${hosts[$i]}"; done
    tc=$(ms)
    while :; do
        left=$(placed_on 1 "$cut")
        read -r up doubled <<<"$(running "$port")"
        [ "$left" -eq 0 ] && [ "$up" -ge "$total" ] && break
        sleep 2
    done
    echo "$cut hosts cut off (SIGSTOP) holding $on_cut instances: all $total Running elsewhere after $(($(ms) - tc)) ms" \
        "(heartbeat timeout 10 s included); doubled: $doubled"
fi
