#!/usr/bin/env python3
"""A burst of N starts under several stewardd builds, turn about: all-running (as steward_bench.py
measures it) and the daemon's own CPU time over the burst and its settling (utime + stime from
/proc/PID/stat: what the daemon spends per start beside the children's fork and exec).

usage: python3 bench/start_burst.py N STEWARDD [STEWARDD ...]   (REPS=3 by default; root)
Prints, per build, one (all-running ms, daemon CPU s, RSS MiB) per rep.
"""
import os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steward_bench as s  # noqa: E402


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    n, builds = int(sys.argv[1]), sys.argv[2:]
    results = {b: [] for b in builds}
    for _ in range(int(os.environ.get("REPS", "3"))):
        for build in builds:
            s.STEWARDD = build
            daemon, sock, parent = s.start_daemon("steward-burst-")
            time.sleep(0.5)
            before = cpu_seconds(daemon.pid)
            all_running = s.deploy(daemon, sock, n)
            cpu = cpu_seconds(daemon.pid) - before
            results[build].append((round(all_running * 1000), round(cpu, 2), round(s.rss_mib(daemon.pid), 1)))
            s.stop_everything(daemon, parent)
            time.sleep(1)
    for build in builds:
        print(build, results[build])


if __name__ == "__main__":
    main()
