"""Tiered LRU replay (HBM -> DRAM -> SSD) as depth ranges of one LRU stack, in one pass.

Exclusive tiers with demotion and promotion: a block lives in at most one tier; a new or re-used block goes
to the top tier (HBM) as its most recent block; a tier over its capacity demotes its least recent block to
the next tier as that tier's most recent block; the last tier evicts. That is exactly one LRU stack of the
summed capacity cut into depth ranges: tier ``i`` holds the blocks at depths ``U_{i-1} < d <= U_i`` where
``U_i = c_0 + ... + c_i`` (cumulative capacities in blocks; a promotion moves the block to depth 1 and shifts
every block above it down by one, which is one demotion across each boundary above it).

So the stack depths of :class:`kvcalc.trace.lru_curve.LruStackEngine` answer every tier at once:

- a request's hit run is the leading blocks whose prefix-maximum depth is ``<= U_last`` (as for one cache of
  the summed capacity, so the tiers' hits add up to that cache's hits, exactly);
- each block of the run was served by the tier its *own* depth before the request falls in. The engine
  counts depths only where a request's prefix maximum rises; own depths are settled inside the same chunk
  pass against the tier bounds (:func:`own_depths_in_bins`: an upper and a lower bound from the slots the
  engine already has decide nearly every block; only those straddling a bound are counted exactly), then
  binned with ``np.searchsorted`` and summed per request and tier with ``np.bincount``.

Per tier: hit blocks, hit tokens (``B`` per block, the remainder for a request's last one) and the requests
with at least one hit there (one coalesced copy each). With ``keep_requests`` the per-request hits per tier
are kept as well (memory O(requests)); otherwise memory is that of the engine, O(distinct blocks).

This module computes; it never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from kvcalc.out.errors import InputError
from kvcalc.trace.lru_curve import (DEFAULT_CHUNK_ACCESSES, INF_DEPTH, LruProfile, LruStackEngine,
                                    count_prefix_at_least)
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, TraceRequest

PROGRESS_EVERY = 1000  # requests between progress callbacks
TIER_ORDER = ("hbm", "dram", "ssd")  # fastest first; demotion runs left to right
_BIG_DEPTH = INF_DEPTH  # the engine's never-seen depth; capacities are capped just below it
_SPAN = INF_DEPTH + 1  # per-request offset of the segmented running max (requests per chunk < 2^24)


@dataclass(frozen=True)
class TierHits:
    """What one tier served over a trace."""

    name: str
    capacity_blocks: Optional[int]  # [blocks]; None = infinite (last tier only)
    hit_blocks: int  # [blocks]
    hit_tokens: int  # [tokens]
    hit_requests: int  # requests with at least one hit block in this tier


@dataclass(frozen=True)
class TieredProfile:
    """Per-tier hits of one tiered LRU replay, and the single-stack profile of the same pass."""

    tiers: tuple[TierHits, ...]
    profile: LruProfile  # the one LRU stack: profile.at(summed capacity) == the tiers' hits summed
    request_hit_blocks: Optional[np.ndarray] = None  # [requests, tiers] int64, with keep_requests
    request_hit_tokens: Optional[np.ndarray] = None  # [requests, tiers] int64, with keep_requests
    trace_format: str = "mooncake"  # the format the trace was read as (kvcalc.trace.engine.format_read)

    @property
    def total_capacity_blocks(self) -> Optional[int]:
        """Summed capacity [blocks]; None when the last tier is infinite."""
        caps = [t.capacity_blocks for t in self.tiers]
        return None if None in caps else sum(caps)


def check_tier_blocks(capacity_blocks: Sequence[Optional[int]]) -> None:
    """Capacities [blocks] >= 0, whole numbers; only the last may be None (infinite)."""
    if not capacity_blocks:
        raise InputError("--tiers: give at least one tier")
    for i, c in enumerate(capacity_blocks):
        if c is None:
            if i != len(capacity_blocks) - 1:
                raise InputError("tier capacity: only the last tier may be infinite")
            continue
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 0:
            raise InputError(f"tier capacity: must be a whole number of blocks >= 0, got {c!r}")


def tier_upper_bounds(capacity_blocks: Sequence[Optional[int]]) -> np.ndarray:
    """``U_i = c_0 + ... + c_i`` [blocks], int64: tier ``i`` holds the stack depths ``U_{i-1} < d <= U_i``.

    An infinite (None) or huge capacity is capped just below the engine's never-seen depth.
    """
    caps = [_BIG_DEPTH - 1 if c is None else min(int(c), _BIG_DEPTH - 1) for c in capacity_blocks]
    return np.minimum(np.cumsum(np.array(caps, np.int64)), _BIG_DEPTH - 1)


def own_depths_in_bins(prefix_max: np.ndarray, prev: np.ndarray, q: np.ndarray, req: np.ndarray,
                       starts: np.ndarray, known: int, bounds: np.ndarray) -> np.ndarray:
    """Per access of a chunk: a depth [blocks] in the same bin of sorted ``bounds`` as the block's own depth.

    Bins: ``np.searchsorted(bounds, depth, side="left")`` (depth <= bounds[0] is bin 0, and so on); a tier's
    own depth only matters up to which tier bounds it lies between. Returned for the seen leading run of each
    request (``prefix_max < INF_DEPTH``); other entries are ``prefix_max``. Arguments as
    :meth:`LruStackEngine._prefix_max_depths` has them (``known`` = blocks known before the chunk).

    A block's own depth ``d`` (distinct blocks at or above its slot ``q`` before the request) lies between two
    bounds read off what the engine has: ``d <= m`` (its prefix maximum, the depth of the request's oldest
    slot so far, ``o``) and ``d >= m - (q - o)`` (only the live slots in ``[o, q)`` lie between the two, at
    most ``q - o`` of them). A shared prefix is re-read in the order it was written, so ``q - o`` is the
    block's position past the record and both ends nearly always fall in one bin: that bin is the answer,
    and ``m`` is returned. Only the blocks whose two ends straddle a bound (about 1% on the Mooncake trace)
    are counted exactly, with the engine's formula: ``d = (known + accesses of the chunk before the request
    - q) - #{those accesses re-touching a slot >= q}`` (:func:`count_prefix_at_least`).
    """
    own = prefix_max.copy()
    if not len(bounds):
        return own
    sel = np.flatnonzero((prefix_max > bounds[0]) & (prefix_max < INF_DEPTH))
    if not len(sel):
        return own
    # the selection is a suffix of each request's seen run that starts at a new oldest slot (its prefix maximum
    # just rose), so its segmented running minimum is the request's oldest slot so far
    q_sel, m_sel = q[sel], prefix_max[sel]
    shift = req[sel] * _SPAN
    oldest = np.minimum.accumulate(q_sel - shift) + shift
    low = m_sel - (q_sel - oldest)
    straddle = np.searchsorted(bounds, low, side="left") != np.searchsorted(bounds, m_sel, side="left")
    cand = sel[straddle]
    if len(cand):
        q_c = q[cand]
        prefix = starts[req[cand]]
        kept = prev >= q_c.min()  # an access re-touching an older slot than every query never counts
        kept_before = np.concatenate(([0], np.cumsum(kept)))
        newer = count_prefix_at_least(prev[kept] + 1, kept_before[prefix], q_c + 1)
        own[cand] = (known + prefix - q_c) - newer
    return own


class TieredLruEngine(LruStackEngine):
    """The LRU stack-depth engine plus per-tier hit counts for fixed tier capacities [blocks]."""

    def __init__(self, block_tokens: int, capacity_blocks: Sequence[Optional[int]],
                 chunk_accesses: int = DEFAULT_CHUNK_ACCESSES, keep_requests: bool = False):
        super().__init__(block_tokens, chunk_accesses)
        check_tier_blocks(capacity_blocks)
        self.capacity_blocks = tuple(None if c is None else int(c) for c in capacity_blocks)
        n = len(self.capacity_blocks)
        self._upper = tier_upper_bounds(self.capacity_blocks)  # U_i [blocks]
        self._tier_blocks = np.zeros(n, np.int64)
        self._tier_tokens = np.zeros(n, np.int64)
        self._tier_requests = np.zeros(n, np.int64)
        self._keep = keep_requests
        self._has_blocks: list[bool] = []
        self._req_blocks: list[np.ndarray] = []
        self._req_tokens: list[np.ndarray] = []
        self._own_depth: Optional[np.ndarray] = None  # per access of the chunk being processed [blocks]

    def add_records(self, records: Sequence, signed: bool = True) -> None:
        """Buffer requests (see LruStackEngine.add_records)."""
        if self._keep:
            self._has_blocks += [bool(r.hash_ids) for r in records]
        super().add_records(records)

    def _prefix_max_depths(self, prev, q, req, starts):
        """The engine's prefix maxima; each access's own depth, exact up to the tier bounds, is kept aside."""
        prefix_max = super()._prefix_max_depths(prev, q, req, starts)
        self._own_depth = own_depths_in_bins(prefix_max, prev, q, req, starts, len(self._known_ids),
                                             self._upper[:-1])
        return prefix_max

    def _accumulate(self, prefix_max, req, pos, inputs) -> None:
        """The single-stack histograms, then per tier: hit blocks, tokens and requests of this chunk.

        The hit run is decided by the prefix maximum (as for one cache of the summed capacity), the tier of
        each of its blocks by that block's own depth (from :meth:`_prefix_max_depths`); the brute-force tests
        in tests/test_tiers.py guard both.
        """
        super()._accumulate(prefix_max, req, pos, inputs)
        n_req, n_tier = len(inputs), len(self.capacity_blocks)
        hit = prefix_max <= self._upper[-1]
        tier = np.searchsorted(self._upper, self._own_depth[hit], side="left")
        tokens = np.minimum(self.block_tokens, inputs[req[hit]] - pos[hit] * self.block_tokens)
        cell = req[hit] * n_tier + tier
        blocks = np.bincount(cell, minlength=n_req * n_tier).reshape(n_req, n_tier).astype(np.int64)
        toks = np.rint(np.bincount(cell, weights=tokens, minlength=n_req * n_tier)).astype(np.int64)
        toks = toks.reshape(n_req, n_tier)
        self._own_depth = None
        self._tier_blocks += blocks.sum(axis=0)
        self._tier_tokens += toks.sum(axis=0)
        self._tier_requests += (blocks > 0).sum(axis=0)
        if self._keep:
            self._req_blocks.append(blocks)
            self._req_tokens.append(toks)

    def _rows(self, parts: list[np.ndarray]) -> np.ndarray:
        """Per-request rows [requests, tiers], zero rows for requests the engine did not see (no blocks)."""
        n_tier = len(self.capacity_blocks)
        rows = np.concatenate(parts) if parts else np.zeros((0, n_tier), np.int64)
        if len(rows) == self.requests:
            return rows
        full = np.zeros((self.requests, n_tier), np.int64)
        full[np.array(self._has_blocks, bool)] = rows
        return full

    def finish_tiers(self, names: Sequence[str], skipped_lines: int = 0) -> TieredProfile:
        """Per-tier hits and the single-stack profile of everything added."""
        profile = self.finish(skipped_lines)
        tiers = tuple(TierHits(name, cap, int(b), int(t), int(r)) for name, cap, b, t, r in zip(
            names, self.capacity_blocks, self._tier_blocks, self._tier_tokens, self._tier_requests))
        if not self._keep:
            return TieredProfile(tiers, profile)
        return TieredProfile(tiers, profile, self._rows(self._req_blocks), self._rows(self._req_tokens))


def tiered_profile_of_requests(requests: Iterable[TraceRequest], capacity_blocks: Sequence[Optional[int]],
                               names: Sequence[str] = TIER_ORDER, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                               keep_requests: bool = False, chunk_accesses: int = DEFAULT_CHUNK_ACCESSES,
                               skipped_lines: int = 0) -> TieredProfile:
    """Tiered LRU replay of in-memory requests; ``capacity_blocks`` per tier, fastest first [blocks]."""
    engine = TieredLruEngine(block_tokens, capacity_blocks, chunk_accesses, keep_requests)
    for request in requests:
        engine.add(request.hash_ids, request.input_length)
    return engine.finish_tiers(names[:len(capacity_blocks)], skipped_lines)


def tiered_profile(path: str | Path, capacity_blocks: Sequence[Optional[int]], names: Sequence[str] = TIER_ORDER,
                   block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False, keep_requests: bool = False,
                   progress: Optional[Callable[[int], None]] = None, trace_format: str = "mooncake") -> TieredProfile:
    """Tiered LRU replay of a trace file, in one streaming pass (see the module doc).

    ``progress(requests read)`` is called about every :data:`PROGRESS_EVERY` requests when given (per batch of
    lines read, rounded down to a multiple of it). ``trace_format``: any hash-id format of
    :mod:`kvcalc.trace.formats` (``auto`` detects it).
    """
    from dataclasses import replace

    engine = TieredLruEngine(block_tokens, capacity_blocks, keep_requests=keep_requests)
    skipped, read = feed_trace_read(engine, path, skip_bad, progress, trace_format)
    return replace(engine.finish_tiers(names[:len(capacity_blocks)], skipped), trace_format=read)


def feed_trace(engine: LruStackEngine, path: str | Path, skip_bad: bool = False,
               progress: Optional[Callable[[int], None]] = None, trace_format: str = "mooncake") -> int:
    """Stream a trace file (any hash-id format, :func:`kvcalc.trace.formats.open_replay_trace`) into an engine,
    calling ``progress(requests read)`` about every :data:`PROGRESS_EVERY` requests (per batch of lines,
    rounded down to a multiple of it); returns the skipped lines."""
    return feed_trace_read(engine, path, skip_bad, progress, trace_format)[0]


def feed_trace_read(engine: LruStackEngine, path: str | Path, skip_bad: bool = False,
                    progress: Optional[Callable[[int], None]] = None,
                    trace_format: str = "mooncake") -> tuple[int, str]:
    """:func:`feed_trace`, returning (skipped lines, the format read: :func:`kvcalc.trace.engine.format_read`)."""
    from kvcalc.trace.engine import format_read
    from kvcalc.trace.formats import open_replay_trace

    reader = open_replay_trace(path, engine.block_tokens, skip_bad, trace_format)
    reported = 0
    for records, _ in reader.batches():
        engine.add_records(records)
        if progress is not None and engine.requests - reported >= PROGRESS_EVERY:
            reported = engine.requests - engine.requests % PROGRESS_EVERY
            progress(reported)
    return reader.skipped_lines, format_read(reader)
