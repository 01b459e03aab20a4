"""Randomised hostile-input test of ``kvcalc bench`` (the pattern of tests/test_fuzz_cli.py, whose generator,
hostile files and checks it reuses): valid options mixed with hostile values, presets and trace files. Every run
exits 0, 1 (only with --check) or 2 with one line, no traceback, no inf/nan where a number goes. Runs are kept
small (at most 200 prompts) so the cases take seconds. KVCALC_FUZZ_CASES / KVCALC_FUZZ_SEED as there."""

from __future__ import annotations

from pathlib import Path

import test_fuzz_cli as base
from test_fuzz_cli import BAD_NUMBERS, BAD_TOKENS, CONFIGS, Gen, files, hostile_files, trace_files  # noqa: F401

MEASURED = Path(__file__).parent / "fixtures" / "measured"
FIELDS = ["max_abs_error", "error_mean_ttft_ms", "duration", "output_throughput", "mean_ttft_ms", "p99_tpot_ms", "usd_per_mtok_blended", "completed"]


def gen_bench(g: Gen):
    g.args = ["bench"]
    if g.r.random() < 0.95:
        g.args += ["--model", g.pick(["qwen3-14b", "gpt-oss-20b", "llama-3-8b", "qwen3-30b-a3b", "deepseek-v3",
                                      str(CONFIGS / "qwen3-32b")],
                                     ["nosuch", "", "é", "qwen3-14"] + hostile_files(g.files))]
    g.preset("--hardware", ["h100-sxm", "a100-80g", "h200-sxm", "b200"], p=0.4)
    g.opt("--gpus", ["1", "2", "4", "8"], p=0.3)
    g.opt("--tp", ["1", "2", "8"], p=0.2)
    g.opt("--dp", ["1", "2"], p=0.2)
    g.opt("--router", ["round-robin", "least-loaded", "session", "prefix"], ["", "prefx"], p=0.1)
    g.opt("--attention", ["tp", "dp"], ["", "x", "DP"], p=0.1)
    g.flag(g.r.choice(["--enable-expert-parallel", "--ep"]), 0.2)  # refused on dense models, with exit 2
    g.opt("--engine", ["vllm", "sglang", "trtllm"], ["VLLM", "", "tgi"], p=0.3)
    g.flag("--async-scheduling", 0.2)
    g.opt("--random-input-len", ["1", "128", "1k", "2000", "4k"], BAD_TOKENS, p=0.5)
    g.opt("--random-output-len", ["1", "4", "50", "200"], BAD_TOKENS, p=0.5)
    # a run is at most 200 prompts unless the option is hostile (then it is refused before any work)
    n = g.pick(["1", "10", "50", "200"], ["0", "-1", "1e400", "99999999999", "x", ""])
    g.args += ["--num-prompts", n]
    g.opt("--request-rate", ["inf", "1", "10.5", "1000"], BAD_NUMBERS + ["INF", "-inf"], p=0.3)
    g.opt("--max-concurrency", ["1", "8", "64"], p=0.2)
    g.opt("--max-num-seqs", ["1", "16", "256"], p=0.2)
    g.opt("--max-num-batched-tokens", ["512", "2048", "8k"], BAD_TOKENS, p=0.2)
    g.opt("--max-model-len", ["8k", "40960"], BAD_TOKENS, p=0.1)
    g.opt("--kv-dtype", ["bf16", "fp8"], ["fp7", ""], p=0.15)
    g.opt("--weights-dtype", ["bf16", "fp8", "int4", "mxfp4", "nvfp4"], ["fp7", "", "BF16"], p=0.2)
    g.flag("--enable-prefix-caching", 0.3)
    g.opt("--shared-prefix", ["512", "2k:4", "1k:1"], ["", ":", "4k:0", "4k:-1", "4k:x", "x:2", "1e400:2"], p=0.2)
    g.opt("--kv-compression", ["1", "2", "4.5"], BAD_NUMBERS + ["0.5"], p=0.1)
    g.opt("--price-per-gpu-hour", ["1", "2.5"], p=0.1)
    g.opt("--seed", ["0", "1", "42"], ["-1", "x", "1e400", ""], p=0.1)
    if g.r.random() < 0.15:
        g.args += ["--trace", g.pick(trace_files(g.files, lengths_only=True), hostile_files(g.files, trace=True))]
        g.opt("--block-tokens", ["16"], ["0", "-1", "x", "512"], p=0.9)
        g.opt("--trace-format", ["auto", "mooncake", "kv-cache-tester", "azure-csv", "burstgpt-csv"],
              ["", "csv", "kv-cache", "Auto"], p=0.2)
        g.flag("--skip-bad", 0.3)
    elif g.r.random() < 0.03:
        g.flag("--skip-bad", 1.0)  # only with --trace: refused
    if g.r.random() < 0.15:  # a measured run: valid ones copied from published pages, hostile files
        measured = [g.files["measured-ok.txt"]] + [str(p) for p in sorted(MEASURED.glob("*.txt"))
                                                   + sorted(MEASURED.glob("*.json")) if "deepseek" not in p.name]
        g.args += ["--measured", g.pick(measured, [v for k, v in g.files.items() if k.startswith("measured-")]
                                        + hostile_files(g.files) + trace_files(g.files))]
        g.opt("--burstiness", ["0.5", "1", "3"], BAD_NUMBERS, p=0.2)
    g.output(FIELDS)


def test_fuzz_bench(files, monkeypatch):
    # test_fuzz_cli's loop and checks, with this generator (KVCALC_FUZZ_CASES cases, 300 by default)
    monkeypatch.setitem(base.GENERATORS, "bench", gen_bench)
    base.test_fuzz_command("bench", files, monkeypatch)
