"""``kvcalc bench`` on the command line: vLLM's result block, the saved-result names, errors."""

from __future__ import annotations

import json
import re

import pytest
from conftest import run_cli

VLLM_NAMES = ("duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput",
              "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
              "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
              "mean_e2el_ms")
ARGS = ["bench", "--model", "qwen3-14b", "--random-input-len", "1000", "--random-output-len", "50",
        "--num-prompts", "40"]


def test_help_has_examples():
    r = run_cli("bench", "--help")
    assert r.code == 0 and "Examples" in r.out and "--random-input-len" in r.out


def test_table_is_vllms_block_with_the_json_figures():
    t = run_cli(*ARGS)
    j = json.loads(run_cli(*ARGS, "--format", "json").out)
    assert t.code == 0, t.err
    lines = t.out.splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    end = lines.index("=" * 50)  # vLLM's ITL section: mean, median, P99, then the closing rule
    assert [x.split(" (ms)")[0] for x in lines[end - 4:end]] == ["---------------Inter-token Latency----------------",
                                                               "Mean ITL", "Median ITL", "P99 ITL"]
    assert "---------------Time to First Token----------------" in lines
    assert "-----Time per Output Token (excl. 1st token)------" in lines
    row = j["results"][0]
    assert set(VLLM_NAMES) <= row.keys() and {"gpu_seconds", "usd_per_mtok_input", "usd_per_mtok_output",
                                               "usd_per_mtok_blended"} <= row.keys()
    # "{:<40} {:<10.2f}": the name padded to 40 characters, a space, the value with 2 decimals
    line = next(x for x in lines if x.startswith("Mean TTFT (ms):"))
    assert line == f"{'Mean TTFT (ms):':<40} {row['mean_ttft_ms']:.2f}"
    assert f"{'Successful requests:':<40} 40" in lines
    assert row["completed"] == 40 and row["total_input_tokens"] == 40_000 and row["total_output_tokens"] == 2000


def test_json_equals_the_python_api():
    from kvcalc.model import catalog
    from kvcalc.serve.bench import BenchSpec
    from kvcalc.serve.bench_report import bench_result
    from kvcalc.serve.calibration import calibration_for

    hw = catalog.load_hardware("h100-sxm")
    spec = BenchSpec("qwen3-14b", catalog.load_model("qwen3-14b"), "h100-sxm", hw, None,
                     calibration_for("h100-sxm")[0], "h100-sxm", input_len=1000, output_len=50, num_prompts=40)
    api = bench_result(spec).rows[0]
    cli = json.loads(run_cli(*ARGS, "--format", "json").out)["results"][0]
    for k in VLLM_NAMES:
        assert cli[k] == pytest.approx(api[k], rel=1e-12), k


def test_check_gates_and_csv():
    r = run_cli(*ARGS, "--check", "mean_ttft_ms < 0.001")
    assert r.code == 1 and "check failed: mean_ttft_ms" in r.err
    csv = run_cli(*ARGS, "--format", "csv").out.splitlines()
    assert all(k in csv[0].split(",") for k in VLLM_NAMES)


def test_explain_shows_the_step_terms():
    r = run_cli(*ARGS, "--explain")
    assert "step time = max(compute, memory) + communication + overhead" in r.out
    assert re.search(r"decode step of \d+ requests at context 1,025", r.out)
    assert "sparse attention" not in r.out   # a GQA model: no sparse kernels


@pytest.mark.parametrize("model, engine, line", [
    # DeepSeek V3.2's 128 query heads over 8 GPUs: 16 each, run as FlashMLA's 64-head tile on Hopper; SGLang's
    # decode is not modelled as padded
    ("deepseek-v3.2", "vllm", "run each GPU's 16 query heads as 64 (their tile; x4 the attention FLOPs), in the "
                              "latent, in prefill and decode"),
    ("deepseek-v3.2", "sglang", "run each GPU's 16 query heads as 64 (their tile; x4 the attention FLOPs), in the "
                                "latent, in prefill"),
    ("deepseek-v3", "vllm", None)])  # dense MLA prefills on FlashAttention: no tile of heads
def test_explain_says_where_sparse_kernels_pad_the_heads(model, engine, line):
    r = run_cli("bench", "--model", model, "--hardware", "h200-sxm", "--gpus", "8", "--tp", "8", "--engine", engine,
                "--random-input-len", "400", "--random-output-len", "20", "--num-prompts", "8", "--explain")
    assert r.code == 0, r.err
    shown = [x for x in r.out.splitlines() if "sparse attention" in x]
    assert [x.split("kernels ", 1)[1] for x in shown] == ([line] if line else [])


def test_options_change_what_they_should():
    def row(*extra):
        return json.loads(run_cli(*ARGS, *extra, "--format", "json").out)["results"][0]

    base = row()
    assert row("--weights-dtype", "fp8")["mean_tpot_ms"] < base["mean_tpot_ms"]   # half the bytes, FP8 math
    assert row("--request-rate", "2")["duration"] > base["duration"]              # arrivals spread over ~20 s
    capped = row("--max-concurrency", "4")
    assert capped["mean_ttft_ms"] < base["mean_ttft_ms"] and capped["duration"] > base["duration"]
    assert row("--gpus", "2")["mean_tpot_ms"] < base["mean_tpot_ms"]


@pytest.mark.parametrize("args,words", [
    (["--attention", "dp"], ["--attention dp", "--enable-expert-parallel"]),  # DP attention is modelled under EP
    (["--gpus", "3", "--dp", "2"], ["--gpus 3", "--dp 2"]),
    (["--engine", "tgi"], ["--engine", "vllm"]),
    (["--weights-dtype", "fp7"], ["--weights-dtype", "mxfp4"]),
    (["--request-rate", "fast"], ["--request-rate"]),
    # a rate near the smallest float: plan splits it over replicas, where it underflowed to 0 (ZeroDivisionError,
    # exit 3, hostile run seed 66); below 1e-6 req/s (one request per 11.6 days) it is refused
    (["--request-rate", "5e-324"], ["--request-rate", "absurdly small", "1e-06"]),
    (["--shared-prefix", "4k:x"], ["--shared-prefix", "groups"]),
    (["--num-prompts", "0"], ["--num-prompts"]),
    (["--kv-compression", "0.5"], ["--kv-compression"]),
    (["--hardware", "h100"], ["h100-sxm"]),
    (["--max-num-batched-tokens", "1", "--random-input-len", "64", "--num-prompts", "1", "--max-model-len", "128",
      "--random-output-len", "1"], []),
    # a request longer than max_model_len is refused as vLLM's server refuses it (HTTP 400), before any step: an
    # output of 2^30 tokens used to step past the hostile run's 20 s limit
    (["--random-output-len", "1g", "--num-prompts", "10"], ["--random-output-len", "1,073,742,824", "40,960"]),
    (["--random-input-len", "64", "--random-output-len", "1", "--max-model-len", "16"], ["--max-model-len", "65"]),
])
def test_bad_input_is_one_line_exit_2(args, words):
    r = run_cli(*ARGS, *args)
    if not words:  # a legal corner: a one-token budget still completes
        assert r.code == 0, r.err
        return
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert all(w in r.err for w in words), r.err


def test_a_pool_too_small_for_one_request_is_refused():
    r = run_cli("bench", "--model", "qwen3-32b", "--hardware", "a100-80g", "--random-input-len", "39k",
                "--num-prompts", "1")  # 39,000 + 128 fits qwen3-32b's 40,960 context, not the A100's pool
    assert r.code == 2 and "cannot hold one request" in r.err


def test_weights_dtype_on_capacity_and_cost():
    # Qwen3-32B in FP8: 2 x 151,936 x 5,120 embedding + LM head params at 2 B = 3,111,649,280 B, the other
    # 32,762,106,880 - 1,555,824,640 = 31,206,282,240 params at 1 B: 34,317,931,520 B
    cap = json.loads(run_cli("capacity", "--model", "qwen3-32b", "--gpus", "1", "--weights-dtype", "fp8",
                             "--format", "json").out)["results"][0]
    assert cap["weight_bytes"] == pytest.approx(34_317_931_520)
    base = json.loads(run_cli("capacity", "--model", "qwen3-32b", "--gpus", "1", "--format", "json").out)["results"][0]
    assert base["weight_bytes"] == pytest.approx(65_524_213_760) and base["max_requests"] < cap["max_requests"]
    for cmd in ("cost", "compare"):
        r = run_cli(cmd, "--model", "qwen3-32b", "--hardware", "h100-sxm", "--gpus", "1", "--weights-dtype", "nvfp4")
        assert r.code == 0, r.err
        bad = run_cli(cmd, "--model", "qwen3-32b", "--weights-dtype", "fp7")
        assert bad.code == 2 and "--weights-dtype" in bad.err
