"""The serving model (issue 18): step-time terms by hand, the scheduler's rules, physical limits, properties."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.model import catalog
from kvcalc.model.weights_dtype import math_dtype, storage_dtype, with_weights_dtype
from kvcalc.serve.bench import BenchSpec, metrics, pool_and_limits, requests_of, simulate_spec
from kvcalc.serve.calibration import calibration_for
from kvcalc.serve.scheduler import Pool, Requests, Scheduling, simulate
from kvcalc.serve.step_time import step_model


def spec(model="qwen3-14b", hw="h100-sxm", **kw) -> BenchSpec:
    h = catalog.load_hardware(hw)
    cal = calibration_for(hw)[0]
    base = dict(model_name=model, model=catalog.load_model(model), hw_name=hw, hw=h,
                link=catalog.load_link(h.scaleup_link), cal=cal, cal_name=hw, input_len=1000, output_len=50,
                num_prompts=40)
    return BenchSpec(**(base | kw))


def sm_of(s: BenchSpec):
    return step_model(s.model, s.hw, s.link, s.cal, s.tp, s.engine, s.async_scheduling, s.opts)


# ---------------------------------------------------------------- step-time terms by hand

def test_dense_weights_read_per_step_by_hand():
    # Qwen3-14B: 29,536,593,920 B of weights (14,768,296,960 params x 2 B); the embedding table 151,936 x 5,120
    # x 2 B = 1,555,824,640 B is looked up, not read: 27,980,769,280 B per step. KV: 40 layers x 8 heads x
    # (128 + 128) x 2 B = 163,840 B per token, so a query at context 1,001 reads 164,003,840 B.
    sm = sm_of(spec())
    assert sm.dense_weight_bytes == pytest.approx(29_536_593_920 - 1_555_824_640)
    assert float(sm.kv_read_bytes(1001)) == 163_840 * 1001
    # memory time of one decode = (27,980,769,280 + 164,003,840) B / (3.35e12 B/s x hbm_eff)
    t = sm.memory_s(1.0, float(sm.kv_read_bytes(1001)))
    assert t == pytest.approx((27_980_769_280 + 164_003_840) / (3.35e12 * sm.hbm_eff))


def test_expected_distinct_experts():
    # gpt-oss-120b: E = 128, k = 4. One token touches 4 experts; 40 tokens 128 (1 - (124/128)^40) = 91.93...
    sm = sm_of(spec("gpt-oss-120b"))
    assert float(sm.distinct_experts(1.0)) == pytest.approx(4.0)
    assert float(sm.distinct_experts(40.0)) == pytest.approx(128 * (1 - (124 / 128) ** 40))
    assert float(sm.distinct_experts(1e5)) == pytest.approx(128.0)
    # expert bytes: 114,661,785,600 params x 0.53125 B (MXFP4 + E8M0 scale per 32) = 60,914,073,600 B
    assert sm.expert_weight_bytes == pytest.approx(60_914_073_600)
    # active expert params per token: 4 / 128 of them
    assert sm.expert_active_params == pytest.approx(114_661_785_600 * 4 / 128)


def test_tp_all_reduce_by_hand():
    # Qwen3-14B on 2 x H100 (NVLink4 397 GB/s measured, 2.65 us): one decode token of 5,120 BF16 values, ring
    # all-reduce moves 2 x (2 - 1) / 2 x 10,240 B = 10,240 B: 2 x 40 layers x (2.65 us + kernel_us + 10,240 /
    # 397e9 s), kernel_us the calibration's fixed time of one kernel (an all-reduce is a kernel too)
    s = spec(tp=2)
    sm = sm_of(s)
    assert float(sm.comm_s(1.0)) == pytest.approx(80 * (2.65e-6 + s.cal.kernel_us * 1e-6 + 10_240 / 397e9))
    assert float(sm_of(spec()).comm_s(1.0)) == 0.0


def test_compute_dtype_as_the_hardware_runs_it():
    assert math_dtype("fp4", has_fp8=True, has_fp4=False) == "bf16"     # MXFP4 on Hopper: BF16 math
    assert math_dtype("fp8", has_fp8=False, has_fp4=False) == "bf16"    # FP8 on Ampere (Marlin W8A16)
    assert math_dtype("fp8", has_fp8=True, has_fp4=False) == "fp8"
    assert math_dtype("fp4", has_fp8=True, has_fp4=True) == "fp4"       # Blackwell
    assert storage_dtype(catalog.load_model("gpt-oss-120b")) == "fp4"   # its experts, not the mean
    assert sm_of(spec("gpt-oss-120b")).matmul_peak == pytest.approx(989.4e12)
    fp8 = spec(model="qwen3-14b")
    fp8 = dataclasses.replace(fp8, model=with_weights_dtype(fp8.model, "fp8"))
    assert sm_of(fp8).matmul_peak == pytest.approx(1978.9e12)
    assert sm_of(dataclasses.replace(fp8, hw=catalog.load_hardware("a100-80g"))).matmul_peak == pytest.approx(312e12)


def test_weights_dtype_bytes_by_hand():
    # Qwen3-14B in FP8: embedding + LM head 2 x 151,936 x 5,120 = 1,555,824,640 params stay at 2 B, the other
    # 13,212,472,320 at 1 B: 3,111,649,280 + 13,212,472,320 = 16,324,121,600 B
    m = with_weights_dtype(catalog.load_model("qwen3-14b"), "fp8")
    assert m.weight_bytes == pytest.approx(16_324_121_600)
    assert with_weights_dtype(m, None) is m


def test_prefill_attention_flops_closed_form_equals_the_sum():
    # 2 x 40 heads x (128 + 128) x 40 layers per attended entry; positions 101..150 attend 101..150 entries
    sm = sm_of(spec())
    coef = 2 * 40 * 256 * 40
    assert sm.prefill_attention_flops(100, 50) == coef * sum(range(101, 151))
    assert float(sm.decode_attention_flops(np.array([7]))[0]) == coef * 7


# ---------------------------------------------------------------- scheduler rules

def _run(s: BenchSpec, pool=None, jump=True, fast=True, **sch_kw):
    sm = sm_of(s)
    p, sch = pool_and_limits(s)
    if sch_kw:
        sch = dataclasses.replace(sch, **sch_kw)
    run = simulate(sm, pool or p, requests_of(s), sch, jump, fast)
    return metrics([run], s), run


@pytest.mark.parametrize("blocks", [None, 400])
@pytest.mark.parametrize("mixed", [True, False])
def test_decode_runs_in_one_call_equal_the_plain_loop(blocks, mixed):
    # scheduler.py's runs of decode steps in one numpy call (fast=False) and the O(1)-per-step loop (the default),
    # with steps that mix prefill into decodes (vLLM) or not (SGLang)
    s = spec(num_prompts=30, output_len=40)
    pool = None if blocks is None else dataclasses.replace(pool_and_limits(s)[0], num_blocks=blocks)
    b, rb = _run(s, pool, jump=False, mixed_batches=mixed)
    for fast in (False, True):
        a, ra = _run(s, pool, jump=True, fast=fast, mixed_batches=mixed)
        assert (ra.jumps > 0) != fast and ra.steps == rb.steps and ra.preemptions == rb.preemptions
        for k in ("duration", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms"):
            assert a[k] == pytest.approx(b[k], rel=1e-9), k


def test_token_budget_and_chunked_prefill():
    # one request of 10,000 prompt tokens with a 4,096 budget: chunks of 4,096 + 4,096 + 1,808 = 3 steps before
    # the first token, then 9 decode steps for 10 output tokens
    s = spec(num_prompts=1, input_len=10_000, output_len=10, max_num_batched_tokens=4096)
    m, run = _run(s)
    assert run.steps == 3 + 9 and run.prefill_tokens == 10_000


def test_max_num_seqs_caps_the_running_set():
    m, run = _run(spec(num_prompts=50, max_num_seqs=8))
    assert run.peak_running == 8


def test_small_pool_preempts_and_still_finishes_every_request():
    s = spec(num_prompts=20, input_len=2000, output_len=300)
    pool = dataclasses.replace(pool_and_limits(s)[0], num_blocks=400)  # 6,400 tokens: ~3 requests
    m, run = _run(s, pool)
    assert m["completed"] == 20 and not np.isnan(run.done_s).any() and run.peak_running <= 4


def test_max_concurrency_is_a_client_cap():
    m, run = _run(spec(num_prompts=30, max_concurrency=4))
    assert run.peak_running <= 4
    # each request is sent when one of the 4 in flight finishes: the 5th is sent at the 1st's finish
    order = np.argsort(run.done_s)
    assert run.send_s[4] == pytest.approx(run.done_s[order[0]])


def test_poisson_arrivals_are_seeded():
    a = requests_of(spec(request_rate=2.0, seed=7)).send_s
    b = requests_of(spec(request_rate=2.0, seed=7)).send_s
    c = requests_of(spec(request_rate=2.0, seed=8)).send_s
    assert a[0] == 0 and (a == b).all() and not (a == c).all()
    assert np.diff(a).mean() == pytest.approx(0.5, rel=0.5)  # mean gap 1 / rate (40 samples)


def test_pool_blocks_by_hand():
    # vLLM's groups for gpt-oss (full + sliding 128), 16-token blocks: 1,000 tokens = 63 full blocks +
    # ceil(128 / 16) + 1 = 9 sliding blocks
    p = Pool(num_blocks=1000, block_size=16, full_groups=1, sliding_windows=(128,))
    assert p.need_one(1000) == 63 + 9 == int(p.need(1000))
    assert p.need_one(0) == 0


# ---------------------------------------------------------------- physical limits (the Must hold)

def test_tpot_at_batch_1_is_at_least_weights_over_bandwidth():
    for model, hw in (("qwen3-14b", "h100-sxm"), ("gpt-oss-120b", "h100-sxm"), ("qwen3-32b", "a100-80g")):
        s = spec(model, hw, num_prompts=1, output_len=64)
        m, _ = simulate_spec(s)[:2]
        sm = sm_of(s)
        touched = float(sm.distinct_experts(1.0)) / sm.experts if sm.experts else 0.0
        floor_s = (sm.dense_weight_bytes + sm.expert_weight_bytes * touched) / s.hw.hbm_bandwidth_bytes_per_s
        assert m["mean_tpot_ms"] / 1e3 >= floor_s, model


def test_prefill_time_is_at_least_flops_over_peak():
    from kvcalc.model import attention as att
    from kvcalc.serve import compute

    s = spec("qwen3-32b", num_prompts=1, input_len=16_000, output_len=1)
    m = simulate_spec(s)[0]
    flops = compute.prefill_flops(s.model, att.resolve_groups(s.model), 0, 16_000)
    assert m["mean_ttft_ms"] / 1e3 >= flops / s.hw.peak_flops("bf16")


@settings(max_examples=12, deadline=None)
@given(st.floats(1.0, 4.0), st.sampled_from(["hbm", "peak"]), st.integers(1, 40), st.integers(100, 4000))
def test_throughput_never_falls_when_bandwidth_or_peak_rises(scale, which, n, input_len):
    s = spec(num_prompts=n, input_len=input_len, output_len=30)
    field = "hbm_bandwidth_tb_per_s" if which == "hbm" else "bf16_dense_tflops"
    faster = dataclasses.replace(s, hw=dataclasses.replace(s.hw, **{field: getattr(s.hw, field) * scale}))
    slow, fast = simulate_spec(s)[0], simulate_spec(faster)[0]
    assert fast["output_throughput"] >= slow["output_throughput"] * (1 - 1e-12)


def test_a_run_whose_kv_fits_gives_the_same_figures_with_a_larger_pool():
    s = spec(num_prompts=20, output_len=40)
    pool = pool_and_limits(s)[0]
    a, ra = _run(s, pool)
    b, rb = _run(s, dataclasses.replace(pool, num_blocks=pool.num_blocks * 4))
    assert ra.preemptions == 0 and a == b


@pytest.mark.parametrize("groups", [1, 4])
def test_prefix_caching_never_raises_mean_ttft(groups):
    base = dict(num_prompts=60, input_len=1000, output_len=20, shared_prefix_tokens=2048, shared_prefix_groups=groups)
    a = simulate_spec(spec(**base))[0]
    c = simulate_spec(spec(**base, prefix_caching=True))[0]
    assert c["cached_tokens"] > 0 and a["cached_tokens"] == 0
    assert c["mean_ttft_ms"] <= a["mean_ttft_ms"]
    assert c["output_throughput"] >= a["output_throughput"]


def test_kv_compression_reads_and_stores_less():
    s = spec("qwen3-32b", "a100-80g", num_prompts=40, input_len=4000, output_len=100)
    a, ra = simulate_spec(s)[:2]
    b, rb = simulate_spec(dataclasses.replace(s, kv_compression=4.0))[:2]
    # 4 x the requests fit (the same bytes hold 4 x the blocks), so more run at once and throughput rises
    assert rb[0].peak_running > ra[0].peak_running and b["output_throughput"] > a["output_throughput"]
    # each step reads a quarter of the KV: 64 layers x 8 x 256 x 2 B x 4,001 tokens / 4
    sm = simulate_spec(dataclasses.replace(s, num_prompts=1, kv_compression=4.0))[2]
    assert float(sm.kv_read_bytes(4001)) == 64 * 8 * 256 * 2 * 4001 / 4


def test_every_request_is_counted_once():
    m = simulate_spec(spec(num_prompts=33, dp=3, tp=1))[0]
    assert m["completed"] == 33 and m["total_input_tokens"] == 33 * 1000 and m["total_output_tokens"] == 33 * 50
    assert m["gpu_seconds"] == pytest.approx(3 * m["duration"])
    assert m["usd_per_mtok_blended"] > 0 and math.isfinite(m["usd_per_mtok_output"])


def test_requests_larger_than_the_pool_are_refused():
    s = spec(num_prompts=1, input_len=100_000)
    pool = dataclasses.replace(pool_and_limits(s)[0], num_blocks=100)
    with pytest.raises(ValueError, match="cannot hold one request"):
        _run(s, pool)


def test_a_trace_drives_arrivals_lengths_and_prefix_hits(tmp_path):
    import json

    from kvcalc.trace.bench_input import trace_requests

    f = tmp_path / "t.jsonl"
    lines = [{"timestamp": 1000 * i, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2 + (i % 2)]}
             for i in range(6)]
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    req = trace_requests(str(f))
    assert list(req.send_s) == [0, 1, 2, 3, 4, 5] and req.key_tokens == 512
    s = spec(trace=req, num_prompts=6)
    a = simulate_spec(s)[0]
    c = simulate_spec(dataclasses.replace(s, prefix_caching=True))[0]
    # the first request computes both blocks; then block 1 always hits, block 2/3 from the 3rd request on
    assert c["cached_tokens"] == 512 + 1023 * 4 and c["mean_ttft_ms"] < a["mean_ttft_ms"]


def test_narrow_tp_split_expert_gemms_by_hand():
    # Qwen3-235B-A22B: 227,096,395,776 expert params = 128 experts x 94 layers x 3 x 4,096 x 1,536; at TP 8 each
    # GPU's expert GEMM has 1,536 / 8 = 192 output columns: width factor 192 / (192 + matmul_half_width)
    s = spec("qwen3-235b-a22b", tp=8)
    sm = sm_of(s)
    w = s.cal.matmul_half_width
    assert sm.expert_width == pytest.approx(192 / (192 + w))
    assert sm_of(spec("qwen3-235b-a22b", tp=4)).expert_width == pytest.approx(384 / (384 + w))
    # prefill attention runs at the calibrated attention efficiency of the BF16 peak
    assert sm.attn_eff == s.cal.attention_efficiency


@pytest.mark.parametrize("model", ["qwen3-14b", "gpt-oss-120b", "deepseek-v4-flash", "qwen3-next-80b-a3b",
                                   "llama-4-scout", "gemma-3-27b", "deepseek-v3.2"])
def test_decode_sums_equal_the_elementwise_model(model):
    # the linear fast path (sum of L for plain full attention, sum of min(L, W) for sliding) = summing each query
    sm = sm_of(spec(model))
    ctx = np.array([[1, 5, 300], [129, 4000, 100_000], [2, 2, 70_000]])
    a, k = sm.decode_sums(ctx, axis=0)
    assert np.allclose(a, sm.decode_attention_flops(ctx).sum(axis=0), rtol=1e-12)
    assert np.allclose(k, sm.kv_read_bytes(ctx).sum(axis=0), rtol=1e-12)
