"""Output benchmark: tables vs JSON per command, a 10,000-row table, and --help vs the bare library import.

    python bench/bench_output.py [--runs 15]

Every command runs as a fresh process with stdout to /dev/null (not a terminal, so tables take the piped, plain-text path, as in
scripts and CI), interleaved so drift hits all alike; the median of --runs is shown with its ratio to its pair.
Targets (issue 14): table <= 1.15x JSON for kv/compare/cost; a 10,000-row table < 1.5 s; --help <= 0.7x
``python -c "import typer, rich, pydantic, numpy"``.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench_startup import wall_s  # one run's wall time, stdout to /dev/null (not a terminal: the piped path)

KV = [sys.executable, "-m", "kvcalc"]
BASELINE = [sys.executable, "-c", "import typer, rich, pydantic, numpy"]
ROWS_10K = ",".join(str(n) for n in range(1, 10_001))  # kv llama-3-70b at 10,000 context lengths = 10,000 rows
PAIRS = {  # name -> (command, the command it is compared with)
    "kvcalc --help": (KV + ["--help"], BASELINE),
    "kvcalc compare --help": (KV + ["compare", "--help"], BASELINE),
    **{f"kvcalc {c} (table)": (KV + [c], KV + [c, "--format", "json"]) for c in ("kv", "compare", "cost", "capacity")},
    "kvcalc kv, 10,000 rows (table)": (KV + ["kv", "llama-3-70b", "-c", ROWS_10K],
                                       KV + ["kv", "llama-3-70b", "-c", ROWS_10K, "--format", "json"]),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    cmds: dict[tuple, list[str]] = {}
    for cmd, ref in PAIRS.values():
        cmds[tuple(cmd)] = cmd
        cmds[tuple(ref)] = ref
    for cmd in cmds.values():  # warm the file cache
        wall_s(cmd)
    times: dict[tuple, list[float]] = {k: [] for k in cmds}
    for _ in range(args.runs):
        for k, cmd in cmds.items():
            times[k].append(wall_s(cmd))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{'command (stdout piped)':34s} {'median':>9s}   {'compared with':36s} {'median':>9s} {'ratio':>6s}")
    for name, (cmd, ref) in PAIRS.items():
        ref_name = "import typer, rich, pydantic, numpy" if ref is BASELINE else "the same, --format json"
        a, b = med[tuple(cmd)], med[tuple(ref)]
        print(f"{name:34s} {a * 1e3:7.1f} ms   {ref_name:36s} {b * 1e3:7.1f} ms {a / b:6.2f}")


if __name__ == "__main__":
    main()
