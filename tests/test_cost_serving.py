"""cost and compare on the serving model (issue 18 item 4): which scenarios use it, the workload's requests and
pool by hand, the same run as bench, $/M from the run's GPU time, and the physical limits on the cost path."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import run_cli
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kvcalc.memory.capacity import per_gpu_request_bytes
from kvcalc.model import attention as att
from kvcalc.model import catalog
from kvcalc.model.workload_schema import RequestClass, SharedSegment, WorkloadPreset
from kvcalc.serve import served
from kvcalc.serve.bench import BenchSpec, simulate_spec
from kvcalc.serve.calibration import calibration_for
from kvcalc.serve.cost import _strategy, strategy_row
from kvcalc.serve.scenario import Overrides, resolve


def workload(classes, shared=()):
    return WorkloadPreset(schema_version=1, source="test", display_name="test",
                          classes=[RequestClass(count=n, context_tokens=c, output_tokens=o, name=f"c{i}")
                                   for i, (n, c, o) in enumerate(classes)],
                          shared=[SharedSegment(tokens=t, groups=g) for t, g in shared])


def inputs(w, model="qwen3-14b", hw="h100-sxm", gpus=1, **o):
    return resolve(None, Overrides(model=model, hardware=hw, gpus=gpus, inline_workload=w, **o))


def test_which_scenarios_run_on_the_serving_model():
    assert resolve("article").decode_model == "stated"  # the article's stated 60 tok/s, kept as it was
    assert resolve("v4-flash-8xh100").decode_model == "serving"
    assert resolve(None, Overrides(model="qwen3-14b")).decode_model == "serving"  # derived
    # the user's own stated rates keep the stated path, and say so
    assert resolve("v4-flash-8xh100", Overrides(decode_tokens_per_s=60.0)).decode_model == "stated"
    assert resolve("v4-flash-8xh100", Overrides(mfu_prefill=0.3)).decode_model == "stated"
    a = strategy_row(resolve("article"), "lru")[0]
    assert a["decode_tokens_per_s_total"] == 6000 and "wall_time_s" not in a  # 60 tok/s x 100 requests


def test_workload_requests_and_prefix_keys_by_hand():
    w = catalog.load("workloads", "article-100")
    a = served.workload_requests(w, "lru", False)
    assert a.keys is None and list(a.prompt[:20]) == [8000] * 20 and list(a.prompt[20:]) == [2000] * 80
    c = served.workload_requests(w, "prefix-tree", False)
    # (1,500 + 500) shared tokens // 16 = 125 blocks; blocks 0-92 end at or before 1,500 (93 x 16 = 1,488) and
    # hold the system prompt only; block 93 (1,488-1,503) crosses into the few-shot block: keyed by its group
    assert len(c.keys[0]) == 125
    assert c.keys[0][:93] == c.keys[99][:93]        # every request shares the system prompt's blocks
    assert c.keys[0][93] == (93, (0, 0)) and c.keys[99][93] == (93, (0, 4))  # request 99 of 100: group 99 x 5 // 100
    assert c.keys[0] == c.keys[19] != c.keys[20]    # groups of 20 requests
    assert served.workload_requests(w, "prefix-tree", True).warm_keys == frozenset(k for ks in c.keys for k in ks)


def test_ideal_pool_by_hand():
    # Qwen3-14B: 40 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 163,840 B per token on 1 GPU; 10 requests of
    # 1,000 + 100 tokens; pool = budget // (16 x 163,840)
    inp = inputs(workload([(10, 1000, 100)]))
    groups = att.resolve_groups(inp.model)
    assert per_gpu_request_bytes(groups, 1100, 1) == 1100 * 163_840
    pool = served.ideal_pool(inp, groups, 50e9)
    assert pool.block_size == 16 and pool.num_blocks == int(50e9 // (16 * 163_840))  # 19,073
    # --kv-compression 2 (the article's what-if): the same bytes hold twice the blocks, KV read per step halves
    _, _, info = _strategy(dataclasses.replace(inp, kv_compression=2.0), "lru")
    _, _, plain = _strategy(inp, "lru")
    assert info["pool"].num_blocks == int(plain["pool"].num_blocks * 2)
    assert float(info["sm"].kv_read_bytes(1100)) == 1100 * 163_840 / 2


def test_the_run_is_bench_s_run():
    # the same 30 requests of 1,024 + 128 tokens through bench (vLLM's pool) and through cost --engine vllm
    inp = inputs(workload([(30, 1024, 128)]), engine="vllm")
    row, _, info = _strategy(inp, "lru")
    h = catalog.load_hardware("h100-sxm")
    spec = BenchSpec(model_name="qwen3-14b", model=catalog.load_model("qwen3-14b"), hw_name="h100-sxm", hw=h,
                     link=None, cal=calibration_for("h100-sxm")[0], cal_name="h100-sxm", input_len=1024,
                     output_len=128, num_prompts=30, max_model_len=1024 + 128)
    m = simulate_spec(spec)[0]
    assert row["wall_time_s"] == pytest.approx(m["duration"])
    assert row["ttft_mean_s"] == pytest.approx(m["mean_ttft_ms"] / 1e3)
    assert row["tpot_mean_s"] == pytest.approx(m["mean_tpot_ms"] / 1e3)
    assert row["output_throughput_tokens_per_s"] == pytest.approx(m["output_throughput"])
    assert row["usd_per_mtok_output"] == pytest.approx(m["usd_per_mtok_output"])


def test_dollars_are_the_run_s_gpu_time_split_by_tokens():
    inp = inputs(workload([(20, 3000, 200)]), gpus=2)
    row, _, info = _strategy(inp, "lru")
    run = info["run"]
    # GPU-seconds = wall x 2 GPUs; $ = GPU-s x price / 3,600; prefill pays its share of the step time
    assert row["gpu_seconds"] == pytest.approx(2 * row["wall_time_s"])
    usd = row["gpu_seconds"] * inp.usd_per_gpu_hour / 3600
    assert row["prefill_usd"] + row["decode_usd"] == pytest.approx(usd)
    share = run.prefill_time_s / (run.prefill_time_s + run.decode_time_s)
    assert row["usd_per_mtok_input"] == pytest.approx(usd * share / (20 * 3000) * 1e6)
    assert row["usd_per_mtok_output"] == pytest.approx(usd * (1 - share) / (20 * 200) * 1e6)
    assert 0 < share < 1 and row["usd_per_mtok_input"] > 0  # both prefill and decode GPU time are paid


def test_kv_that_does_not_fit_queues_instead_of_decoding_all_at_once():
    # 200 requests of 30,000 tokens on one H100: 200 x 31,000 x 163,840 B = 1.0 TB of KV against ~42 GB
    inp = inputs(workload([(200, 30_000, 1000)]))
    row, _, info = _strategy(inp, "lru")
    assert row["kv_fits"] is False and row["peak_running"] < 200
    assert row["ttft_max_s"] > row["wall_time_s"] / 2  # the last requests wait for the first to finish


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.integers(100, 3000), st.integers(1, 40)), min_size=1, max_size=3),
       st.lists(st.tuples(st.integers(1, 600), st.integers(1, 3)), max_size=2))
def test_c_never_has_a_higher_mean_ttft_than_a(classes, shared):
    total = sum(n for n, _, _ in classes)
    shared = [(t, min(g, total)) for t, g in shared]
    assume(sum(t for t, _ in shared) < min(c for _, c, _ in classes))
    inp = inputs(workload(classes, shared))
    a, c = strategy_row(inp, "lru")[0], strategy_row(inp, "prefix-tree")[0]
    assert c["ttft_mean_s"] <= a["ttft_mean_s"] * (1 + 1e-12)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 30), st.integers(100, 4000), st.integers(1, 60))
def test_a_run_whose_kv_fits_gives_the_same_figures_with_a_larger_pool(n, context, output):
    inp = inputs(workload([(n, context, output)]))
    row, _, info = _strategy(inp, "lru")
    pool = info["pool"]
    assume(pool.num_blocks >= n * pool.need_one(context + output))  # never binds
    hw = inp.hardware  # the budget counts the memory CUDA reports where the preset gives it: double both figures
    twice = {"hbm_gb": hw.hbm_gb * 2} | ({} if hw.cuda_total_gib is None else {"cuda_total_gib": hw.cuda_total_gib * 2})
    bigger = dataclasses.replace(inp, hardware=dataclasses.replace(hw, **twice))
    row2, _, info2 = _strategy(bigger, "lru")
    assert info2["pool"].num_blocks > pool.num_blocks
    for k in ("wall_time_s", "ttft_mean_s", "ttft_p99_s", "tpot_mean_s", "gpu_seconds", "usd_per_mtok_blended"):
        assert row2[k] == row[k]


@settings(max_examples=10, deadline=None)
@given(st.floats(1.0, 4.0), st.sampled_from(["hbm_bandwidth_tb_per_s", "bf16_dense_tflops"]),
       st.integers(1, 30), st.integers(100, 4000))
def test_throughput_never_falls_when_bandwidth_or_peak_rises(scale, field, n, context):
    inp = inputs(workload([(n, context, 30)]))
    hw = dataclasses.replace(inp.hardware, **{field: getattr(inp.hardware, field) * scale})
    slow = strategy_row(inp, "lru")[0]
    fast = strategy_row(dataclasses.replace(inp, hardware=hw), "lru")[0]
    assert fast["output_throughput_tokens_per_s"] >= slow["output_throughput_tokens_per_s"] * (1 - 1e-12)


def test_cli_compare_on_a_scenario_reports_the_run():
    env = run_cli("compare", "--scenario", "v4-flash-8xh100", "--format", "json").json()
    a, c = env["results"][:2]
    for k in ("wall_time_s", "ttft_mean_s", "ttft_p99_s", "tpot_mean_s", "tpot_p99_s", "gpu_seconds",
              "output_throughput_tokens_per_s", "usd_per_mtok_input", "usd_per_mtok_output"):
        assert a[k] > 0 and c[k] > 0
    # same scheduler, C skips the cached prefill: lower TTFT, higher throughput
    assert c["ttft_mean_s"] < a["ttft_mean_s"] and c["output_throughput_tokens_per_s"] > a[
        "output_throughput_tokens_per_s"]
    assert env["inputs"]["serving_model"] == "vllm scheduler, calibration h100-sxm"
    assert any("serving model" in n for n in env["notes"])


def test_stated_rates_on_a_scenario_say_so():
    env = run_cli("cost", "--scenario", "v4-flash-8xh100", "--decode-tokens-per-s", "60", "--format", "json").json()
    assert env["results"][0]["decode_tokens_per_s"] == 60
    assert any("not the serving model" in n for n in env["notes"])


def test_kv_compression_on_capacity_by_hand():
    # Qwen3-14B on one H100: 163,840 B per token; 4,096 tokens = 671,088,640 B; / 4 = 167,772,160 B per request.
    # Budget: the 79.19 GiB CUDA reports (85,029,615,042.56 B) x 0.9 - 29,536,614,400 B of weights
    # = 46,990,039,138 B -> floor(/ 671,088,640) = 70 requests, floor(/ 167,772,160) = 280 with FACTOR 4
    def row(*extra):
        return run_cli("capacity", "-m", "qwen3-14b", "--gpus", "1", *extra, "--format", "json").json()
    plain, four = row(), row("--kv-compression", "4")
    assert plain["results"][0]["kv_bytes_per_request"] == 671_088_640
    assert four["results"][0]["kv_bytes_per_request"] == 671_088_640 / 4
    assert (plain["results"][0]["max_requests"], four["results"][0]["max_requests"]) == (70, 280)
    assert four["results"][0]["block_bytes"] == plain["results"][0]["block_bytes"] / 4
    assert any("unproven hypothesis" in n for n in four["notes"])


@pytest.mark.parametrize("args, flag", [
    (["capacity", "--kv-compression", "0.5"], "--kv-compression"),
    (["capacity", "--kv-compression", "4", "--engine", "vllm"], "--kv-compression"),
    (["compare", "--kv-compression", "nan"], "--kv-compression"),
    (["cost", "--kv-compression", "10001"], "--kv-compression"),
])
def test_bad_serving_inputs_are_one_line(args, flag):
    r = run_cli(*args)
    assert r.code == 2 and flag in r.err and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1


def test_kv_compression_on_compare_stores_less_and_serves_more():
    # 200 requests of 4K on one A100 with Qwen3-32B: the pool binds, so 4 x the blocks run more at once
    w = workload([(200, 4096, 100)])
    plain = _strategy(inputs(w, "qwen3-32b", "a100-80g"), "lru")[0]
    four = _strategy(inputs(w, "qwen3-32b", "a100-80g", kv_compression=4.0), "lru")[0]
    assert four["kv_stored_bytes"] == plain["kv_stored_bytes"] / 4
    assert four["peak_running"] > plain["peak_running"]
    assert four["output_throughput_tokens_per_s"] > plain["output_throughput_tokens_per_s"]


def test_weights_dtype_reaches_the_serving_model():
    # FP8 weights on an H100: half the bytes read per decode step and FP8 math, so a lower TPOT
    w = workload([(8, 1000, 50)])
    bf16 = strategy_row(inputs(w, weights_dtype="bf16"), "lru")[0]
    fp8 = strategy_row(inputs(w, weights_dtype="fp8"), "lru")[0]
    assert fp8["tpot_mean_s"] < bf16["tpot_mean_s"]


def test_c_reuses_a_s_run_when_nothing_is_shared():
    # no shared segment: prefix caching has no block to hit, so C's run is A's (simulated once, same figures)
    inp = inputs(workload([(12, 2000, 40)]))
    a, _, ia = _strategy(inp, "lru")
    c, _, ic = _strategy(inp, "prefix-tree", None, ia)
    alone = _strategy(inp, "prefix-tree")[0]
    assert ic["run"] is ia["run"]
    for k in ("wall_time_s", "ttft_mean_s", "tpot_mean_s", "usd_per_mtok_blended"):
        assert c[k] == alone[k] == a[k]


@pytest.mark.parametrize("args, why", [
    (["--model", "llama-3-70b", "--gpus", "1", "--requests", "4", "--context", "1k"], "more than the whole pool"),
    (["--model", "qwen3-14b", "--requests", "1000000", "--context", "1k"], "is more than it simulates"),
])
def test_what_the_serving_model_cannot_run_keeps_the_stated_forms_and_says_so(args, why):
    # Llama-3-70B's 141 GB of weights leave no KV pool on one H100; 10^6 requests are too many to simulate
    env = run_cli("compare", *args, "--format", "json").json()
    a = env["results"][0]
    assert why in a["serving_model_skipped"] and "wall_time_s" not in a
    assert any("the figures are the stated closed forms" in n for n in env["notes"])


def test_no_output_tokens_keeps_the_stated_forms():
    # --output-tokens 0: an engine generates at least one token (vLLM's SamplingParams refuses max_tokens 0), so a
    # scheduler run has no first token to time; it used to print TTFT NaN (exit 3, found by bench/hostile_run.py).
    # The stated closed forms answer, and the row says why
    r = run_cli("compare", "--model", "llama-3-70b", "--requests", "10", "--context", "8k", "--output-tokens", "0",
                "--format", "json")
    assert r.code == 0, r.err
    for row in r.json()["results"]:
        assert "0 output tokens" in row["serving_model_skipped"]
