#!/usr/bin/env python3
"""What probing costs the daemon (issue 17): N instances each with an HTTP readiness probe and a
TCP liveness probe at period 1 s, against one keep-alive HTTP server on 127.0.0.1; the daemon's
CPU (utime+stime from /proc, % of one core) over a window once all are Ready, beside the same N
without probes.

usage: python3 bench/probe_cost.py [N] [--secs S]     (default N=1000, S=60; release build)
"""
import asyncio, json, os, sys, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from steward_bench import api, start_daemon, stop_everything, rss_mib  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
ARGS = [a for a in sys.argv[1:]]
N = int(ARGS[0]) if ARGS and not ARGS[0].startswith("--") else 1000
SECS = float(ARGS[ARGS.index("--secs") + 1]) if "--secs" in ARGS else 60.0


def serve_forever():
    """A keep-alive HTTP/1.1 server answering 200 to every request; returns its port."""
    ready = threading.Event()
    port = {}
    counter = {"requests": 0}

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                counter["requests"] += 1
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
        port["port"] = server.sockets[0].getsockname()[1]
        ready.set()
        async with server:
            await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    ready.wait()
    return port["port"], counter


def spec(n, port, probes):
    proc = {"procName": "sleep", "startGracePeriod": 0, "startCmd": "exec sleep 100000",
            "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}"}
    if probes:
        proc["probe"] = {
            "readiness": {"handler": {"type": "HTTP", "method": {"port": port, "path": "/ready"}}, "period": 1},
            "liveness": {"handler": {"type": "TCP", "method": {"port": port}}, "period": 1},
        }
    return {"apiVersion": "v4", "kind": "process", "restartPolicy": {"policy": "Always", "interval": 0},
            "metadata": {"name": "probed" if probes else "plain", "namespace": "bench"},
            "spec": {"instance": n, "template": {"spec": {"processes": [proc]}}}}


def cpu_ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def measure(n, port, counter, probes):
    daemon, sock, parent = start_daemon(f"probecost-{'p' if probes else 'n'}-")
    try:
        api(sock, "POST", "/v1/apply", json.dumps(spec(n, port, probes)).encode())
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            lst = api(sock, "GET", "/v1/instances")["instances"]
            if sum(1 for s in lst if s["state"]["state"] == "Running" and s.get("ready")) == n:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("not all ready within 120 s")
        time.sleep(5)  # let the start burst pass
        before_req, a = counter["requests"], cpu_ticks(daemon.pid)
        time.sleep(SECS)
        cpu = (cpu_ticks(daemon.pid) - a) / TICK / SECS * 100
        rate = (counter["requests"] - before_req) / SECS
        lst = api(sock, "GET", "/v1/instances")["instances"]
        restarts = sum(s["restarts"] for s in lst)
        ready = sum(1 for s in lst if s.get("ready"))
        return {"cpu": cpu, "http_per_s": rate, "rss": rss_mib(daemon.pid), "restarts": restarts, "ready": ready}
    finally:
        stop_everything(daemon, parent)


def main():
    port, counter = serve_forever()
    plain = measure(N, port, counter, False)
    probed = measure(N, port, counter, True)
    print(f"N={N}, window {SECS:.0f} s, nproc={os.cpu_count()}")
    print("| instances | probes | daemon CPU % of one core | HTTP probes/s seen by the server | RSS MiB | restarts | ready |")
    print("|---|---|---|---|---|---|---|")
    for name, r in (("none", plain), ("HTTP readiness + TCP liveness, period 1 s", probed)):
        print(f"| {N} | {name} | {r['cpu']:.2f} | {r['http_per_s']:.0f} | {r['rss']:.1f} | {r['restarts']} | {r['ready']} |")
    print(f"probe cost: {probed['cpu'] - plain['cpu']:.2f} % of one core")


if __name__ == "__main__":
    main()
