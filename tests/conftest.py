"""Shared test helpers: run the CLI in-process and capture stdout, stderr and the exit code."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

# No deadlines: a property's first example may load pydantic (~0.3 s) and CI machines are loaded;
# speed is measured in bench/, never in tests.
settings.register_profile("kvcalc", deadline=None)
settings.load_profile("kvcalc")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
# Real traces for tests that hold on any trace: the Mooncake slice shipped in examples/ always, the whole trace
# when the shared folder is beside the repository (skipped, with the reason, when it is not).
SLICE = REPO / "examples" / "traces" / "mooncake-last500.jsonl"
MOONCAKE_FULL = SHARED / "traces" / "mooncake_synthetic_trace.jsonl"
REAL_TRACES = [pytest.param(SLICE, id="slice"),
               pytest.param(MOONCAKE_FULL, id="mooncake", marks=pytest.mark.skipif(
                   not MOONCAKE_FULL.is_file(), reason=f"shared Mooncake trace not present: {MOONCAKE_FULL}"))]


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def run_cli(*args: str, env: dict | None = None) -> Run:
    """Run ``kvcalc ARGS`` in-process; returns exit code, stdout, stderr."""
    from kvcalc.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return Run(code, out.getvalue(), err.getvalue())


def validate_model(data: dict):
    """A model preset from a dict, validated as a user's file is (pydantic, strict)."""
    from kvcalc.model.catalog import validate

    return validate("models", data, "test")


@pytest.fixture
def cli():
    return run_cli


def assert_bad_input(r: Run, *words: str):
    """Exit 2, exactly one line on stderr naming the given words, no traceback."""
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert "Traceback" not in r.err
    for w in words:
        assert w in r.err, (w, r.err)
