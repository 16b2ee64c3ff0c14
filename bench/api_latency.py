#!/usr/bin/env python3
"""API latency of stewardd with N instances: GET /v1/instances/{id} (status) and GET
/v1/instances (ls), p50/p99 over many requests, one connection per request like the CLI.

usage: api_latency.py [N] [REQUESTS]   (needs target/release/stewardd)
"""
import json, os, signal, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from steward_bench import UnixHTTP, api, children, start_daemon, stop_everything  # noqa: E402



def timed(sock, path, count):
    lat = []
    for i in range(count):
        t = time.perf_counter()
        c = UnixHTTP(sock)
        c.request("GET", path(i))
        r = c.getresponse()
        r.read()
        c.close()
        assert r.status == 200, r.status
        lat.append((time.perf_counter() - t) * 1000)
    lat.sort()
    return statistics.median(lat), lat[int(len(lat) * 0.99) - 1]


def main():
    N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    R = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    daemon, sock, parent = start_daemon("steward-api-")
    spec = {"apiVersion": "v4", "kind": "process", "metadata": {"name": "sleeper", "namespace": "bench"},
            "spec": {"instance": N, "template": {"spec": {"processes": [{
                "procName": "sleep", "startGracePeriod": 0, "startCmd": "exec sleep 100000",
                "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}"}]}}}}
    api(sock, "POST", "/v1/apply", json.dumps(spec).encode())
    while len(children(daemon.pid)) < N:
        time.sleep(0.01)
    time.sleep(1)
    s50, s99 = timed(sock, lambda i: f"/v1/instances/bench/sleeper/{i % N}", R)
    l50, l99 = timed(sock, lambda i: "/v1/instances", max(50, R // 10))
    print(f"stewardd N={N}: status p50 {s50:.2f} ms p99 {s99:.2f} ms; ls p50 {l50:.2f} ms p99 {l99:.2f} ms")
    stop_everything(daemon, parent)

if __name__ == "__main__":
    main()
