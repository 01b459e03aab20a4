"""KV cache formats of full-attention layers with their exact bytes, scales included.

A format stores each head's K (or V) vector of ``dim`` elements for one token as a *row*; the bytes of one row:

- ``bf16``/``fp16``/``fp32``/``fp8``/``int8``/``int4``: dim x element bytes (the plain dtypes; an FP8 per-tensor
  scale is one FP32 number per layer and tensor, not per token: 0 B/token).
- ``fp8-per-token-head``: dim x 1 B + one FP32 scale (4 B) per head per token, for K and for V
  (vLLM docs, Quantized KV Cache: "k/v_scale = [num_kv_heads]" per-attention-head scales; the per-token-head
  variant stores one FP32 scale beside each (token, head) row, as reference/engines.md says).
- ``nvfp4``: dim x 0.5 B (E2M1) + one FP8 (E4M3) scale per 16-element block (dim / 16 B) + a per-tensor FP32
  scale (0 B/token); Llama-3-70B: 163,840 elements/token -> 81,920 + 10,240 = 92,160 B (reference/engines.md,
  NVIDIA NVFP4 format: 16-element micro-blocks with E4M3 scales).
- ``int4-grouped``: dim x 0.5 B + an FP16 scale and an FP16 zero (4 B) per group of G elements (dim / G x 4 B);
  keys are grouped per channel over G tokens and values per token over G channels (KIVI, arXiv 2402.02750),
  so both cost 4 / G B per element once a key group is full.
- ``kivi``: ``int4-grouped`` plus a residual window of the R most recent tokens kept in BF16 (KIVI's defaults
  G = 32, R = 128): bytes(L) = L x int4 row + min(L, R) x (bf16 row - int4 row).
"""

from __future__ import annotations

from kvcalc.model.schema_types import KV_DTYPE_BYTES, KV_FORMATS, KV_QUANTISED_FORMATS
from kvcalc.out.errors import InputError

PLAIN = tuple(KV_DTYPE_BYTES)
QUANTISED = KV_QUANTISED_FORMATS
FORMATS = KV_FORMATS  # one list: presets (schema KvDtype), --kv-dtype, the sweep's kv-dtype axis
DEFAULT_GROUP_SIZE = 32       # KIVI's group size G
DEFAULT_RESIDUAL_TOKENS = 128  # KIVI's residual length R
FP32_SCALE_BYTES = 4
NVFP4_BLOCK = 16

SOURCES = {
    "fp8": "per-tensor FP32 scale per layer (vLLM docs, Quantized KV Cache)",
    "fp8-per-token-head": "one FP32 scale per (token, head) row of K and of V (vLLM docs, Quantized KV Cache; "
                          "reference/engines.md)",
    "nvfp4": "E2M1 elements, one E4M3 scale per 16 elements (NVIDIA NVFP4; reference/engines.md)",
    "int4-grouped": "INT4 + FP16 scale and zero per group; keys per channel, values per token "
                    "(KIVI, arXiv 2402.02750)",
    "kivi": "KIVI (arXiv 2402.02750): grouped INT4 plus the most recent R tokens in BF16",
}


def check_format(fmt: str, dim: int, group_size: int = DEFAULT_GROUP_SIZE) -> None:
    """Raise InputError (naming --kv-dtype / --kv-group-size) when ``fmt`` cannot store rows of ``dim``
    elements: NVFP4 blocks and INT4 groups must divide the head dim."""
    if fmt not in FORMATS:
        raise InputError(f"--kv-dtype: {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt == "nvfp4" and dim % NVFP4_BLOCK:
        raise InputError(f"--kv-dtype nvfp4: needs a head dim that is a multiple of {NVFP4_BLOCK}, got {dim}")
    if fmt in ("int4-grouped", "kivi") and (group_size <= 0 or dim % group_size):
        raise InputError(f"--kv-group-size: {group_size} does not divide the head dim {dim} ({fmt})")


def row_bytes(fmt: str, dim: int, group_size: int = DEFAULT_GROUP_SIZE) -> float:
    """Bytes of one head's K or V vector of ``dim`` elements for one token, scales included [B]."""
    check_format(fmt, dim, group_size)
    if fmt in KV_DTYPE_BYTES:
        return dim * KV_DTYPE_BYTES[fmt]
    if fmt == "fp8-per-token-head":
        return dim * 1 + FP32_SCALE_BYTES
    if fmt == "nvfp4":
        return dim * 0.5 + dim // NVFP4_BLOCK * 1
    return dim * 0.5 + dim // group_size * 4  # int4-grouped, kivi: FP16 scale + FP16 zero per group


def residual_extra_bytes(fmt: str, dim: int, group_size: int = DEFAULT_GROUP_SIZE) -> float:
    """Extra bytes of a row kept in BF16 inside KIVI's residual window, over its INT4 row [B]; 0 otherwise."""
    if fmt != "kivi":
        return 0.0
    return dim * KV_DTYPE_BYTES["bf16"] - row_bytes(fmt, dim, group_size)


def row_layout(fmt: str, dim: int, group_size: int = DEFAULT_GROUP_SIZE) -> str:
    """The byte layout of one row, with the numbers substituted, e.g. '128 x 1 B + 4 B FP32 scale = 132 B'."""
    total = row_bytes(fmt, dim, group_size)
    if fmt in KV_DTYPE_BYTES:
        body = f"{dim} x {KV_DTYPE_BYTES[fmt]:g} B"
        if fmt == "fp8":
            body += " (+ one FP32 scale per tensor, 0 B/token)"
    elif fmt == "fp8-per-token-head":
        body = f"{dim} x 1 B + 4 B FP32 scale"
    elif fmt == "nvfp4":
        body = f"{dim} x 0.5 B + {dim // NVFP4_BLOCK} blocks of {NVFP4_BLOCK} x 1 B E4M3 scale"
    else:
        body = f"{dim} x 0.5 B + {dim // group_size} groups of {group_size} x (2 B scale + 2 B zero)"
    text = f"{body} = {total:g} B per head row"
    if fmt == "kivi":
        text += f"; the last R tokens in BF16: + {residual_extra_bytes(fmt, dim, group_size):g} B per row"
    return text
