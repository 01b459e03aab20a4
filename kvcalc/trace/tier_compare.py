"""``kvcalc compare --trace FILE --tiers ...``: strategies A and C replayed through the same HBM/DRAM/SSD tiers.

- A ``lru``: the tiered LRU of :mod:`kvcalc.trace.tiers` (one pass; blocks of requests in flight may be
  demoted or evicted like any other).
- C ``prefix-tree``: :mod:`kvcalc.trace.refcount`, a time-ordered replay where the blocks of requests in flight
  are pinned by reference counts; a request is in flight from its timestamp until its TTFT + decode ends.

Per request (both strategies, the same code): hits in tiers whose one-block load beats its prefill
(:func:`kvcalc.trace.tier_cost.load_wins`) are used, the rest of the input is prefilled:
prefill FLOPs = the cost model's closed form for ``used`` cached then ``input - used`` new tokens;
load = per lower tier with hits, one coalesced copy (or one per block): latency + bytes / bandwidth.

TTFT queueing model (named ``fifo-node``): requests take the whole node's prefill compute one at a time, in
arrival order, without batching: start = max(arrival, previous request's end of load + prefill);
TTFT = (start - arrival) + load of its hit tokens + prefill of its other tokens. Decode then takes
output tokens / decode tokens per second per request. Prefill FLOPs, GPU time and $/M tokens come from the cost
model (:func:`kvcalc.serve.cost.strategy_row`) fed each strategy's measured reuse.

D (speculative prefetch under PD disaggregation): each request's KV hand-off (its KV minus C's used prefix,
one coalesced copy over the scenario's ``pd_link``) is hidden behind the previous decode step when the
prefetch can start that early: the window is min(one decode step, the gap since the previous arrival);
hidden share = sum of min(transfer, window) / sum of transfer.

This module computes; it never prints. Memory: the engines' (distinct / held blocks) plus one TTFT and a few
numbers per request (for the percentiles).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kvcalc.model import attention as att
from kvcalc.out.errors import InputError
from kvcalc.out.results import Column, Result, Table
from kvcalc.serve.cost import CostInputs
from kvcalc.trace.tier_cost import Tier, load_wins, resolve_tiers, tier_rows
from kvcalc.trace.tier_report import TierRequest, node_of, tier_figures
from kvcalc.trace.tiers import TierHits

QUEUE_MODEL = "fifo-node"


class RequestTimer:
    """TTFT and in-flight end of each request under the fifo-node queue (see module doc), for one strategy."""

    def __init__(self, inp: CostInputs, tiers: list[Tier], wins: list[bool], block_bytes: float, copies: str):
        self.inp = inp
        self.groups = att.resolve_groups(inp.model, inp.kv_options)
        self.node_flops_per_s = inp.gpus * inp.peak_flops_per_gpu * inp.mfu_prefill
        self.tiers, self.wins, self.block_bytes, self.copies = tiers, wins, block_bytes, copies
        self.free_at_s = float("-inf")
        if inp.decode_tokens_per_s is None:
            raise InputError("--decode-tokens-per-s: the trace replay needs a decode speed per request")
        self.decode_tps = inp.decode_tokens_per_s
        self.ttft_s: list[float] = []
        self.load_s = self.flops = 0.0
        self.used = Counter()  # (input, used, output) -> requests, for the cost model
        self.used_tokens: list[int] = []  # per request, in arrival order [tokens]

    def serve(self, arrival_s: float, input_tokens: int, output_tokens: int, tier_blocks, tier_tokens) -> float:
        """Queue one request; returns when it stops being in flight [s] (TTFT + decode after arrival)."""
        from kvcalc.serve.compute import prefill_flops

        used = sum(t for t, w in zip(tier_tokens, self.wins) if w)
        load = 0.0
        for tier, w, blocks in zip(self.tiers, self.wins, tier_blocks):
            if w and blocks and tier.link is not None:
                copies = 1 if self.copies == "coalesced" else blocks
                load += copies * tier.link.latency_s + blocks * self.block_bytes / tier.link.bandwidth_bytes_per_s(
                    "measured")
        flops = prefill_flops(self.inp.model, self.groups, used, input_tokens - used, self.inp.attention_flops)
        start = max(arrival_s, self.free_at_s)
        self.free_at_s = start + load + flops / self.node_flops_per_s
        ttft = self.free_at_s - arrival_s
        self.ttft_s.append(ttft)
        self.load_s += load
        self.flops += flops
        self.used[(input_tokens, used, output_tokens)] += 1
        self.used_tokens.append(used)
        return arrival_s + ttft + output_tokens / self.decode_tps


@dataclass(frozen=True)
class Replayed:
    """Both strategies' per-tier hits and timers, and the trace's arrivals/handoff inputs."""

    hits: dict[str, tuple[TierHits, ...]]
    timers: dict[str, RequestTimer]
    arrivals_s: list[float]
    inputs: list[int]
    input_tokens: int
    skipped_lines: int
    peak_pinned: dict[str, int]  # blocks pinned at once, per strategy [blocks]
    c_peak_held: int
    trace_format: str = "mooncake"  # the format the trace was read as (kvcalc.trace.engine.format_read)


class TierCounter:
    """Per-tier hit blocks, tokens and requests summed over requests."""

    def __init__(self, n: int):
        self.blocks, self.tokens, self.requests = [0] * n, [0] * n, [0] * n

    def add(self, tier_blocks, tier_tokens) -> None:
        for i, (b, t) in enumerate(zip(tier_blocks, tier_tokens)):
            self.blocks[i] += b
            self.tokens[i] += t
            self.requests[i] += b > 0

    def hits(self, names, caps) -> tuple[TierHits, ...]:
        return tuple(TierHits(*x) for x in zip(names, caps, self.blocks, self.tokens, self.requests))


def replay_both(path: str, req: TierRequest, inp: CostInputs, tiers: list[Tier], block: float,
                per_token_s: float, progress=None) -> Replayed:
    """One streaming read of the trace feeds A (the one-pass engine, or with sink/window pins a PinnedTiers
    released at once) and C's event-heap replay."""
    from kvcalc.trace.engine import format_read
    from kvcalc.trace.formats import open_replay_trace
    from kvcalc.trace.refcount import PinnedTiers, lru_step, replay_pinned
    from kvcalc.trace.tiers import PROGRESS_EVERY, TieredLruEngine

    wins = [load_wins(t, block, req.block_tokens, per_token_s) for t in tiers]
    caps = [t.capacity_blocks for t in tiers]
    names = [t.name for t in tiers]
    pins = req.sink_tokens > 0 or req.window_tokens > 0
    engine = None if pins else TieredLruEngine(req.block_tokens, caps, keep_requests=True)
    a_cache = PinnedTiers(caps) if pins else None
    a_rows: list = []
    a_count, c_count = TierCounter(len(tiers)), TierCounter(len(tiers))
    cache = PinnedTiers(caps)
    c_timer = RequestTimer(inp, tiers, wins, block, req.copies)
    arrivals, inputs, outputs = [], [], []

    def fed(reader):
        for r in reader:
            if engine is not None:
                engine.add(r.hash_ids, r.input_length)
            else:
                a_rows.append(lru_step(a_cache, r, req.block_tokens, req.sink_tokens, req.window_tokens))
                a_count.add(*a_rows[-1])
            arrivals.append(r.timestamp_ms / 1000.0)
            inputs.append(r.input_length)
            outputs.append(r.output_length)
            if progress is not None and len(arrivals) % PROGRESS_EVERY == 0:
                progress(len(arrivals))
            yield r

    def finish(a) -> float:
        r = a.request
        c_count.add(a.tier_blocks, a.tier_tokens)
        return c_timer.serve(r.timestamp_ms / 1000.0, r.input_length, r.output_length, a.tier_blocks, a.tier_tokens)

    reader = open_replay_trace(path, req.block_tokens, req.skip_bad, req.trace_format)
    for _ in replay_pinned(fed(reader), cache, req.block_tokens, finish):
        pass
    if engine is not None:
        profile = engine.finish_tiers(names, reader.skipped_lines)
        a_hits = profile.tiers
        a_rows = list(zip(profile.request_hit_blocks.tolist(), profile.request_hit_tokens.tolist()))
    else:
        a_hits = a_count.hits(names, caps)
    a_timer = RequestTimer(inp, tiers, wins, block, req.copies)
    for i, (b_row, t_row) in enumerate(a_rows):
        a_timer.serve(arrivals[i], inputs[i], outputs[i], b_row, t_row)
    if sum(inputs) == 0:
        raise InputError(f"{path}: the trace's requests have no input tokens: nothing to prefill or reuse")
    return Replayed({"lru": a_hits, "prefix-tree": c_count.hits(names, caps)},
                    {"lru": a_timer, "prefix-tree": c_timer}, arrivals, inputs, sum(inputs), reader.skipped_lines,
                    {"lru": a_cache.peak_pinned if a_cache else 0, "prefix-tree": cache.peak_pinned},
                    cache.peak_present, format_read(reader))


def _mix(used: Counter):
    """Measured reuse, {(input, used, output): requests}, as the cost model's request mix (slices by input class)."""
    from kvcalc.serve.strategies import RequestMix, Slice
    from kvcalc.trace.cost import INPUT_CLASSES, input_class

    slices = tuple(sorted((Slice(input_class(i), i, u, o, n) for (i, u, o), n in used.items()),
                          key=lambda s: ([lb for _, lb in INPUT_CLASSES].index(s.label), s[1:])))
    labels = tuple(lb for _, lb in INPUT_CLASSES if any(s.label == lb for s in slices))
    return RequestMix(slices, 0, 0, labels)


def _percentiles(values: list[float]) -> dict:
    import numpy as np

    a = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"ttft_mean_s": float(a.mean()), "ttft_p50_s": float(p50), "ttft_p90_s": float(p90),
            "ttft_p99_s": float(p99), "ttft_max_s": float(a.max())}


def hidden_handoff(arrivals_s: list[float], handoff_s: list[float], step_s: float) -> dict:
    """D: share of the PD hand-off hidden behind the previous decode step (see module doc) [fraction], [s]."""
    hidden = total = 0.0
    prev = None
    for t, h in zip(arrivals_s, handoff_s):
        window = step_s if prev is None else min(step_s, max(0.0, t - prev))
        hidden += min(h, window)
        total += h
        prev = t
    return {"pd_handoff_total_s": total, "pd_hidden_s": hidden, "pd_exposed_s": total - hidden,
            "pd_hidden_share": hidden / total if total else 1.0}


STRATEGY_COLUMNS = (
    Column("strategy", "strategy", "text"), Column("used_tokens", "reused", "int"),
    Column("recomputed_tokens", "prefilled", "int"), Column("prefill_flops", "prefill FLOPs", "flops"),
    Column("prefill_flops_saved", "FLOPs saved", "flops"), Column("load_time_s", "load", "s"),
    Column("ttft_mean_s", "TTFT mean", "s"), Column("ttft_p50_s", "p50", "s"), Column("ttft_p90_s", "p90", "s"),
    Column("ttft_p99_s", "p99", "s"), Column("usd_per_mtok_input", "$/M in", "usd"),
    Column("usd_per_mtok_blended", "$/M blended", "usd"),
)
TIER_COLUMNS = (
    Column("strategy", "strategy", "text"), Column("tier", "tier", "text"),
    Column("capacity_bytes", "capacity", "bytes"), Column("link", "link", "text"),
    Column("hit_tokens", "hit tokens", "int"), Column("input_share", "of input", "percent"),
    Column("bytes_loaded", "loaded", "bytes"), Column("load_s", "load", "s"), Column("verdict", "verdict", "text"),
)


def tier_compare_result(inp: CostInputs, req: TierRequest, progress=None) -> Result:
    """A vs C through the same tiers on the trace's requests (see module doc); ``progress(requests read)`` every
    1,000 requests when given."""
    from kvcalc.out.units import fmt_bytes, fmt_count, fmt_percent
    from kvcalc.serve.cost import strategy_row

    node = node_of(inp, req.block_tokens)
    tiers = resolve_tiers(node, list(req.tiers), dict(req.capacities), dict(req.links))
    block, per_token_bytes, per_token_s = tier_figures(inp, node)
    rep = replay_both(req.path, req, inp, tiers, block, per_token_s, progress)
    name = Path(req.path).name
    traced = dataclasses.replace(inp, workload_name=name, workload_title=f"trace {name} through {','.join(req.tiers)}",
                                 warm=False)
    nothing = Counter()
    for (i, _, o), n in rep.timers["lru"].used.items():
        nothing[(i, 0, o)] += n
    none_row, _ = strategy_row(traced, "lru", _mix(nothing))
    rows, tier_table = [], []
    for strategy, timer in rep.timers.items():
        cost, _ = strategy_row(traced, strategy, _mix(timer.used))
        used = cost["reused_tokens"]
        row = {"strategy": strategy, "queue_model": QUEUE_MODEL, "requests": cost["requests"],
               "input_tokens": rep.input_tokens, "hit_tokens": sum(h.hit_tokens for h in rep.hits[strategy]),
               "used_tokens": used, "recomputed_tokens": rep.input_tokens - used,
               "prefill_flops": timer.flops, "prefill_flops_saved": none_row["prefill_flops"] - timer.flops,
               "load_time_s": timer.load_s} | _percentiles(timer.ttft_s) | {
               k: cost[k] for k in ("prefill_time_s", "gpu_seconds", "usd_per_mtok_input", "usd_per_mtok_output",
                                    "usd_per_mtok_blended", "decode_tokens_per_s")}
        pinned = rep.peak_pinned[strategy]
        row |= {"peak_pinned_blocks": pinned, "peak_pinned_bytes": pinned * block}
        if inp.pd_link is not None:
            row |= _pd_fields(inp, node, rep, timer)
        rows.append(row)
        for r in tier_rows(rep.hits[strategy], rep.input_tokens, req.block_tokens, tiers, block, per_token_bytes,
                           per_token_s, req.copies):
            tier_table.append({"strategy": strategy} | r)
    a, c = rows
    notes = [f"TTFT queueing model {QUEUE_MODEL}: one request at a time on the whole node's prefill compute, in "
             "arrival order, no batching (start = max(arrival, previous end); TTFT = wait + load of its hit tokens + "
             "prefill of the rest); decode = output tokens / decode tok/s per request",
             "A: tiered LRU" + (" with pinned sinks and windows" if req.sink_tokens or req.window_tokens else
                                " in one pass") +
             "; C: blocks of requests in flight (timestamp to TTFT + decode) are pinned, "
             "unreferenced blocks tiered by recency (event heap; peak pinned "
             f"{fmt_count(rep.peak_pinned['prefix-tree'])} blocks, "
             f"peak held {fmt_count(rep.c_peak_held)} blocks of {fmt_bytes(block)})",
             f"C reuses {fmt_count(c['used_tokens'])} tokens ({fmt_percent(c['used_tokens'] / rep.input_tokens)}), "
             f"A {fmt_count(a['used_tokens'])} ({fmt_percent(a['used_tokens'] / rep.input_tokens)}) of "
             f"{fmt_count(rep.input_tokens)} input tokens",
             "$/M from the cost model with each strategy's measured reuse (GPU time of prefill + decode); load time "
             "is in TTFT, not in $"]
    if req.sink_tokens or req.window_tokens:
        notes.append(f"A pins the blocks of each request's first {req.sink_tokens} tokens (attention sinks) and last "
                     f"{req.window_tokens} (recent window) for good, as the article's A: up to "
                     f"{fmt_count(a['peak_pinned_blocks'])} blocks = {fmt_bytes(a['peak_pinned_bytes'])} held in HBM "
                     "beside the tiers")
    hbm_bytes = tiers[0].capacity_bytes
    if c["peak_pinned_bytes"] > hbm_bytes:
        notes.append(f"warning: C pinned up to {fmt_bytes(c['peak_pinned_bytes'])} of KV of requests in flight, more "
                     f"than the {fmt_bytes(hbm_bytes)} HBM tier: the trace overloads this node under {QUEUE_MODEL} "
                     "(requests wait long in flight), so C's pinned blocks could not all stay in HBM")
    for t, w in zip(tiers, [load_wins(t, block, req.block_tokens, per_token_s) for t in tiers]):
        if not w:
            notes.append(f"{t.name}: one block loads slower than it prefills over {t.link_name}: its hits are "
                         "recomputed in both strategies")
    if rep.skipped_lines:
        notes.append(f"--skip-bad: skipped {rep.skipped_lines:,} bad line(s)")
    inputs = {"trace": str(req.path), "tiers": list(req.tiers), "tier_capacity": dict(req.capacities),
              "tier_link": dict(req.links), "block_tokens": req.block_tokens, "copies": req.copies,
              "trace_format": rep.trace_format,
              "model": inp.model_name, "hardware": inp.hardware_name, "gpus": inp.gpus,
              "mfu_prefill": inp.mfu_prefill, "decode_tokens_per_s": inp.decode_tokens_per_s,
              "queue_model": QUEUE_MODEL, "pd_link": inp.pd_link_name, "sink_tokens": req.sink_tokens,
              "window_tokens": req.window_tokens}
    main = Table("strategies", f"A vs C on {name} through {','.join(req.tiers)}: {inp.model_name} on {inp.gpus} x "
                 f"{inp.hardware_name}", STRATEGY_COLUMNS, tuple(rows))
    extra = [Table("tiers", "Per tier", TIER_COLUMNS, tuple(tier_table))]
    if inp.pd_link is not None:
        extra.append(Table("prefetch", f"D: PD hand-off over {inp.pd_link_name} hidden behind the previous decode "
                           "step (window = min(step, arrival gap))", PD_COLUMNS, tuple(rows)))
    from kvcalc.trace.tier_report import explain_tiers

    explain = []
    for strategy in rep.timers:
        explain.append(f"{strategy}:")
        explain += ["  " + line for line in explain_tiers(tiers, [r for r in tier_table if r["strategy"] == strategy],
                                                          block, per_token_s)]
    from kvcalc.serve.strategies import labelled

    return labelled(Result("compare", inputs, main, tuple(extra), tuple(explain), tuple(notes)))


PD_COLUMNS = (
    Column("strategy", "strategy", "text"), Column("pd_handoff_total_s", "hand-off", "s"),
    Column("pd_hidden_s", "hidden", "s"), Column("pd_exposed_s", "exposed", "s"),
    Column("pd_hidden_share", "hidden share", "percent"),
)


def _pd_fields(inp: CostInputs, node, rep: Replayed, timer: RequestTimer) -> dict:
    """D for one strategy: per request hand-off = its KV minus the used prefix's paged KV, coalesced."""
    from kvcalc.memory.blocks import paged_bytes_per_token
    from kvcalc.model.kv import request_bytes
    from kvcalc.move.links import transfer_time_s

    groups = timer.groups
    paged = sum(paged_bytes_per_token(g) for g in groups)
    bw = inp.pd_link.bandwidth_bytes_per_s("measured")
    step = inp.pd_overlap_s if inp.pd_overlap_s is not None else 1.0 / timer.decode_tps
    handoff = [transfer_time_s(request_bytes(groups, n) - u * paged, inp.pd_link.latency_s, bw)
               for n, u in zip(rep.inputs, timer.used_tokens)]
    return hidden_handoff(rep.arrivals_s, handoff, step)
