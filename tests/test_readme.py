"""The README is tested: every example block that starts with ``$ kvcalc`` runs, and what it shows is the real output
(the rules are in tests/doc_examples.py, shared with the docs pages' test, tests/test_docs.py)."""

from __future__ import annotations

import re

import pytest
from conftest import REPO
from doc_examples import check_example, examples, shared_paths, shown_matches

README = REPO / "README.md"
EXAMPLES = examples(README.read_text()) if README.is_file() else []


def test_the_readme_has_examples():
    assert len(EXAMPLES) >= 5, "expected the README's example blocks (```\\n$ kvcalc ...)"


def test_excerpt_rules():
    real = ["a", "b  ", "c", "d"]
    assert shown_matches(["a", "b", "c", "d"], real) is None
    assert shown_matches(["a", "c"], real) is not None  # not marked as an excerpt
    assert shown_matches(["...", "b", "...", "d"], real) is None
    assert shown_matches(["d", "...", "a"], real) is not None  # out of order
    assert shown_matches(["... (the table) ...", "c"], real) is None
    text = "```\n$ kvcalc kv \\\n    --context 4k | cut -c1-3\nout\n```\n"
    assert examples(text) == [(2, "kvcalc kv --context 4k | cut -c1-3", ["out"])]


def test_shared_paths_in_every_form():
    args = ["kvcalc", "trace", "../shared/t.jsonl", "--set", "file=../shared/u.jsonl", "--trace=../shared/v", "x=y"]
    assert shared_paths(args) == ["../shared/t.jsonl", "../shared/u.jsonl", "../shared/v"]


@pytest.mark.parametrize("line,command,shown", EXAMPLES, ids=[f"README:{n}" for n, _, _ in EXAMPLES])
def test_readme_example(monkeypatch, line, command, shown):
    check_example(monkeypatch, f"README line {line}", command, shown)


def test_the_readme_fits_on_one_page_and_lists_every_command():
    from kvcalc.cli.app import COMMANDS

    text = README.read_text()
    assert len(text.splitlines()) <= 250
    table = [line for line in text.splitlines() if line.startswith("| `kvcalc ")]
    for name in COMMANDS:
        assert any(line.startswith(f"| `kvcalc {name}") for line in table), f"README's command table lacks {name}"


def test_ci_runs_the_readmes_test_command():
    blocks = [b.strip() for b in re.findall(r"^```\n(.*?)^```", README.read_text(), re.DOTALL | re.MULTILINE)]
    command = next(b for b in blocks if "pytest" in b)
    assert command in (REPO / ".ci" / "run").read_text().splitlines(), command
