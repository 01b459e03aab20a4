"""Per layer-group KV layouts: entries stored and read as a function of context length, entry bytes.

A layer group is resolved from a preset group and the user's layout options into a :class:`GroupLayout`:
stored entries per layer = dense part (all L tokens, or min(L, W) for a sliding window)
+ compressed part (floor(L / ratio)); an indexer key is kept alongside each indexed entry; a fixed
per-request state (V4's compressor tail) does not grow with L. Source of every layout:
``reference/kv-formulas.md`` (vLLM kv_cache_interface.py, FlashMLA, DeepSeek inference code).

Functions over token counts accept Python ints or numpy integer arrays (sweeps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from kvcalc.model.schema import KV_DTYPE_BYTES, CompressedGroup, FullGroup, MlaGroup, ModelPreset


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


def full_entry_bytes(kv_heads: int, head_dim: int, head_dim_v: int, dtype: str) -> float:
    """K and V of one token in one full-attention layer [B]: kv_heads x (d_k + d_v) x dtype bytes."""
    return kv_heads * (head_dim + head_dim_v) * KV_DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class KvOptions:
    """Layout choices a user can make; None = the preset's default."""

    kv_dtype: Optional[str] = None
    mla_layout: Optional[str] = None
    indexer_dtype: Optional[str] = None
    mtp: bool = False


@dataclass(frozen=True)
class GroupLayout:
    """One resolved layer group. Entry sizes are per layer [B]."""

    name: str
    kind: str                     # full | sliding | mla | dsa | csa | hca | swa | flat
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


def _minimum(tokens, cap: int):
    """min(tokens, cap) for an int or a numpy array (numpy is imported only when an array is passed)."""
    if isinstance(tokens, int):
        return min(tokens, cap)
    import numpy as np

    return np.minimum(tokens, cap)


def dense_entries(g: GroupLayout, tokens):
    """Dense (uncompressed) entries stored per layer for a context of ``tokens`` [entries]."""
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
    return entries * g.entry_bytes + indexed_entries(g, tokens) * g.indexer_bytes


def stored_bytes(g: GroupLayout, tokens):
    """KV bytes stored by the whole group for one request, excluding fixed state [B]."""
    return g.layers * stored_bytes_per_layer(g, tokens)


def state_bytes(g: GroupLayout) -> int:
    """Fixed per-request state of the group (compressor tails) [B]."""
    return g.layers * g.state_bytes_per_layer


def read_bytes_per_step(g: GroupLayout, tokens):
    """KV bytes one decode step reads from this group at context ``tokens`` [B].

    Dense attention reads every stored entry. A sparse group (DSA, CSA) scans every indexer key, then
    reads only top-k of the indexed entries (plus the window's dense entries for CSA).
    """
    dense = dense_entries(g, tokens)
    comp = compressed_entries(g, tokens)
    if g.top_k is None:
        entries = dense + comp
    elif g.indexed == "dense":
        entries = _minimum(dense, g.top_k) + comp
    else:
        entries = dense + _minimum(comp, g.top_k)
    return g.layers * (entries * g.entry_bytes + indexed_entries(g, tokens) * g.indexer_bytes)


def long_context_bytes_per_token(g: GroupLayout) -> float:
    """Growth of stored bytes per extra token once every window is full [B/token]."""
    per_layer = 0.0
    if g.window_tokens is None:
        per_layer += g.entry_bytes + (g.indexer_bytes if g.indexed == "dense" else 0)
    if g.ratio is not None:
        per_layer += (g.entry_bytes + (g.indexer_bytes if g.indexed == "compressed" else 0)) / g.ratio
    return g.layers * per_layer


def per_gpu_share(g: GroupLayout, tp: int) -> float:
    """Fraction of the group's KV that one tensor-parallel rank stores [0..1].

    Full attention shards by KV head: each rank holds ceil(kv_heads / tp) heads (replicated once tp > kv_heads).
    A single latent head (MLA, V4) is replicated on every rank.
    """
    if g.kv_heads is None:
        return 1.0
    return -(-g.kv_heads // tp) / g.kv_heads


def _full(grp: FullGroup, opts: KvOptions, model: ModelPreset) -> GroupLayout:
    dtype = opts.kv_dtype or model.kv_dtype
    hv = grp.head_dim_v or grp.head_dim
    return GroupLayout(
        name=grp.name, kind="sliding" if grp.window_tokens else "full", layers=grp.layers,
        window_tokens=grp.window_tokens, ratio=None,
        entry_bytes=full_entry_bytes(grp.kv_heads, grp.head_dim, hv, dtype),
        indexer_bytes=0, indexed=None, top_k=None, state_bytes_per_layer=0, kv_heads=grp.kv_heads,
        layout=f"{dtype}, {grp.kv_heads} KV heads x ({grp.head_dim} + {hv})")


def _mla(grp: MlaGroup, opts: KvOptions, model: ModelPreset) -> GroupLayout:
    layout = opts.mla_layout or model.mla_layout
    entry = mla_entry_bytes(layout, grp.kv_lora_rank, grp.rope_head_dim)
    idx = grp.indexer
    idtype = opts.indexer_dtype or model.indexer_dtype
    return GroupLayout(
        name=grp.name, kind="dsa" if idx else "mla", layers=grp.layers, window_tokens=None, ratio=None,
        entry_bytes=entry, indexer_bytes=indexer_key_bytes(idtype, idx.head_dim) if idx else 0,
        indexed="dense" if idx else None, top_k=idx.top_k if idx else None, state_bytes_per_layer=0,
        kv_heads=None, layout=f"{layout} {entry} B" + (f" + {idtype} indexer" if idx else ""))


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
        layout=f"{grp.entry_bytes} B" + (f" + {idtype} indexer" if idx else ""))


def _flat(model: ModelPreset) -> GroupLayout:
    return GroupLayout(
        name="as stated", kind="flat", layers=1, window_tokens=None, ratio=None,
        entry_bytes=model.as_stated_kv_bytes_per_token, indexer_bytes=0, indexed=None, top_k=None,
        state_bytes_per_layer=0, kv_heads=None, layout=f"{model.as_stated_kv_bytes_per_token:g} B/token flat")


_RESOLVERS = {"full": _full, "mla": _mla, "compressed": _compressed}


def resolve_groups(model: ModelPreset, opts: KvOptions = KvOptions()) -> list[GroupLayout]:
    """The model's layer groups with the user's layout options applied (MTP groups only with opts.mtp)."""
    if model.as_stated_kv_bytes_per_token is not None:
        return [_flat(model)]
    return [_RESOLVERS[g.kind](g, opts, model) for g in model.layer_groups if opts.mtp or not g.mtp]
