"""The lean replay: one LRU capacity (and FIFO) simulated directly, in pure Python, with memory for what it holds.

The stack-depth engine (:mod:`kvcalc.trace.lru_curve`) answers every LRU capacity at once, but it keeps numpy
arrays of every distinct block; a question about one capacity needs only the cache itself. This module replays
the trace through

- at most one finite LRU cache: an ``OrderedDict`` of at most ``floor(capacity / B)`` block ids (as a direct
  replay does), or any number of FIFO caches (:class:`kvcalc.trace.replay.CacheSimulator`);
- the blocks seen so far (:class:`SeenBlocks`): an infinite cache holds exactly the blocks seen before, so it
  gives the infinite capacity's result (LRU and FIFO alike), the trace's distinct blocks and its maximum hit
  rate, as the stack-depth profile at an infinite capacity does.

Semantics are those of :mod:`kvcalc.trace.replay`; results equal the stack-depth engine's exactly (tests compare
them on random traces). Neither numpy nor pydantic is imported: the process stays a few MB above the
interpreter and the CLI, whatever the trace's length. :func:`answers_lean` says which questions come here
(:func:`kvcalc.trace.analysis.analyze_trace` dispatches).

This module computes; it never prints.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Sequence
from itertools import chain, compress
from pathlib import Path

from kvcalc.trace.analysis import TraceAnalysis
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, read_trace
from kvcalc.trace.replay import CacheSimulator, capacity_blocks_for, replay_result
from kvcalc.trace.stats import StatsAccumulator

MIN_TABLE_BYTES = 1 << 20  # the byte-per-id table of seen blocks may always grow to 1 MiB [B]
TABLE_BYTES_PER_BLOCK = 32  # beyond that, to at most 32 B per (possibly) distinct block [B]; a dict costs ~100


def answers_lean(capacities_tokens: Sequence[int | None], policy: str) -> bool:
    """True when the lean replay answers: FIFO (one direct cache per capacity anyway), or LRU with at most one
    distinct finite capacity (and any number of infinite ones); several LRU capacities take the stack engine."""
    return policy == "fifo" or len({c for c in capacities_tokens if c is not None}) <= 1


class SeenBlocks:
    """The block ids seen so far, with memory bounded by the distinct blocks (never by the trace's length).

    ``table[h]`` is 1 for a seen id ``h`` and 0 otherwise (or, in a bytearray, IndexError beyond it: never
    seen); ``table[h] = 1`` marks it, and where that raises IndexError, :meth:`grow` marks it and returns the
    table to use from then on. While every id is a non-negative integer, ``table`` is a ``bytearray`` indexed
    by id (one byte per id up to the largest: dense ids such as Mooncake's cost ~1 B per block), grown by
    doubling up to ``max(MIN_TABLE_BYTES, TABLE_BYTES_PER_BLOCK x distinct blocks)``. An id beyond that, or a
    negative one (:meth:`check_signs`), turns it into a ``defaultdict(int)`` of the ids (reading an unseen id
    inserts a 0; the replay marks every id of a request, so after a request every entry is 1).
    """

    def __init__(self) -> None:
        self.table: bytearray | defaultdict = bytearray()

    def check_signs(self, records: Sequence) -> None:
        """Before reading ``records`` whose text holds a ``-``: a negative id turns the table into a dict (a
        bytearray would read it from its end)."""
        if type(self.table) is bytearray:
            ids = [r.hash_ids for r in records if r.hash_ids]
            if ids and min(map(min, ids)) < 0:
                self._to_dict()

    def grow(self, h: int) -> bytearray | defaultdict:
        """Mark id ``h``, which the bytearray does not reach; return the table (grown, or a dict)."""
        table = self.table
        allowed = max(MIN_TABLE_BYTES, TABLE_BYTES_PER_BLOCK * (table.count(1) + 1))
        if 0 <= h < allowed:
            table.extend(bytes(min(max(h + 1, 2 * len(table)), allowed) - len(table)))
        else:
            table = self._to_dict()
        table[h] = 1
        return table

    def _to_dict(self) -> defaultdict:
        seen: defaultdict = defaultdict(int)
        seen.update(dict.fromkeys(compress(range(len(self.table)), self.table), 1))
        self.table = seen
        return seen

    def count(self) -> int:
        """Distinct ids seen [blocks]."""
        table = self.table
        return table.count(1) if type(table) is bytearray else sum(table.values())


def _replay(records: Sequence, cache: OrderedDict | None, room: int, seen: SeenBlocks,
            block_tokens: int) -> tuple[int, ...]:
    """One LRU cache with ``room`` free blocks (``cache`` None: none) and the seen blocks, through ``records``
    (both updated in place).

    Returns (room left, hit blocks, reused tokens, infinite-cache hit blocks, infinite-cache reused tokens,
    blocks, input tokens). A request's leading cached blocks are refreshed as they are counted (no block is
    inserted or evicted before its first miss, so the run is the one of the cache before the request). The
    infinite cache's run goes on from there while the blocks were seen; a block found in the LRU cache was
    seen, so only the others are marked. A full cache (no room) evicts its oldest block per insertion.
    """
    table = seen.table
    hits = reused = inf_hits = inf_reused = total = inputs = 0
    if cache is not None:
        move = cache.move_to_end
        evict = cache.popitem
    for r in records:
        ids = r.hash_ids
        length = r.input_length
        n = len(ids)
        hit = 0
        rest = iter(ids)
        if cache is not None:
            for h in rest:
                if h in cache:
                    move(h)
                    hit += 1
                else:
                    rest = chain((h,), rest)
                    break
        inf = hit
        try:
            while inf < n and table[ids[inf]]:
                inf += 1
        except IndexError:  # beyond the bytearray: never seen
            pass
        if cache is None:
            for h in rest:
                try:
                    table[h] = 1
                except IndexError:
                    table = seen.grow(h)
        else:
            for h in rest:
                if h in cache:
                    move(h)
                else:
                    cache[h] = None
                    if room:
                        room -= 1
                    else:
                        evict(False)
                    try:
                        table[h] = 1
                    except IndexError:
                        table = seen.grow(h)
        hits += hit
        reused += min(hit * block_tokens, length)
        inf_hits += inf
        inf_reused += min(inf * block_tokens, length)
        total += n
        inputs += length
    return room, hits, reused, inf_hits, inf_reused, total, inputs


def lean_analysis(path: str | Path, capacities_tokens: Sequence[int | None],
                  block_tokens: int = DEFAULT_BLOCK_TOKENS, policy: str = "lru",
                  skip_bad: bool = False) -> TraceAnalysis:
    """Statistics plus one result per capacity [tokens] (None = infinite), in one streaming pass, without numpy.

    Only for the questions of :func:`answers_lean` (checked by the caller,
    :func:`kvcalc.trace.analysis.analyze_trace`, which also validates the arguments).
    """
    finite = sorted({c for c in capacities_tokens if c is not None})
    lru_tokens = finite[0] if policy == "lru" and finite else None
    cache = OrderedDict() if lru_tokens is not None else None
    limit = capacity_blocks_for(lru_tokens, block_tokens) if lru_tokens is not None else 0
    room = limit
    sims = {c: CacheSimulator(c, block_tokens, policy) for c in finite} if policy == "fifo" else {}
    reader = read_trace(path, block_tokens, skip_bad)
    stats = StatsAccumulator(block_tokens)
    seen = SeenBlocks()
    counts = [0] * 6  # hit blocks, reused tokens (the LRU cache); the same for the infinite one; blocks; inputs
    for records, _, signed in reader.signed_batches():
        stats.add_records(records)
        if signed:
            seen.check_signs(records)
        room, *batch = _replay(records, cache, room, seen, block_tokens)
        counts = [a + b for a, b in zip(counts, batch)]
        for sim in sims.values():
            for r in records:
                sim.add(r.hash_ids, r.input_length)
    hits, reused, inf_hits, inf_reused, total, inputs = counts
    skipped = reader.skipped_lines
    requests = reader.requests
    infinite = replay_result(policy, block_tokens, None, None, requests, skipped, inputs, inf_reused, total,
                             inf_hits, seen.count())
    results = []
    for c in capacities_tokens:
        if c is None:
            results.append(infinite)
        elif policy == "fifo":
            results.append(sims[c].finish(skipped))
        else:
            results.append(replay_result("lru", block_tokens, c, limit, requests, skipped, inputs, reused, total,
                                         hits, len(cache)))
    return TraceAnalysis(stats=stats.finish(skipped, infinite), results=tuple(results),
                         first_problem=reader.first_problem)
