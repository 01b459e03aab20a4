"""``kvcalc sweep``: one command over the product of several inputs; a table, CSV/JSON, and charts."""

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import CheckOpt, FormatOpt
from kvcalc.out.sweep_spec import DEFAULT_MAX_BYTES, DEFAULT_MAX_SECONDS, MAX_POINTS
from kvcalc.out.units import MAX_SWEEP_POINTS, MAX_SWEEP_SECONDS

C = "Charts"


def sweep(
    target: Annotated[str, typer.Argument(help="kv | capacity | cost | compare | trace", show_default=False)],
    vary: Annotated[Optional[list[str]], typer.Option(
        "--vary", "-v", help="NAME=SPEC (repeatable; the grid is their product, first axis slowest). SPEC: a list "
        "4k,32k,128k | a range 1k..1m:log20, 1k..64k:step4k, 0.5..0.9:lin5 | presets h100-sxm,h200-sxm",
        show_default=False)] = None,
    fixed: Annotated[Optional[list[str]], typer.Option(
        "--set", help="NAME=VALUE held fixed (repeatable), e.g. --set gpus=8 --set hardware=h200-sxm",
        show_default=False)] = None,
    max_points: Annotated[int, typer.Option(
        "--max-points", help=f"refuse grids larger than this (at most {MAX_SWEEP_POINTS:,})")] = MAX_POINTS,
    max_memory: Annotated[str, typer.Option(
        "--max-memory", help="refuse grids whose rows would hold more than this (estimated per point before "
        "starting), e.g. 8GB")] = f"{DEFAULT_MAX_BYTES / 1e9:g}GB",
    max_seconds: Annotated[float, typer.Option(
        "--max-seconds", help=f"refuse grids estimated to take longer than this [s] (at most {MAX_SWEEP_SECONDS:,.0f})")]
    = DEFAULT_MAX_SECONDS,
    y: Annotated[Optional[list[str]], typer.Option(
        "--y", help="output field to chart (repeatable; default per target, e.g. max_requests)",
        show_default=False, rich_help_panel=C)] = None,
    x: Annotated[Optional[str], typer.Option("--x", help="the numeric --vary axis on the x axis (default: the first)",
                                             show_default=False, rich_help_panel=C)] = None,
    chart: Annotated[Optional[bool], typer.Option(
        "--chart/--no-chart", help="draw a line chart after the table (default: when stdout is a terminal and one "
        "axis is numeric)", show_default=False, rich_help_panel=C)] = None,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", help="write the chart to FILE.png | .svg | .html (needs the extra: pip install 'kvcalc[plot]'); "
        "two numeric axes make a heat map", show_default=False, rich_help_panel=C)] = None,
    fmt: FormatOpt = "table", check: CheckOpt = None,
):
    """Evaluate kv, capacity, cost, compare or a trace replay over a grid of inputs: one row per point, varied inputs first.

    Every row equals the single-point command with the same inputs; kv and capacity are vectorised.

    kv inputs: model, context, kv-dtype, mla-layout, indexer-dtype, state-dtype, mtp.

    capacity: those and hardware, link, gpus, hbm-utilization, reserve, block-tokens, attention, bandwidth.

    cost, compare: scenario, model, hardware, gpus, workload, requests, context, output-tokens, shared-prefix,

    and price-per-gpu-hour, mfu-prefill, decode-tokens-per-s, warm, attention-flops, pd-link, layouts; cost: strategy.

    trace: file, capacity (3m = 3,000,000 tokens), block-tokens, policy, model, hardware and gpus (the node's KV

    budget as the capacity), the layouts.

    Examples:

      kvcalc sweep kv --vary model=llama-3-70b,deepseek-v4-flash --vary context=1k..1m:log20 --format csv

      kvcalc sweep capacity --vary model=deepseek-v3,deepseek-v4-flash --vary context=4k..1m:log12 --plot fit.png

      kvcalc sweep compare --set requests=100 --set context=8k --vary shared-prefix=0..6k:step1k --y ttft_mean_s
    """
    import sys

    from kvcalc.cli.common import check_format, emit
    from kvcalc.out.errors import InputError
    from kvcalc.serve import sweep as sw

    check_format(fmt)
    from kvcalc.out.sweep_spec import Budget
    from kvcalc.out.units import MAX_SWEEP_BYTES, check_positive, parse_bytes

    check_positive(max_points, "--max-points", limit=MAX_SWEEP_POINTS)
    limits = Budget(max_points, check_positive(parse_bytes(max_memory, "--max-memory"), "--max-memory",
                                               limit=MAX_SWEEP_BYTES),
                    check_positive(max_seconds, "--max-seconds", limit=MAX_SWEEP_SECONDS))
    path = None
    if plot is not None:
        from kvcalc.out.plot import check_plot_path

        path = check_plot_path(plot)
    if chart and fmt != "table":
        raise InputError("--chart: only with --format table (JSON/CSV stay machine-readable); use --plot FILE")
    if target == "trace":
        import kvcalc.trace.sweep  # noqa: F401  (registers the trace target)
    axes = sw.parse_axes(target, vary or [], max_points, limits)
    settings = sw.parse_fixed(target, fixed or [], axes)
    result = sw.sweep_result(target, axes, settings, limits)
    numeric = [a for a in axes if a.numeric]
    draw = chart if chart is not None else (fmt == "table" and sys.stdout.isatty() and len(numeric) == 1)
    plan = None
    if draw or path is not None or y or x:
        from kvcalc.out.chart_text import plan_chart

        def plan_of(heat: bool):
            return plan_chart(result.main.columns, result.rows, [(sw.column_key(a.name), a.numeric) for a in axes],
                              sw.column_key(x) if x else None, y or [], sw.DEFAULT_Y[target], heat=heat)

        plan = plan_of(False)
        if path is not None:
            from kvcalc.out.plot import write_plot

            write_plot(path, result.rows, plan_of(True), result.main.title)
    if not draw:
        emit(result, fmt, check, False)
        return
    from kvcalc.out.chart_text import line_chart, series
    from kvcalc.out.render import output_width

    width = min(output_width(sys.stdout)[0], 100)
    failed = None
    try:
        emit(result, fmt, check, False)
    except typer.Exit as e:  # a --check failed: the chart still follows the table
        failed = e
    for ycol in plan.ys:
        sys.stdout.write("\n" + line_chart(series(result.rows, plan, ycol.key), plan.x, ycol, width=width))
    if failed is not None:
        raise failed
