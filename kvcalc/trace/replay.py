"""Trace replay through one prefix cache of a fixed capacity (LRU or FIFO): semantics, results, FIFO's replay.

Replay semantics (block granularity, ``B = block_tokens``; a capacity of ``C`` tokens holds
``floor(C / B)`` blocks; capacity ``None`` is an infinite cache):

1. A request reuses the longest run of its *leading* hash ids that are all in the cache, checked against the
   cache as it was before the request: ``hit_blocks`` = that run's length,
   ``reused_tokens = min(hit_blocks * B, input_length)``.
2. Then every block of the request is inserted or refreshed, in order:

   - ``lru``: a present block becomes the most recently used; an absent one is inserted as the most recently
     used; while the cache holds more than its capacity it evicts the least recently used block.
   - ``fifo``: a present block keeps its place (no refresh); an absent one is inserted at the tail; while
     the cache holds more than its capacity it evicts the block inserted first.

   A request longer than the cache therefore evicts its own first blocks.
3. Reported per capacity: ``token_hit_rate = reused_tokens / input_tokens``,
   ``block_hit_rate = hit_blocks / total_blocks``, ``peak_cached_blocks`` = the largest number of blocks the
   cache held after any request.

Several LRU capacities come from the stack-depth profile of :mod:`kvcalc.trace.lru_curve` (every capacity
at once, in one pass, numpy); one LRU capacity, the infinite cache and FIFO from the direct replay of
:mod:`kvcalc.trace.lean` (pure Python, no numpy). :class:`CacheSimulator` replays FIFO directly and is the tests'
LRU reference.

This module computes; it never prints.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from numbers import Integral
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvcalc.out.errors import InputError
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, TraceRequest, check_block_tokens

POLICIES = ("lru", "fifo")


@dataclass(frozen=True)
class ReplayResult:
    """Outcome of replaying a trace through one cache capacity."""

    policy: str
    block_tokens: int
    capacity_tokens: int | None  # None = infinite
    capacity_blocks: int | None  # floor(capacity_tokens / block_tokens); None = infinite
    requests: int
    skipped_lines: int
    input_tokens: int  # [tokens]
    reused_tokens: int  # [tokens]
    total_blocks: int  # [blocks]
    hit_blocks: int  # [blocks]
    token_hit_rate: float  # reused_tokens / input_tokens [fraction]
    block_hit_rate: float  # hit_blocks / total_blocks [fraction]
    peak_cached_blocks: int  # [blocks]


def capacity_tokens_from_bytes(capacity_bytes: float, kv_bytes_per_block: float, block_tokens: int) -> int:
    """Cache capacity [tokens] of ``capacity_bytes`` [B] holding whole blocks of ``kv_bytes_per_block`` [B].

    ``floor(capacity_bytes / kv_bytes_per_block) * block_tokens``; e.g. 80 GB at 10 MB per 512-token block
    -> 8000 blocks -> 4,096,000 tokens.
    """
    check_block_tokens(block_tokens)
    for value, what in ((capacity_bytes, "capacity bytes"), (kv_bytes_per_block, "KV bytes per block")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"{what}: {value!r} is not a finite number")
    if capacity_bytes < 0:
        raise InputError(f"capacity bytes: must be >= 0, got {capacity_bytes:g}")
    if kv_bytes_per_block <= 0:
        raise InputError(f"KV bytes per block: must be > 0, got {kv_bytes_per_block:g}")
    if float(capacity_bytes).is_integer() and float(kv_bytes_per_block).is_integer():
        blocks = int(capacity_bytes) // int(kv_bytes_per_block)  # exact for whole byte counts
    else:
        blocks = math.floor(capacity_bytes / kv_bytes_per_block)
    return blocks * block_tokens


def capacity_blocks_for(capacity_tokens: int | None, block_tokens: int) -> int | None:
    """Whole blocks [blocks] that ``capacity_tokens`` [tokens] holds: floor division; None stays None."""
    check_block_tokens(block_tokens)
    if capacity_tokens is None:
        return None
    if isinstance(capacity_tokens, bool) or not isinstance(capacity_tokens, Integral):
        raise InputError(f"cache capacity: {capacity_tokens!r} is not a whole number of tokens")
    if capacity_tokens < 0:
        raise InputError(f"cache capacity: must be >= 0 tokens, got {capacity_tokens}")
    return int(capacity_tokens) // block_tokens


def capacity_grid(max_capacity_tokens: int, points: int = 20, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> list[int]:
    """About ``points`` capacities [tokens], geometric from one block to ``max_capacity_tokens``.

    Each is a whole number of blocks; duplicates after rounding are dropped (so fewer may come back).
    """
    check_block_tokens(block_tokens)
    if points < 1:
        raise InputError(f"curve points: must be >= 1, got {points}")
    max_blocks = max(1, int(max_capacity_tokens) // block_tokens)
    if points == 1:
        return [max_blocks * block_tokens]
    import numpy as np  # lazily: the single-capacity replay runs without numpy

    blocks = np.rint(np.geomspace(1, max_blocks, points)).astype(np.int64).tolist()  # ascending
    return [b * block_tokens for b in sorted(set(blocks))]


def check_policy(policy: str) -> None:
    """Raise InputError unless policy is one of POLICIES."""
    if policy not in POLICIES:
        raise InputError(f"policy: unknown {policy!r}; choose one of {', '.join(POLICIES)}")


def rate(part: int, whole: int) -> float:
    """part / whole [fraction]; 0 when whole is 0."""
    return part / whole if whole else 0.0


def replay_result(policy: str, block_tokens: int, capacity_tokens: int | None, capacity_blocks: int | None,
            requests: int, skipped_lines: int, input_tokens: int, reused_tokens: int, total_blocks: int,
            hit_blocks: int, peak_cached_blocks: int) -> ReplayResult:
    """A ReplayResult with its rates derived from the counts [tokens], [blocks]."""
    return ReplayResult(
        policy=policy, block_tokens=block_tokens, capacity_tokens=capacity_tokens,
        capacity_blocks=capacity_blocks, requests=requests, skipped_lines=skipped_lines,
        input_tokens=input_tokens, reused_tokens=reused_tokens, total_blocks=total_blocks,
        hit_blocks=hit_blocks, token_hit_rate=rate(reused_tokens, input_tokens),
        block_hit_rate=rate(hit_blocks, total_blocks), peak_cached_blocks=peak_cached_blocks,
    )


class CacheSimulator:
    """One cache (LRU or FIFO) of a fixed capacity, simulated directly with an OrderedDict.

    FIFO's replay; for LRU the direct reference that the stack-depth engine is tested against.
    """

    def __init__(self, capacity_tokens: int | None, block_tokens: int, policy: str):
        check_policy(policy)
        self.policy = policy
        self.block_tokens = block_tokens
        self.capacity_tokens = capacity_tokens
        self.capacity_blocks = capacity_blocks_for(capacity_tokens, block_tokens)
        self._limit = math.inf if self.capacity_blocks is None else self.capacity_blocks
        self._refresh = policy == "lru"
        self._cache: OrderedDict[int, None] = OrderedDict()
        self.requests = self.input_tokens = self.reused_tokens = 0
        self.total_blocks = self.hit_blocks = self.peak_cached_blocks = 0

    def add(self, hash_ids: Sequence[int], input_length: int) -> int:
        """Replay one request: count its leading hit run, then insert/refresh its blocks in order.

        Returns the request's hit blocks [blocks].
        """
        cache = self._cache
        hit = 0
        for h in hash_ids:
            if h not in cache:
                break
            hit += 1
        limit = self._limit
        refresh = self._refresh
        move_to_end = cache.move_to_end
        for h in hash_ids:
            if h in cache:
                if refresh:
                    move_to_end(h)
            else:
                cache[h] = None
                if len(cache) > limit:
                    cache.popitem(last=False)
        self.requests += 1
        self.input_tokens += input_length
        self.reused_tokens += min(hit * self.block_tokens, input_length)
        self.total_blocks += len(hash_ids)
        self.hit_blocks += hit
        if len(cache) > self.peak_cached_blocks:
            self.peak_cached_blocks = len(cache)
        return hit

    @property
    def cached_blocks(self) -> int:
        """Blocks the cache holds now [blocks]."""
        return len(self._cache)

    def finish(self, skipped_lines: int = 0) -> ReplayResult:
        """The result of everything replayed."""
        return replay_result(
            self.policy, self.block_tokens, self.capacity_tokens, self.capacity_blocks, self.requests,
            skipped_lines, self.input_tokens, self.reused_tokens, self.total_blocks, self.hit_blocks,
            self.peak_cached_blocks,
        )


def replay_requests(requests: Iterable[TraceRequest], capacity_tokens: int | None,
                    block_tokens: int = DEFAULT_BLOCK_TOKENS, policy: str = "lru",
                    skipped_lines: int = 0) -> ReplayResult:
    """Replay in-memory requests through one cache of ``capacity_tokens`` [tokens] (None = infinite).

    LRU reads the stack-depth profile (:mod:`kvcalc.trace.lru_curve`); FIFO simulates the cache directly.
    """
    if policy == "lru":
        from kvcalc.trace.lru_curve import lru_curve_of_requests

        return lru_curve_of_requests(requests, [capacity_tokens], block_tokens, skipped_lines)[0]
    sim = CacheSimulator(capacity_tokens, block_tokens, policy)
    for request in requests:
        sim.add(request.hash_ids, request.input_length)
    return sim.finish(skipped_lines)


def replay(path: str | Path, capacity_tokens: int | None, block_tokens: int = DEFAULT_BLOCK_TOKENS,
           policy: str = "lru", skip_bad: bool = False) -> ReplayResult:
    """Replay a trace file through one cache of ``capacity_tokens`` [tokens] (None = infinite), one pass."""
    from kvcalc.trace.analysis import analyze_trace

    return analyze_trace(path, [capacity_tokens], block_tokens, policy, skip_bad).results[0]
