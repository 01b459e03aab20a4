"""aiconfigurator's figures for the calibration rows it supports (issue 18, item 5): NOT a kvcalc dependency.

    python3 -m venv AIC_VENV && AIC_VENV/bin/pip install aiconfigurator==0.12.0   # its own venv, any path
    AIC_VENV/bin/python bench/aiconfigurator_runs.py [--csv tests/fixtures/perf/calibration.csv]
                                                     [--out tests/fixtures/perf/aiconfigurator.csv]

For every measured row: ``aiconfigurator cli estimate`` (its Python entry point ``cli_estimate``, aggregated /
in-flight batching mode, the SILICON database of the row's GPU and engine) with the row's model (its bundled
config.json, or kvcalc's copy of the real one in tests/fixtures/configs/), GPU, engine, TP, input length and the
mean generated length (total_output_tokens / successful, as kvcalc's prediction uses), its context-token budget per
step the engine's (the row's --max-num-batched-tokens, else the engine's default: what kvcalc's prediction uses;
aiconfigurator's own default is one prompt per step). Its batch size is the row's
number of prompts (a burst: all in flight) or its --max-concurrency, halved until aiconfigurator's own KV estimate holds it (it warns
otherwise): the running set the engine could hold. Written: aiconfigurator's TTFT, TPOT and output tokens/s as it
prints them, nothing computed here. Its TTFT is a steady-state figure at that batch size, with no queue: the
measured burst TTFTs are mostly queueing, so that column is not a like-for-like prediction of theirs.
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SYSTEMS = {"a100-80g": "a100_sxm", "h100-sxm": "h100_sxm", "h200-sxm": "h200_sxm"}
BACKENDS = {"vLLM": "vllm", "SGLang": "sglang", "TensorRT-LLM": "trtllm"}
# the rows' model -> (aiconfigurator model path, GEMM quant override); Qwen3-14B is not bundled with it: kvcalc's
# copy of its config.json; the 235B Instruct-2507 has the architecture of the bundled Qwen3-235B-A22B config
MODELS = {"openai/gpt-oss-120b": ("openai/gpt-oss-120b", None), "openai/gpt-oss-20b": ("openai/gpt-oss-20b", None),
          "Qwen/Qwen3-14B": ("tests/fixtures/configs/qwen3-14b", None),
          "Qwen/Qwen3-14B-FP8": ("tests/fixtures/configs/qwen3-14b", "fp8_block"),
          "Qwen/Qwen3-32B": ("Qwen/Qwen3-32B", None), "Qwen/Qwen3-32B-FP8": ("Qwen/Qwen3-32B-FP8", None),
          "Qwen/Qwen3-235B-A22B-Instruct-2507": ("Qwen/Qwen3-235B-A22B", None),
          "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": ("Qwen/Qwen3-235B-A22B-FP8", None),
          # the held-out rows (tests/fixtures/perf/validation.csv)
          "Qwen/Qwen3-8B": ("Qwen/Qwen3-8B", None), "Qwen/Qwen3-8B-FP8": ("Qwen/Qwen3-8B", "fp8"),
          "deepseek-ai/DeepSeek-R1-0528": ("deepseek-ai/DeepSeek-R1", None),
          "deepseek-ai/DeepSeek-V3.2": ("deepseek-ai/DeepSeek-V3.2", None)}
MOE = ("openai/", "Qwen/Qwen3-235B", "deepseek-ai/")
FIELDS = ("row", "model", "hardware", "engine", "key_flags", "input_len", "output_len_generated", "num_prompts",
          "aic_version", "aic_model", "aic_system", "aic_backend", "aic_backend_version", "aic_batch_size",
          "output_tok_per_s", "mean_ttft_ms", "mean_tpot_ms", "command", "note")


def token_budget(spec) -> int:
    """The engine's prefill token budget per step, as kvcalc's own prediction of the row uses it (the row's flag,
    else vLLM's default on that GPU, SGLang's chunked_prefill_size, TensorRT-LLM's max_num_tokens) [tokens]."""
    from kvcalc.serve import bench

    default = {"vllm": spec.cal.vllm_default_max_num_batched_tokens, "sglang": bench.SGLANG_CHUNKED_PREFILL,
               "trtllm": bench.TRTLLM_MAX_TOKENS}[spec.engine]
    return spec.max_num_batched_tokens or default


def estimate(cli_estimate, model, system, backend, isl, osl, bs, tp, quant, moe, ctx):
    """(result, batch size) at the largest batch <= bs (halving) that aiconfigurator's memory and KV estimates
    hold (it raises "OOM" when weights + activations + KV of the batch exceed the GPU, warns when only the KV
    does). MoE: experts TP-sharded (moe_tp = tp, no expert parallelism), as vLLM without
    --enable-expert-parallel runs them."""
    kw = {"gemm_quant_mode": quant} if quant else {}
    if moe:
        kw.update(moe_tp_size=tp, moe_ep_size=1)
    while True:
        try:
            r = cli_estimate(model, system, backend_name=backend, isl=isl, osl=osl, batch_size=bs, tp_size=tp,
                             ctx_tokens=ctx, **kw)
        except RuntimeError as e:
            if "OOM" not in str(e) or bs == 1:
                raise
            bs = max(1, bs // 2)
            continue
        if r.kv_cache_warning is None or bs == 1:
            return r, bs
        bs = max(1, bs // 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", default=str(ROOT / "tests" / "fixtures" / "perf" / "calibration.csv"))
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "perf" / "aiconfigurator.csv"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import aiconfigurator
    from aiconfigurator.cli.api import cli_estimate

    from kvcalc.serve import calibration as c

    version = getattr(aiconfigurator, "__version__", "0.12.0")
    out = []
    for i, r in enumerate(c.read_rows(args.csv), 1):
        tp = int(r.raw["parallel"].split("tp")[1].split()[0])
        model, quant = MODELS[r.model]
        system, backend = SYSTEMS[c.hardware_of(r.hardware)], BACKENDS[r.engine]
        osl = round(r.total_output_tokens / r.num_prompts)
        ctx = token_budget(c.spec_of(r))
        row = {"row": i, "model": r.model, "hardware": r.hardware, "engine": r.engine, "key_flags": r.flags,
               "input_len": r.input_len, "output_len_generated": osl, "num_prompts": r.num_prompts,
               "aic_version": version, "aic_model": model, "aic_system": system, "aic_backend": backend}
        try:
            start = int(r.raw["max_concurrency"] or r.num_prompts)  # the client's cap where it set one
            res, bs = estimate(cli_estimate, model, system, backend, r.input_len, osl, start, tp, quant,
                               moe=r.model.startswith(MOE), ctx=ctx)
        except Exception as e:  # an unsupported combination: say why, keep going
            row["note"] = f"not run: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
            print(i, r.model, r.hardware, r.engine, row["note"], flush=True)
            out.append(row)
            continue
        q = (f" --gemm-quant-mode {quant}" if quant else "") + (
            f" --moe-tp-size {tp} --moe-ep-size 1" if r.model.startswith(MOE) else "")
        row.update(aic_backend_version=res.backend_version, aic_batch_size=bs,
                   output_tok_per_s=f"{float(res.raw['tokens/s']):.2f}", mean_ttft_ms=f"{float(res.ttft):.2f}",
                   mean_tpot_ms=f"{float(res.tpot):.2f}",
                   command=(f"aiconfigurator cli estimate --model {model} --system {system} --backend {backend} "
                            f"--isl {r.input_len} --osl {osl} --bs {bs} --ctx-tokens {ctx} --tp {tp}{q}"),
                   note=res.kv_cache_warning or "")
        print(i, r.model, r.hardware, r.engine, r.input_len, osl, "bs", bs, row["output_tok_per_s"],
              row["mean_ttft_ms"], row["mean_tpot_ms"], flush=True)
        out.append(row)
    write_csv(args.out, FIELDS, out)
    return 0


def write_csv(path, fields, rows) -> None:
    """``rows`` (dicts) as a CSV with a header of ``fields``."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    sys.exit(main())
