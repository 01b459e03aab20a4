"""The sampled LRU curve (issue 22, SHARDS-style): a rate of 1 is the exact curve; lower rates estimate it from
the hashed ids they keep, with the statistics exact; the CLI's --sample-rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_bad_input, run_cli

from kvcalc.trace.analysis import analyze_trace
from kvcalc.trace.replicas import splitmix64
from kvcalc.trace.result import capacity_grid

MOONCAKE_HEAD = Path(__file__).parent / "fixtures" / "traces" / "mooncake_synthetic_head400.jsonl"


def test_splitmix64_known_values():
    # SplitMix64 (Steele, Lea, Flood 2014; Vigna's C reference): from state 0 the first output is
    # 0xE220A8397B1DCDAF, from state 1 0x910A2DEC89025CC1 (the finaliser of 0 + golden gamma, of 1 + gamma)
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    assert splitmix64(1) == 0x910A2DEC89025CC1


def test_rate_one_is_the_exact_curve():
    exact = analyze_trace(MOONCAKE_HEAD, [], 512, keep_profile=True).profile
    sampled = analyze_trace(MOONCAKE_HEAD, [], 512, keep_profile=True, sample_rate=1.0).profile
    assert sampled.distinct_blocks == exact.distinct_blocks
    for c in capacity_grid(exact.distinct_blocks * 512, 30, 512) + [None]:
        assert sampled.at(c) == exact.at(c)


def test_a_sample_keeps_the_statistics_exact_and_estimates_the_curve():
    exact = analyze_trace(MOONCAKE_HEAD, [], 512, keep_profile=True)
    half = analyze_trace(MOONCAKE_HEAD, [], 512, keep_profile=True, sample_rate=0.5)
    assert half.stats == exact.stats  # the trace table: exact whatever the rate
    grid = capacity_grid(exact.profile.distinct_blocks * 512, 20, 512)
    errors = [abs(half.profile.at(c).token_hit_rate - exact.profile.at(c).token_hit_rate) for c in grid]
    # this 400-request slice has 9,795 distinct blocks; half of them (by hash) estimate every grid point within
    # 1 percentage point, and the estimated working set within 5%
    assert max(errors) < 0.01
    assert half.profile.distinct_blocks == pytest.approx(exact.profile.distinct_blocks, rel=0.05)


def test_cli_sample_rate():
    r = run_cli("trace", str(MOONCAKE_HEAD), "--curve", "--sample-rate", "0.1", "--format", "json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["inputs"]["sample_rate"] == 0.1
    assert_bad_input(run_cli("trace", str(MOONCAKE_HEAD), "--sample-rate", "0.1"), "--sample-rate", "--curve")
    for bad in ("0", "-0.1", "1.5", "nan"):
        assert_bad_input(run_cli("trace", str(MOONCAKE_HEAD), "--curve", "--sample-rate", bad), "--sample-rate")
    assert_bad_input(run_cli("trace", str(MOONCAKE_HEAD), "--curve", "--sample-rate", "0.1", "--policy", "fifo"),
                     "--curve")


def test_shards_adj_by_hand():
    from kvcalc.trace.sampled import _share

    # 30 sampled hits of 90 sampled references where a rate-R sample should have drawn 100: plain 30 / 90;
    # SHARDS_adj adds the 10 missing references to the first bucket: (30 + 10) / 100 = 0.4, from depth 1 on
    assert _share(30, 90, 100.0, 5, False) == 30 / 90
    assert _share(30, 90, 100.0, 5, True) == 0.4
    assert _share(30, 90, 100.0, 0, True) == 0.0  # a cache of no sampled block holds nothing
    assert _share(0, 120, 100.0, 1, True) == 0.0  # clamped: 20 references too many, no hit to take them from
    assert _share(100, 100, 100.0, 3, True) == 1.0


def test_salts_and_adjustment_on_the_excerpt():
    # 8 hash salts at rate 0.5 on the 400-request excerpt (9,795 distinct blocks), the default 20-point grid:
    # plain estimates within 0.69 pp at worst (measured, bench/bench_sampled.py), SHARDS_adj within 1.33 pp;
    # bounds 1.0 and 1.5 pp. Rate 1 with the adjustment stays exact; another salt draws another sample.
    import dataclasses
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_sampled", Path(__file__).parents[1] / "bench" /
                                                  "bench_sampled.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    SALTS = bench.SALTS
    from kvcalc.trace.engine import Tee, run_pass
    from kvcalc.trace.lru_curve import LruStackEngine
    from kvcalc.trace.reader import read_trace
    from kvcalc.trace.sampled import SampledLruEngine

    engines = [SampledLruEngine(0.5, 512, salt=s) for s in SALTS] + [SampledLruEngine(1.0, 512, adjust=True)]
    _, (exact, *sampled) = run_pass(read_trace(MOONCAKE_HEAD), Tee(LruStackEngine(512), *engines), 512)
    *halves, whole = sampled
    grid = capacity_grid(exact.distinct_blocks * 512, 20, 512)
    for c in grid + [None]:
        assert whole.at(c) == exact.at(c)
    assert len({h.sampled.distinct_blocks for h in halves}) > 1
    for adjust, bound in ((False, 0.01), (True, 0.015)):
        worst = max(abs(dataclasses.replace(h, adjust=adjust).at(c).token_hit_rate - exact.at(c).token_hit_rate)
                    for h in halves for c in grid)
        assert worst < bound, (adjust, worst)
