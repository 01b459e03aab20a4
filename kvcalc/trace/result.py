"""Replay results: the semantics of a replay through one prefix cache, its result, capacities in blocks.

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
   - ``lfu`` (SGLang's radix cache) and ``s3fifo``: see :mod:`kvcalc.trace.policies`.

   A request longer than the cache therefore evicts its own first blocks.
3. Reported per capacity: ``token_hit_rate = reused_tokens / input_tokens``,
   ``block_hit_rate = hit_blocks / total_blocks``, ``peak_cached_blocks`` = the largest number of blocks the
   cache held after any request.

This module holds what every engine shares (the result of one capacity, capacity arithmetic, the policy
names); the policies themselves are in :mod:`kvcalc.trace.policies`, the engines behind
:mod:`kvcalc.trace.engine`'s interface. It imports nothing of trace/ but the reader's block-size check.

This module computes; it never prints.
"""

from __future__ import annotations

import math
from numbers import Integral
from dataclasses import dataclass

from kvcalc.out.errors import InputError
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, check_block_tokens

POLICIES = ("lru", "fifo", "lfu", "s3fifo")  # the rules of each: kvcalc.trace.policies


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
