"""Trace replay through one prefix cache of a fixed capacity: the convenience entry points.

The semantics and the result are in :mod:`kvcalc.trace.result`, the policies in :mod:`kvcalc.trace.policies`,
the engines behind :mod:`kvcalc.trace.engine`'s interface; this module, the top of that chain (nothing in trace/
imports it), replays a file (:func:`replay`) or requests in memory (:func:`replay_requests`), and re-exports the
names older callers import from here.

This module computes; it never prints.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kvcalc.trace.policies import CacheSimulator, make_cache
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, TraceRequest
from kvcalc.trace.result import (POLICIES, ReplayResult, capacity_blocks_for, capacity_grid,
                                 capacity_tokens_from_bytes, check_policy, rate, replay_result)

__all__ = ["POLICIES", "CacheSimulator", "ReplayResult", "capacity_blocks_for", "capacity_grid",
           "capacity_tokens_from_bytes", "check_policy", "rate", "replay", "replay_requests", "replay_result"]


def replay_requests(requests: Iterable[TraceRequest], capacity_tokens: int | None,
                    block_tokens: int = DEFAULT_BLOCK_TOKENS, policy: str = "lru",
                    skipped_lines: int = 0) -> ReplayResult:
    """Replay in-memory requests through one cache of ``capacity_tokens`` [tokens] (None = infinite).

    LRU reads the stack-depth profile (:mod:`kvcalc.trace.lru_curve`); other policies simulate the cache.
    """
    if policy == "lru":
        from kvcalc.trace.lru_curve import lru_curve_of_requests

        return lru_curve_of_requests(requests, [capacity_tokens], block_tokens, skipped_lines)[0]
    sim = make_cache(policy, capacity_tokens, block_tokens)
    for request in requests:
        sim.add(request.hash_ids, request.input_length)
    return sim.finish(skipped_lines)


def replay(path: str | Path, capacity_tokens: int | None, block_tokens: int = DEFAULT_BLOCK_TOKENS,
           policy: str = "lru", skip_bad: bool = False) -> ReplayResult:
    """Replay a trace file through one cache of ``capacity_tokens`` [tokens] (None = infinite), one pass."""
    from kvcalc.trace.analysis import analyze_trace

    return analyze_trace(path, [capacity_tokens], block_tokens, policy, skip_bad).results[0]
