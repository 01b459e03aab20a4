"""Tiers of a KV cache on a node (capacities and links) and what each tier's trace hits are worth.

Tiers, fastest first: ``hbm`` (the KV budget left after the weights), ``dram`` (host memory), ``ssd`` (local
NVMe). Capacities:

- hbm: per-GPU budget = HBM x utilisation - weights / gpus (:mod:`kvcalc.memory.capacity`); it holds
  floor(budget / per-GPU block bytes) blocks, where a GPU holds its tensor-parallel share of each block
  (GQA shards by KV head, a single latent head is replicated);
- dram / ssd: the hardware preset's ``host_dram_gb_per_gpu`` / ``local_ssd_gb_per_gpu`` x gpus, holding
  floor(bytes / block bytes) whole blocks (one copy of each block per node);
- ``--tier-capacity name=VALUE`` overrides any of them: bytes with a unit (1TB, 512GiB) or tokens (20m).

Links: a hit in a lower tier is loaded into HBM over the tier's link (dram: the hardware's ``host_link``;
ssd: ``nvme-gen5``; ``--tier-link name=LINK`` overrides). HBM hits are used in place.

What a tier's hits are worth (alpha-beta, :mod:`kvcalc.move.links`):

- bytes loaded = hit blocks x block bytes; load time = copies x latency + bytes / bandwidth, with one copy per
  block (``per-block``) or one per request that hit the tier (``coalesced``, the default, as ``transfer``
  coalesces a request's prefix);
- prefill time avoided = hit tokens x prefill seconds per token (matmul only: 2 x active params /
  (gpus x peak x MFU), the project's break-even basis);
- verdict, per tier and independent of the trace: a tier whose one-block load (latency + block bytes /
  bandwidth) takes longer than prefilling that block's tokens is *recomputed* instead: its hits count as
  prefilled tokens, and the row says so. With no latency this is the project's break-even bandwidth
  (KV bytes per token / prefill seconds per token), shown beside it. Being per block, the same verdict holds
  for every strategy replayed through the same tiers.

This module computes; it never prints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from kvcalc.model import attention as att
from kvcalc.model.schema import HardwarePreset, LinkPreset, ModelPreset
from kvcalc.move.links import breakeven_bandwidth_bytes_per_s, separate_copies_time_s
from kvcalc.out.errors import InputError
from kvcalc.trace.tiers import TIER_ORDER, TierHits

COPY_MODES = ("coalesced", "per-block")
DEFAULT_SSD_LINK = "nvme-gen5"


@dataclass(frozen=True)
class Tier:
    """One resolved tier: capacity [blocks] and [B], where it came from, and its link (None for hbm)."""

    name: str
    capacity_blocks: int  # [blocks]
    capacity_bytes: float  # what those blocks hold on the node [B]
    capacity_source: str
    link_name: Optional[str] = None
    link: Optional[LinkPreset] = None


@dataclass(frozen=True)
class TierNode:
    """The node the tiers live on and the model whose blocks they hold."""

    model_name: str
    model: ModelPreset
    hardware_name: str
    hardware: HardwarePreset
    gpus: int
    block_tokens: int  # [tokens]
    hbm_utilization: float = 0.9
    kv_options: att.KvOptions = att.KvOptions()
    engine: str = "ideal"  # the hbm tier: ideal budget, or the vllm/sglang KV pool (--engine)
    engine_inputs: Optional[object] = None  # that pool's inputs read from a log (--engine-input), None: estimated


def parse_tier_names(text: str) -> list[str]:
    """``hbm,dram,ssd`` -> names; each known, no repeats, fastest first, starting with hbm."""
    names = [p.strip().lower() for p in str(text).split(",") if p.strip()]
    if not names:
        raise InputError("--tiers: empty list; give e.g. hbm,dram,ssd")
    for n in names:
        if n not in TIER_ORDER:
            raise InputError(f"--tiers: unknown tier {n!r}; choose from {', '.join(TIER_ORDER)}")
    if len(set(names)) != len(names):
        raise InputError(f"--tiers: a tier is named twice in {text!r}")
    order = [TIER_ORDER.index(n) for n in names]
    if order != sorted(order):
        raise InputError(f"--tiers: tiers out of order in {text!r}; give them fastest first: hbm,dram,ssd")
    if names[0] != "hbm":
        raise InputError(f"--tiers: the first tier must be hbm (where the KV is used), got {names[0]!r}")
    return names


def parse_tier_map(items: Optional[list[str]], flag: str, names: list[str]) -> dict[str, str]:
    """Repeatable or comma-separated ``name=value`` pairs -> {tier: value}; tiers must be among ``names``."""
    out: dict[str, str] = {}
    for item in items or []:
        for part in str(item).split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            key = key.strip().lower()
            if not sep:
                raise InputError(f"{flag}: cannot read {part.strip()!r}; give tier=value, e.g. dram=1TB")
            if key not in TIER_ORDER:
                raise InputError(f"{flag}: unknown tier {key!r}; choose from {', '.join(TIER_ORDER)}")
            if key not in names:
                raise InputError(f"{flag}: tier {key!r} is not in --tiers {','.join(names)}")
            out[key] = value.strip()
    return out


def given_capacity(name: str, text: str, block_tokens: int, block_bytes: float,
                   flag: str = "--tier-capacity") -> tuple[int, float, str]:
    """A --tier-capacity value: bytes with a unit or tokens (``0``: an empty tier) -> (blocks, bytes held, source)."""
    from kvcalc.out.units import MAX_CAPACITY_TOKENS, parse_bytes, parse_token_capacity

    what = f"{flag} {name}"
    if text.strip().startswith("-"):
        raise InputError(f"{what}: capacity must be >= 0, got {text!r}")
    if text.strip() == "0":
        blocks = 0
    elif text.lower().endswith("b"):
        nbytes = parse_bytes(text, what)
        blocks = math.floor(nbytes / block_bytes)
        if blocks * block_tokens > MAX_CAPACITY_TOKENS:  # the bound a capacity in tokens has (1e20TB: ~1e32 tokens)
            raise InputError(f"{what}: {text.strip()[:40]} holds ~{blocks * block_tokens:.3g} tokens, absurdly large "
                             f"(limit {MAX_CAPACITY_TOKENS:,} tokens)")
    else:
        blocks = parse_token_capacity(text, what) // block_tokens
    return blocks, blocks * block_bytes, f"{flag} {name}={text}"


def resolve_tiers(node: TierNode, names: list[str], capacities: dict[str, str], links: dict[str, str]) -> list[Tier]:
    """Capacities and links of each tier (see the module doc); InputError naming the tier when one is missing."""
    from kvcalc.memory.blocks import block_bytes
    from kvcalc.model import catalog
    from kvcalc.out.units import fmt_bytes
    from kvcalc.trace.node_cache import node_cache_tokens

    groups = att.resolve_groups(node.model, node.kv_options)
    align = node.model.page_align_bytes
    block = float(block_bytes(groups, node.block_tokens, align))
    if block <= 0:
        raise InputError(f"--model {node.model_name}: its KV is not paged in blocks; tiers need block bytes")
    hw = node.hardware
    tiers = []
    for name in names:
        if name in capacities:
            blocks, held, source = given_capacity(name, capacities[name], node.block_tokens, block)
        elif name == "hbm":
            blocks = node_cache_tokens(node.model, hw, node.gpus, node.block_tokens, node.kv_options,
                                       node.hbm_utilization, node.engine, node.engine_inputs) // node.block_tokens
            held = blocks * block
            source = (f"KV budget after weights: ({hw.hbm_gb:g} GB x {node.hbm_utilization:g} - "
                      f"{fmt_bytes(node.model.weight_bytes)} weights / {node.gpus}) per GPU / each GPU's "
                      f"tensor-parallel share of a block") if node.engine == "ideal" else (
                f"the {node.engine} KV pool per GPU (kvcalc capacity --engine {node.engine}, inputs "
                f"{'from --engine-input, the rest ' if node.engine_inputs is not None else ''}estimated) / "
                "each GPU's tensor-parallel share of a block")
        else:
            per_gpu_bytes = hw.host_dram_bytes_per_gpu if name == "dram" else hw.local_ssd_bytes_per_gpu
            field = "host_dram_gb_per_gpu" if name == "dram" else "local_ssd_gb_per_gpu"
            if per_gpu_bytes is None:
                raise InputError(f"--tier-capacity: no capacity for tier {name}: hardware {node.hardware_name} has "
                                 f"no {field}; give --tier-capacity {name}=1TB (bytes) or tokens")
            blocks = math.floor(per_gpu_bytes * node.gpus / block)
            held = blocks * block
            source = f"{node.hardware_name} {field} = {getattr(hw, field):g} GB x {node.gpus} GPUs"
        link_name = link = None
        if name == "hbm":
            if "hbm" in links:
                raise InputError("--tier-link: hbm hits are used in place; hbm takes no link")
        else:
            link_name = links.get(name) or (hw.host_link if name == "dram" else DEFAULT_SSD_LINK)
            if name in links and not links[name]:
                raise InputError(f"--tier-link: tier {name} has no link; give e.g. {name}=pcie-gen5-x16")
            try:
                link = catalog.load_link(link_name)
            except InputError as err:
                raise InputError(f"--tier-link {name}: {err}") from None
            link_name = catalog.name_of(link_name)
        tiers.append(Tier(name, blocks, held, source, link_name, link))
    return tiers


def block_load_s(tier: Tier, block_bytes: float, bandwidth: str = "measured") -> float:
    """One block's copy over the tier's link: latency + block bytes / bandwidth [s]; 0 for hbm (in place)."""
    if tier.link is None:
        return 0.0
    return separate_copies_time_s(block_bytes, 1, tier.link.latency_s, tier.link.bandwidth_bytes_per_s(bandwidth))


def load_wins(tier: Tier, block_bytes: float, block_tokens: int, prefill_s_per_token: float,
              bandwidth: str = "measured") -> bool:
    """Whether loading one block over the tier's link beats prefilling its tokens (True for hbm: in place)."""
    return block_load_s(tier, block_bytes, bandwidth) <= block_tokens * prefill_s_per_token


def tier_rows(hits_per_tier: Sequence[TierHits], input_tokens: int, block_tokens: int, tiers: list[Tier],
              block_bytes: float, kv_bytes_per_token: float, prefill_s_per_token: float, copies: str = "coalesced",
              bandwidth: str = "measured") -> list[dict]:
    """One row per tier: hits, share of input, bytes loaded, load time both ways, prefill avoided, verdict.

    ``block_bytes`` [B] per block moved; ``kv_bytes_per_token`` [B] for the break-even bandwidth;
    ``prefill_s_per_token`` [s] matmul-only prefill time per token on the node.
    """
    if copies not in COPY_MODES:
        raise InputError(f"--tier-copies: {copies!r} is not one of {', '.join(COPY_MODES)}")
    rows = []
    for t, hits in zip(tiers, hits_per_tier):
        loaded_bytes = 0.0 if t.link is None else hits.hit_blocks * block_bytes
        avoided = hits.hit_tokens * prefill_s_per_token
        row = {"tier": t.name, "capacity_blocks": t.capacity_blocks,
               "capacity_tokens": t.capacity_blocks * block_tokens, "capacity_bytes": t.capacity_bytes,
               "capacity_source": t.capacity_source, "link": t.link_name or "in place",
               "hit_blocks": hits.hit_blocks, "hit_tokens": hits.hit_tokens, "hit_requests": hits.hit_requests,
               "input_share": hits.hit_tokens / input_tokens if input_tokens else 0.0,
               "bytes_loaded": loaded_bytes, "prefill_avoided_s": avoided,
               "block_load_s": block_load_s(t, block_bytes, bandwidth),
               "block_prefill_s": block_tokens * prefill_s_per_token}
        if t.link is None:
            row |= {"bandwidth_bytes_per_s": None, "latency_s": None, "load_per_block_s": 0.0,
                    "load_coalesced_s": 0.0, "load_s": 0.0, "breakeven_bandwidth_bytes_per_s": None}
        else:
            bw = t.link.bandwidth_bytes_per_s(bandwidth)
            per_block = separate_copies_time_s(loaded_bytes, hits.hit_blocks, t.link.latency_s, bw)
            coalesced = separate_copies_time_s(loaded_bytes, hits.hit_requests, t.link.latency_s, bw)
            row |= {"bandwidth_bytes_per_s": bw, "latency_s": t.link.latency_s, "load_per_block_s": per_block,
                    "load_coalesced_s": coalesced,
                    "load_s": coalesced if copies == "coalesced" else per_block,
                    "breakeven_bandwidth_bytes_per_s": breakeven_bandwidth_bytes_per_s(kv_bytes_per_token,
                                                                                       prefill_s_per_token)}
        recompute = not load_wins(t, block_bytes, block_tokens, prefill_s_per_token, bandwidth)
        verdict = "recompute" if recompute else ("in place" if t.link is None else "load")
        row |= {"verdict": verdict if hits.hit_tokens else "no hits",
                "used_tokens": 0 if recompute else hits.hit_tokens,
                "recomputed_tokens": hits.hit_tokens if recompute else 0,
                "time_saved_s": 0.0 if recompute else avoided - row["load_s"]}
        rows.append(row)
    return rows
