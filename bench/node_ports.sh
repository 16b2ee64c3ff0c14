#!/usr/bin/env bash
# Issue 27: what a node port and a cluster IP cost. Two network namespaces on a veth pair: a
# client (wrk) and a host running nginx (the endpoint) and stewardd, handed endpoints with a
# NodePort service (and its cluster IP) as steward-sched would hand them. Requests per second and
# latency of the same small page: direct to nginx, through the node port in nftables mode and in
# userspace mode; and from the host itself (where cluster IPs answer), direct and through the
# cluster IP in both modes.
# Usage: bench/node_ports.sh (after cargo build --release; as root). DURATION=10 CONNECTIONS=32.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/target/release"
command -v wrk >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk >/dev/null
command -v nginx >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null
dir=$(mktemp -d /tmp/npbench.XXXX)
chmod 755 "$dir"
cli=npb-client$$ host=npb-host$$
cleanup() {
    set +e # every step, whatever the one before did
    [ -f "$dir/stewardd.pid" ] && kill -9 "$(cat "$dir/stewardd.pid")" 2>/dev/null
    [ -f "$dir/nginx.pid" ] && kill "$(cat "$dir/nginx.pid")" 2>/dev/null
    ip netns exec $host nft delete table ip steward 2>/dev/null || true
    ip netns del $cli 2>/dev/null; ip netns del $host 2>/dev/null
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
ip netns add $cli
ip netns add $host
ip link add npb0 netns $cli type veth peer name npb1 netns $host
ip -n $cli addr add 10.232.0.1/24 dev npb0
ip -n $host addr add 10.232.0.2/24 dev npb1
for ns in $cli $host; do ip -n $ns link set lo up; done
ip -n $cli link set npb0 up
ip -n $host link set npb1 up

cat > "$dir/nginx.conf" <<CONF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/nginx.err;
events { worker_connections 1024; }
http { access_log off; server { listen 10.232.0.2:18080; location / { return 200 "ok\n"; } } }
CONF
ip netns exec $host nginx -c "$dir/nginx.conf"

wrk_run() { # URL -> "req/s p50 p99"
    ip netns exec "${2:-$cli}" wrk -t2 -c"${CONNECTIONS:-32}" -d"${DURATION:-10}s" --latency "$1" |
        awk '/Requests\/sec/ {r=$2} / 50%/ {p50=$2} / 99%/ {p99=$2} END {print r, p50, p99}'
}

echo "| path | requests/s | p50 | p99 |"
echo "|---|---|---|---|"
read -r r p50 p99 <<<"$(wrk_run http://10.232.0.2:18080/)"
echo "| direct to the endpoint | $r | $p50 | $p99 |"
read -r r p50 p99 <<<"$(wrk_run http://10.232.0.2:18080/ $host)"
on_host="| on the host: direct to the endpoint | $r | $p50 | $p99 |"

endpoints='{"namespace":"bench","name":"web","revision":1,"updatedMs":1,
  "ports":{"http":[{"ip":"10.232.0.2","port":18080,"node":"h","instance":0}]},
  "services":[{"service":"web","type":"NodePort","export":true,"protocol":"TCP","port":80,"nodePort":30080,"target":"http",
    "clusterIP":"10.254.0.1"}]}'
for mode in nftables userspace; do
    rm -rf "$dir/state" "$dir/work" "$dir/run"
    cat > "$dir/stewardd.toml" <<TOML
work_base_dir = "$dir/work"
run_base_dir = "$dir/run"
state_dir = "$dir/state"
socket = "$dir/stewardd.sock"
cgroup_parent = "steward-npbench"
host_ip = "10.232.0.2"
[services]
node_ports = "$mode"
TOML
    # nsenter keeps the host's mounts (ip netns exec remounts /sys, hiding the cgroups).
    nsenter --net=/run/netns/$host "$bin/stewardd" --config "$dir/stewardd.toml" > "$dir/stewardd-$mode.log" 2>&1 &
    echo $! > "$dir/stewardd.pid"
    for _ in $(seq 100); do [ -S "$dir/stewardd.sock" ] && break; sleep 0.05; done
    curl -sf --unix-socket "$dir/stewardd.sock" -X PUT -H 'content-type: application/json' \
        --data-binary "$endpoints" http://localhost/v1/endpoints/bench/web
    for _ in $(seq 100); do
        ip netns exec $cli curl -sf -m 1 http://10.232.0.2:30080/ >/dev/null 2>&1 && break
        sleep 0.05
    done
    read -r r p50 p99 <<<"$(wrk_run http://10.232.0.2:30080/)"
    echo "| node port, $mode | $r | $p50 | $p99 |"
    read -r r p50 p99 <<<"$(wrk_run http://10.254.0.1:80/ $host)"
    on_host="$on_host
| on the host: cluster IP, $mode | $r | $p50 | $p99 |"
    kill -9 "$(cat "$dir/stewardd.pid")"; rm -f "$dir/stewardd.pid" "$dir/stewardd.sock"
    ip netns exec $host nft delete table ip steward 2>/dev/null || true
done
echo "$on_host"
