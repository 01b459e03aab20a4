"""aiconfigurator's measured per-op times of one prefill step and one decode step, beside which
docs/serving-model.md sets kvcalc's own terms (issue 18, item 5: where the step model differs, op by op). NOT a
kvcalc dependency.

    python3 -m venv AIC_VENV && AIC_VENV/bin/pip install aiconfigurator==0.12.0   # its own venv, any path
    AIC_VENV/bin/python bench/aiconfigurator_ops.py [--out tests/fixtures/perf/aiconfigurator_ops.csv]

For each configuration of the measured rows (tests/fixtures/perf/calibration.csv and validation.csv) that
aiconfigurator's bundled configs and SILICON databases cover, each step of PHASES: ``cli_estimate`` in its static
mode and the summary's latency dict of that phase: the step's time per op [ms], with where each figure comes from
(the source dict: "silicon" = measured kernels, "empirical" = a formula), and the tables of that phase its
(system, backend) database borrows from another engine's measurements (its "low-fidelity fallback rows" warning:
``db_fallback_tables``, "table from engine version"; which an op uses, its model says: the MLA and DSA attention
modules are DeepSeek's alone). Written as it prints them, nothing computed here; docs/serving-model.md groups
them (bench/plot_serving_parity.py, OP_GROUPS).
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (phase, aiconfigurator mode, sequences, tokens): a prefill step of 2 prompts x 4,096 tokens from position 0
# (8,192 tokens: vLLM's default budget on these GPUs) and a decode step of 64 sequences at context 4,096 (osl 2:
# aiconfigurator's one generation step)
PHASES = (("context", "static_ctx", 2, 4096), ("generation", "static_gen", 64, 4096))
# (kvcalc model, --weights-dtype, kvcalc hardware, engine, tp) -> (aiconfigurator model, system, backend, extra
# keywords). MoE experts TP-sharded (moe_tp = tp, no expert parallelism), as the rows ran them; block-FP8 where
# the checkpoint is (Qwen3-*-FP8, DeepSeek: aiconfigurator infers it from the bundled config)
CONFIGS = (
    (("qwen3-32b", None, "h100-sxm", "vllm", 1), ("Qwen/Qwen3-32B", "h100_sxm", "vllm", {})),
    (("qwen3-32b", None, "a100-80g", "vllm", 1), ("Qwen/Qwen3-32B", "a100_sxm", "vllm", {})),
    (("qwen3-32b", "fp8", "h100-sxm", "trtllm", 1), ("Qwen/Qwen3-32B-FP8", "h100_sxm", "trtllm", {})),
    (("qwen3-8b", None, "h100-sxm", "vllm", 1), ("Qwen/Qwen3-8B", "h100_sxm", "vllm", {})),
    (("qwen3-235b-a22b", None, "h100-sxm", "vllm", 8),
     ("Qwen/Qwen3-235B-A22B", "h100_sxm", "vllm", {"moe_tp_size": 8, "moe_ep_size": 1})),
    (("qwen3-235b-a22b", "fp8", "h100-sxm", "vllm", 4),
     ("Qwen/Qwen3-235B-A22B-FP8", "h100_sxm", "vllm", {"moe_tp_size": 4, "moe_ep_size": 1})),
    (("deepseek-v3", None, "h200-sxm", "vllm", 8),
     ("deepseek-ai/DeepSeek-R1", "h200_sxm", "vllm", {"moe_tp_size": 8, "moe_ep_size": 1})),
    (("deepseek-v3", None, "h200-sxm", "sglang", 8),
     ("deepseek-ai/DeepSeek-R1", "h200_sxm", "sglang", {"moe_tp_size": 8, "moe_ep_size": 1})),
    (("deepseek-v3.2", None, "h200-sxm", "vllm", 8),
     ("deepseek-ai/DeepSeek-V3.2", "h200_sxm", "vllm", {"moe_tp_size": 8, "moe_ep_size": 1})),
)
FIELDS = ("model", "weights_dtype", "hardware", "engine", "tp", "phase", "sequences", "length", "aic_version",
          "aic_model", "aic_system", "aic_backend", "aic_backend_version", "op", "latency_ms", "source",
          "db_fallback_tables")


class _Fallbacks(logging.Handler):
    """Collects aiconfigurator's "Loading low-fidelity fallback rows for TABLE from PATH" warnings, which it logs
    once, when a (system, backend) database first loads."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("Loading low-fidelity fallback rows for "):
            table, path = msg.removeprefix("Loading low-fidelity fallback rows for ").split(" from ", 1)
            parts = Path(path.split(". Queries")[0]).parts  # .../<system>/<family>/<backend>/<version>/<table>
            self.seen.append(f"{table} from {parts[-3]} {parts[-2]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "perf" / "aiconfigurator_ops.csv"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import aiconfigurator
    from aiconfigurator.cli.api import cli_estimate
    from aiconfigurator_runs import write_csv  # bench/, beside this script

    version = getattr(aiconfigurator, "__version__", "0.12.0")
    fallbacks, by_db = _Fallbacks(), {}
    root = logging.getLogger()
    root.handlers, root.level = [fallbacks], logging.WARNING  # only collected, not printed
    out = []
    for (model, dtype, hw, engine, tp), (aic_model, system, backend, kw) in CONFIGS:
        for phase, mode, seqs, length in PHASES:
            r = cli_estimate(aic_model, system, mode=mode, backend_name=backend, isl=length, osl=2,
                             batch_size=seqs, tp_size=tp, **kw)
            s = r.summary
            lat, src = ((s.get_context_latency_dict(), s.get_context_source_dict()) if phase == "context" else
                        (s.get_generation_latency_dict(), s.get_generation_source_dict()))
            by_db.setdefault((system, backend), []).extend(fallbacks.seen)
            fallbacks.seen = []
            base = {"model": model, "weights_dtype": dtype or "", "hardware": hw, "engine": engine, "tp": tp,
                    "phase": phase, "sequences": seqs, "length": length, "aic_version": version,
                    "aic_model": aic_model, "aic_system": system, "aic_backend": backend,
                    "aic_backend_version": r.backend_version}
            tables = "; ".join(t for t in by_db[(system, backend)] if phase in t.split(" from ")[0])
            for op, ms in lat.items():
                out.append({**base, "op": op, "latency_ms": f"{float(ms):.3f}", "source": src.get(op, ""),
                            "db_fallback_tables": tables})
            step = r.ttft if phase == "context" else r.tpot
            print(model, dtype or "-", hw, engine, f"tp{tp}", phase, f"{float(step):.1f} ms", flush=True)
    write_csv(args.out, FIELDS, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
