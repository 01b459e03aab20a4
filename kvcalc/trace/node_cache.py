"""The prefix cache a node can hold: its KV budget after the weights, in tokens of the trace's blocks, so a
hit-rate curve can mark where a real node sits (``kvcalc trace --curve --model M --hardware H --gpus N``).

tokens = floor(per-GPU budget / per-GPU bytes of one block) x block tokens, where the per-GPU budget is
``capacity_arrays``'s (HBM x utilisation - weights / GPUs) and a block's per-GPU bytes = sum over layer groups of
the GPU's share (full attention shards by KV head, a latent head is replicated) x the group's paged block bytes.
Per-request fixed state (V4's compressor tail) is not a cached prefix and is left out.
With an engine (``--engine vllm|sglang``) the per-GPU budget is the KV pool that engine allocates instead, its
inputs estimated from the presets (:func:`kvcalc.memory.engine_report.pool_bytes_per_gpu`: blocks x block bytes),
regrouped into the trace's blocks.
"""

from __future__ import annotations

import math

from kvcalc.memory.blocks import group_block_bytes
from kvcalc.memory.capacity import capacity_arrays
from kvcalc.model import attention as att
from kvcalc.model.schema import HardwarePreset, ModelPreset
from kvcalc.out.errors import InputError


def node_cache_tokens(model: ModelPreset, hw: HardwarePreset, gpus: int, block_tokens: int,
                      opts: att.KvOptions = att.KvOptions(), hbm_utilization: float = 0.9,
                      engine: str = "ideal", engine_inputs=None) -> int:
    """Tokens of whole ``block_tokens`` blocks the node's KV budget (ideal, or the ``engine``'s KV pool) holds
    [tokens] (InputError if the weights leave no room); ``engine_inputs``: the engine's inputs read from a log
    (an EngineInputs, --engine-input), None: estimated."""
    groups = att.resolve_groups(model, opts)
    if engine == "ideal":
        budget_gpu = capacity_arrays(groups, model.weight_bytes, hw.device_memory_bytes, block_tokens, gpus, hbm_utilization,
                                     0.0)["kv_budget_bytes_per_gpu"]
    else:
        from kvcalc.memory.engine_report import pool_bytes_per_gpu

        budget_gpu = pool_bytes_per_gpu(engine, model, opts, hw, gpus, engine_inputs)
    if budget_gpu <= 0:
        what = "KV budget" if engine == "ideal" else f"{engine} KV pool"
        raise InputError(f"--hardware: the weights leave no {what} on {gpus} x {hw.display_name}")
    per_gpu_block = sum(att.per_gpu_share(g, gpus) * group_block_bytes(g, block_tokens, model.page_align_bytes)
                        for g in groups)
    return math.floor(budget_gpu / per_gpu_block) * block_tokens
