"""Strategy C's time-ordered replay (pinned blocks of requests in flight): against a brute-force model, equal
to tiered LRU when nothing stays in flight, and never worse than LRU (A) tier by tier."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.trace.reader import TraceRequest
from kvcalc.trace.refcount import PinnedTiers, _Slots, replay_pinned
from kvcalc.trace.tiers import tiered_profile_of_requests
from test_tiers import tiered_traces


def brute_force_pinned(requests, caps, block_tokens, durations_s):
    """Lists and sorting: unreferenced blocks sorted by recency key (newest first) cut into tiers; pinned
    blocks are HBM hits; a finished request unpins, then the oldest unreferenced beyond the total are evicted."""
    key, refs, inflight, rows, clock = {}, {}, [], [], 0
    total = None if None in caps else sum(caps)
    for i, r in enumerate(requests):
        now = r.timestamp_ms / 1000.0
        for end, j, ids in sorted(inflight):
            if end <= now:
                inflight.remove((end, j, ids))
                for b in set(ids):
                    refs[b] -= 1
                    if not refs[b]:
                        del refs[b]
                free = sorted((b for b in key if b not in refs), key=lambda b: -key[b])
                while total is not None and len(free) > total:
                    del key[free.pop()]
        free = sorted((b for b in key if b not in refs), key=lambda b: -key[b])
        row = [0] * len(caps)
        for pos, h in enumerate(r.hash_ids):
            if h in refs:
                tier = 0
            elif h in key:
                depth, upper, tier = free.index(h) + 1, 0, None
                for t, c in enumerate(caps):
                    upper = None if (c is None or upper is None) else upper + c
                    if upper is None or depth <= upper:
                        tier = t
                        break
            else:
                break
            row[tier] += min(block_tokens, r.input_length - pos * block_tokens)
        for b in set(r.hash_ids):
            refs[b] = refs.get(b, 0) + 1
        for b in r.hash_ids:
            key[b] = clock
            clock += 1
        inflight.append((now + durations_s[i], i, r.hash_ids))
        rows.append(row)
    return rows


def c_rows(requests, caps, block_tokens, durations_s):
    cache = PinnedTiers(caps)
    arrivals = replay_pinned(requests, cache, block_tokens,
                             lambda a: a.request.timestamp_ms / 1000.0 + durations_s[a.index])
    return [list(a.tier_tokens) for a in arrivals], cache


@st.composite
def timed(draw):
    block_tokens, requests, caps, _ = draw(tiered_traces())
    durations = draw(st.lists(st.integers(0, 5), min_size=len(requests), max_size=len(requests)))
    return block_tokens, requests, caps, [d / 1000.0 for d in durations]  # ms -> s; arrivals 1 ms apart


@settings(max_examples=300, deadline=None)
@given(timed())
def test_pinned_equals_brute_force(case) -> None:
    block_tokens, requests, caps, durations = case
    rows, _ = c_rows(requests, caps, block_tokens, durations)
    assert rows == brute_force_pinned(requests, caps, block_tokens, durations)


@settings(max_examples=300, deadline=None)
@given(tiered_traces())
def test_nothing_in_flight_is_tiered_lru(case) -> None:
    block_tokens, requests, caps, _ = case
    rows, _ = c_rows(requests, caps, block_tokens, [0.0] * len(requests))
    a = tiered_profile_of_requests(requests, caps, block_tokens=block_tokens, keep_requests=True)
    assert rows == a.request_hit_tokens.tolist()


@settings(max_examples=300, deadline=None)
@given(timed())
def test_c_never_worse_than_a_tier_by_tier(case) -> None:
    # per request and every k: C's hit tokens in tiers 0..k >= A's (C's tiers hold A's, see refcount's doc)
    block_tokens, requests, caps, durations = case
    rows, _ = c_rows(requests, caps, block_tokens, durations)
    a = tiered_profile_of_requests(requests, caps, block_tokens=block_tokens, keep_requests=True)
    for c_row, a_row in zip(rows, a.request_hit_tokens.tolist()):
        for k in range(len(caps)):
            assert sum(c_row[:k + 1]) >= sum(a_row[:k + 1])


def test_pinned_block_is_an_hbm_hit_beyond_capacity() -> None:
    # HBM 1 block, no lower tier. r0 [1,2] runs 10 s; r1 [1,2] at 1 ms: both pinned -> 2 HBM hits (8 tokens),
    # where LRU of 1 block holds only block 2 -> r1's run starts with 1: a miss, 0 tokens
    reqs = [TraceRequest(0.0, 8, 1, (1, 2), 1), TraceRequest(1.0, 8, 1, (1, 2), 2)]
    rows, cache = c_rows(reqs, [1], 4, [10.0, 0.0])
    assert rows == [[0], [8]]
    assert cache.peak_pinned == 2 and cache.evicted == 1  # at the end 2 unreferenced blocks > 1: one evicted
    a = tiered_profile_of_requests(reqs, [1], ("hbm",), block_tokens=4, keep_requests=True)
    assert a.request_hit_tokens.tolist() == [[0], [0]]


def test_keys_are_renumbered_without_changing_ranks() -> None:
    # 3,000 accesses cycle 5 blocks through a 1,024-slot tree: ranks stay those of the brute force
    reqs = [TraceRequest(float(i), 4, 1, (i % 5,), i + 1) for i in range(3000)]
    rows, cache = c_rows(reqs, [2, 2], 4, [0.0] * 3000)
    assert rows == brute_force_pinned(reqs, [2, 2], 4, [0.0] * 3000)
    assert cache.slots.size == 1024 and len(cache.key) == 4


@pytest.mark.parametrize("flags, first", [([0, 0, 1, 0], 2), ([1], 0), ([0, 0, 0, 0, 0, 1], 5)])
def test_slots_first(flags, first) -> None:
    f = _Slots(len(flags))
    for i, c in enumerate(flags):
        if c:
            f.set(i)
    assert f.first() == first and f.count_from(0) == sum(flags)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.lists(st.tuples(st.booleans(), st.integers(0, 4999)), max_size=300),
       st.integers(0, 4999))
def test_slots_count_equals_a_list(size, ops, at) -> None:
    # counts across buckets (1,024+ keys each) and the low-water mark after clears and sets below it
    f, ref = _Slots(size), [0] * size
    for on, i in ops:
        i %= size
        if on and not ref[i]:
            f.set(i)
            ref[i] = 1
        elif not on and ref[i]:
            f.clear(i)
            ref[i] = 0
        if any(ref):
            assert f.first() == ref.index(1)
    at %= size
    assert f.count_from(at) == sum(ref[at:])
    f.recount()
    assert f.count_from(at) == sum(ref[at:]) and f.buckets == [sum(ref[i:i + (1 << f.shift)])
                                                              for i in range(0, len(f.buckets) << f.shift, 1 << f.shift)]


@settings(max_examples=300, deadline=None)
@given(tiered_traces())
def test_lru_step_without_pins_is_tiered_lru(case) -> None:
    from kvcalc.trace.refcount import lru_step

    block_tokens, requests, caps, _ = case
    cache = PinnedTiers(caps)
    rows = [list(lru_step(cache, r, block_tokens)[1]) for r in requests]
    a = tiered_profile_of_requests(requests, caps, block_tokens=block_tokens, keep_requests=True)
    assert rows == a.request_hit_tokens.tolist()


def test_sink_blocks_stay_in_hbm() -> None:
    # HBM 1 block, 4-token blocks. [1,2] then [3,4] then [1,5]: plain LRU keeps only the last block (4): 1 misses.
    # With a 4-token sink, blocks 1 and 3 are pinned for good: r2 [1,5] hits 1 in HBM (4 tokens)
    from kvcalc.trace.refcount import lru_step, sink_window_blocks

    reqs = [TraceRequest(0.0, 8, 1, (1, 2), 1), TraceRequest(1.0, 8, 1, (3, 4), 2), TraceRequest(2.0, 8, 1, (1, 5), 3)]
    plain, sink = PinnedTiers([1]), PinnedTiers([1])
    assert [lru_step(plain, r, 4)[1] for r in reqs] == [(0,), (0,), (0,)]
    assert [lru_step(sink, r, 4, sink_tokens=4)[1] for r in reqs] == [(0,), (0,), (4,)]
    assert sink.peak_pinned == 3  # during r1: block 1 (pinned for good) + r1's own 3 and 4
    # window: the last 6 tokens of a 10-token request in 4-token blocks are tokens 4..9: blocks 1 and 2
    assert sink_window_blocks(TraceRequest(0.0, 10, 1, (7, 8, 9), 1), 4, 0, 6) == [8, 9]
    assert sink_window_blocks(TraceRequest(0.0, 10, 1, (7, 8, 9), 1), 4, 64, 0) == [7, 8, 9]  # sink > request
