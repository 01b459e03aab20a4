"""What a sweep will cost before it starts (issue 21 item 2): memory held and seconds, per target and output format,
with a chart or plot, --check outcomes and the workload's prefix levels added; the grid is refused when the
estimate exceeds the budget (``--max-memory``, ``--max-seconds``), in well under a second and before any point.

Every figure is measured with ``bench/bench_sweep_cost.py`` (its output is quoted beside each constant) on this
project's 2-core machine shared with other jobs, and rounded up: the estimate errs high, since refusing a grid
that would have fit costs a flag, and accepting one that does not costs a hang or an out-of-memory kill.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvcalc.out.sweep_spec import Budget, check_grid

# [B held, s to compute and write] per point, by target and format, with the rows held (a table lays out every
# row; JSON, CSV and Markdown too when a --plot needs the rows); streamed, a format holds one chunk of points
# (CHUNK_POINTS or LOOP_CHUNK) at these bytes, plus STREAM_VALUE_BYTES per axis value, in the same time.
# Bytes: bench_sweep_cost.py's held B/point (2026-12-02; RSS growth does not depend on the load), rounded up:
# kv json 2,555, csv 1,020, markdown 872, table 1,647 (3,000 kept: two earlier sessions measured up to 2.6 kB);
# capacity 6,187, 2,517, 1,962, 2,889; cost 6,554, 3,932, 2,621, 2,621; compare 18,350, 5,243, 2,621, 2,621;
# trace 3,539, 1,704, 1,704, 1,966 (4,000 kept for the table: earlier sessions measured up to 3.6 kB).
# Seconds: the earlier sessions' figure for each target's dearest format on a quieter machine (kv 100 us, capacity
# 120 us, cost 2.5 ms, compare 4 ms, trace 150 us, each rounded up from what they measured), spread over the
# formats by the ratios this run measured side by side (a load of ~7 on 2 cores made every absolute figure 1.5-4x
# high): kv json 34-35 us, csv 34-41, markdown 115-234, table 130; trace 227, 339, 710, 586; capacity (233-290),
# cost (5.3-9.3 ms) and compare (4.1-9.0 ms) the same in every format within the noise.
POINT_COST: dict[str, dict[str, tuple[float, float]]] = {
    "kv": {"json": (3_000, 30e-6), "csv": (1_200, 35e-6), "markdown": (1_000, 180e-6), "table": (3_000, 100e-6)},
    "capacity": {"json": (7_000, 120e-6), "csv": (3_000, 120e-6), "markdown": (2_500, 120e-6),
                 "table": (3_500, 120e-6)},
    "cost": {"json": (8_000, 2.5e-3), "csv": (4_000, 2.5e-3), "markdown": (3_000, 2.5e-3), "table": (3_000, 2.5e-3)},
    "compare": {"json": (20_000, 4e-3), "csv": (6_000, 4e-3), "markdown": (3_000, 4e-3), "table": (3_000, 4e-3)},
    "trace": {"json": (4_000, 60e-6), "csv": (2_000, 90e-6), "markdown": (2_000, 190e-6), "table": (4_000, 150e-6)},
}
# a streamed sweep's memory besides its chunk [B per axis value]: the axis arrays and the inputs echoed. A
# 10^6-point kv CSV peaked at 195 MiB streamed (879 MiB held): ~60 MiB of interpreter and numpy and ~65 MB of one
# 65,536-point chunk leave ~70 B a value
STREAM_VALUE_BYTES = 200.0
CHUNK_POINTS = 2**16  # grid points of kv/capacity evaluated (and written) at a time when a sweep is streamed
LOOP_CHUNK = 256      # points of a looped target (cost, compare) written at a time when streamed
# --plot: matplotlib's import and figure (fixed [s]) and what each point drawn adds [B, s]: 10,000 kv points took
# 284 us a point with a PNG against 149 without (~1.4 s, most of it the import) and 627 B more a point;
# --chart (text) added nothing measurable (98 against 149 us: noise): 5 us a point is priced
PLOT_FIXED_S, PLOT_POINT_COST, CHART_POINT_S = 2.0, (1_000.0, 50e-6), 5e-6
# one --check on one row: its outcome record [B] (kept for JSON, which lists them after the rows; CSV and Markdown
# keep only failures) and the test [s]: streamed kv JSON with one check, 2,641 against 2,110 B and 55 against 34 us
CHECK_ROW_COST = (600.0, 25e-6)
ROWS_PER_POINT = {"compare": 2}  # compare writes a row per strategy
# a cost/compare point's workload (kvcalc.serve.strategies), per shared prefix level [s]: compare with 1,000
# levels (groups 1..50) took 51.6 ms a point against 4.2 ms for the article's workload, ~47 us a level; its group
# starts (strategies.start_tests counts them before any is made) at the docs' 22 ns a test and 70 ns a listed
# start (docs/benchmarks.md "Prefix levels and group counts") times the same ~5x (47 ms against the core's 8.8 ms)
LEVEL_S, START_TEST_S, LISTED_START_S = 50e-6, 110e-9, 350e-9
BASE_LEVELS = 2  # the article's workload (a system prompt and 5 few-shot groups): within POINT_COST already
# target -> (axes, fixed settings) -> (extra seconds per point, fixed seconds): what depends on the inputs
EXTRA_COST: dict[str, Any] = {}


@dataclass(frozen=True)
class Output:
    """How a sweep's rows are written: the format, whether streamed (one chunk held at a time), a --plot file's
    suffix, a --chart, and the number of --check expressions."""

    fmt: str = "table"
    streamed: bool = False
    plot: str | None = None
    chart: bool = False
    checks: int = 0


def budget_for(target: str, limits: Budget | None = None, output: Output | None = None) -> Budget:
    """``limits`` (points, bytes, seconds a sweep may spend) with the per-point costs of ``target`` written as
    ``output`` (default: a table, rows held)."""
    out = output or Output()
    held, spent = POINT_COST.get(target, {}).get(out.fmt, (0.0, 0.0))
    rows = ROWS_PER_POINT.get(target, 1)
    check_bytes = out.checks * rows * CHECK_ROW_COST[0] * (1.0 if out.fmt == "json" else 0.0)
    spent += out.checks * rows * CHECK_ROW_COST[1]
    if out.plot is not None:
        held, spent = held + PLOT_POINT_COST[0], spent + PLOT_POINT_COST[1]
    if out.chart:
        spent += CHART_POINT_S
    b = replace(limits or Budget(), bytes_per_point=held + check_bytes, seconds_per_point=spent)
    if out.streamed:  # one chunk held; the --check outcomes JSON lists after the rows are kept for every point
        b = replace(b, bytes_per_point=held, held_points=CHUNK_POINTS if target in ("kv", "capacity") else LOOP_CHUNK,
                    bytes_per_value=STREAM_VALUE_BYTES, kept_bytes_per_point=check_bytes)
    return b


def check_cost(target: str, axes: list, fixed: dict, limits: Budget | None = None,
               output: Output | None = None) -> None:
    """Refuse (InputError naming the grid and the option that raises the budget) a sweep whose estimated memory or
    time, with what the inputs add (a trace's size, a workload's prefix levels), exceeds ``limits``; before any
    point is computed."""
    budget = budget_for(target, limits, output)
    extra, fixed_s = EXTRA_COST[target](axes, fixed) if target in EXTRA_COST else (0.0, 0.0)
    if output is not None and output.plot is not None:
        fixed_s += PLOT_FIXED_S
    check_grid(axes, budget.max_points, replace(budget, seconds_per_point=budget.seconds_per_point + extra),
               fixed_s)


def workload_cost(axes: list, fixed: dict) -> tuple[float, float]:
    """(extra seconds per point, fixed seconds) of a cost/compare sweep: its workloads' prefix levels and group
    starts (mean over the workloads the grid runs); an inline workload (requests, context) has one level."""
    from kvcalc.model import catalog
    from kvcalc.serve.strategies import start_tests

    varied = {a.name: list(a.values) for a in axes}
    if "requests" in varied or "requests" in fixed:
        return 0.0, 0.0
    refs = varied.get("workload") or ([fixed["workload"]] if fixed.get("workload") else None)
    if refs is None:
        from kvcalc.serve.scenario import DERIVED_BASE

        derived = any(k in varied or k in fixed for k in ("model", "hardware"))
        scenarios = varied.get("scenario") or [fixed.get("scenario") or (DERIVED_BASE if derived else "article")]
        refs = [catalog.load("scenarios", s).workload for s in scenarios]
    total = 0.0
    for ref in refs:
        w = catalog.load("workloads", ref)
        tests, listed = start_tests(w)  # InputError past the group-start limit: refused before any point
        total += max(0, len(w.shared) - BASE_LEVELS) * LEVEL_S + min(tests * START_TEST_S, listed * LISTED_START_S)
    return total / len(refs), 0.0


EXTRA_COST["cost"] = EXTRA_COST["compare"] = workload_cost
