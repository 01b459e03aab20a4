"""Render benchmark: big results as CSV and JSON, the old cell-by-cell code next to the new, in one run.

    python bench/bench_render.py [--points 1048576] [--runs 3]

Rows:
- end to end (a whole process, stdout to /dev/null): ``kvcalc sweep kv`` over --points contexts as CSV and JSON,
  and ``kvcalc kv llama-3-70b`` at 10,000 contexts as a table and JSON; "before" runs the same process with
  render.to_csv / to_json replaced by the old functions below and derivations built eagerly (as they were);
- in process: to_csv / to_json of the 1,048,576-row sweep result, old vs new (the result built once).
Wall and CPU time (user + system, steadier on a shared machine) are the medians of --runs (end to end; the
old 1M-row JSON takes ~15-20 s, so 1 run of the in-process pair). Target: the 1M-row CSV end to end < 3 s.
The old functions are also the reference that tests/test_render_fast.py compares the new ones with.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import statistics
import subprocess
import sys
import time


def old_jsonable(v):
    """_jsonable as it was: every cell through isinstance checks."""
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return None
        if v.is_integer() and abs(v) < 2**53:
            return int(v)
        return v
    if isinstance(v, dict):
        return {k: old_jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [old_jsonable(x) for x in v]
    if hasattr(v, "item"):
        return old_jsonable(v.item())
    return v


def old_to_json(result, checks=(), explain=False) -> str:
    """to_json as it was: the whole envelope through old_jsonable and the pure-Python indent=2 encoder."""
    from kvcalc.out.render import JSON_SCHEMA
    from kvcalc.out.version import __version__

    return json.dumps(old_jsonable({
        "kvcalc": __version__, "schema": JSON_SCHEMA, "command": result.command, "inputs": result.inputs,
        "results": list(result.main.rows), "tables": {t.name: list(t.rows) for t in result.extra},
        "checks": list(checks), "notes": list(result.notes),
    } | ({"explain": list(result.explain)} if explain else {})), indent=2)


def old_to_csv(result) -> str:
    """to_csv as it was: keys from every item of every row, then old_jsonable per cell."""
    buf = io.StringIO()
    keys: list = []
    for r in result.main.rows:
        for k, v in r.items():
            if k not in keys and not isinstance(v, (list, dict, tuple)):
                keys.append(k)
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(keys)
    for r in result.main.rows:
        out = []
        for k in keys:
            v = old_jsonable(r.get(k))
            out.append("" if v is None else ("true" if v is True else "false" if v is False else v))
        w.writerow(out)
    return buf.getvalue()


def run_old_cli(argv: list[str]) -> None:
    """The CLI with the old renderers and eager derivations (the "before" process)."""
    from kvcalc.out import render, results

    render.to_csv, render.to_json = old_to_csv, old_to_json
    results.LazyLines = lambda build: tuple(build())  # kv_result etc. import it at call time
    sys.argv = ["kvcalc", *argv]
    from kvcalc.cli.app import main

    main()


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=2**20)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from bench_output import run_s  # a whole process: (wall, CPU) [s]; this script's folder is on sys.path

    n = args.points
    sweep = ["sweep", "kv", "--vary", "model=llama-3-70b", "--vary", f"context=1..{n}:step1", "--max-points", str(n),
             "--max-memory", "64GB", "--max-seconds", "86400"]  # past the default budget (2 GB, 10 s) on purpose
    kv10k = ["kv", "llama-3-70b", "-c", ",".join(str(c) for c in range(1, 10_001))]
    cases = {f"sweep kv {n:,} rows csv": sweep + ["--format", "csv"],
             f"sweep kv {n:,} rows json": sweep + ["--format", "json"],
             "kv 10,000 rows table": kv10k, "kv 10,000 rows json": kv10k + ["--format", "json"]}
    new_cmd, old_cmd = [sys.executable, "-m", "kvcalc"], [sys.executable, __file__, "--as-old"]
    times: dict = {(c, w): [] for c in cases for w in ("new", "old")}
    for _ in range(args.runs):  # interleaved, so drift hits both alike
        for c, argv in cases.items():
            times[c, "new"].append(run_s(new_cmd + argv))
            times[c, "old"].append(run_s(old_cmd + argv))
    print(f"{'end to end (whole process)':32s} {'before wall':>11s} {'cpu':>7s} {'after wall':>11s} {'cpu':>7s} "
          f"{'speed-up':>8s}")
    for c in cases:
        (ow, oc), (nw, nc) = ((statistics.median(x for x, _ in times[c, w]), statistics.median(y for _, y in times[c, w]))
                              for w in ("old", "new"))
        print(f"{c:32s} {ow:9.2f} s {oc:5.2f} s {nw:9.2f} s {nc:5.2f} s {ow / nw:7.1f}x")

    from kvcalc.out import render
    from kvcalc.serve import sweep as sw

    from kvcalc.out.sweep_spec import Budget

    unlimited = Budget(n, float("inf"), float("inf"))  # the default budget would refuse the 10^6 rows
    axes = sw.parse_axes("kv", ["model=llama-3-70b", f"context=1..{n}:step1"], n, unlimited)
    result = sw.sweep_result("kv", axes, sw.parse_fixed("kv", [], axes), unlimited)
    print(f"{'in process, ' + format(n, ',') + ' rows':32s} {'before':>11s} {'after':>11s} {'speed-up':>8s}")
    for name, old, new in (("to_csv", old_to_csv, render.to_csv), ("to_json", old_to_json, render.to_json)):
        a, b = timed(lambda: old(result)), timed(lambda: new(result))
        print(f"{name:32s} {a:9.2f} s {b:9.2f} s {a / b:7.1f}x")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--as-old"]:
        run_old_cli(sys.argv[2:])
    else:
        main()
