"""Whole-trace statistics in one streaming pass: request counts, length distributions, the trace's duration,
and, from the replay's infinite cache, distinct blocks and the hit rate of an infinite cache.

Pure Python (no numpy): the lean single-capacity replay (:mod:`kvcalc.trace.lean`) uses it without importing
numpy. Percentiles are numpy's default (``np.percentile``, method "linear") computed exactly the same way.

This module computes; it never prints.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvcalc.out.units import ms_to_s

if TYPE_CHECKING:
    from kvcalc.trace.result import ReplayResult

PERCENTILES = (50, 90, 99)  # the p50 / p90 / p99 of LengthStats [percent]


@dataclass(frozen=True)
class LengthStats:
    """Distribution of a per-request length [tokens]; percentiles by linear interpolation."""

    total_tokens: int
    mean_tokens: float
    p50_tokens: float
    p90_tokens: float
    p99_tokens: float
    max_tokens: int


@dataclass(frozen=True)
class TraceStats:
    """Whole-trace statistics; ``max_*`` figures are those of an infinite cache."""

    block_tokens: int
    requests: int
    skipped_lines: int
    duration_s: float  # latest minus earliest timestamp [s]
    input: LengthStats
    output: LengthStats
    total_blocks: int  # sum of len(hash_ids) [blocks]
    distinct_blocks: int  # distinct hash ids [blocks]
    max_reused_tokens: int  # [tokens]
    max_token_hit_rate: float  # [fraction]
    max_block_hit_rate: float  # [fraction]
    estimate: Any = None  # an InfiniteEstimate (kvcalc.trace.seen_sample) when the block figures are estimated


class StatsAccumulator:
    """Trace statistics, one request at a time: a count per distinct length (exact percentiles, memory bounded by
    the distinct lengths rather than the requests) and the time span.

    Block figures (distinct blocks, the infinite cache's reuse) come from the replay: the LRU stack engine's
    profile at an infinite capacity, or the lean replay's record of the blocks seen.
    """

    def __init__(self, block_tokens: int):
        self.block_tokens = block_tokens
        self.requests = 0
        self.input_counts: Counter = Counter()  # {input length [tokens]: requests}
        self.output_counts: Counter = Counter()  # {output length [tokens]: requests}
        self.first_ms = math.inf
        self.last_ms = -math.inf

    def add(self, timestamp_ms: float, input_length: int, output_length: int) -> None:
        """Account one request (timestamp [ms], lengths [tokens])."""
        self.requests += 1
        self.input_counts[input_length] += 1
        self.output_counts[output_length] += 1
        if timestamp_ms < self.first_ms:
            self.first_ms = timestamp_ms
        if timestamp_ms > self.last_ms:
            self.last_ms = timestamp_ms

    def add_records(self, records: Sequence) -> None:
        """Account requests given as records with ``timestamp`` [ms], ``input_length``, ``output_length``."""
        self.requests += len(records)
        self.input_counts.update([r.input_length for r in records])
        self.output_counts.update([r.output_length for r in records])
        timestamps = [r.timestamp for r in records]
        self.first_ms = min(self.first_ms, min(timestamps))
        self.last_ms = max(self.last_ms, max(timestamps))

    def finish(self, skipped_lines: int, infinite: ReplayResult, estimate: Any = None) -> TraceStats:
        """The statistics of everything added; block figures from ``infinite``, the same requests replayed
        through an infinite cache (its peak cached blocks are the distinct blocks); ``estimate``: how they were
        estimated (None: exact)."""
        requests = self.requests
        return TraceStats(
            block_tokens=self.block_tokens,
            requests=requests,
            skipped_lines=skipped_lines,
            duration_s=ms_to_s(self.last_ms - self.first_ms) if requests else 0.0,
            input=length_stats(self.input_counts),
            output=length_stats(self.output_counts),
            total_blocks=infinite.total_blocks,
            distinct_blocks=infinite.peak_cached_blocks,
            max_reused_tokens=infinite.reused_tokens,
            max_token_hit_rate=infinite.token_hit_rate,
            max_block_hit_rate=infinite.block_hit_rate,
            estimate=estimate,
        )


def percentiles(counts: Counter, percents: Sequence[float] = PERCENTILES) -> list[float]:
    """``np.percentile(values, percents)`` (method "linear") of integers given as ``{value: count}``, in pure
    Python, bit for bit.

    Sorted values ``x``, ``n`` of them: the virtual index ``v = (n - 1) * p / 100``, ``i = floor(v)``,
    ``t = v - i``; the result is ``x[i] + (x[i+1] - x[i]) * t``, or ``x[i+1] - (x[i+1] - x[i]) * (1 - t)`` when
    ``t >= 0.5`` (numpy's ``_lerp``, in float64 as numpy does it); ``v >= n - 1`` gives ``x[n-1]``. No values
    give 0.0 for every percentile.
    """
    n = sum(counts.values())
    if not n:
        return [0.0 for _ in percents]
    wanted = []
    for p in percents:
        v = (n - 1) * (p / 100)
        i = n - 1 if v >= n - 1 else math.floor(v)
        wanted.append((i, min(i + 1, n - 1), v - i))
    at = _order_statistics(counts, sorted({k for i, j, _ in wanted for k in (i, j)}))
    out = []
    for i, j, t in wanted:
        a, b = at[i], at[j]
        d = float(b - a)
        out.append(float(b) - d * (1 - t) if t >= 0.5 else float(a) + d * t)
    return out


def _order_statistics(counts: Counter, ranks: list[int]) -> dict[int, int]:
    """{rank: the value at that 0-based rank of the sorted multiset ``counts``} for ascending ``ranks``."""
    out = {}
    ranks_left = iter(ranks)
    rank = next(ranks_left, None)
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        while rank is not None and rank < seen:
            out[rank] = value
            rank = next(ranks_left, None)
        if rank is None:
            break
    return out


def length_stats(counts: Counter) -> LengthStats:
    """Total (an exact integer), mean, p50/p90/p99 and max of per-request lengths [tokens] given as
    ``{length: requests}``."""
    p50, p90, p99 = percentiles(counts)
    total = sum(value * count for value, count in counts.items())  # Python integers: never wraps
    n = sum(counts.values())
    return LengthStats(
        total_tokens=total,
        mean_tokens=total / n if n else 0.0,
        p50_tokens=p50,
        p90_tokens=p90,
        p99_tokens=p99,
        max_tokens=max(counts, default=0),
    )
