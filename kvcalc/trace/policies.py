"""Eviction policies of one prefix cache of whole blocks: LRU, FIFO, LFU (SGLang's radix cache) and S3-FIFO.

Every policy replays a request the same way (:mod:`kvcalc.trace.result`): the request's hit run is the longest
run of its leading block ids cached before it arrives; then its blocks are accessed in order, each either a hit
(the policy updates what it keeps about it) or inserted (evicting while the cache is full). They differ only in
what they keep and whom they evict; ``C = floor(capacity / B)`` blocks, ``None`` = infinite:

- ``lru``: a hit moves the block to the most recent end; evict the least recent (an ``OrderedDict``).
- ``fifo``: a hit changes nothing; evict the oldest insert.
- ``lfu``: SGLang's radix cache with ``--radix-eviction-policy lfu``. Its priority of a node is
  ``(hit_count, last_access_time)`` (python/sglang/srt/mem_cache/evict_policy.py, ``LFUStrategy``) and the
  lowest is evicted first; every insert walks the request's path and adds one to each node's ``hit_count`` and
  stamps its access time, a new node starting at ``hit_count = 1`` (radix_cache.py, ``_insert_helper`` and
  ``_inc_hit_count``); nodes in use by the running request are locked (``lock_ref``), never evicted. Here a
  node is a block, the access time is the request's index, and ties go to the deeper block (a leaf before its
  parent, as only leaves are evicted); a block that finds the cache full of the request's own blocks is not
  inserted (SGLang would not schedule such a request).
- ``s3fifo``: S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction", SOSP 2023, as in
  libCacheSim's S3FIFOv0.c): a small FIFO S of ``max(1, floor(C / 10))`` blocks, a main FIFO M for the rest, a
  ghost FIFO G of evicted ids (no data) as long as M's share; a 2-bit counter per cached block (a hit adds one,
  at most 3). A miss goes to M if its id is in G (and leaves G), else to S. Eviction takes from S while S holds
  at least its share (or M is empty): S's oldest block moves to M with its counter cleared if it was hit since
  it came in (counter >= 1), else it leaves for G; then from M: its oldest block is reinserted with its counter
  less one while the counter is >= 1, else evicted.

Each cache is a :class:`PolicyCache`: ``add(hash_ids, input_length)`` replays one request and returns its hit
blocks; ``hit_run(hash_ids)`` asks without changing anything (the prefix router's question); ``finish()`` is
the :class:`~kvcalc.trace.result.ReplayResult`. Tests check each against a brute-force replay (hypothesis).

This module computes; it never prints.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Sequence

from kvcalc.trace.result import ReplayResult, capacity_blocks_for, check_policy, replay_result

S3FIFO_SMALL_SHARE = 10  # S holds floor(C / 10) blocks (at least one) [1 / fraction]
S3FIFO_MAX_FREQ = 3  # the 2-bit counter's largest value


class PolicyCache:
    """One cache of whole blocks under one policy, with the counts of everything replayed through it."""

    policy = ""

    def __init__(self, capacity_tokens: int | None, block_tokens: int):
        self.block_tokens = block_tokens
        self.capacity_tokens = capacity_tokens
        self.capacity_blocks = capacity_blocks_for(capacity_tokens, block_tokens)
        self._limit = math.inf if self.capacity_blocks is None else self.capacity_blocks
        self.requests = self.input_tokens = self.reused_tokens = 0
        self.total_blocks = self.hit_blocks = self.peak_cached_blocks = 0

    def __contains__(self, block_id: int) -> bool:
        raise NotImplementedError

    @property
    def cached_blocks(self) -> int:
        """Blocks the cache holds now [blocks]."""
        raise NotImplementedError

    def hit_run(self, hash_ids: Sequence[int]) -> int:
        """The request's leading cached blocks [blocks], the cache unchanged."""
        run = 0
        for h in hash_ids:
            if h not in self:
                break
            run += 1
        return run

    def _access(self, hash_ids: Sequence[int]) -> None:
        """Access the request's blocks in order (hit: update; miss: insert, evicting)."""
        raise NotImplementedError

    def add(self, hash_ids: Sequence[int], input_length: int) -> int:
        """Replay one request; returns its hit blocks [blocks]."""
        hit = self.hit_run(hash_ids)
        self._access(hash_ids)
        self._count(hit, len(hash_ids), input_length)
        return hit

    def _count(self, hit: int, blocks: int, input_length: int) -> None:
        self.requests += 1
        self.input_tokens += input_length
        self.reused_tokens += min(hit * self.block_tokens, input_length)
        self.total_blocks += blocks
        self.hit_blocks += hit
        cached = self.cached_blocks
        if cached > self.peak_cached_blocks:
            self.peak_cached_blocks = cached

    def finish(self, skipped_lines: int = 0) -> ReplayResult:
        """The result of everything replayed."""
        return replay_result(
            self.policy, self.block_tokens, self.capacity_tokens, self.capacity_blocks, self.requests,
            skipped_lines, self.input_tokens, self.reused_tokens, self.total_blocks, self.hit_blocks,
            self.peak_cached_blocks,
        )


class CacheSimulator(PolicyCache):
    """One LRU or FIFO cache, simulated directly with an OrderedDict (oldest first).

    FIFO's replay; for LRU the direct reference that the stack-depth engine is tested against.
    """

    def __init__(self, capacity_tokens: int | None, block_tokens: int, policy: str):
        check_policy(policy)
        if policy not in ("lru", "fifo"):
            raise ValueError(f"CacheSimulator: lru or fifo, not {policy!r} (see make_cache)")
        super().__init__(capacity_tokens, block_tokens)
        self.policy = policy
        self._refresh = policy == "lru"
        self._cache: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._cache

    @property
    def cached_blocks(self) -> int:
        """Blocks the cache holds now [blocks]."""
        return len(self._cache)

    def _access(self, hash_ids: Sequence[int]) -> None:
        cache = self._cache
        limit = self._limit
        refresh = self._refresh
        move_to_end = cache.move_to_end
        for h in hash_ids:
            if h in cache:
                if refresh:
                    move_to_end(h)
            else:
                cache[h] = None
                if len(cache) > limit:
                    cache.popitem(last=False)

    def add(self, hash_ids: Sequence[int], input_length: int) -> int:
        """Replay one request: count its leading hit run, then insert/refresh its blocks in order (the
        hot path of FIFO's replay, inlined). Returns the request's hit blocks [blocks]."""
        cache = self._cache
        hit = 0
        for h in hash_ids:
            if h not in cache:
                break
            hit += 1
        self._access(hash_ids)
        self._count(hit, len(hash_ids), input_length)
        return hit


class LfuCache(PolicyCache):
    """SGLang's LFU radix-cache eviction at block granularity (see the module doc).

    ``_state[h] = (hit_count, last_access, position)``; a heap of ``(hit_count, last_access, -position, id)``
    entries, stale ones skipped when popped (an entry is live while it equals the block's state), rebuilt from
    the state when it grows past twice the cache plus 64 entries.
    """

    policy = "lfu"

    def __init__(self, capacity_tokens: int | None, block_tokens: int):
        super().__init__(capacity_tokens, block_tokens)
        self._state: dict[int, tuple[int, int, int]] = {}
        self._heap: list[tuple[int, int, int, int]] = []
        self._tick = 0

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._state

    @property
    def cached_blocks(self) -> int:
        return len(self._state)

    def _access(self, hash_ids: Sequence[int]) -> None:
        self._tick += 1
        tick = self._tick
        state = self._state
        heap = self._heap
        locked = None  # this request's ids, built at its first eviction, and how many of them are cached
        for pos, h in enumerate(hash_ids):
            old = state.get(h)
            if old is not None:
                new = (old[0] + 1, tick, pos)
            else:
                if len(state) >= self._limit:
                    if locked is None:
                        locked = set(hash_ids)
                        locked_cached = sum(1 for k in locked if k in state)
                    if locked_cached >= len(state) or not self._evict(locked):
                        continue  # full of this request's own blocks: not inserted
                if locked is not None:
                    locked_cached += 1
                new = (1, tick, pos)
            state[h] = new
            heapq.heappush(heap, (new[0], tick, -pos, h))
        if len(heap) > 2 * len(state) + 64:
            self._heap = [(c, t, -p, h) for h, (c, t, p) in state.items()]
            heapq.heapify(self._heap)

    def _evict(self, locked: set) -> bool:
        """Evict the unlocked block of the lowest (hit_count, last_access, -position); False if none."""
        heap, state = self._heap, self._state
        held = []
        evicted = False
        while heap:
            entry = heapq.heappop(heap)
            count, tick, neg_pos, h = entry
            if state.get(h) != (count, tick, -neg_pos):
                continue  # stale
            if h in locked:
                held.append(entry)
                continue
            del state[h]
            evicted = True
            break
        for entry in held:
            heapq.heappush(heap, entry)
        return evicted


class S3FifoCache(PolicyCache):
    """S3-FIFO at block granularity (see the module doc): S, M and G are OrderedDicts, oldest first."""

    policy = "s3fifo"

    def __init__(self, capacity_tokens: int | None, block_tokens: int):
        super().__init__(capacity_tokens, block_tokens)
        limit = self._limit
        self._small_share = 0 if limit == 0 else (math.inf if limit == math.inf else
                                                   max(1, int(limit) // S3FIFO_SMALL_SHARE))
        self._ghost_share = 0 if limit == math.inf else int(limit) - min(int(limit), self._small_share)
        self._small: OrderedDict[int, None] = OrderedDict()
        self._main: OrderedDict[int, None] = OrderedDict()
        self._ghost: OrderedDict[int, None] = OrderedDict()
        self._freq: dict[int, int] = {}

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._freq

    @property
    def cached_blocks(self) -> int:
        return len(self._freq)

    def _access(self, hash_ids: Sequence[int]) -> None:
        freq = self._freq
        for h in hash_ids:
            f = freq.get(h)
            if f is not None:
                if f < S3FIFO_MAX_FREQ:
                    freq[h] = f + 1
                continue
            if self._limit == 0:
                continue
            while len(freq) >= self._limit:
                self._evict()
            if h in self._ghost:
                del self._ghost[h]
                self._main[h] = None
            else:
                self._small[h] = None
            freq[h] = 0

    def _evict(self) -> None:
        """Free one block: from S while it holds its share (or M is empty), else from M."""
        small, main, freq = self._small, self._main, self._freq
        while small and (len(small) >= self._small_share or not main):
            h = small.popitem(last=False)[0]
            if freq[h] >= 1:
                main[h] = None  # re-accessed in S: on to M, counter cleared (no block freed yet)
                freq[h] = 0
                continue
            del freq[h]
            self._ghost[h] = None
            if len(self._ghost) > self._ghost_share:
                self._ghost.popitem(last=False)
            return
        while main:
            h = main.popitem(last=False)[0]
            if freq[h] >= 1:
                freq[h] -= 1
                main[h] = None
                continue
            del freq[h]
            return


_CACHES = {"lfu": LfuCache, "s3fifo": S3FifoCache}


def make_cache(policy: str, capacity_tokens: int | None, block_tokens: int) -> PolicyCache:
    """A cache of ``capacity_tokens`` [tokens] (None = infinite) under ``policy`` (InputError if unknown)."""
    check_policy(policy)
    if policy in _CACHES:
        return _CACHES[policy](capacity_tokens, block_tokens)
    return CacheSimulator(capacity_tokens, block_tokens, policy)
