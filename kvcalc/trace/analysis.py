"""Everything about a trace in one streaming pass: its statistics and one replay result per capacity.

One trace engine: every LRU figure (one capacity, several, the curve, the infinite cache, distinct blocks) is
read off the stack-depth profile of :mod:`kvcalc.trace.lru_curve`; FIFO, which has no inclusion property,
replays each capacity directly (:class:`kvcalc.trace.replay.CacheSimulator`).

This module computes; it never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvcalc.out.errors import InputError
from kvcalc.trace.lru_curve import DepthChunk, LruProfile, LruStackEngine
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, check_block_tokens, read_trace
from kvcalc.trace.replay import CacheSimulator, ReplayResult, capacity_blocks_for, check_policy
from kvcalc.trace.stats import StatsAccumulator, TraceStats


@dataclass(frozen=True)
class TraceAnalysis:
    """Statistics and replay results of one streaming pass over a trace."""

    stats: TraceStats
    results: tuple[ReplayResult, ...]
    profile: LruProfile | None = None  # the LRU depth histograms, when asked for (any capacity at once)
    first_problem: str | None = None  # "FILE:LINE: problem" of the first skipped line (skip_bad)


def analyze_trace(path: str | Path, capacities_tokens: Sequence[int | None],
                  block_tokens: int = DEFAULT_BLOCK_TOKENS, policy: str = "lru",
                  skip_bad: bool = False, keep_profile: bool = False,
                  sink: Callable[[DepthChunk], None] | None = None) -> TraceAnalysis:
    """Statistics plus one result per capacity [tokens] (None = infinite), in one streaming pass.

    LRU results come from the stack-depth profile (one pass answers every capacity); FIFO replays one
    OrderedDict per capacity beside it. ``keep_profile`` returns the :class:`LruProfile`, which answers
    capacities chosen after the pass (e.g. a grid up to the working set). ``sink`` receives the engine's
    per-request depths chunk by chunk (:class:`DepthChunk`).
    """
    check_policy(policy)
    check_block_tokens(block_tokens)
    if keep_profile and policy != "lru":
        raise InputError(f"policy: the one-pass capacity profile exists for lru only, not {policy!r}")
    for capacity in capacities_tokens:
        capacity_blocks_for(capacity, block_tokens)
    reader = read_trace(path, block_tokens, skip_bad)
    stats = StatsAccumulator(block_tokens)
    engine = LruStackEngine(block_tokens, sink=sink)
    sims = [CacheSimulator(c, block_tokens, policy) for c in capacities_tokens] if policy != "lru" else []
    for records, _ in reader.batches():
        stats.add_records(records)
        engine.add_records(records)
        for sim in sims:
            for r in records:
                sim.add(r.hash_ids, r.input_length)
    skipped = reader.skipped_lines
    profile = engine.finish(skipped)
    if sims:
        results = tuple(sim.finish(skipped) for sim in sims)
    else:
        results = tuple(profile.at(c) for c in capacities_tokens)
    return TraceAnalysis(stats=stats.finish(skipped, profile), results=results,
                         profile=profile if keep_profile else None, first_problem=reader.first_problem)
