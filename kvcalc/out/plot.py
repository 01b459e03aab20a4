"""``--plot FILE.png|svg|html``: a sweep's chart drawn to a file with matplotlib (the optional extra
``kvcalc[plot]``), imported only here and only when a file is asked for.

Lines: one subplot per ``--y`` field, x = the numeric axis, one line (with a legend entry) per series.
Heat map (two numeric axes): colour = the first ``--y`` field over (x, second axis), one panel per series.
HTML: the SVG drawing inside a minimal page (no script, no network).
"""

from __future__ import annotations

import io
from pathlib import Path

from kvcalc.out.chart_text import ChartPlan, axis_label, series, tick_text, use_log
from kvcalc.out.errors import InputError

FORMATS = (".png", ".svg", ".html")


def check_plot_path(path: str) -> Path:
    """Validate --plot before any work: a known suffix and matplotlib installed (InputError naming the extra)."""
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise InputError(f"--plot {path}: give a file ending in {', '.join(FORMATS)}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError("--plot: needs matplotlib, which is not installed; "
                         "install the extra: pip install 'kvcalc[plot]'") from None
    return p


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _lines(plt, rows, plan: ChartPlan, title: str):
    fig, axs = plt.subplots(len(plan.ys), 1, figsize=(8, 3.6 * len(plan.ys)), squeeze=False)
    for ax, y in zip(axs[:, 0], plan.ys):
        data = series(rows, plan, y.key)
        for label, xs, ys in data:
            order = sorted(range(len(xs)), key=xs.__getitem__)
            ax.plot([xs[i] for i in order], [ys[i] for i in order], marker="o", markersize=3, label=label)
        all_x = [v for _, xs, _ in data for v in xs]
        all_y = [v for _, _, ys in data for v in ys]
        if use_log(all_x):
            ax.set_xscale("log")
        if use_log(all_y):
            ax.set_yscale("log")
        ax.set_xlabel(axis_label(plan.x))
        ax.set_ylabel(axis_label(y))
        ax.grid(True, alpha=0.3)
        if len(data) > 1:
            ax.legend(fontsize="small")
    fig.suptitle(_wrap(title), fontsize="medium")
    fig.tight_layout()
    return fig


def _wrap(title: str) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(title, 90))


def _heat(plt, rows, plan: ChartPlan, title: str):
    import numpy as np

    y = plan.ys[0]
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in plan.by), []).append(r)
    fig, axs = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.5), squeeze=False)
    for ax, (key, rs) in zip(axs[0], groups.items()):
        xs = sorted({r[plan.x.key] for r in rs})
        x2s = sorted({r[plan.x2.key] for r in rs})
        z = np.full((len(x2s), len(xs)), np.nan)
        for r in rs:
            v = r.get(y.key)
            z[x2s.index(r[plan.x2.key]), xs.index(r[plan.x.key])] = np.nan if v is None else v
        mesh = ax.pcolormesh(np.arange(len(xs) + 1), np.arange(len(x2s) + 1), z, shading="flat")
        ax.set_xticks(np.arange(len(xs)) + 0.5, [f"{v:g}" for v in xs], rotation=45, fontsize="small")
        ax.set_yticks(np.arange(len(x2s)) + 0.5, [f"{v:g}" for v in x2s], fontsize="small")
        ax.set_xlabel(axis_label(plan.x))
        ax.set_ylabel(axis_label(plan.x2))
        ax.set_title(", ".join(str(k) for k in key), fontsize="small")
        if z.size <= 64:  # small grids: the value in each cell
            for (i, j), v in np.ndenumerate(z):
                if not np.isnan(v):
                    ax.text(j + 0.5, i + 0.5, tick_text(y, v), ha="center", va="center", fontsize="x-small",
                            color="white" if v < np.nanmean(z) else "black")
        fig.colorbar(mesh, ax=ax, label=axis_label(y))
    fig.suptitle(_wrap(title), fontsize="medium")
    fig.tight_layout()
    return fig


def write_plot(path: Path, rows, plan: ChartPlan, title: str) -> None:
    """Draw the plan's chart (heat map when it has a second x axis) into ``path`` (.png, .svg or .html)."""
    plt = _pyplot()
    fig = _heat(plt, rows, plan, title) if plan.x2 is not None else _lines(plt, rows, plan, title)
    _save(plt, fig, path, title)


def _save(plt, fig, path: Path, title: str) -> None:
    suffix = path.suffix.lower()
    try:
        if suffix == ".html":
            buf = io.StringIO()
            fig.savefig(buf, format="svg", bbox_inches="tight")
            svg = buf.getvalue()
            svg = svg[svg.index("<svg"):]
            path.write_text(f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{_escape(title)}</title>"
                            f"</head><body>\n{svg}\n</body></html>\n", encoding="utf-8")
        else:
            fig.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as e:
        raise InputError(f"--plot {path}: cannot write ({e.strerror or e})") from None
    finally:
        plt.close(fig)


def write_curve(path: Path, rows, x: str, y: str, label: str, title: str) -> None:
    """A hit-rate curve: ``y`` (a fraction) vs ``x`` (tokens, log axis) over every finite row; rows whose ``label``
    is not "curve" (the capacities given, e.g. a node's KV budget) are marked with a dashed line and their value."""
    import math

    plt = _pyplot()
    pts = sorted((r[x], r[y]) for r in rows if r.get(x) is not None and math.isfinite(r[x]) and r[x] > 0)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker="o", markersize=3, label="LRU hit rate")
    for i, r in enumerate(r for r in rows if r.get(label) != "curve" and r.get(x) is not None
                          and math.isfinite(r[x]) and r[x] > 0):
        colour = f"C{i + 1}"
        ax.axvline(r[x], color=colour, linestyle="--", linewidth=1)
        ax.plot([r[x]], [100 * r[y]], marker="D", color=colour,
                label=f"{r[label]}: {r[x]:,.0f} tokens, {100 * r[y]:.1f}%")
    ax.set_xscale("log")
    finish(plt, fig, ax, path, title, "cache capacity [tokens]", "token hit rate [%]")


def finish(plt, fig, ax, path: Path, title: str, xlabel: str, ylabel: str) -> None:
    """Label a one-axes figure, add its grid, legend and wrapped title, lay it out and save it to ``path``."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.suptitle(_wrap(title), fontsize="medium")
    fig.tight_layout()
    _save(plt, fig, path, title)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
