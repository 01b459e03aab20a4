"""Predicted vs measured for every calibration row: the parity chart (docs/img/serving-parity.png) and the table
and error summary between the ``<!-- parity -->`` markers of docs/serving-model.md; then the page's
``$ kvcalc bench`` examples get their real output.

    python bench/plot_serving_parity.py [--csv tests/fixtures/perf/calibration.csv]

Needs matplotlib (the ``plot``/``test`` extras). Deterministic: the same calibration gives the same files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "serving-model.md"
PNG = ROOT / "docs" / "img" / "serving-parity.png"
LABELS = {"output_throughput": "output throughput [tok/s]", "mean_ttft_ms": "mean TTFT [ms]",
          "mean_tpot_ms": "mean TPOT [ms]"}


def table(rows, preds) -> str:
    from kvcalc.serve import calibration as c

    out = ["| # | model | GPU | engine | flags | in / out | output tok/s meas / pred | mean TTFT ms meas / pred |"
           " mean TPOT ms meas / pred |", "|---|---|---|---|---|---|---|---|---|"]
    for i, (r, p) in enumerate(zip(rows, preds), 1):
        cells = []
        for k in c.METRICS:
            m = r.measured.get(k)
            cells.append(f"{m:,.1f} / {p[k]:,.1f} ({100 * (p[k] / m - 1):+.0f}%)" if m else "-")
        flags = ("async " if "--async-scheduling" in r.flags else "") + r.raw["parallel"]
        out.append(f"| {i} | {r.model.split('/')[-1]} | {r.hardware.split('-')[0]} | {r.engine} {r.raw['engine_version']} "
                   f"| {flags} | {r.input_len:,} / {r.total_output_tokens / r.num_prompts:.0f} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def summary(rows, preds) -> str:
    import numpy as np

    from kvcalc.serve import calibration as c

    lines = ["| rows | metric | rows | median abs error | worst (ratio) | rows within 2x |",
             "|---|---|---|---|---|---|"]
    for label, gpu in (("all", ""), ("A100", "A100"), ("H100", "H100")):
        sel = [(r, p) for r, p in zip(rows, preds) if r.hardware.startswith(gpu)]
        e = c.errors([r for r, _ in sel], [p for _, p in sel])
        for k, v in e.items():
            v = np.asarray(v)
            ratio = np.maximum(v + 1, 1 / (v + 1))
            lines.append(f"| {label} | {LABELS[k]} | {len(v)} | {100 * np.median(np.abs(v)):.1f}% | "
                         f"{ratio.max():.2f}x | {int((ratio <= 2).sum())} of {len(v)} |")
    return "\n".join(lines)


def calibration_table() -> str:
    """The fitted figures of every shipped calibration, one column per GPU."""
    from dataclasses import fields

    from kvcalc.model import catalog

    names = catalog.names("calibration")
    cals = [catalog.load("calibration", n) for n in names]
    out = ["| figure | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for f in fields(cals[0]):
        if f.name in ("schema_version", "source"):
            continue
        out.append(f"| `{f.name}` | " + " | ".join(f"{getattr(c, f.name):g}" for c in cals) + " |")
    return "\n".join(out)


def chart(rows, preds) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvcalc.serve import calibration as c

    fig, axes = plt.subplots(1, 3, figsize=(13, 4.4))
    colours = {"vLLM": "tab:blue", "SGLang": "tab:green", "TensorRT-LLM": "tab:red"}
    for ax, k in zip(axes, c.METRICS):
        pts = [(r.measured[k], p[k], r) for r, p in zip(rows, preds) if k in r.measured]
        lo = min(min(a, b) for a, b, _ in pts) / 1.5
        hi = max(max(a, b) for a, b, _ in pts) * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.plot([lo, hi], [2 * lo, 2 * hi], "k:", lw=0.6)
        ax.plot([lo, hi], [lo / 2, hi / 2], "k:", lw=0.6)
        for engine, col in colours.items():
            for gpu, marker in (("A100", "o"), ("H100", "^")):
                sel = [(a, b) for a, b, r in pts if r.engine == engine and r.hardware.startswith(gpu)]
                if sel:
                    ax.scatter(*zip(*sel), s=18, c=col, marker=marker, label=f"{engine} {gpu}", alpha=0.8)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel=f"measured {LABELS[k]}",
               ylabel="kvcalc bench (predicted)")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("kvcalc's serving model vs 78 measured vllm-bench-serve runs (GPUStack Performance Lab); "
                 "dotted: 2x", fontsize=10)
    fig.tight_layout()
    PNG.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PNG, dpi=110, metadata={"Software": None})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", default=str(ROOT / "tests" / "fixtures" / "perf" / "calibration.csv"))
    a = ap.parse_args()
    from kvcalc.serve import calibration as c

    rows = c.read_rows(a.csv)
    preds = [c.predict(r) for r in rows]
    chart(rows, preds)
    text = DOC.read_text()
    start, end = "<!-- parity -->", "<!-- /parity -->"
    i, j = text.index(start) + len(start), text.index(end)
    DOC.write_text(text[:i] + "\n" + summary(rows, preds) + "\n\nThe calibration these figures come from "
                   "(presets/calibration/):\n\n" + calibration_table() + "\n\nEvery row (measured / predicted, "
                   "error):\n\n" + table(rows, preds) + "\n" + text[j:])
    print(summary(rows, preds))
    examples()
    return 0


def examples() -> None:
    """Rewrite the output under every ``$ kvcalc`` command of the page with what it prints now (COLUMNS=120,
    NO_COLOR, as tests/test_docs_serving.py runs them)."""
    import os
    import re
    import shlex
    import subprocess

    env = dict(os.environ, COLUMNS="120", NO_COLOR="1", PYTHONPATH=str(ROOT))
    text = DOC.read_text()

    def run(m):
        command = m.group(1)
        out = subprocess.run([sys.executable, "-m", "kvcalc", *shlex.split(command)[1:]], cwd=ROOT, env=env,
                             capture_output=True, text=True).stdout
        return f"```\n$ {command}\n{out}```"

    DOC.write_text(re.sub(r"```\n\$ (kvcalc bench[^\n]*)\n.*?```", run, text, flags=re.DOTALL))


if __name__ == "__main__":
    sys.exit(main())
