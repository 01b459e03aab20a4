"""vLLM's paged layout for DeepSeek V4's compressed attention (CSA + HCA), as vLLM 0.33.0 lays it out.

Every decoder layer gets several KV-cache "layers" (vllm/models/deepseek_v4), each a spec with its own block size
and page (bytes of one block of that layer), padded up to a multiple of 576 B (``_apply_alignment_padding``,
v1/kv_cache_interface.py; fp8_ds_mla, the default KV dtype for V4):

- the raw sliding window of every layer: ``DeepseekV4SWACache`` (v1/attention/backends/mla/sparse_swa.py),
  a SlidingWindowMLASpec of 64-token blocks, window ``sliding_window``, 584 B per token (packed_bytes_per_token);
- the compressed entries of a ratio-r layer: ``DeepseekV4...Attention.get_kv_cache_spec``
  (models/deepseek_v4/attention.py), an MLAAttentionSpec of 256-token blocks (the sparse backend's only kernel
  block size, ``DeepseekV4SparseMLABackend.get_supported_kernel_block_sizes``) holding 256 / r entries of 584 B;
- the indexer keys of a ratio-4 layer: ``DeepseekV4IndexerCache``, 256-token blocks of 256 / 4 keys of
  index_head_dim + index_head_dim / 128 x 4 B (FP8 with an FP32 scale per 128: 132 B);
- the compressors' fp32 tail states (models/deepseek_v4/compressor.py): a SlidingWindowMLASpec of window
  coff x r (coff = 2 at r = 4, overlapping windows; 1 at r = 128), blocks of 4 tokens (r = 4) or 8 (r = 128),
  2 x coff x dim fp32 per token (kv + score), dim = head_dim for the main compressor and index_head_dim for the
  indexer's own (r = 4 layers).

These specs are grouped by ``_get_packed_kv_cache_groups`` (v1/core/kv_cache_planning.py; V4's layout is
block-outermost and mixes page sizes): layers of one (type, block size, window) form a bucket; a bucket whose
page sizes hold equal layer counts is "balanced"; the largest balanced bucket with several page sizes sets a
floor on the pattern repeats per group, ``_approximate_gcd`` picks the repeats (the least padding, ties to the
larger) over the balanced buckets' counts, and each balanced bucket splits into cdiv(count, repeats) groups
(layers i::n); others stay whole. One block of the shared pool is the widest group's pages summed
(``_get_kv_cache_bytes_per_block``); every group takes whole pool blocks, as in the other hybrids.

V4 Flash (2 sliding-only + 21 ratio-4 + 20 ratio-128 layers): 43 raw-window layers in 2 groups (22 + 21,
823,680 / 786,240 B), 62 compressed and indexer layers in 1 (21 x 8,640 + 21 x 37,440 + 20 x 1,728 =
1,002,240 B: the pool block), 42 ratio-4 compressor layers (21 x 8,640 + 21 x 32,832) and 20 ratio-128 ones
(20 x 32,832): 5 groups, 167 KV layers, 328,878 B per token summed over them (page / block size).
"""

from __future__ import annotations

import math

from kvcalc.memory.engine_vllm_layout import KvGroup
from kvcalc.model.schema import ModelPreset

PAGE_ALIGN = 576            # fp8_ds_mla pages: multiples of 576 B (FlashMLA's TMA stride)
SWA_BLOCK = 64              # DeepseekV4SWACache block_size
SPARSE_MLA_BLOCK_V4 = 256   # DeepseekV4SparseMLABackend: the only kernel block size
COMPRESSOR_BLOCK = {4: 4, 128: 8}   # compressor.py: C4 state blocks of 4 tokens, C128 of 8
STATE_BYTES = 4             # compressor states are fp32
INDEXER_SCALE_BLOCK = 128   # indexer keys: one FP32 scale per 128 FP8 values
V4_KINDS = ("swa", "csa", "hca")


def is_v4(groups) -> bool:
    """Whether the resolved layer groups are DeepSeek V4's compressed attention."""
    return any(g.kind in V4_KINDS for g in groups)


def _page(tokens_or_states: int, bytes_each: float) -> int:
    """One block's bytes, padded up to a multiple of 576 B [B]."""
    return -(-int(tokens_or_states * bytes_each) // PAGE_ALIGN) * PAGE_ALIGN


def layer_specs(model: ModelPreset) -> list[tuple[tuple, int, int]]:
    """Every V4 KV-cache layer vLLM creates, as ((kind, block size, window), page bytes, layers) rows."""
    from kvcalc.out.errors import InputError

    head_dim = model.qk_head_dim
    rows = []
    for g in model.layer_groups:
        if g.kind != "compressed" or g.mtp:
            continue
        if g.window_tokens:
            rows.append((("sliding", SWA_BLOCK, g.window_tokens), _page(SWA_BLOCK, g.entry_bytes), g.layers))
        if g.ratio is None:
            continue
        if g.ratio not in COMPRESSOR_BLOCK:
            raise InputError(f"--engine vllm: vLLM 0.33's DeepSeek V4 compressor takes ratios 4 and 128, not "
                             f"{g.ratio} ({g.name})")
        coff = 2 if g.ratio == 4 else 1
        rows.append((("full", SPARSE_MLA_BLOCK_V4, None),
                     _page(SPARSE_MLA_BLOCK_V4 // g.ratio, g.entry_bytes), g.layers))
        cblock = COMPRESSOR_BLOCK[g.ratio]
        ckey = ("sliding", cblock, coff * g.ratio)
        rows.append((ckey, _page(cblock, 2 * coff * head_dim * STATE_BYTES), g.layers))
        if g.indexer is not None:
            d = g.indexer.head_dim
            key_bytes = d + d // INDEXER_SCALE_BLOCK * 4
            rows.append((("full", SPARSE_MLA_BLOCK_V4, None), _page(SPARSE_MLA_BLOCK_V4 // g.ratio, key_bytes),
                         g.layers))
            rows.append((ckey, _page(cblock, 2 * coff * d * STATE_BYTES), g.layers))
    return rows


def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """vLLM's ``_approximate_gcd``: the d in [lower_bound, max] with the least total padding sum((d - x % d) % d),
    ties to the larger d."""
    best_d, best_pad = max(1, lower_bound), None
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best_d, best_pad = d, pad
    return best_d


def packed_groups(model: ModelPreset) -> list[tuple[tuple, dict]]:
    """``_get_packed_kv_cache_groups`` for V4's specs: [(bucket key, {page bytes: layers in this group})]."""
    buckets: dict = {}
    for key, page, n in layer_specs(model):
        pages = buckets.setdefault(key, {})
        pages[page] = pages.get(page, 0) + n
    info = [(key, pages, len(set(pages.values())) == 1) for key, pages in buckets.items()]
    floor = max((max(p.values()) for _, p, bal in info if bal and len(p) > 1), default=0)
    repeats = approximate_gcd([max(p.values()) for _, p, bal in info if bal], floor) if floor else None

    def n_groups(pages, balanced):
        return math.ceil(max(pages.values()) / repeats) if balanced and repeats else 1

    def is_state(key):  # no Mamba in V4: only unsplit sliding buckets count, when nothing repeats
        return repeats is None and key[0] == "sliding"

    def widest(pages, n):
        return sum(math.ceil(c / n) * page for page, c in pages.items())

    anchor = max(widest(p, sum(p.values()) if is_state(k) else n_groups(p, bal)) for k, p, bal in info)
    out = []
    for key, pages, balanced in info:
        n = n_groups(pages, balanced)
        if anchor and is_state(key):
            per_block = max(anchor // min(pages), 1)
            n = max(n, math.ceil(sum(pages.values()) / per_block))
        for i in range(n):  # pattern repeats i::n of each page size
            out.append((key, {page: len(range(i, c, n)) for page, c in pages.items() if len(range(i, c, n))}))
    return out


def v4_block_layout(model: ModelPreset) -> dict:
    """vLLM's paged layout of DeepSeek V4 on one rank (the latent is replicated: the same on every TP rank), in the
    keys ``engine_vllm_layout.block_layout`` returns [tokens, B]."""
    groups = packed_groups(model)
    kgroups, widths, parts = [], [], []
    for (kind, block, window), pages in groups:
        kgroups.append(KvGroup(kind, window, sum(pages.values()), 0, block))
        widths.append(sum(page * c for page, c in pages.items()))
        what = f"window {window}" if kind == "sliding" else "full"
        parts.append(" + ".join(f"{c} x {page:,} B" for page, c in pages.items()) + f" ({block}-token blocks, {what})")
    per_token = sum(page * n / key[1] for key, page, n in layer_specs(model))
    block_bytes = max(widths)
    return {"block_size": min(g.block_size for g in kgroups), "requested_block_size": SPARSE_MLA_BLOCK_V4,
            "group_size": max(g.layers for g in kgroups), "kgroups": kgroups, "kv_groups": len(kgroups),
            "padding_layers": 0, "page_bytes": block_bytes, "pages_padded": True, "state_page_bytes": 0.0,
            "kv_bytes_per_token_per_gpu": per_token, "block_bytes": block_bytes, "mamba_cache_mode": None,
            "block_sizes": sorted({g.block_size for g in kgroups}), "group_bytes": widths,
            "kv_layers": sum(n for _, _, n in layer_specs(model)),
            "groups_text": f"{len(kgroups)} packed groups (DeepSeek V4): " + "; ".join(parts),
            "pool_block_text": "the widest packed group"}
