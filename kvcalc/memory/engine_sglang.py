"""What SGLang allocates for the KV cache: its token pool, reproduced term by term.

Follows SGLang v0.4.x-v0.5.x (model_runner.py / model_runner_kv_cache_mixin.py profile_max_num_token,
handle_max_mamba_cache, set_num_tokens_hybrid_swa; server_args.py defaults; sgl-project/sglang
python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py at commit 001ccef0072a4537d4ec6bdd50a73e6feb2c907d,
the same split as pool_configurator.py's HybridSWAPoolConfigurator at 003fca8027387a3d6565b2c08e497e3020ac6211):

  rest = free memory after loading the weights - free memory at start x (1 - mem_fraction_static)
       = free at start x mem_fraction_static - weights          (the weights are what loading took)
  max_total_num_tokens = floor(rest / cell_size), cell_size = bytes per token of every attention layer on this GPU

Page size 1 (no block rounding). Activations and CUDA graphs live in the (1 - mem_fraction_static) share
and are not subtracted. Default mem_fraction_static by TP size: 0.88 (1), 0.87 (>= 2), 0.85 (>= 4),
0.81 (>= 8), 0.79 (>= 16). "Free memory at start" defaults to the CUDA total minus non-torch memory.

Separate pools for hybrids:
- Sliding + full attention (hybrid SWA): the profile's memory, max_total_num_tokens x (F n_full + S n_swa), is split
  so the sliding pool holds r = swa_full_tokens_ratio (default 0.8) times the full pool's tokens:
  full_tokens = int(memory / (F n_full + r S n_swa)), swa_tokens = int(full_tokens x r) (F, S: one layer's bytes per
  token). The log's count is full_tokens. A request keeps about min(L, W) tokens in the sliding pool (SGLang frees
  tokens that leave the window, every few steps). This holds for the architectures SGLang marks hybrid SWA
  (model_config.is_hybrid_swa, e.g. Gemma 2/3, gpt-oss, Command-R, MiMo); for others it sizes every layer as full,
  which --swa-full-tokens-ratio 1 reproduces (then full_tokens = swa_tokens = the profiled tokens).
- Mamba / linear attention: a state pool first takes ratio / (1 + ratio) of the rest (mamba_full_memory_ratio,
  default 0.9), max_mamba_cache_size = floor(that / state bytes of one request), unless --max-mamba-cache-size
  sets it; the attention pool gets what is left, its cell counting the attention layers only. With the radix cache
  on, running requests are capped at max_mamba_cache_size // 3.
Not modelled: speculative-decoding draft pools, the SWA chunk cache sized from max_running_requests (radix cache
off), Llama 4's chunked-attention split, DeepSeek V4's compressed pools.
"""

from __future__ import annotations

import math
from typing import Optional

from kvcalc.memory import engine_common as ec
from kvcalc.model import attention as att
from kvcalc.model.schema import HardwarePreset, ModelPreset
from kvcalc.out import units

MEM_FRACTION_BY_TP = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))


def default_mem_fraction(tp: int) -> float:
    """SGLang's mem_fraction_static for a TP size (server_args.py, v0.4.x)."""
    return next(f for n, f in MEM_FRACTION_BY_TP if tp >= n)


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
MAMBA_CACHE_PER_RUNNING_REQUEST = 3  # MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO (radix cache on)


def _cells(groups: list[att.GroupLayout], tp: int) -> tuple[float, float, Optional[int]]:
    """(full-pool bytes per token, sliding-pool bytes per token, the smallest window) on one TP rank [B, tokens]."""
    full = sum(g.layers * ec.page_bytes_per_token(g, tp) for g in groups
               if g.kind != "sliding" and g.kind not in att.RECURRENT_KINDS)
    swa = sum(g.layers * ec.page_bytes_per_token(g, tp) for g in groups if g.kind == "sliding")
    window = min((g.window_tokens for g in groups if g.kind == "sliding"), default=None)
    return full, swa, window


def mamba_state_bytes_per_request(groups: list[att.GroupLayout], tp: int) -> float:
    """One request's recurrent state over all linear-attention/Mamba layers on one TP rank [B]
    (SGLang mamba_cache_per_req)."""
    return sum(g.layers * g.state_bytes_per_layer * att.per_gpu_share(g, tp) for g in groups
               if g.kind in att.RECURRENT_KINDS)


def mamba_pool(rest: float, per_req: float, inp: ec.EngineInputs) -> tuple[int, float]:
    """(max_mamba_cache_size [requests], bytes the state pool takes [B]) out of ``rest`` [B]."""
    if not per_req:
        return 0, 0.0
    if inp.max_mamba_cache_size is not None:
        size = inp.max_mamba_cache_size
    else:
        ratio = inp.mamba_full_memory_ratio or MAMBA_FULL_MEMORY_RATIO
        size = max(0, int(rest * ratio / (1 + ratio) // per_req))
    return size, size * per_req


def sglang_sizing(model: ModelPreset, groups: list[att.GroupLayout], hw: HardwarePreset,
                  inp: ec.EngineInputs) -> dict:
    """SGLang's figures for one model on one GPU of a TP group (raw SI units) and the terms behind them."""
    ec.check_engine_groups(groups, "sglang")
    free = free_at_start(hw, inp)
    frac = inp.mem_fraction_static or default_mem_fraction(inp.tp)
    w = ec.weights(model, inp)
    rest = (free.value - w.value) - free.value * (1 - frac)
    per_req = mamba_state_bytes_per_request(groups, inp.tp)
    mamba_size, mamba_bytes = mamba_pool(rest, per_req, inp)
    kv_rest = rest - mamba_bytes
    full_cell, swa_cell, window = _cells(groups, inp.tp)
    cell = full_cell + swa_cell
    tokens = max(0, math.floor(kv_rest / cell)) if cell else 0
    ratio = inp.swa_full_tokens_ratio or SWA_FULL_TOKENS_RATIO
    if swa_cell and full_cell:  # the hybrid SWA split: same memory, r x the full pool's tokens in the sliding pool
        full_tokens = int(tokens * cell / (full_cell + ratio * swa_cell))
        swa_tokens = int(full_tokens * ratio)
    else:
        full_tokens, swa_tokens = (tokens, 0) if full_cell else (0, tokens)
    logged = full_tokens if full_cell else swa_tokens
    pool = full_tokens * full_cell + swa_tokens * swa_cell  # what the attention pools take [B]
    s = {
        "engine": "sglang", "terms": {"total": free, "weights": w}, "mem_fraction_static": frac,
        "block_size": 1, "kv_cache_memory_bytes": rest, "kv_bytes_per_token_per_gpu": cell, "pool_bytes": pool,
        "block_bytes": cell, "num_gpu_blocks": logged, "kv_cache_tokens": logged, "kv_groups": 1,
        "padding_layers": 0, "full_cell_bytes": full_cell, "swa_cell_bytes": swa_cell, "window_tokens": window,
        "swa_full_tokens_ratio": ratio if swa_cell and full_cell else None, "profiled_tokens": tokens,
        "full_kv_cache_tokens": full_tokens, "swa_kv_cache_tokens": swa_tokens,
        "mamba_state_bytes_per_request": per_req, "max_mamba_cache_size": mamba_size if per_req else None,
        "mamba_pool_bytes": mamba_bytes, "mamba_size_given": inp.max_mamba_cache_size is not None,
        "mamba_full_memory_ratio": inp.mamba_full_memory_ratio or MAMBA_FULL_MEMORY_RATIO,
    }
    s["max_concurrency"] = sglang_fits(s, inp.max_model_len, exact=True)
    if per_req:  # init_memory: max_num_reqs = min(max(int(tokens / context_len x 512), 2048), 4096), then the cap
        default = min(max(int(logged / inp.max_model_len * 512), 2048), 4096)
        s["max_num_seqs"] = min(default, mamba_size // MAMBA_CACHE_PER_RUNNING_REQUEST)
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
    need (the sliding pool tied to the full pool by r), plus the state pool, plus the weights, over free memory."""
    full, swa, r = sizing["full_cell_bytes"], sizing["swa_cell_bytes"], sizing["swa_full_tokens_ratio"]
    need = requests * tokens
    if swa and full:  # the profiled tokens whose split gives the full pool enough (int() truncates: step up)
        full_tokens = max(need, math.ceil(requests * min(tokens, sizing["window_tokens"]) / r))
        profiled = math.ceil(full_tokens * (full + r * swa) / (full + swa))
        while int(profiled * (full + swa) / (full + r * swa)) < full_tokens:
            profiled += 1
        kv = profiled * (full + swa)
    else:
        kv = (need if full else requests * min(tokens, sizing["window_tokens"])) * (full + swa)
    if sizing["mamba_state_bytes_per_request"]:  # a given pool adds its bytes; a ratio pool is ratio x the rest
        kv = (kv + sizing["mamba_pool_bytes"] if sizing["mamba_size_given"]
              else kv * (1 + sizing["mamba_full_memory_ratio"]))
    t = sizing["terms"]
    return (kv + t["weights"].value) / t["total"].value


def sglang_walk(sizing: dict, ideal: dict) -> list[dict]:
    """The walk from kvcalc's ideal budget to SGLang's pool, one term per row (per GPU)."""
    from kvcalc.memory.engine_vllm import _row

    t = sizing["terms"]
    per_token = sizing["kv_bytes_per_token_per_gpu"]
    frac = sizing["mem_fraction_static"]
    free = t["total"].value
    rows = [_row("ideal budget", None, ideal["kv_budget_bytes_per_gpu"], per_token,
                 f"kvcalc capacity: datasheet {units.fmt_bytes(ideal['hbm_bytes_per_gpu'])} x "
                 f"{ideal['hbm_utilization']:g} - weights / GPUs - reserve")]
    steps = [
        ("free memory at start", free * ideal["hbm_utilization"] - ideal["weight_bytes_per_gpu"],
         f"{units.fmt_gib(free)} ({t['total'].origin}); the ideal's reserve dropped"),
        ("mem_fraction_static", free * frac - ideal["weight_bytes_per_gpu"],
         f"x {frac:g}: activations and CUDA graphs live in the other {1 - frac:.2f}"),
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
