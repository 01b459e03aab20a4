"""The serving model's calibration: the preset for a GPU (presets/calibration/<hardware>.toml) and the measured
runs it is fitted and tested on (a CSV in the columns of kvcalc's shared perf data, e.g.
tests/fixtures/perf/calibration.csv), each turned into the BenchSpec that predicts it.

A GPU without its own calibration uses the one of the closest calibrated GPU generation (FALLBACK), said in a note.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

# hardware preset -> the calibration it borrows when it has none of its own
FALLBACK = {"h200-sxm": "h100-sxm", "h800-sxm": "h100-sxm", "b200": "h100-sxm", "l40s": "a100-80g",
            "mi300x": "h100-sxm", "mi325x": "h100-sxm"}
DEFAULT = "h100-sxm"

# the measured rows' names -> kvcalc's presets
MODELS = {"openai/gpt-oss-120b": ("gpt-oss-120b", None), "openai/gpt-oss-20b": ("gpt-oss-20b", None),
          "Qwen/Qwen3-14B": ("qwen3-14b", None), "Qwen/Qwen3-14B-FP8": ("qwen3-14b", "fp8"),
          "Qwen/Qwen3-32B": ("qwen3-32b", None), "Qwen/Qwen3-32B-FP8": ("qwen3-32b", "fp8"),
          "Qwen/Qwen3-235B-A22B-Instruct-2507": ("qwen3-235b-a22b", None),
          "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": ("qwen3-235b-a22b", "fp8"),
          # held-out validation rows (tests/fixtures/perf/validation.csv); R1 has V3's architecture (config.json)
          "Qwen/Qwen3-8B": ("qwen3-8b", None), "Qwen/Qwen3-8B-FP8": ("qwen3-8b", "fp8"),
          "deepseek-ai/DeepSeek-R1-0528": ("deepseek-v3", None), "deepseek-ai/DeepSeek-V3.2": ("deepseek-v3.2", None)}
ENGINES = {"vLLM": "vllm", "SGLang": "sglang", "TensorRT-LLM": "trtllm"}
METRICS = {"output_throughput": "output_tok_per_s", "mean_ttft_ms": "mean_ttft_ms",
           "mean_tpot_ms": "mean_tpot_ms"}


def calibration_for(hw_name: str):
    """(calibration preset, its name, note or None) for a hardware preset name or a path (a user's file)."""
    from kvcalc.model import catalog

    names = catalog.names("calibration")
    stem = Path(hw_name).stem
    if stem in names:
        return catalog.load("calibration", stem), stem, None
    borrowed = FALLBACK.get(stem, DEFAULT)
    note = (f"no calibration for {stem}: the serving model uses {borrowed}'s efficiencies "
            f"(presets/calibration/{borrowed}.toml), scaled by {stem}'s own peak and bandwidth")
    return catalog.load("calibration", borrowed), borrowed, note


def hardware_of(name: str) -> str:
    """The measured rows' GPU names -> kvcalc's hardware presets."""
    for prefix, preset in (("A100", "a100-80g"), ("H100", "h100-sxm"), ("H200", "h200-sxm")):
        if name.startswith(prefix):
            return preset
    return name


@dataclass(frozen=True)
class MeasuredRow:
    """One measured run: where it comes from, its inputs and the three fitted metrics."""

    source: str
    model: str
    hardware: str
    engine: str
    flags: str
    input_len: int
    output_len: int
    num_prompts: int
    total_output_tokens: int
    measured: dict
    raw: dict


def _note(notes: str, key: str):
    m = re.search(rf"\b{key}=([0-9.]+)", notes)
    return float(m.group(1)) if m else None


def read_rows(path) -> list[MeasuredRow]:
    """The measured runs of a calibration CSV."""
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            n = int(_note(r["notes"], "successful") or r["num_prompts"])
            out = int(_note(r["notes"], "total_output_tokens") or n * int(r["output_len"]))
            rows.append(MeasuredRow(
                source=f"{r['source_file']}@{r['commit']}", model=r["model"], hardware=r["hardware"],
                engine=r["engine"], flags=r["key_flags"], input_len=int(r["input_len"]),
                output_len=int(r["output_len"]), num_prompts=n, total_output_tokens=out,
                measured={k: float(r[c]) for k, c in METRICS.items() if r[c]}, raw=r))
    return rows


def _flag(flags: str, *names: str):
    for name in names:
        m = re.search(rf"{re.escape(name)}[ =]([0-9]+)", flags)
        if m:
            return int(m.group(1))
    return None


def spec_of(row: MeasuredRow, cal=None):
    """The BenchSpec predicting a measured row (its own flags; output lengths as generated)."""
    from kvcalc.model import catalog
    from kvcalc.model.weights_dtype import with_weights_dtype
    from kvcalc.serve.bench import BenchSpec
    from kvcalc.serve.bench_measured import spread

    name, dtype = MODELS[row.model]
    hw_name = hardware_of(row.hardware)
    hw = catalog.load_hardware(hw_name)
    tp = int(re.search(r"tp(\d+)", row.raw["parallel"]).group(1))
    outputs = tuple(spread(row.total_output_tokens, row.num_prompts).tolist())
    return BenchSpec(
        model_name=name, model=with_weights_dtype(catalog.load_model(name), dtype), hw_name=hw_name, hw=hw,
        link=catalog.load_link(hw.scaleup_link) if hw.scaleup_link else None,
        cal=cal if cal is not None else calibration_for(hw_name)[0], cal_name=hw_name, tp=tp,
        engine=ENGINES[row.engine], async_scheduling="--async-scheduling" in row.flags,
        input_len=row.input_len, output_len=row.output_len, num_prompts=row.num_prompts,
        request_rate=float(row.raw["request_rate"] or "inf"),
        max_concurrency=int(row.raw["max_concurrency"]) if row.raw["max_concurrency"] else None,
        max_num_batched_tokens=_flag(row.flags, "--max-num-batched-tokens", "--max_num_tokens"),
        max_model_len=_flag(row.flags, "--max-model-len", "--max_seq_len"), output_lens=outputs, started=True)


def predict(row: MeasuredRow, cal=None) -> dict:
    """The serving model's figures for a measured row."""
    from kvcalc.serve.bench import simulate_spec

    return simulate_spec(spec_of(row, cal))[0]


def errors(rows, predictions) -> dict:
    """Relative errors (predicted / measured - 1) per metric over the rows that measure it."""
    out: dict = {k: [] for k in METRICS}
    for row, p in zip(rows, predictions):
        for k, v in row.measured.items():
            out[k].append(p[k] / v - 1)
    return out
