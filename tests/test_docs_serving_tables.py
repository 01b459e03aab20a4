"""docs/serving-model.md's calibration, held-out and per-op tables are what the committed code and presets give: each
section between its markers equals what bench/plot_serving_parity.py writes there (a change to the model or a
preset that moves a figure fails here until the script is rerun; the calibration table once went a session
stale when the script stopped at an absent optional figure)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("plot_serving_parity", ROOT / "bench" / "plot_serving_parity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def sections():
    from kvcalc.serve import calibration as c

    mod = _script()
    rows = c.read_rows(mod.PERF / "calibration.csv")
    held = c.read_rows(mod.PERF / "validation.csv")
    return mod.sections(rows, [c.predict(r) for r in rows], held, [c.predict(r) for r in held])


@pytest.mark.parametrize("marker", ["parity", "validation", "ops"])
def test_the_page_holds_the_tables_the_code_gives(sections, marker):
    text = (ROOT / "docs" / "serving-model.md").read_text()
    start, end = f"<!-- {marker} -->", f"<!-- /{marker} -->"
    page = text[text.index(start) + len(start):text.index(end)].strip("\n")
    assert page == sections[marker], f"docs/serving-model.md <!-- {marker} --> is stale: run bench/plot_serving_parity.py"


def test_an_absent_optional_figure_is_named_not_formatted():
    # triton_attention_efficiency is None in h100-sxm (its attention_efficiency applies): the table says so
    table = _script().calibration_table()
    row = next(line for line in table.splitlines() if "`triton_attention_efficiency`" in line)
    assert "absent" in row
