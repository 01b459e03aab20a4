"""The README is tested: every example block that starts with ``$ kvcalc`` runs, and what it shows is the real output.

A block may hold several ``$ kvcalc ...`` commands, each followed by its output. The shown output is either verbatim
(every line, trailing spaces aside) or an excerpt, marked by a line ``...``: then every other shown line is a line of
the real output, in order. Commands run from the repository root at COLUMNS=120 with NO_COLOR; a command naming
a file under ../shared (the shared folder next to the repository) is skipped, with the reason, when it is absent.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from conftest import REPO, run_cli

README = REPO / "README.md"
WIDTH = "120"
_BLOCK = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


def examples(text: str) -> list[tuple[int, str, list[str]]]:
    """(README line, command, shown output lines) for every ``$ kvcalc`` command in a block starting with one."""
    out = []
    for m in _BLOCK.finditer(text):
        body = m.group(1)
        if not body.startswith("$ kvcalc"):
            continue
        line_no = text.count("\n", 0, m.start(1)) + 1
        for i, line in enumerate(body.splitlines()):
            if line.startswith("$ "):
                out.append((line_no + i, line[2:], []))
            else:
                out[-1][2].append(line)
    return out


def shown_matches(shown: list[str], real: list[str]) -> str | None:
    """None when ``shown`` is ``real`` verbatim, or an in-order excerpt of it marked by a ``...`` line; else why not."""
    shown = [s.rstrip() for s in shown]
    real = [r.rstrip() for r in real]
    if "..." not in shown:
        return None if shown == real else "differs (mark an excerpt with a '...' line)"
    at = 0
    for s in shown:
        if s == "...":
            continue
        try:
            at = real.index(s, at) + 1
        except ValueError:
            return f"shown line not in the output (in order): {s!r}"
    return None


EXAMPLES = examples(README.read_text()) if README.is_file() else []


def test_the_readme_has_examples():
    assert len(EXAMPLES) >= 5, "expected the README's example blocks (```\\n$ kvcalc ...)"


def test_excerpt_rules():
    real = ["a", "b  ", "c", "d"]
    assert shown_matches(["a", "b", "c", "d"], real) is None
    assert shown_matches(["a", "c"], real) is not None  # not marked as an excerpt
    assert shown_matches(["...", "b", "...", "d"], real) is None
    assert shown_matches(["d", "...", "a"], real) is not None  # out of order


@pytest.mark.parametrize("line,command,shown", EXAMPLES, ids=[f"README:{n}" for n, _, _ in EXAMPLES])
def test_readme_example(monkeypatch, line, command, shown):
    args = shlex.split(command)
    assert args[0] == "kvcalc"
    shared = [a for a in args if a.startswith("../shared/")]
    for a in shared:
        if not (REPO / a).exists():
            pytest.skip(f"README line {line} needs the shared folder next to the repository: {a} is absent")
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", WIDTH)
    monkeypatch.setenv("NO_COLOR", "1")
    r = run_cli(*args[1:])
    assert r.code == 0, (line, r.err)
    problem = shown_matches(shown, r.out.splitlines())
    assert problem is None, f"README line {line}: `{command}` {problem}\n--- real output ---\n{r.out}"
