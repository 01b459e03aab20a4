"""Which attention kernel a step runs, and so which calibrated efficiency its attention FLOPs take: vLLM runs
gpt-oss's attention sinks on its Triton backend below Hopper (vLLM's gpt-oss recipe: "GPT-OSS works on Ampere
devices by default, using the TRITON_ATTN attention backend and Marlin MXFP4 MoE"), FlashAttention 3 on Hopper."""

from __future__ import annotations

import dataclasses

import pytest

from kvcalc.model import catalog
from kvcalc.serve.calibration import calibration_for
from kvcalc.serve.step_time import step_model


def _sm(name: str, hw: str, engine: str = "vllm", cal=None):
    h = catalog.load_hardware(hw)
    link = catalog.load_link(h.scaleup_link) if h.scaleup_link else None   # the L40S has no NVLink
    return step_model(catalog.load_model(name), h, link, cal or calibration_for(hw)[0], 1, engine)


A100 = calibration_for("a100-80g")[0]
H100 = calibration_for("h100-sxm")[0]


@pytest.mark.parametrize("name, hw, engine, eff", [
    ("gpt-oss-120b", "a100-80g", "vllm", A100.triton_attention_efficiency),  # sinks below Hopper: Triton
    ("gpt-oss-20b", "a100-80g", "vllm", A100.triton_attention_efficiency),
    ("gpt-oss-20b", "l40s", "vllm", A100.triton_attention_efficiency),       # Ada borrows A100's calibration
    ("gpt-oss-120b", "h100-sxm", "vllm", H100.attention_efficiency),          # FlashAttention 3 takes sinks
    ("gpt-oss-120b", "a100-80g", "sglang", A100.attention_efficiency),        # vLLM's rule only
    ("qwen3-14b", "a100-80g", "vllm", A100.attention_efficiency)])            # no sinks
def test_the_attention_kernel_sets_the_efficiency(name, hw, engine, eff):
    assert A100.triton_attention_efficiency is not None and eff is not None
    assert _sm(name, hw, engine).attn_eff == eff


def test_without_a_triton_figure_the_gpu_s_attention_efficiency_holds():
    cal = dataclasses.replace(A100, triton_attention_efficiency=None)
    assert _sm("gpt-oss-120b", "a100-80g", cal=cal).attn_eff == A100.attention_efficiency


def test_a_long_prefill_s_attention_time_by_hand():
    # gpt-oss-120b: 64 query heads of 64 dims (q.k 64, v 64), 18 full-attention layers of 36 (the others a window
    # of 128): a chunk of positions 1..8,192 attends sum_t t = 33,558,528 entries in each full layer and
    # sum_t min(t, 128) = 128 x 129 / 2 + 128 x 8,064 = 1,040,448 in each sliding one, at 2 x 64 x (64 + 64) =
    # 16,384 FLOP per entry; on one A100 at 312 TFLOP/s BF16 x the Triton efficiency
    sm = _sm("gpt-oss-120b", "a100-80g")
    flops = 16_384 * 18 * (8192 * 8193 // 2 + 128 * 129 // 2 + 128 * (8192 - 128))
    assert sm.prefill_attention_flops(0, 8192) == pytest.approx(flops, rel=1e-12)
    t = sm.compute_s(8192.0, 1.0, flops) - sm.compute_s(8192.0, 1.0, 0.0)
    assert float(t) == pytest.approx(flops / (312e12 * A100.triton_attention_efficiency), rel=1e-9)
