#!/usr/bin/env python3
"""API latency of stewardd with N instances: GET /v1/instances/{id} (status) and GET
/v1/instances (ls), p50/p99 over many requests, one connection per request like the CLI.

usage: api_latency.py [N] [REQUESTS]   (needs target/release/stewardd)
"""
import json, os, signal, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from steward_bench import UnixHTTP, api, children  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
R = int(sys.argv[2]) if len(sys.argv) > 2 else 1000


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
    import subprocess, tempfile
    d = tempfile.mkdtemp(prefix="steward-api-")
    os.chmod(d, 0o755)
    sock = os.path.join(d, "stewardd.sock")
    parent = f"steward-api-{os.getpid()}"
    conf = os.path.join(d, "stewardd.toml")
    with open(conf, "w") as f:
        f.write(f'work_base_dir = "{d}/work"\nrun_base_dir = "{d}/run"\nstate_dir = "{d}/state"\n'
                f'socket = "{sock}"\ncgroup_parent = "{parent}"\nhost_ip = "127.0.0.1"\n')
    log = open(os.path.join(d, "stewardd.log"), "w")
    daemon = subprocess.Popen([os.path.join(ROOT, "target/release/stewardd"), "--config", conf], stdout=log, stderr=log)
    while not os.path.exists(sock):
        time.sleep(0.005)
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
    daemon.kill()
    daemon.wait()
    for ctl in os.listdir("/sys/fs/cgroup"):
        base = f"/sys/fs/cgroup/{ctl}/{parent}"
        if not os.path.isdir(base):
            continue
        for inst in os.listdir(base):
            procs = os.path.join(base, inst, "cgroup.procs")
            for p in (open(procs).read().split() if os.path.exists(procs) else []):
                try:
                    os.kill(int(p), signal.SIGKILL)
                except ProcessLookupError:
                    pass
    time.sleep(0.5)
    for ctl in os.listdir("/sys/fs/cgroup"):
        base = f"/sys/fs/cgroup/{ctl}/{parent}"
        if os.path.isdir(base):
            for inst in os.listdir(base):
                try:
                    os.rmdir(os.path.join(base, inst))
                except OSError:
                    pass
            try:
                os.rmdir(base)
            except OSError:
                pass


if __name__ == "__main__":
    main()
