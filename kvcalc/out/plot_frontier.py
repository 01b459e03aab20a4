"""``kvcalc plan --plot FILE``: the simulated configurations, their Pareto frontier (output tokens/s per GPU vs
tokens/s per user) and the chosen one, drawn with matplotlib (the optional extra ``kvcalc[plot]``)."""

from __future__ import annotations

from pathlib import Path

from kvcalc.out.plot import _pyplot, finish

X, Y = "tokens_per_s_per_user", "output_throughput_per_gpu"


def write_frontier(path: Path, rows, front, chosen: dict, title: str) -> None:
    """Every row as a point (meets the targets: filled), the frontier rows (``front``, by tokens/s per user) as
    a line, ``chosen`` as a star."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    ok = [r for r in rows if r.get("meets")]
    miss = [r for r in rows if not r.get("meets")]
    ax.scatter([r[X] for r in miss], [r[Y] for r in miss], s=14, facecolors="none", edgecolors="C7",
               label="simulated, misses the targets")
    ax.scatter([r[X] for r in ok], [r[Y] for r in ok], s=14, color="C0", label="simulated, meets the targets")
    ax.plot([r[X] for r in front], [r[Y] for r in front], color="C1", label="Pareto frontier")
    ax.scatter([chosen[X]], [chosen[Y]], marker="*", s=200, color="C3", zorder=3,
               label=f"chosen: {chosen['gpus']} x {chosen['hardware']} tp {chosen['tp']} dp {chosen['dp']} "
                     f"x {chosen['replicas']}")
    finish(plt, fig, ax, path, title, "tokens/s per user [tok/s]", "output tokens/s per GPU [tok/s]")
