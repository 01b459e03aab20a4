"""``--weights-dtype``: a model's linear layers stored in another format (the embedding and LM head stay BF16).

Bytes per parameter, scales included:
  bf16 2; fp8 1 (E4M3; block scales of 128 x 128 add 4 / 16,384 B, left out); int8 1;
  int4 0.5 + 2 / 128 (one BF16 scale per group of 128, GPTQ/AWQ's usual group) = 0.515625;
  mxfp4 0.5 + 1 / 32 (one E8M0 scale per 32 elements, OCP MX spec) = 0.53125;
  nvfp4 0.5 + 1 / 16 (one FP8 scale per 16 elements) = 0.5625 (reference/engines.md's NVFP4 layout).
What the GPU computes in is not the storage format: :func:`math_dtype` says which peak applies.
"""

from __future__ import annotations

from dataclasses import replace

from kvcalc.model.schema import ModelPreset
from kvcalc.out import units

WEIGHT_DTYPES = {"bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2 / 128, "mxfp4": 0.5 + 1 / 32,
                 "nvfp4": 0.5 + 1 / 16}
EMBEDDING_BYTES = 2.0  # the embedding table and LM head are not quantised by these formats


def with_weights_dtype(model: ModelPreset, dtype: str | None) -> ModelPreset:
    """``model`` with every parameter but the embedding and LM head stored as ``dtype`` [B/param from
    WEIGHT_DTYPES]; None = unchanged. The routed experts take the same format."""
    if dtype is None:
        return model
    if dtype not in WEIGHT_DTYPES:
        raise ValueError(f"unknown weights dtype {dtype!r}")
    per = WEIGHT_DTYPES[dtype]
    emb = 0.0
    if model.vocab_size and model.hidden_size:
        emb = (1 if model.tie_word_embeddings else 2) * model.vocab_size * model.hidden_size
    total = model.params_total
    weight_bytes = emb * EMBEDDING_BYTES + (total - emb) * per
    return replace(model, weight_bytes_per_param=weight_bytes / total, weights_gb=units.bytes_to_gb(weight_bytes),
                   moe_expert_weight_bytes_per_param=per if model.moe_experts else None,
                   display_name=f"{model.display_name} [{dtype} weights]")


def storage_dtype(model: ModelPreset) -> str:
    """The format most of the model's linear weights are stored in, read from its bytes per parameter: the
    experts' bytes where given (MXFP4 experts beside BF16 attention), else the mean: >= 2 bf16, >= 1 fp8,
    else a 4-bit format."""
    per = model.moe_expert_weight_bytes_per_param or model.mean_weight_bytes_per_param
    if per >= 2:
        return "bf16"
    return "fp8" if per >= 1 else "fp4"


def math_dtype(storage: str, has_fp8: bool, has_fp4: bool) -> str:
    """The dtype the tensor cores run a matmul in for weights stored as ``storage``: FP8 weights run FP8 math
    only where the GPU has FP8 tensor cores (Hopper, Blackwell; Ampere dequantises to BF16: the Marlin W8A16
    path); 4-bit formats (MXFP4, NVFP4) run FP4 math only on Blackwell (Hopper and Ampere dequantise to BF16:
    W4A16); int8/int4 are weight-only (BF16 math)."""
    if storage == "fp8":
        return "fp8" if has_fp8 else "bf16"
    if storage in ("fp4", "mxfp4", "nvfp4"):
        return "fp4" if has_fp4 else "bf16"
    return "bf16"
