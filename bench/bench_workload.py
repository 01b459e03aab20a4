"""Workload benchmark: prefix levels and group counts, the one-pass closed form against the old code path,
measured side by side in one run (each case a fresh process: wall time and peak memory).

    python bench/bench_workload.py [--runs 5] [--skip-old-above 30]

Two measurements per case:
  core    ``cached_prefixes`` + ``prefix_nodes`` of the workload: the new one-pass code vs the previous
          implementation (a dict of every group start, and a quadratic ``prefix_nodes``), kept below verbatim
          as the baseline; the results must be identical.
  cli     the whole ``kvcalc compare ... --format json`` process (new code only; wall time from interpreter start
          to exit, peak RSS), against the issue's budget of 0.5 s and 100 MB, next to the bare
          ``kvcalc compare --format json`` for context.
Median over ``--runs`` runs, interleaved; an old-code case slower than ``--skip-old-above`` seconds runs once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
import time

OLD = textwrap.dedent('''
    from collections import Counter

    def first_requests(w):
        n = w.requests
        firsts = {}
        for level, seg in enumerate(w.shared):
            for k in range(seg.groups):
                i = -(-k * n // seg.groups)
                firsts[i] = min(firsts.get(i, level), level)
        return firsts

    def _offsets(w):
        out = [0]
        for s in w.shared:
            out.append(out[-1] + s.tokens)
        return out

    def cached_prefixes(w, strategy, warm=False):
        offsets = _offsets(w)
        firsts = sorted(first_requests(w).items())
        out = Counter()
        lo = 0
        for ci, c in enumerate(w.classes):
            hi = lo + c.count
            inside = [level for i, level in firsts if lo <= i < hi]
            for level in inside:
                out[(ci, offsets[level])] += 1
            if c.count > len(inside):
                out[(ci, offsets[-1])] += c.count - len(inside)
            lo = hi
        return out

    def prefix_nodes(w):
        levels = list(first_requests(w).values())
        return [sum(1 for lv in levels if lv <= s) for s in range(len(w.shared))]
''')

CORE = textwrap.dedent('''
    import hashlib, json, resource, sys, time
    from kvcalc.serve.workload import inline_workload
    which, requests, context, shared = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    w = inline_workload(requests, context, 500, [tuple(s) for s in shared])
    if which == "old":
        ns = {}
        exec(OLD, ns)
        cached_prefixes, prefix_nodes = ns["cached_prefixes"], ns["prefix_nodes"]
    else:
        from kvcalc.serve.strategies import cached_prefixes, prefix_nodes
    t0 = time.perf_counter()
    c, nodes = cached_prefixes(w, "prefix-tree"), prefix_nodes(w)
    t = time.perf_counter() - t0
    digest = [sorted(c.items()), nodes]
    print(json.dumps({"s": t, "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      "digest": hashlib.sha256(repr(digest).encode()).hexdigest()}))
''')

CLI_HEAD = textwrap.dedent('''
    import resource, runpy, sys, time
    sys.argv = ["kvcalc", *sys.argv[1:]]
    t0 = time.perf_counter()
    try:
        runpy.run_module("kvcalc", run_name="__main__")
    except SystemExit:
        pass
    sys.stderr.write(f"{time.perf_counter() - t0} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n")
''')


def levels(n: int, tokens: int, groups) -> list[tuple[int, int]]:
    return [(tokens, groups(s)) for s in range(n)]


CASES = {
    # name: (requests, context, [(tokens, groups), ...])
    "300 levels, groups 1..50": (100_000, 131_072, levels(300, 100, lambda s: s % 50 + 1)),
    "1,000 levels, groups 1..50": (100_000, 131_072, levels(1000, 100, lambda s: s % 50 + 1)),
    "1,000 levels, 1 group each": (1_000, 131_072, levels(1000, 100, lambda s: 1)),
    "1,000 levels, groups 1..1,000, 10^6 requests": (10**6, 131_072, levels(1000, 100, lambda s: s + 1)),
    "10^7 groups (system prompt + 1 per request)": (10**7, 4096, [(1024, 1), (512, 10**7)]),
    "10^7 groups, two coprime levels": (10**7, 4096, [(1024, 9_999_991), (512, 9_999_973)]),
    "3x10^7 groups (issue 9.2)": (3 * 10**7, 4096, [(1, 3 * 10**7)]),
}


def run_core(which: str, case) -> dict:
    requests, context, shared = case
    code = (f"OLD = {OLD!r}\n" if which == "old" else "OLD = ''\n") + CORE
    out = subprocess.run([sys.executable, "-c", code, which, str(requests), str(context), json.dumps(shared)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def cli_args(case) -> list[str]:
    requests, context, shared = case
    args = ["compare", "--requests", str(requests), "--context", str(context), "--format", "json"]
    for t, g in shared:
        args += ["--shared-prefix", f"{t}:{g}"]
    return args


def run_cli(args: list[str]) -> tuple[float, int]:
    """Wall time of the whole process (interpreter start to exit) [s] and its peak RSS [kB]."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CLI_HEAD, *args], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    return wall, int(out.stderr.strip().splitlines()[-1].split()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-old-above", type=float, default=30.0)
    args = ap.parse_args()
    print(f"{'case':46s} {'old core':>10s} {'old MB':>8s} {'new core':>10s} {'new MB':>8s} {'speed-up':>9s} "
          f"{'same':>5s} {'cli':>8s} {'cli MB':>7s}")
    bare = [run_cli(["compare", "--format", "json"]) for _ in range(args.runs)]
    print(f"{'(bare kvcalc compare --format json)':46s} {'':>10s} {'':>8s} {'':>10s} {'':>8s} {'':>9s} {'':>5s} "
          f"{statistics.median(b[0] for b in bare):7.3f}s {max(b[1] for b in bare) / 1024:6.0f}")
    for name, case in CASES.items():
        new, old, cli = [], [], []
        for r in range(args.runs):
            new.append(run_core("new", case))
            if r == 0 or statistics.median(o["s"] for o in old) <= args.skip_old_above:
                old.append(run_core("old", case))
            cli.append(run_cli(cli_args(case)))
        t_new, t_old = statistics.median(x["s"] for x in new), statistics.median(x["s"] for x in old)
        same = new[0]["digest"] == old[0]["digest"]
        print(f"{name:46s} {t_old:9.3f}s {max(x['rss_kb'] for x in old) / 1024:7.0f} {t_new:9.4f}s "
              f"{max(x['rss_kb'] for x in new) / 1024:7.0f} {t_old / max(t_new, 1e-9):8.0f}x {str(same):>5s} "
              f"{statistics.median(c[0] for c in cli):7.3f}s {max(c[1] for c in cli) / 1024:6.0f}")


if __name__ == "__main__":
    main()
