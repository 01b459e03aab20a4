"""A mkdocs hook (no plugin to install): the parts of the site that the code and the presets can write themselves,
written at build time so that they cannot drift.

A page line ``<!-- kvcalc-help: all -->`` becomes, for ``kvcalc`` and every command and sub-command the CLI
registers (``kvcalc.cli.app.COMMANDS``; a group's sub-commands too), a heading ``## kvcalc CMD`` and a code block
holding ``kvcalc CMD --help`` as printed at COLUMNS=100; ``<!-- kvcalc-help: CMD SUB -->`` gives one command's block.
Each help runs as ``python -m kvcalc`` from the repository root, so it is this checkout's kvcalc that speaks.
``<!-- kvcalc-presets: all -->`` becomes one table per preset kind (name, what it is, its ``source``), read from the
repository's ``presets/`` folder. tests/test_docs.py renders the pages with this module and compares every help
block with ``--help`` and every table with the preset files.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WIDTH = "100"
MARKER = re.compile(r"^<!-- kvcalc-help: ([a-z0-9_ -]+?) -->$", re.MULTILINE)
PRESETS_MARKER = re.compile(r"^<!-- kvcalc-presets: all -->$", re.MULTILINE)
KINDS = ("models", "hardware", "links", "workloads", "scenarios", "calibration")
_LIST = """
import importlib, json, typer
from kvcalc.cli.app import COMMANDS
out = []
for name, (module, attr) in COMMANDS.items():
    obj = getattr(importlib.import_module(module), attr)
    out.append([name])
    if isinstance(obj, typer.Typer):
        out += [[name, sub] for sub in typer.main.get_command(obj).commands]
print(json.dumps(out))
"""


def _python(*args: str) -> str:
    env = {**os.environ, "COLUMNS": WIDTH, "NO_COLOR": "1"}
    r = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"kvcalc help: `python {' '.join(args)}` exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def commands() -> list[list[str]]:
    """Every command the CLI registers, as argument lists: [] (kvcalc itself), ["kv"], ["presets", "list"], ..."""
    return [[], *json.loads(_python("-c", _LIST))]


def help_text(command: list[str]) -> str:
    """``kvcalc COMMAND --help`` at COLUMNS=100, as the CLI prints it."""
    return _python("-m", "kvcalc", *command, "--help")


def block(command: list[str]) -> str:
    """One command's help as a fenced block (four backticks: the help may hold three)."""
    return f"````text\n{help_text(command).rstrip()}\n````\n"


def reference() -> str:
    """Every command: a heading and its help."""
    return "\n".join(f"## {' '.join(['kvcalc', *c])}\n\n{block(c)}" for c in commands())


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def presets_tables() -> str:
    """Every shipped preset, kind by kind: its name, display name and source, as its file says."""
    out = []
    for kind in KINDS:
        rows = ["| name | what | source |", "|---|---|---|"]
        for path in sorted((ROOT / "presets" / kind).glob("*.toml")):
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            rows.append(f"| `{path.stem}` | {_cell(data.get('display_name', ''))} | {_cell(data['source'])} |")
        out.append(f"### {kind}\n\n" + "\n".join(rows) + "\n")
    return "\n".join(out)


def expand(markdown: str) -> str:
    """The page with each marker replaced by the help or the tables it names."""
    markdown = PRESETS_MARKER.sub(lambda m: presets_tables(), markdown)
    return MARKER.sub(lambda m: reference() if m.group(1) == "all" else block(m.group(1).split()), markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:  # the mkdocs hook
    return expand(markdown) if MARKER.search(markdown) or PRESETS_MARKER.search(markdown) else markdown
