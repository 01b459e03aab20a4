"""What vLLM allocates for the KV cache: its sizing algorithm, reproduced term by term.

Follows vLLM v0.6.4-v0.20 (worker determine_num_available_blocks / gpu_worker determine_available_memory and
v1/core/kv_cache_utils.py), as its start-up log prints it:

  KV cache memory = total_gpu_memory (as CUDA reports it) x gpu_memory_utilization
                    - model weights - PyTorch activation peak - non-torch memory [- CUDA graphs, v0.21+]
  num_gpu_blocks  = floor(KV cache memory / (block_size x bytes per token of every layer on this GPU))
  GPU KV cache size = num_gpu_blocks x block_size tokens
  Maximum concurrency for max_model_len = num_gpu_blocks / blocks one request of max_model_len needs

Tensor parallel: GQA heads shard over ranks (ceil(kv_heads / tp) per rank); an MLA latent is replicated.
Hybrid models (sliding + full layers, the hybrid KV cache manager): layers of each attention type are cut into
KV-cache groups of ``group_size`` layers (the smallest type's layer count, or the largest when it is under 1.5x
the smallest), padding the last group of a type; every group shares one pool of blocks of group_size pages, and
the log reports num_blocks // num_groups x block_size tokens. A sliding layer keeps at most
min(window - 1 + max_num_batched_tokens, max_model_len) tokens (+ 1 block) per request.
Mamba/linear-attention hybrids (HybridAttentionMambaModelConfig): the attention block is enlarged to
16 x ceil(state page / (16 x attention bytes per token per layer)) tokens so one attention page holds a state
page, and the state page is padded up to it; a state group holds one block per request, so the logged count
(blocks // groups x block size) undercounts what one request's attention layers can hold by about the number of
groups. Not modelled: speculative-decoding draft layers, pipeline parallelism, prefix caching's extra Mamba blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvcalc.memory import engine_common as ec
from kvcalc.model import attention as att
from kvcalc.model.schema import HardwarePreset, ModelPreset
from kvcalc.out import units

DEFAULT_BLOCK_SIZE = 16
BIG_GPU_GIB = 70      # vLLM arg_utils: GPUs with >= 70 GiB get the larger server defaults
SERVER_BATCHED_TOKENS = {True: 8192, False: 2048}
SERVER_MAX_SEQS = {True: 1024, False: 256}
HYBRID_MAX_RATIO = 1.5  # kv_cache_utils: group_size = max layers when max < 1.5 x min


@dataclass(frozen=True)
class KvGroup:
    """One vLLM KV-cache group: an attention type's share of layers (real + padding) and its token rule."""

    kind: str                 # full | sliding | state (linear attention, Mamba: one block per request)
    window_tokens: int | None
    layers: int               # real layers in the group
    padding: int              # padding layers up to group_size


def _buckets(groups: list[att.GroupLayout]) -> dict:
    """Layers by attention spec: full-like layers together, sliding layers by window [layers]."""
    out: dict = {}
    for g in groups:
        if g.kind in att.RECURRENT_KINDS:
            key = ("state", None)
        else:
            key = ("sliding", g.window_tokens) if g.kind == "sliding" else ("full", None)
        out[key] = out.get(key, 0) + g.layers
    return out


def group_size_of(counts: list[int]) -> int:
    """vLLM's group size: the smallest type's layer count, or the largest when it is under 1.5x the smallest."""
    lo, hi = min(counts), max(counts)
    return hi if hi < lo * HYBRID_MAX_RATIO else lo


def kv_groups(groups: list[att.GroupLayout]) -> tuple[int, list[KvGroup]]:
    """(group_size, groups): the hybrid manager's grouping, one group of all layers when there is one type.

    22 sliding + 4 full layers: group_size 4; sliding 22 = 5 groups of 4 + one of 2 padded with 2 layers,
    full 4 = 1 group: 7 groups of 4, 2 padding layers ("may waste at most 2 / 22 = 9.09%").
    """
    buckets = _buckets(groups)
    if len(buckets) == 1:
        (kind, window), n = next(iter(buckets.items()))
        return n, [KvGroup(kind, window, n, 0)]
    size = group_size_of(list(buckets.values()))
    out = []
    for (kind, window), n in buckets.items():
        k = math.ceil(n / size)
        for i in range(k):
            real = min(size, n - i * size)
            out.append(KvGroup(kind, window, real, size - real))
    return size, out


def blocks_per_request(kgroups: list[KvGroup], tokens: int, block_size: int, batched_tokens: int) -> int:
    """Blocks one request of ``tokens`` tokens holds across all KV-cache groups (vLLM max_memory_usage_bytes):
    full: ceil(L / B); sliding: ceil(min(W - 1 + max_num_batched_tokens, L) / B) + 1 [blocks]."""
    total = 0
    for g in kgroups:
        if g.kind == "state":
            total += 1
        elif g.kind == "sliding":
            total += math.ceil(min(g.window_tokens - 1 + batched_tokens, tokens) / block_size) + 1
        else:
            total += math.ceil(tokens / block_size)
    return total


KERNEL_BLOCK_ALIGN = 16  # attention block sizes are multiples of 16 tokens


def state_page_bytes(groups: list[att.GroupLayout], tp: int) -> float:
    """The largest per-layer state of a linear-attention/Mamba layer on one rank (one page) [B]; 0 if none."""
    return max((g.state_bytes_per_layer * att.per_gpu_share(g, tp) for g in groups
                if g.kind in att.RECURRENT_KINDS), default=0.0)


def enlarged_block_size(attn_bytes_per_token: float, state_page: float, block_size: int) -> int:
    """vLLM's attention block size for a Mamba/linear hybrid: at least 16 x ceil(state page / (16 x attention
    bytes per token per layer)) tokens, so one attention page holds one state page [tokens]."""
    need = KERNEL_BLOCK_ALIGN * math.ceil(state_page / (KERNEL_BLOCK_ALIGN * attn_bytes_per_token))
    return max(block_size, need)


def defaults(total_bytes: float, inp: ec.EngineInputs) -> tuple[int, int, int]:
    """(block_size, max_num_batched_tokens, max_num_seqs): given, or vLLM's online-server defaults
    (8,192 batched tokens and 1,024 sequences on GPUs of >= 70 GiB, else 2,048 and 256; block 16)."""
    big = total_bytes >= units.gib_to_bytes(BIG_GPU_GIB)
    return (inp.block_size or DEFAULT_BLOCK_SIZE, inp.max_num_batched_tokens or SERVER_BATCHED_TOKENS[big],
            inp.max_num_seqs or SERVER_MAX_SEQS[big])


def block_layout(groups: list[att.GroupLayout], tp: int, block_size: int) -> dict:
    """vLLM's paged layout on one TP rank: block size (enlarged for Mamba/linear hybrids), KV-cache groups, the
    page of one layer and the bytes one block of the shared pool takes [tokens, B]."""
    attn = [g for g in groups if g.kind not in att.RECURRENT_KINDS]
    per_token = sum(g.layers * ec.page_bytes_per_token(g, tp) for g in attn)
    attn_token_layer = max(ec.page_bytes_per_token(g, tp) for g in attn)
    state_page = state_page_bytes(groups, tp)
    requested = block_size
    if state_page:
        block_size = enlarged_block_size(attn_token_layer, state_page, block_size)
    size, kgroups = kv_groups(groups)
    page = attn_token_layer * block_size
    return {"block_size": block_size, "requested_block_size": requested, "group_size": size, "kgroups": kgroups,
            "kv_groups": len(kgroups), "padding_layers": sum(g.padding for g in kgroups), "page_bytes": page,
            "state_page_bytes": state_page, "kv_bytes_per_token_per_gpu": per_token,
            "block_bytes": page * size if len(kgroups) > 1 else per_token * block_size}


def vllm_sizing(model: ModelPreset, groups: list[att.GroupLayout], hw: HardwarePreset,
                inp: ec.EngineInputs) -> dict:
    """vLLM's figures for one model on one GPU of a TP group (raw SI units) and the terms that produce them."""
    ec.check_engine_groups(groups, "vllm")
    total = ec.total_memory(hw, inp)
    block_size, batched, max_seqs = defaults(total.value, inp)
    terms = {"total": total, "weights": ec.weights(model, inp),
             "activation": ec.activation(model, inp, batched, max_seqs), "non_torch": ec.non_torch(inp),
             "cuda_graphs": ec.cuda_graphs(inp)}
    kv_memory = (total.value * inp.gpu_memory_utilization - terms["weights"].value - terms["activation"].value
                 - terms["non_torch"].value - terms["cuda_graphs"].value)
    lay = block_layout(groups, inp.tp, block_size)
    block_size, size, kgroups, block_bytes = lay["block_size"], lay["group_size"], lay["kgroups"], lay["block_bytes"]
    num_blocks = max(0, math.floor(kv_memory / block_bytes)) if block_bytes else 0
    tokens = (num_blocks // len(kgroups)) * block_size
    per_request = blocks_per_request(kgroups, inp.max_model_len, block_size, batched)
    return {
        "engine": "vllm", "terms": terms, "gpu_memory_utilization": inp.gpu_memory_utilization,
        "block_size": block_size, "max_num_batched_tokens": batched, "max_num_seqs": max_seqs,
        "kv_cache_memory_bytes": kv_memory, "num_gpu_blocks": num_blocks, "kv_cache_tokens": tokens,
        "blocks_per_request": per_request, **lay, "pool_bytes": num_blocks * lay["block_bytes"],
        "max_concurrency": num_blocks / per_request if per_request else 0.0,
    }


def vllm_fits(sizing: dict, tokens: int) -> int:
    """Requests of ``tokens`` tokens the pool holds at once [requests] (floor of vLLM's max concurrency)."""
    need = blocks_per_request(sizing["kgroups"], tokens, sizing["block_size"], sizing["max_num_batched_tokens"])
    return sizing["num_gpu_blocks"] // need if need else 0


def vllm_required_kv_bytes(sizing: dict, tokens: int, requests: int) -> float:
    """KV cache memory vLLM needs for ``requests`` concurrent requests of ``tokens`` tokens [B]."""
    need = blocks_per_request(sizing["kgroups"], tokens, sizing["block_size"], sizing["max_num_batched_tokens"])
    return need * requests * sizing["block_bytes"]


def vllm_walk(sizing: dict, ideal: dict) -> list[dict]:
    """The walk from kvcalc's ideal budget to vLLM's figure, one term per row (per GPU)."""
    t = sizing["terms"]
    per_token = sizing["kv_bytes_per_token_per_gpu"]
    util = sizing["gpu_memory_utilization"]
    rows = [_row("ideal budget", None, ideal["kv_budget_bytes_per_gpu"], per_token,
                 f"kvcalc capacity: datasheet {units.fmt_bytes(ideal['hbm_bytes_per_gpu'])} x "
                 f"{ideal['hbm_utilization']:g} - weights / GPUs - reserve")]
    steps = [
        ("memory total as CUDA reports it", t["total"].value * ideal["hbm_utilization"]
         - ideal["weight_bytes_per_gpu"],
         f"{units.fmt_gib(t['total'].value)} ({t['total'].origin}); the ideal's reserve dropped"),
        ("gpu_memory_utilization", t["total"].value * util - ideal["weight_bytes_per_gpu"], f"x {util:g}"),
        ("model weights", t["total"].value * util - t["weights"].value,
         f"{units.fmt_gib(t['weights'].value)} ({t['weights'].origin})"),
    ]
    left = steps[-1][1]
    for key, name in (("activation", "activation peak"), ("non_torch", "non-torch memory"),
                      ("cuda_graphs", "CUDA graphs")):
        left -= t[key].value
        steps.append((name, left, f"{units.fmt_gib(t[key].value)} ({t[key].origin})"))
    prev = rows[0]["kv_memory_bytes"]
    for name, after, note in steps:
        rows.append(_row(name, after - prev, after, per_token, note))
        prev = after
    pooled = sizing["num_gpu_blocks"] * sizing["block_bytes"]
    rows.append(_row("block rounding", pooled - prev, pooled, per_token,
                     f"{sizing['num_gpu_blocks']:,} blocks of {sizing['block_size']} tokens x "
                     f"{units.fmt_bytes_exact(sizing['block_bytes'])}"))
    if sizing["kv_groups"] == 1:
        rows[-1]["tokens"] = sizing["kv_cache_tokens"]
    if sizing["kv_groups"] > 1:
        rows.append({"step": "hybrid grouping/padding", "delta_bytes": None, "delta_gib": "-",
                     "kv_memory_bytes": pooled, "kv_memory_gib": units.fmt_gib(pooled),
                     "tokens": sizing["kv_cache_tokens"],
                     "note": f"{sizing['kv_groups']} groups of {sizing['group_size']} layers, "
                             f"{sizing['padding_layers']} padding; logged = {sizing['num_gpu_blocks']:,} // "
                             f"{sizing['kv_groups']} x {sizing['block_size']}"})
    if sizing["state_page_bytes"]:
        pad = sizing["page_bytes"] / sizing["state_page_bytes"] - 1
        note = (f"attention block {sizing['requested_block_size']} -> {sizing['block_size']} tokens so a page "
                f"({units.fmt_bytes_exact(sizing['page_bytes'])}) holds a state page "
                f"({units.fmt_bytes_exact(sizing['state_page_bytes'])}, padded {100 * pad:.2f}%); a state group "
                "holds 1 block per request")
    else:
        note = "none: no Mamba/linear-attention layers"
    rows.append({"step": "page enlargement", "delta_bytes": 0.0, "delta_gib": units.fmt_gib(0),
                 "kv_memory_bytes": pooled, "kv_memory_gib": units.fmt_gib(pooled),
                 "tokens": sizing["kv_cache_tokens"], "note": note})
    return rows


def _row(step: str, delta, after: float, per_token: float, note: str) -> dict:
    return {"step": step, "delta_bytes": delta, "delta_gib": "-" if delta is None else units.fmt_gib(delta),
            "kv_memory_bytes": after, "kv_memory_gib": units.fmt_gib(after),
            "tokens": max(0, math.floor(after / per_token)) if per_token else 0, "note": note}
