"""What one sweep point costs each target: the figures behind kvcalc.serve.sweep.POINT_COST (the sweep budget).

    python bench/bench_sweep_cost.py [--scale 1]

For each target and output format, one fresh process runs a small sweep (2 points, to load everything) and then a
large one in-process, output captured; reported per point: wall time [us] and the growth of peak RSS [B] between
the two (what the rows, the columns and the rendered text hold), with the budget's own figures beside them.
POINT_COST should be at or above the dearer format of each target, so a grid the budget lets through finishes
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
    "kv": (["sweep", "kv", "--vary", "context=1..N:step1"], 100_000),
    "capacity": (["sweep", "capacity", "--vary", "context=1..N:step1"], 50_000),
    "cost": (["sweep", "cost", "--vary", "gpus=1..N:step1"], 200),
    "compare": (["sweep", "compare", "--vary", "gpus=1..N:step1"], 100),
    "trace": (["sweep", "trace", "--set", "file=TRACE", "--set", "block-tokens=16", "--vary",
               "capacity=1..N:step1"], 2_000),
}

CHILD = r"""
import io, resource, sys, time
from contextlib import redirect_stdout
sys.path.insert(0, sys.argv[1])
from kvcalc.cli.app import main
def run(args):
    out = io.StringIO()
    t = time.perf_counter()
    with redirect_stdout(out):
        try:
            main(args)
        except SystemExit as e:
            assert e.code == 0, e.code
    return time.perf_counter() - t
n, args = int(sys.argv[2]), sys.argv[3:]
run([a.replace(f"1..{n}:", "1..2:") for a in args])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
dt = run(args)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(dt / n, grown / n)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every case's points")
    opts = ap.parse_args()
    sys.path.insert(0, str(REPO))
    import tempfile

    import kvcalc.trace.sweep  # noqa: F401  (registers trace's cost)
    from kvcalc.serve.sweep import POINT_COST

    trace = Path(tempfile.mkdtemp()) / "t.jsonl"
    trace.write_text("".join(f'{{"timestamp": {i}, "input_length": 32, "output_length": 1, "hash_ids": [{i % 7}, '
                             f'{i}]}}\n' for i in range(2000)))
    print(f"{'target':10s} {'format':8s} {'points':>8s} {'us/point':>9s} {'B/point':>8s}   budget: us, B")
    for target, (args, n) in CASES.items():
        n = max(2, int(n * opts.scale))
        for fmt in ("json", "csv", "table"):
            argv = [a.replace("N", str(n)).replace("TRACE", str(trace)) for a in args]
            argv += ["--format", fmt, "--max-memory", "64GB", "--max-seconds", "86400"]
            out = subprocess.run([sys.executable, "-c", CHILD, str(REPO), str(n), *argv], capture_output=True,
                                 text=True, check=True).stdout.split()
            s, b = float(out[0]), float(out[1])
            held, spent = POINT_COST[target]
            print(f"{target:10s} {fmt:8s} {n:8,} {s * 1e6:9.1f} {b:8,.0f}   {spent * 1e6:7.0f}, {held:,}")


if __name__ == "__main__":
    main()
