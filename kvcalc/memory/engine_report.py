"""``kvcalc capacity --engine vllm|sglang`` and ``--solve``: the engine's figures beside the ideal, the walk
between them, and the inverse questions (what max_model_len fits, how many requests, what utilisation)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

from kvcalc.memory import engine_common as ec
from kvcalc.memory.capacity import CapacityInputs, capacity_row
from kvcalc.memory.engine_sglang import (sglang_fits, sglang_longest, sglang_required_fraction, sglang_sizing,
                                         sglang_walk)
from kvcalc.memory.engine_vllm import vllm_fits, vllm_required_kv_bytes, vllm_sizing, vllm_walk
from kvcalc.memory.engine_vllm_v4 import is_v4
from kvcalc.model import attention as att
from kvcalc.model.kv import request_bytes
from kvcalc.model.schema import HardwarePreset, LinkPreset, ModelPreset
from kvcalc.out import units

MAX_SEARCH_TOKENS = 2**40

ENGINE_COLUMNS = (
    ("model", "model", "text"),
    ("engine", "engine", "text"),
    ("kv_bytes_per_token_per_gpu", "KV/token/GPU", "bytes_exact"),
    ("kv_cache_memory_gib", "KV memory", "text"),
    ("num_gpu_blocks", "blocks", "int"),
    ("kv_cache_tokens", "KV tokens", "int"),
    ("ideal_tokens", "ideal tokens", "int"),
    ("max_model_len", "max_model_len", "int"),
    ("max_concurrency", "concurrency", "float"),
)
WALK_COLUMNS = (
    ("model", "model", "text"),
    ("step", "step", "text"),
    ("delta_gib", "change", "text"),
    ("kv_memory_gib", "KV memory", "text"),
    ("tokens", "tokens", "int"),
    ("note", "how", "text"),
)


def sizing(engine: str, model: ModelPreset, groups: list[att.GroupLayout], hw: HardwarePreset,
           einp: ec.EngineInputs) -> dict:
    """The engine's sizing of one model (vLLM or SGLang); a TP size the engine refuses is refused."""
    ec.check_tp(model, groups, einp.tp, engine)
    return (vllm_sizing if engine == "vllm" else sglang_sizing)(model, groups, hw, einp)


def engine_groups(engine: str, model: ModelPreset, opts: att.KvOptions) -> list[att.GroupLayout]:
    """The layer groups as the engine lays them out: SGLang keeps a Mamba/Gated-DeltaNet SSM state in FP32 by
    default (server_args mamba_ssm_dtype "float32"; sgl-project/sglang PR #15337 docs/basic_usage/qwen3.md: "The
    default setting is float32"), vLLM in the model dtype; --state-dtype overrides both."""
    if engine == "sglang" and opts.state_dtype is None:
        opts = replace(opts, state_dtype="fp32")
    if any(getattr(g, "k_eq_v", False) for g in model.layer_groups):
        # Gemma 4's attention_k_eq_v layers: both engines load K's weights into the K and the V slot of an ordinary
        # attention layer (vLLM 0.33 model_executor/models/gemma4.py; SGLang 0.5.23 models/gemma4_causal.py), so
        # the KV cache stores K and V: kv_heads x (head_dim + head_dim) per token, not the ideal's one tensor
        model = replace(model, layer_groups=[replace(g, k_eq_v=False) if getattr(g, "k_eq_v", False) else g
                                             for g in model.layer_groups])
    groups = att.resolve_groups(model, opts)
    if opts.kv_dtype is not None and is_v4(groups):
        _check_v4_kv_dtype(engine, opts.kv_dtype)
    return groups


# the --kv-dtype values each engine serves DeepSeek V4 with; its pools are then its default layout's
V4_KV_DTYPES = {
    # vLLM 0.33 models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype: on Hopper (FlashMLA) the fp8_ds_mla
    # layout only, "fp8*" mapped to it, anything else a ValueError at start-up
    "vllm": (("fp8",), "vLLM 0.33 keeps DeepSeek V4's KV cache only in its fp8_ds_mla layout on Hopper (FlashMLA; "
                       "models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype refuses other dtypes)"),
    # SGLang 0.5.23 arg_groups/overrides.py _deepseek_v4_kv_cache_dtype: fp8_e4m3 (the default) or bfloat16; its
    # DSV4PoolConfigurator sizes the same pools for both
    "sglang": (("fp8", "bf16"), "SGLang 0.5.23 serves DeepSeek V4 with kv_cache_dtype fp8_e4m3 or bfloat16 only "
                                "(arg_groups/overrides.py _deepseek_v4_kv_cache_dtype)"),
}


def _check_v4_kv_dtype(engine: str, kv_dtype: str) -> None:
    """Refuse a --kv-dtype the engine refuses for DeepSeek V4 (InputError naming --kv-dtype)."""
    from kvcalc.out.errors import InputError

    allowed, why = V4_KV_DTYPES[engine]
    if kv_dtype not in allowed:
        raise InputError(f"--kv-dtype {kv_dtype}: {why}; use --kv-dtype {' or '.join(allowed)}")


def pool_bytes_per_gpu(engine: str, model: ModelPreset, opts: att.KvOptions, hw: HardwarePreset,
                       tp: int, given: ec.EngineInputs | None = None) -> float:
    """The KV pool the engine allocates on one GPU [B]: vLLM's blocks x block bytes (the KV budget ``cost``,
    ``compare`` and ``trace`` use with --engine); SGLang's hybrid pools: the full pool's tokens x its bytes + the
    sliding pool's, its Mamba state pool left out. Inputs from ``given`` (``--engine-input``, values read from a
    log; its engine and TP are replaced by ``engine`` and ``tp``), the others estimated from the presets."""
    einp = replace(given, engine=engine, tp=tp) if given is not None else ec.EngineInputs(engine=engine, tp=tp)
    s = sizing(engine, model, engine_groups(engine, model, opts), hw, einp)
    return max(0.0, s["pool_bytes"])


def _ideal(name, model, hw_name, hw, link_name, link, inp, opts) -> dict:
    """kvcalc's ideal capacity row, with the reserve it subtracted."""
    return {**capacity_row(name, model, hw_name, hw, link_name, link, inp, opts),
            "reserve_bytes_per_gpu": inp.reserve_bytes_per_gpu}


def tp_note(groups: list[att.GroupLayout], tp: int) -> str:
    """How tensor parallelism splits this model's KV: GQA shards by head, a latent is replicated."""
    parts = []
    for g in groups:
        if g.kv_heads is None:
            parts.append(f"{g.name}: one latent, replicated on each of {tp} ranks")
        else:
            parts.append(f"{g.name}: {g.kv_heads} KV heads -> {-(-g.kv_heads // tp)} per rank")
    return f"TP {tp}: " + "; ".join(parts)


def log_lines(name: str, s: dict, max_model_len: int) -> list[str]:
    """What the engine's start-up log would print, from these inputs."""
    t = s["terms"]
    gib = units.fmt_gib
    if s["engine"] == "sglang":
        kv = s["full_kv_cache_tokens"] * s["full_cell_bytes"] + s["swa_kv_cache_tokens"] * s["swa_cell_bytes"]
        lines = [f"{name} (SGLang): free at start {gib(t['total'].value)} x mem_fraction_static "
                 f"{s['mem_fraction_static']:g} - weights {gib(t['weights'].value)} = "
                 f"{gib(s['kv_cache_memory_bytes'])}"]
        if s["mamba_state_bytes_per_request"]:
            lines.append(f"  Mamba state pool: max_mamba_cache_size {s['max_mamba_cache_size']:,} x "
                         f"{s['mamba_state_bytes_per_request']:,.0f} B = {gib(s['mamba_pool_bytes'])}; max running "
                         f"requests {s['max_num_seqs']:,}")
        if s.get("dsv4"):
            lines.append(f"  ({gib(s['kv_cache_memory_bytes'])} - {gib(s['dsv4']['fixed_bytes'])} C128 state) / "
                         f"{s['kv_bytes_per_token_per_gpu']:,.2f} B per full token = {s['profiled_tokens']:,} tokens "
                         f"(pages of {s['block_size']})")
        else:
            lines.append(f"  {gib(s['kv_cache_memory_bytes'] - s['mamba_pool_bytes'])} / "
                         f"{s['kv_bytes_per_token_per_gpu']:,.0f} B per token = {s['profiled_tokens']:,} tokens")
        if s["swa_full_tokens_ratio"] is not None:
            lines.append(f"  Use sliding window memory pool. full_layer_tokens={s['full_kv_cache_tokens']}, "
                         f"swa_layer_tokens={s['swa_kv_cache_tokens']}")
        return lines + [f"  KV Cache is allocated. #tokens: {s['kv_cache_tokens']}, K+V size: {gib(kv)} "
                        "(SGLang prints these GiB as 'GB')"]
    return [f"{name} (vLLM): total_gpu_memory ({gib(t['total'].value)}) x gpu_memory_utilization "
            f"({s['gpu_memory_utilization']:.2f}) = {gib(t['total'].value * s['gpu_memory_utilization'])}; "
            f"model weights take {gib(t['weights'].value)}; non_torch_memory takes {gib(t['non_torch'].value)}; "
            f"PyTorch activation peak memory takes {gib(t['activation'].value)}; CUDA graphs "
            f"{gib(t['cuda_graphs'].value)}; the rest of the memory reserved for KV Cache is "
            f"{gib(s['kv_cache_memory_bytes'])}",
            f"  # GPU blocks: {s['num_gpu_blocks']} = floor({s['kv_cache_memory_bytes']:,.0f} B / "
            f"{s['block_bytes']:,.0f} B per block" + (f": {s['pool_block_text']})" if s.get("pool_block_text") else
                                                       f" of {s['block_size']} tokens)"),
            f"  GPU KV cache size: {s['kv_cache_tokens']:,} tokens",
            f"  Maximum concurrency for {max_model_len:,} tokens per request: {s['max_concurrency']:.2f}x "
            f"({s['num_gpu_blocks']:,} / {s['blocks_per_request']:,} blocks per request)"]


def engine_result(models, hw_name: str, hw: HardwarePreset, link_name: str, link: LinkPreset,
                  inp: CapacityInputs, einp: ec.EngineInputs, opts: att.KvOptions = att.KvOptions()):
    """The ``kvcalc capacity --engine vllm|sglang`` result: figures, walk from the ideal, log lines."""
    from kvcalc.out.results import Column, Result, Table

    rows, walk, lines, notes = [], [], [], []
    for name, model in models:
        groups = engine_groups(einp.engine, model, opts)
        s = sizing(einp.engine, model, groups, hw, einp)
        ideal = _ideal(name, model, hw_name, hw, link_name, link, inp, opts)
        per_token = s["kv_bytes_per_token_per_gpu"]
        rows.append({
            "model": name, "engine": einp.engine, "hardware": hw_name, "gpus": einp.tp,
            "kv_bytes_per_token_per_gpu": per_token, "kv_cache_memory_bytes": s["kv_cache_memory_bytes"],
            "kv_cache_memory_gib": units.fmt_gib(s["kv_cache_memory_bytes"]),
            "num_gpu_blocks": s["num_gpu_blocks"], "block_size": s["block_size"],
            "kv_cache_tokens": s["kv_cache_tokens"],
            "ideal_tokens": max(0, math.floor(ideal["kv_budget_bytes_per_gpu"] / per_token)) if per_token else 0,
            "max_model_len": einp.max_model_len, "max_concurrency": s["max_concurrency"],
            "max_num_seqs": s.get("max_num_seqs"),
            "max_running_requests": (min(math.floor(s["max_concurrency"]), s["max_num_seqs"])
                                     if s.get("max_num_seqs") else math.floor(s["max_concurrency"])),
            "kv_groups": s["kv_groups"], "padding_layers": s["padding_layers"],
            "total_memory_bytes": s["terms"]["total"].value, "weights_bytes": s["terms"]["weights"].value,
            **{f"{k}_bytes": s["terms"][k].value for k in ("activation", "non_torch", "cuda_graphs")
               if k in s["terms"]},
            "gpu_memory_utilization": s.get("gpu_memory_utilization"),
            "mem_fraction_static": s.get("mem_fraction_static"),
            **({k: s[k] for k in ("full_kv_cache_tokens", "swa_kv_cache_tokens", "max_mamba_cache_size",
                                  "mamba_pool_bytes")} if einp.engine == "sglang" else {}),
        })
        steps = (vllm_walk if einp.engine == "vllm" else sglang_walk)(s, ideal)
        steps.insert(1, {"step": "TP sharding/replication", "delta_bytes": None, "delta_gib": "-",
                         "kv_memory_bytes": steps[0]["kv_memory_bytes"],
                         "kv_memory_gib": steps[0]["kv_memory_gib"], "tokens": steps[0]["tokens"],
                         "note": tp_note(groups, einp.tp) + f" = {per_token:,.0f} B/token per GPU"})
        walk.extend({"model": name, **r} for r in steps)
        lines.extend(log_lines(name, s, einp.max_model_len))
        if s["kv_cache_memory_bytes"] <= 0:
            notes.append(f"{name}: no memory left for the KV cache: the engine would refuse to start")
        elif s["kv_cache_tokens"] < einp.max_model_len and s["kv_groups"] == 1 and not s.get("swa_kv_cache_tokens"):
            notes.append(f"{name}: max_model_len {einp.max_model_len:,} exceeds the {s['kv_cache_tokens']:,} "
                         "tokens of KV cache: the engine would refuse to start")
        if s["kv_groups"] > 1:
            from kvcalc.memory.engine_vllm import groups_text, logged_formula

            notes.append(f"{name}: hybrid KV cache manager: {groups_text(s)}; the logged {s['kv_cache_tokens']:,} tokens = "
                         f"{logged_formula(s)}, while one request of full-attention tokens can hold "
                         f"{max_model_len_fit('vllm', s, None):,} tokens (sliding and state layers hold only a few blocks)")
    title = ("vLLM" if einp.engine == "vllm" else "SGLang") + " KV cache per GPU, as its start-up log reports it"
    main = Table("engine", title, tuple(Column(*c) for c in ENGINE_COLUMNS), tuple(rows))
    walk_t = Table("walk", "From kvcalc's ideal budget to the engine's figure, term by term (per GPU)",
                   tuple(Column(*c) for c in WALK_COLUMNS), tuple(walk))
    notes.append("Memory in GiB (2^30 B) as engine logs print it; the ideal budget uses the memory CUDA reports "
                 "where the hardware preset gives it (cuda_total_gib), else the datasheet's GB (1e9 B).")
    return Result("capacity", _inputs(models, hw_name, inp, einp, opts), main, (walk_t,), tuple(lines),
                  tuple(notes))


def _inputs(models, hw_name, inp: CapacityInputs, einp: ec.EngineInputs, opts: att.KvOptions) -> dict:
    from dataclasses import asdict

    return {"models": [n for n, _ in models], "hardware": hw_name, "gpus": inp.gpus,
            "context_tokens": inp.context_tokens, "hbm_utilization": inp.hbm_utilization,
            "reserve_bytes_per_gpu": inp.reserve_bytes_per_gpu, "kv_dtype": opts.kv_dtype, **asdict(einp)}


# ---------------------------------------------------------------- the inverse questions

def _largest(fits, hi: int = MAX_SEARCH_TOKENS) -> int:
    """The largest n in [0, hi] with fits(n) true, for fits monotone decreasing in n [tokens]."""
    if not fits(1):
        return 0
    lo, step = 1, 1
    while lo + step <= hi and fits(lo + step):
        lo += step
        step *= 2
    top = min(hi, lo + step)
    while lo < top:
        mid = (lo + top + 1) // 2
        lo, top = (mid, top) if fits(mid) else (lo, mid - 1)
    return lo


def max_model_len_fit(engine: str, s: Optional[dict], ideal_fit) -> int:
    """The longest request that fits once [tokens]: ideal, vLLM (blocks it needs <= pool) or SGLang (pool)."""
    if engine == "ideal":
        return _largest(ideal_fit)
    if engine == "sglang":
        return sglang_longest(s)
    return _largest(lambda n: vllm_fits(s, n) >= 1)


def solve_row(name: str, model: ModelPreset, hw_name: str, hw: HardwarePreset, link_name: str, link: LinkPreset,
              inp: CapacityInputs, einp: ec.EngineInputs, opts: att.KvOptions, solve: str, concurrency: int) -> dict:
    """One model's answer to ``--solve`` (raw units) with the engine's figures it came from."""
    groups = att.resolve_groups(model, opts)
    L = einp.max_model_len
    row = {"model": name, "engine": einp.engine, "solve": solve, "max_model_len": L, "concurrency": concurrency}
    if einp.engine == "ideal":
        ideal = _ideal(name, model, hw_name, hw, link_name, link, inp, opts)
        tp = 1 if inp.attention == "dp" else inp.gpus
        from kvcalc.memory.capacity import per_gpu_request_bytes

        if solve == "max-model-len":
            budget = ideal["kv_budget_bytes_per_gpu"]
            value = max_model_len_fit("ideal", None, lambda n: per_gpu_request_bytes(groups, n, tp) <= budget)
        elif solve == "max-concurrency":
            value = ideal["max_requests"]
        else:
            need = concurrency * per_gpu_request_bytes(groups, L, tp) + ideal["weight_bytes_per_gpu"] \
                + inp.reserve_bytes_per_gpu
            value = need / hw.device_memory_bytes
        row.update(value=value, kv_bytes_per_request=request_bytes(groups, L))
        return row
    s = sizing(einp.engine, model, engine_groups(einp.engine, model, opts), hw, einp)
    t = s["terms"]
    if solve == "max-model-len":
        value = max_model_len_fit(einp.engine, s, None)
    elif solve == "max-concurrency":
        value = s["max_concurrency"]
    elif einp.engine == "vllm":
        fixed = t["weights"].value + t["activation"].value + t["non_torch"].value + t["cuda_graphs"].value
        value = (vllm_required_kv_bytes(s, L, concurrency) + fixed) / t["total"].value
    else:  # SGLang: mem_fraction_static with free x m - weights >= the pools N requests of L need
        value = sglang_required_fraction(s, L, concurrency)
    row.update(value=value, kv_cache_tokens=s["kv_cache_tokens"], num_gpu_blocks=s["num_gpu_blocks"],
               requests_that_fit=(vllm_fits(s, L) if einp.engine == "vllm" else sglang_fits(s, L)))
    return row


SOLVE_WHAT = {"max-model-len": ("longest request that fits once", "tokens"),
              "max-concurrency": ("requests of max_model_len at once", "ratio"),
              "gpu-memory-utilization": ("utilisation needed", "float")}


def solve_result(models, hw_name: str, hw: HardwarePreset, link_name: str, link: LinkPreset, inp: CapacityInputs,
                 einp: ec.EngineInputs, opts: att.KvOptions, solve: str, concurrency: int):
    """The ``kvcalc capacity --solve ...`` result: one row per model."""
    from kvcalc.out.results import Column, Result, Table

    rows = tuple(solve_row(n, m, hw_name, hw, link_name, link, inp, einp, opts, solve, concurrency)
                 for n, m in models)
    what, kind = SOLVE_WHAT[solve]
    knob = "mem_fraction_static" if einp.engine == "sglang" else (
        "gpu_memory_utilization" if einp.engine == "vllm" else "hbm utilisation")
    if solve == "gpu-memory-utilization":
        what = f"{knob} for {concurrency:,} requests of {einp.max_model_len:,} tokens"
    cols = (Column("model", "model", "text"), Column("engine", "engine", "text"), Column("value", what, kind))
    notes = []
    for r in rows:
        if solve == "gpu-memory-utilization" and r["value"] > 1:
            notes.append(f"{r['model']}: needs {r['value']:.3f} > 1: does not fit on {einp.tp} GPU(s)")
    main = Table("solve", f"--solve {solve} ({einp.engine})", cols, rows)
    inputs = {**_inputs(models, hw_name, inp, einp, opts), "solve": solve, "concurrency": concurrency}
    return Result("capacity", inputs, main, (), (), tuple(notes))
