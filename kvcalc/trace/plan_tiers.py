"""``kvcalc plan --trace --tiers hbm,dram,ssd``: each engine's prefix hits from a tiered LRU replay of its own
requests (trace/tiers.py), fed to the bench core's scheduler.

Per engine (a DP rank of a replica: every dp-th of the replica's requests, as ``kvcalc bench --dp`` deals them),
in arrival order, through exclusive LRU tiers of these capacities [blocks of the trace's block_tokens]:

- hbm: the engine's KV pool (the vLLM sizing the scheduler runs on: pool blocks x block size / block_tokens),
  here a bounded LRU instead of the scheduler's unbounded prefix cache;
- dram / ssd: the hardware preset's host_dram_gb_per_gpu / local_ssd_gb_per_gpu, each GPU keeping its own
  tensor-parallel share of every block (capacity / the per-GPU block bytes);
- ``--tier-capacity name=VALUE`` overrides one: bytes per GPU (1TB) or tokens per engine (20m).

A request's hit tokens (every tier's) skip its prefill as a prefix-cache hit does (scheduler.Requests.handed:
at least one token is computed). Before the engine can schedule it, the lower tiers' part loads into HBM: one
coalesced copy per tier it hit, latency + hit blocks x per-GPU block bytes / the tier's link bandwidth (dram:
the hardware's host link; ssd: nvme-gen5; ``--tier-link`` overrides), every GPU over its own link in parallel
(scheduler.Requests.load_s; the request waits at the head of the queue, so the queue behind it waits too: a
conservative simplification, vLLM lets later requests pass one whose KV is still loading). Hits are decided in
arrival order, before the scheduler runs: a prefix still being prefilled counts as cached.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PlanTiers:
    """The tiers of ``--tiers``, fastest first, with the ``--tier-capacity`` and ``--tier-link`` overrides."""

    names: tuple
    capacities: dict = field(default_factory=dict)  # tier -> the option's text
    links: dict = field(default_factory=dict)       # tier -> link preset name


def per_gpu_block_bytes(spec, block_tokens: int) -> float:
    """One block of ``block_tokens`` tokens on one GPU of the engine: each group's page x its TP share [B]."""
    from kvcalc.memory.blocks import block_bytes
    from kvcalc.model import attention as att

    groups = att.resolve_groups(spec.model, spec.opts)
    align = spec.model.page_align_bytes
    return float(sum(block_bytes([g], block_tokens, align) * att.per_gpu_share(g, spec.tp) for g in groups))


def capacities(tiers: PlanTiers, spec, pool, block_tokens: int) -> list[int]:
    """Each tier's capacity for one engine [blocks] (module docstring)."""
    import math

    from kvcalc.out.errors import InputError
    from kvcalc.trace.tier_cost import given_capacity

    block = per_gpu_block_bytes(spec, block_tokens)
    if block <= 0:
        raise InputError(f"--tiers: {spec.model_name}'s KV is not paged in blocks")
    out = []
    for name in tiers.names:
        if name in tiers.capacities:
            out.append(given_capacity(name, tiers.capacities[name], block_tokens, block)[0])
        elif name == "hbm":
            out.append(int(pool.num_blocks) * int(pool.block_size) // block_tokens)
        else:
            per_gpu = spec.hw.host_dram_bytes_per_gpu if name == "dram" else spec.hw.local_ssd_bytes_per_gpu
            if per_gpu is None:
                field_name = "host_dram_gb_per_gpu" if name == "dram" else "local_ssd_gb_per_gpu"
                raise InputError(f"--tiers {name}: hardware {spec.hw_name} has no {field_name}; give "
                                 f"--tier-capacity {name}=1TB (bytes per GPU) or tokens")
            out.append(math.floor(per_gpu / block))
    return out


def tier_links(tiers: PlanTiers, hw) -> list:
    """The link (LinkPreset) of each lower tier, in order."""
    from kvcalc.model import catalog
    from kvcalc.trace.tier_cost import DEFAULT_SSD_LINK

    return [catalog.load_link(tiers.links.get(n) or (hw.host_link if n == "dram" else DEFAULT_SSD_LINK))
            for n in tiers.names[1:]]


def apply_tiers(part, spec, pool, tiers: PlanTiers):
    """(``part`` with each request's tiered hits handed over and its load time, lower-tier hit tokens) for the
    engines of ``spec`` (tp, dp, hardware, model) with KV pool ``pool`` (module docstring)."""
    import numpy as np

    from kvcalc.trace.tiers import TieredLruEngine

    bt = part.key_tokens
    caps = capacities(tiers, spec, pool, bt)
    block = per_gpu_block_bytes(spec, bt)
    links = tier_links(tiers, spec.hw)
    n = len(part.prompt)
    handed = np.zeros(n, dtype=np.int64)
    load = np.zeros(n)
    lower = 0
    keys = part.keys if part.keys is not None else [()] * n
    for r in range(spec.dp):
        idx = np.arange(r, n, spec.dp)
        if not len(idx):
            continue
        eng = TieredLruEngine(bt, caps, keep_requests=True)
        for i in idx.tolist():
            eng.add(list(keys[i]), int(part.prompt[i]))
        prof = eng.finish_tiers(tiers.names)
        toks, blocks = prof.request_hit_tokens, prof.request_hit_blocks
        handed[idx] = toks.sum(axis=1)
        for j, link in enumerate(links, 1):
            copy = link.latency_s + blocks[:, j] * block / link.bandwidth_bytes_per_s()
            load[idx] += np.where(blocks[:, j] > 0, copy, 0.0)
        used = np.minimum(toks.sum(axis=1), (np.asarray(part.prompt)[idx] - 1).clip(min=0))  # as the scheduler caps
        lower += int((used - np.minimum(toks[:, 0], used)).sum())
    out = part.take(slice(None))
    out.handed, out.load_s = handed, load
    return out, lower
