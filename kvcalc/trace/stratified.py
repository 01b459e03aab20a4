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

Each tail access also falls in a **zone**, from the request's *anchor* (its id at position ``P - 1``) and the
*marks* kept for it: the ids at positions 2, 3, 4, 5, 6, 8, 10, 12, 15, ... (``round(2 x 1.25^k)``) of the last
request that had the same anchor, and that request's length ``L``. With ``m`` the last mark position where this
request's id equals the mark (checked in order, up to the first that differs, at ``x``; else ``x = L - 1``):
zone 0 = positions ``<= m`` (in a prefix-hash trace, the blocks that request read: seen), zone 1 = positions
``< x``, zone 2 = the rest (no record: all of it). The zones only sort the accesses; every estimate below is
taken within a zone, so a wrong zone costs precision, never correctness (rate 1 stays exact).

The depth of a replayed access whose id was last used at ``q`` (before its request) estimates the distinct
blocks used since: ``1`` (itself) + the head ids used since (exact) + the tail's estimate. In a prefix-hash trace
a block at position ``j`` names its whole prefix, anchor included, so the last request to read it is the last
with its anchor: a zone-0 access is a repeat since ``q`` exactly when its anchor was used after ``q``. Each
request's zone-0 accesses (all and sampled) are thus counted at its anchor's previous slot, and ``K``, ``k`` =
those counted after ``q``: the **predicted repeats**, a control variate. With ``A`` (tail accesses since, an
exact count), ``a`` (sampled tail accesses since) and ``s`` (sampled tail ids used since), the accesses left
after the predicted repeats, ``A - K`` (exact) and ``a - k`` (sampled), are read as before:
``(A - K) - ((a - k) - s) / R`` (the rest less the repeats the sample saw beyond the predicted ones) while those
are no more than the ids (``a - k - s <= s``), else ``s / R`` (SHARDS' own estimate), kept within ``[s, A]``. Where
the prediction holds, only its misses are left to the sample; where it fails (not a prefix-hash trace) the
sample corrects it, as with ``K = k = 0``.
A cache below 1 / R blocks is thus read at its own depth. The hit rule is the exact engine's
restricted to the replayed accesses: an access hits at ``C`` blocks when the largest depth among its request's
replayed accesses up to it (its prefix maximum) is at most ``C``; after a never-seen block, none does. The
last-use slots sit in one Fenwick tree per stratum (renumbered when full).

Estimates at ``C`` blocks (tokens and blocks alike): head hits exact, plus the tail's hits estimated with an
auxiliary known for every tail access, its **guide**: the prefix maximum of its request's head accesses before
it (in a prefix-hash trace, whether the request's own opening is still cached). Per zone, tail hits(C) = (every
tail access of the zone whose guide <= C) x (sampled tail hits(C) / sampled tail accesses whose guide <= C), a
ratio estimate (a zone with none sampled takes the pooled share); a tail access never hits where its guide
misses, so only the share of the guided tail that also hits is sampled, and within zone 0 that share is near 1,
within zone 2 near 0. Anchored (:meth:`StratifiedProfile.anchored`, as ``kvcalc trace`` does with the infinite
cache its own pass replays), the tail's estimate is scaled so that the curve ends at that infinite cache. At R =
1, and with every position in the head at any R, the curve is the exact one (tested).

Memory: the head (at most ``P`` ids per request and 2^20 in all, later ones sampled as the tail; 7,374 ids for
the Mooncake conversation trace's 12,031 requests, 3,349 for the synthetic trace's 3,993: 4% and 8% of their
distinct blocks) + R x the distinct tail ids + at most ``ceil(8 / R)`` hot ids and ``ceil(16 / R)`` sketch
counters + the marks (about ``log(L) / log(1.25)`` ids per anchor, at most 2^22 in all: later anchors get no
record), and a histogram with one row per distinct depth reached (at most the replayed accesses); measured in
docs/traces.md. Time: one SplitMix64 per access in Python plus O(log n) per replayed access (and per request
with a zone 0).

This module computes; it never prints.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
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
MARK_RATIO = 1.25  # the marks: the ids at positions round(2 x 1.25^k) of the anchor's last request
MARK_POSITIONS = tuple(sorted({round(2 * MARK_RATIO ** k) for k in range(80)}))  # 2, 3, 4, 5, 6, 8, 10, ...
MARK_CAP = 1 << 22  # [ids] at most this many marks are kept in all (later anchors get no record)
ZONES = 3  # the tail's zones: 0 matched the anchor's last request, 1 between, 2 past it (or no record)
COLUMNS = 2 + 6 * ZONES  # the histogram's columns (see _row)


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
    upto: np.ndarray  # (depths, COLUMNS) int64, cumulative [tokens] and [blocks]
    never_tail: tuple[int, int]  # [tokens], [blocks] of the tail after a never-seen head block (misses)
    marks: int = 0  # [ids] held as marks
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
        """The tail's estimated hits at the ``i`` first depths, summed over its zones: every tail access of the
        zone guided within the cache x the sampled ones' hit share [tokens (unit 0) or blocks (unit 1)]; a zone
        with no sampled access guided there takes the pooled share of the others."""
        if not i:
            return 0.0
        row = self.upto[i - 1].tolist()
        zones = [row[2 + 6 * z + unit:8 + 6 * z + unit:2] for z in range(ZONES)]  # (hits, guided, every)
        hits = sum(z[0] for z in zones)
        guided = sum(z[1] for z in zones)
        pooled = hits / guided if guided else 0.0
        return sum(every * (h / g if g else pooled) for h, g, every in zones)

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

    def __init__(self, size: int, ones: Sequence[int] = (), weights: Sequence[int] = ()):
        tree = array("q", bytes(8 * (size + 1)))  # 8 B a slot
        for slot in ones:
            tree[slot + 1] += 1
        for slot, w in enumerate(weights):
            tree[slot + 1] += w
        for i in range(1, size + 1):  # O(n) build
            j = i + (i & -i)
            if j <= size:
                tree[j] += tree[i]
        self.tree = tree
        self.total = len(ones) + sum(weights)

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
    access (the exact curve at any rate); ``mark_cap``: at most this many marks in all [ids].
    """

    def __init__(self, rate: float, block_tokens: int, salt: int = 0, head_positions: int = HEAD_POSITIONS,
                 positional_cap: int = POSITIONAL_CAP, hot_min_count: int = HOT_MIN_COUNT,
                 hot_share: float | None = None, hot_cap: int | None = None, mark_cap: int = MARK_CAP):
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
        self._records: dict = {}  # anchor id -> (its last request's blocks, the hashes of that request's ids at
        # MARK_POSITIONS: 8 B a mark; a hash that collides only misplaces a zone)
        self._mark_cap = mark_cap
        self._mark_positions = _marks_from(head_positions)
        self.marks = 0  # [ids] held in the records
        self._last: dict = {}  # replayed id -> the slot of its last use
        self._size = 1024
        self._slot_counts = tuple(array("q", bytes(8 * 1024)) for _ in range(2))  # per slot, when it was used:
        # the tail accesses and the sampled ones counted so far
        self._trees = (_Fenwick(self._size), _Fenwick(self._size))  # head, sampled tail: live last-use slots
        self._repeats = tuple(array("q", bytes(8 * 1024)) for _ in range(2))  # per slot: the zone-0 accesses
        # (all, sampled) whose anchor was last used there before their request (the repeats it predicts)
        self._repeat_trees = (_Fenwick(self._size), _Fenwick(self._size))  # the same, summed by slot
        self._next_slot = 0
        self._counts = [0, 0]  # the same two counts, now
        self._hist: dict = {}  # depth [blocks] -> the columns of _row
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
        head_tree, tail_tree = self._trees
        ids = tail_tree.after(slot)  # s: sampled tail ids used since
        accesses, sampled = (now - then[slot] for now, then in zip(self._counts, self._slot_counts))
        predicted, predicted_sampled = (tree.after(slot) for tree in self._repeat_trees)  # K, k
        rest, rest_sampled = accesses - predicted, sampled - predicted_sampled  # A - K, a - k
        repeats = rest_sampled - ids  # the repeats the sample saw beyond the predicted ones
        if repeats <= ids:
            tail = math.ceil(rest - repeats / self.rate)
        else:
            tail = math.ceil(ids / self.rate)
        return 1 + head_tree.after(slot) + min(accesses, max(ids, tail))

    def _zones(self, ids: Sequence[int]) -> tuple[int, int]:
        """(m, x): the request's tail positions <= m are zone 0, those < x zone 1, the rest zone 2 (module doc)."""
        p = self.head_positions
        record = self._records.get(ids[p - 1]) if 0 < p < len(ids) else None
        if record is None:
            return -1, 0
        blocks, marks = record
        matched, first_other = p - 1, blocks - 1
        for position, mark in zip(self._mark_positions, marks):
            if position >= len(ids):
                break
            if hash(ids[position]) != mark:
                first_other = min(first_other, position)
                break
            matched = position
        return matched, first_other

    def _remember(self, ids: Sequence[int]) -> None:
        """Keep the request's marks under its anchor (the id at its last head position), within the cap."""
        p, n = self.head_positions, len(ids)
        if not 0 < p <= n:
            return
        anchor = ids[p - 1]
        old = self._records.get(anchor)
        marks = array("q", [hash(ids[q]) for q in self._mark_positions if q < n]) if n > p else array("q")
        held = self.marks - (len(old[1]) if old else 0) + len(marks)
        if held <= self._mark_cap:
            self._records[anchor] = (n, marks)
            self.marks = held

    def _add(self, ids: Sequence[int], input_length: int) -> None:
        b = self.block_tokens
        salt, threshold, head = self.salt, self._threshold, self._head
        self.input_tokens += input_length
        self.total_blocks += len(ids)
        matched, first_other = self._zones(ids)
        classes = []  # per block: (stratum, zone); stratum 0 head, 1 sampled tail, 2 other tail
        deepest = 0  # the prefix maximum of the replayed depths so far (None: a never-seen block came first)
        guide = 0  # the same over the head's accesses only: the auxiliary of the tail's accesses
        for j, h in enumerate(ids):
            tokens = min(b, input_length - j * b)
            if j < self.head_positions and h not in head and self._positional < self.positional_cap:
                self._positional += 1
                self._join_head(h)
            zone = 0
            if h in head:
                stratum = 0
            else:
                zone = 0 if j <= matched else 1 if j < first_other else 2
                column = 6 * zone
                row = _row(self._hist, -1 if guide is None else guide)
                row[6 + column] += tokens  # every tail access, by its guide
                row[7 + column] += 1
                if splitmix64(h ^ salt) % SAMPLE_SPACE >= threshold:
                    classes.append((2, zone))
                    continue
                stratum = 1
                if guide is not None:
                    row[4 + column] += tokens  # the sampled ones, by their guide
                    row[5 + column] += 1
            classes.append((stratum, zone))
            if deepest is not None:
                depth = self._depth(h)
                deepest = None if depth is None else max(deepest, depth)
            if deepest is None:  # it and every later block of the request miss
                guide = None if stratum == 0 else guide
                continue
            if stratum == 0:
                guide = deepest
            row = _row(self._hist, deepest)
            column = 0 if stratum == 0 else 2 + 6 * zone
            row[column] += tokens
            row[column + 1] += 1
        room = 2 * len(ids)  # the slots the request may take: one per replayed block, one more per id turned hot
        if self._next_slot + room > self._size:
            self._renumber(room)  # now, so that no slot moves while the request is counted
        anchor = self._last.get(ids[self.head_positions - 1]) if 0 < self.head_positions <= len(ids) else None
        counts = self._counts
        zone0 = [0, 0]  # the request's zone-0 tail accesses, all and sampled
        for h, (stratum, zone) in zip(ids, classes):
            if h in head:
                stratum = 0  # joined the head earlier in this request
            else:
                counts[0] += 1
                counts[1] += stratum == 1
            if stratum < 2:
                self._touch(h, stratum)
            if stratum:
                self._count(h, stratum)
                if zone == 0 and h not in head:  # (not turned hot by this access)
                    zone0[0] += 1
                    zone0[1] += stratum == 1
        if anchor is not None and zone0[0]:
            for values, tree, n in zip(self._repeats, self._repeat_trees, zone0):
                values[anchor] += n
                tree.add(anchor, n)
        self._remember(ids)

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
        for counts, now in zip(self._slot_counts, self._counts):
            counts[slot] = now

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
        counts = self._counts  # from now on this access counts as the head's (its own id, exactly)
        counts[0] -= 1
        if stratum == 1:
            counts[1] -= 1
            self._trees[1].add(self._last[h], -1)
            del self._last[h]
        self._head.add(h)
        self._touch(h, 0)

    def _renumber(self, room: int = 0) -> None:
        """Renumber the live slots 0..n-1 in their order, in trees twice their size (and ``room`` free slots at
        least); a predicted repeat keyed at a dead slot moves to the next live one (the same count after any
        live slot)."""
        order = sorted(self._last.items(), key=itemgetter(1))
        self._size = max(1024, 2 * len(order), len(order) + room)
        old = self._slot_counts
        self._slot_counts = fresh = tuple(array("q", bytes(8 * self._size)) for _ in old)
        ones = ([], [])
        for new, (h, slot) in enumerate(order):
            self._last[h] = new
            for was, now in zip(old, fresh):
                now[new] = was[slot]
            ones[0 if h in self._head else 1].append(new)
        self._trees = (_Fenwick(self._size, ones[0]), _Fenwick(self._size, ones[1]))
        live = [slot for _, slot in order]
        repeats = tuple(array("q", bytes(8 * self._size)) for _ in self._repeats)
        for was, now in zip(self._repeats, repeats):
            for slot, n in enumerate(was):
                if n:
                    now[bisect_left(live, slot)] += n
        self._repeats = repeats
        self._repeat_trees = tuple(_Fenwick(self._size, weights=r) for r in repeats)
        self._next_slot = len(order)

    def finish(self, skipped_lines: int = 0) -> StratifiedProfile:
        hist = dict(self._hist)
        never = hist.pop(-1, [0] * COLUMNS)  # tail accesses after a never-seen head block: misses, in the totals
        depths = np.array(sorted(hist), dtype=np.int64)
        rows = np.array([hist[d] for d in depths.tolist()], dtype=np.int64).reshape(-1, COLUMNS)
        upto = np.cumsum(rows, axis=0)
        return StratifiedProfile(
            rate=self.rate, block_tokens=self.block_tokens, requests=self.requests, skipped_lines=skipped_lines,
            input_tokens=self.input_tokens, total_blocks=self.total_blocks, head_ids=len(self._head),
            sampled_tail_ids=sum(1 for h in self._last if h not in self._head), depths=depths, upto=upto,
            never_tail=(sum(never[6::6]), sum(never[7::6])), marks=self.marks)


def _marks_from(position: int) -> tuple[int, ...]:
    """The mark positions at or after ``position`` (the first tail position)."""
    return tuple(p for p in MARK_POSITIONS if p >= position)


def _row(hist: dict, key: int) -> list:
    """The histogram's row at ``key`` [blocks], made on first use: [head tokens, head blocks], then per zone:
    [sampled tail hit tokens, blocks (by depth), sampled tail tokens, blocks (by guide), every tail token, block
    (by guide)]."""
    row = hist.get(key)
    if row is None:
        row = hist[key] = [0] * COLUMNS
    return row
