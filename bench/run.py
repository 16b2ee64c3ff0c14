#!/usr/bin/env python3
"""One command, side by side: Steward (foreground and pidfile instances), supervisord, s6, runit
and the fork/exec floor supervising N `sleep`s, N in {100, 500, 1000, 2000}, and Steward and the
floor at N=5000 (the other peers' scripts take minutes there).

usage: python3 bench/run.py [--quick] [--ns 100,500] [--idle-at N] [--idle-secs S] [--big N]
  --quick      N=100 only, 10 kills, 10 s idle CPU window, no N=5000 (smoke run)
Writes bench/results/results.md and bench/results/chart.png.

Peers are measured by /work/shared/bench/{peer_supervisord,peer_s6,limit_spawn}.py (run as is, their
one-line output parsed). Steward uses bench/steward_bench.py's functions (same method). Besides, by
polls that cost the same at every N (the targets read these): all-running counted in a pids cgroup
(Steward foreground, and s6 by bench/peer_counted.py), and Steward's respawn polled by the victim's
own cgroup.
Idle CPU (utime+stime from /proc/PID/stat over the window, % of one core) is measured for the
Steward daemon (foreground instances) and for supervisord, at --idle-at N only (default 500)."""
import json, os, platform, re, shutil, signal, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from steward_bench import (api, children, start_daemon, stop_everything, rss_mib, deploy,  # noqa: E402
                           deploy_counted, respawn_latencies, respawn_latencies_by_cgroup, restart_daemon, p99,
                           ROOT)
from api_latency import timed  # noqa: E402

SHARED = "/work/shared/bench"
STEWARD = os.path.join(ROOT, "target/release/steward")
RESULTS = os.path.join(HERE, "results")
TICK = os.sysconf("SC_CLK_TCK")


def opt(name, default):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


QUICK = "--quick" in sys.argv
NS = [int(x) for x in opt("--ns", "100" if QUICK else "100,500,1000,2000").split(",")]
IDLE_AT = int(opt("--idle-at", "100" if QUICK else "1000"))
BIG = int(opt("--big", "0" if QUICK else "5000"))
IDLE_SECS = float(opt("--idle-secs", "10" if QUICK else "60"))
SETTLE_SECS = 5.0


def kills(n):
    return 10 if QUICK else (30 if n >= 2000 else 50)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def cpu_ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])  # utime, stime (fields 14, 15)


def idle_cpu(pid, secs):
    a = cpu_ticks(pid)
    time.sleep(secs)
    return (cpu_ticks(pid) - a) / TICK / secs * 100


def num(pat, line):
    m = re.search(pat, line)
    return float(m.group(1)) if m else None


def run_peer(script, n, k, *extra):
    out = subprocess.run([sys.executable, os.path.join(SHARED, script), str(n), str(k), *extra],
                         capture_output=True, text=True, timeout=900)
    line = (out.stdout.strip().splitlines() or [""])[-1]
    log("  ", line or out.stderr[-500:])
    return {"all_ms": num(r"all-running ([\d.]+) ms", line), "p50": num(r"p50 ([\d.]+) ms", line),
            "p99": num(r"p99 ([\d.]+) ms", line), "rss": num(r"RSS ([\d.]+) MiB", line), "raw": line}


def supervisord_idle(n, secs):
    """Our own supervisord (same config as peer_supervisord.py) just to read its idle CPU."""
    d = tempfile.mkdtemp(prefix="peer-sup-idle-")
    conf = os.path.join(d, "supervisord.conf")
    with open(conf, "w") as f:
        f.write(f"[unix_http_server]\nfile={d}/sup.sock\n[supervisord]\nlogfile={d}/sup.log\n"
                f"pidfile={d}/sup.pid\nnodaemon=true\nminfds=4096\n[rpcinterface:supervisor]\n"
                "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n")
        for i in range(n):
            f.write(f"[program:p{i}]\ncommand=/bin/sleep 100000\nstartsecs=0\nautorestart=true\n"
                    "stdout_logfile=NONE\nstderr_logfile=NONE\n")
    sup = subprocess.Popen(["supervisord", "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while len(children(sup.pid)) < n:
        time.sleep(0.01)
    time.sleep(2)
    pct = idle_cpu(sup.pid, secs)
    sup.send_signal(signal.SIGTERM)
    sup.wait(timeout=120)
    shutil.rmtree(d, ignore_errors=True)
    return pct


def pids_by_id(sock):
    return {json.dumps(i["id"], sort_keys=True): i.get("pid") for i in api(sock, "GET", "/v1/instances")["instances"]}


def cli_ls(sock, count):
    lat = []
    for _ in range(count):
        t = time.perf_counter()
        r = subprocess.run([STEWARD, "--socket", sock, "ls"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        lat.append((time.perf_counter() - t) * 1000)
        if r.returncode != 0:
            log("   steward ls failed:", r.stderr.decode()[-300:])
            return None
    return statistics.median(sorted(lat))


def run_steward(n, k, pidfile, idle):
    mode = "pidfile" if pidfile else "foreground"
    daemon, sock, parent = start_daemon(f"steward-{mode[:2]}{n}-")
    r = {}
    try:
        # Per instance: the daemon's CPU for the whole start, and its memory beyond an empty one.
        time.sleep(0.5)
        rss_empty, cpu_before = rss_mib(daemon.pid), cpu_ticks(daemon.pid)
        r["all_ms"] = deploy(daemon, sock, n, pidfile) * 1000
        r["cpu_us_per_start"] = (cpu_ticks(daemon.pid) - cpu_before) / TICK / n * 1e6
        if k:
            lat = respawn_latencies(daemon.pid, n, k)
            r["p50"], r["p99"] = statistics.median(lat) * 1000, p99(lat) * 1000
        r["rss_now"] = rss_mib(daemon.pid)
        # Steady state: Steward hands memory freed by a burst back after a quiet tick.
        time.sleep(SETTLE_SECS)
        r["rss"] = rss_mib(daemon.pid)
        r["rss_bytes_per_instance"] = (r["rss"] - rss_empty) * 1024 * 1024 / n
        if idle:
            time.sleep(1)
            r["idle_cpu"] = idle_cpu(daemon.pid, IDLE_SECS)
        r["ls_p50"], r["ls_p99"] = timed(sock, lambda i: "/v1/instances", 20 if QUICK else 50)
        r["cli_ls_p50"] = cli_ls(sock, 5 if QUICK else 10)
        # Daemon restart with N running: kill -9, start again, time until the socket answers.
        before = pids_by_id(sock)
        daemon.kill()
        daemon.wait()
        daemon, secs = restart_daemon(sock)
        r["restart_ms"] = secs * 1000
        after_now = pids_by_id(sock)
        time.sleep(2)
        after = pids_by_id(sock)
        changed = {i for i, p in before.items() if after_now.get(i) != p or after.get(i) != p}
        r["restarted"] = len(changed)
    finally:
        stop_everything(daemon, parent)
    log(f"   steward({mode}) N={n}: " + ", ".join(f"{a}={b:.2f}" if isinstance(b, float) else f"{a}={b}"
                                                  for a, b in r.items()))
    return r


def run_steward_counted(n, k):
    """Foreground instances measured by polls that cost the same at every N, as the floor polls
    nothing: all-running by the pids hierarchy's count of the instances' tasks, respawn by the
    victim's own cgroup (as peer_s6.py polls its victim's one supervisor)."""
    daemon, sock, parent = start_daemon(f"steward-ct{n}-")
    r = {}
    try:
        time.sleep(0.5)
        t = deploy_counted(sock, n, parent)
        r["all_counted_ms"] = t and t * 1000
        lat = respawn_latencies_by_cgroup(daemon.pid, k) if k and t else None
        if lat:
            r["p50_own"], r["p99_own"] = statistics.median(lat) * 1000, p99(lat) * 1000
    finally:
        stop_everything(daemon, parent)
    log(f"   steward(counted) N={n}: " + ", ".join(f"{a}={b:.2f}" for a, b in r.items() if b is not None))
    return r


def s6_counted(n):
    out = subprocess.run([sys.executable, os.path.join(HERE, "peer_counted.py"), str(n)],
                         capture_output=True, text=True, timeout=900)
    line = (out.stdout.strip().splitlines() or [""])[-1]
    log("  ", line or out.stderr[-500:])
    return num(r"all-running ([\d.]+) ms", line)


def machine():
    mem = [l for l in open("/proc/meminfo") if l.startswith("MemTotal")][0].split()[1]
    return {"nproc": os.cpu_count(), "mem": f"{int(mem) / 1024 / 1024:.1f} GiB", "kernel": platform.release(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")}


def fmt(v, d=1):
    return "n/a" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else str(v))


def write_md(rows, m, elapsed):
    cols = ["system", "N", "K kills", "all-running ms", "all-running ms (counted)", "respawn p50 ms", "respawn p99 ms",
            "respawn p50 ms (own cgroup)", "RSS just after kills MiB",
            f"daemon RSS MiB (settled {SETTLE_SECS:.0f} s)",
            f"idle CPU % of 1 core ({IDLE_SECS:.0f}s)", "ls p50 ms (API)", "ls p99 ms (API)", "`steward ls` p50 ms (CLI)",
            "daemon restart ms", "workloads restarted", "daemon CPU µs per start", "RSS bytes per instance"]
    out = [f"# Steward vs supervisord vs fork/exec floor{' (quick smoke run)' if QUICK else ''}", "",
           f"Machine: nproc={m['nproc']}, memory {m['mem']}, kernel {m['kernel']}, CPU {m['cpu']}; run {m['date']} "
           f"(took {elapsed / 60:.1f} min).", "",
           "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join([r["system"], str(r["n"]), str(r["k"]), fmt(r.get("all_ms"), 0),
                                      fmt(r.get("all_counted_ms"), 0), fmt(r.get("p50"), 2), fmt(r.get("p99"), 2),
                                      fmt(r.get("p50_own"), 2),
                                      fmt(r.get("rss_now", r.get("rss"))),
                                      fmt(r.get("rss") if r["system"].startswith("steward") else None),
                                      fmt(r.get("idle_cpu"), 3), fmt(r.get("ls_p50"), 2), fmt(r.get("ls_p99"), 2),
                                      fmt(r.get("cli_ls_p50"), 1), fmt(r.get("restart_ms"), 0),
                                      fmt(r.get("restarted")), fmt(r.get("cpu_us_per_start"), 0),
                                      fmt(r.get("rss_bytes_per_instance"), 0)]) + " |")
    out += ["", "Notes:",
            "- all-running / respawn: time until N (resp. the killed one's replacement, back to N) are children of the "
            "daemon (`/proc/PID/task/*/children`), kill -9 of one child at a time, restartPolicy Always interval 0 "
            "(supervisord: autorestart=true, startsecs=0). Peers as printed by /work/shared/bench scripts.",
            "- all-running (counted): polled by one small file whatever N (the children lists above cost the poller "
            "O(N) a poll, and at 2,000-5,000 the poller takes a core's share of the burst): Steward foreground by its "
            "instances' task count in the v1 pids hierarchy (a separate daemon, bench/steward_bench.py "
            "deploy_counted); s6 by bench/peer_counted.py (s6-svscan in a pids cgroup of its own, 2N+1 tasks); the "
            "floor times its own spawns and polls nothing (its figure repeated). The targets against the floor use it.",
            "- respawn p50 (own cgroup): Steward foreground polled by the victim's own cgroup.procs (one small list, "
            "as peer_s6.py polls the victim's one supervisor); the new process shows there after its clone and "
            "before its exec. The targets against s6 and the floor use it.",
            "- s6 / runit = peer_s6.py (s6-svscan with one s6-supervise per service; runsvdir with one runsv per "
            "service, at most 1000); their RSS is the PSS sum of the whole supervision tree.",
            "- per start / per instance (Steward): the daemon's utime+stime while the N started, divided by N; "
            "its settled RSS minus its RSS before the apply, divided by N.",
            "- floor = limit_spawn.py (posix_spawn + pidfd + epoll in one Python process); it prints no p99; its RSS is "
            "that Python process's. supervisord/floor have no API, no restart-with-adoption: n/a.",
            f"- idle CPU: daemon utime+stime over {IDLE_SECS:.0f} s with N running, only at N={IDLE_AT} "
            "(Steward foreground daemon and a separate supervisord started with the same config as the peer script).",
            f"- RSS: VmRSS. Just after kills: right after the last respawn (peers: as their scripts print it). Settled: "
            f"Steward's again {SETTLE_SECS:.0f} s later, with N running and nothing happening; glibc keeps memory freed "
            "by the start burst until the daemon's trimmer hands it back after a quiet tick (src/daemon/memory.rs). "
            "The RSS targets are checked on the settled figure.",
            "- ls (API): GET /v1/instances, one connection per request (as bench/api_latency.py); CLI: wall time of "
            "`target/release/steward --socket SOCK ls` (process start included).",
            "- daemon restart: kill -9 stewardd, start it again on the same config/state, time until GET /v1/instances "
            "answers (it answers only after re-adoption); workloads restarted = instances whose pid changed "
            "(checked at that moment and 2 s later)."]
    for r in rows:
        if r.get("raw"):
            out.append(f"- raw: `{r['raw']}`")
    out += targets(rows)
    open(os.path.join(RESULTS, "results.md"), "w").write("\n".join(out) + "\n")


def chart(rows):
    path = os.path.join(RESULTS, "chart.png")
    systems = list(dict.fromkeys(r["system"] for r in rows))
    ns = sorted({r["n"] for r in rows})
    get = {(r["system"], r["n"]): r for r in rows}
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    w = 0.8 / len(systems)
    for ax, key, title in zip(axes, ["all_ms", "p50", "rss"],
                              ["time until all N running (ms)", "kill -9 -> respawn p50 (ms)", "daemon RSS (MiB; Steward settled)"]):
        for j, s in enumerate(systems):
            vals = [(get.get((s, n)) or {}).get(key) or 0 for n in ns]
            ax.bar([i + j * w for i in range(len(ns))], vals, w, label=s)
        ax.set_xticks([i + w * (len(systems) - 1) / 2 for i in range(len(ns))])
        ax.set_xticklabels([f"N={n}" for n in ns])
        ax.set_yscale("log")
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def targets(rows):
    """Issue 48's targets (over issue 6's and 23's), checked against this run's figures."""
    get = {(r["system"], r["n"]): r for r in rows}
    fg = lambda n: get.get(("steward (foreground)", n)) or {}
    floor = lambda n: get.get(("floor (posix_spawn+pidfd)", n)) or {}
    out = ["", "Targets (this run):", ""]

    def check(what, value, limit, ok):
        if value is not None and limit is not None:
            out.append(f"- {what}: {value:.2f} vs {limit:.2f} — {'met' if ok(value, limit) else 'MISSED'}")

    pid = lambda n: get.get(("steward (pidfile)", n)) or {}
    s6 = lambda n: get.get(("s6", n)) or {}
    for n in sorted({r["n"] for r in rows if r["system"] == "steward (foreground)"}):
        f = floor(n).get("all_ms")
        check(f"all-Running at N={n} (ms, counted) within 1.3x the floor", fg(n).get("all_counted_ms"),
              f and f * 1.3, lambda v, l: v <= l)
    for n in sorted({r["n"] for r in rows if r["system"] == "steward (pidfile)"}):
        f = fg(n).get("all_ms")
        check(f"pidfile all-Running at N={n} (ms) within 1.2x foreground", pid(n).get("all_ms"), f and f * 1.2,
              lambda v, l: v <= l)
    for n in (500, 2000):
        f = floor(n).get("p50")
        check(f"respawn p50 (foreground, N={n}, own cgroup) ms within 1.5x the floor", fg(n).get("p50_own"),
              f and f * 1.5, lambda v, l: v <= l)
    for n in sorted({r["n"] for r in rows if r["system"] == "s6" and r.get("p50") is not None}):
        check(f"respawn p50 (foreground, N={n}, own cgroup) ms no slower than s6's", fg(n).get("p50_own"),
              s6(n).get("p50"), lambda v, l: v <= l)
    check("RSS at N=500 MiB <= 15", fg(500).get("rss"), 15.0, lambda v, l: v <= l)
    check(f"RSS at N={BIG} MiB <= 40", fg(BIG).get("rss"), 40.0, lambda v, l: v <= l)
    check("idle CPU at N=1000, % of a core <= 1", fg(1000).get("idle_cpu"), 1.0, lambda v, l: v <= l)
    check("re-adoption of N=1000 ms <= 1000", fg(1000).get("restart_ms"), 1000.0, lambda v, l: v <= l)
    check("workloads restarted by a daemon restart at N=1000 (= 0)", fg(1000).get("restarted"), 0,
          lambda v, l: v == l)
    return out


def main():
    # Always the current code (incremental: quick when nothing changed; waits on cargo's lock).
    subprocess.run(["cargo", "build", "--release", "--bin", "stewardd", "--bin", "steward"], cwd=ROOT, check=True)
    assert shutil.which("supervisord"), "apt-get install -y supervisor"
    os.makedirs(RESULTS, exist_ok=True)
    t0 = time.monotonic()
    rows = []
    for n in NS:
        k = kills(n)
        idle = n == IDLE_AT
        log(f"== N={n} K={k}")
        r = run_steward(n, k, False, idle)
        r.update(run_steward_counted(n, k))
        rows.append(dict(r, system="steward (foreground)", n=n, k=k))
        r = run_steward(n, k, True, False)
        rows.append(dict(r, system="steward (pidfile)", n=n, k=k))
        r = run_peer("peer_supervisord.py", n, k)
        if idle:
            r["idle_cpu"] = supervisord_idle(n, IDLE_SECS)
            log(f"   supervisord idle CPU {r['idle_cpu']:.3f}%")
        rows.append(dict(r, system="supervisord", n=n, k=k))
        for peer, flag in (("s6", None), ("runit", "--runit")):
            if shutil.which("s6-svscan" if peer == "s6" else "runsvdir"):
                r = run_peer("peer_s6.py", n, k, *([flag] if flag else []))
                if peer == "s6":
                    r["all_counted_ms"] = s6_counted(n)
                if r["all_ms"] is not None:
                    rows.append(dict(r, system=peer, n=n, k=k))
        r = run_peer("limit_spawn.py", n, k)
        r["all_counted_ms"] = r["all_ms"]  # it times its own spawns: no poll to count
        rows.append(dict(r, system="floor (posix_spawn+pidfd)", n=n, k=k))
        write_md(rows, machine(), time.monotonic() - t0)  # partial results survive an abort
        chart(rows)
    if BIG:
        log(f"== N={BIG}: Steward only (RSS, re-adoption)")
        r = run_steward(BIG, 0, False, False)
        r.update(run_steward_counted(BIG, 0))
        rows.append(dict(r, system="steward (foreground)", n=BIG, k=0))
        # One kill: limit_spawn.py takes the median of its respawns (none would fail it, and its
        # sleeps, holding the output pipe, would keep this waiting).
        r = run_peer("limit_spawn.py", BIG, 1)
        r["all_counted_ms"] = r["all_ms"]
        rows.append(dict(r, system="floor (posix_spawn+pidfd)", n=BIG, k=1))
    write_md(rows, machine(), time.monotonic() - t0)
    chart(rows)
    print(open(os.path.join(RESULTS, "results.md")).read())


if __name__ == "__main__":
    main()
