"""The lean replay (issue 14): one LRU capacity, the infinite cache and FIFO replayed directly without numpy must
equal the stack-depth engine and the direct OrderedDict replay exactly, whatever the ids (dense, huge, negative,
sparse enough to leave the byte table), across batches; percentiles equal numpy's bit for bit; the CLI's
single-capacity path imports neither numpy nor pydantic."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import REAL_TRACES
from test_trace import simulate
from test_trace_input import GOOD, HOSTILE

import kvcalc.trace.lean as lean
import kvcalc.trace.reader as reader
from kvcalc.out.errors import InputError
from kvcalc.trace.analysis import analyze_trace
from kvcalc.trace.lean import SeenBlocks, answers_lean, lean_analysis
from kvcalc.trace.reader import TraceRequest, read_trace
from kvcalc.trace.stats import length_stats, percentiles

INT64_MAX = 2**63 - 1
ID_KINDS = {
    "dense": lambda k: k,  # Mooncake-like: 0, 1, 2, ...
    "huge": lambda k: INT64_MAX - k,  # beyond any byte table: a dict from the first id
    "negative": lambda k: -1 - k,  # a bytearray would read -1 from its end: a dict
    "sparse": lambda k: k * 1_000,  # 1,000 B per block: beyond the table's allowance (patched small below)
    "mixed": lambda k: (k, -k, k * 1_000, INT64_MAX - k)[k % 4],
}


@st.composite
def id_traces(draw):
    """(block_tokens, requests as JSON lines, in-memory requests): few distinct ids, many repeats, one kind."""
    block_tokens = draw(st.integers(1, 4))
    kind = ID_KINDS[draw(st.sampled_from(sorted(ID_KINDS)))]
    alphabet = draw(st.integers(0, 9))
    lines, requests = [], []
    for i in range(draw(st.integers(1, 12))):
        n_blocks = draw(st.integers(0, 7))
        shortfall = draw(st.integers(0, block_tokens - 1)) if n_blocks else 0
        ids = [kind(k) for k in draw(st.lists(st.integers(0, alphabet), min_size=n_blocks, max_size=n_blocks))]
        length = n_blocks * block_tokens - shortfall
        timestamp = draw(st.sampled_from([float(i), -float(i)]))  # a '-' in the text without a negative id
        lines.append(json.dumps({"timestamp": timestamp, "input_length": length, "output_length": i % 3,
                                 "hash_ids": ids}))
        requests.append(TraceRequest(timestamp, length, i % 3, tuple(ids), i + 1))
    return block_tokens, lines, requests


def _engine(path: str, capacities: list, block_tokens: int):
    """The stack-depth engine's answer (keep_profile forces it even for one capacity)."""
    return analyze_trace(path, capacities, block_tokens, keep_profile=True)


@settings(max_examples=300, deadline=None)
@given(id_traces(), st.integers(1, 300), st.integers(0, 64), st.integers(1, 40))
def test_lean_equals_engine_and_direct_replay(case, read_bytes, min_table, per_block) -> None:
    block_tokens, lines, requests = case
    distinct = len({h for r in requests for h in r.hash_ids})
    with tempfile.TemporaryDirectory() as tmp, patch.object(reader, "READ_BYTES", read_bytes), \
            patch.object(lean, "WIDE_TABLE_BYTES", min_table), patch.object(lean, "TABLE_BYTES_PER_BLOCK", per_block):
        path = str(Path(tmp) / "t.jsonl")
        Path(path).write_text("".join(line + "\n" for line in lines))
        engine = _engine(path, [None], block_tokens)
        for capacity in [*range(0, (distinct + 2) * block_tokens + 1, max(1, block_tokens // 2)), None]:
            caps = [capacity, None, capacity]
            lru = lean_analysis(path, caps, block_tokens, "lru")
            assert lru.stats == engine.stats
            assert lru.results == _engine(path, caps, block_tokens).results
            assert lru.results[0] == simulate(requests, capacity, block_tokens)
        fifo_caps = [None, *range(0, (distinct + 2) * block_tokens + 1, block_tokens)]
        fifo = lean_analysis(path, fifo_caps, block_tokens, "fifo")
        assert fifo.stats == engine.stats
        assert fifo.results == tuple(simulate(requests, c, block_tokens, "fifo") for c in fifo_caps)


def test_seen_table_bytes_then_bits_then_dict() -> None:
    # ids below 2^20 get a byte each; beyond, a bit each while the table stays within max(1 MiB, 4 B per distinct
    # block) (so ids below 8 x 2^20 with few blocks); further ids, or a negative one, turn it into a dict
    def records(ids):
        return [TraceRequest(0.0, len(ids), 0, tuple(ids), 1)]

    def seen_after(*batches):
        seen = SeenBlocks()
        for ids in batches:
            seen.check_signs(records(ids))
            lean._replay(records(ids), None, 0, seen, 1)
        return seen

    wide = lean.WIDE_TABLE_BYTES
    dense = seen_after(range(1000))
    assert type(dense.table) is bytearray and dense.wide and dense.count() == 1000 and len(dense.table) <= wide
    bits = seen_after([1, 2, 7], [wide + 5, 3])
    assert type(bits.table) is bytearray and not bits.wide and bits.count() == 5
    assert bits._ids() == [1, 2, 3, 7, wide + 5] and len(bits.table) <= wide  # 1 MiB of bits: ids below 8 MiB
    assert seen_after([1, 2], [8 * wide + 1]).table == {1: 1, 2: 1, 8 * wide + 1: 1}  # 3 blocks: beyond 8 MiB
    negative = seen_after([5, 7], [-3])
    assert dict(negative.table) == {5: 1, 7: 1, -3: 1} and negative.count() == 3
    assert dict(seen_after([1, wide + 1], [-2]).table) == {1: 1, wide + 1: 1, -2: 1}  # bits to a dict


def test_seen_table_stays_bytes_while_ids_are_within_4_bytes_per_block() -> None:
    # a byte per id also beyond WIDE_TABLE_BYTES while the table stays within TABLE_BYTES_PER_BLOCK (4) bytes per
    # distinct block (Mooncake's dense ids, 2.6M of them in the 60-copy bench trace, keep the C-level byte form):
    # with a 16-byte minimum, 100 distinct ids allow 4 x (100 + 1) = 404 bytes: id 403 is a byte, id 404 is not
    def seen_after(*batches):
        seen = SeenBlocks()
        for ids in batches:
            lean._replay([TraceRequest(0.0, len(ids), 0, tuple(ids), 1)], None, 0, seen, 1)
        return seen

    with patch.object(lean, "WIDE_TABLE_BYTES", 16), patch.object(lean, "TABLE_BYTES_PER_BLOCK", 4):
        byte = seen_after(range(100), [403])
        assert type(byte.table) is bytearray and byte.wide and byte.count() == 101 and len(byte.table) <= 404
        bits = seen_after(range(100), [404])
        assert type(bits.table) is bytearray and not bits.wide and bits._ids() == [*range(100), 404]


def test_bits_of() -> None:
    # bytes 0/1 per id -> bit h & 7 of byte h >> 3: ids 0, 3, 8, 9 -> bytes 0b00001001, 0b00000011
    assert lean._bits_of(bytearray([1, 0, 0, 1, 0, 0, 0, 0, 1, 1])) == bytearray([0b1001, 0b11])
    wide = bytearray((i * 7919) % 3 == 0 for i in range(1001))  # pieces of 16 bytes: the same bits
    expected = bytearray(sum(wide[8 * j + k] << k for k in range(8) if 8 * j + k < 1001) for j in range(126))
    assert lean._bits_of(wide, 16) == lean._bits_of(wide) == expected


def test_dispatch() -> None:
    assert answers_lean([], "lru") and answers_lean([None], "lru") and answers_lean([3_000_000, None], "lru")
    assert answers_lean([5, 5], "lru")  # one capacity asked twice is still one cache
    assert not answers_lean([3_000_000, 10_000_000], "lru")  # several: the stack engine, one pass
    assert answers_lean([3_000_000, 10_000_000, None], "fifo")


def test_lean_refuses_several_lru_capacities(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(GOOD + "\n")
    with pytest.raises(InputError, match="one LRU capacity at most"):
        lean_analysis(path, [4, 8], 4)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_lines_same_errors_as_the_engine(tmp_path: Path, case: str) -> None:
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(line + "\n" for line in [GOOD, HOSTILE[case][0], GOOD]))
    messages = []
    for run in (lambda **kw: lean_analysis(path, [4], 4, **kw), lambda **kw: _engine(path, [4], 4, **kw)):
        with pytest.raises(InputError) as err:
            run()
        messages.append(str(err.value))
    assert messages[0] == messages[1] and messages[0].startswith(f"{path}:2: ")
    lean_skip = lean_analysis(path, [4], 4, skip_bad=True)
    engine_skip = analyze_trace(path, [4], 4, skip_bad=True, keep_profile=True)
    assert (lean_skip.stats, lean_skip.results, lean_skip.first_problem) == (
        engine_skip.stats, engine_skip.results, engine_skip.first_problem)
    assert lean_skip.stats.skipped_lines == 1


def test_string_ids_are_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(GOOD + "\n" + '{"timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": ["a"]}\n')
    with pytest.raises(InputError, match=r"s\.jsonl:2: hash_ids must be integers, found 'a' \(str\)"):
        lean_analysis(path, [4], 4)


@pytest.mark.parametrize("path", REAL_TRACES)
def test_mooncake_lean_equals_engine(path) -> None:
    # The whole trace: 3m -> 31.5%, infinite -> 65.1% (test_trace pins them); here every field agrees
    for caps in ([3_000_000], [None], [3_000_000, None], [10_000_000], [1_000_000], []):
        lean_result = lean_analysis(path, caps)
        engine = _engine(str(path), caps, 512)
        assert (lean_result.stats, lean_result.results) == (engine.stats, engine.results)
    requests = list(read_trace(path))
    assert lean_analysis(path, [3_000_000], policy="fifo").results == (
        simulate(requests, 3_000_000, 512, "fifo"),)


# ---------------------------------------------------------------- percentiles without numpy


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 50), st.integers(0, INT64_MAX), st.just(INT64_MAX)), min_size=1,
                max_size=60),
       st.lists(st.floats(0, 100), min_size=1, max_size=4))
def test_percentiles_equal_numpy_bit_for_bit(values, percents) -> None:
    expected = np.percentile(np.array(values, np.int64), [*percents, 50, 90, 99]).tolist()
    assert percentiles(Counter(values), [*percents, 50, 90, 99]) == expected


def test_length_stats_by_hand() -> None:
    # lengths 8, 10, 9 (test_trace's SMALL): sorted [8, 9, 10]; p90 at rank 0.9 x 2 = 1.8 -> 9 + 0.8 x 1 = 9.8
    s = length_stats(Counter([8, 10, 9]))
    assert (s.total_tokens, s.mean_tokens, s.max_tokens) == (27, 9.0, 10)
    assert (s.p50_tokens, s.p90_tokens, s.p99_tokens) == (9.0, 9.8, 9.98)
    empty = length_stats(Counter())
    assert (empty.total_tokens, empty.mean_tokens, empty.p50_tokens, empty.max_tokens) == (0, 0.0, 0.0, 0)


# ---------------------------------------------------------------- no numpy, no pydantic on the lean path

PROBE = """\
import sys
from kvcalc.cli.app import main
try:
    main(sys.argv[2:])
except SystemExit:
    pass
sys.stderr.write("LOADED " + " ".join(m for m in sys.argv[1].split(",") if m in sys.modules) + "\\n")
"""


def loaded_modules(modules: str, *args: str, env=None) -> tuple[str, set[str]]:
    """(stdout, which of ``modules`` (comma-separated) were imported) of ``kvcalc ARGS`` in a fresh interpreter."""
    p = subprocess.run([sys.executable, "-c", PROBE, modules, *args], capture_output=True, text=True, check=True,
                       env=env)
    return p.stdout, set(p.stderr.rsplit("LOADED", 1)[1].split())


def _loaded(*args: str) -> tuple[str, set[str]]:
    return loaded_modules("numpy,pydantic", *args)


@pytest.mark.parametrize("args", [("--capacity", "3m"), ("--capacity", "inf"), ("--capacity", "3m,inf"),
                                  ("--policy", "fifo", "--capacity", "3m,10m,inf")])
def test_lean_path_imports_no_numpy_nor_pydantic(tmp_path: Path, args) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": i, "input_length": 1024, "output_length": 1,
                                        "hash_ids": [0, i]}) + "\n" for i in range(1, 50)))
    for fmt in ("json", "table"):
        out, loaded = _loaded("trace", str(path), *args, "--format", fmt)
        assert loaded == set(), (args, fmt, loaded)
        assert "49" in out  # 49 requests: the command ran
    # the probe can fail: several LRU capacities take the numpy engine
    assert "numpy" in _loaded("trace", str(path), "--capacity", "3m,10m", "--format", "json")[1]
