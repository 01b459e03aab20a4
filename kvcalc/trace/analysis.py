"""Everything about a trace in one streaming pass: its statistics and one replay result per capacity.

Several LRU capacities, the curve and per-request depths are read off the stack-depth profile of
:mod:`kvcalc.trace.lru_curve` (numpy; every capacity in one pass). One LRU capacity (or none, or only the
infinite one) and FIFO, which has no inclusion property, are replayed directly by :mod:`kvcalc.trace.lean`
(pure Python, memory for the cache and the blocks seen only). Both give identical results.

This module computes; it never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvcalc.out.errors import InputError
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, check_block_tokens, read_trace
from kvcalc.trace.replay import ReplayResult, capacity_blocks_for, check_policy
from kvcalc.trace.stats import StatsAccumulator, TraceStats

if TYPE_CHECKING:
    from kvcalc.trace.lru_curve import DepthChunk, LruProfile


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

    Several LRU capacities come from the stack-depth profile (one pass answers every capacity);
    ``keep_profile`` returns that :class:`LruProfile`, which answers capacities chosen after the pass (e.g. a
    grid up to the working set), and ``sink`` receives the engine's per-request depths chunk by chunk
    (:class:`DepthChunk`). Without those, FIFO and at most one finite LRU capacity are replayed directly
    (:func:`kvcalc.trace.lean.lean_analysis`: no numpy, memory for the cache only).
    """
    check_policy(policy)
    check_block_tokens(block_tokens)
    if (keep_profile or sink is not None) and policy != "lru":
        raise InputError(f"policy: the one-pass capacity profile exists for lru only, not {policy!r}")
    for capacity in capacities_tokens:
        capacity_blocks_for(capacity, block_tokens)
    from kvcalc.trace.lean import answers_lean, lean_analysis

    if not keep_profile and sink is None and answers_lean(capacities_tokens, policy):
        return lean_analysis(path, capacities_tokens, block_tokens, policy, skip_bad)
    from kvcalc.trace.lru_curve import LruStackEngine

    reader = read_trace(path, block_tokens, skip_bad)
    stats = StatsAccumulator(block_tokens)
    engine = LruStackEngine(block_tokens, sink=sink)
    for records, _ in reader.batches():
        stats.add_records(records)
        engine.add_records(records)
    skipped = reader.skipped_lines
    profile = engine.finish(skipped)
    return TraceAnalysis(stats=stats.finish(skipped, profile.at(None)),
                         results=tuple(profile.at(c) for c in capacities_tokens),
                         profile=profile if keep_profile else None, first_problem=reader.first_problem)
