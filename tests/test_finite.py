"""Issue 21 item 4: no NaN or infinity in any output. Every command's output goes through render.write, which
refuses a non-finite figure as an internal error (exit 3 naming the table, row and field) in every format alike,
so the fuzz and hostile runs catch one instead of a user reading $inf or null as an answer."""

from __future__ import annotations

import io
import math

import pytest
from conftest import run_cli

from kvcalc.out import render
from kvcalc.out.finite import NonFiniteOutput, check_finite
from kvcalc.out.results import Column, Result, Table

FORMATS = ("table", "json", "csv", "markdown")


def result(rows, inputs=None, unbounded=False):
    cols = (Column("name", "name", "text"), Column("x", "x", "float", unbounded=unbounded))
    return Result("test", inputs or {}, Table("main", "t", cols, tuple(rows)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_reaching_output_is_an_internal_error(fmt, bad):
    res = result([{"name": "a", "x": 1.0}, {"name": "b", "x": bad}])
    with pytest.raises(NonFiniteOutput, match=r"table 'main' row 1: field 'x' is"):
        render.write(res, fmt, io.StringIO())


def test_numpy_and_extra_tables_are_checked_too():
    import numpy as np

    with pytest.raises(NonFiniteOutput, match="field 'x'"):
        check_finite(result([{"name": "a", "x": np.float32("nan")}]))
    extra = Table("extra", "e", (Column("y", "y"),), ({"y": 2.0}, {"y": float("inf")}))
    res = Result("test", {}, result([{"x": 1.0}]).main, (extra,))
    with pytest.raises(NonFiniteOutput, match="table 'extra' row 1: field 'y'"):
        check_finite(res)


def test_sums_that_overflow_are_not_mistaken_for_infinity():
    check_finite(result([{"a": 1.5e308, "b": 1.5e308}]))  # fsum overflows, each value is finite


def test_allowed_infinities():
    # +inf where the user asked for it: an unlimited cache column, the echoed --capacity inf
    check_finite(result([{"name": "a", "x": math.inf}], inputs={"capacities": [math.inf, 3e6]}, unbounded=True))
    with pytest.raises(NonFiniteOutput):  # -inf is never a capacity
        check_finite(result([{"name": "a", "x": -math.inf}], unbounded=True))
    with pytest.raises(NonFiniteOutput, match=r"inputs.mfu\[0\] is nan"):
        check_finite(result([], inputs={"mfu": [math.nan]}))


def test_cli_exit_3_one_line(monkeypatch):
    import kvcalc.model.kv

    real = kvcalc.model.kv.kv_result

    def poisoned(*a, **k):
        r = real(*a, **k)
        rows = tuple({**row, "kv_bytes_per_token": math.nan} for row in r.main.rows)
        return Result(r.command, r.inputs, Table(r.main.name, r.main.title, r.main.columns, rows), r.extra,
                      r.explain, r.notes)

    monkeypatch.setattr(kvcalc.model.kv, "kv_result", poisoned)
    for fmt in FORMATS:
        r = run_cli("kv", "llama-3-8b", "--format", fmt)
        assert r.code == 3 and r.out == "", (fmt, r.code, r.out[:200])
        assert r.err.startswith("kvcalc: internal error: NonFiniteOutput: kv: table 'kv' row 0: field "
                                "'kv_bytes_per_token' is nan") and len(r.err.splitlines()) == 1, r.err


def test_trace_unlimited_cache_still_shows(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [0]}\n'
                 '{"timestamp": 1, "input_length": 16, "output_length": 1, "hash_ids": [0]}\n')
    for fmt in FORMATS:
        r = run_cli("trace", str(f), "--block-tokens", "16", "--capacity", "inf", "--format", fmt)
        assert r.code == 0, r.err


# ---------------------------------------------------------------- item 5: library warnings never raw

def _warn_then(monkeypatch, *warnings_, fail=False):
    import warnings

    import kvcalc.model.kv
    from kvcalc.out.errors import InputError

    real = kvcalc.model.kv.kv_result

    def noisy(*a, **k):
        for category, message, module in warnings_:
            warnings.warn_explicit(message, category, f"/venv/lib/python3.12/site-packages/{module}/core.py", 7)
        if fail:
            raise InputError("--context: bad")
        return real(*a, **k)

    monkeypatch.setattr(kvcalc.model.kv, "kv_result", noisy)


def test_numpy_floating_point_warnings_are_silenced(monkeypatch):
    _warn_then(monkeypatch, (RuntimeWarning, "overflow encountered in multiply", "numpy"),
               (RuntimeWarning, "invalid value encountered in divide", "numpy"))
    r = run_cli("kv", "llama-3-8b")
    assert r.code == 0 and r.err == ""


def test_other_library_warnings_become_one_note_line(monkeypatch):
    _warn_then(monkeypatch, (UserWarning, "Data has no positive values, and therefore cannot be\nlog-scaled.",
                             "matplotlib"), (UserWarning, "Data has no positive values, and therefore cannot be\n"
                                                          "log-scaled.", "matplotlib"))
    r = run_cli("kv", "llama-3-8b")
    assert r.code == 0
    assert r.err == "kvcalc: note: matplotlib: Data has no positive values, and therefore cannot be\n"


def test_an_error_line_stands_alone(monkeypatch):
    _warn_then(monkeypatch, (UserWarning, "something", "matplotlib"), fail=True)
    r = run_cli("kv", "llama-3-8b")
    assert r.code == 2 and r.err == "kvcalc: error: --context: bad\n"
