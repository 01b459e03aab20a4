"""Per layer-group KV layouts: entries stored and read as a function of context length, entry bytes.

A layer group is resolved from a preset group and the user's layout options into a :class:`GroupLayout`:
stored entries per layer = dense part (all L tokens, min(L, W) for a sliding window, ((L - 1) mod C) + 1 for
chunked local attention) + compressed part (floor(L / ratio)); an indexer key is kept alongside each indexed
entry; a fixed per-request state (V4's compressor tail, linear-attention and Mamba states) does not grow with L.
Source of every layout:
``reference/kv-formulas.md`` (vLLM kv_cache_interface.py, FlashMLA, DeepSeek inference code).

Functions over token counts accept Python ints or numpy integer arrays (sweeps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from kvcalc.model import kv_formats
from kvcalc.model.schema import (KV_DTYPE_BYTES, CompressedGroup, FullGroup, LinearGroup, MambaGroup, MlaGroup,
                                 ModelPreset)


# MLA latent layouts [B per layer per token], kv_lora_rank r and rope dim d (DeepSeek V3: r=512, d=64).
def mla_entry_bytes(layout: str, kv_lora_rank: int, rope_head_dim: int) -> int:
    """Bytes of one MLA cache entry per layer [B].

    bf16: (r + d) x 2 (= 1,152 for V3); fp8: (r + d) x 1 (= 576);
    fp8-flashmla: r fp8 + r/128 fp32 scales + d bf16 (= 512 + 16 + 128 = 656).
    """
    if layout == "bf16":
        return (kv_lora_rank + rope_head_dim) * 2
    if layout == "fp8":
        return kv_lora_rank + rope_head_dim
    if layout == "fp8-flashmla":
        return kv_lora_rank + (kv_lora_rank // 128) * 4 + rope_head_dim * 2
    raise ValueError(f"unknown MLA layout {layout!r}")


def indexer_key_bytes(dtype: str, head_dim: int) -> int:
    """Bytes of one indexer key per layer [B]: fp8 = head_dim + 4 (fp32 scale) = 132 for 128;
    fp4 = head_dim / 2 packed + 4 scales = 68 for 128."""
    if dtype == "fp8":
        return head_dim + 4
    if dtype == "fp4":
        return head_dim // 2 + 4
    raise ValueError(f"unknown indexer dtype {dtype!r}")


def full_entry_bytes(kv_heads: int, head_dim: int, head_dim_v: int, dtype: str, k_eq_v: bool = False,
                     group_size: int = kv_formats.DEFAULT_GROUP_SIZE) -> float:
    """K and V of one token in one full-attention layer [B]: kv_heads x (K row + V row), a row being
    d x dtype bytes for plain dtypes, plus its scales for quantised formats (kv_formats.row_bytes);
    kv_heads x K row when K and V are one tensor (``k_eq_v``, Gemma 4)."""
    k = kv_formats.row_bytes(dtype, head_dim, group_size)
    return kv_heads * (k if k_eq_v else k + kv_formats.row_bytes(dtype, head_dim_v, group_size))


# Conv states stay in the activation dtype (vLLM mamba_cache_dtype "auto" = the model's bf16) [B/element].
CONV_STATE_BYTES = 2.0


def linear_state_bytes(grp: LinearGroup, state_dtype: str) -> float:
    """Gated DeltaNet state of one layer for one request [B] (vLLM gated_delta_net_state_shape):
    conv (K - 1) x (2 hk dk + hv dv) x 2 B + recurrent hv x dk x dv x state dtype bytes.
    Qwen3-Next (hk 16, hv 32, dk = dv = 128, K 4, bf16): 3 x 8,192 x 2 + 524,288 x 2 = 1,097,728 B."""
    conv = (grp.conv_kernel - 1) * (2 * grp.key_heads * grp.key_head_dim + grp.value_heads * grp.value_head_dim)
    recurrent = grp.value_heads * grp.key_head_dim * grp.value_head_dim
    return conv * CONV_STATE_BYTES + recurrent * KV_DTYPE_BYTES[state_dtype]


def mamba_state_bytes(grp: MambaGroup, state_dtype: str) -> float:
    """Mamba-2 state of one layer for one request [B] (vLLM mamba2_state_shape at TP 1):
    conv (K - 1) x (H P + 2 G N) x 2 B + SSM H x P x N x state dtype bytes."""
    conv = (grp.conv_kernel - 1) * (grp.heads * grp.head_dim + 2 * grp.groups * grp.state_size)
    ssm = grp.heads * grp.head_dim * grp.state_size
    return conv * CONV_STATE_BYTES + ssm * KV_DTYPE_BYTES[state_dtype]


def linear_flops_per_token(grp: LinearGroup) -> float:
    """Recurrent FLOPs of one token in one Gated DeltaNet layer [FLOP], per value head (dk x dv state S):
    decay S (dk dv) + S k (2 dk dv) + rank-1 update (2 dk dv) + readout S q (2 dk dv) = 7 dk dv,
    plus the causal conv, 2 x K x conv channels. Projections are in the matmul term (2 x params)."""
    channels = 2 * grp.key_heads * grp.key_head_dim + grp.value_heads * grp.value_head_dim
    return 7 * grp.value_heads * grp.key_head_dim * grp.value_head_dim + 2 * grp.conv_kernel * channels


def mamba_flops_per_token(grp: MambaGroup) -> float:
    """Recurrent FLOPs of one token in one Mamba-2 layer [FLOP], per head (P x N state h):
    decay h (P N) + dt x B outer product added (2 P N) + readout C h (2 P N) = 5 P N,
    plus the causal conv, 2 x K x (H P + 2 G N) channels."""
    channels = grp.heads * grp.head_dim + 2 * grp.groups * grp.state_size
    return 5 * grp.heads * grp.head_dim * grp.state_size + 2 * grp.conv_kernel * channels


@dataclass(frozen=True)
class KvOptions:
    """Layout choices a user can make; None = the preset's default."""

    kv_dtype: Optional[str] = None
    mla_layout: Optional[str] = None
    indexer_dtype: Optional[str] = None
    mtp: bool = False
    state_dtype: Optional[str] = None   # recurrent state of linear/Mamba layers
    kv_group_size: int = kv_formats.DEFAULT_GROUP_SIZE          # int4-grouped / kivi group of G elements
    kv_residual_tokens: int = kv_formats.DEFAULT_RESIDUAL_TOKENS  # kivi: recent tokens kept in BF16


@dataclass(frozen=True)
class GroupLayout:
    """One resolved layer group. Entry sizes are per layer [B]."""

    name: str
    kind: str                     # full | sliding | chunked | mla | dsa | csa | hca | swa | linear | mamba | flat
    layers: int
    window_tokens: Optional[int]  # dense entries kept: min(L, W); None = all L; 0 = none
    ratio: Optional[int]          # compressed entries: floor(L / ratio); None = no compressed part
    entry_bytes: float            # per stored entry per layer [B]
    indexer_bytes: float          # per indexed entry per layer [B]; 0 = no indexer
    indexed: Optional[str]        # which entries carry an indexer key: "dense" | "compressed" | None
    top_k: Optional[int]          # sparse read: entries read per decode step from the indexed part
    state_bytes_per_layer: int    # fixed per request [B]
    kv_heads: Optional[int]       # shards under tensor parallelism; None = one latent, replicated
    layout: str                   # human label of the entry layout, e.g. "bf16", "fp8-flashmla 656 B"
    chunk_tokens: Optional[int] = None       # chunked local attention: ((L - 1) mod C) + 1 dense entries
    q_heads: Optional[int] = None            # this group's attention FLOPs shape; None = the model's
    qk_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    recurrent_flops_per_token: float = 0.0   # per layer per token (linear attention, Mamba) [FLOP]
    residual_tokens: int = 0        # KIVI: the most recent min(L, R) tokens are kept in BF16 ...
    residual_extra_bytes: float = 0.0  # ... costing this much more per layer per token than the INT4 entry [B]
    indexer_heads: int = 0          # the sparse indexer's query heads and key width (DSA, CSA): it scores every
    indexer_head_dim: int = 0       # indexed entry with heads x head_dim multiply-adds per query per layer


RECURRENT_KINDS = ("linear", "mamba")


def _minimum(tokens, cap: int):
    """min(tokens, cap) for an int or a numpy array (numpy is imported only when an array is passed)."""
    if isinstance(tokens, int):
        return min(tokens, cap)
    import numpy as np

    return np.minimum(tokens, cap)


def dense_entries(g: GroupLayout, tokens):
    """Dense (uncompressed) entries stored per layer for a context of ``tokens`` [entries]."""
    if g.chunk_tokens is not None:
        return _minimum(tokens, (tokens - 1) % g.chunk_tokens + 1)  # 0 at L = 0
    if g.window_tokens is None:
        return tokens
    return _minimum(tokens, g.window_tokens)


def compressed_entries(g: GroupLayout, tokens):
    """Compressed entries stored per layer: floor(L / ratio) [entries]."""
    if g.ratio is None:
        return tokens * 0
    return tokens // g.ratio


def indexed_entries(g: GroupLayout, tokens):
    """Entries that carry an indexer key per layer [entries]."""
    if g.indexed == "dense":
        return dense_entries(g, tokens)
    if g.indexed == "compressed":
        return compressed_entries(g, tokens)
    return tokens * 0


def stored_bytes_per_layer(g: GroupLayout, tokens):
    """KV bytes stored per layer for one request of ``tokens`` tokens, excluding fixed state [B]."""
    entries = dense_entries(g, tokens) + compressed_entries(g, tokens)
    return entries * g.entry_bytes + indexed_entries(g, tokens) * g.indexer_bytes + residual_bytes(g, tokens)


def residual_bytes(g: GroupLayout, tokens):
    """Extra bytes per layer of KIVI's full-precision residual window: min(L, R) x extra [B]; 0 without one."""
    if not g.residual_tokens:
        return tokens * 0
    return _minimum(dense_entries(g, tokens), g.residual_tokens) * g.residual_extra_bytes


def stored_bytes(g: GroupLayout, tokens):
    """KV bytes stored by the whole group for one request, excluding fixed state [B]."""
    return g.layers * stored_bytes_per_layer(g, tokens)


def state_bytes(g: GroupLayout) -> int:
    """Fixed per-request state of the group (compressor tails) [B]."""
    return g.layers * g.state_bytes_per_layer


def read_bytes_per_step(g: GroupLayout, tokens):
    """KV bytes one decode step reads from this group at context ``tokens`` [B].

    Dense attention reads every stored entry. A sparse group (DSA, CSA) scans every indexer key, then
    reads only top-k of the indexed entries (plus the window's dense entries for CSA). A recurrent group
    (linear attention, Mamba) has no entries: each step reads (and rewrites) its whole fixed state.
    """
    if g.kind in RECURRENT_KINDS:
        return 0 * tokens + state_bytes(g)  # same type and shape as tokens (int or array)
    dense = dense_entries(g, tokens)
    comp = compressed_entries(g, tokens)
    if g.top_k is None:
        entries = dense + comp
    elif g.indexed == "dense":
        entries = _minimum(dense, g.top_k) + comp
    else:
        entries = dense + _minimum(comp, g.top_k)
    return g.layers * (entries * g.entry_bytes + indexed_entries(g, tokens) * g.indexer_bytes
                       + residual_bytes(g, tokens))


def long_context_bytes_per_token(g: GroupLayout) -> float:
    """Growth of stored bytes per extra token once every window is full [B/token]."""
    per_layer = 0.0
    if g.window_tokens is None and g.chunk_tokens is None:
        per_layer += g.entry_bytes + (g.indexer_bytes if g.indexed == "dense" else 0)
    if g.ratio is not None:
        per_layer += (g.entry_bytes + (g.indexer_bytes if g.indexed == "compressed" else 0)) / g.ratio
    return g.layers * per_layer


def per_gpu_share(g: GroupLayout, tp: int) -> float:
    """Fraction of the group's KV that one tensor-parallel rank stores [0..1].

    Full attention shards by KV head: each rank holds ceil(kv_heads / tp) heads (replicated once tp > kv_heads);
    linear-attention and Mamba states shard the same way by their (value) heads, as vLLM's state shapes divide
    them by the TP size. A single latent head (MLA, V4) is replicated on every rank.
    """
    if g.kv_heads is None:
        return 1.0
    return -(-g.kv_heads // tp) / g.kv_heads


def _full(grp: FullGroup, opts: KvOptions, model: ModelPreset) -> GroupLayout:
    dtype = opts.kv_dtype or grp.kv_dtype or model.kv_dtype
    hv = grp.head_dim_v or grp.head_dim
    kind = "chunked" if grp.chunk_tokens else ("sliding" if grp.window_tokens else "full")
    dims = f"{grp.head_dim}, K = V" if grp.k_eq_v else f"{grp.head_dim} + {hv}"
    gs = opts.kv_group_size
    residual = opts.kv_residual_tokens if dtype == "kivi" else 0
    extra = grp.kv_heads * (kv_formats.residual_extra_bytes(dtype, grp.head_dim, gs)
                            + (0 if grp.k_eq_v else kv_formats.residual_extra_bytes(dtype, hv, gs)))
    return GroupLayout(
        name=grp.name, kind=kind, layers=grp.layers,
        window_tokens=grp.window_tokens, ratio=None,
        entry_bytes=full_entry_bytes(grp.kv_heads, grp.head_dim, hv, dtype, grp.k_eq_v, gs),
        indexer_bytes=0, indexed=None, top_k=None, state_bytes_per_layer=0, kv_heads=grp.kv_heads,
        layout=f"{dtype}, {grp.kv_heads} KV heads x ({dims})", chunk_tokens=grp.chunk_tokens,
        q_heads=grp.q_heads, qk_head_dim=grp.head_dim if grp.q_heads else None,
        v_head_dim=hv if grp.q_heads else None, residual_tokens=residual,
        residual_extra_bytes=extra if residual else 0.0)


def _state_group(name: str, kind: str, layers: int, heads: int, state: float, flops: float, label: str):
    """A group that stores no per-token entries, only a fixed state per request, sharded by ``heads``."""
    return GroupLayout(
        name=name, kind=kind, layers=layers, window_tokens=0, ratio=None, entry_bytes=0, indexer_bytes=0,
        indexed=None, top_k=None, state_bytes_per_layer=state, kv_heads=heads, layout=label,
        recurrent_flops_per_token=flops)


def _linear(grp: LinearGroup, opts: KvOptions, model: ModelPreset) -> GroupLayout:
    dtype = opts.state_dtype or model.state_dtype
    return _state_group(grp.name, "linear", grp.layers, grp.value_heads, linear_state_bytes(grp, dtype),
                        linear_flops_per_token(grp),
                        f"state {dtype}: {grp.value_heads} x {grp.key_head_dim} x {grp.value_head_dim} + conv")


def _mamba(grp: MambaGroup, opts: KvOptions, model: ModelPreset) -> GroupLayout:
    dtype = opts.state_dtype or model.state_dtype
    return _state_group(grp.name, "mamba", grp.layers, grp.heads, mamba_state_bytes(grp, dtype),
                        mamba_flops_per_token(grp),
                        f"state {dtype}: {grp.heads} x {grp.head_dim} x {grp.state_size} + conv")


def _mla(grp: MlaGroup, opts: KvOptions, model: ModelPreset) -> GroupLayout:
    layout = opts.mla_layout or model.mla_layout
    entry = mla_entry_bytes(layout, grp.kv_lora_rank, grp.rope_head_dim)
    idx = grp.indexer
    idtype = opts.indexer_dtype or model.indexer_dtype
    return GroupLayout(
        name=grp.name, kind="dsa" if idx else "mla", layers=grp.layers, window_tokens=None, ratio=None,
        entry_bytes=entry, indexer_bytes=indexer_key_bytes(idtype, idx.head_dim) if idx else 0,
        indexed="dense" if idx else None, top_k=idx.top_k if idx else None, state_bytes_per_layer=0,
        kv_heads=None, layout=f"{layout} {entry} B" + (f" + {idtype} indexer" if idx else ""),
        indexer_heads=idx.heads if idx else 0, indexer_head_dim=idx.head_dim if idx else 0)


def _compressed(grp: CompressedGroup, opts: KvOptions, model: ModelPreset) -> GroupLayout:
    idx = grp.indexer
    idtype = opts.indexer_dtype or model.indexer_dtype
    if grp.ratio is None:
        kind = "swa"
    else:
        kind = "csa" if idx else "hca"
    return GroupLayout(
        name=grp.name, kind=kind, layers=grp.layers, window_tokens=grp.window_tokens, ratio=grp.ratio,
        entry_bytes=grp.entry_bytes, indexer_bytes=indexer_key_bytes(idtype, idx.head_dim) if idx else 0,
        indexed="compressed" if idx else None, top_k=idx.top_k if idx else None,
        state_bytes_per_layer=grp.state_bytes_per_layer, kv_heads=None,
        layout=f"{grp.entry_bytes} B" + (f" + {idtype} indexer" if idx else ""),
        indexer_heads=idx.heads if idx else 0, indexer_head_dim=idx.head_dim if idx else 0)


def _flat(model: ModelPreset) -> GroupLayout:
    return GroupLayout(
        name="as stated", kind="flat", layers=1, window_tokens=None, ratio=None,
        entry_bytes=model.as_stated_kv_bytes_per_token, indexer_bytes=0, indexed=None, top_k=None,
        state_bytes_per_layer=0, kv_heads=None, layout=f"{model.as_stated_kv_bytes_per_token:g} B/token flat")


_RESOLVERS = {"full": _full, "mla": _mla, "compressed": _compressed, "linear": _linear, "mamba": _mamba}


def resolve_groups(model: ModelPreset, opts: KvOptions = KvOptions()) -> list[GroupLayout]:
    """The model's layer groups with the user's layout options applied (MTP groups only with opts.mtp)."""
    if model.as_stated_kv_bytes_per_token is not None:
        return [_flat(model)]
    return [_RESOLVERS[g.kind](g, opts, model) for g in model.layer_groups if opts.mtp or not g.mtp]
