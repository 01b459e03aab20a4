"""Everything about a trace in one streaming pass: its statistics and one replay result per capacity.

This module computes; it never prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvcalc.out.errors import InputError
from kvcalc.trace.lru_curve import LruProfile, LruStackEngine
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
                  skip_bad: bool = False, keep_profile: bool = False) -> TraceAnalysis:
    """Statistics plus one result per capacity [tokens] (None = infinite), in one streaming pass.

    LRU with several capacities uses the stack-depth curve; one LRU capacity or FIFO simulates directly
    (FIFO: one OrderedDict per capacity). ``keep_profile`` (LRU only) always uses the stack-depth curve and
    returns its :class:`LruProfile`, which answers capacities chosen after the pass (e.g. a grid up to the
    working set).
    """
    check_policy(policy)
    check_block_tokens(block_tokens)
    if keep_profile and policy != "lru":
        raise InputError(f"policy: the one-pass capacity profile exists for lru only, not {policy!r}")
    for capacity in capacities_tokens:
        capacity_blocks_for(capacity, block_tokens)
    reader = read_trace(path, block_tokens, skip_bad)
    stats = StatsAccumulator(block_tokens)
    use_curve = policy == "lru" and (len(capacities_tokens) > 1 or keep_profile)
    engine = LruStackEngine(block_tokens) if use_curve else None
    sims = [] if use_curve else [CacheSimulator(c, block_tokens, policy) for c in capacities_tokens]
    for request in reader:
        stats.add(request)
        if engine is not None:
            engine.add(request.hash_ids, request.input_length)
        for sim in sims:
            sim.add(request.hash_ids, request.input_length)
    skipped = reader.skipped_lines
    profile = engine.finish(skipped) if engine is not None else None
    if profile is not None:
        results = tuple(profile.at(c) for c in capacities_tokens)
    else:
        results = tuple(sim.finish(skipped) for sim in sims)
    return TraceAnalysis(stats=stats.finish(skipped), results=results,
                         profile=profile if keep_profile else None, first_problem=reader.first_problem)
