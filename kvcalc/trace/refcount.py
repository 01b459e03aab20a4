"""Strategy C on a trace: tiers whose blocks are pinned by reference counts of requests in flight.

A time-ordered replay with an event heap (streaming: the heap holds the requests in flight, the cache the
blocks it keeps):

- a request arrives at its timestamp (requests are taken in file order; completions due at or before the
  arrival are processed first). Its hit run is the leading blocks present in any tier or pinned, looked up
  before it touches anything; a pinned block is a hit in HBM.
- every block of the request is then pinned (reference count + 1) and gets a new recency key, the access
  index, in request order exactly as LRU's refresh; a pinned block lives in HBM and is not counted against any
  tier's capacity (it is the running request's own KV) and cannot be evicted.
- the request is in flight until ``finish_s``, a time the caller computes from what the request hit (its
  prefill + decode time); then its blocks are unpinned (count - 1); a block at zero rejoins the unreferenced
  blocks at its recency key.
- unreferenced blocks are ordered by recency key; the tiers are depth ranges of that order (HBM the most
  recent ``c_0``, DRAM the next ``c_1``, ...), so a block is demoted as more recent blocks are released, and
  beyond the summed capacity the least recent unreferenced block is evicted.

With the same recency as LRU (strategy A, :mod:`kvcalc.trace.tiers`), C's tiers always hold A's: a block in
A's top ``k`` by recency has fewer than ``k`` more recent blocks, so it was never evicted by C (C evicts a
block only when ``N`` more recent unreferenced blocks exist) and has fewer than ``k`` more recent unreferenced
blocks now. So each hit is served by the same or a faster tier and C never recomputes more than A.

Ranks come from a Fenwick tree over recency keys; keys are renumbered when they run out, so memory is
O(blocks held + blocks in flight), not trace length. This module computes; it never prints.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Optional

from kvcalc.trace.reader import TraceRequest
from kvcalc.trace.tiers import check_tier_blocks


class _Fenwick:
    """Counts over positions 0..size-1: add, prefix sums and the first position with a count."""

    def __init__(self, size: int):
        self.size = size
        self.tree = [0] * (size + 1)
        self.top = 1 << (size.bit_length() - 1) if size else 0

    def add(self, i: int, delta: int) -> None:
        tree, n = self.tree, self.size
        i += 1
        while i <= n:
            tree[i] += delta
            i += i & -i

    def prefix(self, i: int) -> int:
        """Sum over positions 0..i-1."""
        tree, s = self.tree, 0
        while i > 0:
            s += tree[i]
            i -= i & -i
        return s

    def first(self) -> int:
        """The smallest position with a count (the total must be > 0)."""
        tree, pos, step = self.tree, 0, self.top
        while step:
            nxt = pos + step
            if nxt <= self.size and tree[nxt] < 1:
                pos = nxt
            step >>= 1
        return pos  # 0-based index of the first position whose prefix reaches 1


class PinnedTiers:
    """Exclusive tiers of unreferenced blocks ordered by recency, plus pinned blocks (see module doc)."""

    def __init__(self, capacity_blocks: Sequence[Optional[int]]):
        check_tier_blocks(capacity_blocks)
        upper, total = [], 0
        for c in capacity_blocks:
            total = None if (c is None or total is None) else total + c
            upper.append(total)
        self.upper = upper  # cumulative capacities [blocks]; None = infinite
        self.total = upper[-1]
        self.key: dict[int, int] = {}  # present block -> recency key
        self.owner: dict[int, int] = {}  # recency key -> block
        self.refs: dict[int, int] = {}  # pinned block -> reference count
        self.unreferenced = 0
        self.next_key = 0
        self.fen = _Fenwick(1024)
        self.peak_pinned = self.peak_present = self.evicted = 0

    def tier_of(self, block: int) -> Optional[int]:
        """The tier index serving ``block`` now (0 when pinned), or None when it is not held."""
        if block in self.refs:
            return 0
        k = self.key.get(block)
        if k is None:
            return None
        depth = self.unreferenced - self.fen.prefix(k)  # unreferenced blocks with key >= k, itself included
        for i, u in enumerate(self.upper):
            if u is None or depth <= u:
                return i
        raise AssertionError("an unreferenced block beyond the summed capacity")

    def _new_key(self, block: int) -> None:
        if self.next_key >= self.fen.size:
            self._renumber()
        old = self.key.get(block)
        if old is not None:
            del self.owner[old]
        self.key[block] = self.next_key
        self.owner[self.next_key] = block
        self.next_key += 1

    def _renumber(self) -> None:
        """Keys 0..n-1 in the same order, a tree twice the present blocks (O(n), once per ~n accesses)."""
        order = sorted(self.owner)
        size = max(1024, 2 * len(order))
        self.fen = _Fenwick(size)
        owner = {}
        for new, old in enumerate(order):
            block = self.owner[old]
            owner[new] = block
            self.key[block] = new
            if block not in self.refs:
                self.fen.add(new, 1)
        self.owner = owner
        self.next_key = len(order)

    def pin(self, blocks: Sequence[int]) -> None:
        """One request's accesses, in order: each block is pinned once per request and gets a new key."""
        seen = set()
        for b in blocks:
            if b not in self.refs and b in self.key:
                self.fen.add(self.key[b], -1)
                self.unreferenced -= 1
            if b not in seen:
                self.refs[b] = self.refs.get(b, 0) + 1
                seen.add(b)
            self._new_key(b)
        self.peak_pinned = max(self.peak_pinned, len(self.refs))
        self.peak_present = max(self.peak_present, len(self.key))

    def unpin(self, blocks: Iterable[int]) -> None:
        """A request finished: count - 1 for its distinct blocks; evict beyond the summed capacity."""
        for b in set(blocks):
            n = self.refs[b] - 1
            if n:
                self.refs[b] = n
                continue
            del self.refs[b]
            self.fen.add(self.key[b], 1)
            self.unreferenced += 1
        while self.total is not None and self.unreferenced > self.total:
            k = self.fen.first()
            block = self.owner.pop(k)
            del self.key[block]
            self.fen.add(k, -1)
            self.unreferenced -= 1
            self.evicted += 1


@dataclass(frozen=True)
class Arrival:
    """What one request found when it arrived (C)."""

    index: int  # request number in file order
    request: TraceRequest
    tier_blocks: tuple[int, ...]  # hit blocks per tier [blocks]
    tier_tokens: tuple[int, ...]  # hit tokens per tier [tokens]


def lookup(cache: PinnedTiers, r: TraceRequest, block_tokens: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The request's hit run in ``cache`` as it is: (hit blocks, hit tokens) per tier."""
    n_tiers = len(cache.upper)
    tb, tt = [0] * n_tiers, [0] * n_tiers
    for pos, h in enumerate(r.hash_ids):
        t = cache.tier_of(h)
        if t is None:
            break
        tb[t] += 1
        tt[t] += min(block_tokens, r.input_length - pos * block_tokens)
    return tuple(tb), tuple(tt)


def sink_window_blocks(r: TraceRequest, block_tokens: int, sink_tokens: int, window_tokens: int) -> list[int]:
    """The request's blocks holding its first ``sink_tokens`` and last ``window_tokens`` tokens (the article's
    attention sinks and recent window, which its strategy A never evicts)."""
    n = len(r.hash_ids)
    first = min(n, -(-sink_tokens // block_tokens)) if sink_tokens > 0 else 0
    keep = set(range(first))
    if window_tokens > 0 and n:
        keep |= set(range(max(0, r.input_length - window_tokens) // block_tokens, n))
    return [r.hash_ids[i] for i in sorted(keep)]


def lru_step(cache: PinnedTiers, r: TraceRequest, block_tokens: int, sink_tokens: int = 0,
             window_tokens: int = 0) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Tiered LRU (A) on a PinnedTiers: look up, access every block, release at once (nothing stays in flight);
    the sink and recent-window blocks stay pinned for good (reference never released)."""
    hits = lookup(cache, r, block_tokens)
    cache.pin(r.hash_ids)
    pinned = sink_window_blocks(r, block_tokens, sink_tokens, window_tokens)
    if pinned:
        cache.pin(pinned)
    cache.unpin(r.hash_ids)
    return hits


def replay_pinned(requests: Iterable[TraceRequest], cache: PinnedTiers, block_tokens: int,
                  finish_s: Callable[[Arrival], float]) -> Iterator[Arrival]:
    """Time-ordered replay of strategy C through ``cache``, streaming: yields each arrival in file order.

    ``finish_s(arrival)`` gives when the request stops pinning its blocks [s]; it is called before the next
    arrival is processed. Requests finishing after the last arrival are released at the end.
    """
    heap: list[tuple[float, int, tuple[int, ...]]] = []
    for i, r in enumerate(requests):
        now = r.timestamp_ms / 1000.0
        while heap and heap[0][0] <= now:
            cache.unpin(heapq.heappop(heap)[2])
        arrival = Arrival(i, r, *lookup(cache, r, block_tokens))
        cache.pin(r.hash_ids)
        heapq.heappush(heap, (finish_s(arrival), i, r.hash_ids))
        yield arrival
    while heap:
        cache.unpin(heapq.heappop(heap)[2])
