"""Start-up benchmark: kvcalc commands vs importing its libraries, measured side by side in one run.

    python bench/bench_startup.py [--runs 15] [--versus OTHER_CHECKOUT]

Prints the median wall time of each command (fresh process each run) and its ratio to
``python -c "import typer, rich, pydantic, numpy"``. Target: ratio <= 1.3.
``--versus DIR`` also runs every kvcalc command from DIR (another checkout, e.g. ``git archive main | tar -x``:
``python -m kvcalc`` imports the kvcalc of its working directory), interleaved, for a before/after in one run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

BASELINE = [sys.executable, "-c", "import typer, rich, pydantic, numpy"]
# What typer itself costs to parse a command line: one command with 17 options (as many as `compare`),
# printing a line. Shown for context: kvcalc cannot start faster than this.
TYPER_ALONE = [sys.executable, "-c", (
    "import typer\n"
    "app = typer.Typer()\n"
    "@app.callback()\n"
    "def root(): pass\n"
    "@app.command()\n"
    "def run(" + ", ".join(f"o{i}: str = 'x'" for i in range(17)) + "):\n"
    "    print(o0)\n"
    "app(['run', '--o0', 'y'])")]
COMMANDS = {
    "kvcalc --help": [sys.executable, "-m", "kvcalc", "--help"],
    "kvcalc capacity --help": [sys.executable, "-m", "kvcalc", "capacity", "--help"],
    "kvcalc capacity --format json": [sys.executable, "-m", "kvcalc", "capacity", "--format", "json"],
    "kvcalc kv --format json": [sys.executable, "-m", "kvcalc", "kv", "--format", "json"],
    "kvcalc compare --format json": [sys.executable, "-m", "kvcalc", "compare", "--format", "json"],
    "kvcalc sweep capacity (12 points) json": [sys.executable, "-m", "kvcalc", "sweep", "capacity", "--vary",
                                               "context=4k..1m:log12", "--format", "json"],
}


def wall_s(cmd: list[str], cwd: str | None = None) -> float:
    """One run's wall time [s] (in ``cwd``); fails loudly if the command fails."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=cwd)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--versus", help="another checkout whose kvcalc runs the same commands, interleaved")
    args = ap.parse_args()
    cmds = {"baseline": (BASELINE, None), "typer alone (17 options)": (TYPER_ALONE, None)}
    for n, cmd in COMMANDS.items():
        cmds[n] = (cmd, None)
        if args.versus:
            cmds[f"  {n} (versus)"] = (cmd, args.versus)
    names = list(cmds)
    for cmd, cwd in cmds.values():  # warm the file cache
        wall_s(cmd, cwd)
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.runs):  # interleave so drift hits every command alike
        for n in names:
            times[n].append(wall_s(*cmds[n]))
    base = statistics.median(times["baseline"])
    print(f"{'command':50s} {'median':>9s} {'ratio':>6s}")
    for n in names:
        med = statistics.median(times[n])
        print(f"{n:50s} {med * 1e3:7.1f} ms {med / base:6.2f}")


if __name__ == "__main__":
    main()
