"""StepModel.compute_parts: the compute term split into the dense matmuls, the routed experts, the LM head and
attention (what `kvcalc bench --explain` prints and docs/serving-model.md sets beside aiconfigurator's per-op
times); the parts sum to compute_s, and each is pinned by hand on DeepSeek V3 at TP 8 on H200."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import run_cli

from kvcalc.model import catalog
from kvcalc.model.weights_dtype import with_weights_dtype
from kvcalc.serve.calibration import calibration_for
from kvcalc.serve.step_time import step_model


def _sm(name, hw="h100-sxm", tp=1, dtype=None, engine="vllm", **cal):
    h = catalog.load_hardware(hw)
    c = dataclasses.replace(calibration_for(hw)[0], **cal)
    return step_model(with_weights_dtype(catalog.load_model(name), dtype), h, catalog.load_link(h.scaleup_link), c,
                      tp, engine)


@pytest.mark.parametrize("name, hw, tp, dtype", [
    ("qwen3-8b", "h100-sxm", 1, None), ("qwen3-235b-a22b", "h100-sxm", 8, None),
    ("qwen3-235b-a22b", "h100-sxm", 4, "fp8"), ("deepseek-v3", "h200-sxm", 8, None),
    ("gpt-oss-120b", "a100-80g", 1, None), ("deepseek-v3.2", "h200-sxm", 8, None)])
def test_the_parts_sum_to_compute_s(name, hw, tp, dtype):
    sm = _sm(name, hw, tp, dtype)
    tokens = np.array([1.0, 7.0, 256.0, 8192.0, 16384.0])
    sampled = np.array([1.0, 7.0, 256.0, 2.0, 1.0])
    attn = np.array([0.0, 1e9, 3e12, 1e14, 4e14])
    parts = sm.compute_parts(tokens, sampled, attn)
    assert set(parts) == {"dense_s", "experts_s", "head_s", "attention_s"}
    total = parts["dense_s"] + parts["experts_s"] + parts["head_s"] + parts["attention_s"]
    np.testing.assert_allclose(total, sm.compute_s(tokens, sampled, attn), rtol=1e-12)
    assert all(np.all(np.asarray(v) >= 0) for v in parts.values())
    assert (np.all(np.asarray(parts["experts_s"]) > 0)) == bool(sm.experts)


def test_each_part_by_hand_deepseek_v3_tp8_h200():
    # a flat efficiency (half points 0: eff(n) = 0.25 for every GEMM, no width penalty; DeepSeek's FP8 weights run
    # FP8 math on Hopper, so it is the FP8 figure that applies) and attention at 50%
    sm = _sm("deepseek-v3", "h200-sxm", 8, matmul_efficiency_max=0.9, fp8_matmul_efficiency=0.25,
             matmul_half_tokens=0, matmul_half_width=0, attention_efficiency=0.5)
    p = sm.compute_parts(8192.0, 1.0, 1e15)
    peak = 8 * 1978.9e12  # 8 GPUs x the H200's dense FP8 peak (DeepSeek's FP8 weights run FP8 math on Hopper)
    # routed experts: 653,908,770,816 params (256 x 58 x 3 x 7,168 x 2,048) x 8 / 256 = 20,434,649,088 active;
    # 8,192 tokens touch all 256 experts (256 (1 - (1 - 8/256)^8192) = 256), 256 tokens each: eff 0.25
    assert p["experts_s"] == pytest.approx(2 * 20_434_649_088 * 8192 / 0.25 / peak, rel=1e-9)  # 84.59 ms
    assert p["experts_s"] == pytest.approx(0.0845928, rel=1e-6)
    # dense: 37e9 active - embedding and LM head (129,280 x 7,168 = 926,679,040 each, untied) - the experts
    # = 14,711,992,832 params
    assert p["dense_s"] == pytest.approx(2 * 14_711_992_832 * 8192 / 0.25 / peak, rel=1e-9)  # 60.90 ms
    assert p["head_s"] == pytest.approx(2 * 926_679_040 * 1 / 0.25 / peak, rel=1e-9)          # one token sampled
    # attention: 1e15 FLOP over 8 GPUs x the BF16 peak 989.4 TFLOP/s x 0.5 = 252.68 ms
    assert p["attention_s"] == pytest.approx(1e15 / (8 * 989.4e12 * 0.5), rel=1e-12)


def test_fp8_math_takes_the_fp8_efficiency_and_bf16_math_the_other():
    # the H100 calibration's FP8 figure (0.2242 of the FP8 peak) against its BF16 one (0.2577 of the BF16 peak):
    # an FP8 model's routed experts take 0.2577 / 0.2242 = 1.149x the time they take without the FP8 figure
    from kvcalc.serve.step_time import matmul_efficiency

    cal = calibration_for("h100-sxm")[0]
    assert matmul_efficiency(cal, "fp8") == cal.fp8_matmul_efficiency == 0.2242
    assert matmul_efficiency(cal, "bf16") == cal.matmul_efficiency_max == 0.2577
    with_fp8 = _sm("qwen3-235b-a22b", "h100-sxm", 4, "fp8").compute_parts(8192.0, 1.0, 0.0)
    without = _sm("qwen3-235b-a22b", "h100-sxm", 4, "fp8", fp8_matmul_efficiency=None).compute_parts(8192.0, 1.0, 0.0)
    assert with_fp8["experts_s"] / without["experts_s"] == pytest.approx(0.2577 / 0.2242, rel=1e-12)
    # a BF16 model on the same GPU does not see it
    bf16 = _sm("qwen3-235b-a22b", "h100-sxm", 8)
    assert bf16.eff_max == 0.2577 and bf16.math_dtype == "bf16"
    assert calibration_for("a100-80g")[0].fp8_matmul_efficiency is None  # A100: no FP8 math, W8A16


def test_explain_prints_the_parts():
    r = run_cli("bench", "--model", "deepseek-v3", "--hardware", "h200-sxm", "--gpus", "8", "--random-input-len",
                "4000", "--random-output-len", "20", "--num-prompts", "8", "--explain")
    assert r.code == 0, r.err
    text = " ".join(r.out.split())  # rich wraps at the terminal's width
    part = text[text.index("prefill step of 8,192 tokens"):]
    part = part[part.index("compute ="):part.index("memory =")]
    assert all(f"{w} " in part for w in ("(dense", "experts", "LM head", "attention")), part
    # a dense model's line has no experts part
    d = run_cli("bench", "--model", "qwen3-8b", "--random-input-len", "100", "--num-prompts", "2", "--explain")
    text = " ".join(d.out.split())
    part = text[text.index("compute ="):text.index("memory =")]
    assert "(dense " in part and "experts " not in part, part


def test_weight_read_bytes_by_hand_deepseek_v3_tp8():
    sm = _sm("deepseek-v3", "h200-sxm", 8)
    # dense bytes = 671e9 B (1 B/param) - the experts' 653,908,770,816 B - the BF16 embedding 926,679,040 x 2 B
    # = 15,237,871,104 B; one token touches 8 of 256 experts: + 653,908,770,816 x 8 / 256 = 20,434,649,088 B; / 8 GPUs
    assert float(sm.weight_read_bytes(1.0)) == pytest.approx((15_237_871_104 + 20_434_649_088) / 8, rel=1e-9)
    # memory_s reads those and the KV at the calibrated share of the H200's 4.8 TB/s
    bw = 4.8e12 * sm.hbm_eff
    assert float(sm.memory_s(1.0, 1e9)) == pytest.approx((4_459_065_024 + 1e9) / bw, rel=1e-9)
