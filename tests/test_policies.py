"""Eviction policies (issue 22): LRU, FIFO, LFU (SGLang's radix cache) and S3-FIFO, each equal to a brute-force
replay written here from the rules in kvcalc/trace/policies.py (plain lists, min() over the whole cache, no
heap, no OrderedDict), per capacity, on random traces (hypothesis); plus hand-worked cases that pin the rules."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.trace.analysis import analyze_trace
from kvcalc.trace.policies import CacheSimulator, LfuCache, S3FifoCache, make_cache
from kvcalc.trace.result import POLICIES


def leading_run(cached, ids):
    """How many of ids, from the first, are in cached."""
    return next((i for i, h in enumerate(ids) if h not in cached), len(ids))


def brute_lru_fifo(requests, cap, refresh):
    cache: list = []  # oldest first
    hits = []
    for ids in requests:
        hits.append(leading_run(cache, ids))
        for h in ids:
            if h in cache:
                if refresh:
                    cache.remove(h)
                    cache.append(h)
            else:
                cache.append(h)
                if cap is not None and len(cache) > cap:
                    cache.pop(0)
    return hits


def brute_lfu(requests, cap):
    cache: dict = {}  # id -> [hit_count, last request, position]
    hits = []
    for tick, ids in enumerate(requests, start=1):
        hits.append(leading_run(cache, ids))
        for pos, h in enumerate(ids):
            if h in cache:
                cache[h] = [cache[h][0] + 1, tick, pos]
                continue
            if cap is not None and len(cache) >= cap:
                free = [k for k in cache if k not in ids]  # the request's own blocks are locked
                if not free:
                    continue
                victim = min(free, key=lambda k: (cache[k][0], cache[k][1], -cache[k][2], k))
                del cache[victim]
            cache[h] = [1, tick, pos]
    return hits


def brute_s3fifo(requests, cap):
    small_share = None if cap is None else max(1, cap // 10)
    ghost_share = None if cap is None else cap - min(cap, small_share)
    small, main, ghost = [], [], []  # oldest first
    freq: dict = {}
    hits = []

    def evict():
        while small and (len(small) >= small_share or not main):
            h = small.pop(0)
            if freq[h] >= 1:
                main.append(h)
                freq[h] = 0
            else:
                del freq[h]
                ghost.append(h)
                if len(ghost) > ghost_share:
                    ghost.pop(0)
                return
        while main:
            h = main.pop(0)
            if freq[h] >= 1:
                freq[h] -= 1
                main.append(h)
            else:
                del freq[h]
                return

    for ids in requests:
        hits.append(leading_run(freq, ids))
        for h in ids:
            if h in freq:
                freq[h] = min(freq[h] + 1, 3)
                continue
            if cap == 0:
                continue
            while cap is not None and len(freq) >= cap:
                evict()
            if h in ghost:
                ghost.remove(h)
                main.append(h)
            else:
                small.append(h)
            freq[h] = 0
    return hits


BRUTE = {"lru": lambda r, c: brute_lru_fifo(r, c, True), "fifo": lambda r, c: brute_lru_fifo(r, c, False),
         "lfu": brute_lfu, "s3fifo": brute_s3fifo}


def test_every_policy_has_a_brute_force_reference():
    assert set(BRUTE) == set(POLICIES)


def per_request_hits(policy, requests, cap_blocks):
    cache = make_cache(policy, None if cap_blocks is None else cap_blocks, 1)
    return [cache.add(ids, len(ids)) for ids in requests], cache


traces = st.lists(st.lists(st.integers(0, 12), max_size=8), min_size=1, max_size=25)


@settings(max_examples=400, deadline=None)
@given(traces, st.one_of(st.none(), st.integers(0, 20)), st.sampled_from(POLICIES))
def test_policy_equals_brute_force(requests, cap, policy):
    got, cache = per_request_hits(policy, requests, cap)
    assert got == BRUTE[policy](requests, cap)
    assert cache.cached_blocks <= (cap if cap is not None else 10**9)
    assert cache.finish().hit_blocks == sum(got)


@st.composite
def prefix_traces(draw):
    """Requests that share prefixes the way real traces do: a request extends a random earlier one's prefix."""
    requests, next_id = [], 0
    for _ in range(draw(st.integers(1, 30))):
        if requests and draw(st.booleans()):
            base = draw(st.sampled_from(requests))
            ids = list(base[:draw(st.integers(0, len(base)))])
        else:
            ids = []
        for _ in range(draw(st.integers(0, 5))):
            ids.append(next_id)
            next_id += 1
        requests.append(ids)
    return requests


@settings(max_examples=300, deadline=None)
@given(prefix_traces(), st.integers(0, 30), st.sampled_from(POLICIES))
def test_policy_equals_brute_force_on_prefix_sharing_traces(requests, cap, policy):
    assert per_request_hits(policy, requests, cap)[0] == BRUTE[policy](requests, cap)


@settings(max_examples=60, deadline=None)
@given(prefix_traces(), st.integers(1, 30), st.sampled_from(POLICIES), st.integers(1, 3))
def test_the_file_replay_equals_the_cache(tmp_path_factory, requests, cap, policy, block_tokens):
    # the CLI's path (reader -> analyze_trace's engine) and the cache replayed by hand agree, tokens included
    path = tmp_path_factory.mktemp("p") / "t.jsonl"
    lengths = [len(ids) * block_tokens - (1 if ids and block_tokens > 1 else 0) for ids in requests]
    path.write_text("".join(json.dumps({"timestamp": i, "input_length": n, "output_length": 1, "hash_ids": ids})
                            + "\n" for i, (ids, n) in enumerate(zip(requests, lengths))))
    result = analyze_trace(path, [cap * block_tokens], block_tokens, policy).results[0]
    cache = make_cache(policy, cap * block_tokens, block_tokens)
    for ids, n in zip(requests, lengths):
        cache.add(ids, n)
    assert result == cache.finish()


def test_lfu_by_hand():
    # capacity 3 blocks. r1 [1,2] -> counts {1:1, 2:1}; r2 [1,3] -> {1:2 (tick 2), 2:1 (tick 1), 3:1 (tick 2)};
    # r3 [4]: full; lowest (count, tick) is block 2 (1, 1): evicted -> {1, 3, 4}; r4 [2]: full, lowest is 3
    # (1, tick 2, pos 1) against 4 (1, tick 3): 3 goes; r5 [1, 3] hits block 1 only
    cache = LfuCache(3, 1)
    assert [cache.add(ids, len(ids)) for ids in ([1, 2], [1, 3], [4], [2], [1, 3])] == [0, 1, 0, 0, 1]
    # a request longer than the cache: its own blocks are locked; the fourth finds no unlocked victim
    cache = LfuCache(3, 1)
    cache.add([1, 2, 3, 4], 4)
    assert cache.cached_blocks == 3 and 4 not in cache and cache.hit_run([1, 2, 3]) == 3


def test_lfu_keeps_the_frequent_block_lru_drops():
    # capacity 2: block 9 used three times, then a scan of 1, 2: LRU drops 9, LFU keeps it
    requests = [[9], [9], [9], [1], [2], [9]]
    assert per_request_hits("lru", requests, 2)[0][-1] == 0
    assert per_request_hits("lfu", requests, 2)[0][-1] == 1


def test_s3fifo_by_hand():
    # capacity 3: S's share max(1, 3 // 10) = 1, G holds 3 - 1 = 2 ids. [1], [2], [3] fill S; [1] hits (1's
    # counter 1). [4]: full -> S holds >= its share: 1 was hit -> to M, counter 0; 2 never hit -> G = [2]; 4 in
    # S = [3, 4]. [2]: full -> 3 to G = [2, 3]; 2 is in G -> leaves G, enters M = [1, 2]. [5]: 4 to G = [3, 4],
    # S = [5]. [6]: 5 to G = [3, 4, 5], over 2 -> [4, 5]; S = [6]. The block hit once (1) survived the scan.
    cache = S3FifoCache(3, 1)
    hits = [cache.add(ids, 1) for ids in ([1], [2], [3], [1], [4], [2], [5], [6])]
    assert hits == [0, 0, 0, 1, 0, 0, 0, 0]
    assert (list(cache._small), list(cache._main), list(cache._ghost)) == ([6], [1, 2], [4, 5])
    lru = make_cache("lru", 3, 1)
    for ids in ([1], [2], [3], [1], [4], [2], [5], [6]):
        lru.add(ids, 1)
    assert [h for h in (1, 2, 5, 6) if h in lru] == [2, 5, 6]  # LRU lost block 1


def test_make_cache_and_cache_simulator():
    assert isinstance(make_cache("fifo", 4, 1), CacheSimulator)
    with pytest.raises(ValueError):
        CacheSimulator(4, 1, "lfu")
