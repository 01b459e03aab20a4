"""``kvcalc sweep``: one command over the product of several inputs; a table, CSV/JSON, and charts."""

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import CheckOpt, FormatOpt
from kvcalc.out.sweep_spec import DEFAULT_MAX_BYTES, DEFAULT_MAX_SECONDS, MAX_POINTS
from kvcalc.out.units import MAX_SWEEP_POINTS, MAX_SWEEP_SECONDS

C = "Charts"
# a target's own options a sweep borrows as fixed inputs: its command, and where it lacks one (kv takes its models
# as arguments), the command whose declaration is used instead; command names of kvcalc.cli.app.COMMANDS
OPTION_SOURCES = {"kv": ("kv", "cost"), "capacity": ("capacity",), "cost": ("cost",),
                  "compare": ("compare",), "trace": ("trace",)}
BORROWED = "fixed__"  # prefix of a borrowed option's parameter name (never one of sweep's own)


def _command(name: str):
    """The click command ``kvcalc NAME`` runs, built from its typer function (the one declaration of its options)."""
    import importlib

    from kvcalc.cli.app import COMMANDS

    module, attr = COMMANDS[name]
    app = typer.Typer()
    app.command(name)(getattr(importlib.import_module(module), attr))
    return typer.main.get_command(app)


def borrowed_options(target: str, own_opts: set[str]) -> list:
    """Copies of ``target``'s own options that name one of its sweep inputs (``--model``, ``--context``,
    ``--hardware``...), renamed ``fixed__NAME`` and without defaults (only what is typed counts); spellings that
    sweep uses itself (``-v``, ``--format``) are left out."""
    import copy

    from kvcalc.serve import sweep as sw

    if target == "trace":
        import kvcalc.trace.sweep  # noqa: F401  (registers the trace target)
    axes, out, taken = sw.AXES.get(target, {}), [], set()
    for source in OPTION_SOURCES.get(target, ()):
        for param in _command(source).params:
            if param.param_type_name != "option":
                continue
            name = max(param.opts, key=len).lstrip("-")
            if name not in axes or name in taken or set(param.opts) & own_opts:
                continue
            p = copy.copy(param)
            p.name, p.default, p.required, p.show_default = BORROWED + name, None, False, False
            p.rich_help_panel = f"Fixed inputs of {target} (one value each, as --set NAME=VALUE)"
            out.append(p)
            taken.add(name)
    return out


def _as_text(d, value, flag: str) -> str:
    """A borrowed option's parsed value as the text --set would carry: flags as the axis's on/off choice."""
    from kvcalc.out.errors import InputError

    if isinstance(value, bool):
        on = next(c for c in d.choices if c in ("on", "warm"))
        return on if value else next(c for c in d.choices if c != on)
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise InputError(f"{flag}: one value as a fixed input; to vary it use --vary {flag.lstrip('-')}=A,B")
        value = value[0]
    return str(value)


class SweepCommand(typer.core.TyperCommand):
    """``kvcalc sweep TARGET``: sweep's options plus the target's own (see :func:`borrowed_options`), added once
    the target is known from the arguments, so ``sweep kv --model llama-3-70b`` and ``sweep kv --help`` see them."""

    def parse_args(self, ctx, args):
        target = self._target_in(args)
        if target is not None and not any(p.name.startswith(BORROWED) for p in self.params):
            own = {o for p in self.params for o in (*p.opts, *getattr(p, "secondary_opts", ()))}
            self.params = [*self.params, *borrowed_options(target, own)]
            from kvcalc.cli.help import placeholders

            placeholders(self)
        return super().parse_args(ctx, args)

    def _target_in(self, args: list[str]):
        """The TARGET among the arguments: the first word that is not an option's value."""
        from kvcalc.serve.sweep import TARGETS

        valued = {o for p in self.params if p.param_type_name == "option" and not p.is_flag for o in p.opts}
        words, skip = [], False
        for a in args:
            if skip:
                skip = False
            elif a.startswith("-"):
                skip = a in valued
            else:
                words.append(a)
        return next((w for w in words if w in TARGETS), None)

    def invoke(self, ctx):
        from kvcalc.cli.common import given
        from kvcalc.serve import sweep as sw

        fixed = []
        for p in self.params:
            if p.name.startswith(BORROWED):
                value = ctx.params.pop(p.name)
                if given(ctx, p.name):
                    name, flag = p.name[len(BORROWED):], max(p.opts, key=len)
                    fixed.append((name, flag, _as_text(sw.AXES[ctx.params["target"]][name], value, flag)))
        ctx.meta["kvcalc.sweep.options"] = tuple(fixed)
        return super().invoke(ctx)


def sweep(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(help="kv | capacity | cost | compare | trace", metavar="TARGET",
                                                 show_default=False)],
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
        "--max-memory", help="refuse grids that would hold more than this (estimated per point and format before "
        "starting; json/csv/markdown hold one chunk of points, a table every row), e.g. 8GB")]
    = f"{DEFAULT_MAX_BYTES / 1e9:g}GB",
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

    Fixed inputs: the target's own options (--model, --context, --hardware, ...; see kvcalc sweep TARGET --help)
    or --set NAME=VALUE, one value each.

    kv inputs: model, context, kv-dtype, mla-layout, indexer-dtype, state-dtype, mtp. capacity: those and hardware,
    link, gpus, hbm-utilization, reserve, block-tokens, attention, bandwidth. cost, compare: scenario, model,
    hardware, gpus, workload, requests, context, output-tokens, shared-prefix, price-per-gpu-hour, mfu-prefill,
    decode-tokens-per-s, warm, attention-flops, pd-link, the layouts; cost: strategy. trace: file, capacity
    (3m = 3,000,000 tokens), block-tokens, policy, model, hardware and gpus (the node's KV budget as the
    capacity), the layouts.

    Examples:

    \b
      kvcalc sweep kv --model llama-3-70b --vary context=4k,32k,128k
      kvcalc sweep kv --vary model=llama-3-70b,deepseek-v4-flash --vary context=1k..1m:log20 --format csv
      kvcalc sweep capacity --vary model=deepseek-v3,deepseek-v4-flash --vary context=4k..1m:log12 --plot fit.png
      kvcalc sweep compare --requests 100 --context 8k --vary shared-prefix=0..6k:step1k --y ttft_mean_s
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
    # JSON, CSV and Markdown are written chunk by chunk as the points are computed (memory bounded by a chunk);
    # a table lays out every row, and a --plot needs them all: those hold the rows, and the budget prices which
    streamed = path is None and sw.streams(target, fmt)
    output = sw.Output(fmt, streamed, path.suffix if path is not None else None,
                       bool(chart) or (chart is None and fmt == "table" and sys.stdout.isatty()), len(check or []))
    axes = sw.parse_axes(target, vary or [], max_points, limits, output)
    settings = sw.parse_fixed(target, fixed or [], axes, ctx.meta.get("kvcalc.sweep.options", ()))
    from kvcalc.out import progress

    if streamed:
        from contextlib import nullcontext

        from kvcalc.cli.common import emit_chunks

        stdout = sys.stdout  # a bar's rich Live replaces sys.stdout; the rows go to the real one
        with progress.shown(f"sweep {target}") if not stdout.isatty() else nullcontext():
            head, first, chunks = sw.sweep_stream(target, axes, settings, limits, output)
            if y or x:  # the chart options are checked as they would be with a chart (the rows share their keys)
                from kvcalc.out.chart_text import plan_chart

                plan_chart(head.main.columns, first, [(sw.column_key(a.name), a.numeric) for a in axes],
                           sw.column_key(x) if x else None, y or [], sw.DEFAULT_Y[target])
            emit_chunks(head, chunks, fmt, check, stdout)
        return
    with progress.shown(f"sweep {target}"):
        result = sw.sweep_result(target, axes, settings, limits, output)
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


sweep.command_class = SweepCommand  # kvcalc.cli.app registers the command with this click class
