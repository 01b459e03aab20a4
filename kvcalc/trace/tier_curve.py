"""Whole curves over tier sizes in one pass: every tier's hits as one tier's capacity varies, the others fixed.

Tiers are depth ranges of one LRU stack (:mod:`kvcalc.trace.tiers`): at a point with cumulative capacities
``U_0 <= ... <= U_last`` [blocks], a block is a hit iff its request's prefix-maximum depth ``m <= U_last``,
and it is served by tier ``i`` iff its own depth ``d`` satisfies ``U_{i-1} < d <= U_i``. So one pass answers
every point at once from a histogram of the hit blocks keyed by two bins:

- the *U bin* of ``m`` among the sorted distinct ``U_last`` of all points (a point counts the blocks of U bins
  up to its own ``U_last``);
- the *V bin* of ``d`` among the sorted distinct inner bounds ``U_0 .. U_{last-1}`` of all points (each bin
  lies inside one tier at every point, as every point's bounds are grid edges).

Own depths are settled against the V bounds inside the chunk pass (:func:`kvcalc.trace.tiers.own_depths_in_bins`,
exact where a block's bounds straddle an edge). The histogram is kept per request within a chunk (its cells,
usually one to three per request), so each point also gets the requests with a hit in each tier (one
coalesced copy each): every point's :class:`TierHits` equal a separate tiered replay at that point's
capacities (tests/test_tier_curve.py). Memory: the engine's O(distinct blocks) plus points x tiers counters.

This module computes; it never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from kvcalc.out.errors import InputError
from kvcalc.trace.lru_curve import DEFAULT_CHUNK_ACCESSES, INF_DEPTH, LruProfile, LruStackEngine
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, TraceRequest
from kvcalc.trace.tiers import (TIER_ORDER, TierHits, check_tier_blocks, feed_trace_read, own_depths_in_bins,
                                tier_upper_bounds)


_BATCH_ELEMENTS = 1 << 20  # points x cells per step of a chunk's per-point sums


@dataclass(frozen=True)
class TierCurve:
    """Per-tier hits at every point of a tier curve, and the single-stack profile of the same pass."""

    points: tuple[tuple[Optional[int], ...], ...]  # tier capacities per point [blocks], fastest first
    hits: tuple[tuple[TierHits, ...], ...]  # per point, per tier
    profile: LruProfile
    trace_format: str = "mooncake"  # the format the trace was read as (kvcalc.trace.engine.format_read)


class TierCurveEngine(LruStackEngine):
    """The LRU stack-depth engine plus per-tier hits at many tier-capacity points [blocks], in one pass."""

    def __init__(self, block_tokens: int, points: Sequence[Sequence[Optional[int]]],
                 chunk_accesses: int = DEFAULT_CHUNK_ACCESSES):
        super().__init__(block_tokens, chunk_accesses)
        if not points:
            raise InputError("tier curve: give at least one point")
        for caps in points:
            check_tier_blocks(caps)
            if len(caps) != len(points[0]):
                raise InputError("tier curve: every point needs the same number of tiers")
        self.points = tuple(tuple(None if c is None else int(c) for c in caps) for caps in points)
        upper = np.stack([tier_upper_bounds(caps) for caps in self.points])  # [points, tiers]
        self._u_edges = np.unique(upper[:, -1])
        self._u_of_point = np.searchsorted(self._u_edges, upper[:, -1])
        self._v_edges = np.unique(upper[:, :-1])
        self._bin_top = np.append(self._v_edges, INF_DEPTH)  # the largest depth of each V bin
        self._inner = upper[:, :-1]  # each point's inner tier bounds: a V bin's tier is searchsorted of its top
        shape = upper.shape
        self._blocks, self._tokens, self._requests = (np.zeros(shape, np.int64) for _ in range(3))
        self._own_depth: Optional[np.ndarray] = None

    def _prefix_max_depths(self, prev, q, req, starts):
        """The engine's prefix maxima; own depths settled against the V edges kept aside."""
        prefix_max = super()._prefix_max_depths(prev, q, req, starts)
        self._own_depth = own_depths_in_bins(prefix_max, prev, q, req, starts, len(self._known_ids),
                                             self._v_edges)
        return prefix_max

    def _accumulate(self, prefix_max, req, pos, inputs) -> None:
        """The single-stack histograms, then each point's per-tier blocks, tokens and requests of this chunk."""
        super()._accumulate(prefix_max, req, pos, inputs)
        own, self._own_depth = self._own_depth, None
        hit = np.flatnonzero(prefix_max <= self._u_edges[-1])
        if not len(hit):
            return
        n_u, n_v, n_tier = len(self._u_edges), len(self._v_edges) + 1, self._blocks.shape[1]
        u_bin = np.searchsorted(self._u_edges, prefix_max[hit], side="left")
        v_bin = np.searchsorted(self._v_edges, own[hit], side="left")
        tokens = np.minimum(self.block_tokens, inputs[req[hit]] - pos[hit] * self.block_tokens)
        key = (req[hit] * n_u + u_bin) * n_v + v_bin
        runs = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))  # a request's blocks share few cells,
        # mostly in runs: sum the runs first, then merge equal cells (np.unique sorts far fewer keys)
        cells, inverse = np.unique(key[runs], return_inverse=True)
        cell_blocks = np.bincount(inverse, weights=np.diff(np.append(runs, len(key)))).astype(np.int64)
        cell_tokens = np.bincount(inverse, weights=np.add.reduceat(tokens, runs)).astype(np.int64)
        cell_req, cell_u, cell_v = cells // (n_u * n_v), cells // n_v % n_u, cells % n_v
        cell_top = self._bin_top[cell_v]
        n_cell, n_req = len(cells), len(inputs)
        step = max(1, _BATCH_ELEMENTS // n_cell)  # points at a time: (points x cells) arrays stay small
        for lo in range(0, len(self._u_of_point), step):
            pts = slice(lo, lo + step)
            m = len(self._u_of_point[pts])
            ok = cell_u[None, :] <= self._u_of_point[pts, None]  # [points, cells]: within the summed capacity
            tier = np.zeros((m, n_cell), np.int64)  # a V bin's tier: the point's inner bounds below its top
            for bound in self._inner[pts].T:
                tier += cell_top[None, :] > bound[:, None]
            point = np.broadcast_to(np.arange(m)[:, None], (m, n_cell))[ok]
            tier = tier[ok]
            row = point * n_tier + tier
            size = m * n_tier
            self._blocks[pts] += np.bincount(row, weights=np.broadcast_to(cell_blocks, (m, n_cell))[ok],
                                             minlength=size).astype(np.int64).reshape(m, n_tier)
            self._tokens[pts] += np.bincount(row, weights=np.broadcast_to(cell_tokens, (m, n_cell))[ok],
                                             minlength=size).astype(np.int64).reshape(m, n_tier)
            hit_req = np.zeros(m * n_req * n_tier, bool)  # (point, request, tier) with a hit
            hit_req[(point * n_req + np.broadcast_to(cell_req, (m, n_cell))[ok]) * n_tier + tier] = True
            self._requests[pts] += hit_req.reshape(m, n_req, n_tier).sum(axis=1)

    def finish_curve(self, names: Sequence[str], skipped_lines: int = 0) -> TierCurve:
        """Per-tier hits at every point, and the single-stack profile of everything added."""
        profile = self.finish(skipped_lines)
        hits = tuple(tuple(TierHits(name, cap, int(b), int(t), int(r)) for name, cap, b, t, r in zip(
            names, caps, self._blocks[p], self._tokens[p], self._requests[p])) for p, caps in enumerate(self.points))
        return TierCurve(self.points, hits, profile)


def tier_curve_of_requests(requests: Iterable[TraceRequest], points: Sequence[Sequence[Optional[int]]],
                           names: Sequence[str] = TIER_ORDER, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                           chunk_accesses: int = DEFAULT_CHUNK_ACCESSES, skipped_lines: int = 0) -> TierCurve:
    """Tier curve of in-memory requests; ``points``: tier capacities per point, fastest first [blocks]."""
    engine = TierCurveEngine(block_tokens, points, chunk_accesses)
    for request in requests:
        engine.add(request.hash_ids, request.input_length)
    return engine.finish_curve(names[:len(points[0])], skipped_lines)


def tier_curve(path: str | Path, points: Sequence[Sequence[Optional[int]]], names: Sequence[str] = TIER_ORDER,
               block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False,
               progress: Optional[Callable[[int], None]] = None, trace_format: str = "mooncake") -> TierCurve:
    """Tier curve of a trace file, in one streaming pass (``progress`` and ``trace_format`` as
    :func:`kvcalc.trace.tiers.tiered_profile`)."""
    from dataclasses import replace

    engine = TierCurveEngine(block_tokens, points)
    skipped, read = feed_trace_read(engine, path, skip_bad, progress, trace_format)
    return replace(engine.finish_curve(names[:len(points[0])], skipped), trace_format=read)


def vary_tier(capacity_blocks: Sequence[Optional[int]], tier: int, values_blocks: Sequence[int]) -> list[list]:
    """The points of a curve over tier ``tier``: ``capacity_blocks`` with that tier set to each value [blocks]."""
    return [[v if i == tier else c for i, c in enumerate(capacity_blocks)] for v in values_blocks]
