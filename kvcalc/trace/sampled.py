"""A sampled LRU curve for traces whose distinct blocks do not fit the exact engine: SHARDS-style spatial
sampling by hash (Waldspurger et al., "Efficient MRC Construction with SHARDS", FAST 2015). The plain reading,
kept for comparison (bench/bench_sampled.py) and for its smaller memory; ``--sample-rate`` uses the stratified
estimator of :mod:`kvcalc.trace.stratified`, which errs far less on the Mooncake traces (docs/traces.md).

A block id is sampled when ``splitmix64(id) mod 2^24 < R x 2^24`` (R = the rate): the same ids are kept
wherever they occur, so a kept block's reuse pattern is whole, and its stack depth among kept blocks is about R
times its true depth. Each request keeps its sampled blocks, in order; the exact stack-depth engine
(:class:`~kvcalc.trace.lru_curve.LruStackEngine`) replays that sampled trace (memory: R x the distinct
blocks), and a cache of C blocks is read at ``floor(C x R)`` sampled blocks. Estimates, scaled by 1 / R:

- block hit rate(C) = sampled hit blocks(floor(C x R)) / sampled blocks (SHARDS' ratio of sampled hits to
  sampled references, which does not depend on how many accesses the sample happened to draw); a sampled block
  is a hit when every sampled block before it in its request is cached (the prefix maximum of depths over the
  kept blocks: the leading-run rule restricted to the sample); hit blocks(C) = that rate x the blocks;
- token hit rate(C) the same way over the sampled blocks' tokens (a request's last block, when kept, with
  its own, partial, length); reused tokens(C) = that rate x the input tokens;
- distinct blocks = sampled distinct / R.

Requests, input tokens and blocks are counted exactly. The error against the exact curve is measured in
docs/traces.md and bench/bench_sampled.py.

This module computes; it never prints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvcalc.out.errors import InputError
from kvcalc.trace.lru_curve import LruProfile, LruStackEngine
from kvcalc.trace.replicas import splitmix64
from kvcalc.trace.result import ReplayResult, capacity_blocks_for, replay_result

SAMPLE_SPACE = 1 << 24  # the hash is compared with rate x 2^24


def check_rate(rate: float) -> None:
    """InputError unless 0 < rate <= 1 with at least one hash value kept."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) \
            or not 1 / SAMPLE_SPACE <= rate <= 1:
        raise InputError(f"--sample-rate: must be a fraction from {1 / SAMPLE_SPACE:.2g} to 1, got {rate!r}")


@dataclass(frozen=True)
class SampledProfile:
    """The sampled engine's answers: every capacity [tokens] from one pass, estimated (see the module doc)."""

    rate: float
    sampled: LruProfile  # the exact profile of the sampled trace
    block_tokens: int
    requests: int
    skipped_lines: int
    input_tokens: int  # [tokens], exact
    total_blocks: int  # [blocks], exact
    adjust: bool = False  # SHARDS_adj: the first bucket corrected by expected - sampled references (measured:
    # better on the Mooncake conversation trace, worse on the synthetic one; docs/traces.md)

    @property
    def distinct_blocks(self) -> int:
        """Estimated distinct blocks of the whole trace [blocks]."""
        return round(self.sampled.distinct_blocks / self.rate)

    def at(self, capacity_tokens: int | None) -> ReplayResult:
        capacity_blocks = capacity_blocks_for(capacity_tokens, self.block_tokens)
        s = self.sampled
        d = s.distinct_blocks if capacity_blocks is None else min(math.floor(capacity_blocks * self.rate),
                                                                 s.distinct_blocks)
        share = _share(int(s.hit_blocks_upto[d]), s.total_blocks, self.total_blocks * self.rate, d, self.adjust)
        hits = round(share * self.total_blocks)
        token_share = _share(int(s.reused_tokens_upto[d]), s.input_tokens, self.input_tokens * self.rate, d,
                             self.adjust)
        reused = round(token_share * self.input_tokens)
        held = self.distinct_blocks if capacity_blocks is None else min(capacity_blocks, self.distinct_blocks)
        return replay_result("lru", self.block_tokens, capacity_tokens, capacity_blocks, self.requests,
                             self.skipped_lines, self.input_tokens, reused, self.total_blocks, hits, held)


def _share(sampled_hits: int, sampled: int, expected: float, depth: int, adjust: bool) -> float:
    """A hit rate [fraction] from the sample: sampled hits / sampled references; with ``adjust`` (SHARDS_adj,
    Waldspurger et al. FAST'15 section 4.2) the difference ``expected - sampled`` (the references a rate-R sample
    should have drawn, minus those it drew) is added to the first bucket (depth 1 and up) and the rate taken over
    ``expected``: a sample that drew a few hot blocks too many or too few is corrected where they sit, at the
    smallest depths. Clamped to [0, 1]."""
    if not adjust or expected <= 0:
        return sampled_hits / sampled if sampled else 0.0
    if depth < 1:
        return 0.0
    return min(1.0, max(0.0, (sampled_hits + expected - sampled) / expected))


class SampledLruEngine:
    """The engine interface over a spatially sampled trace (see the module doc)."""

    def __init__(self, rate: float, block_tokens: int, salt: int = 0, adjust: bool = False):
        check_rate(rate)
        self.rate = rate
        self.salt = salt  # mixed into every id before its hash (another salt: another sample)
        self.adjust = adjust
        self.block_tokens = block_tokens
        self._threshold = math.floor(rate * SAMPLE_SPACE)
        self._engine = LruStackEngine(block_tokens)
        self.requests = self.input_tokens = self.total_blocks = 0

    def add_records(self, records: Sequence, signed: bool = True) -> None:
        b = self.block_tokens
        threshold = self._threshold
        salt = self.salt
        kept = []
        for r in records:
            ids = r.hash_ids
            keep = [splitmix64(h ^ salt) % SAMPLE_SPACE < threshold for h in ids]
            sampled = [h for h, k in zip(ids, keep) if k]
            tokens = len(sampled) * b
            if keep and keep[-1]:  # the request's last block is kept: its own tokens (the partial one)
                tokens -= len(ids) * b - r.input_length
            kept.append(_Sampled(sampled, max(tokens, 0), r.output_length))
            self.input_tokens += r.input_length
            self.total_blocks += len(r.hash_ids)
        self.requests += len(records)
        self._engine.add_records(kept)

    def finish(self, skipped_lines: int = 0) -> SampledProfile:
        return SampledProfile(self.rate, self._engine.finish(skipped_lines), self.block_tokens, self.requests,
                              skipped_lines, self.input_tokens, self.total_blocks, self.adjust)


@dataclass(frozen=True)
class _Sampled:
    hash_ids: list
    input_length: int  # [tokens]: the kept blocks, whole
    output_length: int
