#!/usr/bin/env python3
"""Two builds of Steward side by side, measured the same way as bench/run.py (all-running, kill -9
respawn p50/p99, RSS settled, API ls, daemon restart), turn about, so that the machine's drift
falls on both alike. For a refactor that must leave the figures within noise.

usage: python3 bench/compare.py BEFORE_DIR AFTER_DIR [--ns 100,500] [--reps 3] [--out FILE]
  BEFORE_DIR, AFTER_DIR: directories holding release `stewardd` and `steward` binaries
  (e.g. a worktree's target/release). Writes a Markdown table to --out (default stdout only).
Each rep runs before then after, alternating which goes first, at each N, foreground instances.
"""
import os, statistics, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# run.py reads its options from sys.argv at import: hand it the ones it knows only.
ARGS = sys.argv[1:]
sys.argv = [sys.argv[0], "--idle-secs", "1"]
import run  # noqa: E402
import steward_bench  # noqa: E402


def opt(name, default):
    return ARGS[ARGS.index(name) + 1] if name in ARGS else default


def use(bin_dir):
    """Points the measuring functions at the binaries in `bin_dir`."""
    steward_bench.STEWARDD = os.path.join(bin_dir, "stewardd")
    run.STEWARD = os.path.join(bin_dir, "steward")
    for b in (steward_bench.STEWARDD, run.STEWARD):
        assert os.access(b, os.X_OK), f"{b}: not an executable"


METRICS = [("all_ms", "all-running ms"), ("p50", "respawn p50 ms"), ("p99", "respawn p99 ms"),
           ("rss", "RSS settled MiB"), ("ls_p50", "ls p50 ms (API)"), ("restart_ms", "daemon restart ms"),
           ("restarted", "workloads restarted")]


def main():
    positional = [a for i, a in enumerate(ARGS) if not a.startswith("--") and (i == 0 or not ARGS[i - 1].startswith("--"))]
    before, after = positional[:2]
    ns = [int(x) for x in opt("--ns", "100,500").split(",")]
    reps = int(opt("--reps", "3"))
    results = {}  # (label, n) -> [run dicts]
    for rep in range(reps):
        order = [("before", before), ("after", after)]
        if rep % 2:
            order.reverse()
        for n in ns:
            for label, d in order:
                use(d)
                run.log(f"== rep {rep + 1}/{reps} N={n} {label}")
                r = run.run_steward(n, run.kills(n), False, False)
                results.setdefault((label, n), []).append(r)
    lines = [f"Machine: {run.machine()}", "",
             "| N | measure | before (median of runs) | after (median of runs) | change | before runs | after runs |",
             "|---|---|---|---|---|---|---|"]
    for n in ns:
        for key, name in METRICS:
            b = [r[key] for r in results[("before", n)] if r.get(key) is not None]
            a = [r[key] for r in results[("after", n)] if r.get(key) is not None]
            if not b or not a:
                continue
            mb, ma = statistics.median(b), statistics.median(a)
            change = f"{(ma - mb) / mb * 100:+.0f}%" if mb else "n/a"
            fmt = lambda xs: " ".join(f"{x:.2f}" if isinstance(x, float) else str(x) for x in xs)  # noqa: E731
            lines.append(f"| {n} | {name} | {mb:.2f} | {ma:.2f} | {change} | {fmt(b)} | {fmt(a)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if "--out" in ARGS:
        with open(opt("--out", ""), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
