#!/usr/bin/env python3
"""Steward supervising N `sleep` instances, measured exactly like the peers in shared/bench:
time until all N run (children of the daemon), kill -9 -> respawn latency p50/p99 over K kills
(restartPolicy Always, interval 0), and the daemon's RSS.

usage: steward_bench.py N [K] [--pidfile]   (needs target/release/stewardd and steward)
With --pidfile each instance is a forking daemon that writes its pidfile (systemd Type=forking),
so the main process is a grandchild reparented to the daemon (child subreaper).
"""
import json, os, re, signal, socket, statistics, subprocess, sys, tempfile, time, http.client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEWARDD = os.path.join(ROOT, "target/release/stewardd")



class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=60)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def api(sock, method, path, body=None, ctype="application/json"):
    c = UnixHTTP(sock)
    c.request(method, path, body=body, headers={"content-type": ctype} if body else {})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status >= 300:
        raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
    return json.loads(data) if data else None


def children(pid):
    out = set()
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            out |= {int(x) for x in open(f"/proc/{pid}/task/{t}/children").read().split()}
        except FileNotFoundError:
            pass
    return out


def rss_mib(pid):
    return int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1]) / 1024


def start_daemon(prefix):
    """A release stewardd with its own roots, state, socket and cgroup parent; returns
    (process, socket path, cgroup parent)."""
    d = tempfile.mkdtemp(prefix=prefix)
    os.chmod(d, 0o755)
    sock = os.path.join(d, "stewardd.sock")
    parent = f"{prefix.rstrip('-')}-{os.getpid()}"
    conf = os.path.join(d, "stewardd.toml")
    with open(conf, "w") as f:
        f.write(f'work_base_dir = "{d}/work"\nrun_base_dir = "{d}/run"\nstate_dir = "{d}/state"\n'
                f'socket = "{sock}"\ncgroup_parent = "{parent}"\nhost_ip = "127.0.0.1"\n')
        # More settings, one per line (a cgroup v2 run on a hybrid host: see docs/performance.md).
        f.write(os.environ.get("STEWARD_BENCH_CONF", "").replace("\\n", "\n") + "\n")
    log = open(os.path.join(d, "stewardd.log"), "w")
    daemon = subprocess.Popen([STEWARDD, "--config", conf], stdout=log, stderr=log)
    while True:  # the socket file can exist a moment before the daemon answers on it
        try:
            api(sock, "GET", "/v1/instances")
            break
        except (OSError, RuntimeError, http.client.HTTPException):
            if daemon.poll() is not None:
                raise RuntimeError(f"stewardd exited {daemon.returncode}; see {d}/stewardd.log")
            time.sleep(0.005)
    return daemon, sock, parent


def stop_everything(daemon, parent):
    """The daemon leaves instances running by design: kill it, then every instance through
    its cgroup, and remove the cgroups."""
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


def restart_daemon(sock):
    """Start a fresh stewardd on the same config as the one serving `sock` (after the old one
    died) and wait until its socket answers GET /v1/instances; returns (process, seconds)."""
    d = os.path.dirname(sock)
    log = open(os.path.join(d, "stewardd.log"), "a")
    t0 = time.monotonic()
    daemon = subprocess.Popen([STEWARDD, "--config", os.path.join(d, "stewardd.toml")], stdout=log, stderr=log)
    while True:
        try:
            api(sock, "GET", "/v1/instances")
            return daemon, time.monotonic() - t0
        except (OSError, RuntimeError, http.client.HTTPException):
            if daemon.poll() is not None:
                raise RuntimeError(f"stewardd exited {daemon.returncode} on restart")
            time.sleep(0.002)


def sleeper_spec(n, pidfile=False):
    if pidfile:
        proc = {"procName": "sleep", "startGracePeriod": 5,
                "pidFile": "${run_base_dir}/${namespace}.${processname}.${instanceid}/p.pid",
                "startCmd": "setsid sh -c 'echo $$ > ${pidFile}; exec sleep 100000' </dev/null >/dev/null 2>&1 &"}
    else:
        proc = {"procName": "sleep", "startGracePeriod": 0, "startCmd": "exec sleep 100000"}
    proc["workPath"] = "${work_base_dir}/${namespace}.${processname}.${instanceid}"
    return {"apiVersion": "v4", "kind": "process", "restartPolicy": {"policy": "Always", "interval": 0},
            "metadata": {"name": "sleeper", "namespace": "bench"},
            "spec": {"instance": n, "template": {"spec": {"processes": [proc]}}}}


def tasks_file(parent):
    """The count of every task in the daemon's instances (`parent`, the cgroup_parent
    start_daemon gave it; made by the first start): the v1 pids hierarchy's `pids.current`, or
    on a v2 `cgroup_root` (STEWARD_BENCH_CONF) the v2 one's where that tree has the pids
    controller. None where there is no such file (a v2 tree without pids, as on this hybrid
    host's unified mount): the instances are not in the v1 hierarchies then, and a v1 count
    would never reach N."""
    conf = os.environ.get("STEWARD_BENCH_CONF", "").replace("\\n", "\n")
    root = next((l.split("=", 1)[1].strip().strip('"') for l in conf.splitlines()
                 if l.strip().startswith("cgroup_root")), None)
    if root is not None:
        try:
            has_pids = "pids" in open(os.path.join(root, "cgroup.subtree_control")).read().split()
        except OSError:
            has_pids = False
        return os.path.join(root, parent, "pids.current") if has_pids else None
    return f"/sys/fs/cgroup/pids/{parent}/pids.current" if os.path.isdir("/sys/fs/cgroup/pids") else None


def running_by_count(path, n, t0, limit=120):
    """Seconds from t0 until `path` (a pids.current) counts N tasks: one small file a poll, the
    same cost at every N (the children lists cost the poller O(N) a poll, 1.6 s of the two
    cores' CPU over a burst of 5,000: docs/performance.md, issue 48's fourth step). Raises
    after `limit` seconds rather than wait for ever on a count that is not the instances'."""
    while True:
        try:
            if int(open(path).read()) >= n:
                return time.monotonic() - t0
        except FileNotFoundError:  # before the first start made the daemon's cgroup
            pass
        if time.monotonic() - t0 > limit:
            raise RuntimeError(f"{path} did not count {n} tasks within {limit} s")
        time.sleep(0.001)


def deploy(daemon, sock, n, pidfile=False):
    """Apply N sleepers; returns seconds until all N main processes are children of the daemon
    (directly, or reparented to it), then waits for the daemon to settle (all Running)."""
    t0 = time.monotonic()
    api(sock, "POST", "/v1/apply", json.dumps(sleeper_spec(n, pidfile)).encode())
    while len(children(daemon.pid)) < n:
        time.sleep(0.001)
    return settle(sock, n, time.monotonic() - t0)


def deploy_counted(sock, n, parent):
    """Apply N foreground sleepers; returns seconds until the pids hierarchy counts N tasks in
    the instances' cgroups (None without a v1 pids hierarchy), then waits for all Running. A
    sleeper joins its cgroup after its clone and before its exec: the same moment, within the
    join, as a child showing in the daemon's children list."""
    path = tasks_file(parent)
    if path is None:
        return None
    t0 = time.monotonic()
    api(sock, "POST", "/v1/apply", json.dumps(sleeper_spec(n)).encode())
    return settle(sock, n, running_by_count(path, n, t0))


def settle(sock, n, t_all):
    """Returns t_all once the daemon settled (all Running, committed), or after 30 s."""
    # Let the daemon settle (Running transitions committed) before measuring respawns.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = api(sock, "GET", "/v1/instances?state=Running")["instances"]
        if len(states) == n:
            break
        time.sleep(0.05)
    time.sleep(1)
    return t_all


def own_cgroup_procs(pid):
    """The `cgroup.procs` of the cgroup `pid` is in (its instance's own): the v1 pids one, or
    the v2 one where the pids hierarchy has it at its root (a run on a hybrid host's v2 tree,
    STEWARD_BENCH_CONF with cgroup_root = "/sys/fs/cgroup/unified"); None if neither."""
    v2 = None
    for line in open(f"/proc/{pid}/cgroup"):
        hierarchy, ctl, path = line.rstrip("\n").split(":", 2)
        if "pids" in ctl.split(",") and path != "/":
            return f"/sys/fs/cgroup/pids{path}/cgroup.procs"
        if hierarchy == "0" and path != "/":
            mount = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
            v2 = f"{mount}{path}/cgroup.procs"
    return v2


def kill_and_time(daemon_pid, k, replaced):
    """kill -9 one of the daemon's children K times; seconds until `replaced(victim)` (sorted),
    or None when it returns None for a victim (nothing to poll)."""
    lat = []
    for i in range(k):
        before = sorted(children(daemon_pid))
        victim = before[i % len(before)]
        done = replaced(victim)
        if done is None:
            return None
        t1 = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        while not done():
            time.sleep(0.0002)
        lat.append(time.monotonic() - t1)
        time.sleep(0.05)
    lat.sort()
    return lat


def respawn_latencies_by_cgroup(daemon_pid, k):
    """Respawn latencies polled by the victim's own cgroup: until it holds a new process. One
    small list a poll, as peer_s6.py polls the one supervisor of its victim (the children of
    the daemon are every instance's). The new process shows there once it joined the cgroup,
    after its clone and before its exec."""
    def replaced(victim):
        procs = own_cgroup_procs(victim)
        if procs is None:
            return None

        def done():
            now = open(procs).read().split()
            return bool(now) and str(victim) not in now
        return done
    return kill_and_time(daemon_pid, k, replaced)


def respawn_latencies(daemon_pid, n, k):
    """Respawn latencies polled by the daemon's children: until the victim is gone and N
    children are back."""
    def replaced(victim):
        def done():
            now = children(daemon_pid)
            return victim not in now and len(now) == n
        return done
    return kill_and_time(daemon_pid, k, replaced)


# The tracepoints a respawn is timed by: the victim's exit, the daemon's reaping call and its
# next clone (bench/respawn_timeline.py, bench/ab_respawn.py).
RESPAWN_EVENTS = ("sched:sched_process_exit,syscalls:sys_enter_wait4,syscalls:sys_enter_waitid,"
                  "syscalls:sys_enter_clone")


def perf_rows(data):
    """(pid, seconds, event name) of each sample in the `perf record` file `data`, in order."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "pid,time,event"],
                         capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+):\s+(\S+):", line)
        if m:
            rows.append((int(m.group(1)), float(m.group(2)), m.group(3)))
    return rows


def respawn_spans(rows, daemon_pid, victims, window=0.05):
    """From perf_rows of RESPAWN_EVENTS: for each exit of a pid in `victims`, the daemon's
    first reaping call after it and its next clone within `window` seconds. Returns the lists
    of seconds "exit -> reap", "reap -> clone" and "exit -> clone" (respawns not found within
    the window are left out)."""
    victims = set(victims)
    spans = {"exit -> reap": [], "reap -> clone": [], "exit -> clone": []}
    for i, (pid, t0, event) in enumerate(rows):
        if event != "sched:sched_process_exit" or pid not in victims:
            continue
        reaped = None
        for pid2, t, event2 in rows[i + 1:]:
            if t - t0 > window:
                break
            if pid2 != daemon_pid:
                continue
            if reaped is None and event2 in ("syscalls:sys_enter_wait4", "syscalls:sys_enter_waitid"):
                reaped = t
            elif reaped is not None and event2 == "syscalls:sys_enter_clone":
                spans["exit -> reap"].append(reaped - t0)
                spans["reap -> clone"].append(t - reaped)
                spans["exit -> clone"].append(t - t0)
                break
    return spans


def p99(lat):
    return lat[max(0, int(len(lat) * 0.99) - 1)]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    N = int(args[0]) if args else 500
    K = int(args[1]) if len(args) > 1 else 50
    PIDFILE = "--pidfile" in sys.argv
    daemon, sock, parent = start_daemon("steward-bench-")
    t_all = deploy(daemon, sock, N, PIDFILE)
    lat = respawn_latencies(daemon.pid, N, K)
    rss = rss_mib(daemon.pid)
    mode = "pidfile" if PIDFILE else "foreground"
    print(f"steward({mode}) N={N}: all-running {t_all*1000:.0f} ms; respawn p50 {statistics.median(lat)*1000:.2f} ms "
          f"p99 {p99(lat)*1000:.2f} ms; RSS {rss:.1f} MiB")
    stop_everything(daemon, parent)


if __name__ == "__main__":
    main()
