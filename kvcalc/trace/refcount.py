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

Ranks come from 0/1 flags over recency keys with per-bucket counts (:class:`_Slots`: C-speed counts in a
``bytearray``; a hit run's keys are mostly adjacent, so each block after the first counts only the gap from the
previous one); keys are renumbered when they run out, so memory is O(blocks held + blocks in flight), not trace
length. This module computes; it never prints.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Optional

from kvcalc.trace.reader import TraceRequest
from kvcalc.trace.tiers import check_tier_blocks

_NEAR_KEYS = 1024  # lookup: count flags between two keys this close instead of from the key up
_NO_BOUND = 1 << 62  # an infinite tier's cumulative capacity [blocks]


class _Slots:
    """0/1 flags over recency keys ``0..size-1`` (1 = an unreferenced block holds the key), with counts per bucket.

    Set and clear are O(1); counting the flags from a key up (a block's depth among the unreferenced blocks)
    is one C-speed ``bytearray.count`` within the key's bucket plus a sum over the buckets above it (buckets of
    about sqrt(64 x size) keys balance the two); the first flag (the least recent unreferenced block, evicted
    first) is a ``bytearray.find`` from a low-water mark below which every flag is 0.
    """

    def __init__(self, size: int):
        self.size = size
        self.shift = max(10, ((size << 6).bit_length() + 1) // 2)  # bucket = 2^shift keys
        self.flags = bytearray(size)
        self.buckets = [0] * ((size >> self.shift) + 1)
        self.lo = size  # every flag below lo is 0

    def recount(self) -> None:
        """Bucket counts and the low-water mark from the flags (after filling them directly)."""
        step, flags = 1 << self.shift, self.flags
        self.buckets = [flags.count(1, i, i + step) for i in range(0, len(self.buckets) << self.shift, step)]
        first = flags.find(1)
        self.lo = self.size if first < 0 else first

    def set(self, i: int) -> None:
        self.flags[i] = 1
        self.buckets[i >> self.shift] += 1
        if i < self.lo:
            self.lo = i

    def clear(self, i: int) -> None:
        self.flags[i] = 0
        self.buckets[i >> self.shift] -= 1

    def count_from(self, i: int) -> int:
        """Flags set at keys >= i."""
        b = i >> self.shift
        return self.flags.count(1, i, (b + 1) << self.shift) + sum(self.buckets[b + 1:])

    def first(self) -> int:
        """The smallest key whose flag is set (one must be)."""
        self.lo = self.flags.find(1, self.lo)
        return self.lo


class PinnedTiers:
    """Exclusive tiers of unreferenced blocks ordered by recency, plus pinned blocks (see module doc)."""

    def __init__(self, capacity_blocks: Sequence[Optional[int]]):
        check_tier_blocks(capacity_blocks)
        upper, total = [], 0
        for c in capacity_blocks:
            total = None if (c is None or total is None) else total + c
            upper.append(total)
        self.upper = upper  # cumulative capacities [blocks]; None = infinite
        self._bounds = [_NO_BOUND if u is None else u for u in upper]
        self.total = upper[-1]
        self.key: dict[int, int] = {}  # present block -> recency key
        self.owner: dict[int, int] = {}  # recency key -> block
        self.refs: dict[int, int] = {}  # pinned block -> reference count
        self.unreferenced = 0
        self.next_key = 0
        self.slots = _Slots(1024)
        self.peak_pinned = self.peak_present = self.evicted = 0

    def _tier_at(self, depth: int) -> int:
        """The tier holding the unreferenced block at ``depth`` (1 = most recent)."""
        bounds, t = self._bounds, 0
        while depth > bounds[t]:
            t += 1  # runs past the last tier (IndexError) only for a block beyond the summed capacity
        return t

    def tier_of(self, block: int) -> Optional[int]:
        """The tier index serving ``block`` now (0 when pinned), or None when it is not held."""
        if block in self.refs:
            return 0
        k = self.key.get(block)
        if k is None:
            return None
        return self._tier_at(self.slots.count_from(k))  # unreferenced blocks with key >= k, itself included

    def _renumber(self, room: int = 0) -> None:
        """Keys 0..n-1 in the same order, room for 4 x the present blocks (and ``room`` more) (O(n), once per
        ~3n accesses)."""
        order = sorted(self.owner)
        self.slots = slots = _Slots(max(1024, 4 * len(order), len(order) + room))
        flags, key, refs, old_owner = slots.flags, self.key, self.refs, self.owner
        owner = {}
        for new, old in enumerate(order):
            block = old_owner[old]
            owner[new] = block
            key[block] = new
            if block not in refs:
                flags[new] = 1
        slots.recount()
        self.owner = owner
        self.next_key = len(order)

    def pin(self, blocks: Sequence[int]) -> None:
        """One request's accesses, in order: each block is pinned once per request and gets a new key."""
        if self.next_key + len(blocks) > self.slots.size:
            self._renumber(len(blocks))
        refs, key, owner, slots = self.refs, self.key, self.owner, self.slots
        flags, buckets, shift = slots.flags, slots.buckets, slots.shift
        first_key = nk = self.next_key  # a block already seen in this request has a key >= first_key
        freed = 0
        for b in blocks:
            k = key.get(b)
            if b in refs:
                if k < first_key:  # pinned by another request: one more reference, once per request
                    refs[b] += 1
            else:
                if k is not None:  # an unreferenced block leaves the tiers while pinned (_Slots.clear inlined)
                    flags[k] = 0
                    buckets[k >> shift] -= 1
                    freed += 1
                refs[b] = 1
            if k is not None:
                del owner[k]
            key[b] = nk
            owner[nk] = b
            nk += 1
        self.next_key = nk
        self.unreferenced -= freed
        if len(refs) > self.peak_pinned:
            self.peak_pinned = len(refs)
        if len(key) > self.peak_present:
            self.peak_present = len(key)

    def unpin(self, blocks: Iterable[int]) -> None:
        """A request finished: count - 1 for its distinct blocks; evict beyond the summed capacity."""
        refs, key, slots = self.refs, self.key, self.slots
        flags, buckets, shift, lo, released = slots.flags, slots.buckets, slots.shift, slots.lo, 0
        for b in set(blocks):
            n = refs[b] - 1
            if n:
                refs[b] = n
                continue
            del refs[b]
            k = key[b]  # _Slots.set inlined
            flags[k] = 1
            buckets[k >> shift] += 1
            if k < lo:
                lo = k
            released += 1
        slots.lo = lo
        self.unreferenced += released
        total = self.total
        if total is None or self.unreferenced <= total:
            return
        owner, evict = self.owner, self.unreferenced - total
        for _ in range(evict):  # the least recent unreferenced blocks (_Slots.first and clear inlined)
            lo = flags.find(1, lo)
            del key[owner.pop(lo)]
            flags[lo] = 0
            buckets[lo >> shift] -= 1
        slots.lo = lo
        self.unreferenced = total
        self.evicted += evict


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
    refs, key, slots, bounds = cache.refs, cache.key, cache.slots, cache._bounds
    flags, last_key, depth = slots.flags, -1, 0
    full = r.input_length // block_tokens  # blocks before it hold block_tokens each; later ones the remainder
    for pos, h in enumerate(r.hash_ids):
        if h in refs:
            t = 0
        else:
            k = key.get(h)
            if k is None:
                break
            # depth = flags set at keys >= k; a run's keys are mostly close together: count the gap from the
            # previous block's key instead of from k up
            if last_key < 0 or abs(k - last_key) > _NEAR_KEYS:
                depth = slots.count_from(k)
            elif k > last_key:
                depth -= flags.count(1, last_key, k)
            else:
                depth += flags.count(1, k, last_key)
            last_key = k
            t = 0  # PinnedTiers._tier_at inlined
            while depth > bounds[t]:
                t += 1
        tb[t] += 1
        tt[t] += block_tokens if pos < full else r.input_length - pos * block_tokens  # min(B, L - pos B)
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
