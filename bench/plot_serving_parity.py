"""Predicted vs measured for every calibration row: the parity chart (docs/img/serving-parity.png) and the table
and error summary between the ``<!-- parity -->`` markers of docs/serving-model.md, with aiconfigurator's figures
beside kvcalc's where tests/fixtures/perf/aiconfigurator.csv has them (bench/aiconfigurator_runs.py); the same for
the held-out rows (tests/fixtures/perf/validation.csv, never fitted) between ``<!-- validation -->`` markers; then
the page's ``$ kvcalc bench`` examples get their real output.

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
PERF = ROOT / "tests" / "fixtures" / "perf"
PNG = ROOT / "docs" / "img" / "serving-parity.png"
LABELS = {"output_throughput": "output throughput [tok/s]", "mean_ttft_ms": "mean TTFT [ms]",
          "mean_tpot_ms": "mean TPOT [ms]"}


def table(rows, preds, aic=None) -> str:
    """One line per row: measured / kvcalc (error), and with ``aic`` (row number -> aiconfigurator's figures)
    aiconfigurator's output tok/s, TTFT and TPOT with their errors."""
    from kvcalc.serve import calibration as c

    head = ("| # | model | GPU | engine | flags | in / out | output tok/s meas / pred | mean TTFT ms meas / pred |"
            " mean TPOT ms meas / pred |")
    out = [head + (" aiconfigurator tok/s; TTFT; TPOT |" if aic is not None else ""),
           "|---|---|---|---|---|---|---|---|---|" + ("---|" if aic is not None else "")]
    for i, (r, p) in enumerate(zip(rows, preds), 1):
        cells = []
        for k in c.METRICS:
            m = r.measured.get(k)
            cells.append(f"{m:,.1f} / {p[k]:,.1f} ({100 * (p[k] / m - 1):+.0f}%)" if m else "-")
        if aic is not None:
            a = aic.get(i)
            cells.append("; ".join(f"{a[k]:,.1f} ({100 * (a[k] / r.measured[k] - 1):+.0f}%)" for k in c.METRICS)
                         if a else "not run")
        flags = ("async " if "--async-scheduling" in r.flags else "") + r.raw["parallel"]
        conc = f" c{r.raw['max_concurrency']}" if r.raw["max_concurrency"] else ""
        out.append(f"| {i} | {r.model.split('/')[-1]} | {r.hardware.split('-')[0]} | {r.engine} {r.raw['engine_version']} "
                   f"| {flags}{conc} | {r.input_len:,} / {r.total_output_tokens / r.num_prompts:.0f} | "
                   + " | ".join(cells) + " |")
    return "\n".join(out)


def read_aiconfigurator(path=PERF / "aiconfigurator.csv") -> dict:
    """Row number -> aiconfigurator's figures (the metrics' names) for the rows it ran; {} without the file."""
    import csv

    if not Path(path).exists():
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        return {int(r["row"]): {"output_throughput": float(r["output_tok_per_s"]),
                                "mean_ttft_ms": float(r["mean_ttft_ms"]), "mean_tpot_ms": float(r["mean_tpot_ms"])}
                for r in csv.DictReader(f) if r["output_tok_per_s"]}


def aic_summary(rows, preds, aic) -> str:
    """Median |error| of aiconfigurator and of kvcalc on the rows aiconfigurator ran."""
    import numpy as np

    from kvcalc.serve import calibration as c

    sel = [i for i in range(1, len(rows) + 1) if i in aic]
    lines = ["| metric | rows | aiconfigurator median abs error | kvcalc median abs error (same rows) |",
             "|---|---|---|---|"]
    for k in c.METRICS:
        a = [aic[i][k] / rows[i - 1].measured[k] - 1 for i in sel]
        b = [preds[i - 1][k] / rows[i - 1].measured[k] - 1 for i in sel]
        lines.append(f"| {LABELS[k]} | {len(sel)} | {100 * np.median(np.abs(a)):.1f}% | "
                     f"{100 * np.median(np.abs(b)):.1f}% |")
    return "\n".join(lines)


def summary(rows, preds, gpus=(("all", ""), ("A100", "A100"), ("H100", "H100"))) -> str:
    import numpy as np

    from kvcalc.serve import calibration as c

    lines = ["| rows | metric | rows | median abs error | worst (ratio) | rows within 2x |",
             "|---|---|---|---|---|---|"]
    for label, gpu in gpus:
        sel = [(r, p) for r, p in zip(rows, preds) if r.hardware.startswith(gpu)]
        e = c.errors([r for r, _ in sel], [p for _, p in sel])
        for k, v in e.items():
            v = np.asarray(v)
            ratio = np.maximum(v + 1, 1 / (v + 1))
            lines.append(f"| {label} | {LABELS[k]} | {len(v)} | {100 * np.median(np.abs(v)):.1f}% | "
                         f"{ratio.max():.2f}x | {int((ratio <= 2).sum())} of {len(v)} |")
    return "\n".join(lines)


# aiconfigurator's ops (bench/aiconfigurator_ops.py) grouped; an op in no group fails. Prefill: in the step
# model's terms; decode: its attention block and its MLP side (dense MLP or experts, router, LM head)
OP_GROUPS = {"dense matmuls + attention": ("qkv_gemm", "proj_gemm", "attention", "gate_ffn1_gemm", "ffn2_gemm",
                                           "mla_block", "shared_gate_up_gemm", "shared_ffn2_gemm", "router_gemm",
                                           "logits_gemm"),
             "routed experts": ("moe",),
             "communication": ("ar_1", "ar_2", "tp_allreduce", "embedding_ar", "p2p", "moe_pre_dispatch",
                               "moe_post_dispatch"),
             "norms, activations": ("add_norm_1", "add_norm_2", "act_gate", "shared_act_gate", "embedding")}
DECODE_GROUPS = {"attention block": ("qkv_gemm", "proj_gemm", "attention", "mla_block"),
                 "MLP, experts, LM head": ("gate_ffn1_gemm", "ffn2_gemm", "moe", "moe_overlap", "router_gemm",
                                           "shared_gate_up_gemm", "shared_ffn2_gemm", "logits_gemm"),
                 "communication": OP_GROUPS["communication"], "norms, activations": OP_GROUPS["norms, activations"]}


def kvcalc_step_parts(model, dtype, hw_name, engine, tp, phase, seqs, length) -> dict:
    """kvcalc's prefill step of ``seqs`` prompts of ``length`` tokens from position 0, or its decode step of ``seqs``
    sequences at context ``length``: compute_parts, the weights' and the KV's read, communication, overhead and
    the step [s]."""
    from kvcalc.model import catalog
    from kvcalc.model.weights_dtype import with_weights_dtype
    from kvcalc.serve.calibration import calibration_for
    from kvcalc.serve.step_time import step_model

    hw = catalog.load_hardware(hw_name)
    sm = step_model(with_weights_dtype(catalog.load_model(model), dtype), hw,
                    catalog.load_link(hw.scaleup_link) if hw.scaleup_link else None, calibration_for(hw_name)[0],
                    tp, engine)
    if phase == "context":
        tokens, attn = float(seqs * length), seqs * sm.prefill_attention_flops(0, length)
        kv = seqs * float(sm.kv_read_bytes(length))
    else:
        tokens, attn = float(seqs), seqs * float(sm.decode_attention_flops(length + 1))
        kv = seqs * float(sm.kv_read_bytes(length + 1))
    t = sm.terms(tokens, float(seqs), float(seqs), attn, kv)
    bw = sm.hbm_bytes_per_s * sm.hbm_eff
    return {**sm.compute_parts(tokens, float(seqs), attn), **t, "weights_s": float(sm.weight_read_bytes(tokens)) / bw,
            "kv_s": kv / bw, "step_s": max(t["compute_s"], t["memory_s"]) + t["comm_s"] + t["overhead_s"]}


def _aic_steps(path, phase, groups) -> dict:
    """{(model, dtype, hardware, engine, tp, sequences, length, engine version): {group: ms}} of one phase."""
    import csv

    steps: dict = {}
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r["phase"] != phase:
                continue
            key = (r["model"], r["weights_dtype"], r["hardware"], r["engine"], int(r["tp"]), int(r["sequences"]),
                   int(r["length"]), r["aic_backend_version"])
            op = r["op"].removeprefix(phase + "_")
            group = next((g for g, ops in groups.items() if op in ops), None)
            if group is None:
                raise ValueError(f"{path}: aiconfigurator op {r['op']!r} is in no group")
            steps.setdefault(key, dict.fromkeys(groups, 0.0))[group] += float(r["latency_ms"])
    return steps


def ops_table(path=PERF / "aiconfigurator_ops.csv") -> str:
    """Per configuration, one prefill step and one decode step: aiconfigurator's measured ops, grouped, beside
    kvcalc's terms [ms]; "" without the file."""
    from kvcalc.out import units

    if not Path(path).exists():
        return ""
    out = ["Prefill, one step of 2 prompts x 4,096 tokens from position 0:", "",
           "| model | GPU | engine | " + " | ".join(f"{g} ms: aic / kvcalc" for g in OP_GROUPS)
           + " | step ms: aic / kvcalc (kvcalc / aic) |", "|---|---|---|" + "---|" * (len(OP_GROUPS) + 1)]
    for (model, dtype, hw, engine, tp, seqs, length, version), aic in _aic_steps(path, "context", OP_GROUPS).items():
        k = {n: units.s_to_ms(v) for n, v in kvcalc_step_parts(model, dtype or None, hw, engine, tp, "context", seqs,
                                                       length).items()}
        mine = {"dense matmuls + attention": k["dense_s"] + k["head_s"] + k["attention_s"],
                "routed experts": k["experts_s"], "communication": k["comm_s"], "norms, activations": k["overhead_s"]}
        total = sum(aic.values())
        out.append(f"| {model}{' ' + dtype if dtype else ''} | {tp} x {hw} | {engine} ({version}) | "
                   + " | ".join(f"{aic[g]:,.1f} / {mine[g]:,.1f}" for g in OP_GROUPS)
                   + f" | {total:,.1f} / {k['step_s']:,.1f} ({k['step_s'] / total:.2f}x) |")
    out += ["", "Decode, one step of 64 sequences at context 4,096 (kvcalc's step: max(compute, weights read + KV "
            "read) + communication + overhead):", "",
            "| model | GPU | engine | aic: " + " / ".join(DECODE_GROUPS) + " ms | kvcalc: weights read / KV read / "
            "compute / communication / overhead ms | step ms: aic / kvcalc (kvcalc / aic) |",
            "|---|---|---|---|---|---|"]
    for (model, dtype, hw, engine, tp, seqs, length, version), aic in _aic_steps(path, "generation",
                                                                                  DECODE_GROUPS).items():
        k = {n: units.s_to_ms(v) for n, v in kvcalc_step_parts(model, dtype or None, hw, engine, tp, "generation", seqs,
                                                       length).items()}
        total = sum(aic.values())
        out.append(f"| {model}{' ' + dtype if dtype else ''} | {tp} x {hw} | {engine} ({version}) | "
                   + " / ".join(f"{aic[g]:,.2f}" for g in DECODE_GROUPS) + " | "
                   + " / ".join(f"{k[n]:,.2f}" for n in ("weights_s", "kv_s", "compute_s", "comm_s", "overhead_s"))
                   + f" | {total:,.2f} / {k['step_s']:,.2f} ({k['step_s'] / total:.2f}x) |")
    return "\n".join(out)


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
        # an optional figure a preset leaves out (None) falls back to another: say "absent"
        out.append(f"| `{f.name}` | " + " | ".join("absent" if getattr(c, f.name) is None else
                                                    f"{getattr(c, f.name):g}" for c in cals) + " |")
    return "\n".join(out)


def chart(rows, preds, held=((), ())) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvcalc.serve import calibration as c

    fig, axes = plt.subplots(1, 3, figsize=(13, 4.4))
    colours = {"vLLM": "tab:blue", "SGLang": "tab:green", "TensorRT-LLM": "tab:red"}
    for ax, k in zip(axes, c.METRICS):
        pts = [(r.measured[k], p[k], r) for r, p in zip(rows, preds) if k in r.measured]
        hp = [(r.measured[k], p[k]) for r, p in zip(*held) if k in r.measured]
        values = [v for a, b, _ in pts for v in (a, b)] + [v for pair in hp for v in pair]
        lo, hi = min(values) / 1.5, max(values) * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.plot([lo, hi], [2 * lo, 2 * hi], "k:", lw=0.6)
        ax.plot([lo, hi], [lo / 2, hi / 2], "k:", lw=0.6)
        for engine, col in colours.items():
            for gpu, marker in (("A100", "o"), ("H100", "^")):
                sel = [(a, b) for a, b, r in pts if r.engine == engine and r.hardware.startswith(gpu)]
                if sel:
                    ax.scatter(*zip(*sel), s=18, c=col, marker=marker, label=f"{engine} {gpu}", alpha=0.8)
        if hp:
            ax.scatter(*zip(*hp), s=26, facecolors="none", edgecolors="k", marker="s",
                       label="held out (not fitted)")
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel=f"measured {LABELS[k]}",
               ylabel="kvcalc bench (predicted)")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"kvcalc's serving model vs {len(rows)} measured vllm-bench-serve runs it was fitted on and "
                 f"{len(held[0])} held out (GPUStack Performance Lab); dotted: 2x", fontsize=10)
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
    held = c.read_rows(PERF / "validation.csv")
    held_preds = [c.predict(r) for r in held]
    chart(rows, preds, (held, held_preds))
    for marker, body in sections(rows, preds, held, held_preds).items():
        _between(marker, body)
    print(summary(rows, preds))
    print(summary(held, held_preds, (("all", ""),)))
    examples()
    return 0


def sections(rows, preds, held, held_preds) -> dict:
    """What lies between each pair of markers of docs/serving-model.md: {marker: markdown} (tests/
    test_docs_serving_tables.py holds the page to it)."""
    aic = read_aiconfigurator()
    aic_text = ("\n\naiconfigurator 0.12.0 on the calibration rows it runs (tests/fixtures/perf/aiconfigurator.csv, "
                "bench/aiconfigurator_runs.py), beside kvcalc on the same rows:\n\n" + aic_summary(rows, preds, aic)
                if aic else "")
    parity = (summary(rows, preds) + aic_text + "\n\nThe calibration these figures come from "
              "(presets/calibration/):\n\n" + calibration_table() + "\n\nEvery row (measured / predicted, "
              "error" + ("; aiconfigurator's figures and errors" if aic else "") + "):\n\n"
              + table(rows, preds, aic if aic else None))
    aic_held = read_aiconfigurator(PERF / "aiconfigurator_validation.csv")
    validation = (summary(held, held_preds, (("all", ""), ("H100", "H100"), ("H200", "H200")))
                  + ("\n\naiconfigurator 0.12.0 on the held-out rows it runs (tests/fixtures/perf/"
                     "aiconfigurator_validation.csv), beside kvcalc on the same rows:\n\n"
                     + aic_summary(held, held_preds, aic_held) if aic_held else "")
                  + "\n\nEvery held-out row (measured / predicted, error; cN: the client's --max-concurrency N"
                  + ("; aiconfigurator's figures and errors" if aic_held else "") + "):\n\n"
                  + table(held, held_preds, aic_held if aic_held else None))
    return {"parity": parity, "validation": validation, "ops": ops_table()}


def _between(marker: str, body: str) -> None:
    """Replace what lies between ``<!-- marker -->`` and ``<!-- /marker -->`` in the page."""
    text = DOC.read_text()
    start, end = f"<!-- {marker} -->", f"<!-- /{marker} -->"
    i, j = text.index(start) + len(start), text.index(end)
    DOC.write_text(text[:i] + "\n" + body + "\n" + text[j:])


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
