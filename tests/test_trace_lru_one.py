"""The numpy one-capacity LRU engine (issue 22): every figure equals the lean replay's (the infinite cache's
estimate included, whatever the ids: dense, huge, negative, random 64-bit, sparse enough to leave the bit
table) and the direct OrderedDict replay's, whatever the batches and chunks; its parts (grouping by id, the
binned live-slot counts) equal brute force; the dispatch rule; the reader's errors unchanged on its path."""

from __future__ import annotations

import json
import random
from collections import namedtuple
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
from conftest import REAL_TRACES, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from test_trace import simulate
from test_trace_input import GOOD, HOSTILE

import kvcalc.trace.analysis as analysis
import kvcalc.trace.lean as lean
import kvcalc.trace.lru_one as lru_one
import kvcalc.trace.seen_sample as seen_sample
from kvcalc.out.errors import InputError
from kvcalc.trace.analysis import analyze_trace, one_lru_in_numpy
from kvcalc.trace.lean import LeanEngine
from kvcalc.trace.lru_one import OneLruEngine, SeenIds, group_by_id, live_counts
from kvcalc.trace.reader import TraceRequest

INT64_MAX = 2**63 - 1
Record = namedtuple("Record", "timestamp input_length output_length hash_ids")
ID_KINDS = {
    "dense": lambda k, salt: k,
    "huge": lambda k, salt: INT64_MAX - k,
    "negative": lambda k, salt: -1 - k,
    "sparse": lambda k, salt: k * 1_000_003,  # beyond the bit table's bound after a few ids
    "random64": lambda k, salt: random.Random(k * 7919 + salt).getrandbits(64) - 2**63,
    "mixed": lambda k, salt: (k, -k, k * 1_000_003, INT64_MAX - k)[k % 4],
}


@st.composite
def traces(draw):
    """(block_tokens, batches of records): prefix-sharing requests over a small alphabet of one id kind, with
    repeats inside a request and empty requests."""
    block_tokens = draw(st.integers(1, 4))
    kind = ID_KINDS[draw(st.sampled_from(sorted(ID_KINDS)))]
    salt = draw(st.integers(0, 3))
    alphabet = draw(st.integers(0, 40))
    records = []
    for _ in range(draw(st.integers(1, 60))):
        ids = [kind(k, salt) for k in draw(st.lists(st.integers(0, alphabet), max_size=8))]
        if records and draw(st.booleans()):  # a shared prefix, as Mooncake's requests share them
            ids = list(draw(st.sampled_from(records)).hash_ids[:draw(st.integers(0, 6))]) + ids[:3]
        length = max(0, len(ids) * block_tokens - draw(st.integers(0, block_tokens - 1))) if ids else 0
        records.append(Record(0.0, length, 1, ids))
    cuts = sorted(draw(st.lists(st.integers(1, len(records)), max_size=6)))
    batches = [records[a:b] for a, b in zip([0, *cuts], [*cuts, len(records)]) if b > a]
    return block_tokens, batches


def _answers(engine, batches):
    for batch in batches:
        engine.add_records(batch)
    return engine.finish()


@settings(max_examples=400, deadline=None)
@given(traces(), st.sampled_from([0, 1, 2, 3, 5, 8, 13, 40, 10**12]), st.booleans(),
       st.sampled_from([1, 3, 16, 1 << 16]), st.sampled_from([2, 4, 8192]), st.sampled_from([1 << 20, 0, 8]))
def test_equals_lean_and_the_direct_replay(case, capacity_blocks, exact_stats, chunk, max_sampled, table) -> None:
    block_tokens, batches = case
    capacity = capacity_blocks * block_tokens
    with patch.object(seen_sample, "MAX_SAMPLED_IDS", max_sampled), \
            patch.object(lean, "WIDE_TABLE_BYTES", table), patch.object(lean, "TABLE_BYTES_PER_BLOCK", 1):
        expected = _answers(LeanEngine([capacity], block_tokens, "lru", exact_stats), batches)
        got = _answers(OneLruEngine([capacity, None], block_tokens, exact_stats, chunk_accesses=chunk), batches)
    assert got.at(capacity) == expected.at(capacity)
    assert got.at(None) == expected.at(None)
    assert got.estimate == expected.estimate
    requests = [TraceRequest(0.0, r.input_length, 1, tuple(r.hash_ids), 0) for b in batches for r in b]
    assert got.at(capacity) == simulate(requests, capacity, block_tokens)
    if exact_stats:  # every id kept: the infinite cache is the direct replay's too
        assert got.estimate is None and got.at(None) == simulate(requests, None, block_tokens)


def test_a_trace_by_hand() -> None:
    # 2 blocks of 1 token; requests [1, 2], [3], [1, 2]: r1 misses both (cache [1, 2]); r2 misses, evicts 1
    # ([2, 3]); r3: 1 was evicted, so its hit run is 0 (2 is cached but follows a miss): hits 0 of 5 blocks.
    # Infinite cache: r3's [1, 2] were both seen, 2 hits. Capacity 3 blocks: r3 hits both.
    records = [Record(0.0, 2, 1, [1, 2]), Record(0.0, 1, 1, [3]), Record(0.0, 2, 1, [1, 2])]
    two = _answers(OneLruEngine([2], 1), [records])
    assert (two.at(2).hit_blocks, two.at(2).reused_tokens, two.at(2).peak_cached_blocks) == (0, 0, 2)
    assert (two.at(None).hit_blocks, two.at(None).peak_cached_blocks) == (2, 3)
    assert _answers(OneLruEngine([3], 1), [records]).at(3).hit_blocks == 2


def test_token_sums_exact_beyond_int64() -> None:
    # 2^50-token blocks, 4,096 blocks a request: 2^62 tokens each, 3 requests sum to 3 x 2^62 > 2^63 - 1;
    # the second and third requests hit all 4,096 blocks at 4,096 blocks of capacity: 2 x 2^62 tokens reused
    b = 2**50
    records = [Record(0.0, 2**62, 1, list(range(4096))) for _ in range(3)]
    got = _answers(OneLruEngine([4096 * b], b, chunk_accesses=4096), [records[:1], records[1:]])
    expected = _answers(LeanEngine([4096 * b], b), [records])
    assert got.at(4096 * b) == expected.at(4096 * b) and got.at(None) == expected.at(None)
    assert (got.at(4096 * b).input_tokens, got.at(4096 * b).reused_tokens) == (3 * 2**62, 2 * 2**62)


def test_refuses_anything_but_one_finite_capacity() -> None:
    for capacities in ([], [None], [4, 8]):
        with pytest.raises(ValueError, match="exactly one finite capacity"):
            OneLruEngine(capacities, 4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=300), st.sampled_from([None, 1, 2, 3, 7]),
       st.data())
def test_live_counts_equal_brute_force(ids, bin_slots, data) -> None:
    # slots 0..n-1 used by ids; live(q, s) = slots p in [q, s) whose next use is at or after s
    n = len(ids)
    nxt = np.full(n, np.iinfo(np.int64).max, np.int64)
    prev = np.full(n, -1, np.int64)
    last: dict[int, int] = {}
    for j, h in enumerate(ids):
        if h in last:
            nxt[last[h]], prev[j] = j, last[h]
        last[h] = j
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1, max_size=20))
    q = np.array([min(a, b) for a, b in pairs], np.int64)
    s = np.array([max(a, b) + 1 for a, b in pairs], np.int64)
    s = np.minimum(s, n - 1) if n > 1 else s
    q = np.minimum(q, s)
    truth = np.array([sum(nxt[p] >= si for p in range(qi, si)) for qi, si in zip(q, s)])
    threshold = data.draw(st.integers(0, n))
    lower, upper = live_counts(nxt, q, s, prev, threshold, threshold, bin_slots)
    assert np.all(lower <= truth) and np.all(truth <= upper)
    assert np.array_equal(lower <= threshold, truth <= threshold)  # decided where it matters
    lower, upper = live_counts(nxt, q, s, prev, 0, n, bin_slots)
    assert np.array_equal(lower, truth) and np.array_equal(upper, truth)  # every answer exact


def _grouped(ids: np.ndarray, order: np.ndarray) -> bool:
    """``order`` is a permutation putting equal ids side by side, each group in access order."""
    if sorted(order.tolist()) != list(range(len(ids))):
        return False
    grouped = ids[order]
    starts = [i for i in range(len(ids)) if i == 0 or grouped[i] != grouped[i - 1]]
    if len(starts) != len(set(ids.tolist())):  # an id in two groups
        return False
    return all(order[i] < order[i + 1] for i in range(len(ids) - 1) if grouped[i] == grouped[i + 1])


@given(st.lists(st.integers(-(2**63), INT64_MAX) | st.integers(-3, 3), max_size=200))
def test_group_by_id_groups_in_access_order(values) -> None:
    ids = np.array(values, np.int64)
    assert _grouped(ids, group_by_id(ids))
    with patch.object(lru_one, "_HASH", np.uint64(0)):  # every id one hash: the stable argsort
        assert np.array_equal(group_by_id(ids), np.argsort(ids, kind="stable"))


def test_seen_ids_bits_then_sorted() -> None:
    seen = SeenIds()
    seen.add(np.array([5, 0, 1 << 20], np.int64))
    assert seen.bits is not None and len(seen) == 3
    seen.add(np.array([-7, 2**62], np.int64))  # beyond the bit table: a sorted array from now on
    assert seen.bits is None
    assert seen.contains(np.array([0, 5, 6, -7, 2**62, 1 << 20], np.int64)).tolist() == [
        True, True, False, True, True, True]
    assert sorted(seen.tolist()) == [-7, 0, 5, 1 << 20, 2**62]


def test_dispatch_rule(tmp_path: Path) -> None:
    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    small.write_text(GOOD + "\n")
    big.write_text(GOOD + "\n" + GOOD + "\n")
    with patch.object(analysis, "NUMPY_ONE_LRU_BYTES", big.stat().st_size), \
            patch.object(analysis, "MIN_NUMPY_CAPACITY_BLOCKS", 3):
        assert one_lru_in_numpy(big, [12, None], "lru", 4) and one_lru_in_numpy(big, [12, 12], "lru", 4)
        assert not one_lru_in_numpy(big, [11], "lru", 4)  # 2 blocks of 4 tokens: below the 3 blocks
        assert not one_lru_in_numpy(small, [12], "lru", 4)  # below the size
        assert not one_lru_in_numpy(big, [None], "lru", 4) and not one_lru_in_numpy(big, [12, 16], "lru", 4)
        assert not one_lru_in_numpy(big, [12], "fifo", 4)
        assert not one_lru_in_numpy(tmp_path / "missing.jsonl", [12], "lru", 4)
    # the shipped rule: 32 MiB and 250,000 blocks (128m tokens at 512-token blocks)
    assert (analysis.NUMPY_ONE_LRU_BYTES, analysis.MIN_NUMPY_CAPACITY_BLOCKS) == (32 << 20, 250_000)


def _numpy_path(monkeypatch) -> None:
    monkeypatch.setattr(analysis, "NUMPY_ONE_LRU_BYTES", 0)
    monkeypatch.setattr(analysis, "MIN_NUMPY_CAPACITY_BLOCKS", 0)


@pytest.mark.parametrize("path", REAL_TRACES)
def test_mooncake_equals_lean(path, monkeypatch) -> None:
    lean_runs = {(tuple(c), e): analyze_trace(path, c, exact_stats=e)
                 for c in ([3_000_000], [3_000_000, None], [512]) for e in (False, True)}
    _numpy_path(monkeypatch)
    for (caps, exact), expected in lean_runs.items():
        got = analyze_trace(path, list(caps), exact_stats=exact)
        assert (got.stats, got.results) == (expected.stats, expected.results)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_lines_same_errors_as_lean(tmp_path: Path, case: str, monkeypatch) -> None:
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(line + "\n" for line in [GOOD, HOSTILE[case][0], GOOD]))
    outcomes = []
    for numpy_path in (False, True):
        if numpy_path:
            _numpy_path(monkeypatch)
        with pytest.raises(InputError) as err:
            analyze_trace(path, [4], 4)
        skipped = analyze_trace(path, [4], 4, skip_bad=True)
        outcomes.append((str(err.value), skipped.stats, skipped.results, skipped.first_problem))
    assert outcomes[0] == outcomes[1]


def test_cli_output_identical_on_both_paths(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t.jsonl"
    rng = random.Random(22)
    path.write_text("".join(json.dumps({"timestamp": i, "input_length": 3 * 512 - i % 7, "output_length": 2,
                                        "hash_ids": [rng.randrange(4), rng.getrandbits(64) - 2**63,
                                                     rng.randrange(30)]}) + "\n" for i in range(300)))
    args = ("trace", str(path), "--capacity", "8k,inf", "--format", "json")
    lean_run = run_cli(*args)
    _numpy_path(monkeypatch)
    numpy_run = run_cli(*args)
    assert lean_run.code == numpy_run.code == 0
    assert numpy_run.out == lean_run.out
