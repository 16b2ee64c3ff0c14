#!/usr/bin/env python3
"""Soak: N instances in a crash loop (`exec sleep 1`, restartPolicy Always, interval 0) for T
minutes against a release stewardd with its own state_dir; every 10 s it samples the state size
(du of state_dir, size of steward.redb), the daemon's RSS, CPU, open fds, and the event and
restart rates. Issue 32: the store must stay bounded while the journal prunes.

usage: bench/soak.sh (installs matplotlib) or python3 bench/soak.py [--n 200] [--minutes 30] [--every 10] [--bin DIR] [--name soak]
                             [--events-toml '[events]\\nretention = 5000']
  --bin   directory holding stewardd (default target/release)
  --name  output base name: bench/results/NAME.md, NAME.png, NAME.json
  --redraw NAME   only redraw NAME.png from NAME.json
Writes a table and a chart under bench/results/. Bytes per restart: the mean compact JSON size
of the newest 2000 event bodies times events per restart (journal only; the instance record
rewritten at each commit is not counted)."""
import json, os, signal, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import steward_bench  # noqa: E402
from steward_bench import api, start_daemon, stop_everything, ROOT, UnixHTTP  # noqa: E402

RESULTS = os.path.join(HERE, "results")
TICK = os.sysconf("SC_CLK_TCK")


def opt(name, default):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


N = int(opt("--n", "200"))
MINUTES = float(opt("--minutes", "30"))
EVERY = float(opt("--every", "10"))
BIN = opt("--bin", os.path.join(ROOT, "target/release"))
NAME = opt("--name", "soak")
EVENTS_TOML = opt("--events-toml", "").replace("\\n", "\n")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def cpu_secs(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK  # utime, stime (fields 14, 15)


def rss_mib(pid):
    return int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1]) / 1024


def du_mib(path):
    return int(subprocess.check_output(["du", "-sk", path]).split()[0]) / 1024


def crash_spec(n):
    proc = {"procName": "crash", "startGracePeriod": 0, "startCmd": "exec sleep 1",
            "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}"}
    return {"apiVersion": "v4", "kind": "process", "restartPolicy": {"policy": "Always", "interval": 0},
            "metadata": {"name": "crash", "namespace": "soak"},
            "spec": {"instance": n, "template": {"spec": {"processes": [proc]}}}}


def restarts(sock):
    return sum(i.get("restarts", 0) for i in api(sock, "GET", "/v1/instances")["instances"])


def event_body_bytes(sock, last_seq, count=2000):
    """Mean compact JSON size of the newest `count` event bodies."""
    c = UnixHTTP(sock)
    c.request("GET", f"/v1/events?since={max(0, last_seq - count)}&follow=false")
    r = c.getresponse()
    sizes = []
    for line in r.read().decode().splitlines():
        ev = json.loads(line)
        if "body" in ev:
            sizes.append(len(json.dumps(ev["body"], separators=(",", ":"))))
    c.close()
    return sum(sizes) / len(sizes) if sizes else 0


def main():
    steward_bench.STEWARDD = os.path.join(BIN, "stewardd")
    daemon, sock, parent = start_daemon("steward-soak-")
    d = os.path.dirname(sock)
    if EVENTS_TOML:  # the config is written by start_daemon: restart on the extended one
        daemon.kill()
        daemon.wait()
        with open(os.path.join(d, "stewardd.toml"), "a") as f:
            f.write("\n" + EVENTS_TOML + "\n")
        daemon, _ = steward_bench.restart_daemon(sock)
    state = os.path.join(d, "state")
    redb = os.path.join(state, "steward.redb")
    log(f"soak: N={N} T={MINUTES} min, daemon {daemon.pid}, dir {d}")
    rows = []
    # SIGTERM (or ^C) cuts the run short: what was sampled is still written.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    ev_bytes = 0
    try:
        api(sock, "POST", "/v1/apply", json.dumps(crash_spec(N)).encode())
        t0 = time.monotonic()
        prev = None
        while True:
            now = time.monotonic() - t0
            try:
                node = api(sock, "GET", "/v1/node")["events"]
            except OSError as e:
                log(f"the daemon stopped answering at t={now:.0f} s ({e}); writing what was sampled")
                break
            sample = {"t": round(now), "du_mib": du_mib(state), "file_mib": os.path.getsize(redb) / 2**20,
                      "rss_mib": rss_mib(daemon.pid), "cpu_s": cpu_secs(daemon.pid),
                      "fds": len(os.listdir(f"/proc/{daemon.pid}/fd")), "last_seq": node["lastSeq"],
                      "first_seq": node["firstSeq"], "journal_mib": node.get("bytes", 0) / 2**20,
                      "restarts": restarts(sock), "mono": time.monotonic()}
            if prev:
                dt = sample["mono"] - prev["mono"]
                dr = sample["restarts"] - prev["restarts"]
                sample["events_s"] = (sample["last_seq"] - prev["last_seq"]) / dt
                sample["restarts_s"] = dr / dt
                sample["cpu_pct"] = (sample["cpu_s"] - prev["cpu_s"]) / dt * 100
                sample["cpu_ms_restart"] = (sample["cpu_s"] - prev["cpu_s"]) * 1000 / dr if dr else None
            rows.append(sample)
            log(" ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in sample.items()
                         if k != "mono"))
            prev = sample
            if now >= MINUTES * 60:
                break
            time.sleep(max(0.0, EVERY - (time.monotonic() - t0 - now)))
        ev_bytes = event_body_bytes(sock, rows[-1]["last_seq"])
    except KeyboardInterrupt:
        log("interrupted: writing what was sampled")
    finally:
        stop_everything(daemon, parent)
    write(rows, ev_bytes)


def fmt(v, d=1):
    return "n/a" if v is None else f"{v:.{d}f}"


def write(rows, ev_bytes):
    os.makedirs(RESULTS, exist_ok=True)
    last = rows[-1]
    first_min = next((r for r in rows if r["t"] >= 60), rows[-1])
    span = [r for r in rows if "restarts_s" in r]
    total_r = last["restarts"] - rows[0]["restarts"]
    ev_per_restart = (last["last_seq"] - rows[0]["last_seq"]) / total_r if total_r else 0
    if not ev_bytes and last["journal_mib"]:  # events unreadable: the journal's own byte count
        ev_bytes = last["journal_mib"] * 2**20 / max(1, last["last_seq"] + 1 - last["first_seq"])
    cpu_ms = (last["cpu_s"] - rows[0]["cpu_s"]) * 1000 / total_r if total_r else None
    out = [f"# Soak: {N} instances in a crash loop for {MINUTES:g} min",
           "",
           f"`python3 bench/soak.py --n {N} --minutes {MINUTES:g}"
           + (f" --events-toml '{EVENTS_TOML.encode('unicode_escape').decode()}'" if EVENTS_TOML else "")
           + (f" --bin {BIN}" if BIN != os.path.join(ROOT, "target/release") else "")
           + (f" --name {NAME}" if NAME != "soak" else "") + "`, "
           f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, nproc={os.cpu_count()}.",
           "Each instance runs `exec sleep 1`, restartPolicy Always, interval 0.",
           "",
           "| t s | state du MiB | redb file MiB | journal MiB | lastSeq | firstSeq | events/s | restarts/s "
           "| RSS MiB | CPU % | CPU ms/restart | fds |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['t']} | {r['du_mib']:.1f} | {r['file_mib']:.1f} | {r['journal_mib']:.1f} | {r['last_seq']} "
                   f"| {r['first_seq']} | {fmt(r.get('events_s'), 0)} | {fmt(r.get('restarts_s'), 0)} "
                   f"| {r['rss_mib']:.1f} | {fmt(r.get('cpu_pct'))} | {fmt(r.get('cpu_ms_restart'), 2)} | {r['fds']} |")
    rss_after = [r["rss_mib"] for r in rows if r["t"] >= 60]
    out += ["",
            "Summary:",
            f"- restarts: {total_r} ({total_r / max(1, last['t']):.0f}/s), events per restart {ev_per_restart:.2f}, "
            f"mean event body {ev_bytes:.0f} B: **{ev_per_restart * ev_bytes:.0f} bytes of journal per restart**",
            f"- daemon CPU per restart: **{fmt(cpu_ms, 2)} ms** (utime+stime / restarts over the run)",
            f"- state dir: max {max(r['du_mib'] for r in rows):.1f} MiB, last {last['du_mib']:.1f} MiB; "
            f"redb file max {max(r['file_mib'] for r in rows):.1f} MiB",
            f"- RSS after the first minute {first_min['rss_mib']:.1f} MiB, max after it "
            f"{max(rss_after or [0]):.1f} MiB, last {last['rss_mib']:.1f} MiB",
            f"- fds min/max {min(r['fds'] for r in rows)}/{max(r['fds'] for r in rows)}",
            f"- restarts/s min/max after the first minute: "
            f"{fmt(min((r['restarts_s'] for r in span if r['t'] >= 60), default=None), 0)}/"
            f"{fmt(max((r['restarts_s'] for r in span if r['t'] >= 60), default=None), 0)}"]
    path = os.path.join(RESULTS, NAME)
    open(path + ".md", "w").write("\n".join(out) + "\n")
    json.dump(rows, open(path + ".json", "w"), indent=0)
    chart(rows, path + ".png")
    log("\n".join(out[-7:]))


def chart(rows, path):
    try:
        import matplotlib
    except ImportError:
        log("no matplotlib: chart skipped (bench/run.sh installs it)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = [r["t"] / 60 for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    axes[0].plot(t, [r["du_mib"] for r in rows], label="state dir (du)")
    axes[0].plot(t, [r["file_mib"] for r in rows], label="steward.redb size")
    axes[0].plot(t, [r["journal_mib"] for r in rows], label="event bodies")
    axes[0].set_title("state store (MiB)")
    axes[1].plot(t, [r["rss_mib"] for r in rows], color="tab:red", label="VmRSS")
    axes[1].set_title("daemon RSS (MiB)")
    axes[1].set_ylim(bottom=0)
    axes[2].plot(t, [r.get("restarts_s") for r in rows], label="restarts/s")
    axes[2].plot(t, [r.get("events_s") for r in rows], label="events/s")
    axes[2].plot(t, [r.get("cpu_pct") for r in rows], label="daemon CPU % of a core")
    axes[2].set_title("rates")
    for ax in axes:
        ax.set_xlabel("minutes")
        ax.legend(fontsize=8)
    axes[0].set_ylim(bottom=0)
    fig.suptitle(f"{N} instances in a crash loop")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    if "--from-log" in sys.argv:  # rebuild NAME's results from the samples a run logged
        rows = []
        for line in open(opt("--from-log", "")):
            if line.startswith("t="):
                r = {k: float(v) for k, v in (kv.split("=") for kv in line.split())}
                for k in ("t", "last_seq", "first_seq", "restarts", "fds"):
                    r[k] = int(r[k])
                rows.append(r)
        write(rows, 0)
    elif "--redraw" in sys.argv:
        base = os.path.join(RESULTS, opt("--redraw", NAME))
        chart(json.load(open(base + ".json")), base + ".png")
    else:
        main()
