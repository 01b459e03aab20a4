"""Tiered LRU replay (HBM -> DRAM -> SSD): by hand, against a brute-force replay with explicit demotion and
promotion, and against the single-capacity replay at the summed capacity."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.out.errors import InputError
from kvcalc.trace.reader import TraceRequest
from kvcalc.trace.replay import replay_requests
from kvcalc.trace.lru_curve import INF_DEPTH, LruStackEngine
from kvcalc.trace.tiers import own_depths_in_bins, tiered_profile_of_requests
from test_trace import traces


def brute_force_tiers(requests, capacities, block_tokens):
    """One OrderedDict per tier (oldest first): hit run checked before the request, then each block is removed
    from its tier, inserted as HBM's most recent, and every over-full tier demotes its least recent block to
    the next tier's most recent (the last tier evicts). Returns per-tier (blocks, tokens, requests) and rows."""
    tiers = [OrderedDict() for _ in capacities]
    n = len(capacities)
    blocks, tokens, reqs = [0] * n, [0] * n, [0] * n
    rows_b, rows_t = [], []
    for r in requests:
        row_b, row_t = [0] * n, [0] * n
        for pos, h in enumerate(r.hash_ids):
            where = next((i for i, t in enumerate(tiers) if h in t), None)
            if where is None:
                break
            row_b[where] += 1
            row_t[where] += min(block_tokens, r.input_length - pos * block_tokens)
        for h in r.hash_ids:
            for t in tiers:
                if h in t:
                    del t[h]
                    break
            tiers[0][h] = None
            for i, t in enumerate(tiers):
                cap = capacities[i]
                while cap is not None and len(t) > cap:
                    old, _ = t.popitem(last=False)
                    if i + 1 < n:
                        tiers[i + 1][old] = None
        for i in range(n):
            blocks[i] += row_b[i]
            tokens[i] += row_t[i]
            reqs[i] += row_b[i] > 0
        rows_b.append(row_b)
        rows_t.append(row_t)
    return blocks, tokens, reqs, rows_b, rows_t


def req(i, input_length, ids):
    return TraceRequest(float(i), input_length, 1, tuple(ids), i + 1)


def test_two_tiers_by_hand() -> None:
    # 4-token blocks; HBM 1 block, DRAM 2 blocks (stack listed most recent first).
    # r1 [1,2,3] (12 tok): no hits; stack after: 3 | 2 1      (HBM = {3}, DRAM = {2, 1})
    # r2 [1,2]   (8 tok): 1 at depth 3 -> DRAM, 2 at depth 2 -> DRAM: 2 DRAM hits, 8 tokens; stack 2 | 1 3
    # r3 [2,9]   (6 tok): 2 at depth 1 -> HBM hit (4 tokens), 9 new: run ends; stack 9 | 2 1  (3 evicted)
    # r4 [3]     (3 tok): 3 evicted: miss
    reqs = [req(0, 12, [1, 2, 3]), req(1, 8, [1, 2]), req(2, 6, [2, 9]), req(3, 3, [3])]
    p = tiered_profile_of_requests(reqs, [1, 2], ("hbm", "dram"), block_tokens=4, keep_requests=True)
    assert [(t.name, t.capacity_blocks, t.hit_blocks, t.hit_tokens, t.hit_requests) for t in p.tiers] == [
        ("hbm", 1, 1, 4, 1), ("dram", 2, 2, 8, 1)]
    assert p.request_hit_blocks.tolist() == [[0, 0], [0, 2], [1, 0], [0, 0]]
    assert p.request_hit_tokens.tolist() == [[0, 0], [0, 8], [4, 0], [0, 0]]
    assert brute_force_tiers(reqs, [1, 2], 4)[:3] == ([1, 2], [4, 8], [1, 1])


@st.composite
def tiered_traces(draw):
    """(block_tokens, requests, capacities [blocks], chunk_accesses): test_trace's random traces, 1-3 tiers."""
    block_tokens, requests, chunk = draw(traces())
    n_tiers = draw(st.integers(1, 3))
    caps = draw(st.lists(st.integers(0, 6), min_size=n_tiers, max_size=n_tiers))
    if draw(st.booleans()):
        caps[-1] = None  # an infinite last tier
    return block_tokens, requests, caps, chunk


@settings(max_examples=400, deadline=None)
@given(tiered_traces())
def test_tiers_equal_brute_force(case) -> None:
    block_tokens, requests, caps, chunk = case
    p = tiered_profile_of_requests(requests, caps, block_tokens=block_tokens, keep_requests=True,
                                   chunk_accesses=chunk)
    blocks, tokens, reqs, rows_b, rows_t = brute_force_tiers(requests, caps, block_tokens)
    assert [t.hit_blocks for t in p.tiers] == blocks
    assert [t.hit_tokens for t in p.tiers] == tokens
    assert [t.hit_requests for t in p.tiers] == reqs
    assert p.request_hit_blocks.tolist() == rows_b
    assert p.request_hit_tokens.tolist() == rows_t


@settings(max_examples=300, deadline=None)
@given(tiered_traces())
def test_tiers_sum_to_single_cache_at_summed_capacity(case) -> None:
    block_tokens, requests, caps, chunk = case
    p = tiered_profile_of_requests(requests, caps, block_tokens=block_tokens, chunk_accesses=chunk)
    total = None if None in caps else sum(caps)
    single = replay_requests(requests, None if total is None else total * block_tokens, block_tokens)
    assert sum(t.hit_tokens for t in p.tiers) == single.reused_tokens
    assert sum(t.hit_blocks for t in p.tiers) == single.hit_blocks
    assert p.total_capacity_blocks == total


@settings(max_examples=200, deadline=None)
@given(tiered_traces())
def test_one_tier_is_the_single_capacity_replay(case) -> None:
    block_tokens, requests, caps, chunk = case
    cap = caps[0]
    p = tiered_profile_of_requests(requests, [cap], ("hbm",), block_tokens=block_tokens, chunk_accesses=chunk)
    single = replay_requests(requests, None if cap is None else cap * block_tokens, block_tokens)
    assert (p.tiers[0].hit_tokens, p.tiers[0].hit_blocks) == (single.reused_tokens, single.hit_blocks)
    assert p.profile.at(None if cap is None else cap * block_tokens) == single


@pytest.mark.parametrize("caps, word", [([], "at least one"), ([None, 3], "only the last"), ([-1], ">= 0"),
                                        ([1.5], ">= 0")])
def test_bad_tier_capacities(caps, word) -> None:
    with pytest.raises(InputError, match=word):
        tiered_profile_of_requests([req(0, 4, [1])], caps, block_tokens=4)


def test_no_block_requests_keep_their_rows() -> None:
    reqs = [req(0, 0, []), req(1, 4, [1]), req(2, 0, []), req(3, 4, [1])]
    p = tiered_profile_of_requests(reqs, [1], ("hbm",), block_tokens=4, keep_requests=True)
    assert p.request_hit_blocks.tolist() == [[0], [0], [0], [1]]
    assert np.array_equal(p.request_hit_tokens, [[0], [0], [0], [4]])


@st.composite
def prefix_traces(draw):
    """(block_tokens, requests, chunk_accesses): requests re-reading prefixes of a few documents, then fresh ids,
    so a hit run's blocks sit at consecutive slots (the case the own-depth bounds settle without counting)."""
    block_tokens = draw(st.integers(1, 3))
    docs = [list(range(100 * d, 100 * d + draw(st.integers(1, 12)))) for d in range(draw(st.integers(1, 3)))]
    requests, fresh = [], 1000
    for i in range(draw(st.integers(1, 14))):
        doc = docs[draw(st.integers(0, len(docs) - 1))]
        ids = doc[:draw(st.integers(0, len(doc)))]
        tail = draw(st.integers(0, 3))
        ids += list(range(fresh, fresh + tail))
        fresh += tail
        shortfall = draw(st.integers(0, block_tokens - 1)) if ids else 0
        requests.append(TraceRequest(float(i), len(ids) * block_tokens - shortfall, 1, tuple(ids), i + 1))
    return block_tokens, requests, draw(st.integers(1, 40))


def brute_force_own_depths(requests):
    """Per request, each block of its leading run of blocks seen before: its LRU stack depth before the request."""
    stack, out = [], []  # stack: most recent first
    for r in requests:
        depths = []
        for h in r.hash_ids:
            if h not in stack:
                break
            depths.append(stack.index(h) + 1)
        out.append(depths)
        for h in r.hash_ids:
            if h in stack:
                stack.remove(h)
            stack.insert(0, h)
    return out


class _BinProbe(LruStackEngine):
    """The engine, keeping :func:`own_depths_in_bins` for every seen block of every request."""

    def __init__(self, block_tokens, chunk, bounds):
        super().__init__(block_tokens, chunk)
        self.bounds = np.array(bounds, np.int64)
        self.rows: list[list[int]] = []

    def _prefix_max_depths(self, prev, q, req, starts):
        prefix_max = super()._prefix_max_depths(prev, q, req, starts)
        own = own_depths_in_bins(prefix_max, prev, q, req, starts, len(self._known_ids), self.bounds)
        bins = np.searchsorted(self.bounds, own, side="left")
        seen = prefix_max < INF_DEPTH
        for r in range(len(starts)):  # every request of the chunk, those without blocks too
            self.rows.append(bins[(req == r) & seen].tolist())
        return prefix_max


@settings(max_examples=400, deadline=None)
@given(st.one_of(prefix_traces(), traces()), st.lists(st.integers(0, 16), min_size=1, max_size=6))
def test_own_depth_bins_equal_brute_force(case, bounds) -> None:
    # the bins of own_depths_in_bins (bounds settled, or counted where they straddle a bound) against a list LRU
    block_tokens, requests, chunk = case
    bounds = sorted(bounds)
    probe = _BinProbe(block_tokens, chunk, bounds)
    for r in requests:
        probe.add(r.hash_ids, r.input_length)
    probe.finish()
    want = [np.searchsorted(bounds, d, side="left").tolist() for d in brute_force_own_depths(requests)]
    assert probe.rows == want


@settings(max_examples=300, deadline=None)
@given(prefix_traces(), st.integers(1, 3), st.data())
def test_tiers_equal_brute_force_on_shared_prefixes(case, n_tiers, data) -> None:
    block_tokens, requests, chunk = case
    caps = data.draw(st.lists(st.integers(0, 12), min_size=n_tiers, max_size=n_tiers))
    p = tiered_profile_of_requests(requests, caps, block_tokens=block_tokens, keep_requests=True,
                                   chunk_accesses=chunk)
    blocks, tokens, reqs, rows_b, rows_t = brute_force_tiers(requests, caps, block_tokens)
    assert [(t.hit_blocks, t.hit_tokens, t.hit_requests) for t in p.tiers] == list(zip(blocks, tokens, reqs))
    assert p.request_hit_blocks.tolist() == rows_b
    assert p.request_hit_tokens.tolist() == rows_t
