#!/bin/bash
# CNI vs CNM pod start (issue 22): usage: bench/cni_pods.sh cnm|cni (after cargo build --release,
# scripts/dockerd-up.sh). 20 two-container pods applied with --wait, then deleted; host-local leases
# counted after each. stewardd runs in a network namespace of its own (its bridge is made there).
set -e
R="$(cd "$(dirname "$0")/.." && pwd)/target/release"
mode=$1; ns=stwcnib
d=$(mktemp -d /tmp/cnib-$mode-XXXX); mkdir -p $d/conf
cat > $d/conf/10-pods.conflist <<J
{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge","bridge":"stwb0","isGateway":true,"ipam":{"type":"host-local","subnet":"10.233.0.0/24","dataDir":"$d/leases"}}]}
J
cat > $d/stewardd.toml <<T
work_base_dir = "$d/work"
run_base_dir = "$d/run"
state_dir = "$d/state"
socket = "$d/s.sock"
cgroup_parent = "steward-cnib"
host_ip = "127.0.0.1"
network_mode = "$mode"
cni_bin_dir = "/usr/lib/cni"
cni_conf_dir = "$d/conf"
T
ip netns del $ns 2>/dev/null || true; ip netns add $ns
nsenter --net=/run/netns/$ns $R/stewardd --config $d/stewardd.toml >$d/log 2>&1 &
pid=$!
for i in $(seq 100); do [ -S $d/s.sock ] && break; sleep 0.05; done
cat > $d/pods.json <<J
{"apiVersion":"v4","kind":"pod","metadata":{"name":"many","namespace":"b"},
 "restartPolicy":{"policy":"OnFailure","interval":0},"killPolicy":{"gracePeriod":1},
 "spec":{"instance":20,"template":{"spec":{"network":"BRIDGE","containers":[
  {"name":"a","image":"steward-busybox:test","command":{"value":"/bin/sh","arguments":["-c","exec sleep 1000"]}},
  {"name":"b","image":"steward-busybox:test","command":{"value":"/bin/sh","arguments":["-c","exec sleep 1000"]}}]}}}}
J
s=$(date +%s%N); $R/steward --socket $d/s.sock apply -f $d/pods.json --wait --timeout 120 >/dev/null; e=$(date +%s%N)
echo "$mode: 20 two-container pods Running in $(( (e-s)/1000000 )) ms; leases $(ls $d/leases/pods 2>/dev/null | grep -c '^10\.' || true)"
s=$(date +%s%N); $R/steward --socket $d/s.sock delete b/many --timeout 120 >/dev/null; e=$(date +%s%N)
echo "$mode: deleted in $(( (e-s)/1000000 )) ms; leases left $(ls $d/leases/pods 2>/dev/null | grep -c '^10\.' || true)"
kill $pid; wait $pid || true
ip netns del $ns; rm -rf $d
