"""Whole-trace statistics in one streaming pass: request counts, length distributions, the trace's duration,
distinct blocks and the hit rate of an infinite cache.

This module computes; it never prints.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvcalc.out.units import ms_to_s
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, TraceRequest, check_block_tokens, read_trace
from kvcalc.trace.replay import rate


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
    """Trace statistics, one request at a time; holds lengths (8 bytes each) and the distinct ids."""

    def __init__(self, block_tokens: int):
        self.block_tokens = block_tokens
        self.input_lengths = array("q")
        self.output_lengths = array("q")
        self.first_ms = math.inf
        self.last_ms = -math.inf
        self.seen: set[int] = set()
        self.total_blocks = 0
        self.hit_blocks = 0
        self.reused_tokens = 0

    def add(self, request: TraceRequest) -> None:
        """Account one request."""
        self.input_lengths.append(request.input_length)
        self.output_lengths.append(request.output_length)
        self.first_ms = min(self.first_ms, request.timestamp_ms)
        self.last_ms = max(self.last_ms, request.timestamp_ms)
        seen = self.seen
        hit = 0
        for h in request.hash_ids:
            if h not in seen:
                break
            hit += 1
        seen.update(request.hash_ids)
        self.total_blocks += len(request.hash_ids)
        self.hit_blocks += hit
        self.reused_tokens += min(hit * self.block_tokens, request.input_length)

    def finish(self, skipped_lines: int) -> TraceStats:
        """The statistics of everything added."""
        requests = len(self.input_lengths)
        input_tokens = sum(self.input_lengths)
        return TraceStats(
            block_tokens=self.block_tokens,
            requests=requests,
            skipped_lines=skipped_lines,
            duration_s=ms_to_s(self.last_ms - self.first_ms) if requests else 0.0,
            input=_length_stats(self.input_lengths),
            output=_length_stats(self.output_lengths),
            total_blocks=self.total_blocks,
            distinct_blocks=len(self.seen),
            max_reused_tokens=self.reused_tokens,
            max_token_hit_rate=rate(self.reused_tokens, input_tokens),
            max_block_hit_rate=rate(self.hit_blocks, self.total_blocks),
        )


def _length_stats(lengths: array) -> LengthStats:
    """Total, mean, p50/p90/p99 and max of per-request lengths [tokens]."""
    values = np.frombuffer(lengths, dtype=np.int64) if len(lengths) else np.zeros(1, np.int64)
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return LengthStats(
        total_tokens=int(values.sum()) if len(lengths) else 0,
        mean_tokens=float(values.mean()),
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
    for request in requests:
        acc.add(request)
    return acc.finish(skipped_lines)


def trace_stats(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False) -> TraceStats:
    """Statistics of a trace file, in one streaming pass."""
    reader = read_trace(path, block_tokens, skip_bad)
    acc = StatsAccumulator(block_tokens)
    for request in reader:
        acc.add(request)
    return acc.finish(reader.skipped_lines)
