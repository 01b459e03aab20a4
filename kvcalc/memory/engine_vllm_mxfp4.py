"""How vLLM holds MXFP4 MoE weights on a GPU without FP4 tensor cores: more bytes than the checkpoint.

vLLM loads an MXFP4 checkpoint's experts (``quant_method: mxfp4``: gpt-oss) through ``Mxfp4MoEMethod``
(vllm/model_executor/layers/quantization/mxfp4.py), whose backend depends on the GPU (``get_mxfp4_backend``):

- **Marlin** below SM90 (Ampere, Ada: ``get_device_capability()[0] < 9``, no ``triton_kernels`` there).
  ``create_weights`` pads every expert GEMM for the Marlin MoE kernel ("n % 256 == 0 and k % 128 == 0"):
  hidden_size to a multiple of 256 (``round_up(hidden_size, 256)``), the per-GPU intermediate size to a
  multiple of 128. gpt-oss (hidden and intermediate 2,880) is held as 3,072 x 2,944 at TP 1: 9.0% more expert
  bytes. Published: 65.97 GiB "Model loading took" for gpt-oss-120b on one H100 under Marlin (vLLM 0.10.1,
  vllm-project/vllm#23278, its log shows the Marlin warning) against 65.82 GiB here (60.69 GiB unpadded).
- **Triton** (OpenAI's ``triton_kernels``) on Hopper: no padding (intermediate to a multiple of 64), but
  ``process_weights_after_loading`` swizzles the values and the E8M0 scales into new tensors and deletes only
  the old values (``del layer.w13_weight``): the checkpoint's scales (1 B per 32 expert weights) stay beside
  their swizzled copy, and the expert biases are converted to FP32 (``w13_bias.to(torch.float32)``): 2 B more
  per bias. Published: 64.38 GiB for gpt-oss-120b on one H100 under Triton (vLLM 0.14.1, vllm-project/vllm#33155)
  against 64.10 GiB here.
- Blackwell's FlashInfer backends (padding both sizes to 256) and ROCm are not modelled: the checkpoint's bytes.
"""

from __future__ import annotations

import math
from typing import Optional

from kvcalc.model.schema import HardwarePreset, ModelPreset
from kvcalc.model.weights_dtype import WEIGHT_DTYPES

MXFP4_BLOCK = 32                 # elements per E8M0 scale (OCP MX spec; mxfp4_block in create_weights)
MARLIN_HIDDEN_ALIGN = 256        # round_up(hidden_size, 256): Marlin MoE's n % 256 == 0
MARLIN_INTERMEDIATE_ALIGN = 128  # round_up(intermediate_size_per_partition, 128): k % 128 == 0
MXFP4_ARCHITECTURES = ("GptOssForCausalLM",)  # checkpoints whose experts load through Mxfp4MoEMethod
# GPU generations by the name vLLM's platform reports (display_name here), as get_mxfp4_backend picks
BELOW_HOPPER_GPUS = ("A100", "L40S")          # SM80 / SM89: get_device_capability()[0] < 9
MARLIN_GPUS = BELOW_HOPPER_GPUS
# SM90: get_mxfp4_backend picks Triton where the triton_kernels package is installed, else Marlin. Assumed
# installed (not verified for GPUStack's vLLM 0.10.2 image); its own 32K gpt-oss-120b run interleaves prefill into
# decode (TPOT 24 ms, median ITL 7.3 ms), so its pool held 2+ requests of 32K, which Marlin's 65.8 GiB would not leave
TRITON_GPUS = ("H100", "H200", "H800")


def backend(hw: HardwarePreset) -> Optional[str]:
    """vLLM's MXFP4 MoE backend on ``hw``: "marlin", "triton", or None (not modelled: the checkpoint's bytes)."""
    name = hw.display_name.upper()
    if hw.fp4_dense_tflops:
        return None
    if any(g in name for g in MARLIN_GPUS):
        return "marlin"
    if any(g in name for g in TRITON_GPUS):
        return "triton"
    return None


def _round_up(x: int, align: int) -> int:
    return -(-x // align) * align


def extra_bytes(model: ModelPreset, hw: HardwarePreset, tp: int) -> Optional[tuple[float, str]]:
    """(bytes one GPU of a TP group holds beyond model weights / tp [B], how) for an MXFP4 MoE checkpoint in
    vLLM on ``hw``; None where nothing is added (another format or model, or a backend not modelled)."""
    mxfp4 = WEIGHT_DTYPES["mxfp4"]
    if (model.architecture not in MXFP4_ARCHITECTURES or model.moe_expert_weight_bytes_per_param != mxfp4
            or not model.moe_experts or not model.hidden_size or not model.moe_expert_params_b):
        return None
    kind = backend(hw)
    if kind is None:
        return None
    layers = sum(g.layers for g in model.layer_groups if not g.mtp)
    hidden, experts = model.hidden_size, model.moe_experts
    expert_params = model.moe_expert_params_b * 1e9
    # gate + up + down of each expert: 3 x hidden x intermediate weights (gpt-oss: 114.66e9 / (128 x 36 x 3 x
    # 2,880) = 2,880)
    inter = expert_params / (experts * layers * 3 * hidden)
    if abs(inter - round(inter)) > 1e-6:
        return None
    inter_tp = math.ceil(round(inter) / tp)  # the intermediate size shards over TP (column-parallel w13)
    if kind == "marlin":
        h_pad = _round_up(hidden, MARLIN_HIDDEN_ALIGN)
        i_pad = _round_up(inter_tp, MARLIN_INTERMEDIATE_ALIGN)
        held = experts * layers * 3 * h_pad * i_pad * mxfp4
        extra = held - expert_params / tp * mxfp4
        return extra, (f"vLLM's Marlin MXFP4 MoE pads each expert to hidden {h_pad:,} x intermediate {i_pad:,} "
                       f"per GPU (from {hidden:,} x {inter_tp:,})")
    scales = expert_params / tp / MXFP4_BLOCK                      # 1 B E8M0 scale per 32 weights, kept twice
    biases = experts * layers * (2 * inter_tp + hidden) * (4 - 2)  # w13 (2 x I) + w2 (H) biases, BF16 -> FP32
    return scales + biases, ("vLLM's Triton MXFP4 MoE keeps the checkpoint's expert scales beside their "
                             "swizzled copy and its expert biases in FP32")
