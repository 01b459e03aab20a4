"""Trace input that once crashed or wrapped (issue 9), and the one trace engine's per-request answers (issue 14):
hostile lines exit 2 naming the line (or are skipped and counted), totals are exact integers, and the reuse
each request gets at one capacity equals the direct OrderedDict replay."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import assert_bad_input, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from test_trace import traces  # small random traces with many repeated ids

from kvcalc.out.errors import InputError
from kvcalc.trace.lru_curve import LruStackEngine
from kvcalc.trace.reader import read_trace
from kvcalc.trace.replay import CacheSimulator
from kvcalc.trace.analysis import trace_stats

GOOD = '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}'
DEEP = 100_000
HOSTILE = {
    # a field nested 100,000 deep: json and msgspec both recurse; must be a bad line, not a RecursionError
    "nested_field": ('{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1], "x": '
                     + "[" * DEEP + "]" * DEEP + "}", "nested too deeply"),
    "nested_line": ("[" * DEEP + "]" * DEEP, "nested too deeply"),
    "nested_unclosed": ("{\"a\": " + "[" * DEEP, "nested too deeply"),
    # 401 digits: no float holds it (OverflowError converting it once crashed the reader)
    "timestamp_401_digits": ('{"timestamp": 1' + "0" * 400 + ', "input_length": 4, "output_length": 1, '
                             '"hash_ids": [1]}', "timestamp must be a finite number of ms within +-2^53"),
    "timestamp_beyond_2_53": ('{"timestamp": 1e300, "input_length": 4, "output_length": 1, "hash_ids": [1]}',
                              "timestamp"),
    "output_20_digits": ('{"timestamp": 0, "input_length": 4, "output_length": 99999999999999999999, '
                         '"hash_ids": [1]}', "output_length must be at most 2^63 - 1 tokens"),
    # more digits than Python converts from text (4,300): json raises ValueError, not JSONDecodeError
    "number_5000_digits": ('{"timestamp": 0, "input_length": 4, "output_length": 1' + "0" * 5000
                           + ', "hash_ids": [1]}', "unreadable JSON"),
}


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_line_exits_2_naming_the_line(tmp_path: Path, case: str) -> None:
    line, words = HOSTILE[case]
    path = write(tmp_path / "hostile.jsonl", [GOOD, line, GOOD])
    r = run_cli("trace", path, "-b", "4", "--capacity", "inf")
    assert_bad_input(r, "hostile.jsonl:2:", words)
    assert "Traceback" not in r.err and len(r.err) < 300


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_line_skipped_and_counted(tmp_path: Path, case: str) -> None:
    path = write(tmp_path / "hostile.jsonl", [GOOD, HOSTILE[case][0], GOOD])
    r = run_cli("trace", path, "-b", "4", "--capacity", "inf", "--skip-bad", "--format", "json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["tables"]["trace"][0]["skipped_lines"] == 1
    # the two good lines: the second reuses block 1 (4 tokens) of 8 input tokens
    assert (out["results"][0]["requests"], out["results"][0]["reused_tokens"]) == (2, 4)
    assert any("hostile.jsonl:2:" in n for n in out["notes"])


def test_totals_are_exact_integers(tmp_path: Path) -> None:
    # two requests of output_length 2^63 - 1: the total is 2^64 - 2 = 18,446,744,073,709,551,614 (an int64 sum
    # wrapped to -2); the mean is (2^64 - 2) / 2 = 2^63 - 1 (as a float, 9.223372036854776e18)
    big = 2**63 - 1
    lines = [json.dumps({"timestamp": t, "input_length": 4, "output_length": big, "hash_ids": [1]}) for t in (0, 1)]
    path = write(tmp_path / "big.jsonl", lines)
    s = trace_stats(path, block_tokens=4)
    assert s.output.total_tokens == 2**64 - 2 == 18_446_744_073_709_551_614
    assert s.output.max_tokens == big and s.output.mean_tokens == float(big)
    r = run_cli("trace", path, "-b", "4", "--capacity", "inf", "--format", "json")
    assert r.code == 0, r.err
    assert r.json()["tables"]["trace"][0]["output_tokens"] == 18_446_744_073_709_551_614


def test_timestamps_at_the_bound_are_read(tmp_path: Path) -> None:
    # +-2^53 ms are allowed: duration (2^53 - (-2^53)) ms = 2^54 / 1000 s = 18,014,398,509,481.984 s
    lines = [json.dumps({"timestamp": t, "input_length": 1, "output_length": 1, "hash_ids": [1]})
             for t in (-(2**53), 2**53)]
    s = trace_stats(write(tmp_path / "t.jsonl", lines), block_tokens=4)
    assert s.duration_s == pytest.approx(2**54 / 1000)


def test_directory_and_fifo_are_refused_without_blocking(tmp_path: Path) -> None:
    assert_bad_input(run_cli("trace", str(tmp_path)), str(tmp_path), "directory")
    if sys.platform == "win32" or not hasattr(os, "mkfifo"):
        return
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)  # opening a FIFO with no writer would block forever
    assert_bad_input(run_cli("trace", str(fifo)), "pipe.jsonl", "not a trace file")
    with pytest.raises(InputError, match="not a trace file"):
        list(read_trace(fifo))


# ---------------------------------------------------------------- one engine: per-request reuse


@settings(max_examples=300, deadline=None)
@given(traces(), st.one_of(st.none(), st.integers(0, 9)))
def test_per_request_hits_equal_direct_replay(case, capacity_blocks) -> None:
    block_tokens, requests, chunk_accesses = case
    hits, distinct_after = [], []

    def sink(chunk):
        hits.extend(chunk.hit_blocks(capacity_blocks).tolist())
        distinct_after.extend(chunk.distinct_after.tolist())
        assert list(chunk.counts) == [len(r.hash_ids) for r in requests[len(hits) - len(chunk.counts):len(hits)]]

    engine = LruStackEngine(block_tokens, chunk_accesses, sink=sink)
    for r in requests:
        engine.add(r.hash_ids, r.input_length)
    engine.finish()
    capacity_tokens = None if capacity_blocks is None else capacity_blocks * block_tokens
    sim = CacheSimulator(capacity_tokens, block_tokens, "lru")
    seen: set[int] = set()
    expected_hits, expected_distinct = [], []
    for r in requests:
        expected_hits.append(sim.add(r.hash_ids, r.input_length))
        seen.update(r.hash_ids)
        expected_distinct.append(len(seen))
    assert hits == expected_hits
    assert distinct_after == expected_distinct


def test_engine_buffer_is_bounded_by_the_chunk_not_the_trace() -> None:
    # requests without blocks still count toward a chunk: 1,000 of them never buffer more than 8 at once
    engine = LruStackEngine(4, chunk_accesses=8)
    for _ in range(1000):
        engine.add((), 0)
        assert len(engine._counts) < 8
    assert engine.finish().requests == 1000


@pytest.mark.parametrize("capacity_tokens", [4, 12, 40, None])
def test_compare_trace_mix_equals_direct_replay(tmp_path: Path, capacity_tokens) -> None:
    # `compare --trace` reads each request's reuse off the engine; the direct replay gives the same slices
    from kvcalc.trace.cost import input_class, trace_mixes

    lines = []
    for i in range(150):
        family, depth = i % 7, 1 + (i * 5) % 6
        ids = [1000 * family + k for k in range(depth)] + [100_000 + i % 11]
        lines.append(json.dumps({"timestamp": i, "input_length": 4 * len(ids) - i % 3, "output_length": 1 + i % 5,
                                 "hash_ids": ids}))
    path = write(tmp_path / "nested.jsonl", lines)
    m = trace_mixes(path, capacity_tokens, block_tokens=4)
    sim = CacheSimulator(capacity_tokens, 4, "lru")
    expected: dict = {}
    for r in read_trace(path, block_tokens=4):
        reused = min(sim.add(r.hash_ids, r.input_length) * 4, r.input_length)
        key = (input_class(r.input_length), r.input_length, reused, r.output_length)
        expected[key] = expected.get(key, 0) + 1
    got = {(s.label, s.context_tokens, s.cached_tokens, s.output_tokens): s.count for s in m.prefix_tree.slices}
    assert got == expected
    assert (m.reused_tokens, m.peak_cached_blocks) == (sim.reused_tokens, sim.peak_cached_blocks)


# ---------------------------------------------------------------- the reader's pieces


def test_pieces_keep_line_numbers_and_one_object_per_line(tmp_path: Path, monkeypatch) -> None:
    # read 64 bytes at a time: lines span reads, one line (300 ids) is longer than several reads
    import kvcalc.trace.reader as reader

    monkeypatch.setattr(reader, "READ_BYTES", 64)
    long_ids = list(range(300))
    lines = [GOOD, "", "  ", json.dumps({"timestamp": 1, "input_length": 1200, "output_length": 1,
                                         "hash_ids": long_ids}), GOOD, GOOD + " " + GOOD, GOOD]
    path = write(tmp_path / "p.jsonl", lines)
    got = list(read_trace(path, block_tokens=4, skip_bad=True))
    assert [r.line_number for r in got] == [1, 4, 5, 7]  # blank lines 2-3 ignored; line 6 has two objects
    assert got[1].hash_ids == tuple(long_ids)
    with pytest.raises(InputError, match=r"p\.jsonl:6: malformed JSON"):
        list(read_trace(path, block_tokens=4))
    # the same file without a final newline, read in one piece
    monkeypatch.setattr(reader, "READ_BYTES", 1 << 16)
    Path(path).write_text("\n".join(lines[:5]))
    assert [r.line_number for r in read_trace(path, block_tokens=4)] == [1, 4, 5]


def test_depth_chunks_stream_per_request_hits(tmp_path: Path, monkeypatch) -> None:
    # the generator a tiered replay can build on: every request once, in order, hits as the direct replay's
    import kvcalc.trace.reader as reader
    from kvcalc.trace.lru_curve import depth_chunks

    monkeypatch.setattr(reader, "READ_BYTES", 256)  # several pieces, so several chunks of >= 7 accesses

    lines = [json.dumps({"timestamp": i, "input_length": 4 * (1 + i % 4), "output_length": i,
                         "hash_ids": [i % 5 + k for k in range(1 + i % 4)]}) for i in range(60)]
    path = write(tmp_path / "d.jsonl", lines)
    chunks = list(depth_chunks(path, block_tokens=4, chunk_accesses=7))
    assert len(chunks) > 1
    for capacity_blocks in (1, 3, None):
        sim = CacheSimulator(None if capacity_blocks is None else 4 * capacity_blocks, 4, "lru")
        expected = [sim.add(r.hash_ids, r.input_length) for r in read_trace(path, block_tokens=4)]
        assert [h for c in chunks for h in c.hit_blocks(capacity_blocks).tolist()] == expected
    assert [o for c in chunks for o in c.outputs] == list(range(60))
