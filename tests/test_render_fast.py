"""Fast rendering of big results (issue 13 follow-up): CSV and JSON text equal to the cell-by-cell code they
replaced, and --explain output unchanged now that derivations are built only when asked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from hypothesis import given
from hypothesis import strategies as st

from kvcalc.out import bulk, render
from kvcalc.out.results import Column, Result, Table

GOLDEN = Path(__file__).parent / "golden" / "explain"


# ---------------------------------------------------------------- the old code, kept in the bench as the reference


def _bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_render", Path(__file__).parents[1] / "bench" / "bench_render.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_OLD = _bench()
old_to_json, old_to_csv = _OLD.old_to_json, _OLD.old_to_csv


# ---------------------------------------------------------------- random results, both paths

FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(
    [0.0, -0.0, 1.0, 2.0**53, 2.0**53 - 1, -(2.0**53), 1e300, 0.1, float("nan"), float("inf"), -float("inf")]))
SCALARS = st.one_of(FLOATS, st.integers(), st.integers(-2**70, 2**70), st.booleans(), st.none(),
                    st.text(max_size=8), st.sampled_from(['a,b', 'q"uote', "new\nline", "", "%s", "\x00kvcalc-long-0"]),
                    FLOATS.map(np.float64), st.integers(-2**40, 2**40).map(np.int64), st.booleans().map(np.bool_))
CELLS = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.tuples(SCALARS), st.dictionaries(st.text(max_size=3),
                                                                                              SCALARS, max_size=2))
KEYS = ["a", "b", "c%s", 'd"', "e"]


def result_of(rows, extra_rows=(), inputs=None) -> Result:
    main = Table("main", "t", tuple(Column(k, k) for k in KEYS), tuple(rows))
    extra = (Table("more", "m", (), tuple(extra_rows)),)
    return Result("test", inputs or {"n": len(rows)}, main, extra, ("line one", "  line two"), ("a note",))


def same_text(res: Result) -> None:
    assert render.to_csv(res) == old_to_csv(res)
    assert render.to_json(res) == old_to_json(res)
    assert render.to_json(res, [{"check": "x>1", "passed": True}], True) == old_to_json(
        res, [{"check": "x>1", "passed": True}], True)
    assert render.envelope(res) == json.loads(old_to_json(res))


def column_rows(draw_cells, n: int, ragged: bool):
    """``n`` rows over KEYS, each column drawn from one strategy (so types repeat down a column, as in sweeps)."""
    rows = [{} for _ in range(n)]
    for k, cells in zip(KEYS, draw_cells):
        for i, r in enumerate(rows):
            if not ragged or (i * 7 + len(k)) % 5:
                r[k] = cells[i % len(cells)]
    return rows


@given(st.lists(st.dictionaries(st.sampled_from(KEYS), CELLS, max_size=5), max_size=8))
def test_small_random_rows_render_as_before(rows):
    same_text(result_of(rows, rows))


@given(st.lists(st.lists(SCALARS, min_size=1, max_size=4), min_size=5, max_size=5), st.booleans(),
       st.sampled_from([70, 2100]))
def test_long_random_columns_render_as_before(cells, ragged, n):
    """Over 64 rows (to_json's column path) and over 2,048 (numpy's float path), with NaN/inf/None/numpy cells."""
    rows = column_rows(cells, n, ragged)
    same_text(result_of(rows, rows[:100], {"axis": [c for c in cells[0]] * 20}))


def test_a_big_float_column_with_every_case():
    """4,096 rows: whole floats (to ints), fractions, NaN/inf/None (null), 2^53 and beyond (stay floats)."""
    special = [1.0, -0.0, 0.5, float("nan"), float("inf"), None, 2.0**53, 2.0**53 - 1, -3.0, 1e-310, 1.5e300]
    rows = [{"a": "m", "b": i, "c%s": special[i % len(special)], 'd"': i % 3 == 0, "e": i / 7} for i in range(4096)]
    res = result_of(rows)
    same_text(res)
    lines = render.to_csv(res).splitlines()
    assert lines[1] == "m,0,1,true,0" and lines[4] == "m,3,,true,0.42857142857142855"  # 1.0 -> 1; NaN -> empty
    assert lines[6] == "m,5,,false,0.7142857142857143"  # None -> empty; 5 / 7 as Python prints it
    assert lines[7] == "m,6,9007199254740992.0,true,0.8571428571428571"  # 2^53 is not below 2^53: stays a float


def test_marker_in_the_data_falls_back():
    rows = [{"a": render._MARK + "0"} for _ in range(100)]
    res = Result("test", {"axis": list(range(100))}, Table("main", "t", (), tuple(rows)))
    assert render.to_json(res) == old_to_json(res)


def test_columns_hoisted():
    """Plain int/str columns are passed through untouched (no per-cell work)."""
    col = list(range(5000))
    assert bulk.csv_column(col, render._jsonable) is col
    assert bulk.json_column(["a", "é"], render._jsonable) == ['"a"', '"\\u00e9"']


# ---------------------------------------------------------------- --explain unchanged for every command

EXPLAINED = {
    "kv": ["kv", "llama-3-70b", "deepseek-v4-flash", "qwen3-next-80b-a3b", "-c", "4k,128k,1m"],
    "capacity": ["capacity", "-m", "llama-3-70b", "-m", "deepseek-v4-flash", "-c", "128k", "--gpus", "8"],
    "blocks": ["blocks", "-m", "deepseek-v4-flash", "-m", "llama-3-70b", "-b", "64,256"],
    "transfer": ["transfer", "-m", "deepseek-v4-flash", "-c", "128k"],
    "cost": ["cost"],
    "compare": ["compare"],
}


@pytest.fixture(autouse=True)
def fixed_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")
    monkeypatch.setenv("NO_COLOR", "1")


def explained(args: list[str]) -> str:
    """The command's --explain output in table, markdown and JSON, one after the other."""
    parts = []
    for fmt in ("table", "markdown", "json"):
        r = run_cli(*args, "--format", fmt, "--explain")
        assert r.code == 0, r.err
        parts.append(r.out)
    return "\n=====\n".join(parts)


@pytest.mark.parametrize("name", sorted(EXPLAINED))
def test_explain_output_unchanged(name):
    """Golden files written before derivations became lazy (KVCALC_UPDATE_GOLDEN=1 rewrites them)."""
    text, path = explained(EXPLAINED[name]), GOLDEN / f"{name}.txt"
    if os.environ.get("KVCALC_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()
    assert "explain" in json.loads(text.split("\n=====\n")[2])


def test_trace_explain_unchanged(tmp_path):
    from test_cli_trace import FOUR, write

    path = write(tmp_path / "four.jsonl", FOUR)
    text = explained(["trace", path, "-b", "4", "--capacity", "2.7MB", "-m", "llama-3-70b"]).replace(path, "FILE")
    golden = GOLDEN / "trace.txt"
    if os.environ.get("KVCALC_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


# ---------------------------------------------------------------- derivations only when asked


def test_kv_derivations_built_only_when_asked():
    from kvcalc.model import catalog
    from kvcalc.model.kv import kv_result
    from kvcalc.out.results import LazyLines

    r = kv_result([("llama-3-70b", catalog.load_model("llama-3-70b"))], [4096, 8192])
    assert isinstance(r.explain, LazyLines) and repr(r.explain) == "LazyLines(<not built>)"
    render.to_csv(r), render.to_json(r), render.to_markdown(r), render.to_table(r)
    assert repr(r.explain) == "LazyLines(<not built>)"  # rendering without explain never built them
    assert "explain" in json.loads(render.to_json(r, explain=True))
    lines = r.explain.lines
    assert len(lines) == len(r.explain) > 2 and list(r.explain) == list(lines) and r.explain[0] == lines[0]
    assert r.explain == lines and ("x",) + r.explain == ("x", *lines) and r.explain + ("y",) == (*lines, "y")
    assert hash(r.explain) == hash(lines)


# ---------------------------------------------------------------- tables: column-wise cells, one line template

NUMBERS = st.one_of(FLOATS, st.integers(-2**70, 2**70), st.sampled_from([10**400, -10**400]), st.none(),
                    st.booleans(), FLOATS.map(np.float64), st.integers(-2**40, 2**40).map(np.int64))
KINDS = sorted(render._FORMATS) + ["bool", "text", "auto", "fit"]


def _cell_or_error(f):
    try:
        return f()
    except Exception as e:  # a value no formatter takes fails the same way in both paths
        return type(e)


@given(st.sampled_from(KINDS), st.booleans(), st.lists(NUMBERS, max_size=12),
       st.sampled_from([{}, {"kind": "bytes"}, {"weights_fit": False}]))
def test_table_cells_column_wise_equal_cell_by_cell(kind, unbounded, values, extra):
    """format_column (one formatter per column, one call per value when all are finite numbers) gives the cells
    format_value gave one by one (None '-', NaN/inf 'n/a' or 'inf', 10^400 refused alike)."""
    col = Column("v", "v", kind, unbounded)
    rows = [{"v": v, **extra} for v in values]
    old = _cell_or_error(lambda: [render.format_value(col, r).translate(render._ONE_LINE) for r in rows])
    assert _cell_or_error(lambda: render.format_column(col, rows)) == old


@given(st.lists(st.lists(st.text(alphabet="ab {}%│|\u00e9", max_size=6), min_size=3, max_size=3), max_size=6),
       st.lists(st.booleans(), min_size=3, max_size=3))
def test_one_line_rows_by_template_equal_padding_each_cell(rows, numeric):
    """Rows that fit their widths are laid out by one format template; braces and bars in cells stay text."""
    from kvcalc.out import text

    grid = text.Grid("", ["h1", "h2", "h3"], numeric, rows)
    widths = grid.widths(200)
    bar = text.BOX_UTF8["body"][0]
    body = [line for line, style in grid.lines(widths, text.BOX_UTF8) if style == "body"]
    assert body == [f"{bar} " + f" {bar} ".join(c.rjust(w) if num else c.ljust(w)
                                                   for c, w, num in zip(r, widths, numeric)) + f" {bar}"
                    for r in rows]
