#!/usr/bin/env bash
# Issue 27: what the DNS responder answers. stewardd in a network namespace with [services] dns
# on 127.0.0.1:5353, handed the endpoints of an app of 100 instances (as steward-sched hands
# them); a client (python, one socket, one query at a time) asks for the app's A and SRV records
# and one instance's A record. Prints answers per second and latency percentiles per name, and
# how many records the UDP answer held (one over 512 bytes is truncated: TC set, ask over TCP).
# Issue 47: the same at [services] pod_dns (10.96.0.10:53, on the namespace's lo: what
# ClusterFirst pods ask), for an instance, a hostname.subdomain name, and a name outside the zone
# forwarded to an upstream on 127.0.0.1:5399 (a python responder: the forwarding's own cost).
# Usage: bench/dns.sh (after cargo build --release; as root). QUERIES=20000.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/target/release"
dir=$(mktemp -d /tmp/dnsbench.XXXX)
ns=dnsb$$
cleanup() {
    set +e
    [ -f "$dir/stewardd.pid" ] && kill -9 "$(cat "$dir/stewardd.pid")" 2>/dev/null
    [ -f "$dir/upstream.pid" ] && kill -9 "$(cat "$dir/upstream.pid")" 2>/dev/null
    ip netns del $ns 2>/dev/null
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
ip netns add $ns
ip -n $ns link set lo up
cat > "$dir/stewardd.toml" <<TOML
work_base_dir = "$dir/work"
run_base_dir = "$dir/run"
state_dir = "$dir/state"
socket = "$dir/stewardd.sock"
cgroup_parent = "steward-dnsbench"
[services]
node_ports = "off"
dns = "127.0.0.1:5353"
pod_dns = "10.96.0.10"
dns_upstream = ["127.0.0.1:5399"]
TOML
# The upstream: answers every query with one A record, at once.
ip netns exec $ns python3 - <<'PY' &
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 5399))
while True:
    q, peer = s.recvfrom(512)
    end = q.index(b"\0", 12) + 5
    answer = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x05\x00\x04\xc0\x00\x02\x01"
    s.sendto(q[:2] + b"\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00" + q[12:end] + answer, peer)
PY
echo $! > "$dir/upstream.pid"
disown  # its kill -9 at the end is no news
nsenter --net=/run/netns/$ns "$bin/stewardd" --config "$dir/stewardd.toml" > "$dir/stewardd.log" 2>&1 &
echo $! > "$dir/stewardd.pid"
for _ in $(seq 100); do [ -S "$dir/stewardd.sock" ] && break; sleep 0.05; done
endpoints=$(python3 -c '
import json
eps=[{"ip":"10.0.%d.%d"%(i//200,i%200+1),"port":31000+i,"node":"h%d"%(i%10),"instance":i} for i in range(100)]
print(json.dumps({"namespace":"bench","name":"web","revision":1,"updatedMs":1,"ports":{"http":eps},
                  "podNames":{"hostname":"front","subdomain":"edge"}}))')
curl -sf --unix-socket "$dir/stewardd.sock" -X PUT -H 'content-type: application/json' \
    --data-binary "$endpoints" http://localhost/v1/endpoints/bench/web
for _ in $(seq 100); do ip -n $ns -4 addr show dev lo | grep -q 10.96.0.10 && break; sleep 0.05; done
echo "| at | name | type | answers | queries/s | p50 | p99 |"
echo "|---|---|---|---|---|---|---|"
ip netns exec $ns python3 - "${QUERIES:-20000}" <<'PY'
import socket, struct, sys, time
n = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
def query(qid, name, qtype):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack(">HH", qtype, 1)
dns, pods = ("127.0.0.1", 5353), ("10.96.0.10", 53)
for at, name, qtype, kind in [
    (dns, "web.bench.steward.", 1, "A"),
    (dns, "_http._tcp.web.bench.steward.", 33, "SRV"),
    (dns, "7.web.bench.steward.", 1, "A"),
    (pods, "7.web.bench.steward.", 1, "A"),
    (pods, "front.edge.bench.steward.", 1, "A"),
    (pods, "outside.bench.test.", 1, "A"),
]:
    lat = []
    start = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        s.sendto(query(i & 0xFFFF, name, qtype), at)
        data, _ = s.recvfrom(65535)
        lat.append(time.perf_counter() - t)
    took = time.perf_counter() - start
    answers = struct.unpack(">H", data[6:8])[0]
    truncated = data[2] & 0x02  # TC: the whole answer is over TCP (a UDP answer stops at 512 bytes)
    answers = f"{answers} (truncated)" if truncated else answers
    lat.sort()
    us = lambda p: "%.0f µs" % (lat[int(p * (n - 1))] * 1e6)
    where = "pod_dns" if at == pods else "dns"
    print(f"| {where} | {name} | {kind} | {answers} | {n / took:,.0f} | {us(0.5)} | {us(0.99)} |")
PY
