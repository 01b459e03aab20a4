"""docs/serving-model.md is tested as the README is (tests/test_readme.py's rules): every ``$ kvcalc`` block
runs at COLUMNS=120 and shows its real output."""

from __future__ import annotations

import shlex

import pytest
from conftest import REPO, run_cli
from test_readme import WIDTH, examples, shown_matches

DOC = REPO / "docs" / "serving-model.md"
EXAMPLES = examples(DOC.read_text()) if DOC.is_file() else []


def test_the_page_has_bench_examples():
    assert len(EXAMPLES) >= 3 and all(c.startswith("kvcalc bench") for _, c, _ in EXAMPLES)


@pytest.mark.parametrize("line,command,shown", EXAMPLES, ids=[f"serving-model:{n}" for n, _, _ in EXAMPLES])
def test_serving_model_example(monkeypatch, line, command, shown):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", WIDTH)
    monkeypatch.setenv("NO_COLOR", "1")
    r = run_cli(*shlex.split(command)[1:])
    assert r.code == 0, (line, r.err)
    problem = shown_matches(shown, r.out.splitlines())
    assert problem is None, f"docs/serving-model.md line {line}: `{command}` {problem}\n--- real ---\n{r.out}"
