"""The compiled (numba) one-capacity LRU engine (issue 22): every figure equals the lean replay's (the infinite
cache's estimate included, whatever the ids: dense, huge, negative, random 64-bit, sparse enough to leave the
bit table), engine to engine and file to file (float timestamps, spaces, blank and bad lines, skip-bad), on the
real fixtures, and in the CLI's JSON byte for byte; the strict reader refuses what it does not know (the normal
reader then reads it: same values, same errors); the dispatch rule; numba never loaded at start-up or on the
lean path. Skipped where numba is not installed (``pip install '.[fast]'``)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from unittest.mock import patch

import pytest

pytest.importorskip("numba")

import numpy as np  # noqa: E402
from conftest import REAL_TRACES, run_cli  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_trace import simulate  # noqa: E402
from test_trace_input import GOOD, HOSTILE  # noqa: E402
from test_trace_lru_one import ID_KINDS, traces  # noqa: E402

import kvcalc.trace.analysis as analysis  # noqa: E402
import kvcalc.trace.lean as lean  # noqa: E402
import kvcalc.trace.seen_sample as seen_sample  # noqa: E402
from kvcalc.out.errors import InputError  # noqa: E402
from kvcalc.trace import jit_kernels, jit_reader, reader  # noqa: E402
from kvcalc.trace.analysis import analyze_trace, one_lru_in_numba  # noqa: E402
from kvcalc.trace.formats import open_replay_trace  # noqa: E402
from kvcalc.trace.jit_lru import JitLruEngine  # noqa: E402
from kvcalc.trace.lean import LeanEngine  # noqa: E402
from kvcalc.trace.reader import TraceRequest  # noqa: E402

INF = float("inf")


def _answers(engine, batches):
    for batch in batches:
        engine.add_records(batch)
    return engine.finish()


@settings(max_examples=300, deadline=None)
@given(traces(), st.sampled_from([0, 1, 2, 3, 5, 8, 13, 40, 10**12]), st.booleans(), st.sampled_from([2, 4, 8192]),
       st.sampled_from([1 << 20, 0, 8]))
def test_engine_equals_lean_and_the_direct_replay(case, capacity_blocks, exact_stats, max_sampled, table) -> None:
    block_tokens, batches = case
    capacity = capacity_blocks * block_tokens
    with patch.object(seen_sample, "MAX_SAMPLED_IDS", max_sampled), \
            patch.object(lean, "WIDE_TABLE_BYTES", table), patch.object(lean, "TABLE_BYTES_PER_BLOCK", 1):
        expected = _answers(LeanEngine([capacity], block_tokens, "lru", exact_stats), batches)
        got = _answers(JitLruEngine([capacity, None], block_tokens, exact_stats), batches)
    assert got.at(capacity) == expected.at(capacity)
    assert got.at(None) == expected.at(None)
    assert got.estimate == expected.estimate
    requests = [TraceRequest(0.0, r.input_length, 1, tuple(r.hash_ids), 0) for b in batches for r in b]
    assert got.at(capacity) == simulate(requests, capacity, block_tokens)


def test_a_trace_by_hand() -> None:
    # 2 blocks of 1 token; requests [1, 2], [3], [1, 2]: r1 misses both (cache [1, 2]); r2 misses, evicts 1
    # ([2, 3]); r3: 1 was evicted, so its hit run is 0 (2 is cached but follows a miss): hits 0 of 5 blocks.
    # Infinite cache: r3's [1, 2] were both seen, 2 hits; 3 distinct blocks. Capacity 3 blocks: r3 hits both.
    from test_trace_lru_one import Record

    records = [Record(0.0, 2, 1, [1, 2]), Record(0.0, 1, 1, [3]), Record(0.0, 2, 1, [1, 2])]
    two = _answers(JitLruEngine([2], 1), [records])
    assert (two.at(2).hit_blocks, two.at(2).reused_tokens, two.at(2).peak_cached_blocks) == (0, 0, 2)
    assert (two.at(None).hit_blocks, two.at(None).peak_cached_blocks) == (2, 3)
    assert _answers(JitLruEngine([3], 1), [records]).at(3).hit_blocks == 2


def test_lru_many_evictions_equal_the_direct_replay() -> None:
    # a long random trace through a small cache: the ring of uses is compacted and the table deletes by
    # backward shift many times over (a 40-block cache, 200 ids, 60,000 accesses)
    from test_trace_lru_one import Record

    rng = random.Random(7)
    records = [Record(0.0, 8, 1, [rng.randrange(200) for _ in range(8)]) for _ in range(7500)]
    got = _answers(JitLruEngine([40], 1), [records[:3000], records[3000:]])
    requests = [TraceRequest(0.0, r.input_length, 1, tuple(r.hash_ids), 0) for r in records]
    assert got.at(40) == simulate(requests, 40, 1)


def _equal_tags() -> tuple[int, int]:
    """Two ids whose 32-bit table tags (the high half of splitmix64's mix) are equal: a birthday search over
    2^18 ids (about 8 pairs expected: 2^36 / 2^33)."""
    x = np.arange(1, 1 << 18, dtype=np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    tags = (x ^ (x >> np.uint64(31))) >> np.uint64(32)
    order = np.argsort(tags, kind="stable")
    same = np.flatnonzero(tags[order][1:] == tags[order][:-1])
    return int(order[same[0]]) + 1, int(order[same[0] + 1]) + 1


def test_evicting_an_id_of_the_same_tag() -> None:
    # a 1-block cache: b evicts a, whose entry would look like b's (same tag, same node): the delete-first path
    from test_trace_lru_one import Record

    a, b = _equal_tags()
    records = [Record(0.0, 1, 1, [h]) for h in (a, b, b, a, a, b, 7, b)]
    got = _answers(JitLruEngine([1], 1), [records])
    requests = [TraceRequest(0.0, 1, 1, (h,), 0) for h in (a, b, b, a, a, b, 7, b)]
    assert got.at(1) == simulate(requests, 1, 1)
    assert got.at(1).hit_blocks == 2  # the second b and the second a


def test_refuses_anything_but_one_finite_capacity() -> None:
    for capacities in ([], [None], [4, 8]):
        with pytest.raises(ValueError, match="exactly one finite capacity"):
            JitLruEngine(capacities, 4)


def test_constants_match_the_python_side() -> None:
    assert jit_kernels.KEY_PRIME == seen_sample.KEY_PRIME
    assert jit_reader.MAX_IDS == reader.MAX_IDS_PER_LINE


# ---------------------------------------------------------------- the strict reader

def _parse(text: bytes, rule: int = 0, block_tokens: int = 4):
    n = text.count(b"\n") + 1
    out = [np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64),
           np.empty(len(text), np.int64)]
    status, nreq, nids, rule, hi, lo = jit_reader.parse_piece(np.frombuffer(text + b"\0", np.uint8), rule,
                                                              block_tokens, *out)
    return status, (out[0][:nreq].tolist(), out[1][:nreq].tolist(), out[2][:nreq].tolist(),
                    out[3][:nreq].tolist(), out[4][:nids].tolist()), rule


def test_reader_accepts_mooncake_lines() -> None:
    text = (b'{"timestamp": 12.5, "input_length": 5, "output_length": 1, "hash_ids": [7, -9223372036854775808]}\n'
            b'{"hash_ids":[9223372036854775807],"output_length":0,"input_length":4,"timestamp":-3}\n'
            b' {"timestamp": 0, "input_length": 0, "output_length": 2, "hash_ids": [ ]} ')
    status, (ts, inputs, outputs, counts, ids), rule = _parse(text, -1)
    assert status == 0 and rule == 0  # the first partial block (5 tokens, 2 ids of 4) decides: ceil
    assert ts == [12.5, -3.0, 0.0] and inputs == [5, 4, 0] and outputs == [1, 0, 2] and counts == [2, 1, 0]
    assert ids == [7, -2**63, 2**63 - 1]


@pytest.mark.parametrize("line", [
    '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1], "x": 1}',  # another field
    '{"timestamp": 0, "timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}',  # twice
    '{"timestamp": 0, "input_length": 4, "output_length": 1}',  # missing
    '{"timestamp": 1e3, "input_length": 4, "output_length": 1, "hash_ids": [1]}',  # exponent
    '{"timestamp": -0, "input_length": 4, "output_length": 1, "hash_ids": [1]}',  # -0
    '{"timestamp": 1234567890123456, "input_length": 4, "output_length": 1, "hash_ids": [1]}',  # 16 digits
    '{"timestamp": 0, "input_length": 04, "output_length": 1, "hash_ids": [1]}',  # a leading zero
    '{"timestamp": 0, "input_length": -4, "output_length": 1, "hash_ids": [1]}',  # a sign
    '{"timestamp": 0, "input_length": 4.0, "output_length": 1, "hash_ids": [1]}',  # a fraction
    '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [9223372036854775808]}',  # > int64
    '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [-0]}',
    '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1,]}',
    '{"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [1]}',  # 1 id for 2 blocks
    '{"timestamp":\t0, "input_length": 4, "output_length": 1, "hash_ids": [1]}',  # a tab
    '{"timest\\u0061mp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}',  # an escape
    '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]} {}',  # two objects
    '{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}\r',
    '',  # blank
])
def test_reader_refuses_the_unusual(line: str) -> None:
    assert _parse(line.encode())[0] == 1
    assert _parse((GOOD + "\n" + line).encode())[0] == 1


def test_reader_rules() -> None:
    floor = b'{"timestamp": 0, "input_length": 6, "output_length": 1, "hash_ids": [1]}'  # floor(6 / 4) = 1
    assert _parse(floor, -1)[0::2] == (0, 1) and _parse(floor, 1)[0] == 0 and _parse(floor, 0)[0] == 1


# ---------------------------------------------------------------- whole files, as dispatched

def _force(monkeypatch, numba: bool) -> None:
    monkeypatch.setattr(analysis, "NUMPY_ONE_LRU_BYTES", INF)
    monkeypatch.setattr(analysis, "NUMBA_ONE_LRU_BYTES", 0 if numba else INF)
    monkeypatch.setattr(analysis, "MIN_NUMBA_CAPACITY_BLOCKS", 0)


def _outcome(path, capacities, block_tokens, skip_bad, exact):
    try:
        got = analyze_trace(path, capacities, block_tokens, skip_bad=skip_bad, exact_stats=exact)
    except InputError as exc:
        return str(exc)
    return got.stats, got.results, got.first_problem, got.trace_format


@st.composite
def trace_files(draw):
    """(block size, the text of a JSONL trace): the records of :func:`traces` as lines of several styles
    (integer or decimal timestamps, spaces or none, field order), with blank and bad lines now and then."""
    block_tokens, batches = draw(traces())
    lines = []
    for r in (r for b in batches for r in b):
        stamp = draw(st.sampled_from(["0", "17", "-3", "2.5", "0.0", "1700000000.125"]))
        fields = [f'"timestamp": {stamp}', f'"input_length": {r.input_length}', '"output_length": 1',
                  f'"hash_ids": [{", ".join(map(str, r.hash_ids))}]']
        if draw(st.booleans()):
            fields.reverse()
        sep = draw(st.sampled_from([", ", ","]))
        lines.append("{" + sep.join(fields) + "}")
        extra = draw(st.sampled_from(["", "", "", "", "blank", "bad"]))
        if extra == "blank":
            lines.append("")
        elif extra == "bad":
            lines.append('{"timestamp": 0, "input_length": 1, "hash_ids": [1]}')
    return block_tokens, "\n".join(lines) + "\n"


@settings(max_examples=150, deadline=None)
@given(trace_files(), st.sampled_from([0, 1, 3, 40, 10**12]), st.booleans(), st.booleans(), st.data())
def test_files_equal_lean(tmp_path_factory, case, capacity_blocks, skip_bad, exact, data) -> None:
    block_tokens, text = case
    path = tmp_path_factory.mktemp("jit") / "t.jsonl"
    path.write_text(text)
    capacities = data.draw(st.sampled_from([[capacity_blocks * block_tokens],
                                            [capacity_blocks * block_tokens, None]]))
    with pytest.MonkeyPatch.context() as mp:
        _force(mp, False)
        expected = _outcome(path, capacities, block_tokens, skip_bad, exact)
        _force(mp, True)
        assert analysis.one_lru_in_numba(path, capacities, "lru", block_tokens,
                                         open_replay_trace(path, block_tokens))
        got = _outcome(path, capacities, block_tokens, skip_bad, exact)
    assert got == expected


def test_pieces_of_64_kib_equal_lean(tmp_path: Path, monkeypatch) -> None:
    # 20,000 lines of random 64-bit ids over several 64 KiB pieces, one of them bad (skipped): its piece goes
    # through msgspec line by line, the others through the compiled reader; the sample switch after piece 1
    rng = random.Random(3)
    prefixes = [[rng.getrandbits(64) - 2**63 for _ in range(6)] for _ in range(50)]
    lines = []
    for i in range(20_000):
        ids = rng.choice(prefixes)[:rng.randrange(1, 7)] + [rng.getrandbits(64) - 2**63]
        lines.append(json.dumps({"timestamp": i * 0.5, "input_length": 4 * len(ids) - 1, "output_length": 3,
                                 "hash_ids": ids}))
    lines[12_345] = '{"timestamp": 0}'
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    for exact in (False, True):
        _force(monkeypatch, False)
        expected = _outcome(path, [40 * 4], 4, True, exact)
        _force(monkeypatch, True)
        assert _outcome(path, [40 * 4], 4, True, exact) == expected
        # exact_stats off: the sample (8,192 ids of ~20,000) estimated the infinite cache; on: every id kept
        assert (expected[0].estimate is None) == exact and expected[1][0].skipped_lines == 1


@pytest.mark.parametrize("path", REAL_TRACES)
def test_mooncake_equals_lean(path, monkeypatch) -> None:
    runs = {}
    for numba in (False, True):
        _force(monkeypatch, numba)
        runs[numba] = [_outcome(path, c, 512, False, e) for c in ([3_000_000], [3_000_000, None], [512], [0])
                       for e in (False, True)]
    assert runs[True] == runs[False]


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_compressed_equals_lean(tmp_path: Path, kind: str, monkeypatch) -> None:
    # the compressed fixtures' path: the same pieces, decompressed by the reader's stream, then parsed
    fixtures = Path(__file__).parent / "fixtures" / "traces"
    if kind == "zst":
        pytest.importorskip("zstandard")
        path = fixtures / "mooncake_synthetic_head400.jsonl.zst"
    else:
        import gzip

        path = tmp_path / "head400.jsonl.gz"
        path.write_bytes(gzip.compress((fixtures / "mooncake_synthetic_head400.jsonl").read_bytes()))
    runs = {}
    for numba in (False, True):
        _force(monkeypatch, numba)
        runs[numba] = [_outcome(path, c, 512, False, False) for c in ([3_000_000], [512, None])]
    assert runs[True] == runs[False]


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_lines_same_errors_as_lean(tmp_path: Path, case: str, monkeypatch) -> None:
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(line + "\n" for line in [GOOD, HOSTILE[case][0], GOOD]))
    outcomes = []
    for numba in (False, True):
        _force(monkeypatch, numba)
        outcomes.append([_outcome(path, [4], 4, skip, False) for skip in (False, True)])
    assert outcomes[0] == outcomes[1]


def test_cli_json_identical_on_both_paths(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t.jsonl"
    rng = random.Random(22)
    path.write_text("".join(json.dumps({"timestamp": i * 1.5, "input_length": 3 * 512 - i % 7, "output_length": 2,
                                        "hash_ids": [rng.randrange(4), rng.getrandbits(64) - 2**63,
                                                     rng.randrange(30)]}) + "\n" for i in range(3000)))
    for capacity in ("8k", "8k,inf", "1"):  # 1 token: a cache of 0 blocks
        args = ("trace", str(path), "--capacity", capacity, "--format", "json")
        _force(monkeypatch, False)
        lean_run = run_cli(*args)
        _force(monkeypatch, True)
        numba_run = run_cli(*args)
        assert lean_run.code == numba_run.code == 0
        assert numba_run.out == lean_run.out


# ---------------------------------------------------------------- dispatch

def test_dispatch_rule(tmp_path: Path, monkeypatch) -> None:
    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    small.write_text(GOOD + "\n")
    big.write_text(GOOD + "\n" + GOOD + "\n")
    monkeypatch.setattr(analysis, "NUMBA_ONE_LRU_BYTES", big.stat().st_size)
    monkeypatch.setattr(analysis, "MIN_NUMBA_CAPACITY_BLOCKS", 3)

    def rule(path, capacities, policy="lru", block_tokens=4, fmt="mooncake"):
        return one_lru_in_numba(path, capacities, policy, block_tokens, open_replay_trace(path, block_tokens,
                                                                                          trace_format=fmt))

    assert rule(big, [12, None]) and rule(big, [12, 12]) and rule(big, [12], fmt="auto")
    assert not rule(big, [11])  # 2 blocks of 4 tokens: below the 3 blocks
    assert not rule(small, [12])  # below the size
    assert not rule(big, [None]) and not rule(big, [12, 16]) and not rule(big, [12], "fifo")
    monkeypatch.setenv("NUMBA_DISABLE_JIT", "1")
    assert not rule(big, [12])
    monkeypatch.delenv("NUMBA_DISABLE_JIT")
    with patch("importlib.util.find_spec", return_value=None):  # numba not installed
        assert not rule(big, [12])
    kct = tmp_path / "kct.json"
    kct.write_text(json.dumps({"id": 1, "block_size": 4, "requests": [{"t": 0, "in": 4, "out": 1,
                                                                      "hash_ids": [1]}] * 40}))
    assert not rule(kct, [12], block_tokens=4, fmt="auto")  # another reader: today's engines
    # the shipped rule: 64 MiB and 250,000 blocks (128m tokens at 512-token blocks), blocks up to 2^24 tokens
    monkeypatch.undo()
    assert (analysis.NUMBA_ONE_LRU_BYTES, analysis.MIN_NUMBA_CAPACITY_BLOCKS) == (64 << 20, 250_000)
    assert analysis.MAX_NUMBA_BLOCK_TOKENS == 1 << 24


def test_unusable_numba_falls_back(tmp_path: Path, monkeypatch) -> None:
    # numba found but its engine cannot be imported (a broken install, or no directory to cache kernels in):
    # today's engines answer, the same figures
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": i, "input_length": 1024, "output_length": 1,
                                        "hash_ids": [0, i]}) + "\n" for i in range(1, 50)))
    _force(monkeypatch, False)
    expected = _outcome(path, [2048], 512, False, False)
    _force(monkeypatch, True)
    monkeypatch.setitem(sys.modules, "kvcalc.trace.jit_lru", None)  # its import now raises ImportError
    assert _outcome(path, [2048], 512, False, False) == expected


def _loaded(*args: str, env=None) -> set[str]:
    from test_trace_lean import loaded_modules

    return loaded_modules("numba,llvmlite", *args, env=env)[1]


def test_numba_only_when_dispatched(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": i, "input_length": 1024, "output_length": 1,
                                        "hash_ids": [0, i]}) + "\n" for i in range(1, 50)))
    assert _loaded("--help") == set()
    assert _loaded("trace", str(path), "--capacity", "128m", "--format", "json") == set()  # small: lean
    assert _loaded("trace", str(path), "--capacity", "3m", "--format", "json") == set()
