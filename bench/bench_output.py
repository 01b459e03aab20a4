"""Output benchmark: tables vs JSON per command, a 10,000-row table, and --help vs the bare library import.

    python bench/bench_output.py [--runs 15]

Every command runs as a fresh process with stdout to /dev/null (not a terminal, so tables take the piped, plain-text path, as in
scripts and CI), interleaved so drift hits all alike; the median of --runs is shown with its ratio to its pair,
for wall time and for the process's CPU time (user + system, steadier on a shared machine).
Targets (issue 14): table <= 1.15x JSON for kv/compare/cost; a 10,000-row table < 1.5 s; --help <= 0.7x
``python -c "import typer, rich, pydantic, numpy"``.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import resource
import subprocess
import time

KV = [sys.executable, "-m", "kvcalc"]
BASELINE = [sys.executable, "-c", "import typer, rich, pydantic, numpy"]
ROWS_10K = ",".join(str(n) for n in range(1, 10_001))  # kv llama-3-70b at 10,000 context lengths = 10,000 rows
PAIRS = {  # name -> (command, the command it is compared with)
    "kvcalc --help": (KV + ["--help"], BASELINE),
    "kvcalc compare --help": (KV + ["compare", "--help"], BASELINE),
    **{f"kvcalc {c} (table)": (KV + [c], KV + [c, "--format", "json"]) for c in ("kv", "compare", "cost", "capacity")},
    "kvcalc kv 10,000 rows (table)": (KV + ["kv", "llama-3-70b", "-c", ROWS_10K],
                                       KV + ["kv", "llama-3-70b", "-c", ROWS_10K, "--format", "json"]),
}


def run_s(cmd: list[str]) -> tuple[float, float]:
    """One run: (wall time, CPU time of the child = user + system) [s]; fails loudly if the command fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    cmds: dict[tuple, list[str]] = {}
    for cmd, ref in PAIRS.values():
        cmds[tuple(cmd)] = cmd
        cmds[tuple(ref)] = ref
    for cmd in cmds.values():  # warm the file cache
        run_s(cmd)
    times: dict[tuple, list[tuple[float, float]]] = {k: [] for k in cmds}
    for _ in range(args.runs):
        for k, cmd in cmds.items():
            times[k].append(run_s(cmd))
    wall = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    print(f"{'command (stdout not a terminal)':32s} {'wall':>8s} {'cpu':>8s}   {'compared with':36s} {'wall':>8s} "
          f"{'cpu':>8s}  {'ratio wall':>10s} {'cpu':>5s}")
    for name, (cmd, ref) in PAIRS.items():
        ref_name = "import typer, rich, pydantic, numpy" if ref is BASELINE else "the same, --format json"
        a, b = tuple(cmd), tuple(ref)
        print(f"{name:32s} {wall[a] * 1e3:5.0f} ms {cpu[a] * 1e3:5.0f} ms   {ref_name:36s} {wall[b] * 1e3:5.0f} ms "
              f"{cpu[b] * 1e3:5.0f} ms  {wall[a] / wall[b]:10.2f} {cpu[a] / cpu[b]:5.2f}")


if __name__ == "__main__":
    main()
