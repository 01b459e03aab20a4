"""Result objects: raw base-unit numbers only. One Result feeds every output format (see render.py).

A Result has a main table (its rows are the JSON ``results``, the CSV rows and what ``--check`` tests),
optional extra tables (breakdowns, assumptions), derivation lines for ``--explain`` and notes.
Column ``kind`` tells the renderer the unit: bytes, bytes_exact, s, count, int, percent, usd, flops,
flops_per_s, bytes_per_s, tokens_per_s, float, round (a whole number after rounding), text, bool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Column:
    """One displayed column: the row key, a title, and the unit kind used to format it."""

    key: str
    title: str
    kind: str = "float"
    unbounded: bool = False
    """+infinity is a meaningful value here (an unlimited cache) and shows as 'inf'; elsewhere it shows 'n/a'"""


@dataclass(frozen=True)
class Table:
    """A named table of rows (dicts of raw numbers/strings) and the columns shown for it."""

    name: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Result:
    """What a command computed: inputs echoed in base units, a main table, extras, derivations, notes."""

    command: str
    inputs: dict[str, Any]
    main: Table
    extra: tuple[Table, ...] = ()
    explain: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def rows(self) -> tuple[dict[str, Any], ...]:
        """The main rows (JSON ``results``)."""
        return self.main.rows
