"""Render a Result as a rich table, JSON, CSV or Markdown: the only place numbers are formatted for output.

JSON envelope: {"kvcalc": VERSION, "schema": 1, "command", "inputs", "results", "tables", "checks", "notes"};
numbers raw in base units (bytes, seconds, FLOP, USD); NaN and infinity become null. Output goes through
:func:`write`, which first checks that no NaN or infinity reached it (kvcalc.out.finite: a bug, exit 3); the
formatters below still render one as null / n/a, a last line of defence for callers of the library.
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


_FORMATS = {
    "bytes": units.fmt_bytes, "bytes_exact": units.fmt_bytes_exact, "s": units.fmt_seconds,
    "count": units.fmt_count, "int": units.fmt_count, "percent": units.fmt_percent, "usd": units.fmt_usd,
    "flops": units.fmt_flops, "flops_per_s": lambda x: units.fmt_rate(x, "FLOP/s"),
    "bytes_per_s": lambda x: units.fmt_rate(x, "B/s"), "tokens_per_s": lambda x: units.fmt_rate(x, "tok/s"),
    "tokens": lambda x: f"{units.fmt_count(x)} tok", "ratio": lambda x: f"{x:.3g}x",
    "float": lambda x: f"{x:.4g}", "round": lambda x: units.fmt_count(round(x)),
    "bool": lambda v: "yes" if v else "no",
}


def format_value(col: Column, row: dict) -> str:
    """One cell as text, by the column's unit kind."""
    v = row.get(col.key)
    if isinstance(v, float) and not math.isfinite(v):  # the last line of defence: never inf/nan as a number
        return "inf" if v > 0 and col.unbounded else "n/a"
    kind = row.get("kind", "float") if col.kind == "auto" else col.kind  # "auto": the row says its unit
    if kind == "fit":
        return units.fmt_count(v) if row.get("weights_fit", True) else "weights don't fit"
    if v is None:
        return "-"
    if kind == "text":
        return dict(col.labels).get(v, str(v)) if col.labels else str(v)
    return _FORMATS[kind](v)


def format_column(col: Column, rows) -> list[str]:
    """Every row's cell of ``col`` as one line of text, as :func:`format_value` gives them; a column of finite
    numbers only (no None; a NaN or infinity makes the sum so) takes its formatter once and calls it per value
    (a 10,000-row table formats 80,000 cells)."""
    if col.kind in _FORMATS:
        values = [r.get(col.key) for r in rows]
        try:
            if None not in values and math.isfinite(math.fsum(values)):
                return list(map(_FORMATS[col.kind], values))
        except (TypeError, OverflowError, ValueError):  # not plain numbers, or too large for a float
            pass
    return [format_value(col, r).translate(_ONE_LINE) for r in rows]


def _jsonable(v: Any) -> Any:
    t = type(v)
    if t is str or t is int or t is bool or v is None:  # the common cells first: nothing to do
        return v
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
    return _jsonable(_envelope(result, checks, explain, list(result.main.rows), {t.name: list(t.rows)
                                                                                  for t in result.extra}))


def _envelope(result: Result, checks, explain: bool, results, tables: dict) -> dict:
    from kvcalc.out.version import __version__
    return {
        "kvcalc": __version__, "schema": JSON_SCHEMA, "command": result.command, "inputs": result.inputs,
        "results": results, "tables": tables, "checks": list(checks), "notes": list(result.notes),
    } | ({"explain": list(result.explain)} if explain else {})


_MARK = "\x00kvcalc-long-"  # stands for a long list in the envelope until its text is spliced in
LONG = 64  # lists at least this long are encoded column by column (kvcalc.out.bulk)


def _mark_long(v: Any, level: int, texts: list[str]) -> Any:
    """``v`` with each long list of flat rows or scalars replaced by a marker string; its JSON text (as
    json.dumps(indent=2) writes it at nesting ``level``) appended to ``texts``."""
    from kvcalc.out import bulk

    if isinstance(v, dict):
        return {k: _mark_long(x, level + 1, texts) for k, x in v.items()}
    if not isinstance(v, (list, tuple)):
        return v
    text = None
    if len(v) >= LONG:
        text = (bulk.json_rows(v, 2 * level, _jsonable) if isinstance(v[0], dict)
                else bulk.json_list(v, 2 * level, _jsonable))
    if text is None:
        return [_mark_long(x, level + 1, texts) for x in v]
    texts.append(text)
    return f"{_MARK}{len(texts) - 1}"


def to_json(result: Result, checks: list[dict] = (), explain: bool = False) -> str:
    """JSON text of the envelope (derivations included only with explain): json.dumps(envelope, indent=2), with
    each long list of flat rows or scalars encoded column by column (kvcalc.out.bulk) and spliced in at its place."""
    doc = _envelope(result, checks, explain, list(result.main.rows), {t.name: list(t.rows) for t in result.extra})
    return _json_text(doc)


def _json_text(v: Any, level: int = 0) -> str:
    """``v`` as json.dumps(_jsonable(v), indent=2) writes it nested ``level`` deep (its first line unindented),
    long lists encoded column by column and spliced in (when a marker also occurs in the data: the ordinary way)."""
    texts: list[str] = []
    pad = "\n" + "  " * level
    out = json.dumps(_jsonable(_mark_long(v, level, texts)), indent=2).replace("\n", pad)
    for i, text in enumerate(texts):
        mark = json.dumps(f"{_MARK}{i}")
        if out.count(mark) != 1:  # the marker also occurs in the data: encode everything the ordinary way
            return json.dumps(_jsonable(v), indent=2).replace("\n", pad)
        out = out.replace(mark, text)
    return out


def _scalar_keys(rows) -> list[str]:
    keys: list[str] = []
    done = set()  # rows' key tuples that can add no key any more (every key already listed)
    for r in rows:
        sig = tuple(r)
        if sig in done:
            continue
        for k, v in r.items():
            if k not in keys and not isinstance(v, (list, dict, tuple)):
                keys.append(k)
        if all(k in keys for k in sig):
            done.add(sig)
    return keys


def to_csv(result: Result) -> str:
    """CSV of the main rows: one header row, raw numbers, booleans as true/false, empty for null."""
    buf = io.StringIO()
    rows = result.main.rows
    keys = _scalar_keys(rows)
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(keys)
    _csv_rows(w, rows, keys)
    return buf.getvalue()


def _csv_rows(w, rows, keys: list[str]) -> None:
    """The CSV records of ``rows`` under the header ``keys``, written with csv.writer ``w``."""
    from kvcalc.out import bulk

    if not keys:
        w.writerows([] for _ in rows)
        return
    same = bulk.uniform_keys(rows) is not None  # then every row holds every key
    cols = bulk.columns_of(rows, keys) if same else [[r.get(k) for r in rows] for k in keys]
    w.writerows(zip(*(bulk.csv_column(c, _jsonable) for c in cols)))


def _md_table(t: Table) -> list[str]:
    return _md_head(t) + [_md_row(t, r) for r in t.rows] + [""]


def _md_head(t: Table) -> list[str]:
    return [f"### {t.title}", "", "| " + " | ".join(c.title for c in t.columns) + " |",
            "|" + "|".join("---" for _ in t.columns) + "|"]


def _md_row(t: Table, r: dict) -> str:
    return "| " + " | ".join(format_value(c, r).translate(_ONE_LINE).replace("|", "\\|") for c in t.columns) + " |"


def to_markdown(result: Result, explain: bool = False) -> str:
    """Markdown: every table with formatted values, then notes (and derivations with explain)."""
    return "\n".join(_md_table(result.main) + _md_tail(result, explain)).rstrip() + "\n"


def _md_tail(result: Result, explain: bool) -> list[str]:
    """The Markdown lines after the main table: the extra tables, notes and derivations (with explain)."""
    lines = []
    for t in result.extra:
        lines += _md_table(t)
    lines += [f"- {n}" for n in result.notes]
    if explain and result.explain:
        lines += ["", "```", *result.explain, "```"]
    return lines


_ONE_LINE = str.maketrans("\n\r\t", "   ")  # a cell is one line of text (a source may hold newlines)
RICH_MAX_LINES = 400  # beyond this many lines a terminal gets plain text too: styling them costs more than it pays
STYLES = {"title": "italic", "head": "bold", "note": "dim"}


def output_width(stream) -> tuple[int, bool]:
    """(width [characters], is a terminal) for tables on ``stream``: $COLUMNS when a positive integer, else the
    terminal's width, else 160 (CI logs are wide); at least text.MIN_WIDTH (COLUMNS=0 counts as unset)."""
    import os

    from kvcalc.out.text import MIN_WIDTH

    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    env = os.environ.get("COLUMNS", "").strip()
    width = int(env) if env.isdigit() and len(env) <= 6 else 0  # 5,000 digits would overflow int()
    if not width and tty:
        try:
            width = os.get_terminal_size(stream.fileno()).columns
        except (OSError, AttributeError, ValueError):
            width = 0
    return max(width or 160, MIN_WIDTH), tty


def table_lines(result: Result, width: int, explain: bool = False, box: dict | None = None) -> list[tuple[str, str]]:
    """Every table, then notes (and derivations with explain), laid out for ``width`` as (line, style) pairs."""
    from kvcalc.out import text

    lines: list[tuple[str, str]] = []
    for t in (result.main, *result.extra):
        cells = list(zip(*(format_column(c, t.rows) for c in t.columns))) if t.rows else []
        grid = text.Grid(t.title, [c.title for c in t.columns], [c.kind != "text" for c in t.columns], cells)
        lines += grid.render(width, box or text.BOX_UTF8)
    return lines + note_lines(result, width, explain)


def note_lines(result: Result, width: int, explain: bool = False) -> list[tuple[str, str]]:
    """The notes (and derivations with explain) laid out for ``width``, as (line, style) pairs."""
    from kvcalc.out import text

    lines: list[tuple[str, str]] = []
    for n in result.notes:
        lines += [(x, "note") for x in text.wrap(f"note: {n}", width)]
    if explain:
        for line in result.explain:  # continuation lines indented under their derivation
            lines += [(x, "") for x in text.wrap(line, width, " " * (len(line) - len(line.lstrip(" ")) + 4))]
    return lines


def to_table(result: Result, width: int = 160, explain: bool = False) -> str:
    """The tables as plain text laid out for ``width`` characters, as ``--format table`` prints them when piped."""
    from kvcalc.out.text import MIN_WIDTH

    return "\n".join(line for line, _ in table_lines(result, max(width, MIN_WIDTH), explain)) + "\n"


def write(result: Result, fmt: str, stream, checks: list[dict] = (), explain: bool = False,
          block: str | None = None) -> None:
    """Write ``result`` on ``stream`` in ``fmt`` (table, json, csv, markdown): the one way a command's output
    leaves kvcalc, so every format refuses a NaN or infinity alike (check_finite raises NonFiniteOutput).
    ``block``: text that replaces the tables in the table format (``bench``'s copy of vLLM's result block), the
    notes and derivations still following it."""
    from kvcalc.out.finite import check_finite

    check_finite(result)
    if fmt == "json":
        stream.write(to_json(result, checks, explain) + "\n")
    elif fmt == "csv":
        stream.write(to_csv(result))
    elif fmt == "markdown":
        stream.write(to_markdown(result, explain))
    elif block is not None:
        lines = note_lines(result, output_width(stream)[0], explain)
        stream.write(block + "".join(line + "\n" for line, _ in lines))
    else:
        write_tables(result, stream, explain)


STREAMED = ("json", "csv", "markdown")  # the formats write_chunks writes as the rows come (a table lays out all)


def write_chunks(result: Result, chunks, fmt: str, stream, checker=None, explain: bool = False) -> None:
    """:func:`write` for a result whose main rows come as ``chunks`` (an iterable of row lists; ``result.main.rows``
    is not read), holding one chunk at a time: for json, csv and markdown the same bytes as :func:`write` of the
    whole table. Each chunk is checked finite (row numbers counted over the table) and handed to ``checker``
    (kvcalc.out.checks.Checker: the --check outcomes JSON lists after the rows) before it is written; the first
    chunk before anything is written, so a bad --check field or a NaN there leaves no partial output."""
    from itertools import chain

    from kvcalc.out.finite import check_inputs, check_rows

    if fmt not in STREAMED:
        raise ValueError(f"write_chunks: {fmt!r} is not one of {', '.join(STREAMED)}")
    check_inputs(result)
    for t in result.extra:
        check_rows(result.command, t, t.rows)
    done = 0

    def ready(rows):
        nonlocal done
        check_rows(result.command, result.main, rows, done)
        if checker is not None:
            checker.add(rows)
        done += len(rows)
        return rows

    chunks = (list(c) for c in chunks)
    first = next((c for c in chunks if c), [])
    rest = (ready(c) for c in chunks if c)
    ready(first)
    if fmt == "csv":
        _csv_chunks(stream, first, rest)
    elif fmt == "markdown":
        t = result.main
        stream.write("\n".join(_md_head(t)) + "\n")
        for rows in chain([first], rest):
            stream.write("".join(_md_row(t, r) + "\n" for r in rows))
        tail = "\n".join(_md_tail(result, explain)).rstrip()
        stream.write(("\n" + tail + "\n") if tail else "")
    else:
        _json_chunks(result, explain, stream, first, rest, checker)


def _csv_chunks(stream, first: list, rest) -> None:
    from itertools import chain

    keys = _scalar_keys(first)
    w = csv.writer(stream, lineterminator="\n")
    w.writerow(keys)
    for rows in chain([first], rest):
        extra = [k for k in _scalar_keys(rows) if k not in keys]
        if extra:  # the header is written: a later column cannot join it (a sweep's rows share their keys)
            raise RuntimeError(f"streamed CSV: field {extra[0]!r} first appears after the header")
        _csv_rows(w, rows, keys)


def _json_chunks(result: Result, explain: bool, stream, first: list, rest, checker) -> None:
    import secrets
    from itertools import chain

    marks = [f"\x00kvcalc-stream-{secrets.token_hex(8)}-{i}" for i in range(2)]
    doc = _envelope(result, (), explain, marks[0], {t.name: list(t.rows) for t in result.extra})
    doc["checks"] = marks[1]
    head, _, rest_text = (_json_text(doc) + "\n").partition(json.dumps(marks[0]))
    middle, _, tail = rest_text.partition(json.dumps(marks[1]))
    stream.write(head)
    sep = "[\n"
    for rows in chain([first], rest):
        text = _json_text(rows, 1)  # "[\n" + the rows + "\n  ]", as they sit in the envelope
        stream.write(sep + text[2:-4])
        sep = ",\n"
    stream.write(("[]" if sep == "[\n" else "\n  ]") + middle)
    stream.write(_json_text(checker.outcomes() if checker is not None else [], 1) + tail)


def write_tables(result: Result, stream, explain: bool = False) -> None:
    """Print the result's tables on ``stream``: plain text when piped or long, styled by rich on a terminal
    (no colour with NO_COLOR). Box characters fall back to ASCII when the stream cannot encode them."""
    from kvcalc.out import text

    width, tty = output_width(stream)
    encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("-", "")
    box = text.BOX_UTF8 if encoding.startswith("utf") else text.BOX_ASCII
    lines = table_lines(result, width, explain, box)
    if not tty or len(lines) > RICH_MAX_LINES:
        stream.write("\n".join(line for line, _ in lines) + "\n")
        return
    from rich.console import Console
    from rich.text import Text

    styled = Text()
    for line, style in lines:
        styled.append(line + "\n", style=STYLES.get(style, ""))
    Console(file=stream, width=width, highlight=False).print(styled, soft_wrap=True, end="")
