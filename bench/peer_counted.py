#!/usr/bin/env python3
"""s6's all-running measured as Steward's counted figure is (bench/steward_bench.py
deploy_counted): s6-svscan started in a v1 pids cgroup of its own, polled every 1 ms until the
cgroup counts its N supervisors and their N sleeps (2N + 1 tasks with the scanner). One small
file a poll at every N, where peer_s6.py (run as is by bench/run.py) reads every supervisor's
children list each millisecond, a poll that grows with N for s6 as steward_bench.py's `deploy`
does for Steward (docs/performance.md, issue 48's fifth step).

usage: python3 bench/peer_counted.py N     (Debian package s6; root, a v1 pids hierarchy)
Prints one line: "s6-counted N=...: all-running ... ms".
"""
import os, shutil, signal, sys, tempfile, time

PIDS = "/sys/fs/cgroup/pids"


def main():
    n = int(sys.argv[1])
    if not os.path.isdir(PIDS):
        print(f"s6-counted N={n}: n/a (no v1 pids hierarchy)")
        return
    d = tempfile.mkdtemp(prefix="peer-s6-counted-")
    for i in range(n):
        svc = os.path.join(d, f"p{i}")
        os.mkdir(svc)
        with open(os.path.join(svc, "run"), "w") as f:
            f.write("#!/bin/sh\nexec /bin/sleep 100000\n")
        os.chmod(os.path.join(svc, "run"), 0o755)
    cg = os.path.join(PIDS, f"peer-s6-counted-{os.getpid()}")
    os.mkdir(cg)

    def join():  # in the scanner's child before its exec: everything it starts is counted
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write("0")

    import subprocess
    t0 = time.monotonic()
    scanner = subprocess.Popen(["s6-svscan", "-c", str(n + 1), "-t0", d], preexec_fn=join,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    current = os.path.join(cg, "pids.current")
    while int(open(current).read()) < 2 * n + 1:
        if time.monotonic() - t0 > 300:
            break
        time.sleep(0.001)
    took = time.monotonic() - t0
    print(f"s6-counted N={n}: all-running {took * 1000:.0f} ms")
    # Tear down: the scanner first so nothing respawns, then everything left in the cgroup.
    scanner.kill()
    scanner.wait()
    for _ in range(50):
        pids = open(os.path.join(cg, "cgroup.procs")).read().split()
        if not pids:
            break
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    os.rmdir(cg)
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
