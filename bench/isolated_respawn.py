#!/usr/bin/env python3
"""Respawn latency of a crash that comes alone, after the daemon has been quiet for a while (the
daemon lets go of its code pages at a quiet tick, src/daemon/memory.rs: such a respawn faults
back in what it runs), beside the usual respawns 50 ms apart. Polled by the victim's own cgroup,
as bench/run.py's "respawn p50 (own cgroup)". Also prints the settled RSS before the kills.

usage: python3 bench/isolated_respawn.py [STEWARDD] [N] [K] [QUIET_SECS]   (root)
"""
import os, signal, statistics, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steward_bench as s  # noqa: E402

if len(sys.argv) > 1:
    s.STEWARDD = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 500
k = int(sys.argv[3]) if len(sys.argv) > 3 else 10
quiet = float(sys.argv[4]) if len(sys.argv) > 4 else 5.0
d, sock, parent = s.start_daemon("steward-isolated-")
try:
    s.deploy(d, sock, n)
    time.sleep(quiet + 1)
    settled = s.rss_mib(d.pid)
    isolated = []
    for i in range(k):
        victim = sorted(s.children(d.pid))[i]
        done = s.own_cgroup_procs(victim)
        t1 = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        while True:
            now = open(done).read().split()
            if now and str(victim) not in now:
                break
            time.sleep(0.0002)
        isolated.append(time.monotonic() - t1)
        time.sleep(quiet)
    back_to_back = s.respawn_latencies_by_cgroup(d.pid, 30)
    ms = lambda v: f"{statistics.median(v) * 1000:.2f}"  # noqa: E731
    print(f"{s.STEWARDD} N={n}: RSS settled {settled:.1f} MiB; respawn p50 (own cgroup) alone after "
          f"{quiet:.0f} s quiet {ms(isolated)} ms (max {max(isolated) * 1000:.2f}), 50 ms apart {ms(back_to_back)} ms")
finally:
    s.stop_everything(d, parent)
