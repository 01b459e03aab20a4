"""``kvcalc trace --tiers``: a trace replayed through HBM/DRAM/SSD tiers, and what each tier's hits are worth.

One streaming pass (:mod:`kvcalc.trace.tiers`) gives every tier's hits; :mod:`kvcalc.trace.tier_cost` gives
the capacities, links, load times and the load-or-recompute verdict. Peak FLOP/s and MFU come from the scenario
(as ``cost``/``compare`` use them). This module computes and formats text; it never prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kvcalc.out.results import Column, Result, Table
from kvcalc.serve.cost import CostInputs
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS
from kvcalc.trace.tier_cost import Tier, TierNode, resolve_tiers, tier_rows
from kvcalc.trace.tiers import TieredProfile, tiered_profile

TIER_COLUMNS = (
    Column("tier", "tier", "text"), Column("capacity_bytes", "capacity", "bytes"),
    Column("link", "link", "text"),
    Column("hit_tokens", "hit tokens", "int"), Column("input_share", "of input", "percent"),
    Column("bytes_loaded", "loaded", "bytes"), Column("load_s", "load", "s"),
    Column("prefill_avoided_s", "prefill avoided", "s"), Column("block_load_s", "block load", "s"),
    Column("verdict", "verdict", "text"),
)
DEFAULT_TIER_CURVE_POINTS = 20
TIER_CURVE_SPAN = 4  # the default grid runs from one block to this many times the tier's configured capacity
SUMMARY_COLUMNS = (
    Column("requests", "requests", "int"), Column("input_tokens", "input tokens", "int"),
    Column("hit_tokens", "hit tokens", "int"), Column("hit_rate", "hit rate", "percent"),
    Column("used_tokens", "used", "int"), Column("recomputed_tokens", "recomputed", "int"),
    Column("effective_hit_rate", "effective hit", "percent"), Column("time_saved_s", "prefill saved", "s"),
)


@dataclass(frozen=True)
class TierRequest:
    """What ``kvcalc trace --tiers`` was asked."""

    path: str
    tiers: tuple[str, ...]
    capacities: tuple[tuple[str, str], ...] = ()  # (tier, value as written)
    links: tuple[tuple[str, str], ...] = ()
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    copies: str = "coalesced"
    skip_bad: bool = False
    sink_tokens: int = 0  # compare: A never evicts the blocks of each request's first ... tokens
    window_tokens: int = 0  # ... and last ... tokens (the article's attention sinks and recent window)
    curve_tier: Optional[str] = None  # --tier-curve: the tier whose capacity varies (the others fixed)
    curve_values: tuple[str, ...] = ()  # its capacities as written (bytes or tokens); () = the default grid
    curve_points: int = DEFAULT_TIER_CURVE_POINTS  # points of the default grid
    trace_format: str = "mooncake"  # any hash-id format of kvcalc.trace.formats ("auto" or "jsonl": by content)


def node_of(inp: CostInputs, block_tokens: int) -> TierNode:
    """The scenario's node and model as tiers see them."""
    return TierNode(inp.model_name, inp.model, inp.hardware_name, inp.hardware, inp.gpus, block_tokens,
                    inp.hbm_utilization, inp.kv_options, inp.engine, inp.engine_inputs)


def tier_figures(inp: CostInputs, node: TierNode) -> tuple[float, float, float]:
    """(block bytes [B], paged KV bytes per token [B], matmul prefill seconds per token [s]) of the node."""
    from kvcalc.memory.blocks import block_bytes, paged_bytes_per_token
    from kvcalc.model import attention as att
    from kvcalc.serve import compute

    groups = att.resolve_groups(inp.model, inp.kv_options)
    return (float(block_bytes(groups, node.block_tokens, inp.model.page_align_bytes)),
            sum(paged_bytes_per_token(g) for g in groups),
            compute.prefill_s_per_token(inp.model, inp.gpus, inp.peak_flops_per_gpu, inp.mfu_prefill))


def summary_row(profile: TieredProfile, rows: list[dict]) -> dict:
    """The whole trace: hits over all tiers, the ones used, the ones recomputed, prefill time saved."""
    p = profile.profile
    hit = sum(r["hit_tokens"] for r in rows)
    used = sum(r["used_tokens"] for r in rows)
    total = profile.total_capacity_blocks
    single = p.at(None if total is None else total * p.block_tokens)
    return {"requests": p.requests, "input_tokens": p.input_tokens, "hit_tokens": hit,
            "hit_rate": hit / p.input_tokens if p.input_tokens else 0.0, "used_tokens": used,
            "recomputed_tokens": hit - used,
            "effective_hit_rate": used / p.input_tokens if p.input_tokens else 0.0,
            "time_saved_s": sum(r["time_saved_s"] for r in rows),
            "single_cache_capacity_blocks": total, "single_cache_reused_tokens": single.reused_tokens,
            "distinct_blocks": p.distinct_blocks}


def explain_tiers(tiers: list[Tier], rows: list[dict], block: float, per_token_s: float) -> list[str]:
    """Each tier's capacity, load and verdict with the numbers (rows: one strategy's tier rows)."""
    from kvcalc.out.units import fmt_bytes, fmt_count, fmt_seconds

    lines = ["tiers are exclusive depth ranges of one LRU stack: a new or reused block enters HBM, each full "
             "tier demotes its least recent block to the next, the last evicts; a hit run is the leading blocks "
             "cached in any tier; each block is served by the tier it was in"]
    for t, r in zip(tiers, rows):
        line = f"{t.name}: {t.capacity_source} -> {fmt_count(t.capacity_blocks)} blocks of {fmt_bytes(block)}"
        if t.link is not None:
            line += (f"; load = {fmt_count(r['hit_requests'])} coalesced copies x {fmt_seconds(r['latency_s'])} + "
                     f"{fmt_bytes(r['bytes_loaded'])} / {fmt_bytes(r['bandwidth_bytes_per_s'])}/s = "
                     f"{fmt_seconds(r['load_coalesced_s'])} (per block: {fmt_count(r['hit_blocks'])} copies, "
                     f"{fmt_seconds(r['load_per_block_s'])})")
        line += (f"; prefill avoided = {fmt_count(r['hit_tokens'])} tokens x {fmt_seconds(per_token_s)} = "
                 f"{fmt_seconds(r['prefill_avoided_s'])}; one block loads in {fmt_seconds(r['block_load_s'])} vs "
                 f"{fmt_seconds(r['block_prefill_s'])} to prefill it -> {r['verdict']}")
        lines.append(line)
    return lines


def tier_trace_result(req: TierRequest, inp: CostInputs, progress=None) -> Result:
    """Replay the trace through the tiers (one pass) and build the Result; ``progress(requests)`` as the pass
    goes (see :func:`kvcalc.trace.tiers.tiered_profile`)."""
    from kvcalc.out.units import fmt_bytes, fmt_percent, fmt_seconds

    node = node_of(inp, req.block_tokens)
    tiers = resolve_tiers(node, list(req.tiers), dict(req.capacities), dict(req.links))
    block, per_token_bytes, per_token_s = tier_figures(inp, node)
    profile = tiered_profile(req.path, [t.capacity_blocks for t in tiers], [t.name for t in tiers],
                             req.block_tokens, req.skip_bad, progress=progress, trace_format=req.trace_format)
    rows = tier_rows(profile.tiers, profile.profile.input_tokens, req.block_tokens, tiers, block, per_token_bytes,
                     per_token_s, req.copies)
    summary = summary_row(profile, rows)
    name = Path(req.path).name
    main = Table("tiers", f"Tiered LRU on {name}: {inp.model_name} on {inp.gpus} x {inp.hardware_name}, "
                 f"{req.block_tokens}-token blocks of {fmt_bytes(block)}", TIER_COLUMNS, tuple(rows))
    extra = Table("summary", "Whole trace", SUMMARY_COLUMNS, (summary,))
    copies = ("requests that hit the tier (one coalesced copy each)" if req.copies == "coalesced" else
              "hit blocks (one copy each)")
    notes = [f"a {req.block_tokens}-token block prefills in {fmt_seconds(req.block_tokens * per_token_s)}: "
             "a tier whose "
             "block load is slower is recomputed",
             f"tier hits add up to one LRU cache of the summed capacity: {summary['hit_tokens']:,} = "
             f"{summary['single_cache_reused_tokens']:,} reused tokens",
             f"load = latency x {copies}"
             " + bytes / bandwidth; prefill avoided = hit tokens x 2 x active params / (gpus x peak x MFU) "
             f"(MFU {inp.mfu_prefill:g}, {inp.sources.get('mfu', '')})"]
    for r in rows:
        if r["verdict"] == "recompute":
            notes.append(f"{r['tier']}: one block loads over {r['link']} slower than its {req.block_tokens} tokens "
                         f"prefill ({fmt_seconds(r['latency_s'] + block / r['bandwidth_bytes_per_s'])} > "
                         f"{fmt_seconds(req.block_tokens * per_token_s)}): its hits are counted as recomputed "
                         f"({fmt_percent(r['input_share'])} of input)")
    inputs = {"file": str(req.path), "tiers": list(req.tiers), "tier_capacity": dict(req.capacities),
              "tier_link": dict(req.links), "block_tokens": req.block_tokens, "copies": req.copies,
              "trace_format": profile.trace_format,
              "model": inp.model_name, "hardware": inp.hardware_name, "gpus": inp.gpus,
              "block_bytes": block, "kv_bytes_per_token": per_token_bytes, "prefill_s_per_token": per_token_s,
              "skip_bad": req.skip_bad}
    return Result("trace", inputs, main, (extra,), tuple(explain_tiers(tiers, rows, block, per_token_s)), tuple(notes))


def parse_request(path: str, tiers: str, capacity: Optional[list[str]], link: Optional[list[str]],
                  block_tokens: int, copies: str, skip_bad: bool, sink_tokens: int = 0,
                  window_tokens: int = 0, curve: Optional[str] = None,
                  curve_points: Optional[int] = None, trace_format: str = "mooncake") -> TierRequest:
    """Command-line text -> TierRequest (InputError naming the flag and tier)."""
    from kvcalc.out.errors import InputError
    from kvcalc.trace.tier_cost import COPY_MODES, parse_tier_map, parse_tier_names

    if copies not in COPY_MODES:
        raise InputError(f"--tier-copies: {copies!r} is not one of {', '.join(COPY_MODES)}")
    names = parse_tier_names(tiers)
    caps = parse_tier_map(capacity, "--tier-capacity", names)
    links = parse_tier_map(link, "--tier-link", names)
    for flag, value in (("--sink-tokens", sink_tokens), ("--window-tokens", window_tokens)):
        if value < 0:
            raise InputError(f"{flag}: must be >= 0 tokens, got {value}")
    curve_tier, values = parse_tier_curve(curve, curve_points, names)
    return TierRequest(path, tuple(names), tuple(caps.items()), tuple(links.items()), block_tokens, copies, skip_bad,
                       sink_tokens, window_tokens, curve_tier, values,
                       DEFAULT_TIER_CURVE_POINTS if curve_points is None else curve_points, trace_format)


def parse_tier_curve(text: Optional[str], points: Optional[int], names: list[str]) -> tuple[Optional[str], tuple]:
    """``--tier-curve dram`` or ``dram=0,1TB,2TB`` (and ``--curve-points``) -> (tier, capacities as written)."""
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import MAX_CURVE_POINTS, check_positive

    if text is None:
        if points is not None:
            raise InputError("--curve-points: with --tiers, only with --tier-curve")
        return None, ()
    tier, sep, rest = str(text).partition("=")
    tier = tier.strip().lower()
    if tier not in names:
        raise InputError(f"--tier-curve: tier {tier!r} is not in --tiers {','.join(names)}")
    values = tuple(v.strip() for v in rest.split(",") if v.strip())
    if sep and not values:
        raise InputError(f"--tier-curve: no capacities after {tier}=; give e.g. {tier}=0,1TB,2TB or just {tier}")
    if points is not None:
        if values:
            raise InputError("--curve-points: not with capacities listed in --tier-curve")
        check_positive(points, "--curve-points", limit=MAX_CURVE_POINTS)
    if len(values) > MAX_CURVE_POINTS:
        raise InputError(f"--tier-curve: at most {MAX_CURVE_POINTS:,} capacities, got {len(values):,}")
    return tier, values


def tier_curve_blocks(req: TierRequest, tier: Tier, block: float) -> list[int]:
    """The varied tier's capacities [blocks], ascending: its configured capacity, and those listed in
    --tier-curve (bytes or tokens; 0 allowed) or else 0 and a geometric grid of ``req.curve_points`` from one
    block to TIER_CURVE_SPAN x the configured capacity."""
    from kvcalc.trace.result import capacity_grid
    from kvcalc.trace.tier_cost import given_capacity

    if req.curve_values:
        return sorted({tier.capacity_blocks, *(given_capacity(tier.name, v, req.block_tokens, block, "--tier-curve")[0]
                                               for v in req.curve_values)})
    top = TIER_CURVE_SPAN * max(tier.capacity_blocks, 1) * req.block_tokens
    grid = capacity_grid(top, req.curve_points, req.block_tokens)
    return sorted({0, tier.capacity_blocks, *(t // req.block_tokens for t in grid)})


def tier_curve_result(req: TierRequest, inp: CostInputs, progress=None) -> Result:
    """``--tier-curve``: every tier's hits, load and prefill saved as one tier's capacity varies, in one pass
    (:mod:`kvcalc.trace.tier_curve`); extras: the tiers and summary at the configured capacities."""
    from dataclasses import replace

    from kvcalc.out.units import fmt_bytes, fmt_count
    from kvcalc.trace.tier_curve import tier_curve, vary_tier

    node = node_of(inp, req.block_tokens)
    tiers = resolve_tiers(node, list(req.tiers), dict(req.capacities), dict(req.links))
    block, per_token_bytes, per_token_s = tier_figures(inp, node)
    k = list(req.tiers).index(req.curve_tier)
    varied = tiers[k]
    values = tier_curve_blocks(req, varied, block)
    curve = tier_curve(req.path, vary_tier([t.capacity_blocks for t in tiers], k, values), list(req.tiers),
                       req.block_tokens, req.skip_bad, progress, req.trace_format)
    rows, configured = [], []
    for v, hits in zip(values, curve.hits):
        at = [replace(varied, capacity_blocks=v, capacity_bytes=v * block,
                      capacity_source=f"--tier-curve point: {fmt_count(v)} blocks") if i == k else t
              for i, t in enumerate(tiers)]
        trows = tier_rows(hits, curve.profile.input_tokens, req.block_tokens, at, block, per_token_bytes, per_token_s,
                          req.copies)
        row = {"tier": varied.name, "capacity_blocks": v, "capacity_tokens": v * req.block_tokens,
               "capacity_bytes": v * block, "point": "configured" if v == varied.capacity_blocks else ""}
        for r in trows:
            row |= {f"{r['tier']}_{key}": r[key] for key in ("hit_tokens", "hit_blocks", "hit_requests", "load_s",
                                                               "verdict")}
        row |= summary_row(TieredProfile(hits, curve.profile), trows)
        rows.append(row)
        if v == varied.capacity_blocks:
            configured = trows
    name = Path(req.path).name
    columns = (Column("capacity_bytes", f"{varied.name} capacity", "bytes"),
               *(Column(f"{t}_hit_tokens", f"{t} hits", "int") for t in req.tiers),
               Column("hit_rate", "hit rate", "percent"), Column("effective_hit_rate", "effective hit", "percent"),
               Column("time_saved_s", "prefill saved", "s"), Column("point", "point", "text"))
    main = Table("tier_curve", f"Tier curve on {name}: {varied.name} capacity varied, {inp.model_name} on "
                 f"{inp.gpus} x {inp.hardware_name}, {req.block_tokens}-token blocks of {fmt_bytes(block)}",
                 columns, tuple(rows))
    extra = Table("tiers", "Tiers at the configured capacities", TIER_COLUMNS, tuple(configured))
    others = ", ".join(f"{t.name} {fmt_bytes(t.capacity_bytes)}" for i, t in enumerate(tiers) if i != k)
    grid = ("as listed, and the configured size" if req.curve_values else
            f"0, {req.curve_points} geometric from one block to {TIER_CURVE_SPAN} x the configured "
            f"{fmt_bytes(varied.capacity_bytes)}, and the configured size")
    notes = [f"{len(values)} {varied.name} capacities ({grid}){'; fixed: ' + others if others else ''}; all from "
             "one LRU pass (each point equals a separate --tier-capacity replay at that size)",
             "hit rate: all tiers' hits over input tokens; effective hit: without the tiers whose block load is "
             "slower than its prefill; prefill saved: prefill avoided - load time, over the tiers that load"]
    inputs = {"file": str(req.path), "tiers": list(req.tiers), "tier_capacity": dict(req.capacities),
              "tier_link": dict(req.links), "block_tokens": req.block_tokens, "copies": req.copies,
              "trace_format": curve.trace_format,
              "tier_curve": req.curve_tier, "tier_curve_values": list(req.curve_values) or None,
              "curve_points": None if req.curve_values else req.curve_points,
              "model": inp.model_name, "hardware": inp.hardware_name, "gpus": inp.gpus, "block_bytes": block,
              "kv_bytes_per_token": per_token_bytes, "prefill_s_per_token": per_token_s, "skip_bad": req.skip_bad}
    how = (f"tier curve: {len(values)} points in one pass; each hit block is binned by its request's prefix-max depth "
           "among the points' summed capacities and by its own depth among every point's tier bounds; a point sums "
           "the bins within its summed capacity, per tier")
    return Result("trace", inputs, main, (extra,),
                  (how, *explain_tiers(tiers, list(configured), block, per_token_s)), tuple(notes))
