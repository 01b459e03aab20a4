"""Result objects: raw base-unit numbers only. One Result feeds every output format (see render.py).

A Result has a main table (its rows are the JSON ``results``, the CSV rows and what ``--check`` tests),
optional extra tables (breakdowns, assumptions), derivation lines for ``--explain`` and notes.
Column ``kind`` tells the renderer the unit: bytes, bytes_exact, s, count, int, percent, usd, flops,
flops_per_s, bytes_per_s, tokens_per_s, float, round (a whole number after rounding), text, bool.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable


class LazyLines(Sequence):
    """Derivation lines built on first use (``--explain`` is rare; building them for 10,000 rows costs ~0.2 s).
    Behaves as the tuple of lines it stands for: indexing, len, iteration, ==, + with tuples."""

    __slots__ = ("_build", "_lines")

    def __init__(self, build: Callable[[], Iterable[str]]):
        self._build, self._lines = build, None

    @property
    def lines(self) -> tuple[str, ...]:
        """The lines as a tuple (built once)."""
        if self._lines is None:
            self._lines, self._build = tuple(self._build()), None
        return self._lines

    def __getitem__(self, i):
        return self.lines[i]

    def __len__(self) -> int:
        return len(self.lines)

    def __iter__(self):
        return iter(self.lines)

    def __eq__(self, other) -> bool:
        return self.lines == (other.lines if isinstance(other, LazyLines) else other)

    def __hash__(self) -> int:
        return hash(self.lines)

    def __add__(self, other) -> tuple[str, ...]:
        return self.lines + tuple(other)

    def __radd__(self, other) -> tuple[str, ...]:
        return tuple(other) + self.lines

    def __repr__(self) -> str:
        return repr(self.lines) if self._lines is not None else "LazyLines(<not built>)"


@dataclass(frozen=True)
class Column:
    """One displayed column: the row key, a title, and the unit kind used to format it."""

    key: str
    title: str
    kind: str = "float"
    unbounded: bool = False
    """+infinity is a meaningful value here (an unlimited cache) and shows as 'inf'; elsewhere it shows 'n/a'"""
    labels: tuple[tuple[str, str], ...] = ()
    """text columns: (value, label) pairs, the label shown to people in tables and Markdown (JSON/CSV keep the
    value), e.g. ("lru", "A lru (no prefix reuse)")"""


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
    explain: tuple[str, ...] | LazyLines = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def rows(self) -> tuple[dict[str, Any], ...]:
        """The main rows (JSON ``results``)."""
        return self.main.rows
