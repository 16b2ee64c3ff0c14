#!/usr/bin/env python3
"""What the bench's own polling costs a burst: N sleepers started under a release stewardd while
the daemon's children are polled every PERIOD seconds (steward_bench.py's deploy polls every
1 ms, reading every pid of every daemon thread's children list each time). Prints all-running,
the daemon's CPU per start over the burst (utime + stime from /proc/PID/stat), and the poller's.

usage: python3 bench/poll_cost.py STEWARDD N PERIOD   (e.g. target/release/stewardd 5000 0.02; root)
"""
import json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steward_bench as sb  # noqa: E402


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    sb.STEWARDD, n, period = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    daemon, sock, parent = sb.start_daemon("steward-poll-")
    time.sleep(0.5)
    daemon_before, poller_before, t0 = cpu_seconds(daemon.pid), time.process_time(), time.monotonic()
    sb.api(sock, "POST", "/v1/apply", json.dumps(sb.sleeper_spec(n)).encode())
    polls = 0
    while len(sb.children(daemon.pid)) < n:
        polls += 1
        time.sleep(period)
    took = time.monotonic() - t0
    daemon_cpu, poller_cpu = cpu_seconds(daemon.pid) - daemon_before, time.process_time() - poller_before
    print(f"N={n} poll every {period * 1000:.0f} ms: all-running {took * 1000:.0f} ms ({took / n * 1e6:.0f} us/start), "
          f"daemon CPU {daemon_cpu / n * 1e6:.0f} us/start, poller CPU {poller_cpu:.2f} s over {polls} polls")
    sb.stop_everything(daemon, parent)


if __name__ == "__main__":
    main()
