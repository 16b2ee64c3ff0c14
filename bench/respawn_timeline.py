#!/usr/bin/env python3
"""Where a respawn's time goes, from the kernel's own clock: N sleepers under a release stewardd,
30 of them killed (-9) 0.1 s apart while `perf record -a` takes the tracepoints of each exit, the
daemon's reaping call (wait4 or waitid) and its next clone. Prints the medians of exit -> reap,
reap -> clone and exit -> clone. Unlike steward_bench.py's respawn figure, no polling of
/proc/PID/task/*/children is in the measure (whose cost grows with N).

usage: python3 bench/respawn_timeline.py [STEWARDD] [N]   (root; perf installed)
"""
import os, signal, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steward_bench as s  # noqa: E402

if len(sys.argv) > 1:
    s.STEWARDD = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 500
data = "/tmp/steward-respawn-timeline.data"
d, sock, parent = s.start_daemon("steward-timeline-")
time.sleep(0.5)
print(f"{n} running after {s.deploy(d, sock, n):.3f} s")
time.sleep(2)
victims = sorted(s.children(d.pid))[:30]
rec = subprocess.Popen(["perf", "record", "-q", "-a", "-e", s.RESPAWN_EVENTS, "-o", data], stderr=subprocess.DEVNULL)
time.sleep(1.5)
for v in victims:
    os.kill(v, signal.SIGKILL)
    time.sleep(0.1)
time.sleep(0.5)
rec.send_signal(signal.SIGINT)
rec.wait()
s.stop_everything(d, parent)
spans = s.respawn_spans(s.perf_rows(data), d.pid, victims)
for name, values in spans.items():
    if values:
        print(f"{name}: p50 {statistics.median(values) * 1000:.3f} ms, min {min(values) * 1000:.3f} ms (n={len(values)})")
