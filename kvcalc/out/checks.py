"""``--check 'FIELD OP NUMBER'``: parsed (never eval'd) and evaluated against every main result row."""

from __future__ import annotations

import difflib
import math
import operator
import re
from dataclasses import dataclass

from kvcalc.out.errors import InputError

OPS = {"<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
       "<": operator.lt, ">": operator.gt}
_CHECK_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|==|!=|<|>)\s*"
                       r"([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|true|false)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Check:
    """One parsed check: field, operator, threshold."""

    text: str
    field: str
    op: str
    number: float


def parse_check(text: str) -> Check:
    """Parse 'FIELD OP NUMBER' (OP one of < <= > >= == !=; NUMBER may be true/false, = 1/0) or raise InputError."""
    m = _CHECK_RE.match(text)
    if not m:
        raise InputError(f"--check {text!r}: expected 'FIELD OP NUMBER' with OP one of < <= > >= == !=, "
                         "e.g. 'max_requests >= 100' or 'kv_fits == true'")
    word = m.group(3).lower()
    number = 1.0 if word == "true" else 0.0 if word == "false" else float(word)
    if not math.isfinite(number):
        raise InputError(f"--check {text!r}: {m.group(3)} is not a finite number")
    return Check(text.strip(), m.group(1), m.group(2), number)


def _label(row: dict) -> str:
    keys = ("model", "strategy", "link", "payload", "context_tokens", "block_tokens", "capacity_tokens", "file")
    return ", ".join(f"{row[k]}" for k in keys if k in row and row[k] is not None) or "row"


def evaluate(checks: list[Check], rows) -> list[dict]:
    """Evaluate every check on every row -> records {check, row, value, passed}; unknown field -> InputError."""
    out = []
    for c in checks:
        _known(c, rows)
        out += _records(c, rows)
    return out


def _known(c: Check, rows) -> None:
    """InputError when no row has ``c``'s field (close matches named)."""
    if rows and not any(c.field in r for r in rows):
        fields = sorted({k for r in rows for k, v in r.items() if isinstance(v, (int, float))})  # bools too
        close = difflib.get_close_matches(c.field, fields, n=3)
        hint = (f"did you mean {', '.join(close)}?" if close else
                f"fields: {', '.join(fields)}" if fields else "these results have no numeric field")
        raise InputError(f"--check {c.text!r}: no field {c.field!r} in the results; {hint}")


def _records(c: Check, rows) -> list[dict]:
    out = []
    for r in rows:
        v = r.get(c.field)
        if v is None:
            passed = False
        elif not isinstance(v, (int, float)):
            raise InputError(f"--check {c.text!r}: field {c.field!r} is not numeric")
        else:  # a boolean field compares as 1 (true) or 0 (false)
            passed = (not math.isnan(v)) and OPS[c.op](float(v), c.number)
        out.append({"check": c.text, "row": _label(r), "value": v, "passed": bool(passed)})
    return out


class Checker:
    """Checks evaluated chunk by chunk over a streamed table (``add`` each chunk of rows): :meth:`outcomes` are the
    records :func:`evaluate` gives over all the rows, in its order (check by check). Unknown fields are looked for
    in the first chunk, before any output (a sweep's rows share their keys). ``keep_passed`` False keeps only the
    failures (CSV and Markdown print no outcomes, so memory stays bounded by what fails)."""

    def __init__(self, checks: list[Check], keep_passed: bool = True):
        self.checks, self.keep_passed = list(checks), keep_passed
        self._out: list[list[dict]] = [[] for _ in self.checks]
        self._first = True

    def add(self, rows) -> None:
        """Evaluate every check on ``rows`` (the next chunk); InputError as :func:`evaluate` on the first."""
        for c, out in zip(self.checks, self._out):
            if self._first:
                _known(c, rows)
            recs = _records(c, rows)
            out += recs if self.keep_passed else [r for r in recs if not r["passed"]]
        self._first = self._first and not rows

    def outcomes(self) -> list[dict]:
        """The records so far, check by check."""
        return [r for out in self._out for r in out]
