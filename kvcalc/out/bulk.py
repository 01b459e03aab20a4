"""Column-wise conversion of result rows for CSV and JSON: the same text as converting cell by cell, in time
proportional to the rows with a small constant (issue 13's 1,000,000-row sweeps).

A column's Python types are looked at once; a column of plain ints/strings passes as it is, a column of floats
(and None) is converted with numpy when it is long, and only unusual values (numpy scalars, containers, mixed
types) go through the per-cell path. Text only; never prints.
"""

from __future__ import annotations

import math
import sys
from json.encoder import encode_basestring_ascii as _json_str
from typing import Any, Callable

NUMPY_MIN_ROWS = 2048  # below this a float column is converted cell by cell (numpy's import costs more)
_EXACT = 2**53  # floats with a whole value below this are written as integers (as _jsonable does)
_CSV_BOOL = {True: "true", False: "false", None: ""}
_JSON_BOOL = {True: "true", False: "false", None: "null"}


def jsonable_scalar(v: Any, jsonable: Callable[[Any], Any]) -> Any:
    """One cell as _jsonable would return it (plain ints/strings untouched)."""
    t = type(v)
    return v if t is str or t is int else jsonable(v)


def _float_column(col: list, null: Any, as_text: bool) -> list:
    """A column of floats and None: whole values below 2^53 as ints, NaN/inf/None as ``null``; JSON text when
    ``as_text``. Uses numpy for long columns (already imported by a sweep) and a plain loop for short ones."""
    if len(col) < NUMPY_MIN_ROWS and "numpy" not in sys.modules:
        out = []
        for v in col:
            if v is None or math.isnan(v) or math.isinf(v):
                out.append(null)
            elif v.is_integer() and abs(v) < _EXACT:
                out.append(str(int(v)) if as_text else int(v))
            else:
                out.append(float.__repr__(v) if as_text else v)
        return out
    import numpy as np

    arr = np.array(col, dtype=np.float64)  # None -> NaN
    finite = np.isfinite(arr)
    whole = finite & (np.trunc(arr) == arr) & (np.abs(arr) < _EXACT)
    frac = finite & ~whole
    out = np.full(len(col), null, dtype=object)
    if whole.any():
        ints = arr[whole].astype(np.int64).tolist()
        out[whole] = list(map(int.__repr__, ints)) if as_text else ints
    if frac.any():
        vals = arr[frac].tolist()  # Python floats, equal to the cells: same repr
        out[frac] = [float.__repr__(v) for v in vals] if as_text else vals
    return out.tolist()


def csv_column(col: list, jsonable: Callable[[Any], Any]) -> list:
    """Cells of one CSV column as csv.writer should get them: empty for null, true/false for booleans."""
    types = set(map(type, col))
    if types <= {int, str}:
        return col
    if float in types and types <= {float, type(None)}:
        return _float_column(col, "", False)
    if types <= {bool, type(None)}:
        return [_CSV_BOOL[v] for v in col]
    out = []
    for v in col:
        v = jsonable(v)
        out.append("" if v is None else ("true" if v is True else "false" if v is False else v))
    return out


def json_column(col: list, jsonable: Callable[[Any], Any]) -> list[str] | None:
    """Cells of one column as JSON text (what json.dumps writes for each), or None when a cell is a container
    (then the caller encodes the rows the ordinary way)."""
    import json

    types = set(map(type, col))
    if types <= {int}:
        return list(map(int.__repr__, col))
    if types <= {str}:
        return list(map(_json_str, col))
    if float in types and types <= {float, type(None)}:
        return _float_column(col, "null", True)
    if types <= {bool, type(None)}:
        return [_JSON_BOOL[v] for v in col]
    out = []
    for v in col:
        v = jsonable(v)
        if isinstance(v, (list, dict)):
            return None
        out.append(json.dumps(v))
    return out


def uniform_keys(rows) -> tuple | None:
    """The rows' keys when every row has the same string keys in the same order (and at least one), else None."""
    if not rows:
        return None
    keys = tuple(rows[0])
    if not keys or not all(type(k) is str for k in keys):
        return None
    return keys if len(set(map(tuple, rows))) == 1 else None


def columns_of(rows, keys) -> list[list]:
    """The rows' values per key [one list per key], each row holding every key."""
    from operator import itemgetter

    return [list(map(itemgetter(k), rows)) for k in keys]


def json_rows(rows, indent: int, jsonable: Callable[[Any], Any]) -> str | None:
    """The rows as json.dumps(..., indent=2) writes a list of them whose ``[`` sits at ``indent`` spaces, or None
    when the rows are not flat dicts with the same keys (the caller then encodes them the ordinary way)."""
    keys = uniform_keys(rows)
    if keys is None:
        return None
    cols = []
    for c in columns_of(rows, keys):
        text = json_column(c, jsonable)
        if text is None:
            return None
        cols.append(text)
    row_pad, key_pad = " " * (indent + 2), " " * (indent + 4)
    from itertools import chain, repeat

    parts = []  # per row: "{", then each key and its value, then "}"; the pieces joined once
    for i, (k, col) in enumerate(zip(keys, cols)):
        lead = f"{row_pad}{{\n" if i == 0 else ",\n"
        parts += [repeat(f"{lead}{key_pad}{_json_str(k)}: "), col]
    parts.append(repeat(f"\n{row_pad}}},\n"))
    body = "".join(chain.from_iterable(zip(*parts)))
    return "[\n" + body[:-2] + "\n" + " " * indent + "]"


def json_list(values, indent: int, jsonable: Callable[[Any], Any]) -> str | None:
    """A list of scalars as json.dumps(..., indent=2) writes it with its ``[`` at ``indent`` spaces, or None when
    an item is a container."""
    text = json_column(list(values), jsonable)
    if text is None:
        return None
    pad = " " * (indent + 2)
    return "[\n" + pad + (",\n" + pad).join(text) + "\n" + " " * indent + "]"
