"""How many kernels one layer launches per engine step (the step model's kernel floor: layers x kernels per
layer x the calibrated kernel_us, serve/step_time.py), counted from the layer's structure in the engines'
model code."""

from __future__ import annotations

# the kernels one layer launches per step in vLLM/SGLang (their model code: vllm/model_executor/models/llama.py,
# qwen3.py, deepseek_v2.py, gpt_oss.py; fused elementwise ops counted once), each paying the calibrated kernel_us
KERNELS = {
    "attention": 5,   # input norm, QKV GEMM, RoPE + KV-cache write, attention, O GEMM
    "mla": 10,        # input norm, fused q_a/kv_a GEMM, q_a and kv_a norms, q_b GEMM, RoPE + cache write,
                      # W_UK bmm, MLA attention, W_UV bmm, O GEMM (deepseek_v2.py, MLA decode in the latent)
    "indexer": 4,     # DSA/CSA lightning indexer: its key GEMM, weights GEMM, fp8_mqa_logits, top-k
    "mlp": 4,         # post-attention norm, gate_up GEMM, activation, down GEMM
    "moe": 8,         # post-attention norm, router GEMM, top-k, align/sort, grouped gate_up, activation,
                      # grouped down, combine (fused_moe)
    "shared_expert": 4,  # an MoE layer's shared expert, a dense MLP beside the routed ones (deepseek_v2.py
                         # DeepseekV2MoE.shared_experts = DeepseekV2MLP): gate_up GEMM, activation, down GEMM, and
                         # the add of its output to the routed experts'
}
# GEMMs with FP8 weights per block: each has one activation-quantisation kernel before it (per-token-group FP8)
FP8_GEMMS = {"attention": 2, "mla": 3, "mlp": 2, "moe": 2, "shared_expert": 2}


def kernels_per_layer(groups, moe: bool, fp8: bool, shared: bool = False) -> float:
    """The kernels one layer launches per step, the mean over ``groups`` weighted by their layers: its attention
    block (MLA's 10 where the group is MLA or DSA, + 4 for a sparse indexer, else 5; a linear/Mamba mixer counts
    as an attention block) + its MLP block (MoE 8, + 4 with a shared expert; dense 4; every layer of an MoE model
    counted as MoE: DeepSeek V3's 3 dense layers of 61 are not told apart) + one activation-quantisation kernel
    per FP8 GEMM [kernels]."""
    total = layers = 0
    mlp = "moe" if moe else "mlp"
    for g in groups:
        attn = "mla" if g.kind in ("mla", "dsa") else "attention"
        n = KERNELS[attn] + KERNELS[mlp] + (KERNELS["indexer"] if g.indexer_heads else 0)
        if moe and shared:
            n += KERNELS["shared_expert"] + (FP8_GEMMS["shared_expert"] if fp8 else 0)
        if fp8:
            n += FP8_GEMMS[attn] + FP8_GEMMS[mlp]
        total += n * g.layers
        layers += g.layers
    return total / layers if layers else 0.0
