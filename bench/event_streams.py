#!/usr/bin/env python3
"""The daemon's memory under a flood of event streams that never read (issue 51, finding 5).

usage: event_streams.py STEWARDD [EVENTS] [STREAMS]
    STEWARDD  the daemon binary (to compare two builds, run this once with each)
    EVENTS    events put in the journal first (default 5000: secrets created, one event each)
    STREAMS   `GET /v1/events?since=0` streams opened as root and left unread (default 300)

Prints the daemon's RSS before and with the streams held, and how many streams it refused
(429: connections.max_streams). Everything on a unix socket in a temporary directory.
"""
import os, socket, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from steward_bench import UnixHTTP, rss_mib  # noqa: E402


def main():
    stewardd = sys.argv[1]
    events = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    streams = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    d = tempfile.mkdtemp(prefix="steward-event-streams-")
    os.chmod(d, 0o755)
    sock = os.path.join(d, "stewardd.sock")
    conf = os.path.join(d, "stewardd.toml")
    with open(conf, "w") as f:
        f.write(f'work_base_dir = "{d}/work"\nrun_base_dir = "{d}/run"\nstate_dir = "{d}/state"\n'
                f'socket = "{sock}"\ncgroup_parent = "steward-event-streams-{os.getpid()}"\nhost_ip = "127.0.0.1"\n'
                '[events]\nretention = 1000000\n')
    log = open(os.path.join(d, "stewardd.log"), "w")
    daemon = subprocess.Popen([stewardd, "--config", conf], stdout=log, stderr=log, env={**os.environ, "STEWARD_LOG": "warn"})
    try:
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        time.sleep(0.3)
        c = UnixHTTP(sock)
        body = '{"data": {"k": "' + "v" * 100 + '"}}'
        for i in range(events):
            c.request("PUT", f"/v1/secrets/bench/s{i}", body=body, headers={"content-type": "application/json"})
            r = c.getresponse()
            r.read()
            if r.status >= 300:
                sys.exit(f"PUT secret: {r.status}")
        c.close()
        time.sleep(1)
        before = rss_mib(daemon.pid)
        held, refused, other = [], 0, 0
        for _ in range(streams):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(sock)
            s.sendall(b"GET /v1/events?since=0 HTTP/1.1\r\nHost: x\r\n\r\n")
            status = s.recv(64).split(b"\r\n")[0]
            if b" 200 " in status:
                held.append(s)
            elif b" 429 " in status:
                refused += 1
                s.close()
            else:
                other += 1
                s.close()
        time.sleep(3)
        during = rss_mib(daemon.pid)
        fds = len(os.listdir(f"/proc/{daemon.pid}/fd"))
        print(f"{os.path.basename(stewardd)}: {events} events; RSS {before:.1f} MiB before, {during:.1f} MiB with "
              f"{len(held)} unread streams held ({refused} refused 429, {other} other), {fds} descriptors")
        for s in held:
            s.close()
    finally:
        daemon.terminate()
        daemon.wait()


if __name__ == "__main__":
    main()
