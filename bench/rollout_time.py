#!/usr/bin/env python3
"""How long a rollout takes against its bound (issue 18): N sleepers with a readiness probe
(EXEC `true`, period 1 s) are changed (a new env value) and rolled out by a strategy; the time
from the apply to the rollout's `complete`, beside the bound batches x (start + minReadySeconds)
where a batch moves maxUnavailable + maxSurge instances (the first one maxSurge spares and
maxUnavailable in place, then as many as become available). A sampler every 20 ms records the
fewest ready and the most running instances over the whole rollout.

usage: python3 bench/rollout_time.py [N] [--unavailable U] [--surge S] [--min-ready SECS]
       (defaults 100, 10, 5, 1; release build: cargo build --release)
"""
import json, math, os, sys, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from steward_bench import api, start_daemon, stop_everything  # noqa: E402

ARGS = sys.argv[1:]


def opt(name, default):
    return float(ARGS[ARGS.index(name) + 1]) if name in ARGS else default


N = int(ARGS[0]) if ARGS and not ARGS[0].startswith("--") else 100
UNAVAILABLE, SURGE, MIN_READY = int(opt("--unavailable", 10)), int(opt("--surge", 5)), opt("--min-ready", 1)


def spec(version):
    proc = {"procName": "sleep", "startGracePeriod": 0, "startCmd": "exec sleep 100000",
            "env": [{"name": "VERSION", "value": version}],
            "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}",
            "probe": {"readiness": {"handler": {"type": "EXEC", "method": {"command": ["true"]}}, "period": 1}}}
    return {"apiVersion": "v4", "kind": "process", "restartPolicy": {"policy": "Always", "interval": 0},
            "killPolicy": {"gracePeriod": 1},
            "strategy": {"maxUnavailable": UNAVAILABLE, "maxSurge": SURGE, "minReadySeconds": int(MIN_READY)},
            "metadata": {"name": "rolled", "namespace": "bench"},
            "spec": {"instance": N, "template": {"spec": {"processes": [proc]}}}}


def listing(sock):
    return api(sock, "GET", "/v1/instances?name=rolled")["instances"]


def main():
    daemon, sock, parent = start_daemon("rollout-")
    try:
        api(sock, "POST", "/v1/apply", json.dumps(spec("1")).encode())
        deadline = time.monotonic() + 120
        while sum(1 for s in listing(sock) if s.get("ready")) < N:
            if time.monotonic() > deadline:
                raise RuntimeError("not all ready within 120 s")
            time.sleep(0.2)
        # How long one instance takes from its start to Ready (the probe's first pass).
        seen = {"min_ready": N, "max_running": 0, "samples": 0}
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                lst = listing(sock)
                ready = sum(1 for s in lst if s.get("ready") and s["state"]["state"] == "Running")
                running = sum(1 for s in lst if s["state"]["state"] in ("Starting", "Running", "Stopping"))
                seen["min_ready"] = min(seen["min_ready"], ready)
                seen["max_running"] = max(seen["max_running"], running)
                seen["samples"] += 1
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        t0 = time.monotonic()
        api(sock, "POST", "/v1/apply", json.dumps(spec("2")).encode())
        while True:
            r = api(sock, "GET", "/v1/apps/bench/rolled/rollout")
            if r["rollout"]["phase"] == "complete":
                break
            if r["rollout"]["phase"] == "failed":
                raise RuntimeError(f"rollout failed: {r}")
            time.sleep(0.05)
        took = time.monotonic() - t0
        stop.set()
        sampler.join()
        steps = r["rollout"]["steps"]
        # Time from a start to Ready: the readiness probe's first pass, at most one period.
        start_to_ready = 1.0
        batches = math.ceil(N / (UNAVAILABLE + SURGE))
        bound = batches * (start_to_ready + MIN_READY)
        print(f"N={N}, maxUnavailable {UNAVAILABLE}, maxSurge {SURGE}, minReadySeconds {MIN_READY:g}, "
              f"readiness EXEC period 1 s, nproc={os.cpu_count()}")
        print("| instances | took s | bound s (batches x (start-to-ready 1 s + minReady)) | batches | steps |"
              " fewest ready | most running | samples |")
        print("|---|---|---|---|---|---|---|---|")
        print(f"| {N} | {took:.1f} | {bound:.1f} ({batches} x {start_to_ready + MIN_READY:g}) | {batches} | {steps} |"
              f" {seen['min_ready']} (floor {N - UNAVAILABLE}) | {seen['max_running']} (ceiling {N + SURGE}) |"
              f" {seen['samples']} |")
    finally:
        stop_everything(daemon, parent)


if __name__ == "__main__":
    main()
