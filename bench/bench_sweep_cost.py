"""What one sweep point costs each target and format: the figures behind kvcalc.serve.sweep_cost (the budget).

    python bench/bench_sweep_cost.py [--scale 1]

For each target and output format, one fresh process runs a small sweep (2 points, to load everything) and then a
large one in-process, output captured; reported per point: wall time [us] and the growth of peak RSS [B] between
the two (what the rows, the columns and the rendered text hold), with the budget's own figures beside them.
JSON, CSV and Markdown run twice: streamed (as the CLI writes them, a chunk of points at a time: the growth is
the axis values and one chunk, not the grid) and held (every row kept, as with --plot; the child empties
kvcalc.out.render.STREAMED). The extras price --plot (matplotlib), --chart, --check and a workload of 1,000
prefix levels. POINT_COST should be at or above what is measured, so a grid the budget lets through finishes
within it (the estimate errs high: refusing a grid that would have fit costs a flag; accepting one that does not
costs a hang).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CASES = {  # target -> (args with N for the number of points, N)
    "kv": (["sweep", "kv", "--vary", "context=1..N:step1"], 200_000),
    "capacity": (["sweep", "capacity", "--vary", "context=1..N:step1"], 50_000),
    "cost": (["sweep", "cost", "--vary", "gpus=1..N:step1"], 200),
    "compare": (["sweep", "compare", "--vary", "gpus=1..N:step1"], 100),
    "trace": (["sweep", "trace", "--set", "file=TRACE", "--set", "block-tokens=16", "--vary",
               "capacity=1..N:step1"], 2_000),
}
EXTRAS = {  # name -> (args, N, format, held): the add-ons, each beside its plain run
    "kv plain": (["sweep", "kv", "--vary", "context=1..N:step1"], 20_000, "table", True),
    "kv --plot png": (["sweep", "kv", "--vary", "context=1..N:step1", "--plot", "PLOT.png"], 20_000, "table", True),
    "kv --chart": (["sweep", "kv", "--vary", "context=1..N:step1", "--chart"], 20_000, "table", True),
    "kv --check json": (["sweep", "kv", "--vary", "context=1..N:step1", "--check", "kv_bytes_per_token > 0"],
                        200_000, "json", False),
    "compare article": (["sweep", "compare", "--vary", "gpus=1..N:step1"], 50, "json", False),
    "compare 1,000 levels": (["sweep", "compare", "--set", "workload=WORKLOAD", "--vary", "gpus=1..N:step1"], 50,
                             "json", False),
}

CHILD = r"""
import io, resource, sys, time
from contextlib import redirect_stdout
sys.path.insert(0, sys.argv[1])
from kvcalc.cli.app import main
if sys.argv[3] == "held":
    import kvcalc.out.render
    kvcalc.out.render.STREAMED = ()
def run(args):
    out = io.StringIO()
    t = time.perf_counter()
    with redirect_stdout(out):
        try:
            main(args)
        except SystemExit as e:
            assert e.code == 0, e.code
    return time.perf_counter() - t
n, args = int(sys.argv[2]), sys.argv[4:]
run([a.replace(f"1..{n}:", "1..2:") for a in args])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
dt = run(args)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(dt / n, grown / n)
"""


def measure(args: list[str], n: int, fmt: str, held: bool, subs: dict) -> tuple[float, float]:
    argv = [a.replace("N", str(n)) for a in args]
    for k, v in subs.items():
        argv = [a.replace(k, v) for a in argv]
    argv += ["--format", fmt, "--max-memory", "64GB", "--max-seconds", "86400", "--max-points", str(10**8)]
    out = subprocess.run([sys.executable, "-c", CHILD, str(REPO), str(n), "held" if held else "streamed", *argv],
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


WHOLE = r"""
import resource, sys, time
sys.path.insert(0, sys.argv[1])
from kvcalc.cli.app import main
if sys.argv[2] == "held":  # the rows held as before streaming: sweep_result and render.write
    import kvcalc.out.render
    kvcalc.out.render.STREAMED = ()
t = time.perf_counter()
with open("/dev/null", "w") as out:
    sys.stdout = out
    try:
        main(sys.argv[3:])
    except SystemExit as e:
        assert e.code == 0, e.code
    sys.stdout = sys.__stdout__
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def peak_rss(points: int) -> None:
    """The whole process's peak RSS and wall time of a ``points``-point kv sweep to CSV, streamed and held, side by
    side in one run (each in a fresh process, output to /dev/null)."""
    args = ["sweep", "kv", "--vary", f"context=1..{points}:step1", "--format", "csv", "--max-memory", "64GB",
            "--max-seconds", "86400", "--max-points", str(10**8)]
    print(f"\nsweep kv, {points:,} points, --format csv     peak RSS    wall")
    for how in ("held", "streamed"):
        out = subprocess.run([sys.executable, "-c", WHOLE, str(REPO), how, *args], capture_output=True, text=True,
                             check=True).stdout.split()
        print(f"{how:35s} {float(out[1]) / 2**20:8,.0f} MiB {float(out[0]):6.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every case's points")
    ap.add_argument("--rss-points", type=int, default=10**6, help="points of the peak-RSS case (0: skip it)")
    ap.add_argument("--rss-only", action="store_true", help="only the peak-RSS case")
    opts = ap.parse_args()
    sys.path.insert(0, str(REPO))
    if opts.rss_only:
        peak_rss(opts.rss_points)
        return
    import tempfile

    import kvcalc.trace.sweep  # noqa: F401  (registers trace's cost)
    from kvcalc.serve.sweep_cost import POINT_COST, STREAM_VALUE_BYTES

    tmp = Path(tempfile.mkdtemp())
    trace, workload = tmp / "t.jsonl", tmp / "levels.toml"
    trace.write_text("".join(f'{{"timestamp": {i}, "input_length": 32, "output_length": 1, "hash_ids": [{i % 7}, '
                             f'{i}]}}\n' for i in range(2000)))
    # 1,000 shared levels of 8 tokens, group counts 1..50 over and over (bench_workload's "1,000 levels" case)
    workload.write_text('schema_version = 1\nsource = "bench"\ndisplay_name = "1,000 levels"\n[[classes]]\nname = "a"\ncount = 1000\n'
                        'context_tokens = 16000\noutput_tokens = 100\n'
                        + "".join(f'[[shared]]\nname = "l{i}"\ntokens = 8\ngroups = {i % 50 + 1}\n'
                                  for i in range(1000)))
    subs = {"TRACE": str(trace), "WORKLOAD": str(workload), "PLOT": str(tmp / "plot")}
    print(f"{'target':10s} {'format':8s} {'rows':9s} {'points':>8s} {'us/point':>9s} {'B/point':>8s}   budget: us, B")
    for target, (args, n) in CASES.items():
        n = max(2, int(n * opts.scale))
        for fmt in ("json", "csv", "markdown", "table"):
            for held in ((False, True) if fmt != "table" and target != "trace" else (True,)):
                s, b = measure(args, n, fmt, held, subs)
                spent_held = POINT_COST[target][fmt]
                budget = f"{spent_held[1] * 1e6:7.0f}, {spent_held[0]:,.0f}" if held else \
                    f"{spent_held[1] * 1e6:7.0f}, {STREAM_VALUE_BYTES:,.0f} a value + a chunk"
                print(f"{target:10s} {fmt:8s} {'held' if held else 'streamed':9s} {n:8,} {s * 1e6:9.1f} {b:8,.0f}"
                      f"   {budget}")
    print(f"\n{'extra':24s} {'format':8s} {'points':>8s} {'us/point':>9s} {'B/point':>8s}")
    for name, (args, n, fmt, held) in EXTRAS.items():
        n = max(2, int(n * opts.scale))
        s, b = measure(args, n, fmt, held, subs)
        print(f"{name:24s} {fmt:8s} {n:8,} {s * 1e6:9.1f} {b:8,.0f}")
    if opts.rss_points:
        peak_rss(opts.rss_points)


if __name__ == "__main__":
    main()
