"""The machinery that tests the examples in the README and the docs pages: every block that starts with ``$ kvcalc``.

A block may hold several ``$ kvcalc ...`` commands, each followed by its output; a command may pipe kvcalc's output
through a shell (``| cut ...``), run by /bin/sh on kvcalc's captured output (skipped where there is no POSIX shell).
The shown output is either verbatim (every line, trailing spaces aside) or an excerpt, marked by a line ``...`` (or
``... words ...``): then every other shown line is a line of the real output, in order. Commands run in-process from
the repository root at COLUMNS=120 with NO_COLOR; a command naming a file under ../shared (the shared folder next to
the repository), bare or as an option's value, is skipped, with the reason, when it is absent.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest
from conftest import REPO, run_cli

WIDTH = "120"
_BLOCK = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


def examples(text: str) -> list[tuple[int, str, list[str]]]:
    """(line, command, shown output lines) for every ``$ kvcalc`` command in a block starting with one."""
    out = []
    for m in _BLOCK.finditer(text):
        body = m.group(1)
        if not body.startswith("$ kvcalc"):
            continue
        line_no = text.count("\n", 0, m.start(1)) + 1
        continued = False
        for i, line in enumerate(body.splitlines()):
            if continued:  # a command continued with a trailing backslash
                out[-1] = (out[-1][0], out[-1][1][:-1].rstrip() + " " + line.strip(), [])
            elif line.startswith("$ "):
                out.append((line_no + i, line[2:], []))
            else:
                out[-1][2].append(line)
            continued = (continued or line.startswith("$ ")) and line.endswith("\\")
    return out


def _elided(line: str) -> bool:
    """A line that stands for omitted output: ``...``, or ``... (the table) ...``."""
    return line == "..." or (len(line) > 6 and line.startswith("... ") and line.endswith(" ..."))


def shown_matches(shown: list[str], real: list[str]) -> str | None:
    """None when ``shown`` is ``real`` verbatim, or an in-order excerpt of it marked by a ``...`` line; else why not."""
    shown = [s.rstrip() for s in shown]
    real = [r.rstrip() for r in real]
    if not any(map(_elided, shown)):
        return None if shown == real else "differs (mark an excerpt with a '...' line)"
    at = 0
    for s in shown:
        if _elided(s):
            continue
        try:
            at = real.index(s, at) + 1
        except ValueError:
            return f"shown line not in the output (in order): {s!r}"
    return None


def shared_paths(args: list[str]) -> list[str]:
    """The paths under ../shared that a command names, bare or as an option's value (``--set file=../shared/x``,
    ``--trace=../shared/x``): the guard must see every form, or a clone without the folder fails instead of skipping."""
    return [a[a.index("../shared/"):] for a in args if "../shared/" in a]


def check_example(monkeypatch, where: str, command: str, shown: list[str]) -> None:
    """Run one example (``where`` names it, e.g. ``README:42``) and assert that its output is what it shows."""
    command, pipe, rest = command.partition(" | ")  # `kvcalc ... | cut -d, -f1-3`: the shell does the rest
    if pipe and os.name != "posix":
        pytest.skip(f"{where} pipes kvcalc's output through a POSIX shell: {rest}")
    args = shlex.split(command)
    assert args[0] == "kvcalc", f"{where}: an example starts with `$ kvcalc`"
    for a in shared_paths(args):
        if not (REPO / a).exists():
            pytest.skip(f"{where} needs the shared folder next to the repository: {a} is absent")
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", WIDTH)
    monkeypatch.setenv("NO_COLOR", "1")
    r = run_cli(*args[1:])
    assert r.code == 0, (where, r.err)
    out = r.out
    if pipe:
        out = subprocess.run(rest, shell=True, input=out, capture_output=True, text=True, check=True).stdout
    problem = shown_matches(shown, out.splitlines())
    assert problem is None, f"{where}: `{command}` {problem}\n--- real output ---\n{r.out}"
