#!/usr/bin/env python3
"""Two stewardd builds side by side: N sleepers under each, their instances killed (-9) in turn
(A, B, A, B, ...) 50 ms apart while `perf record -a` takes each exit, the daemon's reaping call
and its next clone. The machine's drift (this 2-core VM's respawn figures move by +-0.2 ms
between runs minutes apart) falls on both builds alike, so a change of 0.05 ms shows; one
build after the other does not. Run it both ways round. Prints, per build, the daemon's CPU per
respawn (clock ticks, coarse) and the p50 and p25 of exit -> reap, reap -> clone, exit -> clone.

usage: python3 bench/ab_respawn.py STEWARDD_A STEWARDD_B [N] [KILLS]   (root; perf installed)
"""
import os, signal, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steward_bench as s  # noqa: E402

A, B = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 500
kills = int(sys.argv[4]) if len(sys.argv) > 4 else 100


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


daemons = []
for path, tag in ((A, "a"), (B, "b")):
    s.STEWARDD = path
    d, sock, parent = s.start_daemon(f"steward-ab{tag}-")
    time.sleep(0.5)
    print(f"{path}: {n} running after {s.deploy(d, sock, n):.3f} s")
    daemons.append((d, sock, parent))
time.sleep(3)
victims = [sorted(s.children(d.pid))[:kills] for d, _, _ in daemons]
data = "/tmp/steward-ab-respawn.data"
rec = subprocess.Popen(["perf", "record", "-q", "-a", "-e", s.RESPAWN_EVENTS, "-o", data], stderr=subprocess.DEVNULL)
time.sleep(1.5)
cpu0 = [cpu_ticks(d.pid) for d, _, _ in daemons]
for k in range(kills):
    for v in victims:
        os.kill(v[k], signal.SIGKILL)
        time.sleep(0.05)
time.sleep(0.5)
cpu = [cpu_ticks(d.pid) - c for (d, _, _), c in zip(daemons, cpu0)]
rec.send_signal(signal.SIGINT)
rec.wait()
for d, _, parent in daemons:
    s.stop_everything(d, parent)
rows = s.perf_rows(data)
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
for (d, _, _), vs, name, ticks in zip(daemons, victims, (A, B), cpu):
    spans = s.respawn_spans(rows, d.pid, vs, window=0.04)
    figures = "  ".join(
        f"{k} p50 {statistics.median(v) * 1e3:.3f} p25 {statistics.quantiles(v, n=4)[0] * 1e3:.3f} ms"
        for k, v in spans.items() if len(v) > 1)
    print(f"{name}: {len(spans['exit -> clone'])} respawns, daemon CPU {ticks * tick_us / kills:.0f} us each; {figures}")
