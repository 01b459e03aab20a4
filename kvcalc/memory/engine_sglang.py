"""What SGLang allocates for the KV cache: its token pool, reproduced term by term.

Follows SGLang 0.5.23 (the version tools/engine-sizing runs: mem_cache/kv_cache_configurator.py
_profile_available_bytes, _handle_max_mamba_cache, resolve_max_num_reqs; model_executor/pool_configurator.py
DefaultPoolConfigurator / HybridSWAPoolConfigurator; configs/model_config.py is_hybrid_swa_model):

  rest = free memory after loading the weights - free memory at start x (1 - mem_fraction_static)
         - 100 MiB for a multimodal model SGLang serves as one (mm_runtime_reservation_gb)
  max_total_num_tokens = floor(rest / cell_size) rounded down to whole pages, cell_size = bytes per token of every
         attention layer on this GPU; page 64 tokens for DSA (sparse MLA), else 1

Activations and CUDA graphs live in the (1 - mem_fraction_static) share and are not subtracted. Default
mem_fraction_static: 0.5.23 derives it from reserved memory (engine_sglang_args: 0.829 dense / 0.815 MLA on one
H100); with --engine-version below 0.5, v0.4.x's table by TP size: 0.88 (1), 0.87 (>= 2), 0.85 (>= 4),
0.81 (>= 8), 0.79 (>= 16). "Free memory at start" defaults to the CUDA total minus non-torch memory.

Separate pools for hybrids:
- Sliding + full attention, for the architectures SGLang marks hybrid SWA (gpt-oss, Llama 4 whose chunked layers
  count as sliding, Gemma 4, MiMo; not Gemma 3, which it sizes as all-full): full_tokens = floor(rest /
  (F n_full + r S n_swa)), swa_tokens = int(full_tokens x r), r = swa_full_tokens_ratio (0.8). The log's count is
  full_tokens. A request keeps about min(L, W) tokens in the sliding pool.
- Mamba / linear attention: the state budget is ratio / (1 + ratio) of the rest (mamba_full_memory_ratio 0.9);
  max_mamba_cache_size K = (budget - one slot) // slot, or --max-mamba-cache-size; the pool holds K + 1 slots
  (a padding slot); the attention pool gets what is left, its cell counting the attention layers only.
- Running requests: min(int(tokens / context_len x 512) clamped to 2,048..4,096, tokens // 2), and at most K // 5
  for Mamba hybrids (3 slots + 2 of the radix cache's extra buffer under the overlap scheduler).
DeepSeek V4's compressed pools: engine_sglang_v4 (DSV4PoolConfigurator).
Not modelled: speculative-decoding draft pools, the SWA chunk cache sized from max_running_requests (radix cache
off).
"""

from __future__ import annotations

import math
from typing import Optional

from kvcalc.memory import engine_common as ec
from kvcalc.memory.engine_sglang_args import default_mem_fraction_static
from kvcalc.memory.engine_sglang_v4 import dsv4_fraction_kv_bytes, dsv4_note, dsv4_pools
from kvcalc.memory.engine_vllm_v4 import is_v4
from kvcalc.model import attention as att
from kvcalc.model.schema import HardwarePreset, ModelPreset
from kvcalc.out import units

MEM_FRACTION_BY_TP = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))
RESERVED_MEMORY_SINCE = (0, 5)   # mem_fraction_static from reserved memory (kvcalc follows 0.5.23's rule)


def default_mem_fraction(tp: int) -> float:
    """SGLang's mem_fraction_static for a TP size (server_args.py, v0.4.x)."""
    return next(f for n, f in MEM_FRACTION_BY_TP if tp >= n)


def mem_fraction(model: ModelPreset, groups: list[att.GroupLayout], hw: HardwarePreset,
                 inp: ec.EngineInputs) -> tuple[float, str]:
    """mem_fraction_static and where it came from: given; SGLang 0.5.23's from reserved memory
    (engine_sglang_args); or, with --engine-version below 0.5, v0.4.x's table by TP size."""
    if inp.mem_fraction_static:
        return inp.mem_fraction_static, "given"
    if ec.engine_version(inp) < RESERVED_MEMORY_SINCE:
        return default_mem_fraction(inp.tp), f"SGLang v0.4.x default at TP {inp.tp}"
    return default_mem_fraction_static(model, groups, ec.total_memory(hw, inp).value, inp.tp,
                                       inp.max_num_batched_tokens, vlm=multimodal_reserve(model) > 0)


def free_at_start(hw: HardwarePreset, inp: ec.EngineInputs) -> ec.Resolved:
    """Free memory SGLang sees before loading the weights [B]: given (--total-memory), else CUDA total - non-torch."""
    if inp.total_memory_bytes is not None:
        return ec.Resolved(inp.total_memory_bytes, "given")
    total = ec.total_memory(hw, inp)
    nt = ec.non_torch(inp)
    return ec.Resolved(total.value - nt.value, f"{units.fmt_gib(total.value)} ({total.origin}) - "
                                               f"{units.fmt_gib(nt.value)} non-torch")


SWA_FULL_TOKENS_RATIO = 0.8        # server_args swa_full_tokens_ratio
MAMBA_FULL_MEMORY_RATIO = 0.9      # server_args mamba_full_memory_ratio
MAMBA_CACHE_PER_RUNNING_REQUEST = 5  # _calculate_mamba_ratio: 3 + 2 extra-buffer slots (radix cache, overlap)
DSA_PAGE_SIZE = 64                 # server_args: DSA (NSA) backends page 64 tokens
MM_RESERVE_BYTES = 100 * 2**20     # mm_runtime_reservation_gb: SGLANG_VLM_CACHE_SIZE_MB 100 for multimodal models


# configs/model_config.py is_hybrid_swa_model (SGLang 0.5.23): the architectures that get a separate sliding pool
# (of those kvcalc describes; gpt-oss is one of its SWA_SINK_ARCHS). Others, Gemma 3 among them, size every layer
# as full. A preset without an architecture keeps the split whenever it has sliding and full layers.
HYBRID_SWA_ARCHS = ("GptOssForCausalLM", "Llama4ForConditionalGeneration", "Gemma4ForCausalLM",
                    "Gemma4ForConditionalGeneration", "MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM",
                    "DeepseekV4ForCausalLM")
# ModelConfig: multimodal is off by default for these wrappers (no 100 MiB reserve)
MM_DISABLED_ARCHS = ("Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                     "Step3VLForConditionalGeneration", "InklingForConditionalGeneration")


def hybrid_swa(model: ModelPreset) -> bool:
    """Whether SGLang gives this model a separate sliding pool (is_hybrid_swa_model)."""
    return model.architecture is None or model.architecture in HYBRID_SWA_ARCHS


def multimodal_reserve(model: ModelPreset) -> float:
    """mm_runtime_reservation_gb: 100 MiB off the KV budget for a multimodal model SGLang serves as one [B]."""
    return MM_RESERVE_BYTES if model.multimodal and model.architecture not in MM_DISABLED_ARCHS else 0.0


def _cells(groups: list[att.GroupLayout], tp: int, split: bool = True) -> tuple[float, float, Optional[int]]:
    """(full-pool bytes per token, sliding-pool bytes per token, the smallest window) on one TP rank [B, tokens].
    Llama 4's chunked layers go to the sliding pool, their chunk as the window (SGLang treats them as SWA);
    ``split`` False puts every layer in the full pool."""
    def local(g):
        return split and g.kind in ("sliding", "chunked")

    full = sum(g.layers * ec.page_bytes_per_token(g, tp) for g in groups
               if not local(g) and g.kind not in att.RECURRENT_KINDS)
    swa = sum(g.layers * ec.page_bytes_per_token(g, tp) for g in groups if local(g))
    window = min((g.window_tokens or g.chunk_tokens for g in groups if local(g)), default=None)
    return full, swa, window


def mamba_state_bytes_per_request(groups: list[att.GroupLayout], tp: int) -> float:
    """One request's recurrent state over all linear-attention/Mamba layers on one TP rank [B]
    (SGLang mamba_cache_per_req)."""
    return sum(g.layers * g.state_bytes_per_layer * att.per_gpu_share(g, tp) for g in groups
               if g.kind in att.RECURRENT_KINDS)


def mamba_pool(rest: float, per_req: float, inp: ec.EngineInputs) -> tuple[int, float]:
    """(max_mamba_cache_size [requests], bytes the state pool takes [B]) out of ``rest`` [B]
    (KVCacheConfigurator._handle_max_mamba_cache, SGLang 0.5.23): the ratio's budget
    rest x ratio / (1 + ratio) gives K = (budget - one slot) // slot slots, and the pool holds K + 1 (its padding
    slot), as does a given --max-mamba-cache-size."""
    if not per_req:
        return 0, 0.0
    if inp.max_mamba_cache_size is not None:
        size = inp.max_mamba_cache_size
    else:
        ratio = inp.mamba_full_memory_ratio or MAMBA_FULL_MEMORY_RATIO
        size = max(0, int((rest * ratio / (1 + ratio) - per_req) // per_req))
    return size, (size + 1) * per_req


def max_running_requests(tokens: int, context_len: int, mamba_size: Optional[int]) -> int:
    """KVCacheConfigurator.resolve_max_num_reqs (SGLang 0.5.23): min(int(tokens / context_len x 512) clamped to
    2,048..4,096, tokens // 2), then at most max_mamba_cache_size // 5 for Mamba/linear hybrids (the state slots a
    request takes with the radix cache's extra buffer under the overlap scheduler: 3 + 2) [requests]."""
    estimated = max(min(int(tokens / context_len * 512), 4096), 2048)
    n = min(estimated, tokens // 2)
    if mamba_size is not None:
        n = min(n, mamba_size // MAMBA_CACHE_PER_RUNNING_REQUEST)
    return n


def page_size(groups: list[att.GroupLayout]) -> int:
    """SGLang's page size [tokens]: 64 for DSA (sparse MLA) models, else 1 (server_args)."""
    return DSA_PAGE_SIZE if any(g.kind == "dsa" for g in groups) else 1


def sglang_sizing(model: ModelPreset, groups: list[att.GroupLayout], hw: HardwarePreset,
                  inp: ec.EngineInputs) -> dict:
    """SGLang's figures for one model on one GPU of a TP group (raw SI units) and the terms behind them."""
    ec.check_engine_groups(groups, "sglang")
    free = free_at_start(hw, inp)
    frac, frac_origin = mem_fraction(model, groups, hw, inp)
    w = ec.weights(model, inp)
    # _profile_available_bytes: free after loading - free at start x (1 - mem_fraction_static) - multimodal reserve
    mm = multimodal_reserve(model)
    rest = (free.value - w.value) - free.value * (1 - frac) - mm
    per_req = mamba_state_bytes_per_request(groups, inp.tp)
    mamba_size, mamba_bytes = mamba_pool(rest, per_req, inp)
    kv_rest = rest - mamba_bytes
    v4 = dsv4_pools(model, kv_rest, inp.swa_full_tokens_ratio, inp.max_num_seqs) if is_v4(groups) else None
    if v4:  # DSV4PoolConfigurator (engine_sglang_v4): compressed pools per full token, the SWA pool per slot
        full_cell, swa_cell, window = v4["compressed_bytes_per_full_token"], v4["bytes_per_swa_token"], \
            v4["window_tokens"]
    else:
        full_cell, swa_cell, window = _cells(groups, inp.tp, hybrid_swa(model))
    cell = full_cell + swa_cell
    page = v4["page"] if v4 else page_size(groups)
    ratio = v4["swa_ratio"] if v4 else inp.swa_full_tokens_ratio or SWA_FULL_TOKENS_RATIO
    split = bool(swa_cell and full_cell)
    if v4:
        full_tokens = tokens = v4["full_tokens"]
        swa_tokens = v4["swa_tokens"]
    elif split:  # HybridSWAPoolConfigurator: one floor over F + r S, the sliding pool int(full x r)
        full_tokens = max(0, math.floor(kv_rest / (full_cell + ratio * swa_cell))) // page * page
        swa_tokens = int(full_tokens * ratio) // page * page
        tokens = full_tokens
    else:  # DefaultPoolConfigurator: rest // cell, rounded down to whole pages (_apply_token_constraints)
        tokens = (max(0, math.floor(kv_rest / cell)) // page * page) if cell else 0
        full_tokens, swa_tokens = (tokens, 0) if full_cell else (0, tokens)
    logged = full_tokens if full_cell else swa_tokens
    pool = full_tokens * full_cell + swa_tokens * swa_cell + (v4["fixed_bytes"] if v4 else 0)  # the pools [B]
    s = {
        "engine": "sglang", "terms": {"total": free, "weights": w}, "mem_fraction_static": frac,
        "mem_fraction_origin": frac_origin,
        "block_size": page, "kv_cache_memory_bytes": rest, "kv_bytes_per_token_per_gpu": cell, "pool_bytes": pool,
        "block_bytes": cell * page, "num_gpu_blocks": logged // page, "kv_cache_tokens": logged, "kv_groups": 1,
        "padding_layers": 0, "full_cell_bytes": full_cell, "swa_cell_bytes": swa_cell, "window_tokens": window,
        "swa_full_tokens_ratio": ratio if split else None, "profiled_tokens": tokens,
        "full_kv_cache_tokens": full_tokens, "swa_kv_cache_tokens": swa_tokens, "multimodal_reserve_bytes": mm,
        "mamba_state_bytes_per_request": per_req, "max_mamba_cache_size": mamba_size if per_req else None,
        "mamba_pool_bytes": mamba_bytes, "mamba_size_given": inp.max_mamba_cache_size is not None,
        "mamba_full_memory_ratio": inp.mamba_full_memory_ratio or MAMBA_FULL_MEMORY_RATIO, "dsv4": v4,
    }
    if v4:  # what a full token costs, the SWA pool's share included (the configurator's coefficient)
        s["kv_bytes_per_token_per_gpu"] = v4["bytes_per_full_token"]
    s["max_concurrency"] = sglang_fits(s, inp.max_model_len, exact=True)
    s["max_num_seqs"] = v4["max_running_requests"] if v4 else \
        max_running_requests(logged, inp.max_model_len, mamba_size if per_req else None)
    return s


def _requests(s: dict, tokens: int) -> float:
    """Requests of ``tokens`` tokens the attention pools hold at once (fractional) [requests]."""
    if not tokens:
        return 0.0
    fits = [s["full_kv_cache_tokens"] / tokens] if s["full_cell_bytes"] else []
    if s["swa_cell_bytes"]:
        fits.append(s["swa_kv_cache_tokens"] / min(tokens, s["window_tokens"]))
    return min(fits) if fits else 0.0


def sglang_fits(sizing: dict, tokens: int, exact: bool = False):
    """Requests of ``tokens`` tokens the token pools hold at once [requests]: the full pool / L, the sliding pool
    / min(L, W); floored, and capped by the Mamba running-request limit, unless ``exact`` (the fractional figure)."""
    n = _requests(sizing, tokens)
    if exact:
        return n
    if sizing.get("max_num_seqs") is not None:
        n = min(n, sizing["max_num_seqs"])
    return math.floor(n)


def sglang_longest(sizing: dict) -> int:
    """The longest request that fits once [tokens]: the full pool's tokens (a sliding pool needs only W of them;
    a model of sliding layers only is bounded by its sliding pool)."""
    return sizing["full_kv_cache_tokens"] if sizing["full_cell_bytes"] else sizing["swa_kv_cache_tokens"]


def sglang_required_fraction(sizing: dict, tokens: int, requests: int) -> float:
    """mem_fraction_static that serves ``requests`` requests of ``tokens`` tokens [0..]: the attention pools they
    need (the sliding pool tied to the full pool by r, whole pages), plus the state pool, the multimodal reserve
    and the weights, over free memory."""
    full, swa, r, page = (sizing["full_cell_bytes"], sizing["swa_cell_bytes"], sizing["swa_full_tokens_ratio"],
                          sizing["block_size"])
    window_need = requests * min(tokens, sizing["window_tokens"] or tokens)
    if sizing.get("dsv4"):
        kv = dsv4_fraction_kv_bytes(sizing["dsv4"], tokens, requests)
    elif swa and full:  # full pool F_t with floor(kv / (F + r S)) >= F_t and int(F_t x r) // page x page >= window_need
        full_tokens = -(-max(requests * tokens, math.ceil(window_need / r)) // page) * page
        while int(full_tokens * r) // page * page < window_need:
            full_tokens += page
        kv = full_tokens * (full + r * swa)
    else:
        kv = -(-(requests * tokens if full else window_need) // page) * page * (full + swa)
    per_req = sizing["mamba_state_bytes_per_request"]
    if per_req and sizing["mamba_size_given"]:  # a given pool adds its K + 1 slots
        kv += sizing["mamba_pool_bytes"]
    elif per_req:  # a ratio pool: rest / (1 + r) stays for attention, and K must let every request run (K // 5)
        r = sizing["mamba_full_memory_ratio"]
        slots = MAMBA_CACHE_PER_RUNNING_REQUEST * requests
        kv = max(kv * (1 + r), (slots + 1) * per_req * (1 + r) / r)
    t = sizing["terms"]
    if t["total"].value <= 0:  # nothing free at start: no mem_fraction_static serves any request
        from kvcalc.out.errors import InputError

        raise InputError(f"--solve gpu-memory-utilization: SGLang sees {units.fmt_gib(t['total'].value)} free at "
                         f"start ({t['total'].origin}); lower --non-torch-memory or give --total-memory")
    return (kv + t["weights"].value + sizing["multimodal_reserve_bytes"]) / t["total"].value


def sglang_walk(sizing: dict, ideal: dict) -> list[dict]:
    """The walk from kvcalc's ideal budget to SGLang's pool, one term per row (per GPU)."""
    from kvcalc.memory.engine_vllm import _row

    t = sizing["terms"]
    per_token = sizing["kv_bytes_per_token_per_gpu"]
    frac = sizing["mem_fraction_static"]
    free = t["total"].value
    rows = [_row("ideal budget", None, ideal["kv_budget_bytes_per_gpu"], per_token,
                 f"kvcalc capacity: {units.fmt_gib(ideal['hbm_bytes_per_gpu'])} x "
                 f"{ideal['hbm_utilization']:g} - weights / GPUs - reserve")]
    steps = [
        ("free memory at start", free * ideal["hbm_utilization"] - ideal["weight_bytes_per_gpu"],
         f"{units.fmt_gib(free)} ({t['total'].origin}); the ideal's reserve dropped"),
        ("mem_fraction_static", free * frac - ideal["weight_bytes_per_gpu"],
         f"x {frac:g} ({sizing['mem_fraction_origin']}): activations and CUDA graphs live in the other "
         f"{1 - frac:.2f}"),
        ("model weights", free * frac - t["weights"].value,
         f"{units.fmt_gib(t['weights'].value)} ({t['weights'].origin})"),
    ]
    if sizing["mamba_state_bytes_per_request"]:
        how = ("--max-mamba-cache-size" if sizing["mamba_size_given"] else
               f"mamba_full_memory_ratio {sizing['mamba_full_memory_ratio']:g}: ratio / (1 + ratio) of the rest")
        steps.append(("Mamba state pool", steps[-1][1] - sizing["mamba_pool_bytes"],
                      f"{sizing['max_mamba_cache_size']:,} requests x "
                      f"{units.fmt_bytes_exact(sizing['mamba_state_bytes_per_request'])} ({how})"))
    prev = rows[0]["kv_memory_bytes"]
    for name, after, note in steps:
        rows.append(_row(name, after - prev, after, per_token, note))
        prev = after
    if sizing.get("dsv4"):
        rows.append(_row("DSV4 pools", 0.0, prev, per_token, dsv4_note(sizing["dsv4"])))
    else:
        rows.append(_row("page rounding", 0.0, prev, per_token, "page size 1: no rounding"))
    rows[-1]["tokens"] = sizing["profiled_tokens"]
    if sizing["swa_full_tokens_ratio"] is not None:
        r = sizing["swa_full_tokens_ratio"]
        rows.append({"step": "hybrid SWA pools", "delta_bytes": 0.0, "delta_gib": units.fmt_gib(0),
                     "kv_memory_bytes": prev, "kv_memory_gib": units.fmt_gib(prev),
                     "tokens": sizing["kv_cache_tokens"],
                     "note": f"full pool {sizing['full_kv_cache_tokens']:,} tokens x "
                             f"{units.fmt_bytes_exact(sizing['full_cell_bytes'])} + sliding pool "
                             f"{sizing['swa_kv_cache_tokens']:,} = {r:g} x as many x "
                             f"{units.fmt_bytes_exact(sizing['swa_cell_bytes'])} (swa_full_tokens_ratio)"})
    return rows
