"""A stratified sampled LRU curve: the head exact, the rest sampled by hash (issue 22), the default for
``--curve --sample-rate``.

Plain spatial sampling (:mod:`kvcalc.trace.sampled`, SHARDS) reads every block through a sample of ids, so a
block that opens every request (the Mooncake conversation trace's block 0: 4% of its accesses) is in the
sample whole or not at all, every depth is counted in steps of 1 / R blocks, and only ~R of the requests say
anything about the cache. Here the accesses fall in two strata:

- **head** (replayed exactly, weight 1): every id seen at one of a request's first ``P`` blocks (``P`` = 2),
  and the hot ids: each other access is counted by a Misra-Gries sketch (``ceil(2 / phi)`` counters,
  ``phi = R / 8``) and an id whose count reaches ``max(64, phi x the accesses counted)`` joins the head (at
  most ``ceil(1 / phi)`` such ids), tracked from that access on;
- **tail**: every other access; those whose id is sampled (``splitmix64(id ^ salt) mod 2^24 < R x 2^24``, the
  same ids as the plain sample) are replayed, the others only counted.

The depth of a replayed access whose id was last used at ``q`` (before its request) estimates the distinct
blocks used since: ``1`` (itself) + the head ids used since (exact) + the tail's estimate from ``A`` (tail
accesses since, an exact count), ``a`` (sampled tail accesses since) and ``s`` (sampled tail ids used since):
``A - (a - s) / R`` (the accesses less the estimated repeats) while the sample shows no more repeats than ids
(``a - s <= s``), else ``s / R`` (SHARDS' own estimate), kept within ``[s, A]``; both are unbiased, each used
where its variance is the smaller. A cache below 1 / R blocks is thus read at its own depth. The hit rule is
the exact engine's restricted to the replayed accesses: an access hits at ``C`` blocks when the largest depth
among its request's replayed accesses up to it (its prefix maximum) is at most ``C``; after a never-seen block,
none does. The last-use slots sit in one Fenwick tree per stratum (renumbered when full).

Estimates at ``C`` blocks (tokens and blocks alike): head hits exact, plus the tail's hits estimated with an
auxiliary known for every tail access, its **guide**: the prefix maximum of its request's head accesses before
it (in a prefix-hash trace, whether the request's own opening is still cached). Tail hits(C) = (every tail
access whose guide <= C) x (sampled tail hits(C) / sampled tail accesses whose guide <= C), a ratio estimate;
a tail access never hits where its guide misses, so only the share of the guided tail that also hits is
sampled. Anchored (:meth:`StratifiedProfile.anchored`, as ``kvcalc trace`` does with the infinite cache its
own pass replays), the tail's estimate is scaled so that the curve ends at that infinite cache. At R = 1, and
with every position in the head at any R, the curve is the exact one (tested).

Memory: the head (at most ``P`` ids per request and 2^20 in all, later ones sampled as the tail; 7,374 ids for
the Mooncake conversation trace's 12,031 requests, 3,349 for the synthetic trace's 3,993: 4% and 8% of their
distinct blocks) + R x the distinct tail ids + at most
``ceil(8 / R)`` hot ids and ``ceil(16 / R)`` sketch counters, and a histogram with one row per distinct depth
reached (at most the replayed accesses): about 400 B per id held in all (measured with tracemalloc on the
Mooncake conversation trace at 1%: 3.9 MB for 9,056 ids and 4,441 rows). Time: one SplitMix64 per access in
Python plus O(log n) per replayed access.

This module computes; it never prints.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from operator import itemgetter
from dataclasses import dataclass, replace

import numpy as np

from kvcalc.trace.replicas import splitmix64
from kvcalc.trace.result import ReplayResult, capacity_blocks_for, replay_result
from kvcalc.trace.sampled import SAMPLE_SPACE, check_rate

HEAD_POSITIONS = 2  # the ids seen at a request's first two blocks are kept exactly
POSITIONAL_CAP = 1 << 20  # [ids] at most this many join the head by position (later ones are sampled)
HOT_MIN_COUNT = 64  # [accesses] the fewest counted accesses that make an id hot
HOT_SHARE_PER_RATE = 1 / 8  # phi = R x this: the share of counted accesses that makes an id hot


@dataclass(frozen=True)
class StratifiedProfile:
    """The stratified engine's answers: every capacity [tokens] from one pass, estimated (see the module doc).

    ``depths``: the depths and guides reached [blocks], ascending; ``upto``: per depth, cumulative, the columns
    of :func:`_row` (head hit tokens and blocks; the sampled tail's hits by depth, its accesses by guide; every
    tail access by guide) at a cache of that many blocks.
    """

    rate: float
    block_tokens: int
    requests: int
    skipped_lines: int
    input_tokens: int  # [tokens], exact
    total_blocks: int  # [blocks], exact
    head_ids: int
    sampled_tail_ids: int
    depths: np.ndarray  # [blocks], int64
    upto: np.ndarray  # (depths, 8) int64, cumulative [tokens] and [blocks]
    never_tail: tuple[int, int]  # [tokens], [blocks] of the tail after a never-seen head block (misses)
    anchor: ReplayResult | None = None  # the infinite cache the curve is anchored to (None: not anchored)

    @property
    def distinct_blocks(self) -> int:
        """Distinct blocks of the trace [blocks]: the anchor's, else estimated (head ids + sampled tail / R)."""
        if self.anchor is not None:
            return self.anchor.peak_cached_blocks
        return self.head_ids + round(self.sampled_tail_ids / self.rate)

    def anchored(self, infinite: ReplayResult) -> StratifiedProfile:
        """This profile with its infinite cache taken from ``infinite`` (exact, or estimated elsewhere)."""
        return replace(self, anchor=infinite)

    def at(self, capacity_tokens: int | None) -> ReplayResult:
        capacity_blocks = capacity_blocks_for(capacity_tokens, self.block_tokens)
        n = len(self.depths)
        i = n if capacity_blocks is None else int(np.searchsorted(self.depths, capacity_blocks, side="right"))
        anchor = self.anchor
        reused = self._estimate(i, 0, None if anchor is None else anchor.reused_tokens)
        hits = self._estimate(i, 1, None if anchor is None else anchor.hit_blocks)
        held = self.distinct_blocks if capacity_blocks is None else min(capacity_blocks, self.distinct_blocks)
        return replay_result("lru", self.block_tokens, capacity_tokens, capacity_blocks, self.requests,
                             self.skipped_lines, self.input_tokens, min(reused, self.input_tokens),
                             self.total_blocks, min(hits, self.total_blocks), held)

    def _tail(self, i: int, unit: int) -> float:
        """The tail's estimated hits at the ``i`` first depths: every tail access guided within the cache x the
        sampled ones' hit share [tokens (unit 0) or blocks (unit 1)]."""
        if not i:
            return 0.0
        row = self.upto[i - 1]
        hits, guided, every = int(row[2 + unit]), int(row[4 + unit]), int(row[6 + unit])
        return every * hits / guided if guided else 0.0

    def _estimate(self, i: int, unit: int, anchor_total: int | None) -> int:
        """Head hits (exact) + the tail's estimated hits at the ``i`` first depths [tokens or blocks]."""
        n = len(self.depths)
        head = int(self.upto[i - 1, unit]) if i else 0
        tail = self._tail(i, unit)
        tail_inf = self._tail(n, unit)
        if anchor_total is not None and tail_inf > 0:
            anchor_tail = max(0, anchor_total - (int(self.upto[n - 1, unit]) if n else 0))
            tail = anchor_tail * tail / tail_inf
        return head + round(tail)


class _Fenwick:
    """Counts over slots 0..n-1 with O(log n) updates and suffix sums."""

    __slots__ = ("tree", "total")

    def __init__(self, size: int, ones: Sequence[int] = ()):
        tree = array("q", bytes(8 * (size + 1)))  # 8 B a slot
        for slot in ones:
            tree[slot + 1] += 1
        for i in range(1, size + 1):  # O(n) build
            j = i + (i & -i)
            if j <= size:
                tree[j] += tree[i]
        self.tree = tree
        self.total = len(ones)

    def add(self, slot: int, value: int) -> None:
        tree = self.tree
        n = len(tree)
        i = slot + 1
        while i < n:
            tree[i] += value
            i += i & -i
        self.total += value

    def after(self, slot: int) -> int:
        """The count at slots > ``slot``."""
        tree = self.tree
        i = slot + 1
        s = 0
        while i:
            s += tree[i]
            i -= i & -i
        return self.total - s


class StratifiedLruEngine:
    """The engine interface (:mod:`kvcalc.trace.engine`) over a stratified sample (see the module doc).

    ``head_positions`` / ``positional_cap``: the ids at a request's first blocks that join the head (2, at most
    2^20 ids); ``hot_min_count`` / ``hot_share`` / ``hot_cap``: the hot ids' rule (64 accesses, R / 8 of the
    counted accesses, ceil(8 / R) ids); ``hot_min_count=1, hot_share=0`` puts every id in the head from its first
    access (the exact curve at any rate).
    """

    def __init__(self, rate: float, block_tokens: int, salt: int = 0, head_positions: int = HEAD_POSITIONS,
                 positional_cap: int = POSITIONAL_CAP, hot_min_count: int = HOT_MIN_COUNT,
                 hot_share: float | None = None, hot_cap: int | None = None):
        check_rate(rate)
        self.head_positions = head_positions
        self.positional_cap = positional_cap  # at most this many ids join the head by their position
        self._positional = 0
        self.rate = rate
        self.block_tokens = block_tokens
        self.salt = salt
        self._threshold = math.floor(rate * SAMPLE_SPACE)
        phi = rate * HOT_SHARE_PER_RATE if hot_share is None else hot_share
        self._phi = phi
        self._hot_min = max(1, hot_min_count)
        self._counters = max(16, math.ceil(2 / phi)) if phi > 0 else 1 << 62
        self._hot_cap = hot_cap if hot_cap is not None else math.ceil(1 / phi) if phi > 0 else None
        self._sketch: dict = {}  # Misra-Gries counts of the tail's ids
        self._counted = 0  # tail accesses the sketch counted
        self._head: set = set()
        self._last: dict = {}  # replayed id -> the slot of its last use
        self._size = 1024
        self._slot_counts = (array("q", bytes(8 * 1024)), array("q", bytes(8 * 1024)))  # per slot: the tail
        # accesses and the sampled tail accesses counted when it was used
        self._trees = (_Fenwick(self._size), _Fenwick(self._size))  # head, sampled tail: live last-use slots
        self._next_slot = 0
        self._tail_acc = self._sampled_acc = 0
        self._hist: dict = {}  # depth [blocks] -> [head tokens, head blocks, tail tokens, tail blocks]
        self.requests = self.input_tokens = self.total_blocks = 0

    def add_records(self, records: Sequence, signed: bool = True) -> None:
        for r in records:
            self._add(r.hash_ids, r.input_length)
        self.requests += len(records)

    def _depth(self, h) -> int | None:
        """The estimated stack depth [blocks] of replayed id ``h`` before the current request (None: unseen)."""
        slot = self._last.get(h)
        if slot is None:
            return None
        tail_acc, sampled_acc = self._slot_counts[0][slot], self._slot_counts[1][slot]
        head_tree, tail_tree = self._trees
        ids = tail_tree.after(slot)  # s: sampled tail ids used since
        accesses = self._tail_acc - tail_acc  # A
        sampled = self._sampled_acc - sampled_acc  # a
        repeats = sampled - ids
        if repeats <= ids:
            tail = math.ceil(accesses - repeats / self.rate)
        else:
            tail = math.ceil(ids / self.rate)
        return 1 + head_tree.after(slot) + min(accesses, max(ids, tail))

    def _add(self, ids: Sequence[int], input_length: int) -> None:
        b = self.block_tokens
        salt, threshold, head, hist = self.salt, self._threshold, self._head, self._hist
        self.input_tokens += input_length
        self.total_blocks += len(ids)
        classes = []
        deepest = 0  # the prefix maximum of the replayed depths so far (None: a never-seen block came first)
        guide = 0  # the same over the head's accesses only: the auxiliary of the tail's accesses
        for j, h in enumerate(ids):
            tokens = min(b, input_length - j * b)
            if j < self.head_positions and h not in head and self._positional < self.positional_cap:
                self._positional += 1
                self._join_head(h)
            if h in head:
                stratum = 0
            else:
                row = _row(hist, -1 if guide is None else guide)
                row[6] += tokens  # every tail access, by its guide
                row[7] += 1
                if splitmix64(h ^ salt) % SAMPLE_SPACE >= threshold:
                    classes.append(2)
                    continue
                stratum = 1
                if guide is not None:
                    row[4] += tokens  # the sampled ones, by their guide
                    row[5] += 1
            classes.append(stratum)
            if deepest is not None:
                depth = self._depth(h)
                deepest = None if depth is None else max(deepest, depth)
            if deepest is None:  # it and every later block of the request miss
                guide = None if stratum == 0 else guide
                continue
            if stratum == 0:
                guide = deepest
            row = _row(hist, deepest)
            row[2 * stratum] += tokens
            row[2 * stratum + 1] += 1
        for h, stratum in zip(ids, classes):
            if h in head:
                stratum = 0  # joined the head earlier in this request
            else:
                self._tail_acc += 1
                self._sampled_acc += stratum == 1
            if stratum < 2:
                self._touch(h, stratum)
            if stratum:
                self._count(h, stratum)

    def _join_head(self, h) -> None:
        """``h`` joins the head (its slot moves to the head's tree; an id not sampled so far starts unseen)."""
        self._head.add(h)
        slot = self._last.get(h)
        if slot is not None:
            self._trees[1].add(slot, -1)
            self._trees[0].add(slot, 1)

    def _slot(self) -> int:
        if self._next_slot == self._size:
            self._renumber()
        slot = self._next_slot
        self._next_slot += 1
        return slot

    def _touch(self, h, stratum: int) -> None:
        """Move ``h`` to a new, most recent slot in its stratum's tree."""
        slot = self._slot()  # first: it may renumber every slot
        last = self._last.get(h)
        tree = self._trees[stratum]
        if last is not None:
            tree.add(last, -1)
        tree.add(slot, 1)
        self._last[h] = slot
        self._slot_counts[0][slot] = self._tail_acc
        self._slot_counts[1][slot] = self._sampled_acc

    def _count(self, h, stratum: int) -> None:
        """Count a tail access in the sketch; a hot id joins the head from this access on."""
        sketch = self._sketch
        self._counted += 1
        if h in sketch:
            sketch[h] += 1
        elif len(sketch) < self._counters:
            sketch[h] = 1
        else:  # Misra-Gries: every count drops by one (amortised O(1): at most counted / counters times)
            self._sketch = sketch = {k: v - 1 for k, v in sketch.items() if v > 1}
            return
        if sketch[h] < max(self._hot_min, self._phi * self._counted):
            return
        if self._hot_cap is not None and len(self._head) >= self._hot_cap:
            return
        del sketch[h]
        self._tail_acc -= 1  # from now on this access counts as the head's (its own id, exactly)
        if stratum == 1:
            self._sampled_acc -= 1
            self._trees[1].add(self._last[h], -1)
            del self._last[h]
        self._head.add(h)
        self._touch(h, 0)

    def _renumber(self) -> None:
        """Renumber the live slots 0..n-1 in their order, in trees twice their size."""
        order = sorted(self._last.items(), key=itemgetter(1))
        self._size = max(1024, 2 * len(order))
        old_tail, old_sampled = self._slot_counts
        tail, sampled = array("q", bytes(8 * self._size)), array("q", bytes(8 * self._size))
        ones = ([], [])
        for new, (h, slot) in enumerate(order):
            self._last[h] = new
            tail[new], sampled[new] = old_tail[slot], old_sampled[slot]
            ones[0 if h in self._head else 1].append(new)
        self._slot_counts = (tail, sampled)
        self._trees = (_Fenwick(self._size, ones[0]), _Fenwick(self._size, ones[1]))
        self._next_slot = len(order)

    def finish(self, skipped_lines: int = 0) -> StratifiedProfile:
        hist = dict(self._hist)
        never = hist.pop(-1, [0] * 8)  # tail accesses after a never-seen head block: misses, counted in the totals
        depths = np.array(sorted(hist), dtype=np.int64)
        rows = np.array([hist[d] for d in depths.tolist()], dtype=np.int64).reshape(-1, 8)
        upto = np.cumsum(rows, axis=0)
        return StratifiedProfile(
            rate=self.rate, block_tokens=self.block_tokens, requests=self.requests, skipped_lines=skipped_lines,
            input_tokens=self.input_tokens, total_blocks=self.total_blocks, head_ids=len(self._head),
            sampled_tail_ids=sum(1 for h in self._last if h not in self._head), depths=depths, upto=upto,
            never_tail=(int(never[6]), int(never[7])))


def _row(hist: dict, key: int) -> list:
    """The histogram's row at ``key`` [blocks], made on first use: [head tokens, head blocks, sampled tail hit
    tokens, blocks (by depth), sampled tail tokens, blocks (by guide), every tail token, block (by guide)]."""
    row = hist.get(key)
    if row is None:
        row = hist[key] = [0] * 8
    return row
