"""The scheduler's fast paths against the plain step-by-step loop: the O(1)-per-step loop (serve/scheduler_fast.py,
the default) and scheduler.py's runs of decode steps in one numpy call (``fast=False``); and the pooled
inter-token latencies (vLLM's median and P99 ITL) by hand."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.model import catalog
from kvcalc.serve.bench import BenchSpec, metrics, pool_and_limits, pooled_percentile, requests_of
from kvcalc.serve.calibration import calibration_for
from kvcalc.serve.scheduler import Pool, Requests, Scheduling, simulate
from kvcalc.serve.step_time import step_model


class LinearSteps:
    """A step model whose step takes 10 ms + 1 ms per token, whatever the tokens attend [s]."""

    def decode_sums(self, contexts, axis=None):
        return contexts.sum(axis=axis) * 0.0, contexts.sum(axis=axis) * 0.0

    def prefill_attention_flops(self, start, tokens):
        return 0.0

    def kv_read_bytes(self, contexts):
        return contexts * 0.0

    def step_s(self, tokens, sequences, sampled, attn, kv):
        return 0.010 + 0.001 * tokens + attn * 0.0

    def decode_forms(self):  # the O(1) loop's view of the same model: nothing depends on the contexts
        return {}, {}

    def step_parts(self, tokens, sequences, sampled):
        return 0.010 + 0.001 * tokens, 0.0, 0.0, 0.0, 0.0


def test_itl_pooled_over_requests_by_hand():
    # A: sent at 0, 100 prompt tokens, 4 out; B: sent at 0.05 s, 1,000 prompt tokens, 3 out.
    # step 1 (t = 0): A's prefill, 100 tokens: 0.110 s -> A's 1st token at 0.110
    # step 2: A's decode + B's 1,000-token prefill: 1.011 s -> A's 2nd token (gap 1.011), B's 1st at 1.121
    # steps 3, 4: two decodes, 0.012 s each -> A's gaps 0.012, 0.012; B's 0.012, 0.012; both done at 1.145
    # pooled gaps [0.012 x 4, 1.011]: median 0.012; P99 at rank 4 x 0.99 = 3.96: 0.012 + 0.96 x 0.999 = 0.97104
    req = Requests(np.array([0.0, 0.05]), np.array([100, 1000]), np.array([4, 3]))
    for fast in (True, False):  # the O(1) loop, then scheduler.py's
        run = simulate(LinearSteps(), Pool(num_blocks=1000, block_size=16), req, Scheduling(8192, 16), True, fast)
        assert run.first_s == pytest.approx([0.110, 1.121]) and run.done_s == pytest.approx([1.145, 1.145])
        spec = BenchSpec("m", catalog.load_model("qwen3-8b"), "h100-sxm", catalog.load_hardware("h100-sxm"), None,
                         None, "h100-sxm")
        m = metrics([run], spec)
        assert m["median_itl_ms"] == pytest.approx(12.0)
        assert m["p99_itl_ms"] == pytest.approx(971.04)
        assert m["mean_itl_ms"] == pytest.approx((1.011 + 4 * 0.012) / 5 * 1e3)  # the pooled mean, as before


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100, allow_nan=False), st.integers(0, 50)), min_size=1, max_size=30),
       st.sampled_from([0, 1, 25, 50, 90, 99, 100]))
def test_pooled_percentile_is_numpys_on_the_repeated_list(pairs, q):
    v = np.array([p[0] for p in pairs])
    n = np.array([p[1] for p in pairs], dtype=np.int64)
    got = pooled_percentile(v, n, q)
    assert got == (float(np.percentile(np.repeat(v, n), q)) if n.sum() else 0.0)


# (model, GPUs of one replica): every attention kind of the presets (V4's compressed CSA/HCA, DSA's indexer,
# MLA, linear attention and Mamba hybrids, chunked local attention, sliding windows)
# (H100 calibration for all: the figures only have to agree between the paths)
KIND_MODELS = [("deepseek-v4-flash", 8, "h100-sxm"), ("deepseek-v3.2", 8, "h200-sxm"), ("deepseek-v3", 8, "h200-sxm"),
               ("qwen3-next-80b-a3b", 4, "h100-sxm"), ("nemotron-3-nano-30b-a3b", 1, "h100-sxm"),
               ("llama-4-scout", 4, "h100-sxm"), ("mistral-7b-v0.1", 1, "h100-sxm")]


def _spec(data, models=(("qwen3-8b", 1, "h100-sxm"), ("gpt-oss-120b", 1, "h100-sxm"), ("gemma-3-27b", 1, "h100-sxm")),
          budgets=(None, 512, 2048), n_most: int = 40, engines=("vllm", "vllm", "sglang", "trtllm")) -> BenchSpec:
    model, tp, hw_name = data.draw(st.sampled_from(models), "model")
    hw = catalog.load_hardware(hw_name)
    return BenchSpec(
        model, catalog.load_model(model), hw_name, hw, catalog.load_link(hw.scaleup_link),
        calibration_for("h100-sxm")[0], "h100-sxm", tp=tp,
        engine=data.draw(st.sampled_from(engines), "engine"),
        input_len=data.draw(st.sampled_from([40, 300, 2000, 9000]), "input"),
        output_len=data.draw(st.sampled_from([1, 2, 9, 40, 120]), "output"),
        num_prompts=data.draw(st.integers(1, n_most), "n"),
        request_rate=data.draw(st.sampled_from([math.inf, 5.0, 50.0]), "rate"),
        max_concurrency=data.draw(st.sampled_from([None, 3, 16]), "concurrency"),
        max_num_seqs=data.draw(st.sampled_from([None, 4, 32]), "seqs"),
        max_num_batched_tokens=data.draw(st.sampled_from(budgets), "budget"),  # chunked prefill
        prefix_caching=data.draw(st.booleans(), "prefix caching"),
        shared_prefix_tokens=data.draw(st.sampled_from([0, 512, 1024]), "prefix"),
        shared_prefix_groups=data.draw(st.sampled_from([1, 3]), "groups"), seed=data.draw(st.integers(0, 9)))


def _same_runs(data, s: BenchSpec) -> None:
    """Every path of the scheduler gives the step-by-step loop's figures on ``s`` (with, drawn, a pool so small
    that requests are preempted, and steps that mix prefill into decodes or not, whatever the engine)."""
    sm = step_model(s.model, s.hw, s.link, s.cal, s.tp, s.engine)
    pool, sch = pool_and_limits(s)
    sch = dataclasses.replace(sch, mixed_batches=data.draw(st.booleans(), "mixed"))
    if data.draw(st.booleans(), "small pool"):  # preemptions: the pool holds one request + a few blocks
        one = pool.need_one(s.input_len + s.shared_prefix_tokens + s.output_len)
        pool = dataclasses.replace(pool, num_blocks=one + data.draw(st.integers(0, 300 * (pool.block_size == 1
                                                                                          and 16 or 1))))
    req = requests_of(s)
    slow = simulate(sm, pool, req, sch, False)
    for fast in (simulate(sm, pool, req, sch), simulate(sm, pool, req, sch, True, False)):
        _same(fast, slow, s)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_the_fast_paths_equal_the_step_by_step_loop(data):
    _same_runs(data, _spec(data))


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_the_fast_paths_equal_the_loop_for_every_attention_kind(data):
    _same_runs(data, _spec(data, KIND_MODELS, n_most=20, engines=("vllm", "sglang")))  # (V4: no TRT-LLM sizing)


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_the_fast_paths_equal_the_loop_when_the_token_budget_leaves_decodes_out(data):
    # max_num_batched_tokens below the running decodes: only the first B decodes (admission order) step, the
    # others fall a token behind and get gaps of their own
    s = _spec(data, budgets=(4, 9, 24), n_most=40)
    _same_runs(data, dataclasses.replace(s, input_len=min(s.input_len, 300), max_num_seqs=None))


def test_a_run_past_the_token_budget_is_stepped_by_the_o1_loop():
    # 30 requests at once, 16 tokens a step: the decodes outnumber the budget, so the O(1) loop's own
    # truncation (not a fallback) is what the equality above checks; its gaps then include single ones
    s = BenchSpec("qwen3-8b", catalog.load_model("qwen3-8b"), "h100-sxm", catalog.load_hardware("h100-sxm"), None,
                  calibration_for("h100-sxm")[0], "h100-sxm", input_len=20, output_len=30, num_prompts=30,
                  max_num_batched_tokens=16)
    sm = step_model(s.model, s.hw, s.link, s.cal, s.tp)
    pool, sch = pool_and_limits(s)
    assert sch.max_num_seqs > 16 and sm.decode_forms() is not None
    req = requests_of(s)
    fast, slow = simulate(sm, pool, req, sch), simulate(sm, pool, req, sch, False)
    assert fast.jumps == 0 and (fast.gap_n == 1).sum() > 0
    _same(fast, slow, s)


def drawn_limits(data, n: int):
    """(BenchSpec, step model, pool, scheduling) of Qwen3-8B on one H100 for ``n`` requests of prompts below 1,200
    tokens, with a drawn pool (one 1,300-token request's blocks and 0, 50 or 10^5 more), prefix caching, sequence
    cap, token budget and mixed or unmixed steps (vLLM's or SGLang's): the hypothesis tests' setup here and in
    test_bench_clock_router.py."""
    s = BenchSpec("qwen3-8b", catalog.load_model("qwen3-8b"), "h100-sxm", catalog.load_hardware("h100-sxm"), None,
                  calibration_for("h100-sxm")[0], "h100-sxm", num_prompts=n)
    sm = step_model(s.model, s.hw, s.link, s.cal, s.tp)
    pool, sch = pool_and_limits(s)
    pool = dataclasses.replace(pool, num_blocks=pool.need_one(1300) + data.draw(st.sampled_from([0, 50, 10**5])))
    sch = dataclasses.replace(sch, prefix_caching=data.draw(st.booleans(), "caching"),
                              max_num_seqs=data.draw(st.sampled_from([4, 256]), "seqs"),
                              max_num_batched_tokens=data.draw(st.sampled_from([16, 512, 8192]), "budget"),
                              mixed_batches=data.draw(st.booleans(), "mixed"))
    return s, sm, pool, sch


def _same(fast, slow, s: BenchSpec) -> None:
    for k in ("steps", "preemptions", "cached_tokens", "prefill_tokens", "peak_running"):
        assert getattr(fast, k) == getattr(slow, k), k
    for k in ("first_s", "done_s", "send_s"):
        assert np.allclose(getattr(fast, k), getattr(slow, k), rtol=1e-12, atol=0), k
    a, b = metrics([fast], s), metrics([slow], s)
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-12), k
    # every request's gaps add up to its decode time, one gap per token after the first
    multi = fast.output > 1
    assert int(fast.gap_n.sum()) == int((fast.output[multi] - 1).sum())
    assert float((fast.gap_s * fast.gap_n).sum()) == pytest.approx(float((fast.done_s - fast.first_s)[multi].sum()),
                                                                   rel=1e-9, abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_the_fast_paths_equal_the_loop_with_hand_offs_warm_keys_and_tier_loads(data):
    # what trace and plan callers pass beside the bench's requests: prompt tokens handed over with the KV
    # (a PD hand-off), block keys already cached when the run starts, a per-request wait for a lower tier
    n = data.draw(st.integers(1, 30), "n")
    rng = np.random.default_rng(data.draw(st.integers(0, 99), "seed"))
    prompt = rng.integers(1, 1200, n)
    keys = [[int(k) for k in rng.integers(0, 6, -(-int(p) // 16))] for p in prompt]
    req = Requests(np.sort(rng.uniform(0, 2, n)), prompt, rng.integers(1, 60, n), keys=keys,
                   handed=rng.integers(0, 1200, n) if data.draw(st.booleans(), "handed") else None,
                   warm_keys=frozenset(range(3)) if data.draw(st.booleans(), "warm") else None,
                   load_s=rng.uniform(0, 0.05, n) if data.draw(st.booleans(), "loads") else None)
    s, sm, pool, sch = drawn_limits(data, n)
    slow = simulate(sm, pool, req, sch, False)
    for fast in (simulate(sm, pool, req, sch), simulate(sm, pool, req, sch, True, False)):
        _same(fast, slow, s)
