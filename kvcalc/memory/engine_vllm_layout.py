"""vLLM's paged layout of one TP rank: layer specs, block sizes, page unification, KV-cache groups and the blocks
one request holds. Follows vLLM 0.33.0 (the version ``tools/engine-sizing`` runs); each rule names its source:

- block size: 16 (``CacheConfig.DEFAULT_BLOCK_SIZE``), raised by the attention backend's preferred size
  (``Platform.update_block_size_for_backend``, vllm/platforms/interface.py): 64 tokens for sparse MLA (DSA:
  V3.2, GLM-5; the FlashMLA-sparse backend's only kernel block size).
- Mamba / linear-attention hybrids (``Platform._align_hybrid_block_size``): the attention block becomes
  ``align x cdiv(state page, align x attention bytes per token per layer)`` tokens, ``align`` the backend's
  kernel block (16; 128 for MLA hybrids), with prefix caching on (the default) lcm'ed with the layers' prefill
  checkpoint alignment (64 for Gated DeltaNet, ``FLASHINFER_GDN_CHECKPOINT_ALIGNMENT``; 1 for Mamba-2), and the
  state page is padded to the attention page. Prefix caching on means ``mamba_cache_mode='align'``
  (vllm/config/vllm.py), so a state layer holds 2 blocks + 1 prefill-checkpoint block per request
  (``MambaSpec.max_memory_usage_bytes``: 2 + num_speculative_blocks + num_prefill_checkpoint_blocks).
- ``unify_kv_cache_spec_page_size`` (vllm/v1/core/kv_cache_planning.py): layers whose page is smaller than the
  largest get their block size multiplied by largest // theirs when it divides (else a non-MLA page is padded).
- ``_get_kv_cache_groups_uniform_page_size``: layers of one spec are cut into groups of ``group_size`` layers
  (the smallest type's count, or the largest when it is under 1.5x the smallest), padding where counts do not
  divide; one block of the shared pool = the largest group's pages (``_get_kv_cache_bytes_per_block``).
- blocks per request (``get_max_concurrency_for_kv_cache_config``: sum over groups of cdiv(max memory, page)):
  full cdiv(L, B); sliding ``SlidingWindowSpec.max_admission_blocks_per_request``
  cdiv(min(W - 1 + in-flight, L), B) + 1; chunked ``ChunkedLocalAttentionSpec`` cdiv(min(C + in-flight, L), B);
  state 3 (align mode) or 1. In-flight tokens = ``VllmConfig.max_in_flight_tokens`` = max_concurrent_batches
  (2 under async scheduling, the default, with PP 1) x max_num_batched_tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvcalc.memory import engine_common as ec
from kvcalc.model import attention as att

DEFAULT_BLOCK_SIZE = 16
KERNEL_BLOCK_ALIGN = 16     # FlashAttention's smallest kernel block (the Hopper default backend)
MLA_HYBRID_ALIGN = 128      # _align_hybrid_block_size: MLA + Mamba hybrids align to 128 tokens
SPARSE_MLA_BLOCK = 64       # FlashMLA-sparse (DSA) kernel block size
GDN_CHECKPOINT_ALIGN = 64   # v1/attention/backends/gdn_attn.py FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
HYBRID_MAX_RATIO = 1.5      # _get_kv_cache_groups_uniform_page_size: group_size = max when max < 1.5 x min
ALIGN_MODE_STATE_BLOCKS = 3  # 2 + 1 prefill-checkpoint block (mamba_cache_mode 'align')


@dataclass(frozen=True)
class KvGroup:
    """One vLLM KV-cache group: an attention type's share of layers (real + padding) and its token rule."""

    kind: str                 # full | sliding | chunked | state (linear attention, Mamba: fixed blocks per request)
    window_tokens: int | None
    layers: int               # real layers in the group
    padding: int              # padding layers up to group_size
    block_size: int = DEFAULT_BLOCK_SIZE  # tokens per block of this group (page unification may raise it)
    state_blocks: int = 1     # blocks a state group holds per request
    chunk_tokens: int | None = None


def _spec_key(g: att.GroupLayout) -> tuple:
    """What makes two layers the same vLLM spec: its kind, window or chunk (state layers are one kind)."""
    if g.kind in att.RECURRENT_KINDS:
        return ("state", None, None)
    if g.kind == "sliding":
        return ("sliding", g.window_tokens, None)
    if g.kind == "chunked":
        return ("chunked", None, g.chunk_tokens)
    return ("full", None, None)


def _buckets(groups: list[att.GroupLayout]) -> dict:
    """Layers by spec: full-like layers together, sliding layers by window, chunked by chunk [layers]."""
    out: dict = {}
    for g in groups:
        key = _spec_key(g)
        out[key] = out.get(key, 0) + g.layers
    return out


def group_size_of(counts: list[int]) -> int:
    """vLLM's group size: the smallest type's layer count, or the largest when it is under 1.5x the smallest."""
    lo, hi = min(counts), max(counts)
    return hi if hi < lo * HYBRID_MAX_RATIO else lo


def kv_groups(groups: list[att.GroupLayout], block_sizes: dict | None = None,
              state_blocks: int = 1) -> tuple[int, list[KvGroup]]:
    """(group_size, groups): the hybrid manager's grouping, one group of all layers when there is one type.
    ``block_sizes`` maps a spec key to its (unified) block size; default 16 for every group.

    22 sliding + 4 full layers: group_size 4; sliding 22 = 6 groups (5 x 4 real + the padding of 2 spread, as
    vLLM assigns layers[i::6]), full 4 = 1 group: 7 groups of 4, 2 padding layers ("may waste at most 9.09%").
    """
    buckets = _buckets(groups)
    bs = block_sizes or {}
    if len(buckets) == 1:
        (kind, window, chunk), n = next(iter(buckets.items()))
        key = (kind, window, chunk)
        return n, [KvGroup(kind, window, n, 0, bs.get(key, DEFAULT_BLOCK_SIZE), state_blocks, chunk)]
    size = group_size_of(list(buckets.values()))
    out = []
    for key, n in buckets.items():
        kind, window, chunk = key
        k = math.ceil(n / size)
        for i in range(k):
            real = min(size, n - i * size)
            out.append(KvGroup(kind, window, real, size - real, bs.get(key, DEFAULT_BLOCK_SIZE), state_blocks, chunk))
    return size, out


def group_blocks(g: KvGroup, tokens: int, in_flight_tokens: int, block_size: int | None = None) -> int:
    """Blocks one request of ``tokens`` tokens holds in one group (the rules in the module docstring)."""
    b = block_size or g.block_size
    if g.kind == "state":
        return g.state_blocks
    if g.kind == "sliding":
        return math.ceil(min(g.window_tokens - 1 + in_flight_tokens, tokens) / b) + 1
    if g.kind == "chunked":
        return math.ceil(min(g.chunk_tokens + in_flight_tokens, tokens) / b)
    return math.ceil(tokens / b)


def blocks_per_request(kgroups: list[KvGroup], tokens: int, block_size: int | None, in_flight_tokens: int) -> int:
    """Blocks one request of ``tokens`` tokens holds across all KV-cache groups [blocks]; ``block_size`` None =
    each group's own (a number forces one size for all, as before page unification)."""
    return sum(group_blocks(g, tokens, in_flight_tokens, block_size) for g in kgroups)


def state_page_bytes(groups: list[att.GroupLayout], tp: int) -> float:
    """The largest per-layer state of a linear-attention/Mamba layer on one rank (one page) [B]; 0 if none."""
    return max((g.state_bytes_per_layer * att.per_gpu_share(g, tp) for g in groups
                if g.kind in att.RECURRENT_KINDS), default=0.0)


def enlarged_block_size(attn_bytes_per_token: float, state_page: float, block_size: int, align: int = 16) -> int:
    """vLLM's attention block size for a Mamba/linear hybrid: align x cdiv(state page, align x attention bytes per
    token per layer), at least the block size asked for [tokens] (``_align_hybrid_block_size``)."""
    need = align * math.ceil(state_page / (align * attn_bytes_per_token))
    return max(block_size, need)


def backend_block_size(groups: list[att.GroupLayout], requested: int | None) -> int:
    """The block size before hybrid alignment: the user's, else 64 for sparse MLA (DSA), else 16 [tokens]."""
    if requested:
        return requested
    if any(g.kind == "dsa" for g in groups):
        return SPARSE_MLA_BLOCK
    return DEFAULT_BLOCK_SIZE


def block_layout(groups: list[att.GroupLayout], tp: int, block_size: int | None = None,
                 prefix_caching: bool = True) -> dict:
    """vLLM's paged layout on one TP rank: block sizes, KV-cache groups, pages and the bytes one block of the
    shared pool takes [tokens, B]. ``block_size``: the user's --block-size (None = the backend's)."""
    attn = [g for g in groups if g.kind not in att.RECURRENT_KINDS]
    per_token = sum(g.layers * ec.page_bytes_per_token(g, tp) for g in attn)
    requested = block_size or DEFAULT_BLOCK_SIZE
    block = backend_block_size(groups, block_size)
    state_page = state_page_bytes(groups, tp)
    kinds = {g.kind for g in groups}
    align_mode = bool(state_page) and prefix_caching
    if state_page:
        attn_token_layer = max(ec.page_bytes_per_token(g, tp) for g in attn)
        align = MLA_HYBRID_ALIGN if kinds & {"mla", "dsa"} else max(KERNEL_BLOCK_ALIGN, block)
        if align_mode and "linear" in kinds:
            align = math.lcm(align, GDN_CHECKPOINT_ALIGN)
        block = enlarged_block_size(attn_token_layer, state_page, block, align)
    # pages per spec at the common block size, then unify_kv_cache_spec_page_size
    pages: dict = {}
    for g in attn:
        key = _spec_key(g)
        pages[key] = max(pages.get(key, 0.0), ec.page_bytes_per_token(g, tp) * block)
    top = max(pages.values()) if pages else 0.0
    block_sizes, padded = {}, False
    for key, page in pages.items():
        ratio = top / page
        if ratio == int(ratio):
            block_sizes[key] = block * int(ratio)
        else:  # a non-MLA page that does not divide the largest is padded to it
            block_sizes[key], padded = block, True
    if state_page:
        block_sizes[("state", None, None)] = block
    size, kgroups = kv_groups(groups, block_sizes, ALIGN_MODE_STATE_BLOCKS if align_mode else 1)
    page = top if top else state_page
    hybrid = len(kgroups) > 1
    if hybrid:
        block_bytes = page * size
    else:  # one group: every layer's page side by side (UniformTypeKVCacheSpecs)
        block_bytes = per_token * block
    return {"block_size": min(g.block_size for g in kgroups), "requested_block_size": requested,
            "group_size": size, "kgroups": kgroups, "kv_groups": len(kgroups),
            "padding_layers": sum(g.padding for g in kgroups), "page_bytes": page, "pages_padded": padded,
            "state_page_bytes": state_page, "kv_bytes_per_token_per_gpu": per_token, "block_bytes": block_bytes,
            "mamba_cache_mode": ("align" if align_mode else "none") if state_page else None,
            "block_sizes": sorted({g.block_size for g in kgroups})}
