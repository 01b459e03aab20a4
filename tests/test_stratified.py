"""The stratified sampled LRU curve (issue 22): the head (a request's first blocks, hot ids) exact, the tail
sampled by hash; at a rate of 1, or with every id in the head, it is the exact curve; a hand-checked depth."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.trace.engine import Tee, run_pass
from kvcalc.trace.lru_curve import LruStackEngine
from kvcalc.trace.reader import read_trace
from kvcalc.trace.replicas import splitmix64
from kvcalc.trace.result import capacity_grid
from kvcalc.trace.sampled import SAMPLE_SPACE
from kvcalc.trace.stratified import StratifiedLruEngine

MOONCAKE_HEAD = Path(__file__).parent / "fixtures" / "traces" / "mooncake_synthetic_head400.jsonl"
Req = namedtuple("Req", "hash_ids input_length output_length")


def _replay(requests, *engines, block_tokens=4):
    exact = LruStackEngine(block_tokens)
    for e in (exact, *engines):
        e.add_records(requests)
    return exact.finish(), [e.finish() for e in engines]


def _same_curve(exact, profile, block_tokens):
    for blocks in list(range(exact.distinct_blocks + 2)) + [None]:
        c = None if blocks is None else blocks * block_tokens
        got, want = profile.at(c), exact.at(c)
        assert (got.reused_tokens, got.hit_blocks) == (want.reused_tokens, want.hit_blocks), blocks


requests_st = st.lists(st.tuples(st.lists(st.integers(0, 40), min_size=1, max_size=12), st.integers(0, 3)),
                       min_size=1, max_size=40)


def _requests(drawn, block_tokens=4):
    return [Req(ids, max(1, len(ids) * block_tokens - cut), 0) for ids, cut in drawn]


@settings(max_examples=150, deadline=None)
@given(requests_st, st.integers(0, 3), st.integers(0, 2**32))
def test_rate_one_is_exact_on_random_traces(drawn, head_positions, salt):
    # rate 1: every tail id sampled, so A = a and the tail's depth is s exactly; guided share = sampled share
    requests = _requests(drawn)
    engines = (StratifiedLruEngine(1.0, 4, salt=salt, head_positions=head_positions),
               StratifiedLruEngine(1.0, 4, salt=salt, head_positions=head_positions, hot_min_count=2))
    exact, profiles = _replay(requests, *engines)
    for p in profiles:
        _same_curve(exact, p, 4)
        _same_curve(exact, p.anchored(exact.at(None)), 4)


@settings(max_examples=150, deadline=None)
@given(requests_st, st.sampled_from([0.001, 0.1, 0.5]), st.integers(0, 2**32))
def test_every_id_in_the_head_is_exact_at_any_rate(drawn, rate, salt):
    # every position in the head: every id is replayed with weight 1, the tail is empty
    requests = _requests(drawn)
    engine = StratifiedLruEngine(rate, 4, salt=salt, head_positions=10**6)
    exact, (profile,) = _replay(requests, engine)
    _same_curve(exact, profile, 4)
    _same_curve(exact, profile.anchored(exact.at(None)), 4)


def _ids(sampled: bool, count: int, start: int = 1000) -> list[int]:
    """The first ``count`` ids from ``start`` that the rate-0.5, salt-0 sample keeps (or drops)."""
    out, h = [], start
    while len(out) < count:
        if (splitmix64(h) % SAMPLE_SPACE < SAMPLE_SPACE // 2) == sampled:
            out.append(h)
        h += 1
    return out


def _head_hits_by_depth(profile) -> dict:
    head_blocks = np.diff(np.concatenate(([0], profile.upto[:, 1])))
    return {int(d): int(n) for d, n in zip(profile.depths, head_blocks) if n}


def test_the_estimated_depth_by_hand():
    # rate 0.5, head = position 0 (ids A, C); s1 sampled, u1, u2 not. Before each request:
    (s1,), (u1, u2), (a, c) = _ids(True, 1), _ids(False, 2), (1, 2)
    engine = StratifiedLruEngine(0.5, 1, head_positions=1)
    engine.add_records([Req([a, s1, u1], 3, 0), Req([a, s1, u2], 3, 0), Req([c, s1], 2, 0), Req([c, s1], 2, 0),
                        Req([a], 1, 0)])
    # r2, A: since its last use, tail accesses A = 2 (s1, u1), sampled a = 1, sampled ids s = 1: no repeat, so
    #   the tail holds A - (a - s) / R = 2 distinct; depth 1 + 0 head ids + 2 = 3 (true: A, s1, u1)
    # r4, C: A = 1, a = 1, s = 1: depth 1 + 0 + 1 = 2 (true: C, s1)
    # r5, A: head ids since: C (h = 1); tail accesses since A = 4 (s1 and u2 of r2, s1 of r3, s1 of r4), a = 3,
    #   s = 1: repeats a - s = 2 > s, so SHARDS' s / R = 2, within [s, A]; depth 1 + 1 + 2 = 4 (true: A s1 u2 C)
    assert _head_hits_by_depth(engine.finish()) == {2: 1, 3: 1, 4: 1}


def test_a_sample_of_the_excerpt_stays_near_the_exact_curve():
    # the 400-request excerpt (9,795 distinct blocks; 611 ids at its requests' first two blocks) at rate 0.5,
    # 5 salts, 20-point grid: measured worst 0.028 pp anchored to the exact infinite cache (the CLI's reading),
    # 0.037 pp not anchored, where the plain sample errs by 0.64 pp; bound 0.1 pp
    salts = (0, 0x5EED, 0xC0FFEE, 0xBADC0DE, 0xFACADE)
    engines = [StratifiedLruEngine(0.5, 512, salt=s) for s in salts]
    _, (exact, *profiles) = run_pass(read_trace(MOONCAKE_HEAD), Tee(LruStackEngine(512), *engines), 512)
    grid = capacity_grid(exact.distinct_blocks * 512, 20, 512)
    for anchored in (True, False):
        worst = max(abs((p.anchored(exact.at(None)) if anchored else p).at(c).token_hit_rate
                        - exact.at(c).token_hit_rate) for p in profiles for c in grid)
        assert worst < 0.001, (anchored, worst)
    assert len({p.sampled_tail_ids for p in profiles}) > 1  # another salt, another sample


def test_the_positional_head_is_capped():
    # at most positional_cap ids join the head by position; the later ones are sampled as the tail (rate 1 here,
    # so the curve stays exact): 40 requests of distinct first blocks, cap 5
    requests = [Req([i, 1000 + i, 1], 12, 0) for i in range(40)] * 2
    engine = StratifiedLruEngine(1.0, 4, head_positions=1, positional_cap=5)
    exact, (profile,) = _replay(requests, engine)
    assert profile.head_ids == 5
    _same_curve(exact, profile, 4)


def test_the_cli_reading_ends_at_the_trace_tables_infinite_cache():
    # kvcalc trace --sample-rate anchors the sample to the infinite cache of its own pass: the curve's last point
    # and its working set (hence the grid) are the trace table's, exactly
    from kvcalc.trace.analysis import analyze_trace

    analysis = analyze_trace(MOONCAKE_HEAD, [], 512, keep_profile=True, sample_rate=0.1)
    exact = analyze_trace(MOONCAKE_HEAD, [], 512, keep_profile=True).profile
    inf = analysis.profile.at(None)
    assert (inf.reused_tokens, inf.hit_blocks) == (analysis.stats.max_reused_tokens, exact.at(None).hit_blocks)
    assert analysis.profile.distinct_blocks == analysis.stats.distinct_blocks == exact.distinct_blocks
    assert analysis.profile.at(0).reused_tokens == 0
