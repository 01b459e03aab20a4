"""The docs site under docs/ is tested: every ``$ kvcalc`` example on every page runs and shows its real output (the
rules of tests/doc_examples.py, as for the README), and the command reference that the mkdocs hook writes at build
time (docs/hooks/generated.py) is exactly what ``kvcalc CMD --help`` prints, for every command the CLI registers."""

from __future__ import annotations

import importlib.util
import re

import pytest
from conftest import REPO, run_cli
from doc_examples import check_example, examples

DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
EXAMPLES = [(p.relative_to(DOCS).as_posix(), *e) for p in PAGES for e in examples(p.read_text(encoding="utf-8"))]


def _hook():
    spec = importlib.util.spec_from_file_location("generated", DOCS / "hooks" / "generated.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pages_have_examples():
    assert len(PAGES) >= 15 and len(EXAMPLES) >= 20, (len(PAGES), len(EXAMPLES))


@pytest.mark.parametrize("page,line,command,shown", EXAMPLES, ids=[f"{p}:{n}" for p, n, _, _ in EXAMPLES])
def test_docs_example(monkeypatch, page, line, command, shown):
    check_example(monkeypatch, f"docs/{page} line {line}", command, shown)


def test_every_page_is_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text()
    listed = set(re.findall(r"^\s*- [^:\n]+: (\S+\.md)", nav, re.MULTILINE))  # a commented entry is not listed
    assert {p.relative_to(DOCS).as_posix() for p in PAGES} <= listed


def test_the_reference_page_is_every_help(monkeypatch):
    hook = _hook()
    page = hook.expand((DOCS / "reference.md").read_text())
    commands = hook.commands()
    names = {c[0] for c in commands if c}
    from kvcalc.cli.app import COMMANDS

    assert names == set(COMMANDS)  # every command, those added later too
    monkeypatch.setenv("COLUMNS", hook.WIDTH)
    monkeypatch.setenv("NO_COLOR", "1")
    blocks = re.findall(r"^## (kvcalc[a-z0-9 _-]*)\n\n````text\n(.*?)\n````$", page, re.DOTALL | re.MULTILINE)
    assert [b[0] for b in blocks] == [" ".join(["kvcalc", *c]) for c in commands]
    for title, text in blocks:
        r = run_cli(*title.split()[1:], "--help")  # in-process, not the hook's subprocess: two roads, one text
        assert r.code == 0, (title, r.err)
        assert text == r.out.rstrip(), title


def test_the_presets_page_lists_every_preset_with_its_source():
    import tomllib

    page = _hook().expand((DOCS / "presets.md").read_text())
    for path in sorted((REPO / "presets").glob("*/*.toml")):
        source = " ".join(tomllib.loads(path.read_text())["source"].split()).replace("|", "\\|")
        assert f"| `{path.stem}` |" in page and source in page, path
