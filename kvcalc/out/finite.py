"""No non-finite number in any output (issue 21 item 4), enforced once for every format.

A figure that cannot be computed is the core's to handle: refused with exit 2 (InputError naming the input) or
given as None ("not applicable", shown as - in tables, empty in CSV, null in JSON) with a note saying why. A NaN
or an infinity that still reaches a renderer is a bug in kvcalc: :func:`check_finite` raises
:class:`NonFiniteOutput` (exit 3, one line naming the table, row and field), so the fuzz and hostile runs catch it
instead of a user reading ``$inf`` or ``null`` as an answer. The one exception is +inf in a column marked
``unbounded`` (an unlimited cache the user asked for with ``--capacity inf``) and in the echoed inputs.
"""

from __future__ import annotations

import math
from typing import Any


class NonFiniteOutput(RuntimeError):
    """A NaN or infinity reached output: an internal error (exit 3), never bad input."""


def _bad(v: Any) -> bool:
    """True for a float (numpy's too) that is NaN or infinite."""
    if isinstance(v, float):
        return not math.isfinite(v)
    if hasattr(v, "dtype") and getattr(v, "shape", None) == () and v.dtype.kind in "fc":  # a numpy scalar
        return not math.isfinite(float(v.real))
    return False


def _check_inputs(v: Any, where: str) -> None:
    if isinstance(v, dict):
        for k, x in v.items():
            _check_inputs(x, f"{where}.{k}")
    elif isinstance(v, (list, tuple)):
        if _column_fine(v):  # a sweep's axis values: one fsum
            return
        for i, x in enumerate(v):
            _check_inputs(x, f"{where}[{i}]")
    elif _bad(v) and not v > 0:  # +inf: an unlimited value the user gave (--capacity inf)
        raise NonFiniteOutput(f"{where} is {v}")


_PLAIN = frozenset((str, int, bool, type(None)))  # cell types that cannot be non-finite


def _column_fine(values: list) -> bool:
    """True when a column surely holds no NaN or infinity: its fsum is finite (C speed), or it holds only cells
    that cannot be non-finite (text, ints, None). False: look at each cell."""
    try:
        return math.isfinite(math.fsum(values))
    except (TypeError, OverflowError, ValueError):  # text or None in it, a finite overflow, inf + -inf
        return all(type(v) in _PLAIN for v in values)


def check_finite(result) -> None:
    """Raise NonFiniteOutput naming the first NaN or infinity in ``result``'s tables or inputs (see the module).
    Rows with the same keys are checked column by column (one fsum per column: ~5 ms for 10,000 rows); only a
    column that fails that quick test, or ragged rows, are looked at cell by cell."""
    for table in (result.main, *result.extra):
        check_rows(result.command, table, table.rows)
    check_inputs(result)


def check_rows(command: str, table, rows, first: int = 0) -> None:
    """:func:`check_finite` for ``rows`` of ``table`` (its columns say which are unbounded), the first of them
    row ``first`` of the table: a streamed table is checked chunk by chunk, each row named by its place."""
    from kvcalc.out import bulk

    unbounded = {c.key for c in table.columns if c.unbounded}
    keys = bulk.uniform_keys(rows)
    suspects = [k for k, col in zip(keys, bulk.columns_of(rows, keys)) if not _column_fine(col)] \
        if keys is not None else None
    if suspects == []:
        return
    for i, row in enumerate(rows, first):
        for k in (suspects if suspects is not None else row):
            v = row[k]
            if type(v) not in _PLAIN and _bad(v) and not (k in unbounded and v > 0):
                raise NonFiniteOutput(f"{command}: table {table.name!r} row {i}: field {k!r} is {v} "
                                      "(a figure that cannot be computed must be refused or None with a note)")


def check_inputs(result) -> None:
    """:func:`check_finite` for the echoed inputs alone (a streamed result's rows are checked as they come)."""
    _check_inputs(result.inputs, f"{result.command}: inputs")
