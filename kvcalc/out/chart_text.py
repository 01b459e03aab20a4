"""Charts of sweep rows: which field against which axis, split into series (``plan_chart``), and a line chart drawn
with characters for the terminal (``line_chart``; pure Python, no dependency). ``plot.py`` draws the same plan
into a PNG/SVG/HTML file with matplotlib.

A chart has one numeric x axis (a ``--vary`` axis); each other varied input (and the strategy of a ``compare``
row) splits the rows into series, one line each. An axis is drawn on a log scale when its values are all positive
and span more than two decades (max / min > 100).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

from kvcalc.out.errors import InputError
from kvcalc.out.results import Column

MARKERS = "*o+x#@%&"
UNIT_OF_KIND = {"bytes": "B", "bytes_exact": "B", "s": "s", "usd": "USD", "flops": "FLOP", "percent": "fraction",
                "flops_per_s": "FLOP/s", "bytes_per_s": "B/s", "tokens_per_s": "tok/s", "tokens": "tokens"}


@dataclass(frozen=True)
class ChartPlan:
    """What to draw: x column, y columns, the columns that split series, and a second x for a heat map."""

    x: Column
    ys: tuple[Column, ...]
    by: tuple[str, ...]
    x2: Column | None = None


def kind_of_key(key: str) -> str:
    """The unit kind a field's name says (``_per_s`` rates, ``_s`` seconds, ``bytes``, ``usd``), else float."""
    if key.endswith("_per_s"):
        return next((f"{u}_per_s" for u in ("bytes", "tokens", "flops") if u in key), "float")
    if key.endswith("_s"):
        return "s"
    if "bytes" in key:
        return "bytes"
    return "usd" if key.startswith("usd") or key.endswith("_usd") else "float"


def axis_label(col: Column, ticks_in_percent: bool = False) -> str:
    """A column's title with its unit, e.g. ``KV/request [B]`` (a fraction is ``[%]`` where ticks show percents)."""
    unit = "%" if ticks_in_percent and col.kind == "percent" else UNIT_OF_KIND.get(col.kind)
    return f"{col.title} [{unit}]" if unit else col.title


def plan_chart(columns: tuple[Column, ...], rows, axes: list[tuple[str, bool]], x: str | None, ys: list[str],
               default_y: str, heat: bool = False) -> ChartPlan:
    """Check the chart's fields and pick its axes. ``axes``: (column key, numeric) of each varied input in order.
    InputError (exit 2) naming --x or --y for an unknown or non-numeric field."""
    by_key = {c.key: c for c in columns}
    numeric_axes = [k for k, numeric in axes if numeric]
    if x is not None:
        if x not in dict(axes):
            raise InputError(f"--x {x}: not a varied input; varied: {', '.join(k for k, _ in axes)}")
        if not dict(axes)[x]:
            raise InputError(f"--x {x}: not a numeric axis (it names presets or choices), so it cannot be an x axis; "
                             "it becomes one line per value instead")
        x_key = x
    elif numeric_axes:
        x_key = numeric_axes[0]
    else:
        raise InputError("--y/--plot: a chart needs a numeric --vary axis (e.g. context=1k..1m:log20); "
                         f"{', '.join(k for k, _ in axes)} name presets or choices")
    fields = sorted({k for r in rows for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    y_cols = []
    for y in ys or [default_y]:
        if not any(y in r for r in rows):
            close = difflib.get_close_matches(y, fields, n=3)
            raise InputError(f"--y {y}: no such field in the results; "
                             + (f"did you mean {', '.join(close)}?" if close else f"fields: {', '.join(fields)}"))
        if y not in fields:
            raise InputError(f"--y {y}: not a numeric field, cannot be plotted")
        y_cols.append(by_key.get(y, Column(y, y, kind_of_key(y))))
    others = [k for k, _ in axes if k != x_key]
    x2 = None
    if heat and len(numeric_axes) >= 2:
        x2_key = next(k for k in numeric_axes if k != x_key)
        others.remove(x2_key)
        x2 = by_key[x2_key]
    if any("strategy" in r for r in rows[:1]) and "strategy" not in others:
        others.append("strategy")
    return ChartPlan(by_key[x_key], tuple(y_cols), tuple(others), x2)


def series(rows, plan: ChartPlan, y: str) -> list[tuple[str, list[float], list[float]]]:
    """(label, xs, ys) per series in order of first appearance; rows without a number for y are skipped."""
    out: dict[tuple, tuple[list, list]] = {}
    for r in rows:
        key = tuple(r.get(k) for k in plan.by)
        xs, ys = out.setdefault(key, ([], []))
        v = r.get(y)
        if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
            xs.append(float(r[plan.x.key]))
            ys.append(float(v))
    title = next((c.title for c in plan.ys if c.key == y), y)
    return [(", ".join(str(k) for k in key) or title, xs, ys) for key, (xs, ys) in out.items()]


def use_log(values) -> bool:
    """True when every value is > 0 and they span more than two decades."""
    vals = [v for v in values if not math.isnan(v)]
    return bool(vals) and min(vals) > 0 and max(vals) / min(vals) > 100


def tick_text(col: Column, v: float) -> str:
    """A value as an axis tick or cell label, in the column's unit (whole numbers where a count lands beside one)."""
    from kvcalc.out.render import format_value

    kind = "count" if col.kind in ("fit", "int", "round") else "float" if col.kind in ("text", "bool") else col.kind
    # a tick on a log axis lands beside the whole number: 10 ** log10(1024) = 1023.99...
    if kind in ("count", "tokens"):
        v = round(v) if abs(v - round(v)) <= 1e-9 * abs(v) else float(f"{v:.4g}")
    return format_value(Column(col.key, col.title, kind), {col.key: v})


def line_chart(data: list[tuple[str, list[float], list[float]]], x: Column, y: Column, width: int = 72,
               height: int = 16, title: str = "") -> str:
    """A line chart in characters: one marker per series, joined column by column; y labels at the top, middle
    and bottom, x labels at both ends and the middle; log axes when the values span decades."""
    all_x = [v for _, xs, _ in data for v in xs]
    all_y = [v for _, _, ys in data for v in ys]
    if not all_x:
        return f"{title}\n(no points to draw)\n"
    logx, logy = use_log(all_x), use_log(all_y)
    fx = math.log10 if logx else float
    fy = math.log10 if logy else float
    x0, x1 = fx(min(all_x)), fx(max(all_x))
    y0, y1 = fy(min(all_y)), fy(max(all_y))
    if y0 == y1:
        y0, y1 = y0 - 1, y1 + 1
    if x0 == x1:
        x0, x1 = x0 - 1, x1 + 1
    labels = [tick_text(y, v if not logy else 10 ** v) for v in (y1, (y0 + y1) / 2, y0)]
    pad = max(len(s) for s in labels)
    plot_w = max(10, width - pad - 3)
    grid = [[" "] * plot_w for _ in range(height)]

    def cell(xv, yv):
        cx = round((fx(xv) - x0) / (x1 - x0) * (plot_w - 1))
        cy = round((fy(yv) - y0) / (y1 - y0) * (height - 1))
        return cx, height - 1 - cy

    for i, (_, xs, ys) in enumerate(data):
        mark = MARKERS[i % len(MARKERS)]
        pts = sorted(cell(a, b) for a, b in zip(xs, ys))
        for (ax, ay), (bx, by) in zip(pts, pts[1:]):
            for cx in range(ax, bx + 1):  # join neighbours column by column
                t = (cx - ax) / (bx - ax) if bx != ax else 0.0
                grid[round(ay + t * (by - ay))][cx] = mark
        for cx, cy in pts:
            grid[cy][cx] = mark
    lines = [title] if title else []
    lines.append(axis_label(y, ticks_in_percent=True) + (" (log)" if logy else ""))
    for r, row in enumerate(grid):
        lab = labels[0] if r == 0 else labels[1] if r == height // 2 else labels[2] if r == height - 1 else ""
        lines.append(f"{lab:>{pad}} |" + "".join(row).rstrip())
    lines.append(" " * pad + " +" + "-" * plot_w)
    xl = [tick_text(x, v if not logx else 10 ** v) for v in (x0, (x0 + x1) / 2, x1)]
    axis = list(" " * (plot_w + 2))
    for pos, s in ((0, xl[0]), ((plot_w - len(xl[1])) // 2, xl[1]), (plot_w - len(xl[2]), xl[2])):
        axis[pos + 2: pos + 2 + len(s)] = s
    lines.append(" " * pad + "".join(axis).rstrip())
    lines.append(" " * pad + "  " + axis_label(x, ticks_in_percent=True) + (" (log)" if logx else ""))
    if len(data) > 1 or data[0][0] != y.title:
        lines += [f"  {MARKERS[i % len(MARKERS)]} {label}" for i, (label, _, _) in enumerate(data)]
    return "\n".join(lines) + "\n"
