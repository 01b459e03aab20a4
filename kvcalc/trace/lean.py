"""The lean replay: one LRU capacity (and FIFO) simulated directly, in pure Python, with memory for what it holds.

The stack-depth engine (:mod:`kvcalc.trace.lru_curve`) answers every LRU capacity at once, but it keeps numpy
arrays of every distinct block; a question about one capacity needs only the cache itself. This module replays
the trace through

- at most one finite LRU cache: an ``OrderedDict`` of at most ``floor(capacity / B)`` block ids (as a direct
  replay does), or any number of caches of another policy (:mod:`kvcalc.trace.policies`);
- the blocks seen so far (:class:`SeenBlocks`): an infinite cache holds exactly the blocks seen before, so it
  gives the infinite capacity's result (LRU and FIFO alike), the trace's distinct blocks and its maximum hit
  rate, as the stack-depth profile at an infinite capacity does.

Semantics are those of :mod:`kvcalc.trace.result`; results equal the stack-depth engine's exactly (tests compare
them on random traces). Neither numpy nor pydantic is imported: the process stays a few MB above the
interpreter and the CLI, whatever the trace's length. :func:`answers_lean` says which questions come here
(:func:`kvcalc.trace.analysis.analyze_trace` dispatches).

This module computes; it never prints.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict, deque
from collections.abc import Sequence
from itertools import compress, islice, repeat, takewhile
from operator import setitem
from pathlib import Path

from kvcalc.out.errors import InputError
from kvcalc.trace.engine import FixedAnswers, PolicyEngine, TraceAnalysis, run_pass
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, read_trace
from kvcalc.trace.result import capacity_blocks_for, replay_result
from kvcalc.trace.seen_sample import KEY_PRIME, SeenSample

WIDE_TABLE_BYTES = 1 << 20  # ids below this have a byte each in the table of seen blocks [B]: the fastest form
TABLE_BYTES_PER_BLOCK = 4  # and so do ids below 4x the (possibly) distinct blocks (a byte table within 4 B per
# block); beyond, one bit per id while the table stays within max(WIDE_TABLE_BYTES, 4 B per (possibly) distinct
# block) [B], i.e. ids up to 32x the distinct blocks; else a dict (~100 B per block)


def answers_lean(capacities_tokens: Sequence[int | None], policy: str) -> bool:
    """True when the lean replay answers: any policy but LRU (one direct cache per capacity anyway), or LRU with
    at most one distinct finite capacity (and any number of infinite ones); several LRU capacities take the
    stack engine."""
    return policy != "lru" or len({c for c in capacities_tokens if c is not None}) <= 1


class SeenBlocks:
    """The block ids seen so far, with memory bounded by the distinct blocks (never by the trace's length).

    Three forms, from the fastest: while every id is a non-negative integer below ``WIDE_TABLE_BYTES``, or
    the table, grown by a quarter at least, stays within ``TABLE_BYTES_PER_BLOCK x distinct blocks`` (Mooncake's
    dense ids: about 1 B per block), ``table`` is a ``bytearray`` with a byte per id (``wide``: ``table[h]`` is 1 once ``h`` was seen); beyond,
    a ``bytearray`` with a bit per id (not ``wide``: bit ``h & 7`` of ``table[h >> 3]``) while it stays within ``max(WIDE_TABLE_BYTES, TABLE_BYTES_PER_BLOCK x distinct
    blocks)``; otherwise (or for a negative id, :meth:`check_signs`) a ``defaultdict(int)`` of the ids, read and
    marked as the wide table (reading an unseen id inserts a 0; the replay marks every id of a request, so
    after a request every entry is 1). Reading an id beyond a bytearray raises IndexError (never seen); marking
    one calls :meth:`grow`, which returns the table and form to use from then on.
    """

    def __init__(self) -> None:
        self.table: bytearray | defaultdict = bytearray()
        self.wide = True  # a byte (or a dict entry) per id; False: a bit per id

    def check_signs(self, records: Sequence) -> None:
        """Before reading ``records`` whose text holds a ``-``: a negative id turns the table into a dict (a
        bytearray would read it from its end)."""
        if type(self.table) is bytearray:
            ids = [r.hash_ids for r in records if r.hash_ids]
            if ids and min(map(min, ids)) < 0:
                self._to_dict()

    def grow(self, h: int) -> tuple[bytearray | defaultdict, bool]:
        """Mark id ``h``, beyond the bytearray; return (table, wide): grown, a bit per id, or a dict."""
        table = self.table
        if self.wide and 0 <= h < WIDE_TABLE_BYTES:
            _extend(table, h + 1, WIDE_TABLE_BYTES)
            table[h] = 1
            return table, True
        size = max(h + 1, len(table) + (len(table) >> 2))  # by a quarter at least: few counts, linear in all
        if self.wide and 0 <= h and size <= TABLE_BYTES_PER_BLOCK * (self.count() + 1):
            _extend(table, size, size)  # still a byte per id (C-level reads and marks), within 4 B per block
            table[h] = 1
            return table, True
        allowed = max(WIDE_TABLE_BYTES, TABLE_BYTES_PER_BLOCK * (self._bound_count() + 1))
        if 0 <= h and h >= 8 * allowed:  # the cached count may be stale: recount before leaving the table
            allowed = max(WIDE_TABLE_BYTES, TABLE_BYTES_PER_BLOCK * (self._bound_count(fresh=True) + 1))
        if not 0 <= h < 8 * allowed:
            self._to_dict()[h] = 1
        else:
            if self.wide:
                table = self.table = _bits_of(table)
                self.wide = False
            _extend(table, (h >> 3) + 1, allowed)
            table[h >> 3] |= 1 << (h & 7)
        return self.table, self.wide

    def _ids(self) -> list[int]:
        """The ids seen, from a bytearray (either form)."""
        table = self.table
        if self.wide:
            return list(compress(range(len(table)), table))
        return [8 * i + k for i in compress(range(len(table)), table) for k in range(8) if table[i] >> k & 1]

    def _to_dict(self) -> defaultdict:
        seen: defaultdict = defaultdict(int)
        seen.update(dict.fromkeys(self._ids(), 1))
        self.table, self.wide = seen, True
        return seen

    def _bound_count(self, fresh: bool = False) -> int:
        """A lower bound on the distinct ids seen, recounted only once the table grew by a quarter since the last
        count, or when ``fresh`` [blocks]: a bit table capped at 4 B per block grows by as little as 64 KiB a
        time, and a recount per growth would cost O(table^2 / 64 KiB) on ids spaced just inside the cap. A stale
        (lower) count only caps a growth smaller; the table is left (for the dict) on a fresh count only, so the
        form chosen, and the figures, are those of an exact count."""
        size = len(self.table) if type(self.table) is bytearray else 0
        cached = getattr(self, "_counted", None)
        if fresh or cached is None or size > cached[0] + (cached[0] >> 2):
            self._counted = cached = (size, self.count())
        return cached[1]

    def count(self) -> int:
        """Distinct ids seen [blocks]."""
        table = self.table
        if type(table) is not bytearray:
            return sum(table.values())
        return table.count(1) if self.wide else int.from_bytes(table, "little").bit_count()


def _extend(table: bytearray, need: int, allowed: int) -> None:
    """Grow ``table`` with zeros to at least ``need`` bytes: by a quarter at least, 64 KiB at least, within
    ``allowed`` (``need <= allowed``)."""
    table.extend(bytes(min(max(need, len(table) + (len(table) >> 2), 1 << 16), allowed) - len(table)))


def _bits_of(wide: bytearray, piece: int = 1 << 16) -> bytearray:
    """A bit per id (bit ``h & 7`` of byte ``h >> 3``) from a byte per id (0 or 1), ``piece`` bytes at a time
    (a multiple of 8; the copies stay small), in C-speed integer steps: the bytes ``k, k + 8, ...`` of a piece
    (``[k::8]``) read as a little-endian integer put id ``8j + k`` at bit ``8j``, shifted by ``k``."""
    out = bytearray()
    for start in range(0, len(wide), piece):
        part = bytes(wide[start:start + piece])
        n = -(-len(part) // 8)
        part += bytes(8 * n - len(part))
        bits = 0
        for k in range(8):
            bits |= int.from_bytes(part[k::8], "little") << k
        out += bits.to_bytes(n, "little")
    return out


def _replay(records: Sequence, cache: OrderedDict | None, room: int, seen: SeenBlocks | None,
            block_tokens: int, sample: SeenSample | None = None) -> tuple[int, ...]:
    """One LRU cache with ``room`` free blocks (``cache`` None: none) and the seen blocks, through ``records``
    (both updated in place).

    Returns (room left, hit blocks, reused tokens, infinite-cache hit blocks, infinite-cache reused tokens,
    blocks, input tokens). A request's leading cached blocks are refreshed as they are counted (no block is
    inserted or evicted before its first miss, so the run is the one of the cache before the request); the rest
    go through the cache (refreshed, or inserted evicting the oldest block when there is no room). (One C-level
    ``update`` + ``move_to_end`` of the whole rest was measured slower: most of it is misses, inserted once here.)
    The infinite cache's run goes on from the LRU run while the blocks were seen, and only the blocks after it
    are marked seen (the run's blocks were: most of a re-read prefix is never marked twice); with a byte per id
    both steps are one C-level call over the ids (``takewhile`` over the table, ``map`` of its ``__setitem__``
    drained by a zero-length ``deque``). With a ``sample`` instead of ``seen`` (ids too sparse for a table:
    :mod:`kvcalc.trace.seen_sample`), the infinite cache's counts are the LRU run's; the sample accumulates
    the estimated rest, its ids picked in the LRU's own loop over the request (``id mod KEY_PRIME`` below the
    threshold: one modulo per block, measured cheaper than a separate C-level pass over the ids).
    """
    table, wide = (seen.table, seen.wide) if seen is not None else (None, True)
    hits = reused = inf_hits = inf_reused = total = inputs = 0
    if cache is not None:
        move = cache.move_to_end
        evict = cache.popitem
    sampling = sample is not None and cache is not None
    for r in records:
        ids = r.hash_ids
        length = r.input_length
        n = len(ids)
        hit = 0
        if cache is not None:
            for h in ids:
                if h in cache:
                    move(h)
                    hit += 1
                else:
                    break
            if hit < n:
                if sampling:  # the sampled ids are picked on the way (cheaper than a pass of their own)
                    picked = []
                    pick = picked.append
                    t = sample.threshold
                for h in islice(ids, hit, None):
                    if sampling and h % KEY_PRIME < t:
                        pick(h)
                    if h in cache:
                        move(h)
                        continue
                    cache[h] = None
                    if room:
                        room -= 1
                    else:
                        evict(False)
                if sampling and picked:
                    sample.add_picked(picked, ids[-1] % KEY_PRIME < t, length, n, block_tokens)
        inf = hit
        if sample is not None:
            if hit < n and cache is None:
                sample.add(ids, hit, length, block_tokens)
        elif inf < n:
            if wide:
                try:
                    inf += len(list(takewhile(table.__getitem__, islice(ids, inf, None))))
                except IndexError:  # beyond the bytearray: never seen (the run up to it, again one by one)
                    try:
                        while inf < n and table[ids[inf]]:
                            inf += 1
                    except IndexError:
                        pass
            else:
                try:
                    while inf < n and table[ids[inf] >> 3] >> (ids[inf] & 7) & 1:
                        inf += 1
                except IndexError:  # beyond the bytearray: never seen
                    pass
        if inf < n and sample is None:
            rest = islice(ids, inf, None)
            if wide and (type(table) is not bytearray or max(islice(ids, inf, None)) < len(table)):
                _drain(map(setitem, repeat(table), rest, repeat(1)))  # operator.setitem: no args tuple per id
            else:
                try:
                    if wide:
                        for h in rest:
                            table[h] = 1
                    else:
                        for h in rest:
                            table[h >> 3] |= 1 << (h & 7)
                except IndexError:  # an id beyond the table: again one by one (marking twice is harmless)
                    for h in islice(ids, inf, None):
                        try:
                            if wide:
                                table[h] = 1
                            else:
                                table[h >> 3] |= 1 << (h & 7)
                        except IndexError:
                            table, wide = seen.grow(h)
        hits += hit
        tokens = hit * block_tokens
        reused += tokens if tokens < length else length  # min(), without a call per request
        inf_hits += inf
        tokens = inf * block_tokens
        inf_reused += tokens if tokens < length else length
        total += n
        inputs += length
    return room, hits, reused, inf_hits, inf_reused, total, inputs


_drain = deque(maxlen=0).extend  # runs an iterator to its end in C, keeping nothing


class LeanEngine:
    """The lean replay behind the engine interface (:mod:`kvcalc.trace.engine`): at most one finite LRU cache
    and the blocks seen (the infinite cache), or, for another policy, one :class:`PolicyEngine` cache per
    finite capacity beside the blocks seen. Only for the questions of :func:`answers_lean`.

    ``exact_stats`` False: once the ids are too sparse for a byte or bit table (or negative), the blocks seen
    move to a bounded hashed sample (:class:`~kvcalc.trace.seen_sample.SeenSample`) and the infinite
    capacity's figures (so the distinct blocks and the maximum hit rate) become estimates with standard errors
    (the answers' ``estimate``); the finite capacities stay exact. True: a dict of every id, exact."""

    def __init__(self, capacities_tokens: Sequence[int | None], block_tokens: int = DEFAULT_BLOCK_TOKENS,
                 policy: str = "lru", exact_stats: bool = True):
        if not answers_lean(capacities_tokens, policy):
            raise InputError("lean replay: one LRU capacity at most (several take the stack-depth engine)")
        self.block_tokens = block_tokens
        self.policy = policy
        finite = sorted({c for c in capacities_tokens if c is not None})
        self._lru_tokens = finite[0] if policy == "lru" and finite else None
        self._cache = OrderedDict() if self._lru_tokens is not None else None
        self._limit = capacity_blocks_for(self._lru_tokens, block_tokens) if self._lru_tokens is not None else 0
        self._room = self._limit
        self._others = PolicyEngine(finite, block_tokens, policy) if policy != "lru" else None
        self.seen: SeenBlocks | None = SeenBlocks()
        self.exact_stats = exact_stats  # False: ids too sparse for a table go to a bounded sample (estimates)
        self.sample: SeenSample | None = None
        self._counts = [0] * 6  # hit blocks, reused tokens (the LRU cache); the same, infinite cache; blocks; inputs
        self.requests = 0

    def add_records(self, records: Sequence, signed: bool = True) -> None:
        """Replay a batch (``signed`` False: its text holds no ``-``, so no id is negative)."""
        seen = self.seen
        if signed and seen is not None:
            seen.check_signs(records)
        self._room, *batch = _replay(records, self._cache, self._room, seen, self.block_tokens, self.sample)
        if seen is not None and not self.exact_stats and type(seen.table) is not bytearray:
            self.sample = SeenSample(seen.table)  # from the next batch on (this one's dict was exact)
            self.seen = None
        self._counts = [a + b for a, b in zip(self._counts, batch)]
        self.requests += len(records)
        if self._others is not None:
            self._others.add_records(records)

    def finish(self, skipped_lines: int = 0) -> FixedAnswers:
        hits, reused, inf_hits, inf_reused, total, inputs = self._counts
        b, n = self.block_tokens, self.requests
        estimate = None
        if self.sample is not None:
            distinct, extra_hits, extra_reused, estimate = self.sample.estimate()
            if estimate.rate == 1:  # the sample still holds every id seen: the figures are exact
                estimate = None
            inf_hits, inf_reused = min(inf_hits + extra_hits, total), min(inf_reused + extra_reused, inputs)
        else:
            distinct = self.seen.count()
        results = {None: replay_result(self.policy, b, None, None, n, skipped_lines, inputs, inf_reused, total,
                                       inf_hits, distinct)}
        if self._others is not None:
            results.update(self._others.finish(skipped_lines).results)
        elif self._lru_tokens is not None:
            results[self._lru_tokens] = replay_result("lru", b, self._lru_tokens, self._limit, n, skipped_lines,
                                                      inputs, reused, total, hits, len(self._cache))
        return FixedAnswers(results, estimate)


def lean_analysis(path: str | Path, capacities_tokens: Sequence[int | None],
                  block_tokens: int = DEFAULT_BLOCK_TOKENS, policy: str = "lru",
                  skip_bad: bool = False, exact_stats: bool = True) -> TraceAnalysis:
    """Statistics plus one result per capacity [tokens] (None = infinite), in one streaming pass, without numpy.

    Only for the questions of :func:`answers_lean`; :func:`kvcalc.trace.analysis.analyze_trace` dispatches
    here and validates the arguments first. ``exact_stats`` False: see :class:`LeanEngine`.
    """
    engine = LeanEngine(capacities_tokens, block_tokens, policy, exact_stats)
    reader = read_trace(path, block_tokens, skip_bad)
    stats, answers = run_pass(reader, engine, block_tokens)
    return TraceAnalysis(stats=stats.finish(reader.skipped_lines, answers.at(None), answers.estimate),
                         results=tuple(answers.at(c) for c in capacities_tokens), first_problem=reader.first_problem)
