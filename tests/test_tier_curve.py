"""Tier curves in one pass: every point equals a separate tiered replay at that point's capacities."""

from __future__ import annotations

import json

import pytest
from conftest import REAL_TRACES, assert_bad_input, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.out.errors import InputError
from kvcalc.trace.tier_curve import tier_curve_of_requests, vary_tier
from kvcalc.trace.tiers import tiered_profile_of_requests
from test_cli_trace import four  # noqa: F401 (four is a fixture)
from test_tier_cost import tiers_json
from test_tiers import brute_force_tiers, prefix_traces, req
from test_trace import traces


def test_dram_curve_by_hand() -> None:
    # test_tiers.test_two_tiers_by_hand's trace (4-token blocks), HBM 1 block, DRAM 0, 1, 2 blocks:
    # r1 [1,2,3] misses; r2 [1,2]: depths before it 3 (block 1) and 2 (block 2): hits only if HBM + DRAM >= 3,
    #   both in DRAM (depths > 1); r3 [2,9]: block 2 at depth 1 -> an HBM hit at every point; r4 [3]: depth 3
    #   after r3 (9, 2, 1, 3) -> needs 4 blocks: never.
    reqs = [req(0, 12, [1, 2, 3]), req(1, 8, [1, 2]), req(2, 6, [2, 9]), req(3, 3, [3])]
    c = tier_curve_of_requests(reqs, vary_tier([1, 2], 1, [0, 1, 2]), ("hbm", "dram"), block_tokens=4)
    got = [[(t.hit_blocks, t.hit_tokens, t.hit_requests) for t in point] for point in c.hits]
    assert got == [[(1, 4, 1), (0, 0, 0)], [(1, 4, 1), (0, 0, 0)], [(1, 4, 1), (2, 8, 1)]]
    assert c.points == ((1, 0), (1, 1), (1, 2))


def _check_points(requests, points, block_tokens, chunk) -> None:
    curve = tier_curve_of_requests(requests, points, block_tokens=block_tokens, chunk_accesses=chunk)
    for caps, hits in zip(points, curve.hits):
        alone = tiered_profile_of_requests(requests, caps, block_tokens=block_tokens, chunk_accesses=chunk)
        assert hits == alone.tiers
        blocks, tokens, reqs = brute_force_tiers(requests, caps, block_tokens)[:3]
        assert [(t.hit_blocks, t.hit_tokens, t.hit_requests) for t in hits] == list(zip(blocks, tokens, reqs))


@st.composite
def curve_points(draw):
    """Points of a curve over one tier of 1-3 tiers (the others fixed), an infinite last tier sometimes."""
    n = draw(st.integers(1, 3))
    base = draw(st.lists(st.integers(0, 10), min_size=n, max_size=n))
    k = draw(st.integers(0, n - 1))
    values = draw(st.lists(st.integers(0, 12), min_size=1, max_size=6))
    if k != n - 1 and draw(st.booleans()):
        base[-1] = None
    return vary_tier(base, k, values)


@settings(max_examples=300, deadline=None)
@given(st.one_of(prefix_traces(), traces()), curve_points())
def test_each_point_equals_a_separate_tiered_replay(case, points) -> None:
    block_tokens, requests, chunk = case
    _check_points(requests, points, block_tokens, chunk)


@settings(max_examples=100, deadline=None)
@given(prefix_traces(), st.lists(st.lists(st.integers(0, 8), min_size=3, max_size=3), min_size=1, max_size=5))
def test_any_points_at_once(case, points) -> None:
    # not only one tier varying: any capacities per point, all from one pass
    block_tokens, requests, chunk = case
    _check_points(requests, points, block_tokens, chunk)


@pytest.mark.parametrize("points, word", [([], "at least one point"), ([[1, 2], [1]], "same number"),
                                          ([[1, -1]], ">= 0"), ([[None, 1]], "only the last")])
def test_bad_points(points, word) -> None:
    with pytest.raises(InputError, match=word):
        tier_curve_of_requests([req(0, 4, [1])], points, block_tokens=4)


# --- the CLI: kvcalc trace FILE --tiers ... --tier-curve TIER[=values]

def curve_rows(*args: str) -> list[dict]:
    return tiers_json(*args)["results"]


def test_cli_dram_curve_by_hand(four: str) -> None:
    # test_cli_trace's FOUR trace, 4-token blocks, HBM 1 block (4 tokens), DRAM 0..3 blocks:
    # r1 [1,2] misses; r2 [1,2,3] (10 tok) before it: 2 at depth 1, 1 at depth 2; r3 [1,2,3] (9 tok): 3 at depth 1,
    #   2 at 2, 1 at 3; r4 [4,5] new.
    # DRAM 0: summed 1 block: r2's run stops at block 1 (depth 2), r3's too: no hits.
    # DRAM 1: summed 2: r2 hits 1 (DRAM, 4 tok) and 2 (HBM, 4 tok); r3 stops at block 1 (depth 3) -> hbm 4, dram 4.
    # DRAM 2: summed 3: + r3: 1 (DRAM 4), 2 (DRAM 4), 3 (HBM, min(4, 9 - 8) = 1) -> hbm 5, dram 12; DRAM 3: same.
    rows = curve_rows(four, "-b", "4", "--tiers", "hbm,dram", "--tier-capacity", "hbm=4,dram=8",
                      "--tier-curve", "dram=0,4,12")
    assert [(r["capacity_blocks"], r["hbm_hit_tokens"], r["dram_hit_tokens"], r["point"]) for r in rows] == [
        (0, 0, 0, ""), (1, 4, 4, ""), (2, 5, 12, "configured"), (3, 5, 12, "")]
    assert [r["hit_tokens"] for r in rows] == [r["single_cache_reused_tokens"] for r in rows] == [0, 8, 17, 17]


@pytest.mark.parametrize("path", REAL_TRACES)
@pytest.mark.parametrize("tier", ["hbm", "dram"])
def test_mooncake_curve_points_equal_separate_tiered_runs(path, tier: str) -> None:
    # Llama-3-70B on 8 x H100: HBM 2,592 blocks, so DRAM and SSD serve a third of the whole trace's input (17.1% of
    # the slice's)
    base = ("--model", "llama-3-70b", "--tiers", "hbm,dram,ssd")
    rows = curve_rows(str(path), *base, "--tier-curve", tier, "--curve-points", "4")
    assert len(rows) >= 4 and sum(r["point"] == "configured" for r in rows) == 1
    for r in rows[:: max(1, len(rows) // 4)]:  # a few points: each is a full CLI run
        alone = curve_rows(str(path), *base, "--tier-capacity", f"{tier}={r['capacity_tokens']}")
        assert [r[f"{t['tier']}_hit_tokens"] for t in alone] == [t["hit_tokens"] for t in alone]
        assert [r[f"{t['tier']}_hit_requests"] for t in alone] == [t["hit_requests"] for t in alone]
        assert r["time_saved_s"] == pytest.approx(sum(t["time_saved_s"] for t in alone))


@pytest.mark.parametrize("args, words", [
    (("--tiers", "hbm,dram", "--tier-curve", "ssd"), ("--tier-curve", "ssd", "not in --tiers")),
    (("--tier-curve", "dram"), ("--tier-curve", "only with --tiers")),
    (("--tiers", "hbm,dram", "--tier-curve", "dram="), ("--tier-curve", "no capacities")),
    (("--tiers", "hbm,dram", "--tier-curve", "dram=-1TB"), ("--tier-curve dram", ">= 0")),
    (("--tiers", "hbm,dram", "--tier-curve", "dram=1TB", "--curve-points", "3"), ("--curve-points", "listed")),
    (("--tiers", "hbm,dram", "--tier-curve", "dram", "--curve-points", "0"), ("--curve-points", "> 0")),
    (("--tiers", "hbm,dram", "--curve-points", "3"), ("--curve-points", "--tier-curve")),
])
def test_bad_tier_curves(four: str, args, words) -> None:
    assert_bad_input(run_cli("trace", four, "-b", "4", *args), *words)


def test_api_equals_cli_and_csv(four: str) -> None:
    import kvcalc
    from kvcalc.out.render import to_json

    req = kvcalc.TierRequest(four, ("hbm", "dram"), (("hbm", "4"), ("dram", "8")), block_tokens=4,
                             curve_tier="dram", curve_values=("0", "4"))
    cli = tiers_json(four, "-b", "4", "--tiers", "hbm,dram", "--tier-capacity", "hbm=4,dram=8",
                     "--tier-curve", "dram=0,4")
    api = json.loads(to_json(kvcalc.tier_curve_result(req, kvcalc.resolve_scenario("v4-flash-8xh100"))))
    assert api["results"] == cli["results"] and len(cli["results"]) == 3
    csv = run_cli("trace", four, "-b", "4", "--tiers", "hbm,dram", "--tier-capacity", "hbm=4,dram=8",
                  "--tier-curve", "dram=0,4", "--format", "csv")
    assert csv.code == 0 and csv.out.count("\n") == 4 and "dram_hit_tokens" in csv.out.splitlines()[0]


@settings(max_examples=100, deadline=None)
@given(prefix_traces(), curve_points(), st.integers(1, 8))
def test_points_in_small_batches(case, points, batch) -> None:
    # the per-point sums go a few points x cells at a time; tiny batches split the points of every chunk
    from unittest import mock

    import kvcalc.trace.tier_curve as tc

    block_tokens, requests, chunk = case
    with mock.patch.object(tc, "_BATCH_ELEMENTS", batch):
        _check_points(requests, points, block_tokens, chunk)
