"""The compiled one-capacity LRU engine (optional numba, extra ``kvcalc[fast]``): the same answers as the lean
replay (:mod:`kvcalc.trace.lean`), byte for byte, at a fraction of its time per block access.

- :class:`JitTraceReader`: the Mooncake/hash-id JSONL reader (:class:`~kvcalc.trace.reader.TraceReader`, whose
  pieces, line numbers, rule, progress and errors it keeps) whose good pieces are parsed by the strict numba
  reader (:func:`kvcalc.trace.jit_kernels.parse_piece`) into arrays (an :class:`ArrayBatch`) without a Python
  object per request or id; any piece it refuses is read by the normal reader (msgspec, then ``json`` to name
  a bad line), so every value and every error message is that reader's.
- :class:`JitLruEngine`: one finite LRU capacity and the infinite cache (:func:`kvcalc.trace.jit_kernels.replay`),
  with the lean replay's switch from the exact blocks seen to the bounded sample after the same batch, and
  its figures; :func:`jit_pass` drives both with the statistics alongside.

numba is imported here, and this module only when :func:`kvcalc.trace.analysis.one_lru_in_numba` dispatches
(never at start-up). This module computes; it never prints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import chain

import numpy as np

from kvcalc.trace import jit_kernels as jk
from kvcalc.trace import jit_reader, lean
from kvcalc.trace.engine import FixedAnswers
from kvcalc.trace.reader import TraceReader
from kvcalc.trace.result import capacity_blocks_for, replay_result
from kvcalc.trace import seen_sample
from kvcalc.trace.seen_sample import SeenSample
from kvcalc.trace.stats import StatsAccumulator

UPFRONT_BLOCKS = 1 << 21  # room for this many cached blocks [blocks] from the start (zeroed pages, touched as
# used: growing them step by step would peak at 1.5x while the old and new arrays overlap)
FAST_PIECE_BYTES = 1 << 22  # a piece longer than this [B] (a line of ~200,000 ids or more) goes to msgspec
_RULES = {None: -1, "ceil": 0, "floor": 1}
_RULE_NAMES = {-1: None, 0: "ceil", 1: "floor"}


class ArrayBatch:
    """A piece's requests as arrays (views of the reader's buffers, valid until the next piece): ``ts`` [ms],
    ``inputs``, ``outputs`` [tokens], ``counts`` (ids per request), ``ids``; ``hi``/``lo``: the largest and
    smallest id (meaningless when there is none)."""

    __slots__ = ("ts", "inputs", "outputs", "counts", "ids", "hi", "lo")

    def __init__(self, ts, inputs, outputs, counts, ids, hi, lo):
        self.ts, self.inputs, self.outputs, self.counts, self.ids, self.hi, self.lo = \
            ts, inputs, outputs, counts, ids, hi, lo

    def __len__(self) -> int:
        return len(self.counts)


class JitTraceReader(TraceReader):
    """A :class:`TraceReader` whose good pieces come as :class:`ArrayBatch` (see the module doc)."""

    def __init__(self, reader: TraceReader):
        super().__init__(reader.path, reader.block_tokens, reader.skip_bad, reader.rule, reader.progress)
        self._grow(1 << 12, 1 << 16)

    def _grow(self, lines: int, ids: int) -> None:
        self._ts = np.empty(lines, np.float64)
        self._in = np.empty(lines, np.int64)
        self._out = np.empty(lines, np.int64)
        self._counts = np.empty(lines, np.int64)
        self._ids = np.empty(ids, np.int64)

    def _whole_piece(self, piece: bytes, n_lines: int, decoder, errors):
        if len(piece) <= FAST_PIECE_BYTES:
            if n_lines > len(self._counts) or len(piece) // 2 + 1 > len(self._ids):
                self._grow(max(n_lines, len(self._counts)), max(len(piece) // 2 + 1, len(self._ids)))
            status, n, nids, rule, hi, lo = jit_reader.parse_piece(
                np.frombuffer(piece + b"\0", np.uint8), _RULES[self.rule], self.block_tokens, self._ts, self._in,
                self._out, self._counts, self._ids)
            if status == 0 and n == n_lines:
                self.rule = _RULE_NAMES[rule]
                return ArrayBatch(self._ts[:n], self._in[:n], self._out[:n], self._counts[:n], self._ids[:nids],
                                  hi, lo)
        return super()._whole_piece(piece, n_lines, decoder, errors)


def _pow2(n: int) -> int:
    return 1 << max(4, (max(n, 1) - 1).bit_length())


class JitLruEngine:
    """One finite LRU capacity [tokens] and the infinite cache, compiled (see the module doc); the engine
    interface of :mod:`kvcalc.trace.engine` plus :meth:`add_batch` for an :class:`ArrayBatch`. Answers equal
    :class:`kvcalc.trace.lean.LeanEngine`'s for the same capacities and ``exact_stats``.

    Memory: the LRU table (8 B per slot: a 32-bit tag and the node, the id read from the node only when the
    tags agree; 4 to 8 slots per cached block: a table at most a quarter full probes and shifts far less,
    measured 50 against 74 ns per access at half full), the nodes (16 B per
    cached block), the ring of uses (8 B per entry, 2 to 4 per cached block); the blocks
    seen: a bit per id for ids within the lean replay's bit-table bound, else a hash set (9 B per slot), or the
    bounded sample."""

    def __init__(self, capacities_tokens: Sequence[int | None], block_tokens: int, exact_stats: bool = False,
                 max_sampled_ids: int | None = None):
        finite = {c for c in capacities_tokens if c is not None}
        if len(finite) != 1:
            raise ValueError("JitLruEngine: exactly one finite capacity")
        self.capacity_tokens = finite.pop()
        self.block_tokens = block_tokens
        self.limit = capacity_blocks_for(self.capacity_tokens, block_tokens)
        self.exact_stats = exact_stats
        self._lru = np.zeros(8, np.int64)
        self._alloc(min(self.limit, UPFRONT_BLOCKS))  # grown with the cache beyond (no transient below)
        self._seen = np.zeros(8, np.int64)
        self._seen[jk.S_THRESHOLD] = jk.KEY_PRIME
        self._seen[jk.S_MAX] = seen_sample.MAX_SAMPLED_IDS if max_sampled_ids is None else max_sampled_ids
        self._seen[jk.S_WIDE], self._seen[jk.S_PER_BLOCK] = lean.WIDE_TABLE_BYTES, lean.TABLE_BYTES_PER_BLOCK
        self._bits = np.zeros(0, np.uint8)
        self._skeys, self._sused = np.zeros(16, np.int64), np.zeros(16, np.uint8)
        self._mkeys, self._mused = np.zeros(16, np.int64), np.zeros(16, np.uint8)
        self._me0, self._me1 = np.zeros(16, np.int64), np.zeros(16, np.int64)
        self._out = np.zeros(8, np.int64)
        self.counts = [0] * 6  # hit blocks, reused tokens (LRU); the same, infinite cache; blocks; input tokens
        self.requests = 0

    def add_records(self, records: Sequence, signed: bool = True) -> None:
        """A batch of records (the normal reader's, or any engine feed)."""
        ids = np.fromiter(chain.from_iterable(r.hash_ids for r in records), np.int64)
        counts = np.fromiter((len(r.hash_ids) for r in records), np.int64, len(records))
        inputs = [r.input_length for r in records]
        hi, lo = (int(ids.max()), int(ids.min())) if len(ids) else (0, 0)
        self._replay(ids, counts, np.array(inputs, np.int64), hi, lo, sum(inputs))

    def add_batch(self, batch: ArrayBatch) -> None:
        """A batch of :class:`ArrayBatch` arrays (input lengths below 2^45 tokens: at most 2^20 ids of at most
        2^24 tokens, :func:`kvcalc.trace.analysis.one_lru_in_numba`; their sum fits in int64)."""
        self._replay(batch.ids, batch.counts, batch.inputs, batch.hi, batch.lo, int(batch.inputs.sum()))

    def _alloc(self, blocks: int) -> None:
        """Room for ``blocks`` cached blocks (grown with the cache, never beyond the capacity): the table
        rehashed, the nodes copied, the ring's uses kept in order."""
        if blocks >= 1 << 29:  # the ring's times mod 2^32 need a ring below 2^31 entries (jit_kernels._live)
            raise ValueError("JitLruEngine: at most 2^29 cached blocks")
        lru = self._lru
        tab = np.zeros(_pow2(4 * blocks), np.int64)  # tag << 32 | node + 1; at most a quarter full
        nodes = np.zeros(2 * blocks, np.int64)  # per cached block: its id, the time of its last use
        ring = np.zeros(_pow2(2 * blocks + 2), np.int64)  # uses: node << 32 | time mod 2^32
        if lru[jk.L_TAIL]:
            jk.rehash(self._tab, tab)
            nodes[:len(self._nodes)] = self._nodes
            live = self._ring[np.arange(lru[jk.L_HEAD], lru[jk.L_TAIL]) & (len(self._ring) - 1)]
            ring[:len(live)] = live
            lru[jk.L_HEAD], lru[jk.L_TAIL] = 0, len(live)
        self._tab, self._nodes, self._ring, self._blocks = tab, nodes, ring, blocks

    def _replay(self, ids, counts, inputs, hi, lo, input_total) -> None:
        n = len(ids)
        need = min(self.limit, int(self._lru[jk.L_SIZE]) + n)
        if need > self._blocks:
            self._alloc(min(self.limit, max(need, 2 * self._blocks)))
        seen = self._seen
        if seen[jk.S_SWITCH] == 2:
            if 2 * (seen[jk.S_SAMPLED] + n) > len(self._mkeys):
                self._resize_sample(4 * (int(seen[jk.S_SAMPLED]) + n))
        elif n:
            top = 8 * len(self._bits)
            if lo < 0 or hi >= top:
                bound = 8 * max(int(seen[jk.S_WIDE]), int(seen[jk.S_PER_BLOCK]) * (int(seen[jk.S_COUNT]) + n + 1))
                if top <= hi < bound:
                    self._grow_bits(hi)
                    top = 8 * len(self._bits)
                outside = int(np.count_nonzero((ids < 0) | (ids >= top)))
                if 2 * (seen[jk.S_SET] + outside) > len(self._skeys):
                    keys, used = np.zeros(_pow2(4 * (int(seen[jk.S_SET]) + outside)), np.int64), None
                    used = np.zeros(len(keys), np.uint8)
                    jk.set_insert_all(self._skeys, self._sused, keys, used, self._me0[:0], self._me0[:0],
                                      self._me0[:0], self._me0[:0])
                    self._skeys, self._sused = keys, used
        out = self._out
        out[:] = 0
        jk.replay(ids, counts, inputs, len(counts), self.block_tokens, self.limit, self._lru, self._tab, self._nodes,
                  self._ring, seen, self._bits, self._skeys, self._sused, self._mkeys, self._mused,
                  self._me0, self._me1, out)
        c = self.counts
        for k in range(5):
            c[k] += int(out[k])
        c[5] += input_total
        self.requests += len(counts)
        if seen[jk.S_SWITCH] == 1 and not self.exact_stats:  # as the lean replay, from the next batch on
            size = _pow2(2 * int(seen[jk.S_COUNT]) + 2)
            self._mkeys, self._mused = np.zeros(size, np.int64), np.zeros(size, np.uint8)
            self._me0, self._me1 = np.zeros(size, np.int64), np.zeros(size, np.int64)
            jk.start_sample(seen, self._bits, self._skeys, self._sused, self._mkeys, self._mused)
            jk.shrink(seen, self._mkeys, self._mused, self._me0, self._me1)
            self._bits = np.zeros(0, np.uint8)
            self._skeys, self._sused = np.zeros(16, np.int64), np.zeros(16, np.uint8)
            self._resize_sample(4 * (int(seen[jk.S_SAMPLED]) + 1))

    def _grow_bits(self, hi: int) -> None:
        size = len(self._bits)
        grown = np.zeros(max((hi >> 3) + 1, size + (size >> 2), 1 << 16), np.uint8)
        grown[:size] = self._bits
        self._bits = grown
        if self._seen[jk.S_SET]:
            keys, used = np.zeros(len(self._skeys), np.int64), np.zeros(len(self._skeys), np.uint8)
            self._seen[jk.S_SET] = jk.migrate(grown, self._skeys, self._sused, keys, used)
            self._skeys, self._sused = keys, used

    def _resize_sample(self, slots: int) -> None:
        size = _pow2(slots)
        keys, used = np.zeros(size, np.int64), np.zeros(size, np.uint8)
        e0, e1 = np.zeros(size, np.int64), np.zeros(size, np.int64)
        jk.set_insert_all(self._mkeys, self._mused, keys, used, self._me0, self._me1, e0, e1)
        self._mkeys, self._mused, self._me0, self._me1 = keys, used, e0, e1

    def finish(self, skipped_lines: int = 0) -> FixedAnswers:
        hits, reused, inf_hits, inf_reused, total, inputs = self.counts
        b, n = self.block_tokens, self.requests
        seen = self._seen
        estimate = None
        if seen[jk.S_SWITCH] == 2:
            sample = SeenSample((), int(seen[jk.S_MAX]))
            sample.threshold = int(seen[jk.S_THRESHOLD])
            live = self._mused == 1
            sample.ids = set(self._mkeys[live].tolist())
            sample.extra = {h: [a, t] for h, a, t in zip(self._mkeys[live].tolist(), self._me0[live].tolist(),
                                                         self._me1[live].tolist()) if a}
            distinct, extra_hits, extra_reused, estimate = sample.estimate()
            if estimate.rate == 1:
                estimate = None
            inf_hits, inf_reused = min(inf_hits + extra_hits, total), min(inf_reused + extra_reused, inputs)
        else:
            distinct = int(seen[jk.S_COUNT])
        return FixedAnswers({
            None: replay_result("lru", b, None, None, n, skipped_lines, inputs, inf_reused, total, inf_hits,
                                distinct),
            self.capacity_tokens: replay_result("lru", b, self.capacity_tokens, self.limit, n, skipped_lines,
                                                inputs, reused, total, hits, int(self._lru[jk.L_SIZE])),
        }, estimate)


class LengthCounts:
    """A count per distinct value of int64 arrays, compiled (:func:`kvcalc.trace.jit_reader.count_values`); read
    out as a :class:`collections.Counter` (the statistics' ``input_counts`` and ``output_counts``)."""

    def __init__(self) -> None:
        self._size = np.zeros(1, np.int64)
        self._alloc(1 << 12)

    def _alloc(self, slots: int) -> None:
        self.keys, self.used, self.counts = np.zeros(slots, np.int64), np.zeros(slots, np.uint8), \
            np.zeros(slots, np.int64)

    def add(self, values: np.ndarray) -> None:
        if 2 * (int(self._size[0]) + len(values)) > len(self.keys):
            keys, used, counts = self.keys, self.used, self.counts
            self._alloc(_pow2(4 * (int(self._size[0]) + len(values))))
            jk.set_insert_all(keys, used, self.keys, self.used, counts, counts, self.counts, self.counts)
        jit_reader.count_values(values, self.keys, self.used, self.counts, self._size)

    def counter(self) -> Counter:
        live = self.used == 1
        return Counter(dict(zip(self.keys[live].tolist(), self.counts[live].tolist())))


class BatchStats(StatsAccumulator):
    """:class:`StatsAccumulator` that also takes an :class:`ArrayBatch` (:meth:`add_batch`): the same counts and
    time span, counted in compiled code and merged into the Counters at :meth:`finish`."""

    def __init__(self, block_tokens: int):
        super().__init__(block_tokens)
        self._in, self._out = LengthCounts(), LengthCounts()

    def add_batch(self, batch: ArrayBatch) -> None:
        self.requests += len(batch)
        self._in.add(batch.inputs)
        self._out.add(batch.outputs)
        self.first_ms = min(self.first_ms, float(batch.ts.min()))
        self.last_ms = max(self.last_ms, float(batch.ts.max()))

    def finish(self, *args, **kwargs):
        self.input_counts.update(self._in.counter())
        self.output_counts.update(self._out.counter())
        self._in, self._out = LengthCounts(), LengthCounts()
        return super().finish(*args, **kwargs)


def jit_pass(reader: JitTraceReader, engine: JitLruEngine, block_tokens: int):
    """:func:`kvcalc.trace.engine.run_pass` over a :class:`JitTraceReader`: (statistics so far, the answers)."""
    stats = BatchStats(block_tokens)
    for records, _, signed in reader.signed_batches():
        if type(records) is ArrayBatch:
            stats.add_batch(records)
            engine.add_batch(records)
        else:
            stats.add_records(records)
            engine.add_records(records, signed)
    return stats, engine.finish(reader.skipped_lines)


__all__ = ["ArrayBatch", "BatchStats", "JitLruEngine", "JitTraceReader", "jit_pass"]
