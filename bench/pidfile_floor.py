#!/usr/bin/env python3
"""What the pidfile workload costs by itself: the floor's way (posix_spawn, nothing else) of
starting N of steward_bench.py's pidfile startCmd (`sh -c`, a fork, setsid, a second sh that
writes the pidfile, exec sleep) against N of its foreground one (`sh -c 'exec sleep'`), as a
child subreaper (the daemonized sleeps are reparented to it, as to stewardd). Each figure is
the time until N sleeps are its children (polled every 1 ms, as steward_bench.deploy polls).
The ratio is what "pidfile within 1.2x foreground" asks of the workload alone.

usage: python3 bench/pidfile_floor.py [N]   (Linux)
"""
import ctypes, os, signal, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steward_bench as s  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
me = os.getpid()


def sleeps():
    return [p for p in s.children(me) if open(f"/proc/{p}/comm").read().strip() == "sleep"]


def run(label, command):
    d = tempfile.mkdtemp(prefix="pidfile-floor-")
    t0 = time.monotonic()
    for i in range(n):
        cmd = command.replace("${pidFile}", os.path.join(d, f"{i}.pid"))
        os.posix_spawn("/bin/sh", ["sh", "-c", cmd], os.environ)
    while len(sleeps()) < n:
        time.sleep(0.001)
    took = time.monotonic() - t0
    for p in s.children(me):
        os.kill(p, signal.SIGKILL)
    while True:  # every child reaped, the daemonized sleeps included
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return took


def command(pidfile):
    return s.sleeper_spec(1, pidfile)["spec"]["template"]["spec"]["processes"][0]["startCmd"]


fg = run("foreground", command(False))
pf = run("pidfile", command(True))
print(f"pidfile floor N={n}: foreground startCmd {fg * 1000:.0f} ms, pidfile startCmd {pf * 1000:.0f} ms "
      f"({pf / fg:.2f}x)")
