#!/usr/bin/env python3
"""Two stewardd builds side by side, N pidfile (daemonizing) sleepers under each, their mains
killed (-9) in turn (A, B, A, B, ...) 50 ms apart: the respawn latency by the victim's own cgroup
(its exit -> the new launcher's join), the daemon's wait4 calls (`perf stat`, the SIGCHLD scans)
and its CPU per respawn. Run it both ways round (docs/performance.md, issue 48's tenth step).

usage: python3 bench/pidfile_respawn_ab.py STEWARDD_A STEWARDD_B N KILLS   (root; perf installed)
"""
import os, sys, time, subprocess, signal, statistics
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steward_bench as s

def cpu_ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])

A, B, n, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ds = []
try:
    for path, tag in ((A, "a"), (B, "b")):
        s.STEWARDD = path
        d, sock, parent = s.start_daemon(f"steward-pf{tag}-")
        time.sleep(0.5)
        print(f"{path}: {n} running after {s.deploy(d, sock, n, pidfile=True):.3f} s", flush=True)
        ds.append((path, d, sock, parent))
    time.sleep(3)
    perfs = [subprocess.Popen(["perf", "stat", "-x,", "-e", "syscalls:sys_enter_wait4", "-p", str(d.pid),
                               "-o", f"/tmp/steward-pidfile-ab-w4-{i}.txt"]) for i, (_, d, _, _) in enumerate(ds)]
    time.sleep(1)
    cpu0 = [cpu_ticks(d.pid) for _, d, _, _ in ds]
    lat = [[] for _ in ds]
    for i in range(k):
        for j, (_, d, _, _) in enumerate(ds):
            got = s.respawn_latencies_by_cgroup(d.pid, 1)
            lat[j].extend(got or [])
            time.sleep(0.05)
    cpu1 = [cpu_ticks(d.pid) for _, d, _, _ in ds]
    for p in perfs:
        p.send_signal(signal.SIGINT)
        p.wait()
    for j, (path, d, _, _) in enumerate(ds):
        w4 = [l for l in open(f"/tmp/steward-pidfile-ab-w4-{j}.txt") if "wait4" in l]
        calls = int(w4[0].split(",")[0]) if w4 else -1
        l = sorted(lat[j])
        print(f"{path}: respawn p50 {statistics.median(l)*1000:.2f} ms p25 {l[len(l)//4]*1000:.2f} "
              f"p90 {l[int(len(l)*0.9)]*1000:.2f}; wait4 calls {calls} ({calls/k:.1f}/respawn); "
              f"CPU ticks/respawn {(cpu1[j]-cpu0[j])/k:.2f}")
finally:
    for _, d, _, parent in ds:
        s.stop_everything(d, parent)
