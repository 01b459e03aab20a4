"""Render a Result as a rich table, JSON, CSV or Markdown: the only place numbers are formatted for output.

JSON envelope: {"kvcalc": VERSION, "schema": 1, "command", "inputs", "results", "tables", "checks", "notes"};
numbers raw in base units (bytes, seconds, FLOP, USD); NaN and infinity become null.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from kvcalc.out import units
from kvcalc.out.results import Column, Result, Table

FORMATS = ("table", "json", "csv", "markdown")
JSON_SCHEMA = 1


def format_value(col: Column, row: dict) -> str:
    """One cell as text, by the column's unit kind."""
    v = row.get(col.key)
    if col.kind == "auto":  # the row says its unit (tables that mix units, e.g. deltas)
        col = Column(col.key, col.title, row.get("kind", "float"))
    if col.kind == "fit":
        return units.fmt_count(v) if row.get("weights_fit", True) else "weights don't fit"
    if v is None:
        return "-"
    if col.kind == "fit" and v is None:
        return "-"
    if col.kind == "text":
        return str(v)
    if col.kind == "bool":
        return "yes" if v else "no"
    if isinstance(v, float) and math.isnan(v):
        return "-"
    fmt = {
        "bytes": units.fmt_bytes, "bytes_exact": units.fmt_bytes_exact, "s": units.fmt_seconds,
        "count": units.fmt_count, "int": units.fmt_count, "percent": units.fmt_percent, "usd": units.fmt_usd,
        "flops": units.fmt_flops, "flops_per_s": lambda x: units.fmt_rate(x, "FLOP/s"),
        "bytes_per_s": lambda x: units.fmt_rate(x, "B/s"), "tokens_per_s": lambda x: units.fmt_rate(x, "tok/s"),
        "tokens": lambda x: f"{units.fmt_count(x)} tok", "ratio": lambda x: f"{x:.3g}x",
        "float": lambda x: f"{x:.4g}", "round": lambda x: units.fmt_count(round(x)),
    }[col.kind]
    return fmt(v)


def _jsonable(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return None
        if v.is_integer() and abs(v) < 2**53:
            return int(v)
        return v
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "item"):  # numpy scalar
        return _jsonable(v.item())
    return v


def envelope(result: Result, checks: list[dict] = (), explain: bool = False) -> dict:
    """The JSON envelope as a dict (``checks``: the --check outcomes; derivations under "explain" only when asked)."""
    from kvcalc.out.version import __version__
    return _jsonable({
        "kvcalc": __version__, "schema": JSON_SCHEMA, "command": result.command, "inputs": result.inputs,
        "results": list(result.main.rows), "tables": {t.name: list(t.rows) for t in result.extra},
        "checks": list(checks), "notes": list(result.notes),
    } | ({"explain": list(result.explain)} if explain else {}))


def to_json(result: Result, checks: list[dict] = (), explain: bool = False) -> str:
    """JSON text of the envelope (derivations included only with explain)."""
    return json.dumps(envelope(result, checks, explain), indent=2)


def _scalar_keys(rows) -> list[str]:
    keys: list[str] = []
    for r in rows:
        for k, v in r.items():
            if k not in keys and not isinstance(v, (list, dict, tuple)):
                keys.append(k)
    return keys


def to_csv(result: Result) -> str:
    """CSV of the main rows: one header row, raw numbers, booleans as true/false, empty for null."""
    buf = io.StringIO()
    keys = _scalar_keys(result.main.rows)
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(keys)
    for r in result.main.rows:
        out = []
        for k in keys:
            v = _jsonable(r.get(k))
            out.append("" if v is None else ("true" if v is True else "false" if v is False else v))
        w.writerow(out)
    return buf.getvalue()


def _md_table(t: Table) -> list[str]:
    lines = [f"### {t.title}", "", "| " + " | ".join(c.title for c in t.columns) + " |",
             "|" + "|".join("---" for _ in t.columns) + "|"]
    for r in t.rows:
        lines.append("| " + " | ".join(format_value(c, r) for c in t.columns) + " |")
    return lines + [""]


def to_markdown(result: Result, explain: bool = False) -> str:
    """Markdown: every table with formatted values, then notes (and derivations with explain)."""
    lines = []
    for t in (result.main, *result.extra):
        lines += _md_table(t)
    lines += [f"- {n}" for n in result.notes]
    if explain and result.explain:
        lines += ["", "```", *result.explain, "```"]
    return "\n".join(lines).rstrip() + "\n"


def make_console():
    """A rich Console on stdout: terminal width on a terminal, else $COLUMNS or 160 (CI logs are wide).
    Colour is off when NO_COLOR is set or stdout is not a terminal (rich's own rules)."""
    import os
    import sys

    from rich.console import Console

    width = None
    if not sys.stdout.isatty():
        width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else 160
    return Console(width=width)


def print_tables(result: Result, console, explain: bool = False, extra: bool = True) -> None:
    """Print the result as rich tables on ``console`` (stdout), notes dimmed, derivations with explain."""
    from rich.table import Table as RichTable

    for t in (result.main, *(result.extra if extra else ())):
        rt = RichTable(title=t.title, title_justify="left")
        cells = [[format_value(c, r) for c in t.columns] for r in t.rows]
        widest = [max((len(row[i]) for row in cells), default=0) for i in range(len(t.columns))]
        heads = [max(len(w) for w in c.title.split()) for c in t.columns]
        # keep numbers on one line when the whole table fits; else let rich wrap them at spaces
        fits = sum(max(w, h) + 3 for w, h in zip(widest, heads)) + 8 <= console.width
        for i, c in enumerate(t.columns):
            text = c.kind == "text"
            rt.add_column(c.title, justify="left" if text else "right", overflow="fold",
                          min_width=widest[i] if fits and not text else None)
        for row in cells:
            rt.add_row(*row)
        console.print(rt)
    for n in result.notes:
        console.print(f"note: {n}", style="dim", highlight=False, markup=False)
    if explain:
        for line in result.explain:
            console.print(line, highlight=False, markup=False)
