"""Expert parallelism (vLLM's ``--enable-expert-parallel``) with data-parallel attention, as terms of the step.

A deployment of ``tp`` x ``dp`` GPUs with EP (``--tensor-parallel-size tp --data-parallel-size dp
--enable-expert-parallel``): the routed experts shard over all ``ep = tp x dp`` GPUs (E / ep whole experts
each, none split), while everything else (attention, dense MLPs, embeddings) is replicated per DP rank and
sharded over its ``tp`` GPUs. Each DP rank schedules its own batch (DP attention); the MoE layers of all ranks
run in lockstep, so each layer's experts see the tokens of every rank: ``dp`` x the rank's step tokens T (the
requests are dealt to the ranks evenly, so the ranks' batches are taken as alike; a rank with less work pads
its step, which vLLM does with dummy batches).

Per GPU, per step:

- expert weights read = expert bytes / ep x (1 - (1 - k/E)^(dp T)) (the experts the whole step touches, each
  GPU holding 1 / ep of them); TP alone over the rank's tp GPUs reads expert bytes / tp x (1 - (1 - k/E)^T),
  and since the touched fraction is concave with 0 at 0, frac(dp T) <= dp frac(T): EP never reads more;
- expert FLOPs = 2 x active expert params x dp T / ep = the same 2 x active x T / tp as TP, but each expert's
  GEMM has dp T k / D(dp T) rows and a whole expert's width (moe intermediate, not / tp);
- all-to-all, only when the experts span more GPUs than one rank (dp > 1; with dp = 1 every TP rank holds the
  step's tokens, computes its experts' share and the usual all-reduce sums them): two per MoE layer (dispatch
  and combine), each latency + T x k x hidden x 2 B (BF16 activations) x (ep - 1) / ep / link bandwidth, over
  the scale-up link while ep fits in one node of NODE_GPUS, else the scale-out link (SCALEOUT_LINK). MoE layers
  are taken as every layer (the presets do not list which are dense: DeepSeek V3's 3 dense of 61 make it ~5%
  high there).
"""

from __future__ import annotations

from dataclasses import replace

ACTIVATION_BYTES = 2      # BF16 hidden states dispatched and combined
A2A_PER_MOE_LAYER = 2     # dispatch + combine
NODE_GPUS = 8             # GPUs on one NVLink domain of an HGX/DGX board
SCALEOUT_LINK = "ib-ndr400"  # DGX H100/B200: one ConnectX-7 NDR400 port per GPU (the preset's source)


def all_to_all_s(tokens, top_k: int, hidden: int, ep: int, moe_layers: int, latency_s: float,
                 bytes_per_s: float):
    """Both all-to-alls of every MoE layer for a step of ``tokens`` tokens on one rank [s]:
    A2A_PER_MOE_LAYER x moe_layers x (latency + tokens x top_k x hidden x 2 B x (ep - 1) / ep / bandwidth);
    0 at ep <= 1. Elementwise over numpy ``tokens``."""
    if ep <= 1:
        return tokens * 0.0
    moved = tokens * top_k * hidden * ACTIVATION_BYTES * (ep - 1) / ep
    return A2A_PER_MOE_LAYER * moe_layers * (latency_s + moved / bytes_per_s)


def a2a_link(hw, ep: int):
    """The link the all-to-all crosses (LinkPreset): the hardware's scale-up link within a node (its host link,
    PCIe, where it has none, as on L40S), else SCALEOUT_LINK."""
    from kvcalc.model import catalog

    if ep > NODE_GPUS:
        return catalog.load_link(SCALEOUT_LINK)
    return catalog.load_link(hw.scaleup_link or hw.host_link)


def expert_weight_bytes(model) -> float:
    """All routed experts' weight bytes (0 without the expert fields) [B]."""
    from kvcalc.out import units

    if not model.moe_experts:
        return 0.0
    bpp = model.moe_expert_weight_bytes_per_param or model.mean_weight_bytes_per_param
    return units.billions_to_count(model.moe_expert_params_b) * bpp


def weights_per_gpu(model, tp: int, dp: int) -> float:
    """Weights one GPU holds with EP over tp x dp GPUs: the rest / tp + the experts / (tp x dp) [B]."""
    experts = expert_weight_bytes(model)
    return (model.weight_bytes - experts) / tp + experts / (tp * dp)


def check_ep(model, model_name: str) -> None:
    """Expert parallelism needs the preset's expert fields (moe_experts, moe_experts_per_token,
    moe_expert_params_b); InputError otherwise."""
    from kvcalc.out.errors import InputError

    if not model.moe_experts:
        raise InputError(f"--enable-expert-parallel: {model_name} has no routed experts in its preset "
                         "(moe_experts, moe_experts_per_token, moe_expert_params_b)")


def with_expert_parallel(sm, model, hw, cal, tp: int, dp: int):
    """The StepModel ``sm`` (one DP rank of ``tp`` GPUs) with EP over tp x dp GPUs (module docstring)."""
    from kvcalc.out import units

    ep = tp * dp
    link = a2a_link(hw, ep) if dp > 1 else None  # dp = 1: no all-to-all (module docstring)
    experts = model.moe_experts
    hidden = model.hidden_size or 0
    params = units.billions_to_count(model.moe_expert_params_b)
    n = params / (experts * sm.layers * 3 * hidden) if hidden and sm.layers else 1e9  # a whole expert's width
    return replace(sm, ep=ep, moe_token_scale=float(dp), expert_width=n / (n + cal.matmul_half_width),
                   a2a_latency_s=link.latency_s if link else 0.0,
                   a2a_bytes_per_s=link.bandwidth_bytes_per_s() if link else 1.0, a2a_ranks=ep if link else 1)
