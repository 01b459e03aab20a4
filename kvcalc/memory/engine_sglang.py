"""What SGLang allocates for the KV cache: its token pool, reproduced term by term.

Follows SGLang v0.4.x (model_runner.py profile_max_num_token, server_args.py mem_fraction_static defaults):

  rest = free memory after loading the weights - free memory at start x (1 - mem_fraction_static)
       = free at start x mem_fraction_static - weights          (the weights are what loading took)
  max_total_num_tokens = floor(rest / cell_size), cell_size = bytes per token of every layer on this GPU

Page size 1 (no block rounding). Activations and CUDA graphs live in the (1 - mem_fraction_static) share
and are not subtracted. Default mem_fraction_static by TP size: 0.88 (1), 0.87 (>= 2), 0.85 (>= 4),
0.81 (>= 8), 0.79 (>= 16). "Free memory at start" defaults to the CUDA total minus non-torch memory.
Not modelled: SGLang's separate sliding-window and Mamba pools (their layers are sized as full here, noted).
"""

from __future__ import annotations

import math

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


def sglang_sizing(model: ModelPreset, groups: list[att.GroupLayout], hw: HardwarePreset,
                  inp: ec.EngineInputs) -> dict:
    """SGLang's figures for one model on one GPU of a TP group (raw SI units) and the terms behind them."""
    ec.check_engine_groups(groups, "sglang")
    free = free_at_start(hw, inp)
    frac = inp.mem_fraction_static or default_mem_fraction(inp.tp)
    w = ec.weights(model, inp)
    rest = (free.value - w.value) - free.value * (1 - frac)
    cell = sum(g.layers * ec.page_bytes_per_token(g, inp.tp) for g in groups)
    tokens = max(0, math.floor(rest / cell)) if cell else 0
    return {
        "engine": "sglang", "terms": {"total": free, "weights": w}, "mem_fraction_static": frac,
        "block_size": 1, "kv_cache_memory_bytes": rest, "kv_bytes_per_token_per_gpu": cell,
        "block_bytes": cell, "num_gpu_blocks": tokens, "kv_cache_tokens": tokens, "kv_groups": 1,
        "padding_layers": 0, "sliding": any(g.kind == "sliding" for g in groups),
        "max_concurrency": tokens / inp.max_model_len,
    }


def sglang_fits(sizing: dict, tokens: int) -> int:
    """Requests of ``tokens`` tokens the token pool holds at once [requests]."""
    return sizing["kv_cache_tokens"] // tokens


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
    prev = rows[0]["kv_memory_bytes"]
    for name, after, note in steps:
        rows.append(_row(name, after - prev, after, per_token, note))
        prev = after
    rows.append(_row("page rounding", 0.0, prev, per_token, "page size 1: no rounding"))
    if sizing["sliding"]:
        rows[-1]["note"] += "; sliding layers sized as full (SGLang's SWA pool not modelled)"
    return rows
