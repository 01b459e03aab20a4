"""The serving model's step time for DeepSeek V3 / V3.2 (issue 18's held-out rows): routed experts read as the
step's tokens touch them, and the DSA lightning indexer's scoring FLOPs, each checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kvcalc.model import catalog
from kvcalc.serve import compute
from kvcalc.serve.calibration import calibration_for
from kvcalc.serve.step_time import step_model

# config.json (tests/fixtures/configs/deepseek-v3.2; V3's config_671B.json has the same values): 256 routed experts
# of moe_intermediate_size 2,048 in 61 - 3 (first_k_dense_replace) layers, hidden 7,168, a gated MLP (3 matrices)
ROUTED = 256 * (61 - 3) * 3 * 7168 * 2048   # 653,908,770,816 params
INDEXER = 2 * 64 * 128 * 61                 # index_n_heads 64 x index_head_dim 128, 61 layers: 999,424 FLOP/entry
LATENT = 2 * 128 * (512 + 64 + 512) * 61    # MLA decode in the latent: 128 heads, keys 512 + 64, values 512


def _sm(name: str, hw: str = "h200-sxm", tp: int = 8):
    h = catalog.load_hardware(hw)
    return step_model(catalog.load_model(name), h, catalog.load_link(h.scaleup_link), calibration_for(hw)[0], tp)


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v3.2"])
def test_deepseek_presets_carry_the_routed_experts_of_the_config(name):
    m = catalog.load_model(name)
    imported = catalog.load_model("tests/fixtures/configs/deepseek-v3.2")
    assert ROUTED == 653_908_770_816
    assert (m.moe_experts, m.moe_experts_per_token) == (imported.moe_experts, imported.moe_experts_per_token) == (256, 8)
    assert m.moe_expert_params_b * 1e9 == pytest.approx(ROUTED) == imported.moe_expert_params_b * 1e9
    # n_shared_experts 1: one shared expert per MoE layer (its kernels in the step's floor, kernel_count.KERNELS)
    assert m.moe_shared_experts == imported.moe_shared_experts == 1
    # capacity unchanged: the weights stay 671 B params x 1 B (FP8)
    assert m.weight_bytes == 671e9


@pytest.mark.parametrize("name, shared", [
    ("qwen3-next-80b-a3b", 1),       # shared_expert_intermediate_size 512
    ("llama-4-scout", 1),            # modeling_llama4.py: one shared expert, no config field
    ("nemotron-3-nano-30b-a3b", 1),  # n_shared_experts 1
    ("kimi-k2", 1), ("glm-5", 1),    # n_shared_experts 1
    ("qwen3-235b-a22b", None), ("gpt-oss-120b", None)])  # routed experts only
def test_shared_experts_come_from_the_config_and_agree_with_the_preset(name, shared):
    assert catalog.load_model(f"tests/fixtures/configs/{name}").moe_shared_experts == shared
    assert catalog.load_model(name).moe_shared_experts == shared


def test_a_decode_step_reads_the_experts_its_tokens_touch():
    sm = _sm("deepseek-v3")
    # 1 token touches 8 of 256 experts per layer: 8 / 256 of the routed bytes; 1,000 tokens nearly all of them
    one = sm.memory_s(np.float64(1), 0.0) * sm.hbm_bytes_per_s * sm.hbm_eff * sm.tp
    many = sm.memory_s(np.float64(1000), 0.0) * sm.hbm_bytes_per_s * sm.hbm_eff * sm.tp
    assert one - sm.dense_weight_bytes == pytest.approx(ROUTED * 8 / 256)
    assert many - sm.dense_weight_bytes == pytest.approx(ROUTED * (1 - (1 - 8 / 256) ** 1000))
    # dense bytes: 671e9 - routed - the BF16 embedding table (129,280 x 7,168 x 2 B), which is looked up, not read
    assert sm.dense_weight_bytes == pytest.approx(671e9 - ROUTED - 129280 * 7168 * 2)


def test_the_indexer_scores_every_earlier_token_in_prefill_by_hand():
    v32 = _sm("deepseek-v3.2")
    # up to 2,048 positions DSA attends every earlier token (min(t, top_k) = t), in the latent (FlashMLA's sparse
    # prefill, MQA 576 / 512) with 16 heads per GPU padded to 64 (x 4: sparse_head_padding), + the indexer:
    # 999,424 FLOP x sum_{t=1}^{2000} t = 999,424 x 2,001,000 = 1,999,847,424,000 FLOP on EACH of the 8 GPUs
    # (replicated), in FP8 at 1,978.9 TFLOP/s x the attention efficiency
    flops = INDEXER * 2000 * 2001 // 2
    assert flops == 1_999_847_424_000
    extra = v32.prefill_attention_flops(0, 2000) - 4 * LATENT * 2000 * 2001 // 2
    time_s = extra / (v32.tp * v32.attn_peak * v32.attn_eff)
    assert time_s == pytest.approx(flops / (1978.9e12 * v32.attn_eff), rel=1e-12)
    # O(L^2): a chunk of positions 30,001..32,000 scores 30,001..32,000 earlier tokens each
    chunk = v32.prefill_attention_flops(30000, 2000)
    sparse = 4 * LATENT * 2048 * 2000                # the top-k read: 2,048 entries per position
    equiv = v32.tp * v32.attn_peak / 1978.9e12       # FP8 FLOPs on every GPU in BF16-attention equivalents
    assert chunk == pytest.approx(sparse + INDEXER * (32000 * 32001 - 30000 * 30001) // 2 * equiv, rel=1e-12)


def test_the_indexer_per_decode_token_by_hand():
    v32 = _sm("deepseek-v3.2")
    ctx = np.array([1000, 8192])
    # MLA decodes in the latent: min(L, 2,048) entries at 2 x 128 x (512 + 64 + 512) x 61 = 16,990,208 FLOP each,
    # x 4 for vLLM's sparse kernels' 64-head tile at 16 heads per GPU; the indexer scores all L at 999,424 FLOP
    # each (FP8, every GPU): in attention-peak equivalents x tp x BF16 / FP8 peak
    equiv = v32.tp * v32.attn_peak / 1978.9e12
    want = 4 * LATENT * np.minimum(ctx, 2048) + INDEXER * ctx * equiv
    assert np.allclose(v32.decode_attention_flops(ctx), want, rtol=1e-12)
    attn, _ = v32.decode_sums(ctx, axis=0)
    assert float(attn) == pytest.approx(float(want.sum()), rel=1e-12)
    # 8,192 tokens: 8.19 GFLOP on one GPU = 4.1 us at the FP8 peak / efficiency
    assert INDEXER * 8192 / (1978.9e12 * v32.attn_eff) == pytest.approx(
        (want[1] - 4 * LATENT * 2048) / (v32.tp * v32.attn_peak * v32.attn_eff))


@pytest.mark.parametrize("hw, tp, pad", [
    ("h200-sxm", 8, 4.0),    # 128 / 8 = 16 heads per GPU run as Hopper's 64
    ("h200-sxm", 4, 2.0),    # 32 -> 64
    ("h200-sxm", 2, 1.0),    # 64: a whole tile
    ("b200", 8, 8.0),        # Blackwell's tile of 128: 16 -> 128
    ("b200", 1, 1.0)])       # 128
def test_sparse_kernels_pay_for_the_padded_heads(hw, tp, pad):
    # vLLM's FlashMLASparseImpl pads each GPU's query heads to a multiple of 64 (SM90) or 128 (SM100) for the
    # sparse prefill kernel, and its decode kernel takes h_q 64 or 128 only: both phases pay x pad; SGLang's NSA
    # backend runs the same sparse prefill kernel, but its decode is not padded (not modelled as padded)
    h = catalog.load_hardware(hw)
    m, cal = catalog.load_model("deepseek-v3.2"), calibration_for(hw)[0]
    vllm = step_model(m, h, catalog.load_link(h.scaleup_link), cal, tp)
    sglang = step_model(m, h, catalog.load_link(h.scaleup_link), cal, tp, engine="sglang")
    assert vllm.attn_coef[0] == sglang.attn_coef[0] == pytest.approx(LATENT * pad)
    assert (vllm.decode_attn_coef or vllm.attn_coef)[0] == pytest.approx(LATENT * pad)
    assert (sglang.decode_attn_coef or sglang.attn_coef)[0] == pytest.approx(LATENT)
    # dense MLA (V3, R1) prefills decompressed on FlashAttention: no tile of heads, no padding
    v3 = step_model(catalog.load_model("deepseek-v3"), h, catalog.load_link(h.scaleup_link), cal, tp)
    assert v3.attn_coef[0] == 2 * 128 * (192 + 128) * 61 and v3.decode_attn_coef[0] == LATENT


def test_no_indexer_no_term_and_ampere_scores_in_bf16():
    assert all(c == 0 for c in _sm("deepseek-v3").indexer_coef)
    assert all(c == 0 for c in _sm("qwen3-14b", "h100-sxm", 1).indexer_coef)
    a100 = _sm("deepseek-v3.2", "a100-80g")
    # no FP8 on A100: the indexer runs at the BF16 peak, so its equivalent is x tp only
    assert a100.indexer_coef[0] == pytest.approx(INDEXER * 8)
    # CSA (V4 Flash) scores floor(t / 4) compressed entries: the closed form equals the sum
    g = next(g for g in _sm("deepseek-v4-flash").groups if g.kind == "csa")
    assert compute.indexed_prefix_sum(g, 1001) == sum(t // 4 for t in range(1, 1002))


def test_mla_decodes_in_the_latent_and_prefills_decompressed():
    v3 = _sm("deepseek-v3")
    # decode (absorbed, as vLLM's and SGLang's MLA decode kernels run it): 2 x 128 x 1,088 x 61 per entry;
    # prefill (decompressed MHA): 2 x 128 x (192 + 128) x 61
    assert LATENT == 16_990_208
    assert float(v3.decode_attention_flops(np.array([1000]))[0]) == LATENT * 1000
    assert v3.prefill_attention_flops(0, 1000) == 2 * 128 * 320 * 61 * 1000 * 1001 // 2
    attn, _ = v3.decode_sums(np.array([100, 1000]), axis=0)
    assert float(attn) == LATENT * 1100
    # a model without a latent keeps one shape for both
    assert _sm("qwen3-14b", "h100-sxm", 1).decode_attn_coef == ()
