"""What vLLM allocates for the KV cache: its sizing algorithm, reproduced term by term.

Follows vLLM 0.33.0 (the budget as gpu_worker determine_available_memory logs it; the layout in
``engine_vllm_layout``; the figures as v1/core/kv_cache_utils.py prints them), with ``--engine-version`` for the
two rules that changed on the way (older logs: kvcalc followed v0.6.4-v0.20 before):

  KV cache memory = total_gpu_memory (as CUDA reports it) x gpu_memory_utilization
                    - model weights - PyTorch activation peak - non-torch memory [- CUDA graphs, v0.21+]
  num_gpu_blocks  = floor(KV cache memory / bytes of one block of the shared pool)
  Maximum concurrency for max_model_len = num_gpu_blocks / blocks one request of max_model_len holds (summed
                    over the KV-cache groups: get_max_concurrency_for_kv_cache_config)
  GPU KV cache size = int(maximum concurrency x max_model_len) tokens (get_kv_cache_capacity; before 0.21:
                    num_gpu_blocks // groups x block size)
  in-flight tokens a sliding/chunked layer keeps = 2 x max_num_batched_tokens under async scheduling (the
                    default since 0.26, PR #47728), 1 x before.

Tensor parallel: GQA heads shard over ranks (ceil(kv_heads / tp) per rank); an MLA latent is replicated.
DeepSeek V4's compressed attention: its specs and packed groups in ``engine_vllm_v4``.
Not modelled: speculative-decoding draft layers, pipeline parallelism.
"""

from __future__ import annotations

import math

from kvcalc.memory import engine_common as ec
from kvcalc.memory import engine_vllm_mxfp4 as mxfp4
from kvcalc.memory.engine_vllm_layout import (DEFAULT_BLOCK_SIZE, KvGroup, block_layout,  # noqa: F401 (re-exported)
                                              blocks_per_request, enlarged_block_size, group_size_of, kv_groups,
                                              state_page_bytes)
from kvcalc.memory.engine_vllm_v4 import SPARSE_MLA_BLOCK_V4, is_v4, v4_block_layout
from kvcalc.model import attention as att
from kvcalc.model.schema import HardwarePreset, ModelPreset
from kvcalc.out import units

# vLLM 0.33 engine/arg_utils.py EngineArgs.get_batch_defaults, the OPENAI_API_SERVER column, by the CUDA total
# (current_platform.get_device_total_memory) and the device name: (lowest GiB, max_num_batched_tokens, max_num_seqs)
HUGE_GPU_GIB = 160    # ">= 160GB memory" (B200/B300, MI300X): 16,384 / 1,024
BIG_GPU_GIB = 70      # >= 70 GiB and not an A100 (PR #17885: large batches cut A100 throughput): 8,192 / 1,024
SERVER_TIERS = ((HUGE_GPU_GIB, 16384, 1024), (BIG_GPU_GIB, 8192, 1024), (0, 2048, 256))
ASYNC_SCHEDULING_SINCE = (0, 26)   # in-flight tokens 2 x batched: PR #47728 (issue #49878: v0.25.1 -> v0.26)
GROUP_AWARE_LOG_SINCE = (0, 21)    # "GPU KV cache size" = int(concurrency x max_model_len): PR #42206 era


def in_flight_tokens(batched: int, version: tuple) -> int:
    """VllmConfig.max_in_flight_tokens [tokens]: 2 concurrent batches under async scheduling (default from 0.26,
    PP 1), else 1, times max_num_batched_tokens."""
    return batched * (2 if version >= ASYNC_SCHEDULING_SINCE else 1)


def logged_tokens(num_blocks: int, per_request: int, max_model_len: int, kgroups: list, version: tuple) -> int:
    """The logged "GPU KV cache size" [tokens]: vLLM 0.21+ ``get_kv_cache_capacity`` (kv_cache_utils.py)
    int(num_blocks / blocks per request x max_model_len); before: num_blocks // groups x the smallest block size
    (what vLLM 0.19/0.20 printed: issue #40691)."""
    if version >= GROUP_AWARE_LOG_SINCE:
        return int(num_blocks / per_request * max_model_len) if per_request else 0
    return num_blocks // len(kgroups) * min(g.block_size for g in kgroups)


def server_tier(total_bytes: float, device_name: str = "") -> tuple[int, int]:
    """vLLM's online-server (max_num_batched_tokens, max_num_seqs) for a GPU of ``total_bytes`` as CUDA reports it
    (get_batch_defaults, vllm 0.33 engine/arg_utils.py): 16,384 / 1,024 from 160 GiB; 8,192 / 1,024 from 70 GiB
    unless the device name says A100 (``"a100" not in device_name``); else 2,048 / 256."""
    for gib, batched, seqs in SERVER_TIERS:
        if total_bytes >= units.gib_to_bytes(gib) and not (gib == BIG_GPU_GIB and "a100" in device_name.lower()):
            return batched, seqs
    return SERVER_TIERS[-1][1:]


def defaults(total_bytes: float, inp: ec.EngineInputs, device_name: str = "") -> tuple[int | None, int, int]:
    """(block_size, max_num_batched_tokens, max_num_seqs): given, or vLLM's online-server defaults for this GPU
    (``server_tier``; block size None = the attention backend's, see engine_vllm_layout)."""
    batched, seqs = server_tier(total_bytes, device_name)
    return inp.block_size, inp.max_num_batched_tokens or batched, inp.max_num_seqs or seqs


def vllm_sizing(model: ModelPreset, groups: list[att.GroupLayout], hw: HardwarePreset,
                inp: ec.EngineInputs) -> dict:
    """vLLM's figures for one model on one GPU of a TP group (raw SI units) and the terms that produce them."""
    ec.check_engine_groups(groups, "vllm")
    version = ec.engine_version(inp)
    total = ec.total_memory(hw, inp)
    block_size, batched, max_seqs = defaults(total.value, inp, hw.display_name)
    terms = {"total": total, "weights": _weights(model, hw, inp),
             "activation": ec.activation(model, inp, batched, max_seqs), "non_torch": ec.non_torch(inp),
             "cuda_graphs": ec.cuda_graphs(inp)}
    kv_memory = (total.value * inp.gpu_memory_utilization - terms["weights"].value - terms["activation"].value
                 - terms["non_torch"].value - terms["cuda_graphs"].value)
    if is_v4(groups):  # DeepSeek V4: its own specs and packed groups (engine_vllm_v4); the latent is replicated
        if block_size not in (None, SPARSE_MLA_BLOCK_V4):
            from kvcalc.out.errors import InputError

            raise InputError(f"--block-size {block_size}: vLLM's DeepSeek V4 backend takes only "
                             f"{SPARSE_MLA_BLOCK_V4}-token blocks (DeepseekV4SparseMLABackend)")
        lay = v4_block_layout(model)
    else:
        lay = block_layout(groups, inp.tp, block_size)
    kgroups, block_bytes = lay["kgroups"], lay["block_bytes"]
    # get_kv_cache_config_from_groups: num_blocks = available_memory // bytes_per_block
    num_blocks = max(0, math.floor(kv_memory / block_bytes)) if block_bytes else 0
    in_flight = in_flight_tokens(batched, version)
    per_request = blocks_per_request(kgroups, inp.max_model_len, None, in_flight)
    return {
        "engine": "vllm", "engine_version": ".".join(map(str, version)), "terms": terms,
        "gpu_memory_utilization": inp.gpu_memory_utilization, "max_num_batched_tokens": batched,
        "max_in_flight_tokens": in_flight, "max_num_seqs": max_seqs,
        "kv_cache_memory_bytes": kv_memory, "num_gpu_blocks": num_blocks,
        "blocks_per_request": per_request, **lay, "pool_bytes": num_blocks * lay["block_bytes"],
        "kv_cache_tokens": logged_tokens(num_blocks, per_request, inp.max_model_len, kgroups, version),
        "max_concurrency": num_blocks / per_request if per_request else 0.0,
    }


def _weights(model: ModelPreset, hw: HardwarePreset, inp: ec.EngineInputs) -> ec.Resolved:
    """Weights one GPU holds [B]: the checkpoint's share, plus what vLLM's MXFP4 MoE backend adds on a GPU
    without FP4 tensor cores (engine_vllm_mxfp4: Marlin's padding, Triton's second copy of the scales)."""
    w = ec.weights(model, inp)
    extra = None if inp.weights_bytes is not None else mxfp4.extra_bytes(model, hw, inp.tp)
    if extra is None:
        return w
    return ec.Resolved(w.value + extra[0], f"{w.origin} + {units.fmt_gib(extra[0])}: {extra[1]}")


def vllm_fits(sizing: dict, tokens: int) -> int:
    """Requests of ``tokens`` tokens the pool holds at once [requests] (floor of vLLM's max concurrency)."""
    need = blocks_per_request(sizing["kgroups"], tokens, None, sizing["max_in_flight_tokens"])
    return sizing["num_gpu_blocks"] // need if need else 0


def vllm_required_kv_bytes(sizing: dict, tokens: int, requests: int) -> float:
    """KV cache memory vLLM needs for ``requests`` concurrent requests of ``tokens`` tokens [B]."""
    need = blocks_per_request(sizing["kgroups"], tokens, None, sizing["max_in_flight_tokens"])
    return need * requests * sizing["block_bytes"]


def vllm_walk(sizing: dict, ideal: dict) -> list[dict]:
    """The walk from kvcalc's ideal budget to vLLM's figure, one term per row (per GPU)."""
    t = sizing["terms"]
    per_token = sizing["kv_bytes_per_token_per_gpu"]
    util = sizing["gpu_memory_utilization"]
    rows = [_row("ideal budget", None, ideal["kv_budget_bytes_per_gpu"], per_token,
                 f"kvcalc capacity: {units.fmt_gib(ideal['hbm_bytes_per_gpu'])} x "
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
                     f"{sizing['num_gpu_blocks']:,} blocks x {units.fmt_bytes_exact(sizing['block_bytes'])} "
                     f"({sizing['pool_block_text']})" if sizing.get("pool_block_text") else
                     f"{sizing['num_gpu_blocks']:,} blocks of {sizing['block_size']} tokens x "
                     f"{units.fmt_bytes_exact(sizing['block_bytes'])}"))
    if sizing["kv_groups"] == 1:
        rows[-1]["tokens"] = sizing["kv_cache_tokens"]
    if sizing["kv_groups"] > 1:
        rows.append({"step": "hybrid grouping/padding", "delta_bytes": None, "delta_gib": "-",
                     "kv_memory_bytes": pooled, "kv_memory_gib": units.fmt_gib(pooled),
                     "tokens": sizing["kv_cache_tokens"],
                     "note": groups_text(sizing) + "; logged = " + logged_formula(sizing)})
    if sizing["state_page_bytes"]:
        pad = sizing["page_bytes"] / sizing["state_page_bytes"] - 1
        held = next(g.state_blocks for g in sizing["kgroups"] if g.kind == "state")
        note = (f"attention block {sizing['requested_block_size']} -> {sizing['block_size']} tokens so a page "
                f"({units.fmt_bytes_exact(sizing['page_bytes'])}) holds a state page "
                f"({units.fmt_bytes_exact(sizing['state_page_bytes'])}, padded {100 * pad:.2f}%); a state group "
                f"holds {held} block{'s' if held > 1 else ''} per request (mamba_cache_mode "
                f"{sizing['mamba_cache_mode']})")
    else:
        note = "none: no Mamba/linear-attention layers"
    rows.append({"step": "page enlargement", "delta_bytes": 0.0, "delta_gib": units.fmt_gib(0),
                 "kv_memory_bytes": pooled, "kv_memory_gib": units.fmt_gib(pooled),
                 "tokens": sizing["kv_cache_tokens"], "note": note})
    return rows


def groups_text(sizing: dict) -> str:
    """The KV-cache groups as text: 'N groups of G layers, P padding', or V4's packed groups."""
    return sizing.get("groups_text") or (f"{sizing['kv_groups']} groups of {sizing['group_size']} layers, "
                                         f"{sizing['padding_layers']} padding")


def logged_formula(sizing: dict) -> str:
    """How the logged token count came about, as text."""
    if tuple(int(p) for p in sizing["engine_version"].split(".")) >= GROUP_AWARE_LOG_SINCE:
        return (f"int({sizing['num_gpu_blocks']:,} / {sizing['blocks_per_request']:,} blocks per request x "
                f"max_model_len)")
    return f"{sizing['num_gpu_blocks']:,} // {sizing['kv_groups']} x {sizing['block_size']}"


def _row(step: str, delta, after: float, per_token: float, note: str) -> dict:
    return {"step": step, "delta_bytes": delta, "delta_gib": "-" if delta is None else units.fmt_gib(delta),
            "kv_memory_bytes": after, "kv_memory_gib": units.fmt_gib(after),
            "tokens": max(0, math.floor(after / per_token)) if per_token else 0, "note": note}
