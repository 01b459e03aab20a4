"""Whole-trace statistics in one streaming pass: request counts, length distributions, the trace's duration,
and, from the LRU stack engine's profile, distinct blocks and the hit rate of an infinite cache.

This module computes; it never prints.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvcalc.out.units import ms_to_s
from kvcalc.trace.lru_curve import LruProfile, LruStackEngine
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, TraceRequest, check_block_tokens


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


class StatsAccumulator:
    """Trace statistics, one request at a time: lengths (8 bytes each, for exact percentiles) and the time span.

    Block figures (distinct blocks, the infinite cache's reuse) come from the LRU stack engine's profile: the
    profile at an infinite capacity is the infinite cache, and its histogram ends at the distinct blocks.
    """

    def __init__(self, block_tokens: int):
        self.block_tokens = block_tokens
        self.input_lengths = array("q")
        self.output_lengths = array("q")
        self.first_ms = math.inf
        self.last_ms = -math.inf

    def add(self, timestamp_ms: float, input_length: int, output_length: int) -> None:
        """Account one request (timestamp [ms], lengths [tokens])."""
        self.input_lengths.append(input_length)
        self.output_lengths.append(output_length)
        if timestamp_ms < self.first_ms:
            self.first_ms = timestamp_ms
        if timestamp_ms > self.last_ms:
            self.last_ms = timestamp_ms

    def add_records(self, records: Sequence) -> None:
        """Account requests given as records with ``timestamp`` [ms], ``input_length``, ``output_length``."""
        self.input_lengths.extend([r.input_length for r in records])
        self.output_lengths.extend([r.output_length for r in records])
        timestamps = [r.timestamp for r in records]
        self.first_ms = min(self.first_ms, min(timestamps))
        self.last_ms = max(self.last_ms, max(timestamps))

    def finish(self, skipped_lines: int, profile: LruProfile) -> TraceStats:
        """The statistics of everything added; block figures from ``profile`` (the same requests)."""
        requests = len(self.input_lengths)
        infinite = profile.at(None)
        return TraceStats(
            block_tokens=self.block_tokens,
            requests=requests,
            skipped_lines=skipped_lines,
            duration_s=ms_to_s(self.last_ms - self.first_ms) if requests else 0.0,
            input=_length_stats(self.input_lengths),
            output=_length_stats(self.output_lengths),
            total_blocks=profile.total_blocks,
            distinct_blocks=profile.distinct_blocks,
            max_reused_tokens=infinite.reused_tokens,
            max_token_hit_rate=infinite.token_hit_rate,
            max_block_hit_rate=infinite.block_hit_rate,
        )


def _length_stats(lengths: array) -> LengthStats:
    """Total (an exact integer), mean, p50/p90/p99 and max of per-request lengths [tokens]."""
    values = np.frombuffer(lengths, dtype=np.int64) if len(lengths) else np.zeros(1, np.int64)
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    total = sum(lengths)  # Python integers: never wraps (two lengths of 2^63 - 1 make 2^64 - 2)
    return LengthStats(
        total_tokens=total,
        mean_tokens=total / len(lengths) if len(lengths) else 0.0,
        p50_tokens=float(p50),
        p90_tokens=float(p90),
        p99_tokens=float(p99),
        max_tokens=int(values.max()),
    )


def stats_of_requests(requests: Iterable[TraceRequest], block_tokens: int = DEFAULT_BLOCK_TOKENS,
                      skipped_lines: int = 0) -> TraceStats:
    """Statistics of in-memory requests (hash_ids must already fit ``block_tokens``)."""
    check_block_tokens(block_tokens)
    acc = StatsAccumulator(block_tokens)
    engine = LruStackEngine(block_tokens)
    for request in requests:
        acc.add(request.timestamp_ms, request.input_length, request.output_length)
        engine.add(request.hash_ids, request.input_length)
    return acc.finish(skipped_lines, engine.finish(skipped_lines))


def trace_stats(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False) -> TraceStats:
    """Statistics of a trace file, in one streaming pass."""
    from kvcalc.trace.analysis import analyze_trace

    return analyze_trace(path, [], block_tokens, skip_bad=skip_bad).stats
