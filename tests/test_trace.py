"""Trace replay: reader errors, statistics, LRU/FIFO replays computed by hand, and curve == replays."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.out.errors import InputError
from kvcalc.trace.analysis import analyze_trace
from kvcalc.trace.lru_curve import count_prefix_at_least, lru_curve, lru_curve_of_requests, lru_profile
from kvcalc.trace.reader import TraceRequest, read_trace
from kvcalc.trace.replay import (CacheSimulator, capacity_blocks_for, capacity_grid, capacity_tokens_from_bytes, replay,
                                 replay_requests)
from kvcalc.trace.analysis import stats_of_requests, trace_stats

MOONCAKE = Path(__file__).parents[2] / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"


def write_trace(path: Path, records: list[dict | str]) -> Path:
    """One JSON object (or raw text) per line."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def rec(timestamp: float, input_length: int, output_length: int, hash_ids: list) -> dict:
    return {"timestamp": timestamp, "input_length": input_length, "output_length": output_length,
            "hash_ids": hash_ids}


def simulate(requests, capacity, block_tokens: int, policy: str = "lru"):
    """The direct OrderedDict replay of one capacity: the reference the stack-depth engine must equal."""
    sim = CacheSimulator(capacity, block_tokens, policy)
    for r in requests:
        sim.add(r.hash_ids, r.input_length)
    return sim.finish()


# Three requests, 4-token blocks (ceil(8/4) = 2, ceil(10/4) = 3, ceil(9/4) = 3 ids).
SMALL = [rec(0, 8, 1, [1, 2]), rec(1500, 10, 2, [1, 2, 3]), rec(4000, 9, 3, [1, 2, 3])]


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return write_trace(tmp_path / "small.jsonl", SMALL)


# ---------------------------------------------------------------- replays computed by hand


def test_lru_capacity_two_blocks_by_hand(small: Path) -> None:
    # capacity 8 tokens = 2 blocks of 4; cache listed oldest -> newest.
    # r1 [1,2]  : empty cache, 0 hits; insert 1, 2            -> [1, 2]
    # r2 [1,2,3]: 1, 2 cached, 3 not: 2 hit blocks, min(2*4, 10) = 8 tokens;
    #             refresh 1 -> [2,1], refresh 2 -> [1,2], insert 3 -> [1,2,3], evict 1 -> [2, 3]
    # r3 [1,2,3]: 1 not cached: 0 hits; insert 1 evicts 2 -> [3,1]; 2 evicts 3 -> [1,2]; 3 evicts 1 -> [2,3]
    # reused 8 of 8 + 10 + 9 = 27 tokens; hit blocks 2 of 2 + 3 + 3 = 8
    r = replay(small, 8, block_tokens=4)
    assert (r.capacity_tokens, r.capacity_blocks, r.requests) == (8, 2, 3)
    assert (r.input_tokens, r.reused_tokens, r.total_blocks, r.hit_blocks) == (27, 8, 8, 2)
    assert r.token_hit_rate == pytest.approx(8 / 27)
    assert r.block_hit_rate == pytest.approx(2 / 8)
    assert r.peak_cached_blocks == 2
    assert r.policy == "lru" and r.skipped_lines == 0


def test_lru_infinite_and_large_capacity_by_hand(small: Path) -> None:
    # infinite: r2 hits 1, 2 -> 8 tokens; r3 hits 1, 2, 3 -> min(3*4, 9) = 9 tokens (last block partial)
    # reused 17 of 27 tokens, 5 of 8 blocks; 3 distinct blocks cached at the end
    r = replay(small, None, block_tokens=4)
    assert (r.capacity_tokens, r.capacity_blocks) == (None, None)
    assert (r.reused_tokens, r.hit_blocks, r.peak_cached_blocks) == (17, 5, 3)
    assert r.token_hit_rate == pytest.approx(17 / 27)
    # 12 tokens = 3 blocks hold everything: same as infinite
    r3 = replay(small, 12, block_tokens=4)
    assert (r3.reused_tokens, r3.hit_blocks, r3.peak_cached_blocks) == (17, 5, 3)


def test_lru_one_block_and_partial_capacity(small: Path) -> None:
    # 7 tokens -> floor(7/4) = 1 block: r1 leaves [2]; r2 starts with 1 -> 0 hits, leaves [3]; r3: 0 hits
    r = replay(small, 7, block_tokens=4)
    assert (r.capacity_blocks, r.reused_tokens, r.hit_blocks, r.peak_cached_blocks) == (1, 0, 0, 1)
    # 3 tokens -> 0 blocks: nothing is ever cached
    r0 = replay(small, 3, block_tokens=4)
    assert (r0.capacity_blocks, r0.reused_tokens, r0.peak_cached_blocks) == (0, 0, 0)


def test_fifo_differs_from_lru_by_hand(tmp_path: Path) -> None:
    # 1-token blocks, capacity 2 blocks; requests [1], [2], [1], [3], [1]
    # LRU : [1] -> [1,2] -> hit 1, refresh -> [2,1] -> 3 evicts 2 -> [1,3] -> hit 1   : 2 hits of 5
    # FIFO: [1] -> [1,2] -> hit 1, no refresh -> [1,2] -> 3 evicts 1 -> [2,3] -> miss : 1 hit of 5
    path = write_trace(tmp_path / "f.jsonl", [rec(i, 1, 1, [h]) for i, h in enumerate([1, 2, 1, 3, 1])])
    lru = replay(path, 2, block_tokens=1, policy="lru")
    fifo = replay(path, 2, block_tokens=1, policy="fifo")
    assert (lru.reused_tokens, lru.token_hit_rate) == (2, pytest.approx(2 / 5))
    assert (fifo.reused_tokens, fifo.token_hit_rate) == (1, pytest.approx(1 / 5))
    assert fifo.policy == "fifo"


def test_request_longer_than_cache_evicts_its_own_blocks(tmp_path: Path) -> None:
    # 1-token blocks, capacity 2: [1,2,3] leaves [2,3]; then [1,2,3] misses at 1 (0 hits); [2,3] would hit.
    path = write_trace(tmp_path / "long.jsonl", [rec(0, 3, 1, [1, 2, 3]), rec(1, 3, 1, [1, 2, 3]),
                                                 rec(2, 2, 1, [2, 3])])
    r = replay(path, 2, block_tokens=1)
    # r2 leaves [2,3] again (1 evicts 2, 2 evicts 3, 3 evicts 1) -> r3 hits both: 2 tokens of 3 + 3 + 2
    assert (r.reused_tokens, r.input_tokens) == (2, 8)


def test_unknown_policy_and_bad_capacity(small: Path) -> None:
    with pytest.raises(InputError, match="policy"):
        replay(small, 8, block_tokens=4, policy="arc")
    with pytest.raises(InputError, match=">= 0"):
        replay(small, -1, block_tokens=4)
    with pytest.raises(InputError, match="whole number"):
        lru_curve(small, [8, 2.5], block_tokens=4)
    with pytest.raises(InputError, match="block size"):
        replay(small, 8, block_tokens=0)


# ---------------------------------------------------------------- curve


def test_curve_small_trace_equals_replays(small: Path) -> None:
    capacities = [0, 3, 4, 7, 8, 11, 12, 100, None]
    curve = lru_curve(small, capacities, block_tokens=4)
    assert [p.capacity_tokens for p in curve] == capacities
    requests = list(read_trace(small, block_tokens=4))
    for point, capacity in zip(curve, capacities):
        assert point == replay(small, capacity, block_tokens=4) == simulate(requests, capacity, 4)
    # by hand (see above): 0 tokens at <= 1 block, 8 at 2 blocks, 17 from 3 blocks on
    assert [p.reused_tokens for p in curve] == [0, 0, 0, 0, 8, 8, 17, 17, 17]


def test_profile_fields(small: Path) -> None:
    profile = lru_profile(small, block_tokens=4)
    assert (profile.requests, profile.input_tokens, profile.total_blocks, profile.distinct_blocks) == (3, 27, 8, 3)
    assert list(profile.reused_tokens_upto) == [0, 0, 8, 17]
    assert list(profile.hit_blocks_upto) == [0, 0, 2, 5]


@st.composite
def traces(draw):
    """(block_tokens, requests, chunk_accesses): small random traces with many repeated ids."""
    block_tokens = draw(st.integers(1, 4))
    alphabet = draw(st.integers(0, 6))
    requests = []
    for i in range(draw(st.integers(1, 10))):
        n_blocks = draw(st.integers(0, 7))
        shortfall = draw(st.integers(0, block_tokens - 1)) if n_blocks else 0
        ids = tuple(draw(st.lists(st.integers(0, alphabet), min_size=n_blocks, max_size=n_blocks)))
        requests.append(TraceRequest(float(i), n_blocks * block_tokens - shortfall, 1, ids, i + 1))
    return block_tokens, requests, draw(st.integers(1, 16))


@settings(max_examples=300, deadline=None)
@given(traces())
def test_curve_equals_separate_replays(case) -> None:
    block_tokens, requests, chunk_accesses = case
    distinct = len({h for r in requests for h in r.hash_ids})
    # every capacity from 0 to past the working set, including non-multiples of the block size
    capacities = [*range(0, (distinct + 2) * block_tokens + 1), None]
    curve = lru_curve_of_requests(requests, capacities, block_tokens, chunk_accesses=chunk_accesses)
    for point, capacity in zip(curve, capacities):
        assert point == simulate(requests, capacity, block_tokens)
        assert point == replay_requests(requests, capacity, block_tokens)


@settings(max_examples=100, deadline=None)
@given(traces())
def test_stats_max_hit_rate_is_infinite_replay(case) -> None:
    block_tokens, requests, _ = case
    stats = stats_of_requests(requests, block_tokens)
    infinite = simulate(requests, None, block_tokens)
    assert stats.max_reused_tokens == infinite.reused_tokens
    assert stats.max_token_hit_rate == infinite.token_hit_rate
    assert stats.max_block_hit_rate == infinite.block_hit_rate
    assert stats.distinct_blocks == infinite.peak_cached_blocks


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=30), st.lists(st.tuples(st.integers(0, 30), st.integers(0, 50)),
                                                         min_size=1, max_size=20))
def test_count_prefix_at_least_brute_force(values, queries) -> None:
    v = np.array(values, np.int64)
    prefix = np.array([min(p, len(values)) for p, _ in queries], np.int64)
    thresholds = np.array([t for _, t in queries], np.int64)
    expected = [sum(1 for x in values[:p] if x >= t) for p, t in zip(prefix, thresholds)]
    assert list(count_prefix_at_least(v, prefix, thresholds)) == expected


def test_curve_file_equals_in_memory(small: Path) -> None:
    requests = list(read_trace(small, block_tokens=4))
    assert lru_curve(small, [8, None], block_tokens=4) == lru_curve_of_requests(requests, [8, None], 4)


# ---------------------------------------------------------------- statistics


def test_stats_by_hand(small: Path) -> None:
    s = trace_stats(small, block_tokens=4)
    assert s.requests == 3 and s.skipped_lines == 0 and s.block_tokens == 4
    assert s.duration_s == pytest.approx(4.0)  # 0 .. 4000 ms
    # inputs 8, 10, 9: sorted [8, 9, 10]; p90 at rank 0.9 * 2 = 1.8 -> 9 + 0.8 * (10 - 9) = 9.8
    assert s.input.total_tokens == 27 and s.input.mean_tokens == pytest.approx(9.0)
    assert (s.input.p50_tokens, s.input.p90_tokens, s.input.p99_tokens) == pytest.approx((9.0, 9.8, 9.98))
    assert s.input.max_tokens == 10
    # outputs 1, 2, 3: mean 2, p50 2, p90 2.8, p99 2.98
    assert s.output.total_tokens == 6 and s.output.mean_tokens == pytest.approx(2.0)
    assert (s.output.p50_tokens, s.output.p90_tokens, s.output.p99_tokens) == pytest.approx((2.0, 2.8, 2.98))
    # blocks: 2 + 3 + 3 = 8, distinct {1, 2, 3}; infinite cache: 17 of 27 tokens, 5 of 8 blocks
    assert (s.total_blocks, s.distinct_blocks, s.max_reused_tokens) == (8, 3, 17)
    assert s.max_token_hit_rate == pytest.approx(17 / 27)
    assert s.max_block_hit_rate == pytest.approx(5 / 8)


def test_analyze_one_pass(small: Path) -> None:
    a = analyze_trace(small, [8, None], block_tokens=4)
    assert a.stats == trace_stats(small, block_tokens=4)
    assert a.results == (replay(small, 8, block_tokens=4), replay(small, None, block_tokens=4))
    f = analyze_trace(small, [8], block_tokens=4, policy="fifo")
    assert f.results == (replay(small, 8, block_tokens=4, policy="fifo"),)


def test_other_block_size(tmp_path: Path) -> None:
    # 16-token blocks (Qwen Bailian): 40 tokens -> ceil(40/16) = 3 ids; the second request reuses 2 blocks
    path = write_trace(tmp_path / "q.jsonl", [rec(0, 40, 1, [7, 8, 9]), rec(5, 33, 1, [7, 8, 5])])
    r = replay(path, None, block_tokens=16)
    assert (r.reused_tokens, r.input_tokens) == (32, 73)
    with pytest.raises(InputError, match="ceil"):
        replay(path, None)  # the default 512-token blocks do not fit


# ---------------------------------------------------------------- bad input


GOOD = json.dumps(rec(0, 4, 1, [1]))
BAD_LINES = {
    "malformed": ('{"timestamp": 0, "input_length": 4,, "output_length": 1, "hash_ids": [1]}', "malformed JSON"),
    "truncated": ('{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1', "truncated"),
    "not_object": ("[1, 2, 3]", "JSON object"),
    "missing": ('{"timestamp": 0, "input_length": 4, "hash_ids": [1]}', "missing field 'output_length'"),
    "type_length": (json.dumps(rec(0, "4", 1, [1])), "input_length must be an integer"),
    "float_length": (json.dumps(rec(0, 4.0, 1, [1])), "input_length must be an integer"),
    "bool_length": (json.dumps(rec(0, 4, True, [1])), "output_length must be an integer"),
    "type_timestamp": (json.dumps(rec("soon", 4, 1, [1])), "timestamp"),
    "nan_timestamp": ('{"timestamp": NaN, "input_length": 4, "output_length": 1, "hash_ids": [1]}', "timestamp"),
    "type_ids": (json.dumps(rec(0, 4, 1, "1")), "hash_ids must be a list"),
    "negative_input": (json.dumps(rec(0, -4, 1, [])), "input_length must be >= 0"),
    "negative_output": (json.dumps(rec(0, 4, -1, [1])), "output_length must be >= 0"),
    "too_few_ids": (json.dumps(rec(0, 5, 1, [1])), "hash_ids has 1 ids but input_length 5 needs ceil(5/4) = 2"),
    "too_many_ids": (json.dumps(rec(0, 4, 1, [1, 2])), "hash_ids has 2 ids"),
    "float_id": (json.dumps(rec(0, 4, 1, [1.5])), "hash_ids must be integers"),
    "string_id": (json.dumps(rec(0, 4, 1, ["a"])), "hash_ids must be integers"),
    "bool_id": (json.dumps(rec(0, 4, 1, [True])), "hash_ids must be integers"),
    "huge_id": (json.dumps(rec(0, 4, 1, [2**64])), "64-bit"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_bad_line_names_file_and_line(tmp_path: Path, case: str) -> None:
    text, expected = BAD_LINES[case]
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{GOOD}\n\n{text}\n{GOOD}\n")  # the bad line is line 3 (line 2 is blank)
    with pytest.raises(InputError) as info:
        replay(path, 8, block_tokens=4)
    message = str(info.value)
    assert message.startswith(f"{path}:3: ")
    assert expected in message
    assert "\n" not in message


def test_truncated_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_text(GOOD + "\n" + GOOD[:-9])
    with pytest.raises(InputError, match=r":2: truncated"):
        trace_stats(path, block_tokens=4)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.jsonl"
    path.write_bytes(GOOD.encode() + b"\n\xff\xfe\n")
    with pytest.raises(InputError, match=r":2: not UTF-8"):
        trace_stats(path, block_tokens=4)


def test_reader_streams_requests_before_a_later_error(tmp_path: Path) -> None:
    path = tmp_path / "late.jsonl"
    path.write_text(f"{GOOD}\n{GOOD}\nnot json\n")
    it = iter(read_trace(path, block_tokens=4))
    assert next(it).line_number == 1
    assert next(it).line_number == 2
    with pytest.raises(InputError, match=":3:"):
        next(it)


def test_skip_bad_counts_lines(tmp_path: Path) -> None:
    lines = [GOOD, "", BAD_LINES["malformed"][0], BAD_LINES["too_few_ids"][0], "   ", GOOD,
             BAD_LINES["float_id"][0]]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    reader = read_trace(path, block_tokens=4, skip_bad=True)
    got = list(reader)
    assert [r.line_number for r in got] == [1, 6]
    assert reader.skipped_lines == 3
    assert reader.first_problem is not None and reader.first_problem.startswith(f"{path}:3: ")
    assert replay(path, None, block_tokens=4, skip_bad=True).skipped_lines == 3
    assert lru_curve(path, [4], block_tokens=4, skip_bad=True)[0].skipped_lines == 3
    s = trace_stats(path, block_tokens=4, skip_bad=True)
    assert (s.requests, s.skipped_lines) == (2, 3)
    with pytest.raises(InputError, match=":3:"):
        replay(path, None, block_tokens=4)


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_empty_trace_is_an_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(text)
    with pytest.raises(InputError, match="no requests"):
        trace_stats(path)
    with pytest.raises(InputError, match="no requests"):
        lru_curve(path, [1024])


def test_only_bad_lines_skipped_is_an_error(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "allbad.jsonl", ["nope", "{}"])
    with pytest.raises(InputError, match=r"no requests in the trace \(2 bad lines skipped\)"):
        replay(path, None, skip_bad=True)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such trace file"):
        trace_stats(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="directory"):
        trace_stats(tmp_path)


# ---------------------------------------------------------------- capacity helpers


def test_capacity_tokens_from_bytes() -> None:
    # 80 GB at 10 MB per 512-token block -> 8000 blocks -> 4,096,000 tokens
    assert capacity_tokens_from_bytes(80e9, 10e6, 512) == 4_096_000
    # 25 B at 10 B per block -> floor(2.5) = 2 blocks of 16 tokens
    assert capacity_tokens_from_bytes(25, 10, 16) == 32
    assert capacity_tokens_from_bytes(0, 10, 16) == 0
    assert capacity_tokens_from_bytes(1.0, 0.3, 1) == 3
    for bad in [(-1, 10, 16), (10, 0, 16), (math.inf, 10, 16), (10, 10, 0)]:
        with pytest.raises(InputError):
            capacity_tokens_from_bytes(*bad)


def test_capacity_blocks_and_grid() -> None:
    assert capacity_blocks_for(1023, 512) == 1 and capacity_blocks_for(None, 512) is None
    grid = capacity_grid(100 * 512, 20, 512)
    assert grid[0] == 512 and grid[-1] == 100 * 512
    assert all(c % 512 == 0 for c in grid) and grid == sorted(set(grid))
    assert capacity_grid(512 * 5, 1, 512) == [2560]


# ---------------------------------------------------------------- reference trace (skipped when absent)


@pytest.mark.skipif(not MOONCAKE.is_file(), reason=f"reference trace not present: {MOONCAKE}")
def test_mooncake_reference_figures() -> None:
    # "3 M" / "10 M" are decimal: 3,000,000 and 10,000,000 tokens reproduce 31.5% and 57.7%.
    # (Binary 3 x 2^20 and 10 x 2^20 give 32.2% and 58.8%.)
    infinite, three, ten = lru_curve(MOONCAKE, [None, 3_000_000, 10_000_000], block_tokens=512)
    assert round(100 * infinite.token_hit_rate, 1) == 65.1
    assert round(100 * three.token_hit_rate, 1) == 31.5
    assert round(100 * ten.token_hit_rate, 1) == 57.7
    assert replay(MOONCAKE, 3_000_000) == three
    assert replay(MOONCAKE, 10_000_000) == ten
    requests = list(read_trace(MOONCAKE))  # the direct OrderedDict replay agrees
    assert simulate(requests, 3_000_000, 512) == three and simulate(requests, None, 512) == infinite
    binary = lru_curve(MOONCAKE, [3 * 2**20, 10 * 2**20])
    assert [round(100 * p.token_hit_rate, 1) for p in binary] == [32.2, 58.8]
    stats = trace_stats(MOONCAKE)
    assert stats.requests == 3993 and stats.max_token_hit_rate == infinite.token_hit_rate
