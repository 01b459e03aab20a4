"""SGLang's pools for DeepSeek V4's compressed attention, as 0.5.23's ``DSV4PoolConfigurator`` sizes them
(python/sglang/srt/model_executor/pool_configurator.py; defaults of the CUDA, non-speculative, non-unified path):

- page 256 tokens and swa_full_tokens_ratio 0.1 (``_deepseek_v4_overrides``, arg_groups/model_overrides/
  deepseek_v4.py), max_running_requests 256 (arg_groups/deepseek_v4_hook.py);
- a latent slot is qk_nope + 2 x qk_rope + 8 B (584), paged in FlashMLA's layout: a page of n slots takes
  n x 584 B rounded up to 576 B (``_get_paged_kv_bytes_per_token``: 585 B/token for the raw window and ratio 4,
  864 for ratio 128's 2-slot pages);
- bytes per SWA slot (``_get_bytes_per_swa_token``) = paged(raw) x every layer + the C4 compress state priced per
  slot: ring 8 / page x (2 x 2 x head_dim + 2 x 2 x index_head_dim) x 4 B (fp32) x the ratio-4 layers;
- bytes per full token (``_get_bytes_per_full_token``) = r x bytes per SWA slot + per ratio-4 layer
  paged(4) / 4 + indexer key (FP8: index_head_dim + 4 per 128 = 132 B) / 4, per ratio-128 layer paged(128) / 128;
- fixed bytes (``_get_c128_state_fixed_bytes``): the C128 compress state, ceil((slots x 128 + 128 + 1) / 128) x
  128 rows x 2 x head_dim x 4 B per ratio-128 layer, slots = max_running_requests + 1;
- ``calculate_pool_sizes``: full = int((rest - fixed) / bytes per full token), rounded down to whole pages;
  the SWA pool int(full x r) rounded down to pages.

V4 Flash with 60 GiB: 0.1 x 31,875 + 21 x 179.25 + 20 x 6.75 = 7,086.75 B per full token; fixed 33,152 rows x
4,096 B x 20 = 2,715,811,840 B; full (64,424,509,440 - 2,715,811,840) / 7,086.75 = 8,707,615 -> 8,707,584 tokens,
SWA 870,656 (the engine's own figures, tests/test_engine_pins.py).
"""

from __future__ import annotations

import math

from kvcalc.model.schema import ModelPreset

DSV4_PAGE = 256                 # _deepseek_v4_overrides: page_size 256 on CUDA
DSV4_SWA_RATIO = 0.1            # _deepseek_v4_overrides: swa_full_tokens_ratio 0.1
DSV4_MAX_RUNNING = 256          # deepseek_v4_hook: max_running_requests 256
FLASHMLA_PAGE_ALIGN = 576       # FlashMLA's page stride
RING = {4: 8, 128: 128}         # get_compress_state_ring_size without speculative decoding
STATE_BYTES = 4                 # SGLANG_DSV4_COMPRESS_STATE_DTYPE float32


def _paged(kv_bytes: int, ratio: int) -> float:
    """Bytes per slot of a FlashMLA-layout page of 256 / ratio slots [B]."""
    slots = DSV4_PAGE // ratio if ratio else DSV4_PAGE
    return -(-slots * kv_bytes // FLASHMLA_PAGE_ALIGN) * FLASHMLA_PAGE_ALIGN / slots


def _layers(model: ModelPreset) -> tuple[list, int, int, int]:
    """(V4 layer groups without MTP, layers per ratio 4, per ratio 128, index head dim)."""
    groups = [g for g in model.layer_groups if g.kind == "compressed" and not g.mtp]
    by = {r: sum(g.layers for g in groups if g.ratio == r) for r in (4, 128)}
    idx = next((g.indexer.head_dim for g in groups if g.indexer is not None), 128)
    return groups, by[4], by[128], idx


def dsv4_pools(model: ModelPreset, rest: float, swa_ratio: float | None = None,
               max_running: int | None = None) -> dict:
    """SGLang's DSV4 pool sizes out of ``rest`` bytes [tokens, B] (the module docstring)."""
    groups, c4, c128, idx_dim = _layers(model)
    kv = int(groups[0].entry_bytes)
    head_dim = model.qk_head_dim
    layers = sum(g.layers for g in groups)
    ratio = DSV4_SWA_RATIO if swa_ratio is None else swa_ratio
    running = max_running or DSV4_MAX_RUNNING
    c4_state = RING[4] / DSV4_PAGE * (2 * 2 * head_dim + 2 * 2 * idx_dim) * STATE_BYTES * c4
    per_swa = _paged(kv, 0) * layers + c4_state
    idx_key = idx_dim + idx_dim // 128 * 4
    compressed = c4 * (_paged(kv, 4) / 4 + idx_key / 4) + c128 * _paged(kv, 128) / 128
    per_full = ratio * per_swa + compressed
    rows = -(-((running + 1) * RING[128] + RING[128] + 1) // 128) * 128
    fixed = rows * 2 * head_dim * STATE_BYTES * c128 if c128 else 0
    full = max(0, int(max(rest - fixed, 0) / per_full)) // DSV4_PAGE * DSV4_PAGE if per_full else 0
    swa = int(full * ratio) // DSV4_PAGE * DSV4_PAGE
    return {"full_tokens": full, "swa_tokens": swa, "bytes_per_full_token": per_full, "bytes_per_swa_token": per_swa,
            "compressed_bytes_per_full_token": compressed, "fixed_bytes": fixed, "swa_ratio": ratio,
            "max_running_requests": running, "page": DSV4_PAGE, "window_tokens": groups[0].window_tokens,
            "pool_bytes": full * compressed + swa * per_swa + fixed}


def dsv4_note(p: dict) -> str:
    """How the DSV4 pools came about, as text."""
    return (f"DSV4 pools: {p['fixed_bytes']:,.0f} B of C128 compress state for {p['max_running_requests'] + 1} "
            f"request slots; full tokens int(rest / {p['bytes_per_full_token']:,.2f} B) in pages of {p['page']}, "
            f"SWA pool {p['swa_ratio']:g} x as many x {p['bytes_per_swa_token']:,.2f} B")


def dsv4_fraction_kv_bytes(p: dict, tokens: int, requests: int) -> float:
    """The pools ``requests`` requests of ``tokens`` tokens need [B]: full tokens in whole pages, the SWA pool tied
    to them by the ratio (at least a window and a page per request), plus the fixed state."""
    full = -(-requests * tokens // DSV4_PAGE) * DSV4_PAGE
    window_need = requests * min(tokens, (p["window_tokens"] or 0) + DSV4_PAGE)
    if p["swa_ratio"]:
        full = max(full, -(-math.ceil(window_need / p["swa_ratio"]) // DSV4_PAGE) * DSV4_PAGE)
    return full * p["bytes_per_full_token"] + p["fixed_bytes"]
