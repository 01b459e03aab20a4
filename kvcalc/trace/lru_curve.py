"""The one-pass LRU curve: hit rates of every cache capacity of a trace from one pass over its stack depths.

One-pass LRU curve (:func:`lru_curve`, :func:`lru_profile`): LRU has the inclusion property: a cache of
``C`` blocks always holds the ``C`` most recently used distinct blocks (the top ``C`` of the global LRU
stack). Before a request, block ``j`` has depth ``d_j`` = the number of distinct blocks whose last access is
at or after its own (infinite if never seen), so it is cached at capacity ``C`` iff ``d_j <= C``, and the
request's hit run at ``C`` is the number of leading ``j`` whose prefix maximum ``m_j = max(d_0..d_j) <= C``.
Each block's tokens (``B``, or the remainder for the last block) and a count of one go into histograms keyed
by ``m_j``; cumulative sums give reused tokens and hit blocks at every capacity at once, equal to separate
replays exactly. Depths are computed with numpy in chunks of requests: timestamps are compacted to the
live blocks at each chunk start, and within a chunk the depth of a block last seen at slot ``q``, for a
request starting at slot ``s``, is ``(s - q) - #{earlier accesses j in the chunk with prev(j) >= q}``,
counted for all accesses at once with a wavelet matrix. Depth never rises with the slot, so ``m_j`` is the
depth of the oldest slot among ``q_0..q_j``: only the accesses where that minimum drops are counted (mostly
one per request). Memory: the distinct blocks plus one chunk.

This is kvcalc's LRU engine for several capacities at once: several capacities and the curve come from it,
with the infinite cache and the distinct blocks of the trace statistics. One capacity alone (or only the
infinite cache) is replayed by :mod:`kvcalc.trace.lean` without numpy, with results equal to this engine's
(tested on random traces). Per-request answers (e.g. one capacity's reuse per request for
``compare --trace``, or tiers of inclusive caches) come from an engine ``sink``, which receives every chunk as a
:class:`DepthChunk` (blocks, input and output per request; each access's ``m_j``).

This module computes; it never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import NamedTuple

import numpy as np

from kvcalc.out.errors import InputError
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, TraceRequest, check_block_tokens, read_trace
from kvcalc.trace.result import ReplayResult, capacity_blocks_for, replay_result

DEFAULT_CHUNK_ACCESSES = 1 << 16  # minimum accesses per numpy chunk of the LRU curve
_MAX_CHUNK_ACCESSES = 1 << 24  # keeps request index * _DEPTH_SPAN below 2^63
_DEPTH_SPAN = 1 << 36  # depths (and chunk slots) stay below this; per-request offset for segmented scans
INF_DEPTH = _DEPTH_SPAN - 1


@dataclass(frozen=True)
class LruProfile:
    """LRU hit histograms keyed by stack depth: answers every capacity of one trace (see module doc).

    ``reused_tokens_upto[d]`` / ``hit_blocks_upto[d]`` are the reused tokens / hit blocks of a cache of
    ``d`` blocks, for ``d`` in ``0 .. distinct_blocks`` (larger caches behave like ``distinct_blocks``).
    """

    block_tokens: int
    requests: int
    skipped_lines: int
    input_tokens: int  # [tokens]
    total_blocks: int  # [blocks]
    distinct_blocks: int  # [blocks]
    reused_tokens_upto: np.ndarray  # [tokens], int64, cumulative by cache size in blocks
    hit_blocks_upto: np.ndarray  # [blocks], int64, cumulative by cache size in blocks

    def at(self, capacity_tokens: int | None) -> ReplayResult:
        """The LRU replay result of one capacity [tokens] (None = infinite)."""
        capacity_blocks = capacity_blocks_for(capacity_tokens, self.block_tokens)
        d = self.distinct_blocks if capacity_blocks is None else min(capacity_blocks, self.distinct_blocks)
        return replay_result(
            "lru", self.block_tokens, capacity_tokens, capacity_blocks, self.requests, self.skipped_lines,
            self.input_tokens, int(self.reused_tokens_upto[d]), self.total_blocks,
            int(self.hit_blocks_upto[d]), d,
        )


class _Request(NamedTuple):
    hash_ids: Sequence[int]
    input_length: int
    output_length: int


@dataclass(frozen=True)
class DepthChunk:
    """What the engine measured for a run of consecutive requests (handed to an engine's ``sink``).

    A request with hit run ``h`` at a cache of ``C`` blocks has ``h`` = the number of its accesses whose
    ``prefix_max <= C`` (they lead the request: prefix maxima only grow). Reusable for any capacity question
    asked per request (a single capacity's reuse, tiers of inclusive LRU caches).
    """

    counts: np.ndarray  # blocks per request [blocks], int64
    inputs: np.ndarray  # input length per request [tokens], int64
    outputs: list[int]  # output length per request [tokens] (exact integers)
    prefix_max: np.ndarray  # per access, in order: max stack depth of the request's blocks up to it [blocks];
    # INF_DEPTH from the request's first never-seen block on
    distinct_after: np.ndarray  # distinct blocks seen after each request [blocks]

    def hit_blocks(self, capacity_blocks: int | None) -> np.ndarray:
        """Per request: its hit run [blocks] at a cache of ``capacity_blocks`` (None = infinite)."""
        limit = INF_DEPTH - 1 if capacity_blocks is None else capacity_blocks
        req = np.repeat(np.arange(len(self.counts)), self.counts)
        return np.bincount(req, weights=self.prefix_max <= limit, minlength=len(self.counts)).astype(np.int64)


def count_prefix_at_least(values: np.ndarray, prefix_len: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """For each query i: ``#{j < prefix_len[i] : values[j] >= thresholds[i]}`` (offline, vectorized).

    ``values`` and ``thresholds`` are non-negative integers; a wavelet matrix over ``values`` answers all
    queries in O((len(values) + len(queries)) * bits) numpy work.
    """
    n_values = len(values)
    n_queries = len(prefix_len)
    if n_queries == 0:
        return np.zeros(0, np.int64)
    # only how values compare with thresholds matters: rank both among the distinct thresholds (fewer bits)
    levels = _sorted_unique(thresholds)
    values = np.searchsorted(levels, values, side="right")  # thresholds <= value
    thresholds = np.searchsorted(levels, thresholds, side="left") + 1  # v >= t  <=>  rank(v) >= rank(t)
    top = max(int(values.max()) if n_values else 0, int(thresholds.max())).bit_length()
    dtype = np.int32 if top < 31 and n_values < 2**31 else np.int64
    current = values.astype(dtype)
    thr = thresholds.astype(dtype)
    start = np.zeros(n_queries, dtype)
    end = prefix_len.astype(dtype)
    less = np.zeros(n_queries, dtype)
    rank1 = np.zeros(n_values + 1, dtype)  # rank1[i] = ones among current[:i]
    for bit in range(top - 1, -1, -1):
        bits = (current >> bit) & 1
        np.cumsum(bits, out=rank1[1:])
        zeros = n_values - int(rank1[-1])
        take_ones = ((thr >> bit) & 1).astype(bool)
        r1s = rank1[start]
        r1e = rank1[end]
        r0s = start - r1s
        r0e = end - r1e
        less += np.where(take_ones, r0e - r0s, 0)  # values with a 0 here are below the threshold
        start = np.where(take_ones, zeros + r1s, r0s)
        end = np.where(take_ones, zeros + r1e, r0e)
        ones = bits.astype(bool)
        current = np.concatenate((current[~ones], current[ones]))  # stable partition: zeros first
    return prefix_len.astype(np.int64) - less.astype(np.int64)


_HEAP_WARMED = []  # [True] once :func:`_keep_chunk_arrays_on_the_heap` ran in this process


def _keep_chunk_arrays_on_the_heap() -> None:
    """Allocate and free one ~31 MB array, once per process, so that glibc's malloc serves the engine's arrays
    from its heap.

    glibc maps each block above its mmap threshold (128 KiB at start) afresh and unmaps it when freed; freeing
    one raises the threshold to its size (at most 32 MiB) and the heap's trim threshold to twice that. The
    engine's arrays grow with the distinct blocks, so each chunk's were just above the last threshold: mapped,
    faulted in page by page, unmapped (20x Mooncake curve: ~45,000 page faults, 0.09-0.14 s of system time;
    after this: ~15,800 and 0.03-0.06 s, same peak RSS). ``np.empty`` touches no page, so this costs a map and
    an unmap; elsewhere than glibc it is a harmless allocation.
    """
    if not _HEAP_WARMED:
        _HEAP_WARMED.append(True)
        np.empty(31 << 20, np.uint8)


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-d integer array, by sorting (np.unique imports numpy.ma on first use: ~10 ms
    of every process that draws a curve)."""
    out = np.sort(values)
    return out[np.concatenate(([True], out[1:] != out[:-1]))] if len(out) else out


class LruStackEngine:
    """LRU stack-depth histograms over a stream of requests, computed in numpy chunks (see module doc).

    State between chunks: the known ids (sorted) and each one's last-access slot, compacted so that the
    ``D`` known blocks occupy slots ``0..D-1`` in LRU order (slot ``D-1`` = most recent). A chunk holds at
    least ``chunk_accesses`` accesses and at least ``D / 4`` (capped at 2^24), so the O(D) work per chunk
    (compaction, histogram update) stays O(1) per access and memory stays O(D).
    """

    def __init__(self, block_tokens: int, chunk_accesses: int = DEFAULT_CHUNK_ACCESSES,
                 sink: Callable[[DepthChunk], None] | None = None):
        check_block_tokens(block_tokens)
        _keep_chunk_arrays_on_the_heap()
        self.block_tokens = block_tokens
        self.chunk_accesses = max(1, int(chunk_accesses))
        self.sink = sink
        self._flush_at = self.chunk_accesses
        self._known_ids = np.zeros(0, np.int64)
        self._known_slot = np.zeros(0, np.int64)
        self._hist_tokens = np.zeros(1, np.int64)  # index: prefix-max depth [blocks]
        self._hist_blocks = np.zeros(1, np.int64)
        self._id_parts: list[np.ndarray] = []  # int64 ids per batch: 8 bytes an access, no Python ints kept
        self._buffered = 0  # accesses in _id_parts
        self._counts: list[int] = []
        self._inputs: list[int] = []
        self._outputs: list[int] = []
        self.requests = self.input_tokens = self.total_blocks = 0

    def add(self, hash_ids: Sequence[int], input_length: int, output_length: int = 0) -> None:
        """Buffer one request; a full buffer (accesses or requests) is processed as a chunk."""
        self.add_records((_Request(hash_ids, input_length, output_length),))

    def add_records(self, records: Sequence, signed: bool = True) -> None:
        """Buffer requests given as records with ``hash_ids``, ``input_length`` and ``output_length`` (``signed``:
        the engine interface's hint, unused: ids of any sign are sorted alike)."""
        ids = [r.hash_ids for r in records]
        counts = list(map(len, ids))
        n = sum(counts)
        self._id_parts.append(np.fromiter(chain.from_iterable(ids), np.int64, count=n))
        self._buffered += n
        self._counts += counts
        inputs = [r.input_length for r in records]
        self._inputs += inputs
        if self.sink is not None:  # only a sink reads the outputs
            self._outputs += [r.output_length for r in records]
        self.requests += len(records)
        self.input_tokens += sum(inputs)
        if self._buffered >= self._flush_at or len(self._counts) >= self._flush_at:
            self._flush()

    def _flush(self) -> None:
        """Process the buffered requests: depths, histograms, then the compacted state."""
        if not self._counts:
            return
        ids = np.concatenate(self._id_parts) if len(self._id_parts) > 1 else self._id_parts[0]
        counts = np.array(self._counts, dtype=np.int64)
        inputs = np.array(self._inputs, dtype=np.int64)
        outputs = self._outputs
        self._id_parts, self._buffered, self._counts, self._inputs, self._outputs = [], 0, [], [], []
        n = len(ids)
        self.total_blocks += n
        prev, q, req, pos, starts, found_loc, fids, found, last_local = self._previous_accesses(ids, counts)
        del ids
        prefix_max = self._prefix_max_depths(prev, q, req, starts)
        del q, starts
        self._accumulate(prefix_max, req, pos, inputs)
        del pos
        if self.sink is not None:
            self.sink(DepthChunk(counts, inputs, outputs, prefix_max, len(self._known_ids) + np.cumsum(
                np.bincount(req[prev < 0], minlength=len(counts)))))
        del prev, req, prefix_max  # the chunk's arrays go before the state's are rebuilt
        self._compact(n, found_loc, fids, found, last_local)
        self._flush_at = min(max(self.chunk_accesses, len(self._known_ids) // 4), _MAX_CHUNK_ACCESSES)

    def _previous_accesses(self, ids: np.ndarray, counts: np.ndarray):
        """Per access: slot of its previous access (prev) and of its last access before its request (q).

        Slots: known blocks ``0..D-1``; this chunk's accesses ``D + j``. ``-1`` = never seen.
        """
        n = len(ids)
        d = len(self._known_ids)
        starts = np.cumsum(counts) - counts  # first access of each request [chunk index]
        req = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        pos = np.arange(n, dtype=np.int64) - starts[req]  # block position inside its request
        order = np.argsort(ids, kind="stable")  # by id, then time
        sorted_ids = ids[order]
        first = np.ones(n, bool)
        np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=first[1:])
        last = np.ones(n, bool)
        np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=last[:-1])
        prev_sorted = np.empty(n, np.int64)
        prev_sorted[1:] = d + order[:-1]
        first_idx = np.flatnonzero(first)
        fids = sorted_ids[first_idx]
        loc = np.searchsorted(self._known_ids, fids)
        if d:
            found = self._known_ids[np.minimum(loc, d - 1)] == fids
        else:
            found = np.zeros(len(fids), bool)
        from_state = np.full(len(fids), -1, np.int64)
        from_state[found] = self._known_slot[loc[found]]
        prev_sorted[first_idx] = from_state
        # q: the previous access of the first occurrence of the id within the same request
        req_sorted = req[order]
        group_start = first.copy()
        group_start[1:] |= req_sorted[1:] != req_sorted[:-1]
        group_idx = np.maximum.accumulate(np.where(group_start, np.arange(n), 0))
        prev = np.empty(n, np.int64)
        prev[order] = prev_sorted
        q = np.empty(n, np.int64)
        q[order] = prev_sorted[group_idx]
        last_local = order[np.flatnonzero(last)]  # chunk index of each distinct id's last access
        return prev, q, req, pos, starts, loc, fids, found, last_local

    def _prefix_max_depths(self, prev: np.ndarray, q: np.ndarray, req: np.ndarray,
                           starts: np.ndarray) -> np.ndarray:
        """Per access: the largest stack depth [blocks] among its request's blocks up to it, before the request.

        INF_DEPTH once a block of the request up to it was never seen. Before a request, a block last used
        at an older slot is at least as deep (LRU stack order: depth never rises with the slot), so the
        largest depth so far is the depth of the oldest slot so far: depths are counted only where a
        request's running minimum slot drops (usually its first block only, as a shared prefix was last
        used in order), and only for the seen blocks before the request's first unseen one.
        """
        d = len(self._known_ids)
        if d + len(prev) >= INF_DEPTH:
            raise InputError("trace too large for the LRU curve (2^36 distinct blocks)")
        n = len(prev)
        prefix_max = np.full(n, INF_DEPTH, np.int64)
        if n == 0:
            return prefix_max
        unseen = q < 0
        unseen_so_far = np.cumsum(unseen)
        unseen_so_far -= (unseen_so_far - unseen)[starts[req]]  # per request: unseen blocks up to here
        need = np.flatnonzero(unseen_so_far == 0)  # per request, a leading run: empty or from its first block
        if not len(need):
            return prefix_max
        q_need, req_need = q[need], req[need]
        shift = req_need * _DEPTH_SPAN  # segmented running min: each request starts below the previous
        oldest = np.minimum.accumulate(q_need - shift) + shift
        record = np.flatnonzero(oldest == q_need)  # a new oldest slot (always a request's first needed block)
        q_rec = q_need[record]
        prefix = starts[req_need[record]]  # earlier accesses of the chunk: indices 0 .. start-1
        kept = prev >= 0  # an access to a never-seen block re-touches no slot: it never counts
        kept_before = np.concatenate(([0], np.cumsum(kept)))
        newer = count_prefix_at_least(prev[kept] + 1, kept_before[prefix], q_rec + 1)
        depth_rec = (d + prefix - q_rec) - newer  # distinct blocks touched since that slot
        filled = np.zeros(len(need), np.int64)
        filled[record] = np.arange(len(record))
        prefix_max[need] = depth_rec[np.maximum.accumulate(filled)]  # each block: its latest record's depth
        return prefix_max

    def _accumulate(self, prefix_max: np.ndarray, req: np.ndarray, pos: np.ndarray, inputs: np.ndarray) -> None:
        """Add each access's tokens and one block to the histograms at its request's prefix-max depth."""
        tokens = np.minimum(self.block_tokens, inputs[req] - pos * self.block_tokens)
        finite = prefix_max < INF_DEPTH
        keys = prefix_max[finite]
        if not len(keys):
            return
        size = int(keys.max()) + 1
        add_blocks = np.bincount(keys, minlength=size)
        add_tokens = np.rint(np.bincount(keys, weights=tokens[finite], minlength=size)).astype(np.int64)
        if size > len(self._hist_blocks):
            grow = size - len(self._hist_blocks)
            self._hist_blocks = np.concatenate((self._hist_blocks, np.zeros(grow, np.int64)))
            self._hist_tokens = np.concatenate((self._hist_tokens, np.zeros(grow, np.int64)))
        self._hist_blocks[:size] += add_blocks
        self._hist_tokens[:size] += add_tokens

    def _compact(self, n: int, loc: np.ndarray, fids: np.ndarray, found: np.ndarray,
                 last_local: np.ndarray) -> None:
        """Renumber the live slots (each block's last access) to ``0..D'-1``, keeping their order."""
        d = len(self._known_ids)
        alive = np.zeros(d + n, bool)
        alive[:d] = True
        alive[self._known_slot[loc[found]]] = False  # re-accessed: their old slot is dead
        alive[d + last_local] = True
        new_slot = np.cumsum(alive)
        del alive
        new_slot -= 1
        known_slot = self._known_slot
        np.take(new_slot, known_slot, out=known_slot)  # in place: the state is the largest array here
        chunk_slot = new_slot[d + last_local]
        del new_slot
        known_slot[loc[found]] = chunk_slot[found]
        fresh = ~found
        self._known_slot = None  # the old arrays go as their successors are built
        self._known_slot = np.insert(known_slot, loc[fresh], chunk_slot[fresh])
        del known_slot
        self._known_ids = np.insert(self._known_ids, loc[fresh], fids[fresh])

    def finish(self, skipped_lines: int = 0) -> LruProfile:
        """The cumulative histograms of everything added."""
        self._flush()
        distinct = len(self._known_ids)
        tokens, blocks = (_cumulative(hist, distinct + 1) for hist in (self._hist_tokens, self._hist_blocks))
        return LruProfile(
            block_tokens=self.block_tokens, requests=self.requests, skipped_lines=skipped_lines,
            input_tokens=self.input_tokens, total_blocks=self.total_blocks, distinct_blocks=distinct,
            reused_tokens_upto=tokens, hit_blocks_upto=blocks,
        )


def _cumulative(hist: np.ndarray, size: int) -> np.ndarray:
    """Running sums of ``hist`` padded or cut to ``size`` entries (one new array, summed in place)."""
    out = np.zeros(size, np.int64)
    n = min(len(hist), size)
    out[:n] = hist[:n]
    return np.cumsum(out, out=out)


def lru_profile_of_requests(requests: Iterable[TraceRequest], block_tokens: int = DEFAULT_BLOCK_TOKENS,
                            skipped_lines: int = 0,
                            chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> LruProfile:
    """LRU depth histograms of in-memory requests (one pass)."""
    engine = LruStackEngine(block_tokens, chunk_accesses)
    for request in requests:
        engine.add(request.hash_ids, request.input_length, request.output_length)
    return engine.finish(skipped_lines)


def lru_profile(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False,
                chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> LruProfile:
    """LRU depth histograms of a trace file, in one streaming pass."""
    reader = read_trace(path, block_tokens, skip_bad)
    engine = LruStackEngine(block_tokens, chunk_accesses)
    for records, _ in reader.batches():
        engine.add_records(records)
    return engine.finish(reader.skipped_lines)


def depth_chunks(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False,
                 chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> Iterator[DepthChunk]:
    """The engine's per-request depths of a trace file, chunk by chunk, in one streaming pass (see
    :class:`DepthChunk`; e.g. ``chunk.hit_blocks(C)`` is each request's hit run at a cache of C blocks)."""
    pending: list[DepthChunk] = []
    engine = LruStackEngine(block_tokens, chunk_accesses, sink=pending.append)
    for records, _ in read_trace(path, block_tokens, skip_bad).batches():
        engine.add_records(records)
        yield from pending
        pending.clear()
    engine.finish()
    yield from pending


def lru_curve_of_requests(requests: Iterable[TraceRequest], capacities_tokens: Sequence[int | None],
                          block_tokens: int = DEFAULT_BLOCK_TOKENS, skipped_lines: int = 0,
                          chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> tuple[ReplayResult, ...]:
    """LRU results at every capacity [tokens] (None = infinite) of in-memory requests, in one pass."""
    for capacity in capacities_tokens:
        capacity_blocks_for(capacity, block_tokens)  # validate before the pass
    profile = lru_profile_of_requests(requests, block_tokens, skipped_lines, chunk_accesses)
    return tuple(profile.at(capacity) for capacity in capacities_tokens)


def lru_curve(path: str | Path, capacities_tokens: Sequence[int | None], block_tokens: int = DEFAULT_BLOCK_TOKENS,
              skip_bad: bool = False, chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> tuple[ReplayResult, ...]:
    """LRU results at every capacity [tokens] (None = infinite) of a trace file, in one streaming pass."""
    for capacity in capacities_tokens:
        capacity_blocks_for(capacity, block_tokens)
    profile = lru_profile(path, block_tokens, skip_bad, chunk_accesses)
    return tuple(profile.at(capacity) for capacity in capacities_tokens)
