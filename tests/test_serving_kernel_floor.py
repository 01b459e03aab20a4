"""The serving model's kernel floor (issue 18, held-out rows): every kernel a layer launches per step pays a fixed
time (the calibration's kernel_us) beyond its FLOPs and bytes, and so does every TP all-reduce on top of the link's
latency. The kernel counts come from the layer's structure (kernel_count.KERNELS), each checked by hand here."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kvcalc.model import catalog
from kvcalc.model.weights_dtype import with_weights_dtype
from kvcalc.serve.calibration import calibration_for
from kvcalc.serve.step_time import step_model


def _sm(name: str, hw: str = "h100-sxm", tp: int = 1, kernel_us: float = 0.0, dtype=None, engine="vllm"):
    h = catalog.load_hardware(hw)
    cal = dataclasses.replace(calibration_for(hw)[0], kernel_us=kernel_us)
    model = with_weights_dtype(catalog.load_model(name), dtype)
    return step_model(model, h, catalog.load_link(h.scaleup_link), cal, tp, engine)


@pytest.mark.parametrize("name, hw, dtype, kernels", [
    # GQA attention (norm, QKV, RoPE + cache write, attention, O) 5 + a dense MLP (norm, gate_up, act, down) 4
    ("qwen3-8b", "h100-sxm", None, 9),
    # FP8 weights on Hopper: one activation-quantisation kernel before each of the 4 FP8 GEMMs
    ("qwen3-8b", "h100-sxm", "fp8", 13),
    # FP8 weights on Ampere run BF16 math (W8A16): no quantisation kernel
    ("qwen3-8b", "a100-80g", "fp8", 9),
    # MoE MLP (norm, router, top-k, align, gate_up, act, down, combine) 8; MXFP4 on Hopper runs BF16 math
    ("gpt-oss-120b", "h100-sxm", None, 13),
    ("qwen3-235b-a22b", "h100-sxm", None, 13),
    # MLA 10 + MoE 8 + its shared expert 4 (gate_up, act, down, add) + FP8 quantisation before MLA's 3 FP8 GEMMs,
    # the routed experts' 2 and the shared expert's 2
    ("deepseek-v3", "h200-sxm", None, 29),
    # + the DSA lightning indexer's 4 (key GEMM, weights GEMM, fp8_mqa_logits, top-k)
    ("deepseek-v3.2", "h200-sxm", None, 33),
    # a shared expert in BF16 math (Ampere runs FP8 as W8A16): MLA 10 + MoE 8 + shared 4, no quantisation kernels
    ("deepseek-v3", "a100-80g", None, 22),
    # Qwen3-Next's gated shared expert (shared_expert_intermediate_size 512), BF16: every layer a mixer or attention
    # block 5 + MoE 8 + shared 4; Qwen3-235B has no shared expert: 5 + 8
    ("qwen3-next-80b-a3b", "h100-sxm", None, 17),
    ("qwen3-235b-a22b", "a100-80g", None, 13),
])
def test_kernels_per_layer_by_hand(name, hw, dtype, kernels):
    assert _sm(name, hw, dtype=dtype).kernels_per_layer == kernels


def test_the_kernel_floor_of_a_dense_decode_step_by_hand():
    # Qwen3-8B on one H100: 36 layers x 9 kernels x 5 us = 1.62 ms per step, whatever its tokens; no all-reduce
    base, floored = _sm("qwen3-8b"), _sm("qwen3-8b", kernel_us=5.0)
    assert floored.kernel_floor_s == pytest.approx(36 * 9 * 5e-6)
    assert floored.step_overhead_s - base.step_overhead_s == pytest.approx(1.62e-3)
    for tokens in (1.0, 64.0, 8192.0):
        t = np.float64(tokens)
        extra = floored.step_s(t, t, t, 0.0, 0.0) - base.step_s(t, t, t, 0.0, 0.0)
        assert float(extra) == pytest.approx(1.62e-3)


def test_the_kernel_floor_at_tp8_adds_to_every_all_reduce_by_hand():
    # DeepSeek V3 on 8 x H200: 61 layers x 29 kernels x 5 us = 8.845 ms, and each of the 2 x 61 all-reduces pays
    # 5 us on top of NVLink4's 2.65 us: 0.61 ms more; a decode token's all-reduce bytes are unchanged
    base, floored = _sm("deepseek-v3", "h200-sxm", 8), _sm("deepseek-v3", "h200-sxm", 8, kernel_us=5.0)
    assert floored.kernel_floor_s == pytest.approx(61 * 29 * 5e-6)
    assert floored.link_latency_s == pytest.approx(2.65e-6 + 5e-6)
    assert float(floored.comm_s(1.0) - base.comm_s(1.0)) == pytest.approx(2 * 61 * 5e-6)
    t = np.float64(4)
    extra = floored.step_s(t, t, t, 0.0, 0.0) - base.step_s(t, t, t, 0.0, 0.0)
    assert float(extra) == pytest.approx(8.845e-3 + 0.61e-3)


def test_the_kernel_floor_never_makes_a_step_faster():
    for name, hw, tp in (("qwen3-14b", "h100-sxm", 2), ("gpt-oss-20b", "a100-80g", 1)):
        lo, hi = _sm(name, hw, tp), _sm(name, hw, tp, kernel_us=3.0)
        t = np.array([1.0, 7.0, 300.0, 8192.0])
        assert (hi.step_s(t, t, t, 0.0, 0.0) > lo.step_s(t, t, t, 0.0, 0.0)).all()
