#!/usr/bin/env bash
# Issue 26: time to a running pod when its image must be pulled: Steward (apply --wait) against
# `docker run -d` of the same image, from a registry on 127.0.0.1 (Debian's docker-registry).
# Usage: bench/pod_pull.sh (after cargo build --release and scripts/dockerd-up.sh; SIZE_MB=64 by
# default). Needs docker-registry (scripts/install-deps.sh) and the busybox test image.
set -euo pipefail
bin="$(cd "$(dirname "$0")/.." && pwd)/target/release"
dir=$(mktemp -d /tmp/pullbench.XXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$dir/registry.yml" <<YML
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $dir/data}}
http: {addr: 127.0.0.1:$port}
YML
/usr/bin/docker-registry serve "$dir/registry.yml" > "$dir/registry.log" 2>&1 &
reg=$!
trap 'kill $reg 2>/dev/null; kill $(cat $dir/stewardd.pid 2>/dev/null) 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
image=127.0.0.1:$port/bench/blob:v1
size=${SIZE_MB:-64}
docker rm -f pullbench-make >/dev/null 2>&1 || true
docker run --name pullbench-make steward-busybox:test /bin/sh -c "dd if=/dev/urandom of=/blob bs=1M count=$size 2>/dev/null" >/dev/null
docker commit pullbench-make "$image" >/dev/null
docker rm -f pullbench-make >/dev/null
docker push "$image" >/dev/null
cat > "$dir/stewardd.toml" <<TOML
work_base_dir = "$dir/work"
run_base_dir = "$dir/run"
state_dir = "$dir/state"
socket = "$dir/stewardd.sock"
cgroup_parent = "steward-pullbench"
TOML
"$bin/stewardd" --config "$dir/stewardd.toml" > "$dir/stewardd.log" 2>&1 &
echo $! > "$dir/stewardd.pid"
for _ in $(seq 100); do [ -S "$dir/stewardd.sock" ] && break; sleep 0.05; done
cat > "$dir/pod.json" <<JSON
{"apiVersion": "v4", "kind": "pod", "metadata": {"name": "blob", "namespace": "bench"},
 "restartPolicy": {"policy": "Never"}, "killPolicy": {"gracePeriod": 1},
 "spec": {"instance": 1, "template": {"spec": {"network": "BRIDGE", "containers": [
   {"name": "main", "image": "$image", "imagePullPolicy": "IfNotPresent", "command": {"value": "/bin/sleep", "arguments": ["1000"]}}]}}}}
JSON
now() { date +%s.%N; }
for round in 1 2 3; do
    docker rmi -f "$image" >/dev/null
    t0=$(now); docker run -d --name pullbench-run "$image" /bin/sleep 1000 >/dev/null; t1=$(now)
    docker rm -f pullbench-run >/dev/null
    docker rmi -f "$image" >/dev/null
    t2=$(now); "$bin/steward" --config "$dir/stewardd.toml" apply -f "$dir/pod.json" --wait >/dev/null; t3=$(now)
    "$bin/steward" --config "$dir/stewardd.toml" delete bench/blob >/dev/null
    python3 -c "print(f'round $round: docker run (pull + start) {($t1-$t0):.2f} s; steward apply --wait (pull + start) {($t3-$t2):.2f} s; image ${size} MiB')"
done
