#!/usr/bin/env bash
# The fleet on one machine, in one command: N hosts (default 3), each a real stewardd in a
# network namespace of its own on a bridge of the demo's own, with its own config, TLS
# certificate and token; an etcd; two `steward-sched serve` on it. It deploys the example units
# across the hosts, then shows, with the CLIs' own output: placement by labels and affinities,
# a rollout across hosts, the leader killed -9 and the other taking over, one host's link cut
# and its apps running elsewhere, then the host back with nothing running twice.
# Ctrl-C ends it at any point, removing everything it made (processes, namespaces, bridge,
# addresses, cgroups, state); a second Ctrl-C ends it at once and lists what was left.
# Nothing it uses is shared with scripts/demo.sh or an installed stewardd: its names start with
# stwfleet / steward-fleet, its addresses are 10.247.0.0/24, its ports 17478-17481.
# FLEET_HOSTS=N (2-9). STEWARD_DEMO_BIN=DIR runs the binaries in DIR instead of building a
# release (the tests). FLEET_ONCE=1 ends it after the last step (scripted runs).
# STEWARD_FLEET_LOGS=DIR: where the daemons' logs go (default /var/log/steward-fleet-demo).
set -euo pipefail
cd "$(dirname "$0")/.."
started_at=$(date +%s%3N)
hosts=${FLEET_HOSTS:-3}
if ! [[ "$hosts" =~ ^[2-9]$ ]]; then
    echo "FLEET_HOSTS must be 2 to 9 (was $hosts)" >&2
    exit 2
fi
logs=${STEWARD_FLEET_LOGS:-/var/log/steward-fleet-demo}
base=/var/lib/steward-fleet-demo
bridge=stwfleet0
net=10.247.0
etcd_port=17479
serve_ports=(17480 17481)

mkdir -p "$logs"
APT_LOG=$logs/install.log bash scripts/install-deps.sh --fleet
if [ -n "${STEWARD_DEMO_BIN:-}" ]; then
    bin=$(cd "$STEWARD_DEMO_BIN" && pwd)
else
    echo "== cargo build --release (a few minutes the first time)"
    cargo build --release --quiet
    bin=$(pwd)/target/release
fi
unset STEWARD_CONFIG STEWARD_SOCKET STEWARD_CLUSTER

# What the demo made, for the cleanup: processes (pid:what), namespaces.
pids=()
namespaces=()
host_pid() { echo "${pids[@]}" | tr ' ' '\n' | sed -n "s/^\([0-9]*\):stewardd-$1\$/\1/p"; }

# What is left of the demo (a second Ctrl-C cut the cleanup short).
abandon() {
    trap - INT TERM EXIT
    echo
    echo "== interrupted again: stopping here; left:"
    for p in "${pids[@]}"; do
        kill -0 "${p%%:*}" 2>/dev/null && echo "   left: process ${p#*:} (pid ${p%%:*})"
    done
    for ns in "${namespaces[@]}"; do
        [ -e "/run/netns/$ns" ] && echo "   left: network namespace $ns"
    done
    ip link show "$bridge" >/dev/null 2>&1 && echo "   left: bridge $bridge ($net.1/24)"
    [ -d "$base" ] && echo "   left: $base (state, certificates, the hosts' work directories)"
    for cg in /sys/fs/cgroup/*/steward-fleet-h* /sys/fs/cgroup/steward-fleet-h*; do
        [ -d "$cg" ] && echo "   left: cgroup $cg"
    done
    echo "   (run the demo again and Ctrl-C it once to remove them)"
    exit 130
}

cleanup() { # cleanup STATUS: the demo's status so far (0 after Ctrl-C)
    trap - EXIT
    trap abandon INT TERM
    echo
    if [ "$1" != 0 ]; then
        echo "== the fleet demo failed (exit $1); the daemons' logs are in $logs"
    fi
    echo "== removing the fleet: its apps on every host, the daemons, etcd, the schedulers, the namespaces"
    # The schedulers first: nothing may place anything again while the hosts empty.
    for p in "${pids[@]}"; do
        case "${p#*:}" in serve-* | etcd) kill -9 "${p%%:*}" 2>/dev/null || true ;; esac
    done
    # Each host deletes what it runs (its processes stopped, their cgroups removed), then stops.
    for i in $(seq 1 "$hosts"); do
        sock=$base/h$i/stewardd.sock
        if [ -S "$sock" ] && "$bin/steward" --socket "$sock" ls >/dev/null 2>&1; then
            "$bin/steward" --socket "$sock" delete --all --timeout 20 >/dev/null 2>&1 || true
        fi
        pid=$(host_pid "h$i")
        [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        for _ in $(seq 1 100); do kill -0 "${p%%:*}" 2>/dev/null || break; sleep 0.1; done
        kill -9 "${p%%:*}" 2>/dev/null || true
    done
    sweep
    trap - INT TERM
    echo "== nothing of the fleet is left (the daemons' logs: $logs)"
}

# Namespaces, bridge, cgroups and state of this demo (or of an earlier run that was cut short).
sweep() {
    # Whatever still runs of it: in its directories (daemons, schedulers, instances) or etcd.
    local killed=false
    for d in /proc/[0-9]*; do
        case "$(readlink "$d/cwd" 2>/dev/null) $(tr '\0' ' ' <"$d/cmdline" 2>/dev/null)" in
        "$base"* | *" $base/"* | *"--name fleet-demo "*) kill -9 "${d#/proc/}" 2>/dev/null && killed=true ;;
        esac
    done
    $killed && sleep 0.5
    for i in $(seq 1 9); do
        ip netns pids "stwfleet-h$i" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "stwfleet-h$i" 2>/dev/null || true
    done
    ip link del "$bridge" 2>/dev/null || true
    # A host's instances' cgroups went with their deletes; their parents are the demo's own.
    for cg in /sys/fs/cgroup/*/steward-fleet-h* /sys/fs/cgroup/steward-fleet-h*; do
        [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    rm -rf "$base"
}
trap 'cleanup 0; exit 0' INT TERM
trap 'cleanup "$?"' EXIT

# An earlier run cut short by a second Ctrl-C, or killed, may have left its pieces: gone first.
if [ -d "$base" ] || ip link show "$bridge" >/dev/null 2>&1; then
    echo "== an earlier fleet demo left its pieces: removing them first"
    for i in $(seq 1 9); do
        sock=$base/h$i/stewardd.sock
        [ -S "$sock" ] && timeout 30 "$bin/steward" --socket "$sock" delete --all --timeout 20 >/dev/null 2>&1 || true
    done
    sweep
fi
mkdir -p "$base/tls"
chmod 755 "$base"

step() { echo; echo "== $*"; }
say() { echo "   $*"; }

step "the network: bridge $bridge ($net.1/24) and $hosts hosts, each a network namespace"
ip link add "$bridge" type bridge
ip addr add "$net.1/24" dev "$bridge"
ip link set "$bridge" up
for i in $(seq 1 "$hosts"); do
    ns=stwfleet-h$i
    ip netns add "$ns"
    namespaces+=("$ns")
    ip link add "stwfl-h$i" type veth peer name eth0 netns "$ns"
    ip link set "stwfl-h$i" master "$bridge" up
    ip -n "$ns" addr add "$net.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add default via "$net.1"
    say "h$i: namespace $ns, address $net.$((10 + i))"
done

step "certificates (steward cert: one CA) and tokens"
token=fleet-demo-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$token" >"$base/tokens"
printf 'fleet-demo-serve-%s write\n' "$token" >"$base/serve-tokens"
printf 'fleet-demo-serve-%s\n' "$token" >"$base/serve.token"
chmod 600 "$base/tokens" "$base/serve-tokens" "$base/serve.token"
for i in $(seq 1 "$hosts"); do
    "$bin/steward" cert --dir "$base/tls" --name "h$i" --ip "$net.$((10 + i))" >/dev/null
done
"$bin/steward" cert --dir "$base/tls" --name sched --ip 127.0.0.1 >/dev/null
say "CA $base/tls/ca.pem; a certificate per host and one for the schedulers"

# The example units fetch their package from the default package repository.
repo=/usr/share/steward/repository/examples
mkdir -p "$repo"
tar czf "$repo/gamesvc-1.0.tar.gz" -C units/packages/gamesvc .

step "the hosts: a stewardd in each namespace (its own state, socket, cgroup parent, labels)"
zones=(a b c)
for i in $(seq 1 "$hosts"); do
    h=$base/h$i
    mkdir -p "$h"
    chmod 755 "$h"
    zone=${zones[$(((i - 1) % 3))]}
    gpu=""
    [ "$i" = "$hosts" ] && gpu='gpu = "a100"'
    cat >"$h/stewardd.toml" <<CONF
work_base_dir = "$h/work"
run_base_dir = "$h/run"
state_dir = "$h/state"
socket = "$h/stewardd.sock"
cgroup_parent = "steward-fleet-h$i"
host_ip = "$net.$((10 + i))"
[node]
hostname = "h$i"
zone = "zone-$zone"
[node.labels]
rack = "r$i"
$gpu
[remote]
listen = "$net.$((10 + i)):7443"
cert = "$base/tls/h$i.pem"
key = "$base/tls/h$i-key.pem"
tokens_file = "$base/tokens"
[events]
heartbeat_secs = 2
CONF
    # A session of its own: Ctrl-C must leave it to delete its instances at the cleanup.
    setsid nsenter "--net=/run/netns/stwfleet-h$i" "$bin/stewardd" --config "$h/stewardd.toml" \
        </dev/null >"$logs/h$i.log" 2>&1 &
    pids+=("$!:stewardd-h$i")
    disown
    say "h$i: zone-$zone, rack r$i${gpu:+, gpu a100}; log $logs/h$i.log"
done
for i in $(seq 1 "$hosts"); do
    for _ in $(seq 1 200); do
        "$bin/steward" --socket "$base/h$i/stewardd.sock" ls >/dev/null 2>&1 && break
        kill -0 "$(host_pid "h$i")" 2>/dev/null || { echo "stewardd on h$i exited:"; tail -5 "$logs/h$i.log"; exit 1; }
        sleep 0.05
    done
done

step "etcd on 127.0.0.1:$etcd_port, and two steward-sched serve on it (127.0.0.1:${serve_ports[0]} and :${serve_ports[1]})"
setsid etcd --name fleet-demo --data-dir "$base/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$((etcd_port - 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port - 1))" \
    --initial-cluster "fleet-demo=http://127.0.0.1:$((etcd_port - 1))" </dev/null >"$logs/etcd.log" 2>&1 &
pids+=("$!:etcd")
disown
for _ in $(seq 1 200); do
    grep -q "ready to serve client requests" "$logs/etcd.log" && break
    sleep 0.05
done
{
    printf 'store = "etcd://127.0.0.1:%d/fleet-demo"\nca = "tls/ca.pem"\ntoken_file = "tokens"\n' "$etcd_port"
    printf 'heartbeat_timeout_secs = 8\nservice_range = "10.247.128.0/24"\n'
    for i in $(seq 1 "$hosts"); do
        printf '\n[[node]]\nname = "h%d"\naddress = "%s:7443"\n' "$i" "$net.$((10 + i))"
    done
} >"$base/cluster.toml"
start_serve() { # start_serve PORT
    cp "$base/cluster.toml" "$base/serve-$1.toml"
    printf '\n[serve]\nlisten = "127.0.0.1:%d"\ncert = "tls/sched.pem"\nkey = "tls/sched-key.pem"\ntokens_file = "serve-tokens"\n' \
        "$1" >>"$base/serve-$1.toml"
    (cd "$base" && exec setsid "$bin/steward-sched" --cluster "serve-$1.toml" serve </dev/null >>"$logs/serve-$1.log" 2>&1) &
    pids+=("$!:serve-$1")
    disown
}
for port in "${serve_ports[@]}"; do
    start_serve "$port"
    printf 'server = "127.0.0.1:%d"\nca = "tls/ca.pem"\ntoken_file = "serve.token"\n' "$port" >"$base/client-$port.toml"
done
client=${serve_ports[0]}
sched() { "$bin/steward-sched" --cluster "$base/client-$client.toml" "$@"; }
show() { echo "\$ steward-sched $*"; sched "$@"; }
leader() { sched -o json engine 2>/dev/null | sed -n 's/.*"leader": *"\([^"]*\)".*/\1/p'; }
for _ in $(seq 1 300); do
    [ -n "$(leader)" ] && break
    sleep 0.1
done
[ -n "$(leader)" ] || { echo "no steward-sched leads after 30 s; its log:"; tail -5 "$logs/serve-${serve_ports[0]}.log"; exit 1; }
show engine
show nodes

# Every instance of the demo's apps Running and reported once, within $1 s.
all_running() { # all_running SECS
    local deadline=$(($(date +%s) + $1))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        if sched -o json status 2>/dev/null | python3 -c '
import json, sys, collections
rows = [r for r in json.load(sys.stdin) if r["instance"].startswith("demo/")]
want = {"demo/gamesvc": 0, "demo/ticker": 0}
seen = collections.Counter(r["instance"] for r in rows if r.get("state") == "Running")
placed = [r for r in rows if r["placement"]["state"] == "Placed"]
ok = rows and all(seen[r["instance"]] == 1 for r in placed) and len(seen) == len(placed) and len(placed) == len(rows)
sys.exit(0 if ok else 1)'; then
            return 0
        fi
        sleep 1
    done
    return 1
}

step "deploy the example units through the API: units/gamesvc.json (2 instances, a NodePort service,"
say "preferring hosts without a gpu and apart from each other) and units/ticker.toml"
show deploy units/gamesvc.json
show deploy units/ticker.toml
all_running 60 || say "(not every instance is Running yet)"
ran=$(($(date +%s%3N) - started_at))
say "every instance Running $((ran / 1000)).$((ran % 1000 / 100)) s after the demo started"
show status
say "h$hosts has the gpu label: gamesvc's preferred affinity keeps it off h$hosts while others have room"

step "the service: every host answers gamesvc's node port, wherever its instances run"
show endpoints demo/gamesvc
nodeport=$(sched -o json endpoints demo/gamesvc 2>/dev/null | python3 -c '
import json, sys
e = json.load(sys.stdin)
print(next((s["nodePort"] for s in e.get("services", []) if s.get("nodePort")), ""))' || true)
if [ -n "$nodeport" ]; then
    say "from h$hosts, GET http://$net.$((10 + hosts)):$nodeport/check (bash's /dev/tcp inside its namespace):"
    nsenter "--net=/run/netns/stwfleet-h$hosts" timeout 5 bash -c \
        "exec 3<>/dev/tcp/$net.$((10 + hosts))/$nodeport; printf 'GET /check HTTP/1.0\r\n\r\n' >&3; head -n 1 <&3" |
        sed 's/^/   /' || say "(no answer yet)"
fi

step "a rollout across hosts: gamesvc v2 (a new env value), one host at a time by its strategy"
sed 's/{ "name": "GAMESVC_PORT", "value": "${ports.http_port}" }/{ "name": "GAMESVC_PORT", "value": "${ports.http_port}" },\n              { "name": "GAMESVC_RELEASE", "value": "v2" }/' \
    units/gamesvc.json >"$base/gamesvc-v2.json"
show deploy "$base/gamesvc-v2.json"
show rollout status demo/gamesvc || true

step "the leader killed -9: the other steward-sched takes over"
lead=$(leader)
lead_pid=${lead##*-}
killed_port=""
for p in "${pids[@]}"; do
    [ "${p%%:*}" = "$lead_pid" ] && killed_port=${p#*:serve-}
done
kill -9 "$lead_pid"
say "killed $lead (pid $lead_pid, serving 127.0.0.1:$killed_port)"
for port in "${serve_ports[@]}"; do [ "$port" != "$killed_port" ] && client=$port; done
t0=$(date +%s%3N)
for _ in $(seq 1 300); do
    now=$(leader)
    [ -n "$now" ] && [ "$now" != "$lead" ] && break
    sleep 0.1
done
say "$(leader) leads after $(($(date +%s%3N) - t0)) ms (asked through 127.0.0.1:$client)"
show status
say "starting the killed one again: it follows, and would lead if this one died"
start_serve "$killed_port"

cut_host=$(sched -o json status | python3 -c '
import json, sys
print(next(r["node"] for r in json.load(sys.stdin) if r["instance"] == "demo/gamesvc/0"))')
step "$cut_host's link cut (ip link set stwfl-$cut_host down): lost after 8 s of silence"
say "gamesvc has disconnect.stopAfterSecs 30: $cut_host stops it itself 30 s into the cut, and it is"
say "placed elsewhere only after that (plus its 5 s grace); ticker (restartPolicy OnFailure) would"
say "stay where it is: only Always moves an instance off a lost host"
ip link set "stwfl-$cut_host" down
t0=$(date +%s)
for _ in $(seq 1 120); do
    on=$(sched -o json status 2>/dev/null | python3 -c "
import json, sys
rows = json.load(sys.stdin)
print(sum(1 for r in rows if r['instance'].startswith('demo/gamesvc/') and r['node'] == '$cut_host'))" || echo 1)
    [ "$on" = 0 ] && break
    sleep 1
done
say "gamesvc placed off $cut_host after $(($(date +%s) - t0)) s"
show status

step "$cut_host's link back: it is heard again; what was placed elsewhere is not run twice"
ip link set "stwfl-$cut_host" up
sleep 6
all_running 60 || say "(not every instance is Running yet)"
show status
echo "\$ steward --socket $base/$cut_host/stewardd.sock ls   ($cut_host's own daemon)"
"$bin/steward" --socket "$base/$cut_host/stewardd.sock" ls || true

if [ "${FLEET_ONCE:-0}" = 1 ]; then
    exit 0
fi
step "the fleet runs. Drive it from another terminal:"
say "export STEWARD_CLUSTER=$base/client-$client.toml"
say "$bin/steward-sched status | nodes | watch | scale demo/gamesvc 4 | restart demo/gamesvc"
say "$bin/steward --socket $base/h1/stewardd.sock ls      (a host's own daemon)"
say "the daemons' and the schedulers' logs: $logs"
echo
echo "Ctrl-C ends the fleet demo."
while :; do sleep 3600; done
