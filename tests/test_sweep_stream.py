"""Issue 21 item 2: sweeps written chunk by chunk (JSON, CSV, Markdown), the same bytes as the whole grid held.

render.write_chunks writes a result whose rows come in chunks; serve.sweep.sweep_stream computes them a chunk at
a time (kv/capacity: numpy chunks of grid points; cost/compare: a few points at a time). Each test compares the
streamed text with render.write of the held result (sweep_result), byte for byte, over several grids and chunk
sizes, --check outcomes included; and shows that a streamed sweep's memory does not grow with its grid."""

from __future__ import annotations

import io
import tracemalloc

import pytest
from conftest import assert_bad_input, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.out import checks as chk
from kvcalc.out import render
from kvcalc.out.results import Column, Result, Table
from kvcalc.serve import sweep as sw

GRIDS = {  # target, --vary specs, fixed (--set) texts, checks
    "kv one axis": ("kv", ["context=1..300:step1"], [], ["kv_bytes_per_token < 20000"]),
    "kv models x contexts": ("kv", ["model=llama-3-70b,deepseek-v4-flash,qwen3-next-80b-a3b", "context=1k..1m:log9"],
                             [], []),
    "kv layouts": ("kv", ["kv-dtype=bf16,fp8", "context=4k,8k,16k", "model=deepseek-v3,llama-3-8b"], [], []),
    "capacity vector x looped": ("capacity", ["gpus=1..8", "hardware=h100-sxm,h200-sxm", "context=4k..64k:lin5"],
                                 ["model=llama-3-70b"], ["max_requests >= 1"]),
    "cost": ("cost", ["gpus=4,8", "strategy=lru,prefix-tree", "mfu-prefill=0.3,0.5"], [], []),
    "compare scenario varied": ("compare", ["scenario=article,v4-flash-8xh100", "gpus=8,16"], [],
                                ["hit_rate >= 0.5"]),
    "compare inline": ("compare", ["shared-prefix=0..6k:step2k", "context=8k,16k"], ["requests=100"], []),
}


def _parts(target, vary, fixed):
    if target == "trace":
        import kvcalc.trace.sweep  # noqa: F401
    axes = sw.parse_axes(target, vary)
    return axes, sw.parse_fixed(target, fixed, axes)


def held_text(target, vary, fixed, fmt, checks=()) -> str:
    axes, settings_ = _parts(target, vary, fixed)
    res = sw.sweep_result(target, axes, settings_)
    out = io.StringIO()
    render.write(res, fmt, out, chk.evaluate([chk.parse_check(c) for c in checks], res.rows) if fmt == "json" else ())
    return out.getvalue()


def streamed_text(target, vary, fixed, fmt, checks=(), points=None) -> tuple[str, list]:
    axes, settings_ = _parts(target, vary, fixed)
    head, _, chunks = sw.sweep_stream(target, axes, settings_, points=points)
    assert head.main.rows == ()  # the rows are only in the chunks
    checker = chk.Checker([chk.parse_check(c) for c in checks])
    out = io.StringIO()
    render.write_chunks(head, chunks, fmt, out, checker)
    return out.getvalue(), checker.outcomes()


@pytest.mark.parametrize("name", GRIDS)
@pytest.mark.parametrize("fmt", render.STREAMED)
def test_streamed_equals_held_byte_for_byte(name, fmt):
    target, vary, fixed, checks = GRIDS[name]
    if not sw.streams(target, fmt):
        # cost/compare rows differ in keys by scenario (serving-model fields only where it runs), so CSV and
        # Markdown, whose header comes first, hold their rows; only their JSON streams
        assert target in sw.KEYED_ROWS_ONLY and fmt != "json"
        return
    held = held_text(target, vary, fixed, fmt, checks)
    for points in (1, 7, None):  # a point at a time, chunks that split the axes unevenly, the default chunk
        text, outcomes = streamed_text(target, vary, fixed, fmt, checks, points)
        assert text == held, (name, fmt, points)
    axes, settings_ = _parts(target, vary, fixed)
    rows = sw.sweep_result(target, axes, settings_).rows
    assert outcomes == chk.evaluate([chk.parse_check(c) for c in checks], rows)


def test_the_cli_streams_the_same_bytes(monkeypatch):
    """`kvcalc sweep ... --format csv|json` (streamed) against the same command with streaming switched off."""
    args = ["sweep", "capacity", "--vary", "context=1k..1m:log40", "--vary", "gpus=1,2,4,8", "--model", "llama-3-70b"]
    for fmt in render.STREAMED:
        streamed = run_cli(*args, "--format", fmt, "--check", "max_requests >= 0")
        monkeypatch.setattr(render, "STREAMED", ())
        held = run_cli(*args, "--format", fmt, "--check", "max_requests >= 0")
        monkeypatch.undo()
        assert streamed.code == held.code == 0, (streamed.err, held.err)
        assert streamed.out == held.out and streamed.out.count("\n") > 160


def test_check_failures_and_unknown_fields_when_streamed():
    base = ("sweep", "kv", "--model", "llama-3-70b", "--vary", "context=1k..64k:lin5", "--format", "csv")
    # 327,680 B a token (80 layers x 8 KV heads x 128 x 2 x 2 B): 1,024, 16,768, 32,512, 48,256 and 64,000 tokens
    # hold 0.34, 5.5, 10.7, 15.8 and 21.0 GB, so the last three fail < 1e10, listed after the five rows
    r = run_cli(*base, "--check", "kv_bytes_per_request < 1e10")
    assert r.code == 1 and r.err.count("check failed") == 3 and r.out.count("\n") == 6, (r.code, r.err)
    bad = run_cli(*base, "--check", "kv_bytes_per_requst < 1")
    assert_bad_input(bad, "--check", "kv_bytes_per_request")
    assert bad.out == ""  # refused before the header


def test_json_stays_one_valid_document():
    r = run_cli("sweep", "compare", "--vary", "gpus=1..600", "--requests", "10", "--context", "2k", "--format",
                "json", "--check", "ttft_mean_s > 0")
    assert r.code == 0, r.err
    doc = r.json()
    assert len(doc["results"]) == 1200 and len(doc["checks"]) == 1200  # two strategies a point
    assert doc["inputs"]["fixed"]["model"] == "deepseek-v4-flash-article"  # what the scenario chose, named first


# ---------------------------------------------------------------- write_chunks on arbitrary rows

CELL = st.one_of(st.integers(-2**60, 2**60), st.floats(allow_nan=False, allow_infinity=False), st.none(),
                 st.booleans(), st.text(max_size=6), st.sampled_from(["a|b", 'q"', "x\ny", ","]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(CELL, CELL, CELL), min_size=1, max_size=150), st.integers(1, 80), st.booleans())
def test_any_rows_in_any_chunks(cells, size, explain):
    """Columns whose cells keep their kind down the column (ints, floats, text... as in a sweep), any chunking."""
    kinds = [type(c) for c in cells[0]]
    rows = [{"a": i, "b": c[0] if type(c[0]) is kinds[0] else None, "c": str(c[1]), "d": c[2]}
            for i, c in enumerate(cells)]
    cols = (Column("a", "a", "int"), Column("c", "c", "text"))
    res = Result("t", {"axis": list(range(len(rows)))}, Table("main", "title", cols, tuple(rows)),
                 (Table("x", "x", (), ({"q": 1.5},)),), ("why",), ("a note",))
    checks = [chk.parse_check("a < 40")]
    for fmt in render.STREAMED:
        held = io.StringIO()
        render.write(res, fmt, held, chk.evaluate(checks, rows) if fmt == "json" else (), explain)
        streamed, checker = io.StringIO(), chk.Checker(checks)
        render.write_chunks(res, (rows[i:i + size] for i in range(0, len(rows), size)), fmt, streamed,
                            checker if fmt == "json" else None, explain)
        assert streamed.getvalue() == held.getvalue(), fmt


def test_a_nan_in_a_later_chunk_is_caught_with_its_row():
    from kvcalc.out.finite import NonFiniteOutput

    rows = [{"x": float(i)} for i in range(10)] + [{"x": float("nan")}]
    res = Result("t", {}, Table("main", "t", (Column("x", "x"),), ()))
    with pytest.raises(NonFiniteOutput, match="row 10: field 'x'"):
        render.write_chunks(res, [rows[:4], rows[4:8], rows[8:]], "csv", io.StringIO())
    with pytest.raises(NonFiniteOutput, match="row 0"):  # in the first chunk: nothing written
        out = io.StringIO()
        render.write_chunks(res, [rows[10:]], "json", out)
    assert out.getvalue() == ""


# ---------------------------------------------------------------- memory: a chunk, not the grid


def _peak(args) -> int:
    tracemalloc.start()
    try:
        r = run_cli(*args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.code == 0, r.err
    return peak


def test_streamed_memory_does_not_grow_with_the_grid(monkeypatch):
    """With chunks of 2,000 points, 6,000 and 30,000 points peak alike streamed (one chunk and the axis values);
    held (a table), five times the points hold about five times the rows."""
    monkeypatch.setattr(sw, "CHUNK_POINTS", 2_000)
    import kvcalc.serve.sweep_cost as cost

    monkeypatch.setattr(cost, "CHUNK_POINTS", 2_000)
    small, large = ("sweep", "kv", "--vary", "context=1..6000"), ("sweep", "kv", "--vary", "context=1..30000")
    s_small, s_large = _peak([*small, "--format", "csv"]), _peak([*large, "--format", "csv"])
    h_small, h_large = _peak([*small, "--format", "table"]), _peak([*large, "--format", "table"])
    assert h_large > 3.5 * h_small, (h_small, h_large)
    # the axis (and its echo in the inputs) still grows: ~100 B a value, 2.4 MB more for 24,000 values
    assert s_large < s_small + 200 * 24_000, (s_small, s_large)
    assert s_large < h_large / 4, (s_large, h_large)
