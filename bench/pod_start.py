#!/usr/bin/env python3
"""Pod start overhead: stewardd starting a two-container pod (main + one sharing its network,
a published random port) against plain `docker run -d` of the same two containers.

Steward: from POST /v1/apply until the instance is Running (both containers started, recorded
durably), then deleted. docker: `docker run -d` of the main, then of the second with
`--network container:<main>`, then `docker rm -f`. Median (and p90) over R rounds, alternating.
Target: steward ≤ 1.1 × docker.

usage: pod_start.py [ROUNDS]   (needs target/release/stewardd; starts dockerd and builds the
busybox image through scripts/dockerd-up.sh when needed)
"""
import json, os, statistics, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from steward_bench import ROOT, api, start_daemon, stop_everything  # noqa: E402

R = int(sys.argv[1]) if len(sys.argv) > 1 else 20
IMAGE = "steward-busybox:test"
MAIN = ["/bin/sh", "-c", "exec httpd -f -p 80 -h /www"]
SIDE = ["/bin/sh", "-c", "exec sleep 100000"]


def docker(*args):
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout.strip()


def docker_round(i):
    t = time.perf_counter()
    main = docker("run", "-d", "--name", f"bench-docker-{i}-main", "-p", "0:80", "--entrypoint", MAIN[0], IMAGE, *MAIN[1:])
    docker("run", "-d", "--name", f"bench-docker-{i}-side", "--network", f"container:{main}",
           "--entrypoint", SIDE[0], IMAGE, *SIDE[1:])
    took = time.perf_counter() - t
    docker("rm", "-f", f"bench-docker-{i}-main", f"bench-docker-{i}-side")
    return took


def pod_spec(i):
    def c(name, cmd):
        return {"name": name, "image": IMAGE, "command": {"value": cmd[0], "arguments": cmd[1:]}}
    main = c("main", MAIN)
    main["ports"] = [{"name": "http", "containerPort": 80, "hostPort": 0}]
    return {"apiVersion": "v4", "kind": "pod", "metadata": {"name": f"pod{i}", "namespace": "bench"},
            "restartPolicy": {"policy": "Never"}, "killPolicy": {"gracePeriod": 0},
            "spec": {"instance": 1, "template": {"spec": {"network": "BRIDGE", "containers": [main, c("side", SIDE)]}}}}


def steward_round(sock, i):
    t = time.perf_counter()
    api(sock, "POST", "/v1/apply", json.dumps(pod_spec(i)).encode())
    while True:
        s = api(sock, "GET", f"/v1/instances/bench/pod{i}/0")
        kind = s["state"]["state"]
        if kind == "Running":
            break
        if kind in ("Failed", "Exited", "Backoff"):
            raise RuntimeError(f"pod{i}: {s}")
        time.sleep(0.002)
    took = time.perf_counter() - t
    assert len(s["containers"]) == 2
    api(sock, "DELETE", f"/v1/instances/bench/pod{i}/0")
    return took


def summary(xs):
    xs = sorted(xs)
    return statistics.median(xs), xs[max(0, int(len(xs) * 0.9) - 1)]


def main():
    subprocess.run(["bash", os.path.join(ROOT, "scripts/dockerd-up.sh")], check=True)
    daemon, sock, parent = start_daemon("steward-pod-bench-")
    try:
        # Warm both paths once (image layers, dockerd caches).
        docker_round(-1)
        steward_round(sock, 10_000)
        d, s = [], []
        for i in range(R):
            d.append(docker_round(i))
            s.append(steward_round(sock, i))
        (d50, d90), (s50, s90) = summary(d), summary(s)
        print(f"pod start (2 containers, shared netns, published port), {R} rounds:")
        print(f"  docker run -d x2 : p50 {d50*1000:.0f} ms  p90 {d90*1000:.0f} ms")
        print(f"  steward apply    : p50 {s50*1000:.0f} ms  p90 {s90*1000:.0f} ms")
        print(f"  ratio (p50)      : {s50/d50:.2f}x  (target <= 1.10x)")
    finally:
        stop_everything(daemon, parent)
        owner = os.path.join(os.path.dirname(sock), "state")
        ids = docker("ps", "-aq", "--filter", f"label=io.steward.owner={owner}")
        state = [l for l in ids.split() if l]
        if state:
            subprocess.run(["docker", "rm", "-f", *state], capture_output=True)


if __name__ == "__main__":
    main()
